"""trend compares like with like: one series per kernel (or range) of one program (the batch label)
on one GPU; runs of one date in the order their files were written."""

import os
import shutil
import sqlite3

from nsanalyze.batch import batch
from nsanalyze.trend import trend
from tests.conftest import FIXTURES

NIGHTLY1 = FIXTURES / "real" / "nightly1_nsys.sqlite.xz"
SLOW = FIXTURES / "real" / "nightly3_slow_nsys.sqlite.xz"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"


def night(root, date, source, name=None):
    folder = root / date
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (name or source.name)
    shutil.copy(source, target)
    return target


def gemm_series(result):
    return [s for s in result["kernels"] if s["name"] == GEMM]


def step_series(result):
    return [s for s in result["ranges"] if s["name"].startswith("median step")]


def test_a_run_on_another_gpu_is_its_own_series(tmp_path):
    db = tmp_path / "h.sqlite"
    night(tmp_path / "runs", "2026-11-01", NIGHTLY1)
    night(tmp_path / "runs", "2026-11-02", SLOW)
    batch([str(tmp_path / "runs")], str(db), jobs=1)
    together = gemm_series(trend(str(db)))
    assert len(together) == 1 and together[0]["gpu"] == "NVIDIA H200" and len(together[0]["points"]) == 2
    (steps,) = step_series(trend(str(db)))
    assert [p["regression"] for p in steps["points"]] == [False, True]  # 4.19 -> 4.40 ms, beyond the noise
    with sqlite3.connect(db) as con:  # the slow night measured on another machine
        con.execute("UPDATE runs SET gpu = 'NVIDIA A100-SXM4-80GB' WHERE path LIKE '%2026-11-02%'")
    apart = gemm_series(trend(str(db)))
    assert sorted(s["gpu"] for s in apart) == ["NVIDIA A100-SXM4-80GB", "NVIDIA H200"]
    assert all(len(s["points"]) == 1 and not s["regressions"] for s in apart)
    steps = step_series(trend(str(db)))
    assert len(steps) == 2 and not any(s["regressions"] for s in steps)


def test_programs_by_label_are_apart(tmp_path):
    db = tmp_path / "h.sqlite"
    night(tmp_path / "a", "2026-11-01", NIGHTLY1)
    night(tmp_path / "b", "2026-11-02", SLOW)
    batch([str(tmp_path / "a")], str(db), jobs=1, label="train-small")
    batch([str(tmp_path / "b")], str(db), jobs=1, label="train-large")
    series = gemm_series(trend(str(db)))
    assert sorted(s["program"] for s in series) == ["train-large", "train-small"]
    assert not any(s["regressions"] for s in series)


def test_same_date_runs_in_the_order_written(tmp_path):
    db = tmp_path / "h.sqlite"
    slow = night(tmp_path / "runs", "2026-11-01", SLOW, "a_run.sqlite.xz")       # first by path...
    fast = night(tmp_path / "runs", "2026-11-01", NIGHTLY1, "b_run.sqlite.xz")
    os.utime(fast, (1_700_000_000, 1_700_000_000))                                # ...but written first
    os.utime(slow, (1_700_003_600, 1_700_003_600))
    batch([str(tmp_path / "runs")], str(db), jobs=1)
    result = trend(str(db))
    assert [r["path"].rsplit("/", 1)[-1] for r in result["runs"]] == ["b_run.sqlite.xz", "a_run.sqlite.xz"]
    (series,) = step_series(result)
    assert [p["path"].rsplit("/", 1)[-1] for p in series["points"]] == ["b_run.sqlite.xz", "a_run.sqlite.xz"]
    assert series["points"][-1]["regression"]  # the slow run, written later, against the fast one
