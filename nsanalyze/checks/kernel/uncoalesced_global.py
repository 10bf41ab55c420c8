"""Uncoalesced global memory access.

## What it detects
Global loads and stores whose warps touch more 32-byte sectors than the same bytes would need
if neighbouring threads read neighbouring addresses: strided structs (array of structures),
random gathers, column walks of row-major arrays.

## Why it is slow
Every sector fetched but not used is DRAM and L2 bandwidth spent for nothing. A warp reading
one float from each of 32 structs of 32 bytes moves 1 KiB to use 128 B: 8x the traffic.

## Example
```cuda
struct Particle { float x, y, z, vx, vy, vz, m, pad; };
p[i].x += dt * p[i].vx;          // stride 32 B between threads
```

## Instead
```cuda
x[i] += dt * vx[i];              // structure of arrays: consecutive threads, consecutive floats
```

## Known problems
Without source counters (`--set full` or `--section SourceCounters`) the excess is estimated from
sectors per request assuming 4-byte accesses; wider accesses (float4) then look coalesced at 16.

Sectors a request uses only in part are not always traffic wasted: when another request of the
kernel reads the rest of each sector, L1 serves it (WMMA's `load_matrix_sync` from global memory
reads each 32-byte row half by half). With the L1 hit rate known, the loads' excess that reaches L2
is what the hits leave; when L1 absorbs it, no DRAM or L2 byte is wasted and the cost is L1's work
alone: the finding says so, and speaks only when L1 is the busy unit (`min_l1_share`), its saving the
excess share of that L1 time. The hit rate is L1's over all its traffic, not the global loads' alone.

## Options
- `min_excess_share`: the part of sectors that is excess before the check speaks.
- `min_l1_share`: L1 throughput (share of its peak) above which excess served from L1 still costs time.
"""

from nsanalyze.checks.base import Finding, KernelView, Threshold, clamp01, evidence, memory_bound_share, unjudged

ID = "uncoalesced-global"
NAME = "memory.global.uncoalesced"
TITLE = "Uncoalesced global memory access"
SECTION = "memory"  # the report section its findings appear in
REQUIRES = ("duration_ns",)
OPTIONAL = ("global_sectors", "global_sectors_ideal", "global_sectors_excess_share",
            "global_load_bytes_per_sector", "global_store_bytes_per_sector", "global_load_sectors",
            "global_store_sectors", "sectors_per_request_global_load", "memory_throughput_pct",
            "l1_hit_rate_pct", "l1_throughput_pct")
COLLECT = "--set full (SourceCounters and MemoryWorkloadAnalysis_Tables sections)"
RELIEVES = "memory"
THRESHOLDS = {
    "min_excess_share": Threshold(0.25, "a quarter of the sectors wasted is more than alignment noise "
                                        "(tail elements, misaligned starts) ever costs"),
    "min_l1_share": Threshold(0.6, "an L1 under 60% busy has room for the extra sector work of split requests"),
    "ideal_sectors_per_request": Threshold(16.0, "without source counters or bytes per sector the access width is "
                                                 "unknown: 32 threads x 16-byte vectors = 16 sectors is still coalesced, "
                                                 "so only more than that is surely waste"),
}
SPEEDUP_MODEL = ("excess sectors / all sectors, times the kernel's memory speed-of-light share: "
                 "removing wasted traffic saves the time the memory system spent on it; when L1 hits serve the "
                 "loads' excess (nothing wasted past L1), the excess share of the L1's busy share instead")
ADVICE = """Lay data out so that consecutive threads of a warp read consecutive addresses.

- Turn arrays of structures into structures of arrays (or read structs with `float4`/vector loads).
- For gathers, sort or bucket the indices so that a warp's indices fall in few sectors, or stage
  the gathered rows through shared memory.
- Walk row-major 2-D arrays with `threadIdx.x` along the row.

```cuda
// before: one float used out of each 32-byte struct
p[i].x += dt * p[i].vx;
// after: structure of arrays
x[i] += dt * vx[i];
```"""
L1_ADVICE = """The loads split 32-byte sectors between requests; L1 serves the other part, so no DRAM or L2
bytes are wasted, but L1 does the sector work twice, and L1 is the busy unit.

- Give each thread a wider load (16-byte vectors: `float4`, `uint4`, `__half2` x 4), so that one request
  covers whole sectors.
- Load tiles that several warps use once into shared memory (`cp.async`), and read them from there:
  WMMA's `load_matrix_sync` from a shared-memory tile instead of global memory, as CUTLASS does.

```cuda
// before: every warp loads its fragments from global memory
wmma::load_matrix_sync(a, A + row * n + k, n);
// after: the block stages the tile once in shared memory (cp.async), each warp reads its fragment
wmma::load_matrix_sync(a, &As[warp_row][0], TILE_K);
```"""


