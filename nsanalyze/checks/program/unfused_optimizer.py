"""The optimizer step runs as many passes over the parameters (foreach), or as a loop of launches over them
(a Python loop, foreach=False), not one fused kernel.

## What it detects
The work split's `optimizer` kernels (PyTorch's `multi_tensor_apply_kernel` and `_foreach_` kernels by name;
under PyTorch's annotations, every kernel launched inside an `Optimizer.step#` range), none of them a fused
optimizer's (`fused=True`'s `FusedAdamMathFunctor`, apex's `multi_tensor_adam`), as one of two costs:
- **a loop of launches**: the step launches many optimizer kernels a step and their launch paths on the host
  (the framework's dispatch and the launch call, each) take longer than the kernels themselves: AdamW with
  `foreach=False` launches eight or so element-wise kernels for every parameter tensor, each shorter than its
  launch, and the GPU waits on them;
- **passes over the state**: the optimizer kernels hold a large share of the GPU's kernel time as several
  distinct kernels: AdamW with `foreach=True`, PyTorch's default on CUDA, is eight or so element-wise passes
  (`mul`, `lerp`, `addcmul`, `sqrt`, `div`, `add`, `addcdiv`) over every parameter, gradient and moment.

## Why it is slow
A loop pays a launch (tens of microseconds of host time in PyTorch's eager dispatch) for each parameter and
operation: on a model of many small tensors the step waits on the host. Each pass reads and writes whole
parameter-sized tensors: the step moves the optimizer state through DRAM several times, and a pass's
intermediate (the denominator `sqrt(v) / bias + eps`) is written out and read back. A fused optimizer is one
launch per parameter group that reads each parameter, gradient and moment once and writes them once.

## Example
```python
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)  # a loop: launches per tensor
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)                 # foreach: a pass per operation
```

## Instead
```python
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)  # one kernel over all parameters
```

## Known problems
A loop's saving is the replay of the steps with the optimizer's kernels launched as one fused pass (their
launch paths gone from the host, their GPU time kept: `nsanalyze whatif --fuse optimizer`), capped by the
host time of those launch paths; its budget part is `idle_launch`, the GPU's wait on launches. A fused
kernel moves fewer bytes than the loop's passes: not counted. Graphing the whole step (launch-overhead)
removes these launches too: where both speak, this finding's saving is counted within launch-overhead's.
Only the launches PyTorch's annotations or the kernels' names tell apart are the optimizer's: a loop written
in Python launches generic element-wise kernels that no name tells from the model's, so in a training step
(backward kernels) recorded without the annotations (`nsys profile --pytorch=autograd-nvtx`) and with no
optimizer kernel by name, the check says it could not judge (not_judged) rather than guess.
Passes' saving is measured only where the report has the kernels' DRAM bytes (an ncu report): the time the
optimizer kernels take beyond moving the same bytes at the best DRAM rate one of them reached. The bytes a
fused step no longer moves are not counted (a fused step moves fewer), so this is the least it saves at that
rate. An nsys export has no bytes: the finding gives the time at stake and says the saving is not measured.

## Options
- `min_share`: the optimizer kernels' share of the window before the check speaks of passes.
- `min_passes`: distinct optimizer kernels (passes over the state) before the step counts as unfused.
- `min_launches_per_step`: optimizer launches a step before the step counts as a loop of launches.
- `min_launch_share`: the host time of those launches' paths, as a share of the median step, before the
  check speaks of a loop.
"""

import re

from nsanalyze.checks.base import Check, Finding, NotJudged, Threshold, evidence, plural, size_text
from nsanalyze.checks.program._claims import unclaimed_part
from nsanalyze.checks.program._roles import kernel_rows, role_time
from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize.waits import BACKWARD
from nsanalyze.numbers import duration_text

