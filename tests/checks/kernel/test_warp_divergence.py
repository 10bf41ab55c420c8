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


def _kernel(analyzed, report, name):
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / report)
    return next(k for k in model["kernels"] if k["name"] == name)


def test_empty_lanes_of_small_blocks_are_not_divergence(analyzed):
    """OnDemandRasterizer's SquaredSumsKernel: 1-thread blocks, 1.0 thread per instruction, uniform branches. Against
    the 1 lane its blocks fill the efficiency is 100%: no divergence (block-size speaks for the lanes)."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import warp_divergence

    kernel = _kernel(analyzed, "bwcurless__FaSTED__profiles__OnDemandRasterizer__Post_OnDemandRasterizer.ncu-rep.xz",
                     "SquaredSumsKernel")
    metrics = kernel["metrics"]
    assert metrics["block_size"] == 1 and metrics["warp_execution_efficiency"] == pytest.approx(1 / 32)
    limits = limits_for(warp_divergence)
    assert warp_divergence.run(KernelView({**metrics, "name": kernel["name"]}), limits) is None
    # the same measured efficiency in full warps would be divergence
    finding = warp_divergence.run(KernelView({**metrics, "block_size": 128.0, "name": kernel["name"]}), limits)
    assert finding is not None and finding.estimated_speedup == pytest.approx((1 - 1 / 32) * metrics["issue_active_pct"] / 100)


def test_unmeasured_issue_use_claims_no_savings(dev_suite_table):
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import warp_divergence

    row = dev_suite_table.frame.set_index("name").loc["lane_switch"].to_dict()
    row = {k: v for k, v in row.items() if k not in ("issue_active_pct", "sm_throughput_pct")}
    finding = warp_divergence.run(KernelView({**row, "name": "lane_switch"}), limits_for(warp_divergence))
    assert finding is not None and finding.estimated_speedup == 0
    assert any("SchedulerStats" in n for n in finding.notes)
