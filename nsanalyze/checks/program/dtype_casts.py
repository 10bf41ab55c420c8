"""Number-format casts take a large share of the GPU's time.

## What it detects
The work split's `cast` time (PyTorch's `bfloat16_copy_kernel`, `_to_copy`, copies that load or store with
a cast, quantize and dequantize kernels, by name) when it holds a large share of the GPU's kernel time.
Under autocast every fp32 weight is cast to bf16 or fp16 in each forward pass, and tensors cross precisions
at the operations autocast keeps in fp32 (`.float()` of the logits before the loss, a norm's input).

## Why it is slow
A cast does no math: it reads a tensor and writes it again in another format, a pass through memory per
cast. Weights re-cast every step and activations upcast by hand move the same bytes again and again.

## Example
```python
with torch.autocast("cuda", dtype=torch.bfloat16):
    logits = model(x)                       # every fp32 weight cast to bf16, every step
    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))   # the whole logits written again in fp32
```

## Instead
```python
with torch.autocast("cuda", dtype=torch.bfloat16):
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, V), y.view(-1))   # autocast runs the loss in fp32 itself
# and: torch.compile(model) fuses casts into the kernels beside them; a bf16 model with fp32 master
# weights in the optimizer (FSDP MixedPrecision, a mixed-precision optimizer) casts each weight once a step
```

## Known problems
Which casts a change removes depends on the code: weights, activations at precision boundaries, the loss.
The saving is not measured: the finding gives the casts' time, the most any change of them can save, as the
time at stake, and saves nothing in the ranking until a change is measured (`nsanalyze diff` of the two runs).

## Options
- `min_share`: the cast kernels' share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, size_text
from nsanalyze.checks.program._roles import kernel_rows, role_time
from nsanalyze.numbers import duration_text

ID = "dtype-casts"
ADVICE = """Cast less: once a step, or inside the kernels that use the values.

- Leave precision to autocast: no `.float()` / `.half()` round trips of large activations (autocast
  already runs the losses and norms that need fp32 in fp32).
- `torch.compile(model)` fuses casts into the element-wise kernels beside them.
- Keep the model's weights in bf16 with fp32 master weights in the optimizer (FSDP's `MixedPrecision`,
  a mixed-precision optimizer): each weight is cast once a step, not in every forward.
- Measure the change with `nsanalyze diff` of the runs before and after.

```python
# before
loss = F.cross_entropy(model(x).float().view(-1, V), y.view(-1))
# after
loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
```"""

CHECK = Check(
    id=ID,
    name="program.work.dtype_casts",
    title="Number-format casts take a large share of GPU time",
    section="work",
    requires=("work",),
    thresholds={
        "min_share": Threshold(0.05, "casts over 5% of the GPU's kernel time are more than the weights' one cast a "
                                     "step: worth a look at where the program crosses precisions"),
    },
    speedup_model="not estimated: the casts' time is the time at stake, the most a change of them saves",
    budget_part=None,   # it saves nothing measured: no part of the budget to share with the others
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    casts = role_time(timeline, "cast", limits.min_share)
    if casts is None:
        return None
    cast_ns = casts.ns
    facts = {"cast_ns": evidence(cast_ns, unit="ns"),
             "cast_share": evidence(casts.window_share, limits.min_share, unit="ratio"),   # of the GPUs' window
             "cast_kernel_share": evidence(casts.kernel_share, unit="ratio"),   # of GPU kernel time: the title's
             "launches": evidence(casts.launches)}
    if casts.dram_bytes is not None:
        facts["dram_bytes"] = evidence(casts.dram_bytes, unit="byte")
    return Finding(
        check=ID,
        # summed over the GPUs, and said so (mfu_2gpu_before: 45.1 ms of two GPUs beside a finding of one, a user read)
        title=f"Number-format casts take {casts.kernel_share:.0%} of GPU kernel time ({duration_text(cast_ns)}"
              f"{f' over {len(timeline.devices)} GPUs' if len(timeline.devices or ()) > 1 else ''} in "
              f"{plural(casts.launches, 'launch')}"
              + (f", {size_text(facts['dram_bytes']['value'])} moved" if "dram_bytes" in facts else "")
              + "): passes through memory that do no math",
        estimated_speedup=0.0,
        evidence={**facts, "kernels": kernel_rows(casts.kernels)},
        advice=ADVICE,
        notes=[f"saving not measured: which casts a change removes depends on the code; {duration_text(cast_ns)}, the "
               "casts' time, is the time at stake (the most it can save)"],
    )
