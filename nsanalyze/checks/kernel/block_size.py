"""Blocks whose size wastes warp lanes.

## What it detects
A block size that is not a multiple of the warp size (32 threads): the last warp of every block
runs with lanes switched off. 1-thread blocks use 1 lane in 32.

## Why it is slow
The SM schedules whole warps. A 1-thread block occupies a warp slot (and a block slot) for 1/32 of
the work; a 48-thread block wastes 16 lanes of its second warp on every instruction.

## Example
```cuda
scale<<<n, 1>>>(x);            // one thread per block
```

## Instead
```cuda
scale<<<(n + 255) / 256, 256>>>(x, n);   // 256 threads: 8 full warps, guard the tail with if (i < n)
```

The empty lanes cost time only when the warps compete for the schedulers: a launch with no more
warps than the GPU has schedulers (four per SM), or a kernel whose time is one long chain of
instructions per warp (printf, a serial loop), runs as fast with full warps: no finding.

## Known problems
Kernels that launch a single block on purpose (a final reduction) are cheap; rank by time decides.

The saving scales with the schedulers' issue-slot use. A report without it (nor the SM throughput
that stands in for it) does not say how much the empty lanes cost: the finding then names the block
size, saves nothing (info) and notes what would measure it, rather than assume a busy scheduler.

## Options
- `min_wasted_lanes`: wasted lane share before the check speaks.
"""

import math

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, busy_scaled, scheduler_busy, evidence

ID = "block-size"
SCHEDULERS_PER_SM = 4
ADVICE = """Use a block size that is a multiple of 32 (128-256 threads is a good default).

```cuda
// before
kernel<<<n, 1>>>(x);
// after
kernel<<<(n + 127) / 128, 128>>>(x, n);   // if (i < n) guards the tail
```"""

CHECK = Check(
    id=ID,
    name="scheduling.block.size",
    title="Block size wastes warp lanes",
    section="kernel",
    requires=("block_size",),
    optional=("grid_size", "sm_count", "issue_active_pct", "sm_throughput_pct"),
    collect="--section LaunchStats",
    relieves=None,
    thresholds={"min_wasted_lanes": Threshold(0.10, "a tenth of every warp's lanes idle is worth a one-line change")},
    speedup_model=("the share of warp lanes the block size leaves empty (1 - threads / (warps x 32)) times the "
                   "schedulers' issue-slot use (else the SM throughput); nothing when the launch has no more warps than the GPU "
                   "has schedulers; without either measured, no savings (info) and a note naming what measures them"),
    advice=ADVICE,
)


def run(kernel: KernelView, limits) -> Finding | None:
    threads = kernel.get("block_size")
    if not threads:
        return None
    lanes = math.ceil(threads / 32) * 32
    wasted = 1 - threads / lanes
    if wasted < limits["min_wasted_lanes"]:
        return None
    grid, sms = kernel.get("grid_size"), kernel.get("sm_count")
    warps = grid * lanes / 32 if grid else None
    if warps is not None and sms and warps <= sms * SCHEDULERS_PER_SM:
        return None  # every warp has a scheduler to itself: fuller warps would not finish sooner
    issue, issue_by = scheduler_busy(kernel)
    speedup, notes = busy_scaled(wasted, issue, "the report measures neither the schedulers' issue-slot use "
                                 "(issue_active_pct) nor the SM throughput that say how much the empty lanes cost; "
                                 "ncu --section SchedulerStats (or --section SpeedOfLight) measures them")
    return Finding(
        check=ID,
        title=f"{threads:.0f}-thread blocks fill {threads / lanes:.0%} of their warps' lanes "
              f"(block size not a multiple of 32)",
        estimated_speedup=speedup,
        evidence={"block_size": evidence(threads, unit="threads"),
                  "wasted_lane_share": evidence(wasted, limits["min_wasted_lanes"], unit="ratio"),
                  "grid_size": evidence(grid, unit="blocks"),
                  "warps_launched": evidence(warps, (sms or 0) * SCHEDULERS_PER_SM or None, unit="warps"),
                  issue_by: evidence(issue, unit="%")},
        advice=ADVICE,
        notes=notes,
    )
