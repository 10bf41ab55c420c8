"""`batch` and `trend` on a folder of real profiles laid out as nightly runs."""

import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from nsanalyze.batch import batch
from nsanalyze.cli import cli
from nsanalyze.render.format import percent
from nsanalyze.trend import trend
from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, DEV_SUITE_V2_NCU, DEV_SUITE_V2_NSYS, PUBLIC
from tests.isolated import memory_gate

FASTED = "bwcurless__FaSTED__profiles__Shared_Mem_Conflicts_Sync_Vs_Async__"
NIGHTS = {
    "2026-11-01": [DEV_SUITE_NCU, DEV_SUITE_NSYS, PUBLIC / f"{FASTED}Synchronous.ncu-rep.xz"],
    "2026-11-02": [DEV_SUITE_V2_NCU, DEV_SUITE_V2_NSYS, PUBLIC / f"{FASTED}PIpeline_Depth_1.ncu-rep.xz"],
    "2026-11-03": [PUBLIC / f"{FASTED}Pipeline_Depth_2.ncu-rep.xz"],
    "2026-11-04": [PUBLIC / f"{FASTED}Pipeline_Depth_3.ncu-rep.xz"],
    "2026-11-05": [PUBLIC / f"{FASTED}Pipeline_Depth_4.ncu-rep.xz"],
}


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    root = tmp_path_factory.mktemp("nightly")
    for night, files in NIGHTS.items():
        (root / night).mkdir()
        for f in files:
            shutil.copy(f, root / night / f.name)
    return root


def table_rows(db, table, order):
    with sqlite3.connect(db) as con:
        columns = [r[1] for r in con.execute(f"PRAGMA table_info({table})") if r[1] != "analyzed_at"]
        return con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}").fetchall()


def snapshot(db):
    return {"runs": table_rows(db, "runs", "content_hash"),
            "kernels": table_rows(db, "kernels", "content_hash, name, duration_ns"),
            "findings": table_rows(db, "findings", "content_hash, rank"),
            "ranges": table_rows(db, "ranges", "content_hash, name")}


