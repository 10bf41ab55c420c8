"""`missing-tensor-cores` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first, assert_quiet
from tests.conftest import findings_for

CHECK = "missing-tensor-cores"


@pytest.mark.parametrize("kernel", ['sgemm_tiled'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)


def test_healthy_twin_stays_quiet(dev_suite_model):
    assert_quiet(dev_suite_model, "bf16_gemm_wmma", CHECK)


def test_estimate_uses_the_tf32_roof(dev_suite_model):
    finding = findings_for(dev_suite_model, "sgemm_tiled")[0]
    assert "TF32" in finding["notes"][0]
    assert finding["estimated_speedup"] > 0.9   # 17 GFLOP in 1.86 ms on FFMA vs ~0.07 ms at half the TF32 roof


def test_advice_names_the_paths_and_alignment(dev_suite_model):
    advice = findings_for(dev_suite_model, "sgemm_tiled")[0]["advice"]
    for word in ("allow_tf32", "autocast", "wmma", "multiples of 8"):
        assert word in advice


GPT_FP32 = "gpt_fp32_full.ncu-rep.xz"


def test_fp32_gpt_gemms_come_first_with_library_advice(analyzed):
    """One fp32 GPT training step (--set full): the cuBLAS/CUTLASS SIMT GEMMs lead, with TF32/bf16 advice
    that names the NVTX range the launches ran in; no (check, kernel) twice in the top 10."""
    from tests.conftest import REAL

    model = analyzed(REAL / GPT_FP32)
    top = [f for f in model["findings"] if f["severity"] != "info"][:10]
    assert top[0]["check"] == CHECK
    kernel = model["kernels"][top[0]["kernel_id"]]
    assert kernel["library"] == "cuBLAS" and "f32f32" in kernel["name"]
    assert "allow_tf32" in top[0]["advice"] and f"NVTX range `{kernel['nvtx_range']}`" in top[0]["advice"]
    assert kernel["nvtx_range"].startswith("train_step")
    assert len({(f["check"], f["kernel_id"]) for f in top}) == len(top)


def test_memory_bound_softmax_is_not_a_gemm(analyzed):
    """cunn_SoftMaxForwardReg does 2.4 FLOP per DRAM byte at 7% of the FP32 roof: no tensor-core advice."""
    from tests.conftest import REAL

    model = analyzed(REAL / GPT_FP32)
    softmax = [k["id"] for k in model["kernels"] if k["name"] == "cunn_SoftMaxForwardReg"]
    assert softmax
    assert not [f for f in model["findings"] if f["check"] == CHECK and f["kernel_id"] in softmax]
