"""`nsanalyze stats` against nsys stats' own CSV output (fixtures/oracle/), byte for byte."""

from __future__ import annotations

import csv
import json

import pytest

from nsanalyze import stats
from nsanalyze.cli import main
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS, FIXTURES, ORACLE

EXPORTS = {
    "dev_suite_nsys": DEV_SUITE_NSYS,
    "dev_suite_v2_nsys": DEV_SUITE_V2_NSYS,
    "dev_infer_nsys": DEV_INFER_NSYS,
    "nightly1_nsys": FIXTURES / "real" / "nightly1_nsys.sqlite.xz",
    "matmul_graph_nsys": FIXTURES / "real" / "matmul_graph_nsys.sqlite.xz",  # graph-level CUDA graph trace
}
CASES = [(name, report) for name in EXPORTS for report in stats.REPORTS
         if (ORACLE / f"{name}_{report}.csv").exists()]


@pytest.fixture(scope="module")
def exports():
    from nsanalyze.read import read_profile

    opened = {name: read_profile(path) for name, path in EXPORTS.items()}
    yield opened
    for export in opened.values():
        export.close()


def test_every_export_has_its_kernel_and_nvtx_oracle():
    for name in EXPORTS:
        assert (name, "cuda_gpu_kern_sum") in CASES and (name, "nvtx_sum") in CASES
    assert len(CASES) == 23


@pytest.mark.parametrize("name,report", CASES)
def test_csv_equals_nsys_stats(exports, name, report):
    """Every column as nsys prints it: names, order, sort, the medians, the sample standard deviation
    and SQLite's rounding (half away from zero on the exact binary value)."""
    ours = stats.to_csv(report, stats.table(exports[name], report))
    assert ours == (ORACLE / f"{name}_{report}.csv").read_text()


@pytest.mark.parametrize("name", EXPORTS)
def test_kernel_and_nvtx_totals_to_the_nanosecond(exports, name):
    for report in ("cuda_gpu_kern_sum", "nvtx_sum"):
        with open(ORACLE / f"{name}_{report}.csv") as handle:
            oracle = sum(int(row["Total Time (ns)"]) for row in csv.DictReader(handle))
        rows = stats.table(exports[name], report)
        assert sum(r["Total Time (ns)"] for r in rows) == oracle


def test_figures_seen_in_the_oracles(exports):
    kernels = stats.table(exports["dev_infer_nsys"], "cuda_gpu_kern_sum")
    gemm = kernels[0]
    assert gemm["Total Time (ns)"] == 8433626 and gemm["Instances"] == 40
    assert gemm["Avg (ns)"] == 210840.6  # 210840.65 in decimal, 210840.6499.. in binary
    assert gemm["StdDev (ns)"] == 125123.9
    api = {r["Name"]: r for r in stats.table(exports["dev_infer_nsys"], "cuda_api_sum")}
    assert api["cuKernelGetFunction"]["Avg (ns)"] == 73859.3  # 73859.25 exactly: away from zero
    assert "cudaLaunchKernel" in api and not any(n.endswith("_v7000") for n in api)
    calls = {r["Name"] for r in stats.table(exports["matmul_graph_nsys"], "cuda_api_sum")}
    assert "cudaGraphLaunch_v10000" in calls  # nsys strips only a 6-character _vNNNN suffix
    sizes = stats.table(exports["dev_suite_nsys"], "cuda_gpu_mem_size_sum")
    assert sizes[0]["Operation"] == "[CUDA memset]" and sizes[0]["Total (MB)"] == 671.089


def test_graph_level_trace_is_not_a_kernel(exports):
    """matmul_graph's 150 whole-graph executions (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) are GPU work in the
    timeline, but nsys stats counts only the kernel table: 92 kernels, 10928984 ns."""
    rows = stats.table(exports["matmul_graph_nsys"], "cuda_gpu_kern_sum")
    assert not any("graph" in r["Name"].lower() for r in rows)
    assert sum(r["Instances"] for r in rows) == 92
    assert sum(r["Total Time (ns)"] for r in rows) == 10928984


def test_osrt_sum_reads_the_os_runtime_calls(exports):
    rows = stats.table(exports["nightly1_nsys"], "osrt_sum")
    assert rows[0]["Name"] == "poll" and rows[0]["Num Calls"] == 26 and rows[0]["Total Time (ns)"] == 1660845559
    assert sum(r["Num Calls"] for r in rows) == 10190  # every row of OSRT_API
    assert stats.table(exports["dev_suite_nsys"], "osrt_sum") == []  # not traced


def test_steady_window_keeps_the_steady_steps(exports):
    export = exports["nightly1_nsys"]
    window = stats.steady_window(export)
    nvtx = stats.table(export, "nvtx_sum", window)
    assert len(nvtx) == 149 and ":step 0" not in {r["Range"] for r in nvtx}  # the warm-up step left out
    steady = sum(r["Total Time (ns)"] for r in stats.table(export, "cuda_gpu_kern_sum", window))
    capture = sum(r["Total Time (ns)"] for r in stats.table(export, "cuda_gpu_kern_sum"))
    assert 0.9 * capture < steady < capture


