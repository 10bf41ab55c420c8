"""Thresholds set at the edge of what `--set` accepts: every check still judges, or declines, without an internal
error. `--set ID.min_share=0` asks for everything a check sees ("show me all chains"); a check that then divided by
the count of what it found, and found nothing, failed the whole report (unfused-elementwise on the fuse56 GPT: a
ZeroDivisionError, exit 3). Values no threshold can take (negative, a speed-up factor under 1) are refused with one
line, exit 2."""

import math

import pytest

from nsanalyze.analyze import Options
from nsanalyze.checks import all_checks
from tests.conftest import PUBLIC, REAL
from tests.isolated import analyze_apart, run_nsanalyze

PROFILES = [
    REAL / "fuse56_gpt_base1_nsys.sqlite.xz",            # a GPU-bound transformer: chains, GEMMs, no CUDA-core GEMM
    REAL / "alloc_churn_kineto.json.gz",                 # a Kineto trace
    PUBLIC / "quasiben__nvtx-examples__quickstart.sqlite.xz",   # no GPU activity, no CUDA call
    PUBLIC / "Alaric617R__COALDA__examples__rgb__rgb_original.ncu-rep.xz",   # one ncu kernel
]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name.split(".")[0][-40:])
def test_every_threshold_at_its_least_value_still_judges(path):
    """All thresholds of every check at the least value --set accepts at once: the analysis completes, and every
    finding's savings are a finite, non-negative time (the edge widens what speaks, never breaks it)."""
    least = {f"{check.id}.{key}": threshold.at_least for check in all_checks()
             for key, threshold in check.thresholds.items()}
    at_default = analyze_apart([path])
    report = analyze_apart([path], Options(thresholds=least))
    assert len(report["findings"]) >= len(at_default["findings"])
    for found in report["findings"]:
        assert math.isfinite(found["estimated_savings_ns"]) and found["estimated_savings_ns"] >= 0, found["check"]


@pytest.mark.parametrize("setting,said", [
    ("unfused-elementwise.min_share=-0.1", "unfused-elementwise.min_share must be at least 0"),
    ("low-tensor-activity.tensor_speedup=0.5", "low-tensor-activity.tensor_speedup must be at least 1"),
    ("slow-steps.outlier_factor=0.9", "slow-steps.outlier_factor must be at least 1"),
])
def test_a_threshold_no_check_can_take_is_refused_in_one_line(setting, said):
    run = run_nsanalyze("report", REAL / "graphs_eager_nsys.sqlite.xz", "--set", setting, "-o", "-")
    assert run.returncode == 2 and not run.stdout
    assert run.stderr.strip().splitlines() == [f"nsanalyze: --set: {said}"]
