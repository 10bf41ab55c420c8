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