@pytest.fixture(scope="module")
def clean_db(nightly, tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "history.sqlite"
    outcomes = batch([str(nightly)], str(db), jobs=2)
    assert [o.status for o in outcomes].count("stored") == 9
    return db


def test_idempotent(nightly, clean_db):
    before = snapshot(clean_db)
    outcomes = batch([str(nightly)], str(clean_db), jobs=2)
    assert {o.status for o in outcomes} == {"skipped"}
    assert snapshot(clean_db) == before
    assert len(before["runs"]) == 9 and {r[3] for r in before["runs"]} == set(NIGHTS)   # dates from the folders


def test_two_batches_at_once_lose_and_duplicate_nothing(nightly, clean_db, tmp_path):
    db = tmp_path / "shared.sqlite"
    command = [sys.executable, "-m", "nsanalyze", "batch", str(nightly), "--db", str(db), "--jobs", "1"]
    with memory_gate((), exclusive=True):   # two batches side by side (0.8 GB each): nothing else beside them
        first, second = subprocess.Popen(command, stderr=subprocess.PIPE), subprocess.Popen(command, stderr=subprocess.PIPE)
        assert first.wait(300) == 0 and second.wait(300) == 0
    assert snapshot(db) == snapshot(clean_db)


def test_killed_then_rerun_equals_a_clean_run(nightly, clean_db, tmp_path):
    db = tmp_path / "killed.sqlite"
    command = [sys.executable, "-m", "nsanalyze", "batch", str(nightly), "--db", str(db), "--jobs", "1"]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    stored = 0
    while time.time() < deadline and stored < 2:
        time.sleep(0.05)
        try:
            with sqlite3.connect(db, timeout=1) as con:
                stored = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        except sqlite3.Error:
            pass
    process.send_signal(signal.SIGKILL)
    process.wait()
    with sqlite3.connect(db) as con:
        partial = con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert 2 <= partial < 9, "killed mid-way"
    assert subprocess.run(command, stderr=subprocess.DEVNULL).returncode == 0
    assert snapshot(db) == snapshot(clean_db)


def test_dask_cluster_gives_the_same_rows(nightly, clean_db, tmp_path):
    from distributed import LocalCluster

    db = tmp_path / "dask.sqlite"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        result = CliRunner().invoke(cli, ["batch", str(nightly), "--db", str(db), "--scheduler", cluster.scheduler_address])
    assert result.exit_code == 0, result.output
    assert snapshot(db) == snapshot(clean_db)


def test_trend_marks_the_planted_regression(clean_db):
    result = trend(str(clean_db))
    series = {(s["kind"], s["name"]): s for s in result["kernels"]}
    soa = series[("ncu", "soa_update")]["points"]
    assert [p["date"] for p in soa] == ["2026-11-01", "2026-11-02"] and soa[-1]["regression"]
    assert not series[("ncu", "random_gather")]["points"][-1]["regression"]    # -6.3%: noise
    mma = series[("ncu", "MmaPtxShared")]["points"]
    assert len(mma) == 5 and not mma[0]["regression"]


def test_trend_measures_the_estimates(clean_db):
    accuracy = {a["check"]: a for a in trend(str(clean_db))["prediction_accuracy"]}
    aos = next(d for d in accuracy["uncoalesced-global"]["details"] if d["kernel_name"] == "aos_update")
    assert aos["actual_ns"] == 260928 - 56800 and 0.5 < aos["actual_ns"] / aos["predicted_ns"] < 1.5
    reduce = next(d for d in accuracy["bank-conflicts"]["details"] if d["kernel_name"] == "reduce_interleaved")
    assert reduce["actual_ns"] == 133376 - 111296          # the conflict model overestimates: 76 us predicted


def test_trend_cli_outputs(clean_db, tmp_path):
    result = CliRunner().invoke(cli, ["trend", "--db", str(clean_db), "-o", str(tmp_path / "t.html"), "-o", str(tmp_path / "t.json"),
                                      "--fail-on-regression"])
    assert result.exit_code == 1                      # the latest soa_update run regressed
    html = (tmp_path / "t.html").read_text()
    assert "soa_update" in html and "<svg" in html and "<script" not in html


def test_a_night_with_more_steps_is_not_slower(tmp_path):
    """The first 200 steps of graphs_eager one night, all 400 the next: per step, per range instance and
    per kernel per step, the trend sees no regression (totals would have doubled)."""
    from nsanalyze.read.files import open_local
    from nsanalyze.trend import regressions_in_last_run, trend
    from tests.conftest import REAL

    _, local = open_local(REAL / "graphs_eager_nsys.sqlite.xz")
    for night in ("2026-11-01", "2026-11-02"):
        (tmp_path / "nightly" / night).mkdir(parents=True)
    short = tmp_path / "nightly" / "2026-11-01" / "train.sqlite"
    shutil.copy(local, short)
    with sqlite3.connect(short) as con:
        (end,) = con.execute("SELECT end FROM NVTX_EVENTS WHERE text = 'step 199'").fetchone()
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                      "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API"):
            con.execute(f"DELETE FROM {table} WHERE start > ?", (end,))
    shutil.copy(local, tmp_path / "nightly" / "2026-11-02" / "train.sqlite")
    db = tmp_path / "history.sqlite"
    batch([str(tmp_path / "nightly")], str(db), jobs=1)
    result = trend(str(db))
    names = {s["name"] for s in result["ranges"]}
    assert "median step: step N" in names and "step N" in names
    assert regressions_in_last_run(result) == []


def test_trend_trips_only_on_the_slower_night(tmp_path):
    """Three dated nights of one benchmark: two of unchanged code, then one 5% slower step. The median
    step's band comes from each run's own steps: the identical night passes, the slower one fails."""
    from nsanalyze.trend import regressions_in_last_run, trend
    from tests.conftest import REAL

    db = tmp_path / "history.sqlite"
    for night, name in (("2026-11-01", "nightly1"), ("2026-11-02", "nightly2"), ("2026-11-03", "nightly3_slow")):
        (tmp_path / night).mkdir()
        shutil.copy(REAL / f"{name}_nsys.sqlite.xz", tmp_path / night)
        batch([str(tmp_path / night)], str(db), jobs=1)
        last = {r["name"] for r in regressions_in_last_run(trend(str(db)))}
        assert ("median step: step N" in last) == (name == "nightly3_slow"), (night, last)


