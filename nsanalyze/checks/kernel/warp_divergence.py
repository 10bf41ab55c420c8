"""Warp divergence.

## What it detects
Warps whose instructions run with few of their 32 threads active, because threads of one warp
took different sides of a branch (or a switch on the lane index).

## Why it is slow
A warp executes each path of a divergent branch one after another with the other threads
masked off: a four-way switch on the lane runs four times the instructions for the same work.

## Example
```cuda
switch (threadIdx.x % 4) { case 0: a(); break; case 1: b(); break; case 2: c(); break; default: d(); }
```

## Instead
```cuda
switch ((threadIdx.x / 32) % 4) { ... }   // decide per warp, not per lane
```

## Known problems
Predicated-off instructions from bounds checks also lower the ratio; short tails at the end of a
grid are harmless.

Lanes a block never fills are not divergence: a 1-thread block runs 1 of 32 lanes on every
instruction however uniform its branches. The efficiency is judged against the share of lanes the
block size fills (block-size speaks for the rest), so one cause gives one finding.

The saving scales with the schedulers' issue-slot use (else the SM throughput); a report without
either does not say what the masked lanes cost: the finding then saves nothing (info) and notes
what would measure it.

## Options
- `max_warp_efficiency`: active threads per instruction over 32, below which the check speaks.
"""

import math

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, busy_scaled, scheduler_busy, clamp01, evidence, plural

ID = "warp-divergence"
ADVICE = """Make the threads of each warp take the same path.

- Branch on values that are uniform per warp (`threadIdx.x / 32`, `blockIdx`), not on the lane.
- Sort or bin work items by the branch they take so that each warp gets one kind.
- Replace small branches with arithmetic or `select` (the compiler predicates short bodies).

```cuda
// before: four paths inside every warp
switch (threadIdx.x % 4) { case 0: ...; case 1: ...; }
// after: one path per warp
switch ((threadIdx.x / warpSize) % 4) { case 0: ...; case 1: ...; }
```"""

CHECK = Check(
    id=ID,
    name="compute.control.divergence",
    title="Warp divergence",
    section="kernel",
    requires=("warp_execution_efficiency",),
    optional=("issue_active_pct", "sm_throughput_pct", "divergent_branches", "branch_uniform_pct", "block_size"),
    collect="--set full (InstructionStats and SourceCounters sections)",
    relieves="compute",
    thresholds={
        "max_warp_efficiency": Threshold(0.70, "below 70% (22 of 32 threads) divergence costs more than bounds "
                                               "checks and grid tails ever do"),
    },
    speedup_model=("(1 - warp execution efficiency / the lane share the block size fills) times the scheduler's "
                   "issue-slot use (else the SM throughput): masked lanes cost time in proportion to how much the kernel "
                   "is bound by instruction issue; lanes the block never fills are block-size's; without an issue or "
                   "throughput measure, no savings (info) and a note"),
    advice=ADVICE,
)


def _block_fill(kernel: KernelView) -> float:
    """The share of its warps' lanes a block fills (1.0 for a multiple of 32 threads, 1/32 for one thread):
    the most of 32 threads an instruction can have active without any divergence."""
    threads = kernel.get("block_size")
    if not threads or threads <= 0:
        return 1.0
    return threads / (math.ceil(threads / 32) * 32)


def run(kernel: KernelView, limits) -> Finding | None:
    measured = kernel.get("warp_execution_efficiency")
    fill = _block_fill(kernel)
    efficiency = clamp01(measured / fill)  # of the lanes the block fills: the rest is the block size, not branches
    if efficiency >= limits["max_warp_efficiency"]:
        return None
    issue, issue_by = scheduler_busy(kernel)
    speedup, notes = busy_scaled(1 - efficiency, issue, "the report measures neither the schedulers' issue-slot "
                                 "use (issue_active_pct) nor the SM throughput that say how much the masked lanes "
                                 "cost; ncu --section SchedulerStats (or --section SpeedOfLight) measures them")
    facts = {"warp_execution_efficiency": evidence(efficiency, limits["max_warp_efficiency"], unit="ratio", compare="<"),
             "threads_per_instruction": evidence(kernel.get("threads_per_instruction"), unit="threads"),
             issue_by: evidence(issue, unit="%")}
    if fill < 1.0:
        facts["measured_warp_execution_efficiency"] = evidence(measured, unit="ratio")
        facts["block_lane_share"] = evidence(fill, unit="ratio")
        notes.append(f"judged against the {fill * 32:.0f} of 32 lanes its {kernel.get('block_size'):.0f}-thread "
                     "blocks fill: the empty lanes are the block size's (block-size), not divergence")
    if kernel.get("divergent_branches") is not None:
        facts["divergent_branches"] = evidence(kernel.get("divergent_branches"))
    lanes = f"{measured * 32:.1f} of the {plural(round(fill * 32), 'thread')} its blocks fill" if fill < 1.0 else \
        f"{measured * 32:.1f} of 32 threads"
    return Finding(
        check=ID,
        title=f"Only {lanes} active per instruction: warps diverge",
        estimated_speedup=speedup,
        evidence=facts,
        advice=ADVICE,
        source=kernel.top_spots("smsp__branch_targets_threads_divergent"),
        notes=notes,
    )
