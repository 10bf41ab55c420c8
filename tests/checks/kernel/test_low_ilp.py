"""`low-ilp` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import LABELLED  # noqa: F401
from tests.conftest import findings_for  # noqa: F401

CHECK = "low-ilp"


@pytest.mark.parametrize("kernel", ['pointer_chase'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    findings = [f for f in findings_for(dev_suite_model, kernel) if f["severity"] != "info"]
    top = findings[0]
    assert top["check"] in LABELLED[kernel]
    mine = next(f for f in findings if f["check"] == CHECK)
    assert mine["severity"] in ("medium", "high")
    assert mine["estimated_savings_ns"] > 0
    assert all("value" in e for e in mine["evidence"].values() if isinstance(e, dict))

def test_atomics_are_left_to_atomic_contention(dev_suite_model):
    assert "low-ilp" not in {f["check"] for f in findings_for(dev_suite_model, "histogram_global")}
