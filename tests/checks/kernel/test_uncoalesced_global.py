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


def _vector_kernel(analyzed):
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    return next(k for k in model["kernels"] if k["name"] == "vectorized_elementwise_kernel"
                and k["metrics"].get("sectors_per_request_global_load") == 16)


@pytest.mark.parametrize("without", [(), ("global_sectors_excess_share",),
                                     ("global_sectors_excess_share", "global_load_bytes_per_sector",
                                      "global_store_bytes_per_sector")])
def test_wide_accesses_are_not_waste(analyzed, without):
    """PyTorch's float4 element-wise kernel moves 16 sectors per warp request and uses all 32 bytes of
    each: coalesced, whether the report has source counters, only bytes per sector, or neither."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import uncoalesced_global

    kernel = _vector_kernel(analyzed)
    assert kernel["metrics"]["global_load_bytes_per_sector"] == 32
    values = {k: v for k, v in kernel["metrics"].items() if k not in without}
    assert uncoalesced_global.run(KernelView({**values, "name": kernel["name"]}), limits_for(uncoalesced_global)) is None


def test_loads_and_stores_are_named(dev_suite_model):
    title = findings_for(dev_suite_model, "random_gather")[0]["title"]
    assert "loads use 7 of 32 bytes" in title and "stores use 32 of 32" in title
