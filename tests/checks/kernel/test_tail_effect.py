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


def test_a_whole_wave_grid_names_uneven_blocks(analyzed):
    """cuBLASLt's nvjet_sm90_tst_256x128 GEMM in the bf16 GPT runs 132 blocks on 132 SMs, one wave exactly, yet the
    average SM idles 19% of it: no partial wave to trim, so the finding names the blocks' uneven work and opens its
    advice with balancing it; the dev suite's 133 blocks on 132 SMs keep the partial-wave reading."""
    from tests.conftest import DEV_SUITE_NCU, REAL

    whole = next(f for f in analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")["findings"]
                 if f["check"] == "tail-effect" and f["kernel_name"].startswith("nvjet_sm90_tst_256x128"))
    assert whole["evidence"]["waves_per_sm"]["value"] == 1 and whole["evidence"]["grid_size"]["value"] == 132
    assert "blocks' work is uneven" in whole["title"] and "**Cause: uneven work per block.**" in whole["advice"]
    partial = next(f for f in analyzed(DEV_SUITE_NCU)["findings"]
                   if f["check"] == "tail-effect" and f["kernel_name"] == "one_block_too_many")
    assert "uneven" not in partial["title"] and "Cause: uneven" not in partial["advice"]