def _past_l1(kernel: KernelView, directions: dict | None, excess_share: float) -> float | None:
    """The share of all global sectors that is excess after L1 hits: the loads' sectors that miss L1
    beyond the sectors their bytes need, plus the stores' excess (stores are not cached in L1). None
    without a hit rate."""
    hit = kernel.get("l1_hit_rate_pct")
    if hit is None:
        return None
    miss = 1.0 - clamp01(hit / 100.0)
    if directions and "load" in directions:
        loads = kernel.get("global_load_sectors") or 0.0
        stores = kernel.get("global_store_sectors") or 0.0 if "store" in directions else 0.0
        if not loads + stores:
            return None
        load_excess = max(0.0, loads * miss - loads * (1 - directions["load"]))
        return (load_excess + stores * directions.get("store", 0.0)) / (loads + stores)
    sectors = kernel.get("global_sectors")
    if not sectors:
        return None
    return max(0.0, sectors * miss - sectors * (1 - excess_share)) / sectors


def _by_direction(kernel: KernelView) -> dict[str, float] | None:
    """Wasted share of the sectors loads and stores move: 1 - bytes used per 32-byte sector / 32.
    Wide (vector) accesses use whole sectors and are not waste."""
    shares = {}
    for direction in ("load", "store"):
        used = kernel.get(f"global_{direction}_bytes_per_sector")
        if used is not None and (kernel.get(f"global_{direction}_sectors") or 0) > 0:
            shares[direction] = clamp01(1 - used / 32.0)
    return shares or None


def run(kernel: KernelView, limits) -> Finding | None:
    directions = _by_direction(kernel)
    excess_share = kernel.get("global_sectors_excess_share")
    measured_by = "source counters (actual vs ideal L2 sectors)"
    if excess_share is None and directions:
        sectors = {d: kernel.get(f"global_{d}_sectors") or 0 for d in directions}
        excess_share = sum(directions[d] * sectors[d] for d in directions) / sum(sectors.values())
        measured_by = "bytes used per sector of the global loads and stores"
    if excess_share is None:
        per_request = kernel.get("sectors_per_request_global_load")
        traffic = [kernel.get(c) for c in ("global_load_sectors", "global_store_sectors", "global_sectors")]
        if per_request is None and any(v is not None for v in traffic) and not any(traffic):
            return None  # no global loads or stores through L1 at all (TMA, or none): nothing to coalesce
        if per_request is None:  # none of the three ways to measure coalescing: not judged, never silent
            return unjudged("global_sectors_excess_share", "global_load_bytes_per_sector",
                            "sectors_per_request_global_load")
        ideal = limits["ideal_sectors_per_request"]
        excess_share = clamp01(1 - ideal / per_request) if per_request > ideal else 0.0
        measured_by = f"load sectors per request against {ideal:g} (the access width is not in the report)"
    if excess_share < limits["min_excess_share"]:
        return None
    memory_share = memory_bound_share(kernel) or 0.0
    speedup = clamp01(excess_share * memory_share)
    past_l1 = _past_l1(kernel, directions, excess_share)
    served_by_l1 = past_l1 is not None and past_l1 < limits["min_excess_share"]
    if served_by_l1:
        l1_share = clamp01((kernel.get("l1_throughput_pct") or 0.0) / 100.0)
        if l1_share < limits["min_l1_share"]:
            return None  # L1 hits serve the excess and L1 has room: nothing wasted that costs time
        speedup = clamp01((excess_share - past_l1) * l1_share + past_l1 * memory_share)
    evidence_table = {
        "global_sectors_excess_share": evidence(excess_share, limits["min_excess_share"], unit="ratio"),
        "memory_throughput_pct": evidence(kernel.get("memory_throughput_pct"), unit="%"),
    }
    if past_l1 is not None:
        evidence_table["excess_share_past_l1"] = evidence(past_l1, limits["min_excess_share"], unit="ratio")
    for concept in ("sectors_per_request_global_load", "global_sectors", "global_sectors_ideal",
                    "global_load_bytes_per_sector", "global_store_bytes_per_sector", "l1_hit_rate_pct",
                    "l1_throughput_pct"):
        if kernel.get(concept) is not None:
            evidence_table[concept] = evidence(kernel.get(concept))
    which = ""
    if directions:
        worst = max(directions, key=directions.get)
        which = "; " + ", ".join(f"{d}s use {32 * (1 - share):.0f} of 32 bytes per sector" for d, share in
                                 sorted(directions.items(), key=lambda item: item[0] != worst))
    title = f"{excess_share:.0%} of global-memory sectors are wasted by uncoalesced access{which}"
    if served_by_l1:
        title = (f"Global loads split sectors between requests ({1 / max(1e-9, 1 - excess_share):.1f}x the sector accesses "
                 f"the bytes need{which}); L1 serves the rest ({kernel.get('l1_hit_rate_pct'):.0f}% hit rate), so "
                 f"no DRAM or L2 bytes are wasted, but L1 ({kernel.get('l1_throughput_pct'):.0f}% busy) does the "
                 "extra work")
    return Finding(
        check=ID,
        title=title,
        estimated_speedup=speedup,
        evidence=evidence_table,
        advice=L1_ADVICE if served_by_l1 else ADVICE,
        source=kernel.top_spots("memory_l2_theoretical_sectors_global", "memory_l2_theoretical_sectors_global_ideal"),
        notes=[f"measured from {measured_by}"],
    )
