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
