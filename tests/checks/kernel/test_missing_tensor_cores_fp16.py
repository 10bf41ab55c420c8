"""The FP16 suite (fixtures/fp16/fp16_suite.cu, ncu --set full on an H200, labels in fp16_suite_labels.toml):
hand-written FP16 GEMMs on HFMA and HFMA2 get missing-tensor-cores; the WMMA GEMM, an element-wise half2
kernel and a half2 stencil do not. Savings stay below each kernel's time, and what else the report says
about the suite holds up: the WMMA kernel's half-sector loads are L1 work, not wasted DRAM bytes."""

import tomllib

import pytest

from nsanalyze.rank import launch_floor_ns
from tests.conftest import FIXTURES

SUITE = FIXTURES / "fp16" / "fp16_suite_full.ncu-rep.xz"
LABELS = tomllib.loads((FIXTURES / "fp16" / "fp16_suite_labels.toml").read_text())
CHECK = "missing-tensor-cores"


@pytest.fixture(scope="module")
def suite(analyzed):
    return analyzed(SUITE)


def _kernel(model, name):
    return next(k for k in model["kernels"] if k["name"] == name)


def _findings(model, name):
    return [f for f in model["findings"] if f["kernel_name"] == name]


def test_every_labelled_kernel_is_in_the_report(suite):
    assert set(LABELS) == {k["name"] for k in suite["kernels"]}


@pytest.mark.parametrize("name", sorted(LABELS))
def test_label_holds(suite, name):
    label = LABELS[name]
    checks = [f["check"] for f in _findings(suite, name) if f["severity"] != "info"]
    if "expect" in label:
        assert checks and checks[0] == label["expect"], label["why"]
        finding = next(f for f in _findings(suite, name) if f["check"] == label["expect"])
        assert finding["severity"] in ("medium", "high") and "HFMA" in finding["title"]
    else:
        assert label["not"] not in checks, label["why"]


@pytest.mark.parametrize("name", sorted(LABELS))
def test_savings_stay_below_the_kernel_time(suite, name):
    """Each kernel's findings together leave at least its launch floor (ncu: duration per launch)."""
    kernel = _kernel(suite, name)
    time_ns = kernel["duration_ns"] * kernel["launches"]
    findings = _findings(suite, name)
    assert all(0 <= f["estimated_savings_ns"] < time_ns for f in findings)
    left = 1.0
    for finding in findings:
        left *= 1 - finding["estimated_speedup"]
    assert (1 - left) * time_ns <= time_ns - kernel["launches"] * launch_floor_ns() + 1


def test_hand_written_gemms_measure_fp16_fma_and_no_tensor_work(suite):
    for name in (n for n, label in LABELS.items() if label.get("expect") == CHECK):
        metrics = _kernel(suite, name)["metrics"]
        assert metrics["fp16_fma_share"] > 0.9 and metrics["fp16_flops"] > 1e10
        assert not metrics.get("tensor_mma_ops") and metrics["tensor_pipe_pct"] < 1


def test_wmma_gemm_half_sector_loads_are_l1_work_not_wasted_bytes(suite):
    """hgemm_wmma loads its fragments from global memory 16 bytes of each 32-byte row at a time: the
    other half is an L1 hit (87%), so DRAM and L2 see no excess (L2 moved about a quarter of the
    ideal sectors' bytes). The report said "50% of sectors wasted"; it now says that L1, 100% busy,
    does the sector work twice, with the fix for that (wider loads, shared-memory tiles)."""
    kernel = _kernel(suite, "hgemm_wmma")
    m = kernel["metrics"]
    assert m["global_load_bytes_per_sector"] == 16 and m["l1_hit_rate_pct"] > 80
    assert m["l2_bytes"] < m["global_sectors_ideal"] * 32                        # nothing wasted past L1
    finding = next(f for f in _findings(suite, "hgemm_wmma") if f["check"] == "uncoalesced-global")
    assert "no DRAM or L2 bytes are wasted" in finding["title"] and "wasted by uncoalesced" not in finding["title"]
    assert finding["evidence"]["excess_share_past_l1"]["value"] < 0.25
    assert "shared memory" in finding["advice"] and "structures of arrays" not in finding["advice"]
    # the saving is the excess share of L1's busy time
    excess = finding["evidence"]["global_sectors_excess_share"]["value"]
    assert finding["estimated_speedup"] <= excess * m["l1_throughput_pct"] / 100 + 1e-3


