"""`local-memory-spill` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first
from tests.conftest import findings_for

CHECK = "local-memory-spill"


@pytest.mark.parametrize("kernel", ['register_pressure'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_spills_counted_and_located(dev_suite_model):
    finding = findings_for(dev_suite_model, "register_pressure")[0]
    assert finding["evidence"]["spill_instructions"]["value"] == pytest.approx(12320768, rel=1e-5)
    assert finding["source"] and finding["source"][0]["line"] in range(108, 117)
