"""`atomic-contention` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first
from tests.conftest import findings_for

CHECK = "atomic-contention"


@pytest.mark.parametrize("kernel", ['histogram_global'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_atomic_share_from_real_counters(dev_suite_model):
    finding = findings_for(dev_suite_model, "histogram_global")[0]
    # one load and one reduction per element
    assert finding["evidence"]["atomic_share"]["value"] == pytest.approx(0.5, abs=0.01)
    assert any("RED" in (s["sass"] or "") for s in finding["source"])