def test_tensor_core_gemm_has_its_flops_on_the_roofline(suite):
    """hgemm_wmma's work is tensor-core operations (2 x 2048^3 a launch, ncu's tensor-path counters), not
    FMA-pipe FLOPs: the roofline read 0 FLOP/s, intensity 0, precision fp32. It reads them against the
    FP16/BF16 tensor peak; the hand-written GEMMs stay on their FP16 pipe's roof."""
    wmma = _kernel(suite, "hgemm_wmma")
    roof, m = wmma["roofline"], wmma["metrics"]
    assert m["tensor_mma_ops"] == 2 * 2048 ** 3 and not m["fp16_flops"]
    assert roof["precision"] == "tensor" and roof["peak_flops_per_s"] == pytest.approx(m["bf16_peak_flops_per_s"])
    assert roof["achieved_flops_per_s"] == pytest.approx(m["tensor_mma_ops"] / (m["duration_ns"] * 1e-9), rel=1e-6)
    assert roof["arithmetic_intensity"] == pytest.approx(m["tensor_mma_ops"] / m["dram_bytes"], rel=1e-6)
    for name in (n for n, label in LABELS.items() if label.get("expect") == CHECK):
        assert _kernel(suite, name)["roofline"]["precision"] == "fp16"


HFMA_COUNTERS = ("fp16_flops", "fp_fma_share", "fp16_fma_share", "tensor_mma_ops")


def test_labels_hold_without_the_hfma_counters(ncu_rows):
    """Issue 35: hand-written HFMA/HFMA2 GEMMs missed missing-tensor-cores in a labelled suite whose reports hold no
    HFMA counters (ncu's sets without the roofline, older ncu). The suite's own rows with those counters removed
    keep only the FP16 pipe's instruction rate: the GEMMs (FP16 pipe 32%) still get the finding, from FLOPs estimated
    at that share of the FP32 roof (within 3% of the measured 21.2 and 20.7 TFLOP/s), and the element-wise and
    stencil kernels (FP16 pipe 0% and 7%) and the WMMA GEMM still do not."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import missing_tensor_cores

    limits = limits_for(missing_tensor_cores)
    rows = ncu_rows(FIXTURES / "fp16" / "fp16_suite_full.ncu-rep.xz")
    seen = set()
    for row in rows:
        older = {k: v for k, v in row.items() if k not in HFMA_COUNTERS}
        finding = missing_tensor_cores.run(KernelView(older), limits)
        fired = finding is not None and not hasattr(finding, "missing")
        assert fired == (LABELS[row["name"]].get("expect") == CHECK), row["name"]
        if fired:
            seen.add(row["name"])
            estimated = finding.evidence["fp_flops"]["value"]
            assert estimated == pytest.approx(row["fp16_flops"], rel=0.03)
            assert any("FP16 FLOPs estimated from the FP16 pipe" in n for n in finding.notes)
    assert seen == {n for n, label in LABELS.items() if label.get("expect") == CHECK}


@pytest.mark.parametrize("name", ["hgemm_scalar", "hgemm_half2"])
def test_the_wmma_variant_in_the_report_is_the_estimate(suite, name):
    """Review of 2 Dec: hgemm_scalar was promised 92% and hgemm_half2 89% (the tensor roof at 50%, bounded by "the
    ADU pipe 8.4%") while hgemm_wmma, the same n = 2048 product on tensor cores in the same report (2 x 2048^3
    tensor operations), runs in 627 us against 1617 and 830 us: 61% and 24%. The variant is the estimate now.
    L1 and LSU (90% and 94% busy) do not bound it: the WMMA product needs far fewer load instructions (LSU 18%),
    so both measured savings exceed the 10% and 6% an unchanged L1 would leave; the model's bound is dropped."""
    finding = next(f for f in _findings(suite, name) if f["check"] == CHECK)
    mine, wmma = _kernel(suite, name), _kernel(suite, "hgemm_wmma")
    measured = 1 - wmma["duration_ns"] / mine["duration_ns"]
    assert wmma["metrics"]["tensor_mma_ops"] == 2 * 2048 ** 3
    assert finding["evidence"]["twin_duration_ns"]["kernel"] == "hgemm_wmma"
    assert finding["estimated_speedup"] == pytest.approx(measured, abs=0.01)            # 0.612, 0.244
    assert finding["estimated_savings_ns"] <= mine["total_ns"]
    assert measured > 1 - mine["metrics"]["l1_throughput_pct"] / 100                  # L1 did not stay
    assert wmma["metrics"]["lsu_pipe_pct"] < 0.25 * mine["metrics"]["lsu_pipe_pct"]
    assert not any(n.startswith("bounded by the next limiter") for n in finding["notes"])
    assert "next_limiter_pct" not in finding["evidence"]
