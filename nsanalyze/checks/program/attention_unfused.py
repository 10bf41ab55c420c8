"""Attention written out: the T x T scores go through memory.

## What it detects
The work split's `attention_unfused` time: a softmax kernel (PyTorch's `softmax_warp_forward`,
`cunn_SoftMaxForward` and their backward kernels, by name) and the mask, scale, cast and copy kernels
over the same scores, between the two batched matrix products around it on its stream (`q @ k^T`,
`@ v`), with a launch size of the softmax's order.

## Why it is slow
Each of those kernels reads and writes the whole B x H x T x T score tensor, a pass through memory per
operation, forward and backward. A fused attention kernel (FlashAttention, cuDNN's SDPA) keeps the
scores on chip and only does the two matrix products on the tensor cores.

## Example
```python
att = (q @ k.transpose(-2, -1)) * scale
att = att.masked_fill(~mask, float("-inf"))
y = torch.softmax(att, dim=-1) @ v
```

## Instead
```python
y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
```

## Known problems
A softmax between matrix products that is not attention (a mixture-of-experts router over few experts)
counts too; its kernels are small. Log-softmax (cross-entropy over logits) is not counted.

## Options
- `min_share`: the scores path's share of the window before the check speaks.
- `recompute_share`: the share of the matrix products' time a fused kernel spends again (the backward
  pass recomputes the scores: one product of six).
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence

ID = "attention-unfused"
BUDGET_PART = "gpu_compute"
ADVICE = """Call fused attention: the scores then never leave the chip.

- `torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=..., is_causal=...)`
  picks FlashAttention, memory-efficient or cuDNN attention kernels (`torch.nn.attention.sdpa_kernel`
  chooses one); pass a causal mask as `is_causal=True`, not as a tensor.
- Or FlashAttention (`flash_attn.flash_attn_func`), or `torch.compile` of the attention block.

```python
# before
att = (q @ k.transpose(-2, -1)) * scale
att = att.masked_fill(~mask, float("-inf"))
y = torch.softmax(att, dim=-1) @ v
# after
y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
```"""

CHECK = Check(
    id=ID,
    name="program.work.attention_unfused",
    title="Attention written out: the scores go through memory",
    section="work",
    requires=("work",),
    thresholds={
        "min_share": Threshold(0.03, "the program findings' least share: 3% of the window in the scores' passes is worth one call"),
        "recompute_share": Threshold(1 / 6, "forward QK^T and PV, backward four products: a fused backward "
                                              "computes QK^T once more, one product in six"),
    },
    speedup_model=("the scores path's kernels are passes through memory at the bandwidth they measured: a fused "
                   "kernel removes them and does the matrix products on the tensor cores, spending recompute_share of "
                   "the products' time again: attention_unfused time - recompute_share x the products' time, at most "
                   "the attention_unfused time"),
    budget_part=BUDGET_PART,
    change={"speedup": ("attention_unfused",)},  # the replay change priced (program.py)
    replaces_roles=("attention_unfused",),       # a fused attention kernel takes the written-out softmax's work
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    window_ns = timeline.summary.span_ns or 0
    if analysis is None or not window_ns:
        return None
    scores_ns = analysis.role_ns("attention_unfused")
    if scores_ns / window_ns < limits.min_share:
        return None
    savings = max(0.0, scores_ns - limits.recompute_share * analysis.scores_gemm_ns)
    share = scores_ns / (analysis.kernel_ns or 1)
    kernels = analysis.kernels_of("attention_unfused")
    finding = Finding(
        check=ID,
        # the share and its figures of one whole, GPU kernel time ("78% ... (242.1 ms of the 333.6 ms window)" read as
        # a sum gone wrong: 73% of the window)
        title=f"Attention written out: softmax, mask and scale kernels over the scores take {share:.0%} of GPU "
              f"kernel time ({scores_ns / 1e6:.1f} ms of {(analysis.kernel_ns or 0) / 1e6:.1f} ms); "
              "use scaled_dot_product_attention",
        estimated_speedup=0.0,
        evidence={"attention_unfused_ns": evidence(scores_ns, unit="ns"),
                  "attention_unfused_share": evidence(scores_ns / window_ns, limits.min_share, unit="ratio"),
                  "scores_gemm_ns": evidence(analysis.scores_gemm_ns, unit="ns"),
                  "kernels": [{"name": k.name, "role": k.role, "duration_ns": k.ns, "launches": k.launches}
                              for k in kernels]},
        advice=ADVICE,
    )
    if round(100 * scores_ns / window_ns) != round(100 * share):   # the evidence's share is of the window's wall time
        finding.notes.append(f"attention_unfused_share is of the window's wall time ({scores_ns / window_ns:.0%} of "
                             f"{window_ns / 1e6:.1f} ms); the title's {share:.0%} is of its GPU kernel time")
    finding.estimated_savings_ns = min(savings, scores_ns)
    return finding
