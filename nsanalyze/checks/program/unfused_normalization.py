"""Normalization run apart from the elementwise work around it: each pass over an activation a kernel of its own.

## What it detects
Runs of memory-bound kernels between matrix products (convolutions, GEMMs, attention) on one stream that
hold a normalization kernel (BatchNorm, LayerNorm, GroupNorm, RMSNorm: a library's or PyTorch's own) and
elementwise or reduction kernels beside it, fewer than `unfused-elementwise`'s `min_ops` (those longer
chains are code written out op by op, that check's). A module-by-module model in eager mode: convolution,
BatchNorm, ReLU, the residual add, and their backward, each its own kernel. Where it speaks, it also prices
the program's other short runs between matrix products (a GELU and its dropout, a bias gradient's sum),
which the same `torch.compile` fuses. Kernels a compiler generated (Triton) are already fused and left out.

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
leaves out too. On the twins of fixtures/real (eager against torch.compile, bf16, GPU-bound) the GPU time
the chains lose beyond one pass is within 20% of what the compiled kernels saved on the CNNs (fuse55:
ResNet-50 19.0 against 16.7 ms, MobileNetV2 10.6 against 8.9 ms a step) and on the transformers (fuse56:
a GPT-2-small-like decoder 8.6 against 8.1 ms; a BERT-base-like encoder 7.1 against 8.4 ms of fusion).
What a compiler changes beyond fusion is not in it: the BERT's vocabulary GEMMs, which compile padded
(4.1 ms a step more), and a compiled program's own host, which became the bound of the MobileNetV2
(its step saved 3.5-4.3 ms), and which a replay of the eager program's host cannot know.

## Options
- `min_share`: the normalization chains' saving as a share of the window before the check speaks.
"""

import re

import numpy as np

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count, time_per_step
from nsanalyze.checks.program import unfused_elementwise

ID = "unfused-normalization"
BUDGET_PART = "gpu_compute"
COMPILE = """Fuse each normalization with the elementwise work around it.

- `torch.compile(model)` fuses BatchNorm, LayerNorm and GroupNorm with the activation, residual add and
  casts beside them, forward and backward, into Triton kernels."""
# What else to do, by the normalization the chains hold (their kernels' names; the first that matches): the
# advice and example of a finding name the program's own kind, never a CNN's fix for a transformer.
BY_KIND = (
    ("batch", re.compile(r"batch_?norm|bn_fw|bn_bw", re.IGNORECASE), """
- Inference: fold BatchNorm into the convolution before it
  (`torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)`, or `torch.compile`, or TensorRT), which also
  removes the normalization's own pass.

```python
# before: batch_norm, relu and add each a kernel that reads and writes the activation
model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
# after: the elementwise work done inside the normalization's passes
model = torch.compile(model)
```"""),
    ("layer", re.compile(r"layer_?norm|rms_?norm|GammaBeta|cuApplyLayerNorm|cuComputeGradInput|"
                         r"cuComputePartGradGammaBeta", re.IGNORECASE), """
- Transformers (LayerNorm or RMSNorm between a residual add, dropout and casts): `torch.compile` of
  the block, or a fused add + norm kernel (Triton, Apex's `FusedLayerNorm`, Transformer Engine).

```python
# before: the residual add, layer_norm and GELU (and dropout, where the model has it) each a kernel,
# forward and backward
x = norm(x + attn(x))
# after: the block compiled, its elementwise work inside the normalization's passes
block = torch.compile(block)
```"""),
    ("group", re.compile(r"group_?norm|instance_?norm", re.IGNORECASE), """
- GroupNorm and InstanceNorm beside a SiLU or an add (diffusion U-Nets): `torch.compile` of the block, or a
  fused GroupNorm + activation kernel (Triton, Apex's `GroupNorm` with `act="silu"`).

```python
# before: group_norm and silu each a kernel that reads and writes the activation
h = F.silu(norm(h))
# after
block = torch.compile(block)
```"""),
)
ADVICE = COMPILE + "\n".join(text for _, _, text in BY_KIND)   # (a blank line after each example)
# The other short runs are named in the title where they save this share of the finding's saving or more.
OTHERS_TITLED = 0.05
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
                   "fused with its activation and add still makes; over the chains that hold a normalization and "
                   "the program's other short runs between matrix products, which the same compile fuses"),
    budget_part=BUDGET_PART,
    change={"speedup": ("elementwise", "reduction", "normalization")},  # the replay change priced (program.py)
    advice=ADVICE,
)


def short_chains(analysis):
    """The chains this check speaks for: those of fewer single operations than unfused-elementwise's chains hold
    (normalize.work.Chains.under), where one of them holds a normalization; none where none does."""
    short = analysis.chains.under(unfused_elementwise.CHECK.thresholds["min_ops"].default)
    return short if (short.norms > 0).any() else short._where(np.zeros(len(short), dtype=bool))


