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
