"""Contended global atomics.

## What it detects
A kernel whose global memory instructions are largely atomics (or reductions) and that runs far
below both roofs: many threads update few addresses (a histogram with few bins, a global counter).

## Why it is slow
Atomics to one address are serialized in the L2 slice that owns it. Thousands of warps adding
to 16 bins queue behind each other while DRAM and the SMs idle.

## Example
```cuda
atomicAdd(&bins[v[i] & 15], 1u);          // every thread of the grid hits one of 16 words
```

## Instead
```cuda
__shared__ unsigned local_bins[16];       // privatize per block, then one atomic per bin per block
atomicAdd(&local_bins[v[i] & 15], 1u);
__syncthreads();
if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], local_bins[threadIdx.x]);
```

## Known problems
ncu does not count how many distinct addresses the atomics hit; contention is inferred from the
atomic share and from how far the kernel sits below its roofs.

## Options
- `min_atomic_share`: atomics over all global memory instructions.
- `max_roof_share`: speed of light below which the atomics are taken to serialize.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, roof_share, unjudged
from nsanalyze.checks.kernel.low_ilp import atomic_share

ID = "atomic-contention"
ADVICE = """Spread or privatize the updates.

- Accumulate in shared memory (or registers, with warp `__reduce_add_sync`/`__shfl` first) and
  write one atomic per block per address.
- Give each warp or block its own copy of hot counters and sum the copies in a second pass.
- Use `cub::BlockHistogram` / `cub::DeviceHistogram` for histograms.

```cuda
// before: one global atomic per element, 16 hot addresses
atomicAdd(&bins[v[i] & 15], 1u);
// after: per-block bins in shared memory
__shared__ unsigned b[16]; if (threadIdx.x < 16) b[threadIdx.x] = 0; __syncthreads();
atomicAdd(&b[v[i] & 15], 1u); __syncthreads();
if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], b[threadIdx.x]);
```"""

CHECK = Check(
    id=ID,
    name="memory.global.atomics",
    title="Contended global atomics",
    section="memory",
    requires=("global_load_requests",),
    optional=("global_atomic_instructions", "global_atomic_requests", "global_store_requests", "l2_atomic_sectors"),
    collect="--set full (MemoryWorkloadAnalysis_Tables and InstructionStats sections)",
    relieves="memory",
    thresholds={
        "min_atomic_share": Threshold(0.10, "a tenth of the memory instructions being atomics is a design choice "
                                            "worth checking"),
        "max_roof_share": Threshold(0.40, "a kernel at 40%+ of a roof is limited by that roof, not by atomics"),
        "target_roof_share": Threshold(0.6, "a privatized version runs near its memory roof"),
    },
    speedup_model=("(1 - speed of light / target_roof_share) x atomic share of memory instructions x 2, "
                   "at most 1: the distance to the roof, the part of it attributed to the atomics"),
    advice=ADVICE,
)


def _atomic_spots(kernel: KernelView) -> list[dict]:
    spots = [s for s in kernel.source_spots.get("inst_executed") or []
             if s.file and s.sass and any(op in s.sass.split()[0] for op in ("ATOM", "RED"))]
    seen = {}
    for spot in spots:
        seen.setdefault((spot.file, spot.line), {"file": spot.file, "line": spot.line, "value": spot.value,
                                                 "sass": spot.sass})
    return list(seen.values())[:3]


def run(kernel: KernelView, limits) -> Finding | None:
    if kernel.get("global_atomic_instructions") is None and kernel.get("global_atomic_requests") is None:
        return unjudged("global_atomic_instructions", "global_atomic_requests")  # no atomic counters: cannot tell
    share_of_atomics = atomic_share(kernel)
    if share_of_atomics < limits["min_atomic_share"]:
        return None
    share = roof_share(kernel)
    if share is None:
        return unjudged("sm_throughput_pct", "memory_throughput_pct", collect="--section SpeedOfLight")
    if share >= limits["max_roof_share"]:
        return None
    speedup = clamp01(clamp01(1 - share / limits["target_roof_share"]) * clamp01(2 * share_of_atomics))
    atomics = kernel.get("global_atomic_instructions") or kernel.get("global_atomic_requests")
    return Finding(
        check=ID,
        title=f"Global atomics are {share_of_atomics:.0%} of memory instructions and the kernel runs at "
              f"{share:.0%} of its nearest roof: the updates serialize",
        estimated_speedup=speedup,
        evidence={
            "atomic_share": evidence(share_of_atomics, limits["min_atomic_share"], unit="ratio"),
            "global_atomic_instructions": evidence(atomics),
            "roof_share": evidence(share, limits["max_roof_share"], unit="ratio", compare="<"),
        },
        advice=ADVICE,
        source=_atomic_spots(kernel),
    )
