"""Kernel records the profiler dropped: launch calls without their kernels make GPU idle time that was never
measured. The model counts them (model.Launches.lost_kernels), the report says so, and the checks that blame the
GPU's idle time on a cause (gpu-idle's "queued work waits", host-sync, launch-overhead, ...) do not judge."""

import gzip
import json
import shutil
import sqlite3

from nsanalyze.analyze import analyze
from nsanalyze.read.files import open_local
from tests.conftest import REAL, sql

TRACE = REAL / "kin54_time53_base1_kineto.json.gz"
EXPORT = REAL / "graphs_eager_nsys.sqlite.xz"


def _notes(model):
    return [n for n in model["timeline"]["notes"] if n.startswith("kernel records missing")]


def test_a_trace_that_lost_half_its_kernels_says_so(tmp_path):
    """The timed ResNet-50's trace with every other kernel event dropped (3,596 of 7,192, as a full CUPTI buffer
    drops them): the note counts the launches without a kernel, the idle time's checks are not judged while the
    kernels' own check still speaks, and the trace as recorded carries no such note."""
    with gzip.open(TRACE) as source:
        trace = json.load(source)
    kernels = [i for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "kernel"]
    dropped = set(kernels[::2])
    path = tmp_path / "half_the_kernels.json"
    path.write_text(json.dumps(dict(trace, traceEvents=[e for i, e in enumerate(trace["traceEvents"])
                                                        if i not in dropped])))
    model = analyze([str(path)])
    (note,) = _notes(model)
    assert f"of the window's {model['timeline']['launches']['launch_calls']:,} kernel launch calls" in note
    unjudged = {n["check"] for n in model["not_judged"] if "kernel_records" in n["missing"]}
    assert {"gpu-idle", "host-sync", "launch-overhead", "event-timing"} <= unjudged
    assert not unjudged & {f["check"] for f in model["findings"]}
    assert "unfused-normalization" in {f["check"] for f in model["findings"]}   # the kernels it has still speak
    whole = analyze([str(TRACE)])
    assert not _notes(whole) and "event-timing" in {f["check"] for f in whole["findings"]}


def test_an_export_without_kernel_rows_says_so(tmp_path):
    """graphs_eager's export (an eager MLP, launch-bound) with its kernel table emptied and its launch calls kept
    (SQL counts them): the GPU's idle time is said to be the profile's loss, and no check blames it on launches."""
    path = tmp_path / "no_kernel_rows.sqlite"
    shutil.copy(open_local(EXPORT)[1], path)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    (launches,), = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                                WHERE s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%'""")
    model = analyze([str(path)])
    assert launches > 2 * 2048 and len(_notes(model)) == 1
    assert not {"gpu-idle", "launch-overhead"} & {f["check"] for f in model["findings"]}
