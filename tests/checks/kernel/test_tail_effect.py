"""`tail-effect` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first

CHECK = "tail-effect"


@pytest.mark.parametrize("kernel", ['one_block_too_many'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_imbalance_from_sm_active_cycles(dev_suite_report, dev_suite_table):
    launch = next(l for l in dev_suite_report.launches if l.name == "one_block_too_many")
    expected = 1 - launch.metrics["sm__cycles_active.avg"] / launch.metrics["sm__cycles_active.max"]
    row = dev_suite_table.frame.set_index("name").loc["one_block_too_many"]
    assert row["sm_busy_imbalance"] == pytest.approx(expected)
    assert expected > 0.45
