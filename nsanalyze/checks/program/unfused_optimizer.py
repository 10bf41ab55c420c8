"""The optimizer step runs as many passes over the parameters (foreach), not one fused kernel.

## What it detects
The work split's `optimizer` time (PyTorch's `multi_tensor_apply_kernel` and `_foreach_` kernels, by name)
when it holds a large share of the GPU's kernel time and runs as several distinct kernels, none of them a
fused optimizer's (`fused=True`'s `FusedAdamMathFunctor`, apex's `multi_tensor_adam`): AdamW with
`foreach=True`, PyTorch's default on CUDA, is eight or so element-wise passes (`mul`, `lerp`, `addcmul`,
`sqrt`, `div`, `add`, `addcdiv`) over every parameter, gradient and moment.

## Why it is slow
Each pass reads and writes whole parameter-sized tensors: the step moves the optimizer state through DRAM
several times, and a pass's intermediate (the denominator `sqrt(v) / bias + eps`) is written out and read
back. A fused optimizer reads each parameter, gradient and moment once and writes them once.

## Example
```python
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)              # foreach: a pass per operation
```

## Instead
```python
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)  # one kernel over all parameters
```

## Known problems
The saving is measured only where the report has the kernels' DRAM bytes (an ncu report): the time the
optimizer kernels take beyond moving the same bytes at the best DRAM rate one of them reached. The bytes a
fused step no longer moves are not counted (a fused step moves fewer), so this is the least it saves at that
rate. An nsys export has no bytes: the finding gives the time at stake and says the saving is not measured.
Optimizers written as Python loops (one element-wise kernel per tensor per operation) are not recognized as
the optimizer's.

## Options
- `min_share`: the optimizer kernels' share of the window before the check speaks.
- `min_passes`: distinct optimizer kernels (passes over the state) before the step counts as unfused.
"""

import re

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, size_text
from nsanalyze.checks.program._roles import kernel_rows, role_time
from nsanalyze.numbers import duration_text

ID = "unfused-optimizer"
BUDGET_PART = "gpu_compute"
# A fused optimizer's kernels, as PyTorch (fused=True), apex and DeepSpeed name them: already one pass.
FUSED = re.compile(r"fused|AdamFunctor|LAMBStage|multi_tensor_(?:adam|lamb|sgd)|adam_kernel|lamb_kernel|sgd_kernel",
                   re.I)
ADVICE = """Fuse the optimizer step into one pass over the parameters.

- `torch.optim.AdamW(params, ..., fused=True)` (also Adam, SGD, Adagrad): one kernel reads each
  parameter, gradient and moment once and writes them once.
- With apex or DeepSpeed, their fused optimizers (`FusedAdam`) do the same.
- `torch.compile` of the optimizer step (`torch.compile(opt.step)`) fuses the foreach passes too.

```python
# before: foreach, about eight passes over the state
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
# after: one fused kernel
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
```"""

CHECK = Check(
    id=ID,
    name="program.work.unfused_optimizer",
    title="Optimizer step as many passes over the parameters",
    section="work",
    requires=("work",),
    thresholds={
        "min_share": Threshold(0.05, "an optimizer step over 5% of the GPU's kernel time is worth one flag; a fused step "
                                     "of a large model still takes a few percent"),
        "min_passes": Threshold(3.0, "a fused optimizer is one kernel per step (or one per dtype); foreach AdamW is "
                                     "eight distinct element-wise kernels"),
    },
    speedup_model=("the optimizer kernels' time less the time their DRAM bytes take at the best rate one of them "
                   "reached (the least a fused pass at that rate saves; it moves fewer bytes), where the bytes are "
                   "measured; not estimated otherwise"),
    budget_part=BUDGET_PART,
    change={"speedup": ("optimizer",)},  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    optimizer = role_time(timeline, "optimizer", limits.min_share)
    if optimizer is None:
        return None
    kernels, optimizer_ns = optimizer.kernels, optimizer.ns
    if any(FUSED.search(k.demangled or k.name or "") for k in kernels):
        return None  # a fused optimizer's kernels: the step is one pass already
    passes = len({k.demangled or k.name for k in kernels})
    if passes < limits.min_passes:
        return None
    facts = {"optimizer_ns": evidence(optimizer_ns, unit="ns"),
             "optimizer_share": evidence(optimizer.window_share, limits.min_share, unit="ratio"),
             "distinct_kernels": evidence(passes, limits.min_passes, compare=">="),
             "launches": evidence(optimizer.launches)}
    notes, savings = [], 0.0
    if optimizer.dram_bytes is not None and all(k.ns > 0 for k in kernels):
        moved = optimizer.dram_bytes
        best = max(kernels, key=lambda k: k.dram_bytes / k.ns)
        rate = best.dram_bytes / best.ns   # bytes per ns = GB/s
        streamed_ns = moved / rate if rate > 0 else optimizer_ns
        savings = max(0.0, min(optimizer_ns, optimizer_ns - streamed_ns))
        facts |= {"dram_bytes": evidence(moved, unit="byte"), "best_dram_rate_gbps": evidence(rate, unit="GB/s"),
                  "streamed_ns": evidence(streamed_ns, unit="ns")}
        notes.append(f"the optimizer kernels moved {size_text(moved)} through DRAM; at the best rate one of them reached "
                     f"({rate / 1e3:.2f} TB/s) those bytes take {duration_text(streamed_ns)}: a fused step at that rate "
                     f"saves at least the {duration_text(savings)} left of their {duration_text(optimizer_ns)} (it "
                     "moves fewer bytes: the state once, not once a pass; that gain is not counted)")
    else:
        notes.append(f"saving not measured: the optimizer kernels' DRAM bytes are not in this profile (an ncu report "
                     f"of the step, --section MemoryWorkloadAnalysis, measures them); {duration_text(optimizer_ns)} "
                     "is the time at stake")
    finding = Finding(
        check=ID,
        title=f"The optimizer step runs as {plural(passes, 'distinct kernel')} ({plural(optimizer.launches, 'launch')}"
              f", foreach passes over the parameters) taking {optimizer.kernel_share:.0%} of GPU kernel time ({duration_text(optimizer_ns)}); "
              "use a fused optimizer (fused=True)",
        estimated_speedup=0.0,
        evidence={**facts, "kernels": kernel_rows(kernels)},
        advice=ADVICE,
        notes=notes,
    )
    finding.estimated_savings_ns = savings
    return finding