ID = "unfused-optimizer"
BUDGET_PART = "gpu_compute"     # passes over the state: GPU time
LOOP_PART = "idle_launch"       # a loop of launches: the GPU's wait on them (the finding's own budget part)
ROLE = ("optimizer",)
PASSES_CHANGE = {"speedup": ROLE}   # the optimizer's kernels faster by the share the bytes say
LOOP_CHANGE = {"fuse": ROLE}        # their launch paths gone, their GPU time kept (whatif --fuse optimizer)
# PyTorch's autograd kernels carry the word in their names (normalize.waits.BACKWARD): a step with them trains, and
# so has an optimizer somewhere
# A fused optimizer's kernels, as PyTorch (fused=True), apex and DeepSpeed name them: already one pass.
FUSED = re.compile(r"fused|AdamFunctor|LAMBStage|multi_tensor_(?:adam|lamb|sgd)|adam_kernel|lamb_kernel|sgd_kernel",
                   re.I)
ADVICE = """Fuse the optimizer step into one pass over the parameters.

- `torch.optim.AdamW(params, ..., fused=True)` (also Adam, SGD, Adagrad): one kernel reads each
  parameter, gradient and moment once and writes them once.
- A loop over the parameters (`foreach=False`, or one written by hand) launches several kernels a
  tensor, each shorter than its launch: `fused=True` makes them a few launches a step.
- With apex or DeepSpeed, their fused optimizers (`FusedAdam`) do the same.
- `torch.compile` of the optimizer step (`torch.compile(opt.step)`) fuses the foreach passes too.

```python
# before: foreach, about eight passes over the state (foreach=False: eight launches a tensor)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
# after: one fused kernel
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
```"""

