"""Tensor-core tiles re-read from DRAM: the blocks in flight do not share them in L2.

## What it detects
A tensor-core kernel bound by DRAM (its busiest unit, at 60% of its peak or more) whose DRAM traffic is reads, while
30-70% of its L2 requests hit. A tiled matrix product reads each operand tile once per block that uses it;
where the blocks running at once use the same tiles, L2 serves all but the first read. Blocks launched in plain
row-major order over a wide grid share the row operand's tile and each reads a different column tile: about half
the sectors miss (FaSTED's FindPairsKernel: 50% hit, DRAM 80% busy; with its blocks rasterized in 10 x 10 groups,
91% hit, DRAM 9%, the kernel compute-bound and 9% faster).

## Why it is slow
Every miss is a DRAM read of a tile that another block in flight read a moment before. The DRAM, not the tensor
cores, then sets the kernel's pace.

## Example
```cuda
// blocks walk the output in row-major order: one wave covers a strip of tile-rows, every column tile
int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
```

## Instead
```cuda
// groups of G tile-rows: a wave covers a G-row, few-column patch; its blocks share A and B tiles in L2
int per_group = G * tiles_n, first_m = (blockIdx.x / per_group) * G, rows = min(tiles_m - first_m, G);
int tile_m = first_m + (blockIdx.x % per_group) % rows, tile_n = (blockIdx.x % per_group) / rows;
```

## Known problems
The saving is where the DRAM stops being the kernel's busiest unit: the time goes down at most to the next unit's
(the SM's or L2's share of the kernel), and by no more than the reads a better hit rate would save, nor than the
share of their latency the warps wait on memory (long scoreboard, LG and texture throttles, barriers where pipelined
copies land). A DRAM busy 80% of the time sets no one's pace where the warps barely wait on it: FaSTED's kernel, its
warps waiting on memory 6% of their latency, was estimated 25% by the DRAM alone; rasterized, it ran 9% faster in
time but 0.8% in SM cycles (its SM clock rose 9%, 1195 -> 1303 MHz): no finding now (`min_memory_wait_share`). cuBLAS, cuDNN and CUTLASS kernels choose their
own block order (their swizzle is a tuning parameter of theirs) and are left out. The L2 hit rate counts reads and
writes together; a kernel whose DRAM traffic is mostly writes (a product written out, such as attention's scores)
is left out, since its misses are its results.

## Options
- `min_dram_pct`: the DRAM's share of its peak from which it binds.
- `max_l2_hit_rate_pct`: the L2 hit rate below which the blocks in flight do not share their tiles.
- `min_l2_hit_rate_pct`: below it, one operand is streamed once: no order shares it.
- `min_tensor_pipe_pct`: tensor-core activity that marks a tiled matrix product.
- `min_read_share`: the DRAM traffic's read share.
- `target_l2_hit_rate_pct`: the hit rate blocks that share tiles reach.
- `min_memory_wait_share`: the share of the warps' latency spent waiting on memory below which the DRAM sets no
  pace, however busy.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence
from nsanalyze.checks.libraries import TUNED_LIBRARIES, library_of

ID = "l2-reuse"
# The warp stalls (ncu's WarpStateStats, checks/warp_stalls.csv) in which a warp waits on memory: a global load's
# result, the load/store and texture queues, and the barriers at which pipelined copies (cp.async) land
MEMORY_WAITS = ("stall_long_scoreboard_cycles", "stall_lg_throttle_cycles", "stall_tex_throttle_cycles",
                "stall_barrier_cycles")
ADVICE = """Order the blocks so that those running at once share their operand tiles in L2.

