"""Shared-memory bank conflicts.

## What it detects
Shared-memory instructions that need more wavefronts than their addresses require, because
several threads of a warp hit different addresses in the same one of the 32 banks.

## Why it is slow
Conflicting accesses are replayed one wavefront at a time: an n-way conflict makes the access
n times slower and keeps the shared-memory pipe busy for the whole warp.

## Example
```cuda
for (int s = 1; s < blockDim.x; s *= 2) {
    int index = 2 * s * tid;                    // stride 2s: threads pile onto the same banks
    if (index < blockDim.x) sdata[index] += sdata[index + s];
    __syncthreads();
}
```

## Instead
```cuda
for (int s = blockDim.x / 2; s > 0; s >>= 1) {  // sequential addressing: one thread per bank
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
}
```

## Known problems
Needs the SourceCounters section for the exact excess; without it the hardware conflict counters
are used, which on some GPUs also count stalls that are not bank conflicts. The source counters also
count the excess wavefronts of `cp.async` (LDGSTS) copies whose destination is misaligned or written
along columns, which the hardware's load and store conflict counters leave out: where those copies
carry most of the excess, the finding names them and gives their fix (alignment, swizzling) instead.

## Options
- `min_conflict_share`: the part of wavefronts that are excess before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence

ID = "bank-conflicts"
ADVICE = """Make the threads of a warp hit 32 different banks (4-byte words, `address / 4 % 32`).

- Pad 2-D tiles by one element: `__shared__ float tile[32][33];` so that column walks change bank.
- Use sequential addressing in reductions (`sdata[tid] += sdata[tid + s]`) instead of `2*s*tid`.
- Swizzle the index (`col ^ row`) for tiles where padding costs too much memory.

```cuda
// before: column access, every thread in bank 0
__shared__ float tile[32][32];
float v = tile[threadIdx.x][k];
// after: one padding column spreads the column over all banks
__shared__ float tile[32][33];
float v = tile[threadIdx.x][k];
```"""

ASYNC_COPY_ADVICE = """Most excess wavefronts come from `cp.async` (LDGSTS) copies into shared memory: each warp's copy
should fill whole, aligned 128-byte lines of shared memory.

- Align the shared buffer to 128 bytes (`__shared__ __align__(128) float tile[...]`, or `alignas(128)`
  on a dynamic-shared-memory struct) and keep each stage's offset a multiple of 128 bytes: a copy that
  starts 16 bytes into a line spreads a warp's 512 bytes over five wavefronts instead of four.
- Let consecutive threads copy consecutive 16-byte chunks of a row; where the tile is later read by
  columns, swizzle the destination chunk (`chunk ^ (row % 8)`) instead of padding, so that both the copy
  and the reads stay conflict-free.

```cuda
// before: the buffer only 16-byte aligned, so each warp's 512-byte copy straddles five 128-byte lines
__shared__ __align__(16) float4 stage[STAGES][TILE];
// after
__shared__ __align__(128) float4 stage[STAGES][TILE];
```"""

CHECK = Check(
    id=ID,
    name="memory.shared.bank_conflicts",
    title="Shared-memory bank conflicts",
    section="memory",
    requires=("bank_conflict_share",),
    optional=("l1_throughput_pct", "shared_wavefronts", "shared_wavefronts_ideal", "sm_count", "sm_active_cycles_avg",
              "sm_cycles_elapsed"),
    collect="--set full (SourceCounters and MemoryWorkloadAnalysis_Tables sections)",
    relieves="memory",
    thresholds={
        "min_conflict_share": Threshold(0.10, "NVIDIA's own shared-memory rule starts at 10% excess wavefronts; "
                                              "below that padding rarely pays"),
        "wavefronts_per_cycle": Threshold(1.0, "an SM's shared-memory data path moves one 128-byte wavefront a cycle "
                                               "(NVIDIA: 128 bytes a clock per SM), so the excess wavefronts take at "
                                               "most that many of each SM's cycles: the dev suite's interleaved reduction "
                                               "(H200) has 22% of its cycles in them and ran 17% faster without"),
        "async_copy_share": Threshold(0.5, "the share of the excess on cp.async (LDGSTS) from which the advice is "
                                           "cp.async's alignment and layout, not padding"),
    },
    speedup_model=("excess wavefronts / all shared wavefronts, times how busy L1/shared memory was (its throughput "
                   "share); at most the share of the SMs' cycles the excess wavefronts take at one a cycle"),
    advice=ADVICE,
)


def _wavefront_cycles_share(kernel: KernelView, limits) -> float | None:
    """The share of the SMs' active cycles (elapsed where not measured) the excess wavefronts take at the data
    path's rate, or None where the wavefronts or cycles are not measured. L1's throughput share also counts global traffic and other stages, so
    it alone overstates what the replays cost where they are a small part of a busy L1."""
    wavefronts, ideal = kernel.get("shared_wavefronts"), kernel.get("shared_wavefronts_ideal")
    sms = kernel.get("sm_count")
    cycles = kernel.get("sm_active_cycles_avg") or kernel.get("sm_cycles_elapsed")  # active: a grid of one block
    if not (wavefronts and ideal is not None and sms and cycles):
        return None
    return clamp01((wavefronts - ideal) / limits["wavefronts_per_cycle"] / (sms * cycles))


def run(kernel: KernelView, limits) -> Finding | None:
    share = kernel.get("bank_conflict_share")
    if share < limits["min_conflict_share"]:
        return None
    busy = kernel.get("l1_throughput_pct")
    busy_share = clamp01(busy / 100.0) if busy is not None else 0.5
    wavefronts, ideal = kernel.get("shared_wavefronts"), kernel.get("shared_wavefronts_ideal")
    ways = wavefronts / ideal if wavefronts and ideal else None
    facts = {"bank_conflict_share": evidence(share, limits["min_conflict_share"], unit="ratio"),
             "l1_throughput_pct": evidence(busy, unit="%")}
    if ways:
        facts["wavefronts_per_ideal"] = evidence(ways, unit="x")
    speedup, notes = clamp01(share * busy_share), []
    cycles_share = _wavefront_cycles_share(kernel, limits)
    if cycles_share is not None:
        facts["excess_wavefront_cycles_share"] = evidence(cycles_share, unit="ratio")
        if cycles_share < speedup:
            notes.append(f"at most {cycles_share:.0%} of the kernel's time: the excess wavefronts take that share of "
                         "the SMs' active cycles at one wavefront a cycle (L1's throughput share, "
                         f"{busy_share:.0%}, also counts its other work)")
            speedup = cycles_share
    on_async = kernel.excess_share_on("LDGSTS", "memory_l1_wavefronts_shared", "memory_l1_wavefronts_shared_ideal")
    async_copies = on_async is not None and on_async >= limits["async_copy_share"]
    return Finding(
        check=ID,
        title=(f"cp.async (LDGSTS) copies into shared memory carry {on_async:.0%} of its excess wavefronts: "
               f"{share:.0%} of the shared-memory wavefronts are excess" + (f" ({ways:.1f}x the ideal)" if ways else "")
               + ", from destinations not aligned to 128-byte lines or copied along columns"
               if async_copies else
               f"{share:.0%} of shared-memory wavefronts are bank-conflict replays"
               + (f" ({ways:.1f}x the ideal)" if ways else "")),
        estimated_speedup=speedup,
        evidence=facts,
        advice=ASYNC_COPY_ADVICE if async_copies else ADVICE,
        source=kernel.top_spots("memory_l1_wavefronts_shared", "memory_l1_wavefronts_shared_ideal"),
        notes=notes,
    )
