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


def test_launch_calls_are_counted_past_the_names_the_report_lists(tmp_path):
    """graphs_eager's export with 60 costlier call names added (one 300 ms call each, on the second host thread,
    inside the window): the launches fall out of the 50 names the report lists, and are still counted whole, as
    SQL counts them; the report's list stays at 50 names."""
    path = tmp_path / "many_call_names.sqlite"
    shutil.copy(open_local(EXPORT)[1], path)
    base = analyze([str(path)])
    window = base["timeline"]["window"]
    with sqlite3.connect(path) as connection:
        (top,), = connection.execute("SELECT MAX(id) FROM StringIds")
        (thread,), = connection.execute("SELECT MAX(globalTid) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        for i in range(60):
            connection.execute("INSERT INTO StringIds VALUES (?, ?)", (top + 1 + i, f"cuCostlyCall{i}"))
            start = window["start_ns"] + 1000 * i
            connection.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, "
                               "correlationId, nameId, returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)",
                               (start, start + 300_000_000, thread, 10**8 + i, top + 1 + i))
    (launches,), = sql(path, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                                 WHERE (s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%')
                                 AND r.start >= {window['start_ns']} AND r.start < {window['end_ns']}""")
    model = analyze([str(path)])
    timeline = model["timeline"]
    assert (timeline["window"]["start_ns"], timeline["window"]["end_ns"]) == (window["start_ns"], window["end_ns"])
    assert len(timeline["api_calls"]) == 50
    assert not any("Launch" in row["name"] for row in timeline["api_calls"])
    assert timeline["launches"]["launch_calls"] == base["timeline"]["launches"]["launch_calls"] == launches
