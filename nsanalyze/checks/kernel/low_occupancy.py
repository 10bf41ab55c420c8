"""Low occupancy in a latency-bound kernel.

## What it detects
A kernel that waits on latency (far below its roofs, few warps ready) while each SM holds few
warps: the grid is too small, blocks too small, or registers / shared memory per block limit
how many blocks fit.

## Why it is slow
GPUs hide latency by switching between warps. With a handful of warps per SM there is nothing
to switch to while loads are in flight.

## Example
```cuda
kernel<<<264, 32>>>(...);        // one warp per block, 0.06 waves on 132 SMs
```

## Instead
```cuda
kernel<<<n / 256, 256>>>(...);   // enough warps per SM to cover memory latency
```

## Known problems
Occupancy is a means, not a goal: a kernel with plenty of instruction-level parallelism can run
well at low occupancy, which is why the check only speaks when the kernel is latency-bound.
cuBLAS, cuDNN and CUTLASS kernels whose registers or shared memory cap their occupancy (a Hopper GEMM: one
block of 384 threads an SM, 19%) are tiled that way on purpose and pipeline their loads instead: no finding.
A grid that gives most SMs no block is small-grid's to say; low occupancy is judged where the SMs have work.
Where the whole grid is resident at once and each warp's instructions span the kernel, more warps save time only by
taking part of each warp's work: the finding notes that its saving assumes that split.

## Options
- `max_achieved_occupancy_pct`: achieved occupancy below which the check speaks.
- `target_occupancy_pct`: occupancy where latency hiding usually suffices.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, roof_share, unjudged
from nsanalyze.checks.kernel.low_ilp import chain_note, grid_leaves_most_sms_idle, warp_chain
from nsanalyze.checks.libraries import TUNED_LIBRARIES, library_of
from nsanalyze.checks.stalls import dominant_stall, stall_advice, stall_concepts

ID = "low-occupancy"
LATENCY_BAND = 0.40  # from here up to max_roof_share the kernel must also lack ready warps
LIMITERS = {"blocks_per_sm_limit_registers": "registers per thread",
            "blocks_per_sm_limit_shared_mem": "shared memory per block",
            "blocks_per_sm_limit_warps": "threads per block",
            "blocks_per_sm_limit": "the hardware block limit (blocks too small)"}
ADVICE_LEAD = "Put more warps on each SM.\n\n"
# one bullet a limit: a finding shows its own cause's (a user read of FaSTED's MmaPtxShared, a 76-wave grid of 4-warp
# blocks held by its registers, was told of grids under one wave and blocks of one warp too)
BULLETS = {
    "the grid fills less than one wave": ("- Grid too small (under one wave): launch more blocks, e.g. split the work "
                                          "finer or use a\n  grid-stride loop sized to `numSMs * blocksPerSM`.\n"),
    "the hardware block limit (blocks too small)": "- Blocks of one warp waste block slots: use 128-256 threads per "
                                                   "block.\n",
    "registers per thread": ("- Limited by registers: `__launch_bounds__(threads, minBlocks)` or fewer live values;\n"
                             "  limited by shared memory: smaller tiles or more work per block.\n"),
}
BULLETS["shared memory per block"] = BULLETS["registers per thread"]
ALL_BULLETS = "".join(dict.fromkeys(BULLETS.values()))   # where the cause has none of its own
ADVICE_TEXT = ADVICE_LEAD + ALL_BULLETS
# Under one wave, fewer, larger blocks would leave more SMs idle (the dev suite's pointer chase, 264 blocks of 32
# threads on 132 SMs, was shown the same threads as 33 blocks of 256): more blocks come from splitting the work
GRID_EXAMPLE = """
```cuda
// before: one block a row: 100 blocks for 132 SMs, each SM at most one block
row_sum<<<rows, 256>>>(x, out, cols);
// after: each row split over 8 blocks, their partial sums added (atomicAdd, or a second pass): 800 blocks
row_sum_split<<<dim3(8, rows), 256>>>(x, out, cols);
```"""
BLOCKS_EXAMPLE = """
```cuda
// before: blocks of one warp: the SM's block limit (32 on Hopper) holds it to 32 of its 64 warps
scale<<<(n + 31) / 32, 32>>>(x, n);
// after: the same threads in blocks of 256
scale<<<(n + 255) / 256, 256>>>(x, n);
```"""
# the example shows the change for the limit that holds (a user read of FaSTED's MmaPtxShared, 16,384 blocks of 128
# threads held to 2 blocks an SM by 192 registers a thread, was shown a grid of 264 one-warp blocks made larger);
# with the kernel's own block size and the blocks the next limit allows where the report reads them
# (registers_example: its shared memory holds 3 blocks an SM, so (128, 3), not the (128, 4) shared memory forbids)
REGISTERS_EXAMPLE = """
```cuda
// before: each thread keeps ~192 registers live: 2 blocks of 128 threads fit an SM
__global__ void tile_mma(const half* a, const half* b, float* c);
// after: the compiler keeps a thread within the registers that 4 blocks of 128 threads an SM allow
// (check the spills it may add: ncu's local-memory traffic, or -Xptxas -v)
__global__ void __launch_bounds__(128, 4) tile_mma(const half* a, const half* b, float* c);
```"""
SHARED_MEMORY_EXAMPLE = """
```cuda
// before: a 64 x 128 float tile a block (32 KB of shared memory) caps the blocks an SM
__shared__ float tile[64][128];
// after: a 32 x 128 tile (16 KB) fits twice the blocks an SM; each block takes half the rows
__shared__ float tile[32][128];
```"""
EXAMPLES = {"registers per thread": REGISTERS_EXAMPLE, "shared memory per block": SHARED_MEMORY_EXAMPLE,
            "the hardware block limit (blocks too small)": BLOCKS_EXAMPLE}


def registers_example(kernel: KernelView) -> str:
    """REGISTERS_EXAMPLE in the kernel's own numbers: its block size, the blocks its registers allow an SM today and
    those the next limit allows once they are lifted; REGISTERS_EXAMPLE where the report lacks them."""
    limits = [limit for limit in _block_limits(kernel) if limit[0]]
    threads, registers = kernel.get("block_size"), kernel.get("registers_per_thread")
    if len(limits) < 2 or limits[0][1] != "blocks_per_sm_limit_registers" or not threads or not registers:
        return REGISTERS_EXAMPLE
    (now, _), (then, name) = limits[0], limits[1]
    threads, now, then = int(threads), int(now), int(then)
    return f"""
