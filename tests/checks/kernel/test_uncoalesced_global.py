"""`uncoalesced-global` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first, assert_quiet
from tests.conftest import findings_for

CHECK = "uncoalesced-global"


@pytest.mark.parametrize("kernel", ['aos_update', 'random_gather'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)


def test_healthy_twin_stays_quiet(dev_suite_model):
    assert_quiet(dev_suite_model, "soa_update", CHECK)


def test_excess_share_matches_source_counters(dev_suite_table):
    row = dev_suite_table.frame.set_index("name").loc["aos_update"]
    # one float used of each 32-byte struct: 7 of 8 sectors wasted
    assert row["global_sectors_excess_share"] == pytest.approx(0.875, abs=1e-3)
    assert row["sectors_per_request_global_load"] == pytest.approx(32.0)


def test_points_at_the_strided_load(dev_suite_model):
    finding = findings_for(dev_suite_model, "aos_update")[0]
    assert finding["source"][0]["file"].endswith("dev_suite.cu")
    assert finding["source"][0]["line"] == 16
