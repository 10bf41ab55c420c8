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
