"""low-tensor-activity with and without GPU metrics, on real H200 recordings (fixtures/real/README.md).

The fp32 GPT recorded twice: nsys with GPU metrics (tensor cores active 0.6%) and a PyTorch profiler
trace (no metrics). Both must name the CUDA-core GEMMs first; the trace's finding says that tensor
activity was not measured. The graphed fp32 MLP (nsys, no metrics) said 'no findings above info'.
bf16/fp16/TF32 programs get no finding."""

import pytest

from tests.conftest import REAL, program_findings

WITH_METRICS = "gpt_fp32_nsys.sqlite.xz"
NO_METRICS = ["gpt_fp32_kineto.json.gz", "graphs_after_nsys.sqlite.xz", "graphs_after_kineto.json.gz"]
# tensor-core programs: bf16 GEMMs, bf16 attention, bf16 ResNet-50, an fp16 token loop, TF32 in a CNN loader
TENSOR_CORE = ["matmul_async_nsys.sqlite.xz", "attn_naive_nsys.sqlite.xz", "attn_sdpa_nsys.sqlite.xz",
               "attn_naive_kineto.json.gz", "cnn_nchw_nsys.sqlite.xz", "cnn_cl_nsys.sqlite.xz",
               "mlp_eager_nsys.sqlite.xz", "token_gen_nsys.sqlite.xz", "nightly1_nsys.sqlite.xz"]


def _finding(model):
    return next((f for f in model["findings"] if f["check"] == "low-tensor-activity"), None)


def _simt_ns(model) -> float:
    return sum(w["ns"] for w in model["timeline"]["work"] if w["role"] == "matmul_simt")


@pytest.fixture(scope="module")
def gpt(analyzed):
    return analyzed(REAL / WITH_METRICS), analyzed(REAL / "gpt_fp32_kineto.json.gz")


def test_trace_without_metrics_names_the_same_first_cause(gpt):
    measured, traced = gpt
    assert "gpu_metrics" in measured and "gpu_metrics" not in traced
    first = [program_findings(m)[0] for m in gpt]
    assert [f["check"] for f in first] == ["low-tensor-activity"] * 2
    assert [f["severity"] for f in first] == ["high", "high"]
    with_metrics, by_names = first
    # the same kernels' share either way (81% measured on both)
    assert by_names["evidence"]["matrix_kernel_share"]["value"] == pytest.approx(
        with_metrics["evidence"]["matrix_kernel_share"]["value"], abs=0.03)
    assert "tensor cores active" in with_metrics["title"]
    assert "not measured" in by_names["title"] and by_names["evidence"]["tensor_active_pct"]["value"] is None
    assert any("not measured" in n and "kernel names" in n for n in by_names["notes"])
    assert not any("not measured" in n for n in with_metrics["notes"])


@pytest.mark.parametrize("name", ["graphs_after_nsys.sqlite.xz", "graphs_after_kineto.json.gz"])
def test_no_metrics_graphed_mlp_gets_the_finding(analyzed, name):
    """graphs_after: the whole step is one CUDA graph of fp32 cuBLAS/CUTLASS GEMMs (56% of GPU time),
    recorded by nsys and by the PyTorch profiler."""
    model = analyzed(REAL / name)
    finding = _finding(model)
    assert finding is not None and finding["severity"] in ("medium", "high")
    assert program_findings(model)[0]["check"] == "low-tensor-activity"
    share = _simt_ns(model) / model["timeline"]["kernel_ns"]
    assert finding["evidence"]["matrix_kernel_share"]["value"] == pytest.approx(share, abs=0.01)
    assert 0.5 < share < 0.6
    # advice for any program that calls cuBLAS, PyTorch's switches as one example (it said "fuse (`torch.compile`)")
    assert "cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)" in finding["advice"]
    assert "(in PyTorch, `torch.compile` does this)" in finding["advice"] and "fuse (`torch.compile`)" not in finding["advice"]
    # no GEMM of 50 us or more (the MLP's run 3-13 us each, by the evidence): the speed-up shown is the 2x the saving
    # applies to them all, the H200's 7.4x peak ratio beside it as the large GEMMs' (shown as the speed-up, unused)
    assert finding["evidence"]["large_gemm_share"]["value"] == 0
    assert finding["evidence"]["tensor_speedup"]["value"] == pytest.approx(2.0)
    assert finding["evidence"]["large_gemm_speedup"]["value"] == pytest.approx(7.4)