def test_batch_takes_what_report_takes_by_content(tmp_path, monkeypatch):
    """Kineto traces named `kineto_step.json` (as a user's script names them), in folders or by name, are
    stored; other JSON and text files are passed over; a folder with no profile is exit 2, said."""
    import gzip
    import json

    from tests.conftest import REAL

    for run, trace in (("a", "gpt_fp32_kineto.json.gz"), ("b", "mlp_eager_kineto.json.gz")):
        (tmp_path / "traces" / run).mkdir(parents=True)
        (tmp_path / "traces" / run / "kineto_step.json").write_bytes(gzip.decompress((REAL / trace).read_bytes()))
    (tmp_path / "traces" / "package.json").write_text(json.dumps({"name": "not a trace"}))
    (tmp_path / "traces" / "notes.txt").write_text("hello")
    shutil.copy(REAL / "attn_naive_kineto.json.gz", tmp_path / "step_trace.gz")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["batch", "traces", "step_trace.gz", "--db", "h.sqlite"])
    assert result.exit_code == 0, result.output
    assert "3 stored, 0 already there, 0 failed" in result.stderr
    with sqlite3.connect(tmp_path / "h.sqlite") as con:
        runs = con.execute("SELECT path, kind FROM runs ORDER BY path").fetchall()
    # stored absolute: a batch from another folder knows them again
    assert runs == [(str(tmp_path / "step_trace.gz"), "kineto"),
                    (str(tmp_path / "traces" / "a" / "kineto_step.json"), "kineto"),
                    (str(tmp_path / "traces" / "b" / "kineto_step.json"), "kineto")]
    monkeypatch.chdir(tmp_path / "traces")
    again = CliRunner().invoke(cli, ["batch", "a", "--db", "../h.sqlite"])
    assert again.exit_code == 0 and "0 stored, 1 already there, 0 failed" in again.stderr
    with sqlite3.connect(tmp_path / "h.sqlite") as con:
        assert con.execute("SELECT COUNT(DISTINCT path) FROM seen").fetchone()[0] == 3   # the same path, once
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "package.json").write_text("{}")
    empty = CliRunner().invoke(cli, ["batch", str(tmp_path / "empty"), "--db", str(tmp_path / "e.sqlite")])
    assert empty.exit_code == 2
    assert f"nsanalyze: {tmp_path / 'empty'}: no profile found" in empty.stderr


def test_trend_over_unrelated_programs_finds_no_regression(tmp_path):
    """Four unrelated programs of one night in one folder, no --label: each is its own program (its steps and
    main kernels differ), so no run is another's baseline; with one --label they are compared as asked."""
    from nsanalyze.trend import regressions_in_last_run
    from tests.conftest import REAL

    names = ("mlp_eager_nsys", "attn_naive_nsys", "cnn_cl_nsys", "gpt_fp32_nsys")
    (tmp_path / "runs").mkdir()
    for name in names:
        shutil.copy(REAL / f"{name}.sqlite.xz", tmp_path / "runs")
    db = tmp_path / "h.sqlite"
    batch([str(tmp_path / "runs")], str(db), jobs=1)
    result = trend(str(db))
    assert sorted(p["name"] for p in result["programs"]) == sorted(f"program of {n}.sqlite" for n in names)
    assert regressions_in_last_run(result) == []
    assert all(len({p["program"] for p in s["points"]}) == 1 for s in result["kernels"] + result["ranges"])
    # the shared PyTorch kernel is four series, one per program, each of one run
    shared = [s for s in result["kernels"] if s["name"] == "vectorized_elementwise_kernel"]
    assert len(shared) >= 3 and all(len(s["points"]) == 1 for s in shared)
    from nsanalyze.render.trend_report import render_trend

    markdown = render_trend(result, "markdown")   # one run each: "(1 run)", never "(1 runs)"
    assert markdown.count(" (1 run)") == len(names) and "(1 runs)" not in markdown
    labelled = tmp_path / "labelled.sqlite"
    batch([str(tmp_path / "runs")], str(labelled), jobs=1, label="one")
    assert [p["name"] for p in trend(str(labelled))["programs"]] == ["one"]


def test_trend_html_leads_with_the_median_step(tmp_path):
    """Three nights of one benchmark: one program (its steps and kernels agree), and the HTML's first chart is
    the median step's, before the kernels."""
    from nsanalyze.render.trend_report import render_trend
    from tests.conftest import REAL

    for night, name in (("2026-11-01", "nightly1"), ("2026-11-02", "nightly2"), ("2026-11-03", "nightly3_slow")):
        (tmp_path / night).mkdir()
        shutil.copy(REAL / f"{name}_nsys.sqlite.xz", tmp_path / night)
    db = tmp_path / "h.sqlite"
    batch([str(tmp_path)], str(db), jobs=1)
    result = trend(str(db))
    assert result["programs"] == [{"name": "program of nightly1_nsys.sqlite", "runs": 3}]
    html = render_trend(result, "html")
    assert html.index("<h2>Median step</h2>") < html.index("<svg") < html.index("<h2>Kernels</h2>")
    assert "median step: step N" in html[:html.index("<h2>Kernels</h2>")]
    # the Markdown had the kernels alone: the slower step, the only regression, was in the JSON and a chart; and a
    # failing --fail-on-regression said nothing on stderr
    [step] = [s for s in result["ranges"] if s["name"] == "median step: step N"]
    last = step["points"][-1]
    assert last["regression"]
    markdown = render_trend(result, "markdown")
    row = next(line for line in markdown.splitlines() if line.startswith("| median step: step N |"))
    assert row.endswith("| **yes** |") and f"| {percent(last['change'])} |" in row
    failed = CliRunner().invoke(cli, ["trend", "--db", str(db), "--fail-on-regression", "-o", str(tmp_path / "t.md")])
    assert failed.exit_code == 1
    assert f"regression: median step: step N {last['change']:+.1%} in the latest run" in failed.stderr
