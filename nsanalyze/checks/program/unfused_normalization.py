"""Normalization run apart from the elementwise work around it: each pass over an activation a kernel of its own.

## What it detects
Runs of memory-bound kernels between matrix products (convolutions, GEMMs) on one stream that hold a
normalization kernel (BatchNorm, LayerNorm, GroupNorm: a library's or PyTorch's own) and elementwise or
reduction kernels beside it, fewer than `unfused-elementwise`'s `min_ops` (those longer chains are code
written out op by op, that check's). A module-by-module model in eager mode: convolution, BatchNorm,
ReLU, the residual add, and their backward, each its own kernel. Kernels a compiler generated (Triton)
are already fused and left out.

## Why it is slow
Where the matrix products run on tensor cores, the passes over activations between them take much of
the step: each kernel of the chain reads the activation from memory and writes it back, to be read
again by the next. A normalization fused with its activation and add makes about one pass: the chain's
longest kernel's traffic (the model `unfused-elementwise` uses for chains written out op by op).

## Example
```python
model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = F.cross_entropy(model(x), y)   # conv, batch_norm, relu, add: a kernel each, forward and backward
```

## Instead
```python
model = torch.compile(model)              # BatchNorm fused with its ReLU and add, forward and backward
```

## Known problems
A fused normalization still makes its statistics pass (training), which the one-pass model leaves out;
PyTorch's own channels-last BatchNorm kernels move their bytes slower than a compiler's, which it
leaves out too. On the fuse55 twins (fixtures/real: ResNet-50 and MobileNetV2, batch 256, bf16) the GPU
time the chains lose beyond one pass is within 20% of what torch.compile's kernels saved (19.0 against
16.7 ms, 10.6 against 8.9 ms a step). The step saves less where the compiled program's host becomes
the bound (MobileNetV2: 3.5-4.3 ms), which a replay of the eager program's host cannot know.

## Options
- `min_share`: the chains' saving as a share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.numbers import duration_text
from nsanalyze.checks.program import unfused_elementwise

ID = "unfused-normalization"
BUDGET_PART = "gpu_compute"
ADVICE = """Fuse each normalization with the elementwise work around it.

- `torch.compile(model)` fuses BatchNorm, LayerNorm and GroupNorm with the activation, residual add and
  casts beside them, forward and backward, into Triton kernels.
- Inference: fold BatchNorm into the convolution before it
  (`torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)`, or `torch.compile`, or TensorRT), which also
  removes the normalization's own pass.
- Transformers (LayerNorm or RMSNorm between a residual add, dropout and casts): `torch.compile` of
  the block, or a fused add + norm kernel (Triton, Apex's `FusedLayerNorm`, Transformer Engine).

```python
# before: batch_norm, relu and add each a kernel that reads and writes the activation
model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
# after: the elementwise work done inside the normalization's passes
model = torch.compile(model)
```"""

CHECK = Check(
    id=ID,
    name="program.work.unfused_normalization",
    title="Normalization runs apart from the elementwise work beside it",
    section="work",
    requires=("work",),
    thresholds={
        "min_share": Threshold(0.03, "the program findings' least share: 3% of the window is worth a torch.compile"),
    },
    speedup_model=("per chain, its kernels' time beyond one pass (its longest kernel's), the pass a normalization "
                   "fused with its activation and add still makes"),
    budget_part=BUDGET_PART,
    change={"speedup": ("elementwise", "reduction", "normalization")},  # the replay change priced (program.py)
    advice=ADVICE,
)


def norm_chains(analysis):
    """The chains this check speaks for: a normalization with fewer single operations beside it than
    unfused-elementwise's chains hold (normalize.work.Chains)."""
    return analysis.chains.with_norm_under(unfused_elementwise.CHECK.thresholds["min_ops"].default)


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    window_ns = timeline.summary.span_ns or 0
    if analysis is None or not window_ns:
        return None
    chains = norm_chains(analysis).on_busiest_device()
    savings = float((chains.ns - chains.longest_ns).sum())
    if not len(chains) or savings / window_ns < limits.min_share:   # (no chain: nothing to say at any share)
        return None
    chain_ns = float(chains.ns.sum())
    steps = timeline.steps.count if timeline.steps else None
    count = f"{len(chains) / steps:.0f} normalizations a step" if steps else plural(len(chains), "normalization")
    several = len(set(analysis.chains.device.tolist())) > 1
    on_gpu = f" on GPU {chains.device[0]} (the GPU where they take most)" if several else ""
    each = (lambda ns: f"{duration_text(ns / steps)} a step") if steps else duration_text
    common = chains.launches_by_name()[:5]
    finding = Finding(
        check=ID,
        title=f"Normalization runs apart from the elementwise work beside it: {count}{on_gpu} each run beside "
              f"{float(chains.ops.sum()) / len(chains):.1f} elementwise or reduction kernels of their own, "
              f"{each(chain_ns)} of passes over the activations where one pass each would take "
              f"{each(chain_ns - savings)}; torch.compile fuses them",
        estimated_speedup=0.0,
        evidence={"chains": evidence(len(chains)),
                  "chain_ops_mean": evidence(float(chains.ops.sum()) / len(chains)),
                  "chain_ns": evidence(chain_ns, unit="ns"),
                  "elementwise_ns": evidence(float(chains.ops_ns.sum()), unit="ns"),
                  "beyond_one_pass_ns": evidence(savings, unit="ns"),
                  "saving_share": evidence(savings / window_ns, limits.min_share, unit="ratio"),
                  "kernels": [{"name": analysis.names.get(i), "launches_in_chains": n} for i, n in common]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = savings
    return finding
