"""`low-occupancy` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first
from tests.conftest import findings_for

CHECK = "low-occupancy"


@pytest.mark.parametrize("kernel", ['pointer_chase'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_names_the_small_grid(dev_suite_model):
    finding = next(f for f in findings_for(dev_suite_model, "pointer_chase") if f["check"] == "low-occupancy")
    assert "less than one wave" in finding["title"]
    assert finding["evidence"]["achieved_occupancy_pct"]["value"] < 5


def test_judged_without_issue_active(dev_suite_model):
    """A report without the scheduler statistics still judges occupancy from achieved vs theoretical."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import low_occupancy

    kernel = next(k for k in dev_suite_model["kernels"] if k["name"] == "pointer_chase")
    values = {k: v for k, v in kernel["metrics"].items() if k != "issue_active_pct"}
    assert "issue_active_pct" not in low_occupancy.CHECK.requires
    finding = low_occupancy.run(KernelView({**values, "name": "pointer_chase"}), limits_for(low_occupancy))
    assert finding is not None and finding.evidence["achieved_occupancy_pct"]["value"] < 10


def test_quiet_on_a_library_gemm_tiled_for_its_occupancy(analyzed):
    """cuBLASLt's Hopper GEMMs in the bf16 GPT run one block of 384 threads an SM, capped at 18.75% by their 213-221 kB
    of shared memory, and pipeline their loads (TMA): 14% achieved is the design, not a problem to fix. The grid (128
    blocks on 132 SMs, 0.97 waves) did not cause it either. PyTorch's own small-grid kernels keep theirs."""
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")
    nvjet = [k for k in model["kernels"] if k["name"].startswith("nvjet_")]
    assert any(k["metrics"]["theoretical_occupancy_pct"] < 20 and k["metrics"]["achieved_occupancy_pct"] < 15
               for k in nvjet)
    assert not [f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"].startswith("nvjet_")]
    assert any(f["check"] == CHECK and (f["kernel_name"] or "").startswith("multi_tensor_apply_kernel") for f in model["findings"])


def test_the_saving_stops_at_the_occupancy_the_next_limit_allows(analyzed):
    """FaSTED's MmaPtxShared (A100, 128-thread blocks): registers allow 2 blocks an SM (12.5%), shared memory 3. The
    saving assumed 50% occupancy within reach (24.0 ms, 54% of the kernel, an expert review); fewer registers reach
    3 blocks, 18.75%, where shared memory holds it. The saving is (1 - roof share / 0.6) x (1 - achieved / 18.75%)
    and a note says which limit caps it."""
    from nsanalyze.checks.kernel.low_occupancy import CHECK
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Shared_Mem_Conflicts_Sync_Vs_Async__Synchronous.ncu-rep.xz")
    kernel = next(k for k in model["kernels"] if k["name"] == "MmaPtxShared")
    metrics = kernel["metrics"]
    assert (metrics["blocks_per_sm_limit_registers"], metrics["blocks_per_sm_limit_shared_mem"]) == (2, 3)
    assert metrics["theoretical_occupancy_pct"] == 12.5
    [finding] = [f for f in findings_for(model, "MmaPtxShared") if f["check"] == "low-occupancy"]
    reachable = 12.5 * 3 / 2
    share = max(metrics[c] for c in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct")) / 100
    target_share = CHECK.thresholds["target_roof_share"].default
    expected = (1 - share / target_share) * (1 - metrics["achieved_occupancy_pct"] / reachable)
    assert finding["estimated_speedup"] == pytest.approx(expected, rel=0.02)
    assert finding["estimated_speedup"] < 0.3
    assert any("up to 18.8% occupancy" in n and "shared memory per block" in n for n in finding["notes"])


def test_the_example_is_the_change_for_the_limit_that_holds(analyzed, dev_suite_model):
    """FaSTED's MmaPtxShared runs 16,384 blocks of 128 threads (75.9 waves) held to 2 blocks an SM by its registers: a
    user read found it shown a grid of 264 one-warp blocks made larger. Its example is now `__launch_bounds__` in the
    kernel's own numbers: its block size and the 3 blocks an SM its shared memory allows (a later read found
    `(128, 4)` asking for a block shared memory forbids, beside bullets on grids under one wave and one-warp blocks:
    only its limit's bullet is left); the dev suite's pointer_chase, whose grid fills less than one wave, keeps the
    grid's example and bullet, an example that splits the work over more blocks."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Shared_Mem_Conflicts_Sync_Vs_Async__Synchronous.ncu-rep.xz")
    [finding] = [f for f in findings_for(model, "MmaPtxShared") if f["check"] == CHECK]
    kernel = next(k for k in model["kernels"] if k["name"] == "MmaPtxShared")
    assert kernel["metrics"]["waves_per_sm"] > 50 and "(registers per thread)" in finding["title"]
    metrics = kernel["metrics"]
    threads, blocks = int(metrics["block_size"]), int(metrics["blocks_per_sm_limit_shared_mem"])
    assert (threads, blocks, metrics["registers_per_thread"]) == (128, 3, 192)
    assert f"__launch_bounds__({threads}, {blocks}) kernel" in finding["advice"]
    assert "~192 registers live: 2 blocks of 128 threads" in finding["advice"]
    assert "row_sum_split" not in finding["advice"] and "Grid too small" not in finding["advice"]
    assert "Blocks of one warp" not in finding["advice"]
    chase = next(f for f in findings_for(dev_suite_model, "pointer_chase") if f["check"] == CHECK)
    assert "row_sum_split" in chase["advice"] and "launch_bounds" not in chase["advice"].split("```")[1]
    assert "Grid too small" in chase["advice"]
    # its example splits the work over more blocks: under one wave, the same threads in fewer, larger blocks (its 264
    # blocks of 32 threads as 33 of 256, the example before) would leave more of the 132 SMs idle
    assert "(n + 255) / 256, 256" not in chase["advice"]
