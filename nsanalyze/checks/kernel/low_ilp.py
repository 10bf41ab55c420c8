"""Latency-bound: too little independent work in flight.

## What it detects
A kernel below 60% of both its compute and its memory roof whose warps mostly wait (on the result
of an earlier instruction: long and short scoreboard, wait stalls; or at barriers) with fewer than
one warp ready to issue per scheduler. The finding names the cause: dependent chains (pointer
chasing, serial loops), barriers (reductions that sync every step), or small blocks that cap the
warps per SM (32-thread blocks hit the SM's block limit at half occupancy).

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
Atomic-heavy kernels look the same; the check leaves them to `atomic-contention`. A report without
atomic counters cannot tell them apart: the finding then notes that atomics were not measured.
A grid that gives most SMs no block (a one-block demo, 2 warps of a warm-up kernel) is small-grid's to say:
the few busy SMs' latency is not the first thing to fix.
Where the whole grid is resident at once and each warp's instructions span the kernel (`warp_chain_share`), the kernel
lasts as long as one warp: the saving then assumes the warp's instructions can overlap, which one chain of dependent
loads a thread (pointer chasing) cannot until it is split. The finding notes it.
Where the grid fits in less than one wave and the SMs run at most half the warps the launch allows, the grid leaves the
warp slots empty: the finding counts after the kernel's others (low-occupancy names the grid).

## Options
- `max_roof_share`: speed of light below which a kernel counts as latency-bound.
- `max_eligible_warps`: ready warps per scheduler below which issue starves.
- `min_dependency_stall_share`: share of warp latency spent on dependencies and barriers.
- `target_roof_share`: where a latency fix is expected to stop (the roofs in practice).
- `min_theoretical_occupancy_pct`: below this the launch itself caps the warps: low-occupancy instead.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, roof_share, unjudged
from nsanalyze.checks.stalls import dominant_stall, stall_advice, stall_concepts

ID = "low-ilp"
DEPENDENCY_STALLS = ("stall_long_scoreboard_cycles", "stall_short_scoreboard_cycles", "stall_wait_cycles")
BARRIER_STALLS = ("stall_barrier_cycles", "stall_membar_cycles")
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

CHECK = Check(
    id=ID,
    name="latency.ilp",
    title="Latency-bound: too little independent work in flight",
    section="kernel",
    requires=("issue_active_pct", "warp_latency_cycles", "stall_long_scoreboard_cycles"),
    optional=("achieved_occupancy_pct", "theoretical_occupancy_pct",
              "eligible_warps_per_scheduler", "stall_short_scoreboard_cycles", "stall_wait_cycles",
              "stall_barrier_cycles", "stall_membar_cycles", "global_atomic_instructions", "global_atomic_requests",
              "block_size",
              "blocks_per_sm_limit", "blocks_per_sm_limit_warps", "blocks_per_sm_limit_registers",
              "blocks_per_sm_limit_shared_mem", "grid_size", "sm_count", "waves_per_sm", "instructions_executed",
              "sm_active_cycles_avg")
    + tuple(c for c in stall_concepts() if c not in ("warp_latency_cycles", "stall_long_scoreboard_cycles",
                                                     "stall_short_scoreboard_cycles", "stall_wait_cycles",
                                                     "stall_barrier_cycles", "stall_membar_cycles")),
    collect="--set full (WarpStateStats and SchedulerStats sections)",
    relieves=None,
    thresholds={
        "min_theoretical_occupancy_pct": Threshold(25.0, "below a quarter of the warp slots by launch limits, "
                                                         "occupancy is the limiter: low-occupancy speaks instead"),
        "max_roof_share": Threshold(0.60, "a kernel at 60%+ of a roof is near what tuned code sustains; below it, with "
                                         "few ready warps, latency holds it back (reductions at 40-50% of a roof still "
                                         "wait on barriers)"),
        "max_eligible_warps": Threshold(1.0, "with fewer than one ready warp per scheduler, issue slots go unused"),
        "min_dependency_stall_share": Threshold(0.5, "dependency and barrier stalls must explain most of the latency"),
        "small_block_threads": Threshold(64.0, "blocks of one or two warps reach the SM's block limit before its warp "
                                               "limit: the launch caps the warps per SM"),
        "max_atomic_share": Threshold(0.2, "above this share of memory instructions, atomics explain the latency"),
        "target_roof_share": Threshold(0.6, "well-overlapped kernels reach about 60% of a roof"),
    },
    speedup_model="1 - (the kernel's speed of light / target_roof_share): the distance to where a latency fix stops",
    advice=ADVICE,
)


def atomic_share(kernel: KernelView) -> float:
    """Atomics over all global memory instructions (0 when the report has no atomic counters)."""
    atomics = kernel.get("global_atomic_instructions") or kernel.get("global_atomic_requests") or 0.0
    accesses = (kernel.get("global_load_requests") or 0.0) + (kernel.get("global_store_requests") or 0.0) + atomics
    return atomics / accesses if accesses else 0.0


CAUSES = {
    "dependent chains": "warps wait on the result of an earlier instruction",
    "barriers": "warps wait at barriers (`__syncthreads`) for the rest of their block",
    "small blocks": "blocks of few threads hit the SM's block limit and cap the warps per SM",
}
CAUSE_ADVICE = {
    "barriers": ("**Cause: barriers.** Sync less often: reduce within a warp with `__shfl_down_sync` (or "
                 "`cg::reduce`) and use shared memory and `__syncthreads()` only between warps; give each thread "
                 "several elements before the block-wide step; use `cub::BlockReduce`.\n\n"),
    "small blocks": ("**Cause: small blocks.** The SM runs a limited number of blocks at once: 32-thread blocks "
                     "fill a fraction of its warp slots. Use 128-256 threads per block (the same total threads, "
                     "fewer blocks), so that each SM holds enough warps to hide latency.\n\n"),
    "dependent chains": "",
}


def _small_block_cap(kernel: KernelView, limits) -> bool:
    """The launch caps the warps per SM through the block limit: few threads per block, and the hardware
    block limit binds before the warp, register and shared-memory limits."""
    threads = kernel.get("block_size")
    if threads is None or threads > limits["small_block_threads"]:
        return False
    block_limit = kernel.get("blocks_per_sm_limit")
    others = [kernel.get(c) for c in ("blocks_per_sm_limit_warps", "blocks_per_sm_limit_registers",
                                      "blocks_per_sm_limit_shared_mem")]
    others = [v for v in others if v is not None]
    return block_limit is not None and (not others or block_limit < min(others))


# Each warp's own time (its instructions, one warp latency apart) over its SM's active cycles from which a grid
# resident in one wave lasts as long as one warp's chain: pointer_chase's 264 warps each run 10,409 instructions 205
# cycles apart, 98% of the cycles its SMs were active.
CHAIN_SHARE = 0.8


def warp_chain(kernel: KernelView) -> tuple[float, float, float] | None:
    """(instructions a warp, cycles between them, their share of the SM's active cycles) where the whole grid is
    resident at once (one wave or less) and one warp's instructions span CHAIN_SHARE of the kernel or more: every
    warp starts at the launch, so the kernel lasts as long as its longest warp. Only fewer instructions a warp (the
    work split over more warps) or fewer cycles between them (more of them in flight at once) shorten it; more warps
    an SM with the same work each do not. None otherwise, or where a counter is not read."""
    waves, grid, block = kernel.get("waves_per_sm"), kernel.get("grid_size"), kernel.get("block_size")
    instructions, latency = kernel.get("instructions_executed"), kernel.get("warp_latency_cycles")
    active = kernel.get("sm_active_cycles_avg")
    if not (waves and grid and block and instructions and latency and active) or waves > 1:
        return None
    per_warp = instructions / (grid * -(-block // 32))
    share = per_warp * latency / active
    # (the instructions and their mean latency are averages: their product passes the active cycles by a few percent
    # where one warp spans it all, 108-115% on gpt_bf16's kernels, a share no kernel has: said as the whole of it)
    return (per_warp, latency, min(share, 1.0)) if share >= CHAIN_SHARE else None


def chain_note(chain: tuple[float, float, float], assumes: str) -> str:
    """What a latency finding's saving assumes where one warp spans the kernel (warp_chain)."""
    per_warp, latency, share = chain
    return (f"the whole grid runs at once and each warp's {per_warp:,.0f} instructions, {latency:.0f} cycles apart, "
            f"span {min(share, 1.0):.0%} of the kernel: it lasts as long as one warp does. {assumes}")


# what low-ilp's saving assumes of a kernel that lasts as long as one warp
OVERLAP_ASSUMED = ("The saving assumes the warp's instructions can overlap (independent loads in flight, several "
                   "chains a thread); a warp that follows one chain of dependent loads (pointer chasing) keeps its "
                   "time until the chain is split or its loads hit a nearer cache.")


def grid_leaves_most_sms_idle(kernel: KernelView) -> bool:
    """Most SMs get no block: the few busy SMs' warps describe a GPU mostly switched off, and small-grid names the
    first fix (more blocks); more independent work or warps per SM come after it."""
    grid, sms = kernel.get("grid_size"), kernel.get("sm_count")
    return bool(grid and sms and grid <= sms / 2)


def grid_leaves_warp_slots_empty(kernel: KernelView) -> bool:
    """The whole grid fits in less than one wave and the SMs run at most half the warps the launch allows: the grid,
    not the warps' own code, leaves the slots empty. More blocks (each warp's work split finer) is the first lever, and
    low-occupancy names it; more independent work a warp counts after it (textbook streamFewBlocks: a grid-stride copy
    of 132 blocks of 256 threads at 12% occupancy led with low-ilp's pointer-chase example, a user read)."""
    waves = kernel.get("waves_per_sm")
    achieved, theoretical = kernel.get("achieved_occupancy_pct"), kernel.get("theoretical_occupancy_pct")
    return bool(waves and waves < 1 and achieved and theoretical and achieved <= theoretical / 2)


def run(kernel: KernelView, limits) -> Finding | None:
    share = roof_share(kernel)
    if share is None:
        return unjudged("sm_throughput_pct", "memory_throughput_pct", collect="--section SpeedOfLight")
    if share >= limits["max_roof_share"] or grid_leaves_most_sms_idle(kernel):
        return None
    eligible = kernel.get("eligible_warps_per_scheduler")
    if eligible is not None and eligible >= limits["max_eligible_warps"]:
        return None
    latency = kernel.get("warp_latency_cycles")
    dependency = sum(kernel.get(c) or 0.0 for c in DEPENDENCY_STALLS)
    barrier = sum(kernel.get(c) or 0.0 for c in BARRIER_STALLS)
    dependency_share = (dependency + barrier) / latency if latency else 0.0
    if dependency_share < limits["min_dependency_stall_share"]:
        return None
    if atomic_share(kernel) >= limits["max_atomic_share"]:
        return None
    achieved, theoretical = kernel.get("achieved_occupancy_pct"), kernel.get("theoretical_occupancy_pct")
    if achieved is not None and theoretical is not None and theoretical < limits["min_theoretical_occupancy_pct"]:
        return None  # the launch caps the warps per SM: more warps first (low-occupancy), not more ILP per warp
    if _small_block_cap(kernel, limits):
        cause = "small blocks"
    else:
        cause = "barriers" if barrier > dependency else "dependent chains"
    chain = warp_chain(kernel)
    notes = [chain_note(chain, OVERLAP_ASSUMED)] if chain else []
    if kernel.get("global_atomic_instructions") is None and kernel.get("global_atomic_requests") is None:
        notes.append("atomics not measured (no atomic instruction or request counters): a kernel waiting on "
                     "contended atomics looks the same; --set full (InstructionStats) counts them")
    waiting = "on dependent instructions and barriers" if barrier else "on dependent instructions"
    waited = f"{waiting} {dependency_share:.0%} of the time"
    if cause == "barriers":   # the barriers' own share, then the whole (FaSTED's SquaredSumsKernel: 73% at barriers
        # read "at barriers 94%", the 94% being every dependency stall: a user read)
        waited = f"at barriers {barrier / latency:.0%} of the time ({dependency_share:.0%} with the other dependencies)"
    stall = dominant_stall(kernel, min_share=0.0)   # a latency finding names what its warps wait on most, always
    facts = {"dominant_stall": stall.to_evidence()} if stall else {}
    return Finding(
        check=ID,
        title=f"Latency-bound at {share:.0%} of its nearest roof ({cause}): warps wait {waited}"
              + (f", {eligible:.1f} ready warps per scheduler" if eligible is not None else "")
              + (f"; {stall.phrase()}" if stall else ""),
        estimated_speedup=clamp01(1 - share / limits["target_roof_share"]),
        evidence={
            "roof_share": evidence(share, limits["max_roof_share"], unit="ratio", compare="<"),
            "eligible_warps_per_scheduler": evidence(eligible, limits["max_eligible_warps"], compare="<"),
            "dependency_stall_share": evidence(dependency_share, limits["min_dependency_stall_share"], unit="ratio"),
            "barrier_stall_share": evidence(barrier / latency if latency else None, unit="ratio"),
            "cause": {"value": cause, "why": CAUSES[cause]},
            "block_size": evidence(kernel.get("block_size"), unit="threads"),
            "issue_active_pct": evidence(kernel.get("issue_active_pct"), unit="%"),
            "warp_latency_cycles": evidence(latency, unit="cycles"),
            **({"warp_chain_share": evidence(chain[2], unit="ratio")} if chain else {}),
            **facts,
        },
        advice=(stall_advice(stall) if stall else "") + CAUSE_ADVICE[cause] + ADVICE,
        source=kernel.top_spots("smsp__pcsamp_warps_issue_stalled_barrier" if cause == "barriers"
                                else "smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
        notes=notes,
        after_others=grid_leaves_warp_slots_empty(kernel),
    )