```cuda
// before: each thread keeps ~{registers:.0f} registers live: {now} block{'s' if now != 1 else ''} of {threads} threads fit an SM
__global__ void kernel(...);
// after: the compiler keeps a thread within the registers that {then} blocks of {threads} threads an SM allow, as many
// as {LIMITERS[name]} allows (check the spills it may add: ncu's local-memory traffic, or -Xptxas -v)
__global__ void __launch_bounds__({threads}, {then}) kernel(...);
```"""
ADVICE = ADVICE_TEXT + GRID_EXAMPLE

CHECK = Check(
    id=ID,
    name="latency.occupancy",
    title="Too few warps per SM to hide latency",
    section="kernel",
    requires=("achieved_occupancy_pct",),
    optional=("issue_active_pct", "theoretical_occupancy_pct", "waves_per_sm", "blocks_per_sm_limit_registers",
              "blocks_per_sm_limit_shared_mem", "blocks_per_sm_limit_warps", "blocks_per_sm_limit", "block_size",
              "registers_per_thread", "eligible_warps_per_scheduler", "grid_size", "sm_count", "instructions_executed",
              "sm_active_cycles_avg") + stall_concepts(),
    collect="--set full (Occupancy and LaunchStats sections)",
    relieves=None,
    thresholds={
        "max_achieved_occupancy_pct": Threshold(30.0, "below 30% of the SM's warp slots latency hiding usually fails"),
        "max_roof_share": Threshold(0.60, "a kernel at 60%+ of a roof is near what tuned code sustains; below it, "
                                         "too few warps leave latency exposed"),
        "max_issue_active_pct": Threshold(50.0, "a scheduler issuing half the cycles is not starved"),
        "target_occupancy_pct": Threshold(50.0, "about half the warp slots hide DRAM latency for typical code"),
        "target_roof_share": Threshold(0.6, "well-overlapped kernels reach about 60% of a roof"),
    },
    speedup_model=("(1 - speed of light / target_roof_share) x (1 - achieved / target occupancy): "
                   "the latency-bound time more warps could overlap; the target no higher than the occupancy the "
                   "next per-SM limit allows once the tightest is lifted"),
    advice=ADVICE,
)


def _block_limits(kernel: KernelView) -> list[tuple[float, str]]:
    """The per-SM block limits the report reads, tightest first: (blocks an SM, concept)."""
    return sorted((kernel.get(name), name) for name in LIMITERS if kernel.get(name) is not None)


def _limiter(kernel: KernelView) -> str | None:
    limits = _block_limits(kernel)
    return LIMITERS[limits[0][1]] if limits else None


def reachable_occupancy(kernel: KernelView) -> tuple[float, str] | None:
    """The theoretical occupancy once the tightest per-SM limit is lifted, and the limit that then holds: the
    next one's blocks an SM over the tightest one's, times today's theoretical occupancy. FaSTED's MmaPtxShared:
    registers allow 2 blocks an SM (12.5%), shared memory 3, so fewer registers reach 18.75%, not the 50% the
    saving assumed. None where fewer than two limits are read."""
    limits = [limit for limit in _block_limits(kernel) if limit[0]]
    theoretical = kernel.get("theoretical_occupancy_pct")
    if len(limits) < 2 or not theoretical:
        return None
    (tightest, _), (following, name) = limits[0], limits[1]
    return theoretical * following / tightest, LIMITERS[name]


def run(kernel: KernelView, limits) -> Finding | None:
    achieved = kernel.get("achieved_occupancy_pct")
    if achieved >= limits["max_achieved_occupancy_pct"]:
        return None
    share = roof_share(kernel)
    if share is None:
        return unjudged("sm_throughput_pct", "memory_throughput_pct", collect="--section SpeedOfLight")
    if share >= limits["max_roof_share"] or grid_leaves_most_sms_idle(kernel):
        return None  # near a roof; or most SMs idle for want of blocks, small-grid's (more warps per SM come after)
    eligible = kernel.get("eligible_warps_per_scheduler")
    if share >= LATENCY_BAND and (eligible is None or eligible >= 1.0):
        return None  # at 40-60% of a roof only a scheduler short of ready warps shows the latency
    issue = kernel.get("issue_active_pct")  # when measured: a busy scheduler is not starved of warps
    if issue is not None and issue >= limits["max_issue_active_pct"]:
        return None
    waves = kernel.get("waves_per_sm")
    theoretical = kernel.get("theoretical_occupancy_pct")
    capped = theoretical is not None and theoretical < limits["max_achieved_occupancy_pct"]
    if capped and library_of(kernel.name) in TUNED_LIBRARIES:
        return None  # the library's tile (registers, shared memory) sets its occupancy by design
    # the grid is the cause only where the SM's limits would hold more warps than it gets: under one wave with a
    # launch capped at 19% by its shared memory (one block an SM), the limit is the shared memory, not the grid
    cause = "the grid fills less than one wave" if waves is not None and waves < 1 and not capped else _limiter(kernel)
    target, notes = limits["target_occupancy_pct"], []
    reachable = reachable_occupancy(kernel) if cause != "the grid fills less than one wave" else None
    if reachable is not None and reachable[0] < target:   # past its limit, the next one caps the warps an SM
        target = reachable[0]
        notes.append(f"saving: up to {target:.1f}% occupancy, not the {limits['target_occupancy_pct']:.0f}% a "
                     f"latency-bound kernel is given: past {cause}, {reachable[1]} caps the blocks an SM")
    chain = warp_chain(kernel)
    if chain:
        notes.insert(0, chain_note(chain, "More warps shorten it only by taking part of each warp's work (the same "
                                           "work split finer); the saving assumes that split."))
    speedup = clamp01(1 - share / limits["target_roof_share"]) * clamp01(1 - achieved / target)
    stall = dominant_stall(kernel, min_share=0.0)   # what the few warps wait on most: the fix that needs no more warps
    return Finding(
        check=ID,
        title=f"Achieved occupancy {achieved:.0f}% in a latency-bound kernel" + (f" ({cause})" if cause else "")
              + (f"; {stall.phrase()}" if stall else ""),
        estimated_speedup=speedup,
        evidence={
            "achieved_occupancy_pct": evidence(achieved, limits["max_achieved_occupancy_pct"], unit="%", compare="<"),
            "theoretical_occupancy_pct": evidence(kernel.get("theoretical_occupancy_pct"), unit="%"),
            "waves_per_sm": evidence(waves),
            "roof_share": evidence(share, limits["max_roof_share"], unit="ratio", compare="<"),
            "issue_active_pct": evidence(issue, limits["max_issue_active_pct"], unit="%", compare="<"),
            **({"warp_chain_share": evidence(chain[2], unit="ratio")} if chain else {}),
            **({"dominant_stall": stall.to_evidence()} if stall else {}),
        },
        advice=(stall_advice(stall) if stall else "") + ADVICE_LEAD + BULLETS.get(cause, ALL_BULLETS)
               + (registers_example(kernel) if cause == "registers per thread" else EXAMPLES.get(cause, GRID_EXAMPLE)),
        notes=notes,
    )
