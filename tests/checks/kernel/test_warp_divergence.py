"""`warp-divergence` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first

CHECK = "warp-divergence"


@pytest.mark.parametrize("kernel", ['lane_switch'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)

def test_efficiency_is_threads_per_instruction_over_32(dev_suite_report, dev_suite_table):
    launch = next(l for l in dev_suite_report.launches if l.name == "lane_switch")
    ratio = launch.metrics["smsp__thread_inst_executed_per_inst_executed.ratio"]
    row = dev_suite_table.frame.set_index("name").loc["lane_switch"]
    assert row["warp_execution_efficiency"] == pytest.approx(ratio / 32)
    assert row["warp_execution_efficiency"] < 0.3      # four-way switch on the lane
