"""`l2-reuse` on FaSTED's public A100 reports: its tensor-core FindPairsKernel with the blocks in row-major order,
and the same kernel with the blocks rasterized in 10 x 10 groups (the fix, recorded by its authors)."""

import pytest

from tests.conftest import PUBLIC

CHECK = "l2-reuse"
FASTED = "bwcurless__FaSTED__profiles__"
CONVENTIONAL = PUBLIC / f"{FASTED}CTA_Layouts__Conventional_Layout.ncu-rep.xz"
RASTERIZED = PUBLIC / f"{FASTED}CTA_Layouts__Rasterized_Layout_10x10.ncu-rep.xz"


def _kernel(model, name):
    return next(k for k in model["kernels"] if k["name"] == name)


def test_a_busy_dram_the_warps_do_not_wait_on_is_no_finding(analyzed):
    """Row-major order: DRAM 80% busy, half the L2 requests hit, the DRAM traffic all reads; l2-reuse came first,
    promising 25%. Rasterized: 91% hit, DRAM 9%, and 9% less time, which its SM clock gave (1195 -> 1303 MHz): its SM
    cycles fell 0.8% (a user read). The base's warps wait on memory 6% of their latency (its stall breakdown): the
    DRAM was busy, not what set the pace. No l2-reuse on either."""
    from nsanalyze.checks.kernel.l2_reuse import MEMORY_WAITS

    base, fixed = analyzed(CONVENTIONAL), analyzed(RASTERIZED)
    metrics = _kernel(base, "FindPairsKernel")["metrics"]
    assert 49 < metrics["l2_hit_rate_pct"] < 51 and metrics["dram_throughput_pct"] > 80
    waiting = sum(metrics[c] for c in MEMORY_WAITS) / metrics["warp_latency_cycles"]
    assert 0 < waiting < 0.15
    fixed_metrics = _kernel(fixed, "FindPairsKernel")["metrics"]
    assert fixed_metrics["l2_hit_rate_pct"] > 90 and fixed_metrics["dram_throughput_pct"] < 10
    timed = 1 - _kernel(fixed, "FindPairsKernel")["duration_ns"] / _kernel(base, "FindPairsKernel")["duration_ns"]
    cycles = 1 - fixed_metrics["sm_cycles_elapsed"] / metrics["sm_cycles_elapsed"]
    assert timed == pytest.approx(0.09, abs=0.005) and 0 < cycles < 0.01
    assert fixed_metrics["sm_frequency_hz"] / metrics["sm_frequency_hz"] == pytest.approx(1 + timed, abs=0.01)
    for model in (base, fixed):
        assert CHECK not in {f["check"] for f in model["findings"]}


def test_the_promise_is_at_most_the_warps_wait_on_memory(analyzed):
    """The same kernel with its warps made to wait on memory a fifth of their latency (its long-scoreboard stalls
    raised, the rest as measured): l2-reuse speaks, and promises no more than that fifth, where the DRAM alone bound
    it at 25%."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import l2_reuse

    metrics = dict(_kernel(analyzed(CONVENTIONAL), "FindPairsKernel")["metrics"])
    others = sum(metrics[c] for c in l2_reuse.MEMORY_WAITS if c != "stall_long_scoreboard_cycles")
    metrics["stall_long_scoreboard_cycles"] = 0.2 * metrics["warp_latency_cycles"] - others
    finding = l2_reuse.run(KernelView({**metrics, "name": "FindPairsKernel"}), limits_for(l2_reuse))
    assert finding is not None and finding.estimated_speedup == pytest.approx(0.2)
    assert finding.evidence["memory_wait_share"]["value"] == pytest.approx(0.2)
    bound = 1 - metrics["sm_throughput_pct"] / metrics["dram_throughput_pct"]
    assert bound > 0.2 and "up to 20% (the 20% of their latency the warps wait on memory)" in finding.title


def test_a_library_gemm_and_an_operand_streamed_once_are_left_out(analyzed):
    """The naive attention step (H200): cuBLAS's nvjet GEMM of the probabilities times V is DRAM-bound at 79% with
    6% of L2 requests hitting, reads 98% of its DRAM traffic, tensor pipe 24%: one large operand streamed once,
    and a library's block order. The GPT step's nvjet GEMM at 17% likewise. No l2-reuse anywhere in either."""
    from tests.conftest import REAL

    for path, name_part, most_hit in ((REAL / "attn_naive_full.ncu-rep.xz", "64x512", 10),
                                      (REAL / "gpt_bf16_full.ncu-rep.xz", "64x128", 20)):
        model = analyzed(path)
        streamed = [k for k in model["kernels"] if name_part in k["name"] and k["name"].startswith("nvjet")
                    and (k["metrics"].get("dram_throughput_pct") or 0) > 60]
        assert streamed and all(k["metrics"]["l2_hit_rate_pct"] < most_hit for k in streamed)
        assert CHECK not in {f["check"] for f in model["findings"]}
