"""`warp-divergence` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import LABELLED  # noqa: F401
from tests.conftest import findings_for  # noqa: F401

CHECK = "warp-divergence"


@pytest.mark.parametrize("kernel", ['lane_switch'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    findings = [f for f in findings_for(dev_suite_model, kernel) if f["severity"] != "info"]
    top = findings[0]
    assert top["check"] in LABELLED[kernel]
    mine = next(f for f in findings if f["check"] == CHECK)
    assert mine["severity"] in ("medium", "high")
    assert mine["estimated_savings_ns"] > 0
    assert all("value" in e for e in mine["evidence"].values() if isinstance(e, dict))

def test_efficiency_is_threads_per_instruction_over_32(dev_suite_report, dev_suite_table):
    launch = next(l for l in dev_suite_report.launches if l.name == "lane_switch")
    ratio = launch.metrics["smsp__thread_inst_executed_per_inst_executed.ratio"]
    row = dev_suite_table.frame.set_index("name").loc["lane_switch"]
    assert row["warp_execution_efficiency"] == pytest.approx(ratio / 32)
    assert row["warp_execution_efficiency"] < 0.3      # four-way switch on the lane