@pytest.mark.parametrize("name", [WITH_METRICS] + NO_METRICS)
def test_savings_stay_within_the_gemm_time(analyzed, name):
    model = analyzed(REAL / name)
    finding = _finding(model)
    gemm_ns = finding["evidence"]["matrix_kernel_ns"]["value"]
    assert gemm_ns <= _simt_ns(model) * 1.0001
    assert 0 < finding["estimated_savings_ns"] <= gemm_ns
    assert finding["estimated_savings_ns"] <= model["timeline"]["span_ns"]
    names = {k["name"] for k in finding["evidence"]["matrix_kernels"]}
    assert names and not any("gemv" in n for n in names)


@pytest.mark.parametrize("name", TENSOR_CORE)
def test_tensor_core_programs_get_no_finding(analyzed, name):
    model = analyzed(REAL / name)
    assert "gpu_metrics" not in model               # judged from the names alone
    assert _finding(model) is None


def test_user_kernel_named_sgemm_is_not_judged_by_name(analyzed):
    """The dev suite's own sgemm_tiled (20% of its GPU time): a name the user chose says nothing certain
    about its instructions; without GPU metrics it is left to ncu's missing-tensor-cores."""
    from tests.conftest import DEV_SUITE_NSYS

    model = analyzed(DEV_SUITE_NSYS)
    assert "gpu_metrics" not in model and _simt_ns(model) / model["timeline"]["kernel_ns"] > 0.15
    assert _finding(model) is None


def test_an_ncu_basic_report_gets_it_from_its_kernels(analyzed):
    """The basic set counts no FLOPs, so missing-tensor-cores cannot judge the fp32 GPT's cuBLAS/CUTLASS
    FFMA GEMMs; the kernel list's work split and the kernels' own tensor-pipe activity (time-weighted,
    measured) put them first. With --set full the kernel check speaks and this one stays silent (one claim);
    the bf16 step's report gets neither."""
    from tests.conftest import REAL

    basic = analyzed(REAL / "gpt_basic_clock_base.ncu-rep.xz")
    first = basic["findings"][0]
    simt_ns = next(w["ns"] for w in basic["work"] if w["role"] == "matmul_simt")
    assert first["check"] == "low-tensor-activity"
    assert first["evidence"]["tensor_active_pct"]["value"] < 1.0
    assert 0 < first["estimated_savings_ns"] <= first["evidence"]["matrix_kernel_ns"]["value"] <= simt_ns
    full = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    assert full["findings"][0]["check"] == "missing-tensor-cores"
    assert not [f for f in full["findings"] if f["check"] == "low-tensor-activity"]
    bf16 = analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")
    assert not [f for f in bf16["findings"] if f["check"] in ("low-tensor-activity", "missing-tensor-cores")
                and f["severity"] != "info"]


def test_with_a_straggler_the_critical_gpu_is_judged(analyzed):
    """ddp_host_all: rank 1 sleeps in host code and GPU 0 waits for it in NCCL. Faster GEMMs on GPU 0 would
    only wait longer: the saving is the straggler's own CUDA-core GEMM time (per-GPU split) at most."""
    model = analyzed(REAL / "ddp_host_all_nsys.sqlite.xz")
    imbalance = next(f for f in model["findings"] if f["check"] == "rank-imbalance")
    finding = _finding(model)
    straggler = imbalance["device_id"]
    device = next(d for d in model["timeline"]["devices"] if d["device_id"] == straggler)
    gemm_ns = sum(w["ns"] for w in device["work"] if w["role"] == "matmul_simt")
    assert finding["budget_device"] == straggler
    assert 0 < finding["estimated_savings_ns"] <= gemm_ns
    assert model["findings"][0]["check"] == "rank-imbalance"


