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
are used, which on some GPUs also count stalls that are not bank conflicts.

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

CHECK = Check(
    id=ID,
    name="memory.shared.bank_conflicts",
    title="Shared-memory bank conflicts",
    section="memory",
    requires=("bank_conflict_share",),
    optional=("l1_throughput_pct", "shared_wavefronts", "shared_wavefronts_ideal"),
    collect="--set full (SourceCounters and MemoryWorkloadAnalysis_Tables sections)",
    relieves="memory",
    thresholds={
        "min_conflict_share": Threshold(0.10, "NVIDIA's own shared-memory rule starts at 10% excess wavefronts; "
                                              "below that padding rarely pays"),
    },
    speedup_model="excess wavefronts / all shared wavefronts, times how busy L1/shared memory was (its throughput share)",
    advice=ADVICE,
)


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
    return Finding(
        check=ID,
        title=f"{share:.0%} of shared-memory wavefronts are bank-conflict replays"
              + (f" ({ways:.1f}x the ideal)" if ways else ""),
        estimated_speedup=clamp01(share * busy_share),
        evidence=facts,
        advice=ADVICE,
        source=kernel.top_spots("memory_l1_wavefronts_shared", "memory_l1_wavefronts_shared_ideal"),
    )
