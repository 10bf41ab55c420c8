"""The roofline's bound per kernel (normalize/roofline.py) on real reports."""

from nsanalyze.normalize.roofline import classify


def test_a_roof_not_measured_is_not_read_as_zero(analyzed):
    """COALDA's profile reports (ncu 2023.3's default set on an RTX 4050 Laptop GPU) hold no SM throughput: the
    kernel was called latency-bound from its memory share alone (30%), the missing compute share read as 0 (an
    expert review). With one roof unmeasured the bound is unknown unless the other is near its roof."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__profile__report__origin.ncu-rep.xz")
    [kernel] = model["kernels"]
    assert "sm_throughput_pct" not in kernel["metrics"] and kernel["roofline"].get("compute_share") is None
    assert 0 < kernel["roofline"]["memory_share"] < 0.6 and kernel["bound"] is None
    assert classify(None, 0.85, 0.6, 0.4) == "memory" and classify(0.3, None, 0.6, 0.4) is None
    assert classify(0.3, 0.2, 0.6, 0.4) == "latency"   # both measured, both low: latency, as before


def test_a_tensor_core_kernel_without_tensor_op_counters_has_no_fp32_intensity(analyzed):
    """FaSTED's mmaPtxTestFullTCUsage (A100, no tensor-path op counters in the report): the tensor pipe is 99% busy
    and the FP32 counters hold 0 FLOPs, so the row read fp32, intensity 0, 0% of the FLOP roof (an expert review).
    Its math is on the tensor pipe, whose operations are not counted: precision tensor, FLOPs unknown."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Ptx_Mma_Full_TC_Usage__mmaPtxTestFullTCUsage.ncu-rep.xz")
    [kernel] = model["kernels"]
    metrics, roof = kernel["metrics"], kernel["roofline"]
    assert metrics["tensor_pipe_pct"] > 95 and metrics["fp32_flops"] == 0 and "tensor_mma_ops" not in metrics
    assert roof["precision"] == "tensor" and roof.get("arithmetic_intensity") is None
    assert roof.get("achieved_flops_per_s") is None and roof.get("flop_roof_share") is None
    assert roof["peak_flops_per_s"] == metrics["bf16_peak_flops_per_s"] and kernel["bound"] == "compute"


def test_a_row_never_reads_memory_beside_its_latency_finding(analyzed):
    """FaSTED's Padded_Bounds_Checking twins (an expert review): SquaredSumsKernel's row read "memory" at 44% of its
    nearest roof while its low-ilp finding said "Latency-bound at 44%"; FindPairsKernel (without bounds checks)
    read "compute" at 44% beside "a latency-bound kernel". Below the near-roof line with under one ready warp a
    scheduler, the row says latency, as the checks do; near a roof it keeps the unit (TedJoin's L1 at 66%)."""
    from tests.conftest import PUBLIC

    fasted = "bwcurless__FaSTED__profiles__"
    told = 0
    for name in ("Padded_Bounds_Checking__With_Bounds_Checking", "Padded_Bounds_Checking__Without_Bounds_Checking"):
        model = analyzed(PUBLIC / f"{fasted}{name}.ncu-rep.xz")
        for kernel in model["kernels"]:
            roof = kernel["roofline"]
            share = max(roof.get("compute_share") or 0.0, roof.get("memory_share") or 0.0)
            latency_findings = [f for f in model["findings"] if f.get("kernel_id") == kernel["id"]
                                and "atency-bound" in f["title"]]
            if latency_findings:
                assert kernel["bound"] == "latency"
                told += 1
            if 0.4 <= share < 0.6 and kernel["metrics"]["eligible_warps_per_scheduler"] < 1:
                assert kernel["bound"] == "latency"
    assert told >= 3   # SquaredSumsKernel twice, FindPairsKernel without bounds checks
    tedjoin = analyzed(PUBLIC / f"{fasted}TedJoin__tedjoin_brute_100000_128D_profile.ncu-rep.xz")
    near = max(tedjoin["kernels"], key=lambda k: k["total_ns"])
    assert near["roofline"]["memory_share"] >= 0.6 and near["bound"] == "memory"


def test_an_fp64_tensor_core_kernel_is_held_to_the_fp64_tensor_roof(analyzed):
    """FaSTED's TedJoin brute force at 128 dimensions (A100, ncu 2022): distanceCalculationBruteForceTensorDoubleOpti
    runs FP64 MMAs (DMMA) on the tensor pipe, and no HMMA. Its roof was the BF16 one (310 TFLOP/s at its clock), 16x
    the 19.5 an A100's FP64 tensor cores reach (NVIDIA's A100 whitepaper: FP64 tensor = FP32 FFMA rate), so the HTML
    drew the FP64 kernel beside it under a 310 TFLOP/s roof. Its roof is now the FP64 tensor peak at its clock, and
    the chart draws the roofs of the kernels it plots, one a precision."""
    from nsanalyze.render import charts
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__TedJoin__tedjoin_brute_100000_128D_profile.ncu-rep.xz")
    by_name = {k["name"]: k for k in model["kernels"]}
    dmma = by_name["distanceCalculationBruteForceTensorDoubleOpti"]
    metrics, roof = dmma["metrics"], dmma["roofline"]
    assert metrics["tensor_dmma_pipe_pct"] > 5 and metrics["tensor_hmma_pipe_pct"] == 0
    assert roof["precision"] == "tensor"
    assert roof["peak_flops_per_s"] == metrics["fp64_tensor_peak_flops_per_s"] == \
        metrics["fp32_peak_flops_per_s"] == metrics["bf16_peak_flops_per_s"] / 16
    assert 18e12 < roof["peak_flops_per_s"] < 20e12
    fp64 = by_name["preComputedSquaredCoordinates"]["roofline"]
    assert fp64["precision"] == "fp64" and fp64["achieved_flops_per_s"] and fp64["arithmetic_intensity"]
    svg = charts.roofline_svg(model["kernels"])
    assert f"FP64 roof: {fp64['peak_bytes_per_s'] / 1e12:.2f} TB/s, {fp64['peak_flops_per_s'] / 1e12:.1f} TFLOP/s" in svg
    assert "310" not in svg and "tensor roof" not in svg   # the DMMA kernel is not plotted: its FLOPs are not counted
