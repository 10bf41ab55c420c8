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
