"""`low-ilp` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first
from tests.conftest import findings_for

CHECK = "low-ilp"


@pytest.mark.parametrize("kernel", ['pointer_chase'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_atomics_are_left_to_atomic_contention(dev_suite_model):
    assert "low-ilp" not in {f["check"] for f in findings_for(dev_suite_model, "histogram_global")}
