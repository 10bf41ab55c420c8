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


def test_saving_is_at_most_the_cycles_the_replays_take(dev_suite_model, dev_suite_table):
    """reduce_interleaved (H200) has 77% of its shared wavefronts as replays and L1 75% busy, which priced 57% of the
    kernel (capped at 37% by the issue slots); its twin reduce_sequential, the same reduction without the conflicts,
    runs 133.4 -> 110.6 us (17%). The replays are 7.6M wavefronts, at one a cycle per SM 22% of the SMs' active cycles:
    L1's busy share also counts the global loads (the twin's L1 is still 64% busy). The saving is that bound now."""
    rows = dev_suite_table.frame.set_index("name")
    base, twin = rows.loc["reduce_interleaved"], rows.loc["reduce_sequential"]
    excess = base["shared_wavefronts"] - base["shared_wavefronts_ideal"]
    cycles_share = excess / (base["sm_count"] * base["sm_active_cycles_avg"])
    assert 0.2 < cycles_share < 0.25 and twin["l1_throughput_pct"] > 60
    finding = next(f for f in dev_suite_model["findings"]
                   if f["check"] == CHECK and f["kernel_name"] == "reduce_interleaved")
    saved = base["duration_ns"] - twin["duration_ns"]
    assert finding["estimated_savings_ns"] == pytest.approx(cycles_share * base["duration_ns"], rel=0.02)
    assert saved < finding["estimated_savings_ns"] < 1.35 * saved
    assert finding["evidence"]["excess_wavefront_cycles_share"]["value"] == pytest.approx(cycles_share, rel=1e-3)


def test_replays_of_cp_async_copies_get_the_alignment_advice(analyzed):
    """FaSTED's A100 pipeline with its shared buffers 16-byte aligned: 40% of its shared wavefronts are excess, 98% of
    them on one `LDGSTS.E.BYPASS.128` (cp.async) whose destination starts 16 bytes into a 128-byte line; the hardware's
    load and store conflict counters (which leave cp.async out) find 0.05%. Its twin, 128-byte aligned, has none of
    the excess and runs 15.47 -> 13.23 ms. Padding a tile, the usual bank-conflict fix, is no fix here: the title and
    advice name cp.async and its alignment."""
    from tests.conftest import PUBLIC

    name = "bwcurless__FaSTED__profiles__Shared_Memory_Alignment_Specifiers__Pipeline_Depth_1_{}_Align.ncu-rep.xz"
    finding = next(f for f in analyzed(PUBLIC / name.format("16B"))["findings"] if f["check"] == CHECK)
    assert finding["title"].startswith("cp.async (LDGSTS) copies into shared memory carry 98% of its excess wavefronts")
    assert "__align__(128)" in finding["advice"] and "tile[32][33]" not in finding["advice"]
    assert not any(f["check"] == CHECK for f in analyzed(PUBLIC / name.format("128B"))["findings"])
