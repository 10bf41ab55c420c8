"""`small-grid` and its line with `tail-effect`, on real reports."""

from tests.conftest import REAL


def test_one_block_grid_is_small(analyzed):
    model = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    kernel = next(k for k in model["kernels"] if k["name"].startswith("nll_loss_forward_reduce"))
    checks = {f["check"]: f for f in model["findings"] if f["kernel_id"] == kernel["id"]}
    assert checks["small-grid"]["evidence"]["grid_size"]["value"] == 1
    assert checks["small-grid"]["severity"] in ("medium", "high")
    assert "tail-effect" not in checks


def test_no_tail_effect_below_one_block_per_sm(analyzed):
    for model in (analyzed(REAL / "gpt_fp32_full.ncu-rep.xz"), analyzed(REAL / "gpt_basic_clock_base.ncu-rep.xz")):
        for finding in model["findings"]:
            if finding["check"] == "tail-effect":
                kernel = model["kernels"][finding["kernel_id"]]["metrics"]
                assert kernel["grid_size"] >= kernel["sm_count"]


def test_one_block_too_many_keeps_its_tail(dev_suite_model):
    from tests.conftest import findings_for

    assert findings_for(dev_suite_model, "one_block_too_many")[0]["check"] == "tail-effect"
