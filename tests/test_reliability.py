"""Hostile and broken inputs: one clear line and exit 2, or a report that says what is missing; never a
traceback or a hang; nothing injected; nothing half-written. docs/reliability.md lists each case."""

import json
import os
import re
import shutil
import sqlite3
import string
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsanalyze.read.files import open_local
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NSYS

TABLES_USED = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "StringIds",
               "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND",
               "ENUM_CUPTI_SYNC_TYPE", "GPU_METRICS", "TARGET_INFO_GPU_METRICS"]


def run_cli(*args, timeout=180):
    from tests.isolated import run_nsanalyze

    return run_nsanalyze(*args, timeout=timeout)


def assert_handled(result, path=None):
    """Exit 0 with a valid report, or exit 2 with one line naming the file; never a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 2), result.stderr
    if result.returncode == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and (path is None or str(path) in lines[0]), result.stderr
    return result


@pytest.fixture(scope="module")
def infer_local():
    return open_local(DEV_INFER_NSYS)[1]


@pytest.mark.parametrize("table", TABLES_USED)
def test_export_missing_a_table(tmp_path, infer_local, table):
    path = tmp_path / f"no_{table}.sqlite"
    shutil.copy(infer_local, path)
    with sqlite3.connect(path) as con:
        con.execute(f'DROP TABLE IF EXISTS "{table}"')
    result = assert_handled(run_cli("report", path, "-o", "-"), path)
    if table == "StringIds":
        assert result.returncode == 2 and "not an Nsight Systems export" in result.stderr
    if result.returncode == 0:
        model = json.loads(result.stdout)
        if table in ("GPU_METRICS", "TARGET_INFO_GPU_METRICS"):
            assert "gpu_metrics" not in model
            assert {"gpu-util-illusion", "gpu-clock-throttling"} <= {n["check"] for n in model["not_judged"]}
            # low-tensor-activity reads the library kernels' names without GPU metrics, and says so
            tensor = [f for f in model["findings"] if f["check"] == "low-tensor-activity"]
            assert all("not measured" in f["title"] for f in tensor)
            assert tensor or "low-tensor-activity" in {n["check"] for n in model["not_judged"]}


def test_export_with_zero_kernels(tmp_path):
    path = tmp_path / "empty.sqlite"
    shutil.copy(open_local(DEV_SUITE_NSYS)[1], path)
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    result = assert_handled(run_cli("report", path, "-o", "-"))
    assert result.returncode == 0 and json.loads(result.stdout)["kernels"] == []


NSYS_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX", "blockY",
                                   "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
                                   "localMemoryPerThread"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "bytes",
                                   "copyKind", "srcKind", "dstKind"],
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "globalTid", "textId", "domainId"],
    "StringIds": ["id", "value"],
    "TARGET_INFO_GPU": ["id", "name", "smCount", "clockRate", "memoryBandwidth", "computeMajor", "computeMinor"],
}
values = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(0, 2000),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(string.printable, max_size=20),
                   st.binary(max_size=8))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({name: st.lists(st.lists(values, min_size=len(cols), max_size=len(cols)), max_size=6)
                              for name, cols in NSYS_TABLES.items()}))
def test_random_tables_with_nsys_names(tmp_path_factory, tables):
    from nsanalyze.analyze import analyze
    from nsanalyze.errors import InputError
    from nsanalyze.render import render_bytes

    path = tmp_path_factory.mktemp("fuzz") / "random.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE ThreadNames(nameId, priority, globalTid)")
        for name, rows in tables.items():
            con.execute(f'CREATE TABLE "{name}" ({", ".join(NSYS_TABLES[name])})')
            con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(NSYS_TABLES[name]))})', rows)
    try:
        model = analyze([str(path)])
    except InputError as error:
        assert str(path) in str(error)
        return
    for fmt in ("json", "markdown"):
        assert render_bytes(model, fmt)


def hostile_export(tmp_path, name_length=None, text="<img src=x onerror=alert(1)>"):
    path = tmp_path / "hostile.sqlite"
    shutil.copy(open_local(DEV_SUITE_NSYS)[1], path)
    with sqlite3.connect(path) as con:
        short, demangled = con.execute("SELECT shortName, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
        value = ("k" * name_length) if name_length else text
        con.execute("UPDATE StringIds SET value = ? WHERE id IN (?, ?)", (value, short, demangled))
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'launches'", (text + "|**x**|",))
    return path


def test_injection_in_every_format(tmp_path):
    path = hostile_export(tmp_path)
    out = tmp_path / "r"
    assert_handled(run_cli("report", path, "-o", f"{out}.html", "-o", f"{out}.md", "-o", f"{out}.pdf"))
    html, markdown = (tmp_path / "r.html").read_text(), (tmp_path / "r.md").read_text()
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img" not in markdown and "<script" not in html.lower()
    text = subprocess.run(["pdftotext", f"{out}.pdf", "-"], capture_output=True, text=True, check=True).stdout
    assert "<img src=x onerror=alert(1)>" in text                     # shown literally in the PDF


def test_very_long_kernel_name(tmp_path):
    path = hostile_export(tmp_path, name_length=100_000)
    out = tmp_path / "long"
    assert_handled(run_cli("report", path, "-o", f"{out}.html", "-o", f"{out}.md", "-o", f"{out}.json"))
    html = (tmp_path / "long.html").read_text()
    assert "k" * 100_000 in html                  # the full name is kept (tooltip and JSON) ...
    assert re.search(r"[^k]k{20,80}…", html)      # ... and shortened where it is shown
    assert len((tmp_path / "long.md").read_text()) <= 65_536
    assert any(len(k["name"]) == 100_000 for k in json.loads((tmp_path / "long.json").read_text())["kernels"])


def test_ten_thousand_kernels(tmp_path):
    """Every launch of the dev suite given its own name: 10,000+ distinct kernels."""
    path = tmp_path / "many.sqlite"
    shutil.copy(open_local(DEV_SUITE_NSYS)[1], path)
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
        base = con.execute("SELECT MAX(id) FROM StringIds").fetchone()[0] + 1
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT start + ?, end + ?, deviceId, contextId, "
                        "greenContextId, streamId, correlationId, globalPid, demangledName, shortName, mangledName, "
                        "launchType, cacheConfig, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                        "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, "
                        "sharedMemoryExecuted, graphNodeId, sharedMemoryLimitConfig FROM CUPTI_ACTIVITY_KIND_KERNEL "
                        "WHERE rowid <= ?", [(k * 50_000_000, k * 50_000_000, len(rows)) for k in range(1, 50)])
        ids = [r[0] for r in con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL")]
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(base + i, f"kernel_{i}") for i in range(len(ids))])
        con.executemany("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = ?, shortName = ? WHERE rowid = ?",
                        [(base + i, base + i, rowid) for i, rowid in enumerate(ids)])
    assert len(ids) >= 10_000
    out = tmp_path / "many"
    assert_handled(run_cli("report", path, "-o", f"{out}.json", "-o", f"{out}.html", "-o", f"{out}.md"))
    assert len(json.loads((tmp_path / "many.json").read_text())["kernels"]) == len(ids)
    assert "more kernels in the JSON report" in (tmp_path / "many.html").read_text()


def test_interrupted_write_keeps_the_old_report(tmp_path, monkeypatch):
    from nsanalyze import render
    from nsanalyze.render import formats

    target = tmp_path / "report.json"
    target.write_text("old report")
    monkeypatch.setattr(formats.ModuleRenderer, "render", lambda self, document: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        render.write_report({"findings": []}, str(target))
    assert target.read_text() == "old report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]       # no partial file left behind


def test_killed_report_leaves_no_half_file(tmp_path):
    """A real kill while the PDF renders: the target holds the old report or nothing, never a part."""
    target = tmp_path / "report.pdf"
    process = subprocess.Popen([sys.executable, "-m", "nsanalyze", "report", str(DEV_INFER_NSYS), "-o", str(target)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import time

    time.sleep(2.0)
    process.kill()
    process.wait()
    assert not target.exists() or target.read_bytes().startswith(b"%PDF") and b"%%EOF" in target.read_bytes()[-1024:]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


@pytest.mark.skipif(shutil.which("runuser") is None or os.geteuid() != 0, reason="needs root to switch users")
def test_file_without_read_permission(tmp_path):
    path = tmp_path / "secret.ncu-rep"
    path.write_bytes(b"NVR\x00" + b"\x00" * 64)
    path.chmod(0o000)
    tmp_path.chmod(0o755)
    result = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-m", "nsanalyze", "report", str(path)],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "NSANALYZE_CACHE": "/tmp"})
    if "ModuleNotFoundError" in result.stderr or "failed to execute" in result.stderr:
        pytest.skip("the virtual environment is not readable by nobody")
    assert result.returncode == 2 and "permission denied" in result.stderr and "Traceback" not in result.stderr
