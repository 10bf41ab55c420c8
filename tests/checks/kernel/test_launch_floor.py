"""The launch floor measured per report (issue 35): the least overhead of its short launches, checked against the
raw cycle counters, never the fixed 2 us where the report measures less."""

import pytest

from nsanalyze.normalize.kernels import SHORT_LAUNCH_NS
from tests.conftest import PUBLIC, REAL, FIXTURES


def _raw_overheads(path):
    """The raw overheads, read in a process of its own (ncu_report keeps what it reads until the process ends)."""
    from tests.isolated import apart

    return apart(_raw_overheads_here, path)


def _raw_overheads_here(path):
    """Each short launch's duration x (1 - sm__cycles_active.max / sm__cycles_elapsed.avg), from the raw metrics."""
    from nsanalyze.normalize.kernels import metrics_to_read
    from nsanalyze.read import read_profile

    out = []
    for launch in read_profile(path, metrics_to_read).launches:
        m = launch.metrics
        duration, busiest, elapsed = (m.get(k) for k in ("gpu__time_duration.sum", "sm__cycles_active.max",
                                                         "sm__cycles_elapsed.avg"))
        if duration and busiest and elapsed and duration <= SHORT_LAUNCH_NS and busiest < elapsed:
            out.append(duration * (1 - busiest / elapsed))
    return out


@pytest.mark.parametrize("path", [FIXTURES / "bench" / "train_basic.ncu-rep.xz", REAL / "gpt_basic_clock_base.ncu-rep.xz",
                                  REAL / "gpt_fp32_full.ncu-rep.xz"], ids=lambda p: p.name)
def test_floor_is_the_least_measured_overhead(path, analyzed):
    """H200 reports: the shortest launches (1.7-2.1 us) spend 0.9-1.6 us with no SM at work; the 2 us floor was longer
    than their whole duration less their work, and zeroed every saving on them."""
    floor = analyzed(path)["profiles"][0]["launch_floor"]
    raw = _raw_overheads(path)
    assert floor["measured"] and floor["ns"] == pytest.approx(min(raw), rel=1e-6)
    assert 800 < floor["ns"] < 1700
    shortest = min(k["metrics"]["min_ns"] for k in analyzed(path)["kernels"])
    assert floor["ns"] < shortest <= 2100          # the shortest kernel keeps room to save


def test_older_reports_estimate_the_busiest_sm_from_the_mean(analyzed):
    """ncu 2022.3 on an RTX 3070 keeps sm__cycles_active.avg only: VecAdd_kernel (196 blocks on 46 SMs, 3.2 us)
    gives an upper bound of its overhead from the mean active cycles, 1.36 us."""
    floor = analyzed(PUBLIC / "NVIDIA__nsight-training__cuda__nsight_compute__sample_reports__CuVectorAddDrv.ncu-rep.xz")[
        "profiles"][0]["launch_floor"]
    assert floor["measured"] and floor["ns"] == pytest.approx(1362, abs=2)


def test_unmeasured_reports_keep_the_assumed_floor(analyzed):
    floor = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__profile__report__origin.ncu-rep.xz")["profiles"][0]["launch_floor"]
    assert floor == {**floor, "ns": 2000.0, "measured": False}


def test_short_kernels_keep_savings_above_the_measured_floor(analyzed):
    """train_basic's 1-block elementwise kernels of 1.7-2 us: their small-grid findings save within their time less
    the measured floor, and no longer nothing."""
    model = analyzed(FIXTURES / "bench" / "train_basic.ncu-rep.xz")
    floor = model["profiles"][0]["launch_floor"]["ns"]
    short = {k["id"]: k for k in model["kernels"] if k["duration_ns"] < 2000}
    saving = [f for f in model["findings"] if f["kernel_id"] in short and f["estimated_savings_ns"] > 0]
    assert saving
    for finding in saving:
        room = sum(short[i]["total_ns"] - floor * short[i]["launches"] for i in finding["kernel_ids"] if i in short)
        assert finding["estimated_savings_ns"] <= room * 1.0001 + 1