# BatchNorm in a model without convolutions (an MLP, a graph network: a user read of blind73_gcn was shown ResNet-50
# and "fold BatchNorm into the convolution"): the batch kind's text when the window runs no convolution kernel
BATCH_WITHOUT_CONV = ("batch", BY_KIND[0][1], """
- BatchNorm after a linear layer (an MLP, a graph network): in inference, fold it into the `nn.Linear`
  before it (its weight and bias scaled); in training, `torch.compile` of the model, or LayerNorm where the
  model allows.

```python
# before: the linear layer's bias, batch_norm, relu and the residual add each a kernel over the activations
h = h + torch.relu(self.norm(self.lin(h)))
# after: the model compiled, the elementwise work inside the normalization's passes
model = torch.compile(model)
```""")
# Convolution kernels by name: cuDNN's (`fprop`, `dgrad`, `wgrad`, `implicit_gemm`, `convolve`, Winograd), PyTorch's
# own (`conv2d_...`, `conv_depthwise...`); not `convert`
CONVOLUTION = re.compile(r"convol|conv\d?d|conv_|fprop|dgrad|wgrad|implicit_?gemm|winograd", re.IGNORECASE)


def advice_for(names: list[str], convolutions: bool = True) -> str:
    """The advice with what else to do for the normalizations the chains hold, by their kernels' names (most
    launched first): the kinds found, in that order; all of them where none is recognised. BatchNorm's text is
    BATCH_WITHOUT_CONV where the window runs no convolution."""
    by_kind = BY_KIND if convolutions else (BATCH_WITHOUT_CONV, *BY_KIND[1:])
    kinds = []
    for name in names:
        kind = next((k for k in by_kind if k[1].search(name or "")), None)
        if kind is not None and kind not in kinds:
            kinds.append(kind)
    return COMPILE + "\n".join(text for _, _, text in (kinds or by_kind))


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    window_ns = timeline.summary.span_ns or 0
    if analysis is None or not window_ns:
        return None
    chains = short_chains(analysis).on_busiest_device()
    beyond = chains.ns - chains.longest_ns
    norm = chains.norms > 0
    if not norm.any() or float(beyond[norm].sum()) / window_ns < limits.min_share:
        return None
    savings = float(beyond.sum())
    others, others_ns = int((~norm).sum()), float(beyond[~norm].sum())
    chain_ns = float(chains.ns.sum())
    steps = step_count(timeline)
    count = f"{norm.sum() / steps:.0f} runs of kernels a step" if steps else plural(int(norm.sum()), "run") + " of kernels"
    several = len(set(analysis.chains.device.tolist())) > 1
    on_gpu = f" on GPU {chains.device[0]} (the GPU where they take most)" if several else ""
    each = time_per_step(steps)
    runs = (f"{others / steps:.0f} other short runs a step" if steps else plural(others, "other short run")) + \
        " between the matrix products"
    with_others = f" and {runs}" if others_ns >= OTHERS_TITLED * savings else ""
    ops_mean = float(chains.ops[norm].sum()) / int(norm.sum())
    common = chains.launches_by_name()[:5]
    norm_names = [analysis.names.get(i) for i, _ in chains._where(norm).launches_by_name()]
    finding = Finding(
        check=ID,
        title=f"Normalization runs apart from the elementwise work beside it: {count}{on_gpu} around a "
              f"normalization ({ops_mean:.1f} elementwise or reduction kernels each){with_others} make "
              f"{each(chain_ns)} of passes over the activations, {each(savings)} more than one pass each; "
              "torch.compile fuses them",
        estimated_speedup=0.0,
        evidence={"chains": evidence(len(chains)),
                  "normalization_chains": evidence(int(norm.sum())),
                  "chain_ops_mean": evidence(ops_mean),
                  "chain_ns": evidence(chain_ns, unit="ns"),
                  "elementwise_ns": evidence(float(chains.ops_ns.sum()), unit="ns"),
                  "beyond_one_pass_ns": evidence(savings, unit="ns"),
                  "other_chains": evidence(others),
                  "other_beyond_one_pass_ns": evidence(others_ns, unit="ns"),
                  "saving_share": evidence(savings / window_ns, limits.min_share, unit="ratio"),
                  "kernels": [{"name": analysis.names.get(i), "launches_in_chains": n} for i, n in common]},
        advice=advice_for(norm_names, any(CONVOLUTION.search(f"{k.name or ''} {k.demangled or ''}")
                                          for k in analysis.by_kernel)),
    )
    finding.estimated_savings_ns = savings
    return finding
