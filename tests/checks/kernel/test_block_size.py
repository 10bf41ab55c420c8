"""`block-size` on a public A100 report (FaSTED) with 1-thread blocks."""

import pytest

from tests.conftest import PUBLIC

REPORT = PUBLIC / "bwcurless__FaSTED__profiles__OnDemandRasterizer__Post_OnDemandRasterizer.ncu-rep.xz"


def test_one_thread_blocks_waste_31_of_32_lanes(analyzed):
    model = analyzed(REPORT)
    finding = next(f for f in model["findings"] if f["check"] == "block-size" and f["kernel_name"] == "SquaredSumsKernel")
    assert finding["evidence"]["block_size"]["value"] == 1
    assert finding["evidence"]["wasted_lane_share"]["value"] == pytest.approx(31 / 32)


def test_full_warps_are_quiet(dev_suite_model):
    assert "block-size" not in {f["check"] for f in dev_suite_model["findings"]}


def test_a_launch_with_a_scheduler_per_warp_is_no_block_size_problem(analyzed):
    """initOnDemandRasterizer: one 1-thread block, 2.3 us. Its warp has a scheduler to itself: fuller warps would
    not finish sooner (an instruction-bound kernel is not a block-size problem)."""
    model = analyzed(REPORT)
    assert not [f for f in model["findings"] if f["check"] == "block-size" and f["kernel_name"] == "initOnDemandRasterizer"]
    finding = next(f for f in model["findings"] if f["check"] == "block-size" and f["kernel_name"] == "SquaredSumsKernel")
    assert finding["estimated_speedup"] < 31 / 32              # scaled by the schedulers' issue use (63%)


PMSAMPLING = PUBLIC / "bwcurless__FaSTED__profiles__Final_128_128_Comparison__48x48_Warp_MaxReg_128_Pipeline_of_1_Pmsampling.ncu-rep.xz"


def test_unmeasured_issue_use_claims_no_savings(analyzed):
    """The Pmsampling report has neither issue-slot use nor SM throughput for SquaredSumsKernel's 1-thread blocks: the
    finding names the block size, saves nothing (it assumed 50% issue use: 0.4844 of 7.08 ms) and says what measures it."""
    model = analyzed(PMSAMPLING)
    finding = next(f for f in model["findings"] if f["check"] == "block-size" and f["kernel_name"] == "SquaredSumsKernel")
    assert finding["evidence"]["block_size"]["value"] == 1
    assert finding["evidence"]["issue_active_pct"]["value"] is None
    assert finding["severity"] == "info" and finding["estimated_speedup"] == 0 and finding["estimated_savings_ns"] == 0
    assert any("SchedulerStats" in n for n in finding["notes"])


def test_one_cause_one_finding(analyzed):
    """SquaredSumsKernel's 1-thread blocks run 1 of 32 lanes: block-size speaks (31/32 of its 62.8% issue use), and
    warp-divergence does not also claim the same lanes (each said 2.98 ms before)."""
    model = analyzed(REPORT)
    finding = next(f for f in model["findings"] if f["check"] == "block-size" and f["kernel_name"] == "SquaredSumsKernel")
    issue = finding["evidence"]["issue_active_pct"]["value"]
    assert issue == pytest.approx(62.83, abs=0.01)
    assert finding["estimated_speedup"] == pytest.approx(31 / 32 * issue / 100, rel=0.02)
    assert not [f for f in model["findings"] if f["check"] == "warp-divergence"
                and f["kernel_name"] in ("SquaredSumsKernel", "initOnDemandRasterizer")]