def test_cli_csv_files_like_nsys(tmp_path, capsys):
    target = tmp_path / "out.csv"
    main(["stats", str(DEV_SUITE_NSYS), "--report", "cuda_gpu_kern_sum,nvtx_sum", "-o", str(target)])
    for report in ("cuda_gpu_kern_sum", "nvtx_sum"):
        written = tmp_path / f"out_{report}.csv"
        assert written.read_text() == (ORACLE / f"dev_suite_nsys_{report}.csv").read_text()
    main(["stats", str(DEV_SUITE_NSYS), "--report", "cuda_gpu_kern_sum", "--format", "csv"])
    assert capsys.readouterr().out == (ORACLE / "dev_suite_nsys_cuda_gpu_kern_sum.csv").read_text()


def test_cli_json_and_table(tmp_path, capsys):
    target = tmp_path / "s.json"
    main(["stats", str(DEV_SUITE_NSYS), "-o", str(target)])
    data = json.loads(target.read_text())
    assert data["schema"] == "nsanalyze/stats@1"
    assert [r["report"] for r in data["reports"]] == list(stats.REPORTS)
    kernels = data["reports"][1]
    assert kernels["columns"][:2] == ["Time (%)", "Total Time (ns)"]
    assert kernels["rows"][0]["Name"] == "one_block_too_many(float *, int)"
    capsys.readouterr()
    main(["stats", str(DEV_SUITE_NSYS), "--report", "nvtx_sum", "-o", "-"])
    assert json.loads(capsys.readouterr().out)["reports"][0]["rows"][0]["Range"] == ":launches"
    main(["stats", str(DEV_SUITE_NSYS), "--report", "nvtx_sum"])
    out = capsys.readouterr().out
    assert ":launches" in out and "1519706" in out


@pytest.mark.parametrize("args,expected", [
    ([str(DEV_SUITE_NCU)], "stats reads Nsight Systems exports"),
    (["missing.sqlite"], "missing.sqlite: no such file"),
    ([str(DEV_SUITE_NSYS), "-o", "x.txt"], "x.txt: stats files are .csv or .json"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_report_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", str(DEV_SUITE_NSYS), "--report", "cuda_gpu_kern_sum,gpu_sum"])
    assert exit_info.value.code == 2
    assert "gpu_sum" in capsys.readouterr().err


def test_tables_fit_an_80_column_terminal():
    """On 80 columns every table stays inside the terminal, headers wrap between words (`Instances`, not
    `Insta…`), the figures stay whole and long names fold onto the next lines, whole (never `const f…`)."""
    from rich.console import Console

    from nsanalyze.read import read_profile

    export = read_profile(DEV_SUITE_NSYS)
    tables = stats.stats(export, list(stats.REPORTS), None)
    console = Console(width=80, record=True)
    stats.print_tables(tables, "dev_suite_nsys.sqlite", "the whole capture", console)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    headers = "\n".join(line for line in lines if line.startswith("┃"))
    assert "Instances" in headers and "Insta…" not in headers and "Calls" in headers
    assert any("│ 20.7 │ 1927961 │         1 │ 1927961.0 │ one_block_too_many(float *, int)" in line for line in lines)
    assert any(" 200 │     801.8 │ small_step(float *, int)" in line for line in lines)   # nsys stats: 160352 / 200
    assert "…" not in "\n".join(line for line in lines if line.startswith("│"))
    kernels = tables["cuda_gpu_kern_sum"]
    name_cells = " ".join(line.rstrip(" │").rsplit("│", 1)[1].strip() for line in lines
                          if line.startswith("│") and line.count("│") == 6)   # the kernel table's rows
    for row in kernels:   # each name whole, folded at spaces or the column's edge
        assert row["Name"].replace(" ", "") in name_cells.replace(" ", ""), row["Name"]


def test_a_table_of_many_ranges_prints_its_first_rows_and_counts_the_rest(tmp_path):
    """An export whose 1,200 NVTX ranges each have a name of their own: the terminal shows the first TERMINAL_ROWS
    rows and counts the others (rich's layout of 100,000 rows ran past 90 s); the CSV holds every row."""
    import shutil
    import sqlite3

    from rich.console import Console

    from nsanalyze.read import read_profile
    from nsanalyze.read.files import open_local

    _, local = open_local(DEV_SUITE_NSYS)
    path = tmp_path / "ranges.sqlite"
    shutil.copy(local, path)
    with sqlite3.connect(path) as con:   # 1,200 copies of the export's first range, each named apart
        con.execute("CREATE TEMP TABLE n(i)")
        con.executemany("INSERT INTO n VALUES (?)", [(i,) for i in range(1200)])
        columns = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        picked = ", ".join("'range ' || n.i" if c == "text" else f"e.{c}" for c in columns)
        con.execute(f"INSERT INTO NVTX_EVENTS SELECT {picked} FROM n, (SELECT * FROM NVTX_EVENTS WHERE eventType = 59 "
                    "AND text IS NOT NULL LIMIT 1) e")
    tables = stats.stats(read_profile(path), ["nvtx_sum"], None)
    rows = len(tables["nvtx_sum"])
    assert rows > 1200
    console = Console(width=200, record=True)
    stats.print_tables(tables, "ranges.sqlite", "the whole capture", console)
    text = console.export_text()
    assert sum(1 for line in text.splitlines() if line.startswith("│")) == stats.TERMINAL_ROWS
    assert f"{rows - stats.TERMINAL_ROWS:,} more rows left out of the terminal; -o FILE.csv holds all {rows:,}" in text
    assert len(list(csv.reader(stats.to_csv("nvtx_sum", tables["nvtx_sum"]).splitlines()))) == rows + 1