def _kernel_list(*paths):
    """_kernel_list_here in a process of its own (ncu_report keeps what it reads until the process ends)."""
    from tests.isolated import apart

    return apart(_kernel_list_here, *paths)


def _kernel_list_here(*paths):
    """The kernels of real ncu reports, as analyze() hands them to the kernel-list work checks (ids made distinct)."""
    from nsanalyze.analyze import Options, analyze_ncu
    from nsanalyze.normalize.kernels import metrics_to_read
    from nsanalyze.read import read_profile

    kernels, floors = [], []
    for path in paths:
        entries, _, _, _, facts = analyze_ncu(read_profile(path, metrics_to_read), Options())
        for entry in entries:
            entry["id"] += len(kernels)
        kernels += entries
        floors.append(facts["launch_floor"]["ns"])
    return kernels, {k["id"]: k["total_ns"] for k in kernels}, min(floors)


def _work_findings(kernels, time, floor, options=None):
    from nsanalyze.analyze import Options, _kernel_list_work

    findings, _ = _kernel_list_work(kernels, time, options or Options(), [], floor, ["NVIDIA H200"])
    return {f.check: f for f in findings}


def test_ncu_kernels_whose_instruction_mix_was_read_are_not_judged_by_name():
    """gpt_fp32_full holds the FLOP counts of its cuBLAS FFMA GEMMs: missing-tensor-cores reads their instruction mix
    (fired or declined), so their names decide nothing, even with no kernel finding to defer to; the basic-set report
    of the same step has no FLOP counts, and the names speak."""
    from tests.conftest import REAL

    assert "low-tensor-activity" not in _work_findings(*_kernel_list(REAL / "gpt_fp32_full.ncu-rep.xz"))
    assert "low-tensor-activity" in _work_findings(*_kernel_list(REAL / "gpt_basic_clock_base.ncu-rep.xz"))


def test_library_baseline_beside_the_users_kernels_is_no_target():
    """The user's own kernels (the dev suite, 9.1 ms, no library's marks) profiled with a cuBLAS FFMA baseline (the GPT
    step's SIMT GEMMs, 5.6 ms): the baseline gets no tensor-core finding."""
    from tests.conftest import DEV_SUITE_NCU, REAL

    kernels, time, floor = _kernel_list(DEV_SUITE_NCU, REAL / "gpt_basic_clock_base.ncu-rep.xz")
    user = sum(time[k["id"]] for k in kernels if not k.get("library"))
    assert user > 9e6
    assert "low-tensor-activity" not in _work_findings(kernels, time, floor)


def test_savings_respect_the_launch_floor():
    """With a tensor-core speed-up of 1000x (every GEMM counted short, so that speed-up applies), the GEMMs' savings are their time less the report's measured launch
    floor per launch, not 99.9% of their time."""
    from nsanalyze.analyze import Options
    from tests.conftest import REAL

    kernels, time, floor = _kernel_list(REAL / "gpt_basic_clock_base.ncu-rep.xz")
    finding = _work_findings(kernels, time, floor, Options(thresholds={"low-tensor-activity.tensor_speedup": 1000.0,
                                                                   "low-tensor-activity.large_gemm_ns": 1e12}))[
        "low-tensor-activity"]
    matrix_ns = finding.evidence["matrix_kernel_ns"]["value"]
    listed_launches = sum(k["launches"] for k in finding.evidence["matrix_kernels"])
    assert finding.estimated_savings_ns <= matrix_ns - floor * listed_launches
    assert finding.estimated_savings_ns < matrix_ns * (1 - 1 / 1000)
    assert any("launch floor" in n for n in finding.notes)
