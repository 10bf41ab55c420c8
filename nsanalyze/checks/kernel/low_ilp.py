"""Latency-bound: too little independent work in flight.

## What it detects
A kernel far below both its compute and its memory roof whose warps mostly wait on the result
of an earlier instruction (long and short scoreboard, wait stalls), with almost no warp ready
to issue: dependent loads, pointer chasing, serial reductions.

## Why it is slow
Each dependent load waits its full latency (hundreds of cycles from DRAM) before the next can
start. When nothing else is ready, the scheduler idles and the GPU does a fraction of the work
it could.

## Example
```cuda
for (int s = 0; s < steps; ++s) p = next[p];    // one load in flight per thread
```

## Instead
```cuda
for (int s = 0; s < steps; ++s) {               // four independent chains per thread
    p0 = next[p0]; p1 = next[p1]; p2 = next[p2]; p3 = next[p3];
}
```

## Known problems
Atomic-heavy kernels look the same; the check leaves them to `atomic-contention`.

## Options
- `max_roof_share`: speed of light below which a kernel counts as latency-bound.
- `max_eligible_warps`: ready warps per scheduler below which issue starves.
- `min_dependency_stall_share`: share of warp latency spent on dependencies.
- `target_roof_share`: where a latency fix is expected to stop (the roofs in practice).
- `min_theoretical_occupancy_pct`: below this the launch itself caps the warps: low-occupancy instead.
"""

from nsanalyze.checks.base import Finding, KernelView, Threshold, clamp01, evidence, roof_share, unjudged

ID = "low-ilp"
NAME = "latency.ilp"
TITLE = "Latency-bound: too little independent work in flight"
SECTION = "kernel"  # the report section its findings appear in
REQUIRES = ("issue_active_pct", "warp_latency_cycles", "stall_long_scoreboard_cycles")
OPTIONAL = ("achieved_occupancy_pct", "theoretical_occupancy_pct",
            "eligible_warps_per_scheduler", "stall_short_scoreboard_cycles", "stall_wait_cycles",
            "global_atomic_instructions", "achieved_occupancy_pct")
COLLECT = "--set full (WarpStateStats and SchedulerStats sections)"
RELIEVES = None
DEPENDENCY_STALLS = ("stall_long_scoreboard_cycles", "stall_short_scoreboard_cycles", "stall_wait_cycles")
THRESHOLDS = {
    "min_theoretical_occupancy_pct": Threshold(25.0, "below a quarter of the warp slots by launch limits, "
                                                     "occupancy is the limiter: low-occupancy speaks instead"),
    "max_roof_share": Threshold(0.40, "a kernel at 40%+ of a roof is limited by that roof, not by latency"),
    "max_eligible_warps": Threshold(1.0, "with fewer than one ready warp per scheduler, issue slots go unused"),
    "min_dependency_stall_share": Threshold(0.5, "dependency stalls must explain most of the latency"),
    "max_atomic_share": Threshold(0.2, "above this share of memory instructions, atomics explain the latency"),
    "target_roof_share": Threshold(0.6, "well-overlapped kernels reach about 60% of a roof"),
}
SPEEDUP_MODEL = "1 - (the kernel's speed of light / target_roof_share): the distance to where a latency fix stops"
ADVICE = """Give each warp several independent operations, and the SM more warps.

- Unroll loops so that several loads are issued before the first result is used.
- Process several independent elements per thread (batch independent chains).
- Prefetch the next iteration's data (`__ldg`, `cp.async`, registers) while computing the current one.
- If occupancy is low too, launch more blocks or more threads per block.

```cuda
// before: one dependent load at a time
for (int s = 0; s < steps; ++s) p = next[p];
// after: four chains in flight per thread
for (int s = 0; s < steps; ++s) { a = next[a]; b = next[b]; c = next[c]; d = next[d]; }
```"""


def atomic_share(kernel: KernelView) -> float:
    """Atomics over all global memory instructions (0 when the report has no atomic counters)."""
    atomics = kernel.get("global_atomic_instructions") or kernel.get("global_atomic_requests") or 0.0
    accesses = (kernel.get("global_load_requests") or 0.0) + (kernel.get("global_store_requests") or 0.0) + atomics
    return atomics / accesses if accesses else 0.0


def run(kernel: KernelView, limits) -> Finding | None:
    share = roof_share(kernel)
    if share is None:
        return unjudged("sm_throughput_pct", "memory_throughput_pct", collect="--section SpeedOfLight")
    if share >= limits["max_roof_share"]:
        return None
    eligible = kernel.get("eligible_warps_per_scheduler")
    if eligible is not None and eligible >= limits["max_eligible_warps"]:
        return None
    latency = kernel.get("warp_latency_cycles")
    dependency = sum(kernel.get(c) or 0.0 for c in DEPENDENCY_STALLS)
    dependency_share = dependency / latency if latency else 0.0
    if dependency_share < limits["min_dependency_stall_share"]:
        return None
    if atomic_share(kernel) >= limits["max_atomic_share"]:
        return None
    achieved, theoretical = kernel.get("achieved_occupancy_pct"), kernel.get("theoretical_occupancy_pct")
    if achieved is not None and theoretical is not None and theoretical < limits["min_theoretical_occupancy_pct"]:
        return None  # the launch caps the warps per SM: more warps first (low-occupancy), not more ILP per warp
    return Finding(
        check=ID,
        title=f"Latency-bound at {share:.0%} of its nearest roof: warps wait on dependent instructions "
              f"{dependency_share:.0%} of the time",
        estimated_speedup=clamp01(1 - share / limits["target_roof_share"]),
        evidence={
            "roof_share": evidence(share, limits["max_roof_share"], unit="ratio", compare="<"),
            "eligible_warps_per_scheduler": evidence(eligible, limits["max_eligible_warps"], compare="<"),
            "dependency_stall_share": evidence(dependency_share, limits["min_dependency_stall_share"], unit="ratio"),
            "issue_active_pct": evidence(kernel.get("issue_active_pct"), unit="%"),
            "warp_latency_cycles": evidence(latency, unit="cycles"),
        },
        advice=ADVICE,
        source=kernel.top_spots("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
    )
