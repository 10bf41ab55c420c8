"""`low-occupancy` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import LABELLED  # noqa: F401
from tests.conftest import findings_for  # noqa: F401

CHECK = "low-occupancy"


@pytest.mark.parametrize("kernel", ['pointer_chase'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    findings = [f for f in findings_for(dev_suite_model, kernel) if f["severity"] != "info"]
    top = findings[0]
    assert top["check"] in LABELLED[kernel]
    mine = next(f for f in findings if f["check"] == CHECK)
    assert mine["severity"] in ("medium", "high")
    assert mine["estimated_savings_ns"] > 0
    assert all("value" in e for e in mine["evidence"].values() if isinstance(e, dict))

def test_names_the_small_grid(dev_suite_model):
    finding = next(f for f in findings_for(dev_suite_model, "pointer_chase") if f["check"] == "low-occupancy")
    assert "less than one wave" in finding["title"]
    assert finding["evidence"]["achieved_occupancy_pct"]["value"] < 5
