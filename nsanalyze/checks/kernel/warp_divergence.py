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

## Options
- `max_warp_efficiency`: active threads per instruction over 32, below which the check speaks.
"""

from nsanalyze.checks.base import Finding, KernelView, Threshold, clamp01, evidence

ID = "warp-divergence"
NAME = "compute.control.divergence"
TITLE = "Warp divergence"
SECTION = "kernel"  # the report section its findings appear in
REQUIRES = ("warp_execution_efficiency",)
OPTIONAL = ("issue_active_pct", "divergent_branches", "branch_uniform_pct")
COLLECT = "--set full (InstructionStats and SourceCounters sections)"
RELIEVES = "compute"
THRESHOLDS = {
    "max_warp_efficiency": Threshold(0.70, "below 70% (22 of 32 threads) divergence costs more than bounds "
                                           "checks and grid tails ever do"),
}
SPEEDUP_MODEL = ("(1 - warp execution efficiency) times the scheduler's issue-slot use: masked lanes cost "
                 "time in proportion to how much the kernel is bound by instruction issue")
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


def run(kernel: KernelView, limits) -> Finding | None:
    efficiency = kernel.get("warp_execution_efficiency")
    if efficiency >= limits["max_warp_efficiency"]:
        return None
    issue = kernel.get("issue_active_pct")
    issue_share = clamp01(issue / 100.0) if issue is not None else 0.5
    facts = {"warp_execution_efficiency": evidence(efficiency, limits["max_warp_efficiency"], unit="ratio", compare="<"),
             "threads_per_instruction": evidence(kernel.get("threads_per_instruction"), unit="threads"),
             "issue_active_pct": evidence(issue, unit="%")}
    if kernel.get("divergent_branches") is not None:
        facts["divergent_branches"] = evidence(kernel.get("divergent_branches"))
    return Finding(
        check=ID,
        title=f"Only {efficiency * 32:.1f} of 32 threads active per instruction: warps diverge",
        estimated_speedup=clamp01((1 - efficiency) * issue_share),
        evidence=facts,
        advice=ADVICE,
        source=kernel.top_spots("smsp__branch_targets_threads_divergent"),
    )
