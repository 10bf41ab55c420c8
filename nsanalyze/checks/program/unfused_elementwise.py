"""Elementwise code written out op by op: a chain of memory-bound kernels where one would do.

## What it detects
Runs of memory-bound kernels back to back on one stream between other work (matrix products,
attention), from the work split: at least `min_ops` single operations each (PyTorch's elementwise,
reduction and cast kernels; normalization kernels and copies may sit in the chain but do not count
as written-out operations). Kernels a compiler generated (Triton) are already fused and left out. A copy to
the host on the chain's stream ends it, as a matrix product does: the host read a result (a check's
`bool(t)`, an `.item()`) before it issued the rest, and no fused kernel reaches across that read.

## Why it is slow
Each kernel of the chain reads its inputs from memory and writes its result back, to be read again by
the next. A fused kernel reads the chain's inputs once and writes its output once: one pass, about the
traffic of the chain's largest kernel.

## Example
```python
def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))   # 8 kernels
```

## Instead
```python
gelu = torch.compile(gelu)                      # one fused kernel
# or the library's fused op: torch.nn.functional.gelu(x, approximate="tanh")
```

## Known problems
The model counts a chain's bytes by its kernels' time at the bandwidth each measured; a reduction in
the middle of a chain (a mean) may need a second pass in the fused kernel too.

## Options
- `min_ops`: written-out operations in a chain before it counts as code written out op by op.
- `min_share`: the chains' saving as a share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural

ID = "unfused-elementwise"
BUDGET_PART = "gpu_compute"
ADVICE = """Fuse the chain into one kernel.

- `torch.compile(model)` (or of the function holding the chain) fuses elementwise and
  normalization code into Triton kernels, forward and backward.
- Or call the library's fused op: `F.gelu(x, approximate="tanh")`, `F.layer_norm`, `F.rms_norm`,
  `F.silu`; or write one fused kernel (Triton, CUDA).
- A chain over a broadcast of two tensors (pairwise distances: `((a[:, None] - b[None]) ** 2).sum(-1)`)
  writes the whole broadcast to memory, each kernel again: expand it into a matrix product
  (`(a * a).sum(1, keepdim=True) - 2 * a @ b.T + (b * b).sum(1)`, or `torch.cdist`).

```python
# before: LayerNorm and GELU written out, ~20 kernels per block
y = x + down(gelu(up(layer_norm(x, w, b))))
# after
block = torch.compile(block)
```"""

CHECK = Check(
    id=ID,
    name="program.work.unfused_elementwise",
    title="Elementwise code written out: chains of memory-bound kernels",
    section="work",
    requires=("work",),
    thresholds={
        "min_ops": Threshold(8, "a PyTorch module launches 1 to 3 kernels, a loss written out with its backward 6 or 7; "
                                "8 or more in a row are a function written out op by op (a tanh GELU: 8, a LayerNorm: 10)"),
        "min_share": Threshold(0.03, "the program findings' least share: 3% of the window is worth a torch.compile"),
    },
    speedup_model=("per chain, the bytes it moves beyond one pass: its kernels' time (each at the bandwidth it "
                   "measured) less its largest kernel's, the one pass a fused kernel still makes"),
    budget_part=BUDGET_PART,
    # the replay change priced (program.py): the roles a chain fuses (work.FUSABLE), as unfused-normalization's
    change={"speedup": ("elementwise", "reduction", "normalization")},
    advice=ADVICE,
)


def _count(chains: float) -> str:
    """`1 chain`, `14 chains`, `0.5 chains`: a count a step as a sentence reads it."""
    text = f"{chains:.0f}" if chains >= 0.95 else f"{chains:.1g}"
    return f"{text} chain" if text == "1" else f"{text} chains"


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    window_ns = timeline.summary.span_ns or 0
    if analysis is None or not window_ns:
        return None
    chains = analysis.chains.with_ops(limits.min_ops).on_busiest_device()   # one GPU's time, never a sum over GPUs
    savings = float((chains.ns - chains.longest_ns).sum())
    if not len(chains) or savings / window_ns < limits.min_share:   # (no chain: nothing to say at any share)
        return None
    chain_ns = float(chains.ns.sum())
    common = chains.launches_by_name()[:5]
    steps = (timeline.steps.count if timeline.steps else None)
    per_step = f" ({_count(len(chains) / steps)} per step)" if steps else ""
    mean_length = float(chains.kernels.sum()) / len(chains)
    finding = Finding(
        check=ID,
        title=f"Elementwise code written out: {plural(len(chains), 'chain')} of {mean_length:.0f} memory-bound kernels on "
              f"average{per_step} take {chain_ns / 1e6:.1f} ms of the {window_ns / 1e6:.1f} ms "
              f"{'of profiled kernels' if timeline.window.kind == 'kernels' else 'window'}; "   # an ncu report's whole
              "fuse them with torch.compile",
        estimated_speedup=0.0,
        evidence={"chains": evidence(len(chains)),
                  "chain_kernels_mean": evidence(mean_length, limits.min_ops),
                  "chain_ns": evidence(chain_ns, unit="ns"),
                  "beyond_one_pass_ns": evidence(savings, unit="ns"),
                  "saving_share": evidence(savings / window_ns, limits.min_share, unit="ratio"),
                  "kernels": [{"name": analysis.names.get(i), "launches_in_chains": n} for i, n in common]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = savings
    return finding