CHECK = Check(
    id=ID,
    name="program.work.unfused_optimizer",
    title="Optimizer step as many passes or launches over the parameters",
    section="work",
    requires=("work",),
    thresholds={
        "min_share": Threshold(0.05, "an optimizer step over 5% of the GPU's kernel time is worth one flag; a fused step "
                                     "of a large model still takes a few percent"),
        "min_passes": Threshold(3.0, "a fused optimizer is one kernel per step (or one per dtype); foreach AdamW is "
                                     "eight distinct element-wise kernels"),
        "min_launches_per_step": Threshold(
            100.0, "a fused AdamW launches 6-8 kernels a step (opt_fused, fp32), foreach AdamW one per operation and list "
                   "of tensors (alloc_cached: 82 a step); a loop over the parameters launches about 8 a tensor (opt_loop_annot: "
                   "1,024 a step for 128 tensors)"),
        "min_launch_share": Threshold(
            0.05, "the optimizer's launch paths over 5% of the median step are worth one flag, as its kernels' time is "
                  "(min_share): the loop's 1,024 launches take 21.1 ms of opt_loop_annot's 43.8 ms step (48%); foreach "
                  "AdamW's 82 take 1.04 ms of alloc_cached's 12.9 ms (8%), less than its kernels' 4.28 ms: passes, not "
                  "a loop"),
    },
    speedup_model=("a loop of launches: the replay of the steps with the optimizer's kernels launched as one fused pass "
                   "(their launch paths gone, their GPU time kept), capped by those paths' host time, drawn from "
                   "idle_launch; passes: the optimizer kernels' time less the time their DRAM bytes take at the best "
                   "rate one of them reached (the least a fused pass at that rate saves; it moves fewer bytes), where "
                   "the bytes are measured; not estimated otherwise"),
    budget_part=BUDGET_PART,
    change=PASSES_CHANGE,  # the replay change priced (program.py); a loop's finding states LOOP_CHANGE
    replaces_roles=("optimizer",),   # fused=True: one kernel a pass takes the foreach kernels' work
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | NotJudged | None:
    optimizer = role_time(timeline, "optimizer")
    if optimizer is None:
        return _not_told_apart(timeline)
    kernels, optimizer_ns = optimizer.kernels, optimizer.ns
    if any(FUSED.search(k.demangled or k.name or "") for k in kernels):
        return None  # a fused optimizer's kernels: the step is one pass already
    passes = len({k.demangled or k.name for k in kernels})
    loop = _loop(timeline, optimizer, passes, limits)   # a loop is told by its launches, whatever its passes
    if loop is not None:
        return loop
    if passes < limits.min_passes or optimizer.window_share < limits.min_share:
        return None
    return _passes(optimizer, passes, limits)


def _not_told_apart(timeline) -> NotJudged | None:
    """A training step (autograd's backward kernels) of an nsys export with no optimizer kernel by name nor by
    annotated range: a loop written in Python launches generic element-wise kernels that nothing tells from the
    model's, so whether the step has an unfused optimizer is not measured: said, not guessed."""
    analysis = timeline.work_analysis
    if getattr(timeline, "steps", None) is None or analysis is None:
        return None
    if not any(BACKWARD.search(k.demangled or k.name or "") for k in analysis.by_kernel):
        return None
    return NotJudged(ID, None, ["optimizer_kernels"],
                     "nsys profile --pytorch=autograd-nvtx (an Optimizer.step# range marks the optimizer's launches "
                     "of a loop written in Python; foreach and fused optimizers are known by their kernels' names)")


def _loop(timeline, optimizer, passes: int, limits) -> Finding | None:
    """The optimizer as a loop of launches: many a step, whose launch paths on the host (measured on the replayed
    steps around the median) take over min_launch_share of the median step and longer than its kernels."""
    block = getattr(timeline, "step_block", None)
    steps = getattr(timeline, "steps", None)
    if block is None or steps is None or not steps.count or not steps.median_ns:
        return None
    graph = block.graph
    replayed = max(len(graph.step_first_op), 1)
    launches = float((cp.role_mask(graph, ROLE) & (graph.o_call >= 0)).sum()) / replayed
    path_ns = cp.dropped_host_ns_per_step(block, ROLE)
    kernel_ns = cp.kernel_ns_per_step(block, ROLE)
    share = path_ns / steps.median_ns
    if launches < limits.min_launches_per_step or share < limits.min_launch_share or path_ns <= kernel_ns:
        return None
    idle_ns, _ = unclaimed_part(timeline, LOOP_PART) if timeline.budget else (0.0, 0.0)
    own = min(path_ns * steps.count, idle_ns) if timeline.budget else path_ns * steps.count
    finding = Finding(
        check=ID,
        title=f"The optimizer step is a loop of {launches:,.0f} launches a step ({plural(passes, 'distinct kernel')}, "
              f"none fused): their launch paths take {duration_text(path_ns)} of host time a step, {share:.0%} of the "
              f"median step, for {duration_text(kernel_ns)} of GPU work; use a fused optimizer (fused=True)",
        estimated_speedup=0.0,
        evidence={"launches_per_step": evidence(launches, limits.min_launches_per_step, compare=">="),
                  "launch_path_ns_per_step": evidence(path_ns, unit="ns"),
                  "launch_path_share": evidence(share, limits.min_launch_share, unit="ratio", compare=">="),
                  "optimizer_kernel_ns_per_step": evidence(kernel_ns, unit="ns"),
                  "optimizer_ns": evidence(optimizer.ns, unit="ns"),
                  "distinct_kernels": evidence(passes),
                  "launches": evidence(optimizer.launches),
                  "kernels": kernel_rows(optimizer.kernels)},
        advice=ADVICE,
        notes=[f"a loop of launches: the optimizer's {launches:,.0f} launches a step (on the {replayed} replayed steps "
               f"around the median) cost the host {duration_text(path_ns)} a step (each launch's dispatch and call), "
               f"more than their {duration_text(kernel_ns)} on the GPU; fused, they are a few launches and the kernels' "
               "time stays (a fused pass moves fewer bytes: not counted)"],
    )
    finding.estimated_savings_ns = own   # the replay of LOOP_CHANGE prices it (rank.settle_program_findings)
    finding.change = LOOP_CHANGE
    finding.budget_part = LOOP_PART
    return finding


def _passes(optimizer, passes: int, limits) -> Finding:
    """The optimizer as passes over the state: its GPU time, its saving measured from the kernels' DRAM bytes."""
    kernels, optimizer_ns = optimizer.kernels, optimizer.ns
    facts = {"optimizer_ns": evidence(optimizer_ns, unit="ns"),
             "optimizer_share": evidence(optimizer.window_share, limits.min_share, unit="ratio"),   # of the window
             "optimizer_kernel_share": evidence(optimizer.kernel_share, unit="ratio"),   # of GPU kernel time: the title's
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
