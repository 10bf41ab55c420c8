"""`low-ilp` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first
from tests.conftest import findings_for

CHECK = "low-ilp"


@pytest.mark.parametrize("kernel", ['pointer_chase'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_atomics_are_left_to_atomic_contention(dev_suite_model):
    assert "low-ilp" not in {f["check"] for f in findings_for(dev_suite_model, "histogram_global")}


def test_reduction_at_44_percent_of_a_roof_waits_on_barriers(analyzed):
    """FaSTED's SquaredSumsKernel (A100): a block reduction at 44% of its memory roof, 0.3 ready warps per
    scheduler, warps at barriers most of the time: latency-bound below 60% of both roofs, cause barriers."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Padded_Bounds_Checking__Without_Bounds_Checking.ncu-rep.xz")
    finding = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "SquaredSumsKernel")
    assert 0.4 <= finding["evidence"]["roof_share"]["value"] < 0.6
    assert finding["evidence"]["cause"]["value"] == "barriers"
    assert "__shfl_down_sync" in finding["advice"] and finding["estimated_speedup"] > 0
    # the title gives the barriers' own share (the report's stall over its warp latency, 73%), then all dependencies'
    # (94%): "at barriers 94%" was every dependency's share under the barriers' name (a user read)
    barrier = finding["evidence"]["barrier_stall_share"]["value"]
    assert f"at barriers {barrier:.0%} of the time" in finding["title"] and round(100 * barrier) == 73
    assert f"({finding['evidence']['dependency_stall_share']['value']:.0%} with the other dependencies)" in \
        finding["title"]


def test_small_blocks_that_cap_the_warps_are_named():
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import low_ilp

    view = KernelView({"sm_throughput_pct": 45.0, "memory_throughput_pct": 30.0, "eligible_warps_per_scheduler": 0.4,
                       "issue_active_pct": 30.0, "warp_latency_cycles": 40.0, "stall_long_scoreboard_cycles": 30.0,
                       "achieved_occupancy_pct": 48.0, "theoretical_occupancy_pct": 50.0, "block_size": 32.0,
                       "blocks_per_sm_limit": 32.0, "blocks_per_sm_limit_warps": 64.0,
                       "blocks_per_sm_limit_registers": 64.0})
    finding = low_ilp.run(view, limits_for(low_ilp))
    assert finding.evidence["cause"]["value"] == "small blocks" and "128-256 threads" in finding.advice


def test_a_grid_that_lasts_as_long_as_one_warp_says_what_its_saving_assumes(dev_suite_model, analyzed):
    """pointer_chase (H200): 264 blocks of one warp, all resident at once (0.06 waves), each warp following one chain
    of 2,000 dependent loads. Each warp's instructions, one warp latency apart, span the SMs' active cycles: the kernel
    lasts as long as one warp does, and the latency findings' savings hold only where the warps' work overlaps or
    splits. A grid of many waves (FaSTED's SquaredSumsKernel, 116) says nothing of it."""
    from tests.conftest import PUBLIC

    metrics = next(k for k in dev_suite_model["kernels"] if k["name"] == "pointer_chase")["metrics"]
    per_warp = metrics["instructions_executed"] / metrics["grid_size"]   # one warp a block
    assert round(per_warp) == 10409 and metrics["waves_per_sm"] < 1
    for check, assumes in ((CHECK, "chain is split"), ("low-occupancy", "the same work split finer")):
        finding = next(f for f in findings_for(dev_suite_model, "pointer_chase") if f["check"] == check)
        share = finding["evidence"]["warp_chain_share"]["value"]
        product = per_warp * metrics["warp_latency_cycles"] / metrics["sm_active_cycles_avg"]
        assert share == pytest.approx(min(product, 1.0)) and 0.95 < product < 1.05 and share <= 1.0
        note = next(n for n in finding["notes"] if "lasts as long as one warp does" in n)
        assert f"{per_warp:,.0f} instructions" in note and assumes in note
    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Padded_Bounds_Checking__Without_Bounds_Checking.ncu-rep.xz")
    finding = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "SquaredSumsKernel")
    assert "warp_chain_share" not in finding["evidence"]
    assert not any("one warp does" in n for n in finding["notes"])


def test_a_warps_share_of_the_kernel_is_never_past_all_of_it(analyzed):
    """gpt_bf16's kernels whose warp spans them read `warp_chain_share` 108-115% (a user read) beside a note saying
    100%: the instructions a warp and their mean latency are averages, whose product passes the active cycles by a
    few percent. The share is the whole kernel there, as the note says."""
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")
    kernels = {k["id"]: k["metrics"] for k in model["kernels"]}
    past = 0
    for finding in model["findings"]:
        entry = finding["evidence"].get("warp_chain_share")
        if entry is None:
            continue
        m = kernels[finding["kernel_id"]]
        warps = m["grid_size"] * -(-m["block_size"] // 32)
        product = m["instructions_executed"] / warps * m["warp_latency_cycles"] / m["sm_active_cycles_avg"]
        past += product > 1.0
        assert entry["value"] == pytest.approx(min(product, 1.0)) and entry["value"] <= 1.0
    assert past >= 3
