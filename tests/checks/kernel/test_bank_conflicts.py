"""`bank-conflicts` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first, assert_quiet

CHECK = "bank-conflicts"


@pytest.mark.parametrize("kernel", ['reduce_interleaved'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)


def test_healthy_twin_stays_quiet(dev_suite_model):
    assert_quiet(dev_suite_model, "reduce_sequential", CHECK)


def test_share_is_excess_over_all_wavefronts(dev_suite_report, dev_suite_table):
    launch = next(l for l in dev_suite_report.launches if l.name == "reduce_interleaved")
    actual, ideal = launch.metrics["memory_l1_wavefronts_shared"], launch.metrics["memory_l1_wavefronts_shared_ideal"]
    row = dev_suite_table.frame.set_index("name").loc["reduce_interleaved"]
    assert row["bank_conflict_share"] == pytest.approx((actual - ideal) / actual)
    assert row["bank_conflict_share"] > 0.7


def test_kernel_without_shared_memory_is_not_reported_as_unjudged(dev_suite_model):
    unjudged = {(n["check"], n["kernel_name"]) for n in dev_suite_model["not_judged"]}
    assert ("bank-conflicts", "aos_update") not in unjudged
