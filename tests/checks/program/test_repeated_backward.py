"""repeated-backward on the blind58 twins (fixtures/real/README.md, Blind58), recorded blind by a helper: a ViT-like
encoder with three task heads whose step backpropagates each weighted loss apart (`backward(retain_graph=True)`,
base) against one backward of their sum (fix). Before this check, activation-recompute took the second and third
backward passes for a recomputation, and nothing named the mistake."""

import pytest

from tests.conftest import REAL, program_findings, sql_kernels_per_step

ID = "repeated-backward"


@pytest.mark.parametrize("i", [1])  # the second pair: bench/calibration.py's table (the suite's time)
def test_one_backward_per_loss_is_named_first_and_priced_near_its_twin(analyzed, i):
    """The base runs 1,314 kernels a step more than its twin (SQL: 2,172 against 858) and 72 ms more GPU time: three
    backward passes through the 12 layers for one forward. The finding counts the two passes beyond the first (1,272
    kernels, within 5% of SQL's difference in count and time) and is first; its saving, the replay without them
    shared with the finding beside it on the same GPU time, is within 25% of what the twin saved (the mean steps of
    the two reports). The twin is not told, and neither check takes the passes for a recomputation."""
    base, fix = f"blind58_multitask_base{i}_nsys.sqlite.xz", f"blind58_multitask_fix{i}_nsys.sqlite.xz"
    model, twin = analyzed(REAL / base), analyzed(REAL / fix)
    first = program_findings(model)[0]
    assert first["check"] == ID and first["severity"] == "high"
    assert (first["evidence"]["forward_passes"]["value"], first["evidence"]["backward_passes"]["value"]) == (1, 3)
    (base_kernels, base_ns) = sql_kernels_per_step(model, REAL / base)
    (fix_kernels, fix_ns) = sql_kernels_per_step(twin, REAL / fix)
    assert first["evidence"]["extra_kernels_per_step"]["value"] == pytest.approx(base_kernels - fix_kernels, rel=0.05)
    assert first["evidence"]["extra_ns_per_step"]["value"] == pytest.approx(base_ns - fix_ns, rel=0.05)
    saved = model["timeline"]["steps"]["mean_ns"] - twin["timeline"]["steps"]["mean_ns"]
    assert first["estimated_savings_ns"] / model["timeline"]["steps"]["count"] == pytest.approx(saved, rel=0.25)
    assert ID not in {f["check"] for f in twin["findings"]}
    assert "activation-recompute" not in {f["check"] for f in model["findings"]}


@pytest.mark.parametrize("name", ["blind57_lm_base1", "blind57_lm_fix1", "fuse56_bert_base1", "blind56_probe_base1",
                                  "fuse55_resnet_base1", "blind58_lstm_base1", "gpt_fp32"])
def test_one_backward_per_forward_is_not_told(analyzed, name):
    """A checkpointed GPT (whose backward blocks hold the forward's: activation-recompute's), transformers, a ViT, a
    CNN and an LSTM loop run one backward pass per forward pass."""
    assert ID not in {f["check"] for f in analyzed(REAL / f"{name}_nsys.sqlite.xz")["findings"]}