- Map the block index to output tiles in groups of G tile-rows (or columns) instead of plain row-major order: a
  wave then covers a compact patch of the output, and its blocks read the same few A and B tiles (Triton's
  `GROUP_SIZE_M` grouped ordering; CUTLASS's threadblock swizzle, `GemmIdentityThreadblockSwizzle<N>` or the raster
  order and swizzle size of CUTLASS 3's tile schedulers).
- Pick G so that one wave's A and B tiles fit in L2: about the square root of the blocks in one wave is a start.
- A persistent kernel that walks tiles in that order does the same with one block an SM.

```cuda
// before: blocks walk the output in row-major order
int tile_m = blockIdx.x / tiles_n, tile_n = blockIdx.x % tiles_n;
// after: groups of G tile-rows share their tiles in L2
int per_group = G * tiles_n, first_m = (blockIdx.x / per_group) * G, rows = min(tiles_m - first_m, G);
int tile_m = first_m + (blockIdx.x % per_group) % rows, tile_n = (blockIdx.x % per_group) / rows;
```"""

CHECK = Check(
    id=ID,
    name="memory.l2.reuse",
    title="Tensor-core tiles re-read from DRAM: the blocks in flight do not share them in L2",
    section="memory",
    requires=("dram_throughput_pct", "l2_hit_rate_pct", "tensor_pipe_pct"),
    optional=("dram_read_bytes", "dram_write_bytes", "sm_throughput_pct", "l2_throughput_pct", "grid_size",
              "warp_latency_cycles", *MEMORY_WAITS),
    collect="--set full (SpeedOfLight, MemoryWorkloadAnalysis and ComputeWorkloadAnalysis sections)",
    relieves="memory",
    thresholds={
        "min_dram_pct": Threshold(60.0, "at 60% of its peak, as the roofline's near-roof band, the DRAM binds"),
        "max_l2_hit_rate_pct": Threshold(70.0, "blocks in flight that share their tiles hit 85-95% in L2 (FaSTED's "
                                               "rasterized FindPairsKernel 91%, the GPT step's compute-bound cuBLAS "
                                               "GEMMs 86-89%); one operand shared and the other not, about 50%"),
        "min_l2_hit_rate_pct": Threshold(30.0, "below it the misses are one large operand streamed once, beside a "
                                               "small one that hits: a product with a narrow side (attention's "
                                               "probabilities times V: 6% hit) that no block order shares"),
        "min_tensor_pipe_pct": Threshold(20.0, "a fifth of the tensor pipe's peak: the kernel multiplies tiles "
                                               "(elementwise and copy kernels have no reuse to lose)"),
        "min_read_share": Threshold(0.8, "reads are the tiles re-read; a kernel that mostly writes (a product "
                                         "written out) misses on its results"),
        "target_l2_hit_rate_pct": Threshold(90.0, "what blocks that share their tiles reach"),
        "min_memory_wait_share": Threshold(0.15, "warps that wait on memory under a sixth of their latency are paced "
                                                 "by their own instructions, however busy the DRAM (FaSTED's "
                                                 "FindPairsKernel: 6%, DRAM 80%; 90% fewer DRAM reads saved 0.8% of "
                                                 "its SM cycles)"),
    },
    speedup_model=("1 - max(the next busiest unit's share, the DRAM's share with the reads a target_l2_hit_rate_pct "
                   "would leave) / the DRAM's share: down to where the DRAM stops binding; at most the share of the "
                   "warps' latency they wait on memory"),
    advice=ADVICE,
)


def run(kernel: KernelView, limits) -> Finding | None:
    dram, hit, tensor = kernel.get("dram_throughput_pct"), kernel.get("l2_hit_rate_pct"), kernel.get("tensor_pipe_pct")
    if dram < limits["min_dram_pct"] or tensor < limits["min_tensor_pipe_pct"]:
        return None
    if not limits["min_l2_hit_rate_pct"] <= hit < limits["max_l2_hit_rate_pct"]:
        return None   # tiles shared (a high hit rate), or one large operand streamed once (a low one)
    others = {"SM": kernel.get("sm_throughput_pct"), "L2": kernel.get("l2_throughput_pct")}
    others = {unit: share for unit, share in others.items() if share is not None}
    if any(share > dram for share in others.values()):
        return None   # the DRAM is not the busiest unit
    reads, writes = kernel.get("dram_read_bytes"), kernel.get("dram_write_bytes")
    read_share = reads / (reads + writes) if reads is not None and writes is not None and reads + writes else None
    if read_share is None or read_share < limits["min_read_share"]:
        return None   # without the split the misses may be results written out
    if library_of(kernel.name) in TUNED_LIBRARIES:
        return None   # the library chooses its block order
    waiting = memory_wait_share(kernel)
    if waiting is not None and waiting < limits["min_memory_wait_share"]:
        return None   # the DRAM is busy, but the warps barely wait on it: their own instructions set the pace
    target = limits["target_l2_hit_rate_pct"]
    # the DRAM's share once the reads a better hit rate saves are gone: each read sector that misses now and would hit
    dram_after = dram * (read_share * (100.0 - target) / (100.0 - hit) + (1.0 - read_share))
    next_unit, next_share = max(others.items(), key=lambda item: item[1]) if others else (None, 0.0)
    speedup = clamp01(1.0 - max(next_share, dram_after) / dram)
    if speedup <= 0.0:
        return None
    bound = (f"down to the {next_unit}'s {next_share:.0f}%" if next_unit and next_share >= dram_after
             else f"with the DRAM then {dram_after:.0f}% busy")
    if waiting is not None and waiting < speedup:
        speedup, bound = waiting, f"the {waiting:.0%} of their latency the warps wait on memory"
    return Finding(
        check=ID,
        title=(f"DRAM-bound at {dram:.0f}% of its peak with {hit:.0f}% of L2 requests hitting: tensor-core tiles "
               f"re-read from DRAM; blocks that share them in L2 save up to {speedup:.0%} ({bound})"),
        estimated_speedup=speedup,
        evidence={
            "dram_throughput_pct": evidence(dram, limits["min_dram_pct"], unit="%", compare=">="),
            "l2_hit_rate_pct": evidence(hit, limits["max_l2_hit_rate_pct"], unit="%", compare="<"),
            "tensor_pipe_pct": evidence(tensor, limits["min_tensor_pipe_pct"], unit="%", compare=">="),
            "dram_read_share": evidence(read_share, limits["min_read_share"], unit="ratio", compare=">="),
            **{f"{unit.lower()}_throughput_pct": evidence(share, unit="%") for unit, share in others.items()},
            "grid_size": evidence(kernel.get("grid_size"), unit="blocks"),
            **({"memory_wait_share": evidence(waiting, limits["min_memory_wait_share"], unit="ratio", compare=">=")}
               if waiting is not None else {}),
        },
        advice=ADVICE,
    )


def memory_wait_share(kernel: KernelView) -> float | None:
    """The share of the warps' latency (cycles per issued instruction) they spend waiting on memory (MEMORY_WAITS);
    None where the stall breakdown is not measured."""
    latency = kernel.get("warp_latency_cycles")
    waits = [kernel.get(concept) for concept in MEMORY_WAITS]
    if not latency or any(w is None for w in waits):
        return None
    return clamp01(sum(waits) / latency)
