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

Two measures of coalescing can disagree, and the source counters win. The source counters
(`memory_l2_theoretical_sectors_global` against its `_ideal`) are counted per SASS instruction over
every global memory instruction, `cp.async` (LDGSTS) included; the bytes used per sector
(`smsp__sass_average_data_bytes_per_sector_mem_global_op_{ld,st}`) average only the LDG/STG
instructions, while the L1 sector counts they are weighed by include LDGSTS traffic. A kernel that
moves its tiles with `cp.async` and reads a few scalars with LDG can show "4 of 32 bytes per sector"
for a sliver of its requests while its bulk traffic is coalesced; a 1-thread block uses 4 bytes of
each sector however its data is laid out, and the source counters' ideal (the fewest sectors the
active threads' bytes need) counts that sector as needed. The finding then says the two disagree
(info, no savings) instead of calling the bytes wasted, where the L1 global sectors carry a material
part of the kernel's DRAM traffic (`min_traffic_share`; a TMA GEMM's few LDGs are not worth a line). A direction whose bytes per sector is 0
while it moved sectors had no LDG/STG behind those sectors (0/0): it is neither quoted nor counted.
Without a memory speed-of-light share (or, for excess L1 serves, an L1 throughput) the saving is not
measured: the finding is info with a note naming the section that measures it.

With none of the three measures (ncu's basic set), the speed-of-light breakdown still speaks: L1 near its
roof (`signature_l1_pct`) while DRAM idles (`signature_dram_pct`) is the signature of accesses L1 serves
over and over. The finding says so, estimates half of L1's time as waste (`signature_waste_share`, said
in a note, not measured) so that a dominant kernel ranks by the time at stake, and names the sections
that measure it.

## Options
- `signature_l1_pct`: L1 throughput from which the basic-set signature speaks.
- `signature_dram_pct`: DRAM throughput below which DRAM counts as idle for that signature.
- `signature_sm_pct`: SM throughput above which the signature is a compute kernel's, not waste.
- `signature_waste_share`: the share of L1's busy time taken as waste when only the breakdown is measured.
- `min_excess_share`: the part of sectors that is excess before the check speaks.
- `min_l1_share`: L1 throughput (share of its peak) above which excess served from L1 still costs time.
- `min_traffic_share`: L1 global sectors' bytes over DRAM bytes below which a disagreement is not told.
"""

from nsanalyze.checks import global_settings
from nsanalyze.checks.base import (AT_NEED_SLACK, Check, Finding, KernelView, Threshold, clamp01, evidence,
                                   memory_bound_share, roof_share, share_of_need, unjudged)

ID = "uncoalesced-global"
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

# The example where one side alone wastes the sectors: the loads (a gather, as of embedding rows or a permutation),
# or the stores (a scatter, a transposed write); ADVICE's structure example where both do
GATHER_EXAMPLE = """```cuda
// before: a thread per element, rows picked by index: each warp's 32 loads fall in up to 32 sectors
out[i] = table[idx[i / cols] * cols + i % cols];
// after: a warp per picked row, its lanes along the row: each load instruction reads 128 consecutive bytes
for (int c = lane; c < cols; c += 32) out[r * cols + c] = table[idx[r] * cols + c];
```"""
SCATTER_EXAMPLE = """```cuda
// before: a transpose that reads along rows and writes down columns: each warp's 32 stores in 32 sectors
out[x * rows + y] = in[y * cols + x];
// after: through a shared-memory tile, so that the stores run along the output's rows too
tile[ty][tx] = in[y * cols + x]; __syncthreads(); out[y2 * rows + x2] = tile[tx][ty];   // tile[32][33]
```"""
SIDE_LEADS = {
    "load": ("The loads waste the sectors and the stores do not: a gather (rows or elements picked by index) or a "
             "strided read (a transpose read down columns). Make a warp's loads run along contiguous memory: a warp "
             "per picked row, the indices sorted so that neighbouring threads read neighbouring addresses, or a "
             "transpose staged through a shared-memory tile.\n\n", GATHER_EXAMPLE),
    "store": ("The stores waste the sectors and the loads do not: a scatter or a transposed write. Stage the "
              "output through shared memory so that a warp's stores run along contiguous memory.\n\n",
              SCATTER_EXAMPLE),
}


def side_advice(directions: dict[str, float] | None, limits) -> str:
    """ADVICE, led by the side that wastes the sectors where only one does (measured by the LDG/STG bytes per
    sector), with that side's example in place of the structure-of-arrays one."""
    if not directions:
        return ADVICE
    wasteful = [d for d, share in directions.items() if share >= limits["min_excess_share"]]
    if len(wasteful) != 1:
        return ADVICE
    lead, example = SIDE_LEADS[wasteful[0]]
    return lead + ADVICE[:ADVICE.index("```cuda")] + example


CHECK = Check(
    id=ID,
    name="memory.global.uncoalesced",
    title="Uncoalesced global memory access",
    section="memory",
    requires=("duration_ns",),
    optional=("global_sectors", "global_sectors_ideal", "global_sectors_excess_share",
              "global_load_bytes_per_sector", "global_store_bytes_per_sector", "global_load_sectors",
              "global_store_sectors", "sectors_per_request_global_load", "sectors_per_request_global_store",
              "memory_throughput_pct",
              "l1_hit_rate_pct", "l1_throughput_pct", "dram_bytes", "dram_throughput_pct", "sm_throughput_pct",
              "grid_size", "sm_count", "tensor_pipe_pct"),
    collect="--set full (SourceCounters and MemoryWorkloadAnalysis_Tables sections)",
    relieves="memory",
    thresholds={
        "min_excess_share": Threshold(0.25, "a quarter of the sectors wasted is more than alignment noise "
                                            "(tail elements, misaligned starts) ever costs"),
        "min_l1_share": Threshold(0.6, "an L1 under 60% busy has room for the extra sector work of split requests"),
        "min_traffic_share": Threshold(0.1, "the two coalescing measures' disagreement is told only where the L1 global "
                                             "sectors carry a tenth of the kernel's DRAM bytes: below that (TMA kernels' "
                                             "few LDGs) it changes nothing"),
        "signature_l1_pct": Threshold(80.0, "L1 this busy bounds the kernel: with DRAM idle it is the unit to relieve"),
        "signature_dram_pct": Threshold(20.0, "DRAM this idle while L1 is near its roof: the loads re-read data L1 "
                                              "holds, or split their sectors, instead of streaming new bytes"),
        "signature_sm_pct": Threshold(40.0, "a kernel whose SM pipes also run above 40% is computing on what L1 serves "
                                            "(a tiled GEMM), not re-reading it"),
        "signature_waste_share": Threshold(0.5, "without access counters half of L1's busy time is taken as waste: "
                                                "strided or redundant loads typically cost 2-8x the needed L1 work"),
        "async_copy_share": Threshold(0.5, "the share of the excess on cp.async (LDGSTS) from which the advice is "
                                           "cp.async's alignment, not the data's layout"),
        "ideal_sectors_per_request": Threshold(16.0, "without source counters or bytes per sector the access width is "
                                                     "unknown: 32 threads x 16-byte vectors = 16 sectors is still coalesced, "
                                                     "so only more than that is surely waste"),
        "word_sectors_per_request": Threshold(4.0, "32 threads x 4-byte words, the common access, fill 4 sectors: "
                                                   "past a quarter more than that and up to ideal_sectors_per_request, "
                                                   "the sectors are waste or wider accesses, which the report cannot "
                                                   "tell apart without the access width: not judged, never clean"),
    },
    speedup_model=("excess sectors / all sectors, times the kernel's memory speed-of-light share: "
                   "removing wasted traffic saves the time the memory system spent on it; when L1 hits serve the "
                   "loads' excess (nothing wasted past L1), the excess share of the L1's busy share instead"),
    advice=ADVICE,
)
ASYNC_COPY_ADVICE = """Most excess sectors come from `cp.async` (LDGSTS) copies from global to shared memory: align both
ends of each warp's copy to 128-byte lines.

- The shared destination first: a buffer only 16-byte aligned (`__align__(16)`) splits each warp's copy
  into more requests, and each moves its global sectors again (FaSTED's A100 pipeline: its global sectors
  halved, 2.15 -> 1.07 G, with the shared buffer `__align__(128)` and nothing else changed).
- The global source: allocations from `cudaMalloc` are 256-byte aligned; keep row pitches and tile
  offsets multiples of 128 bytes (pad the leading dimension).
- Let consecutive threads copy consecutive 16-byte chunks of a row, not a column.

```cuda
// before: the stage buffer 16-byte aligned: a warp's 512-byte copy straddles five 128-byte lines
__shared__ __align__(16) float4 stage[STAGES][TILE];
// after
__shared__ __align__(128) float4 stage[STAGES][TILE];
```"""

ACCESS_SECTIONS = "--section MemoryWorkloadAnalysis_Tables --section SourceCounters"
L1_SIGNATURE_ADVICE = f"""Find which accesses keep L1 busy, then make each warp's loads touch fewer sectors.

- Collect the access counters: `ncu {ACCESS_SECTIONS} -k <kernel> ./app`; the source view ranks
  the lines by excess sectors and bank conflicts.
- Strided or column-wise global reads: read along rows with `threadIdx.x`, or stage a tile in shared
  memory once and read it from there.
- The same data re-read by every thread: load it once per block (shared memory) or keep it in registers.
- Shared-memory tiles read column-wise: pad the row (`tile[32][33]`).

```cuda
// before: thread i reads a[i * 32 + k]: 32 sectors a request, all L1 hits
for (int k = 0; k < K; ++k) acc += a[threadIdx.x * 32 + k];
// after: consecutive threads read consecutive words
for (int k = 0; k < K; ++k) acc += a[k * 32 + threadIdx.x];
```"""
L1_ADVICE = """The loads split 32-byte sectors between requests; L1 serves the other part, so no DRAM or L2
bytes are wasted, but L1 does the sector work twice, and L1 is the busy unit.

- Give each thread a wider load (16-byte vectors: `float4`, `double2`, `int4`, four `__half2`), so that one request
  covers whole sectors; where each thread walks its own row, let consecutive threads read consecutive words instead.
- Load tiles that several warps use once into shared memory (`cp.async`), and read them from there:
  WMMA's `load_matrix_sync` from a shared-memory tile instead of global memory, as CUTLASS does."""
# The L1 advice's example: WMMA's where the kernel runs on the tensor cores, else a thread's own row read across
# the warp (textbook's stridedL1, a scalar 128-byte stride, and an FP64 kernel were shown WMMA, a user read)
L1_TENSOR_EXAMPLE = """```cuda
// before: every warp loads its fragments from global memory
wmma::load_matrix_sync(a, A + row * n + k, n);
// after: the block stages the tile once in shared memory (cp.async), each warp reads its fragment
wmma::load_matrix_sync(a, &As[warp_row][0], TILE_K);
```"""
L1_STRIDE_EXAMPLE = """```cuda
// before: each thread walks its own row of 32 words: a warp's request spans 32 sectors, L1 serves the rest later
for (int k = 0; k < 32; ++k) acc += table[threadIdx.x * 32 + k];
// after: the warp reads each row together, consecutive threads consecutive words, and combines across lanes
for (int r = 0; r < 32; ++r) acc_row[r] = table[r * 32 + threadIdx.x];   // then a shuffle reduction per row
```"""
L1_TENSOR_PIPE_PCT = 1.0   # tensor-pipe activity from which the kernel runs WMMA/MMA fragments (hgemm_wmma: 4.2%)


def _l1_advice(kernel: KernelView) -> str:
    tensor = kernel.get("tensor_pipe_pct")
    return L1_ADVICE + "\n\n" + (L1_TENSOR_EXAMPLE if tensor is not None and tensor >= L1_TENSOR_PIPE_PCT
                                  else L1_STRIDE_EXAMPLE)


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
    Wide (vector) accesses use whole sectors and are not waste. A direction counts only when it moved
    sectors and its LDG/STG instructions used bytes of them: 0 bytes per sector over moved sectors is
    the SASS counter's 0/0 (no LDG/STG; the sectors came from cp.async or other instructions), not a
    measurement."""
    shares = {}
    for direction in ("load", "store"):
        used = kernel.get(f"global_{direction}_bytes_per_sector")
        if used is not None and used > 0 and (kernel.get(f"global_{direction}_sectors") or 0) > 0:
            shares[direction] = clamp01(1 - used / 32.0)
    return shares or None


def _direction_waste(kernel: KernelView, directions: dict[str, float]) -> float:
    """The directions' wasted shares weighed by the sectors each moved."""
    sectors = {d: kernel.get(f"global_{d}_sectors") or 0 for d in directions}
    return sum(directions[d] * sectors[d] for d in directions) / sum(sectors.values())


def _which(directions: dict | None) -> str:
    if not directions:
        return ""
    worst = max(directions, key=directions.get)
    return "; " + ", ".join(f"{d}s use {32 * (1 - share):.0f} of 32 bytes per sector" for d, share in
                            sorted(directions.items(), key=lambda item: item[0] != worst))


def _material(kernel: KernelView, limits) -> bool:
    """The L1 global sectors carry a material part of the kernel's DRAM traffic (TMA kernels move theirs past
    the LSU: a few LDGs of a cuBLAS GEMM are not worth a line); true when DRAM bytes are not measured."""
    dram = kernel.get("dram_bytes")
    sectors = (kernel.get("global_load_sectors") or 0.0) + (kernel.get("global_store_sectors") or 0.0)
    return not dram or sectors * 32 >= limits["min_traffic_share"] * dram


def _disagreement(kernel: KernelView, directions: dict, excess_share: float, limits) -> Finding:
    """Source counters find the accesses coalesced while the LDG/STG bytes per sector say otherwise: said,
    not counted. The source counters hold each instruction's sectors against the fewest its active threads'
    bytes need; the bytes per sector also count sectors that no layout could fill (one active thread, a
    lone 4-byte value) and leave cp.async (LDGSTS) out."""
    waste = _direction_waste(kernel, directions)
    return Finding(
        check=ID,
        title=f"Global accesses coalesced by the source counters ({excess_share:.0%} excess sectors), though the "
              f"LDG/STG bytes per sector are low{_which(directions)}: sectors the active threads cannot fill, "
              "not wasted by the layout",
        estimated_speedup=0.0,
        evidence={"global_sectors_excess_share": evidence(excess_share, limits["min_excess_share"], unit="ratio"),
                  "bytes_per_sector_waste_share": evidence(waste, limits["min_excess_share"], unit="ratio"),
                  **{c: evidence(kernel.get(c)) for c in ("global_sectors", "global_sectors_ideal",
                                                           *(f"global_{d}_bytes_per_sector" for d in directions),
                                                           "sectors_per_request_global_load")
                     if kernel.get(c) is not None}},
        advice=ADVICE,
        notes=["no savings estimated: the two measures disagree and the source counters are the ones that hold each "
               "instruction's sectors against the fewest its active threads' bytes need, for every global "
               "instruction; the bytes per sector (NVIDIA's MemoryCacheAccessPattern rule quotes them) also count "
               "sectors that one active thread or a lone narrow value cannot fill, and average only LDG/STG, not "
               "cp.async (LDGSTS), while the sectors they are weighed by include its traffic"],
    )


def _sol_signature(kernel: KernelView, limits) -> Finding | None:
    """Without any access-pattern counter (ncu's basic set), the speed-of-light breakdown alone: L1 near its
    roof while DRAM idles is the signature of loads that re-read or split sectors L1 then serves (uncoalesced,
    redundant or bank-conflicted accesses). Said, with the sections that would tell which, never silent."""
    l1, dram, sm = (kernel.get(c) for c in ("l1_throughput_pct", "dram_throughput_pct", "sm_throughput_pct"))
    if l1 is None or dram is None or not limits["signature_l1_pct"] <= l1 <= 100.0 or dram > limits["signature_dram_pct"]:
        return None  # (over 100%: a launch too short for L1's active cycles to mean anything)
    grid, sms = kernel.get("grid_size"), kernel.get("sm_count")
    if grid is not None and sms is not None and grid < sms:
        return None  # one SM's L1 busy in a grid that leaves SMs without a block: small-grid's to say
    if sm is not None and sm > limits["signature_sm_pct"]:
        return None  # the SM's pipes are busy too: a compute kernel on shared-memory tiles (a GEMM), not waste
    share = clamp01(l1 / 100.0) * limits["signature_waste_share"]
    return Finding(
        check=ID,
        title=f"L1 at {l1:.0f}% of its peak while DRAM idles ({dram:.1f}%)"
              + (f" and the SM's pipes run at {sm:.0f}%" if sm is not None else "")
              + ": the signature of uncoalesced, redundant or bank-conflicted accesses that L1 serves",
        estimated_speedup=share,
        evidence={"l1_throughput_pct": evidence(l1, limits["signature_l1_pct"], unit="%"),
                  "dram_throughput_pct": evidence(dram, limits["signature_dram_pct"], unit="%", compare="<"),
                  "sm_throughput_pct": evidence(sm, unit="%")},
        advice=L1_SIGNATURE_ADVICE,
        notes=[f"the report holds only the speed-of-light breakdown (no sector, request or bank-conflict counters): "
               f"the estimate takes {limits['signature_waste_share']:.0%} of L1's busy time as waste, not measured; "
               f"`ncu {ACCESS_SECTIONS}` measures which accesses and lines waste it"],
    )


def _waits_on_latency_with_dram_at_need(kernel: KernelView) -> str | None:
    """Why the excess sectors cost no time, or None: DRAM moves no more than the accesses need (the excess stops in
    L2 or L1, which have room) and the kernel waits on latency (below the near-roof share of every unit, fewer ready
    warps a scheduler than the roofline's latency line, as its row reads). FaSTED's A100 pipeline at depth 4 (50% of
    its L2 sectors excess, DRAM at the need, 0.22 ready warps) runs its 23.9 ms as depth 3 without the excess does."""
    need, eligible, share = share_of_need(kernel, "dram_bytes"), kernel.get("eligible_warps_per_scheduler"), roof_share(kernel)
    if None in (need, eligible, share) or need > AT_NEED_SLACK:
        return None
    bands = global_settings()["roofline"]
    if share >= bands["near_roof_share"] or eligible >= bands["ready_warps"]:
        return None
    return (f"no time estimated: DRAM moves {need:.2f}x the bytes the accesses need, so the excess "
            f"sectors stop in L2 or L1, and the kernel waits on latency ({share:.0%} of its nearest roof, "
            f"{eligible:.2f} ready warps a scheduler): the units the excess loads are not what holds it; the latency "
            "findings (occupancy, ILP) speak for its time")


def _waits_on_latency_far_from_roofs(kernel: KernelView) -> str | None:
    """Why the excess sectors cost no time, or None: the kernel runs below the latency share of every roof with fewer
    ready warps a scheduler than the roofline's latency line, so no memory unit is what holds it; each warp waits on its
    own loads' latency, which a sector more or less per request barely moves. The dev suite's pointer chase (16% of its
    nearest roof, no ready warp, one dependent random load after another) wastes 87% of its sectors and would gain
    nothing from a layout that wastes none: its loads' addresses come from the loads before them."""
    eligible, share = kernel.get("eligible_warps_per_scheduler"), roof_share(kernel)
    bands = global_settings()["roofline"]
    if eligible is None or share is None or share >= bands["latency_share"] or eligible >= bands["ready_warps"]:
        return None
    return (f"no time estimated: the kernel waits on latency ({share:.0%} of its nearest roof, {eligible:.2f} ready "
            "warps a scheduler), not on the memory units the excess sectors load; the latency findings (occupancy, "
            "ILP) speak for its time")


def _worst_per_request(kernel: KernelView) -> tuple[float | None, str]:
    """(sectors per request, "load" or "store") of the direction that touches more sectors a request, of those the
    report measures (a memory chart alone holds L1's requests and L2's sectors: metrics.csv's second rows); the
    COALDA chart kernel's stores touch 32 sectors a request, its loads 26, where 4 would do."""
    measured = [(value, direction) for direction in ("load", "store")
                if (value := kernel.get(f"sectors_per_request_global_{direction}")) is not None]
    return max(measured) if measured else (None, "load")


def run(kernel: KernelView, limits) -> Finding | None:
    directions = _by_direction(kernel)
    excess_share = kernel.get("global_sectors_excess_share")
    # (ncu's "theoretical L2 sectors" are the sectors each access asks of L1, as if every one missed: "actual vs ideal
    # L2 sectors" read beside "no DRAM or L2 bytes are wasted" as a contradiction, a user read)
    measured_by = "source counters (the sectors each access asks for against the ideal, as if every access missed L1)"
    if excess_share is not None and directions and excess_share < limits["min_excess_share"] \
            and _direction_waste(kernel, directions) >= limits["min_excess_share"]:
        return _disagreement(kernel, directions, excess_share, limits) if _material(kernel, limits) else None
    if excess_share is None and directions:
        excess_share = _direction_waste(kernel, directions)
        measured_by = "bytes used per sector of the global loads and stores"
    if excess_share is None:
        per_request, direction = _worst_per_request(kernel)
        traffic = [kernel.get(c) for c in ("global_load_sectors", "global_store_sectors", "global_sectors")]
        if per_request is None and any(v is not None for v in traffic) and not any(traffic):
            return None  # no global loads or stores through L1 at all (TMA, or none): nothing to coalesce
        if per_request is None:  # none of the three ways to measure coalescing: not judged, never silent
            signature = _sol_signature(kernel, limits)
            if signature is not None:
                return signature
            return unjudged("global_sectors_excess_share", "global_load_bytes_per_sector",
                            "sectors_per_request_global_load")
        ideal = limits["ideal_sectors_per_request"]
        if limits["word_sectors_per_request"] / (1 - limits["min_excess_share"]) < per_request <= ideal:
            # (COALDA's chart kernel: stores at 12.0 sectors a request, 3x 4-byte words' 4, read as judged and clean
            # though its authors' fix was those stores, a user read)
            return unjudged(f"global_{direction}_bytes_per_sector", "global_sectors_excess_share",
                            collect=f"--section SourceCounters for the access width (the {direction}s touch "
                                    f"{per_request:.1f} sectors a request: waste, or accesses wider than 4 bytes)")
        excess_share = clamp01(1 - ideal / per_request) if per_request > ideal else 0.0
        source = ("" if kernel.get(f"global_{direction}_sectors") is not None else
                  ", as L2 sectors over L1 requests: L1's own sectors are not in the report")
        measured_by = (f"{direction} sectors per request against {ideal:g} (the access width is not in the "
                       f"report{source})")
    if excess_share < limits["min_excess_share"]:
        return None
    notes = [f"measured from {measured_by}"]
    memory_share = memory_bound_share(kernel)
    if memory_share is None:  # what the wasted traffic costs is not measured: say so, never assume
        notes.append("no savings estimated: the report has no memory speed-of-light share (memory_throughput_pct) "
                     "that says how much of the kernel's time the wasted sectors cost; ncu --section SpeedOfLight "
                     "measures it")
    speedup = clamp01(excess_share * (memory_share or 0.0))
    past_l1 = _past_l1(kernel, directions, excess_share)
    served_by_l1 = past_l1 is not None and past_l1 < limits["min_excess_share"]
    if served_by_l1:
        l1_throughput = kernel.get("l1_throughput_pct")
        if l1_throughput is None:
            speedup = 0.0
            notes.append("no savings estimated: L1 hits serve the excess, and the report does not measure how busy "
                         "L1 is (l1_throughput_pct); ncu --section MemoryWorkloadAnalysis measures it")
        else:
            l1_share = clamp01(l1_throughput / 100.0)
            if l1_share < limits["min_l1_share"]:
                return None  # L1 hits serve the excess and L1 has room: nothing wasted that costs time
            speedup = clamp01((excess_share - past_l1) * l1_share + past_l1 * (memory_share or 0.0))
    waiting = _waits_on_latency_with_dram_at_need(kernel) or _waits_on_latency_far_from_roofs(kernel)
    if waiting and speedup:
        speedup = 0.0
        notes.append(waiting)
    evidence_table = {
        "global_sectors_excess_share": evidence(excess_share, limits["min_excess_share"], unit="ratio"),
        "memory_throughput_pct": evidence(kernel.get("memory_throughput_pct"), unit="%"),
    }
    if past_l1 is not None:
        evidence_table["excess_share_past_l1"] = evidence(past_l1, limits["min_excess_share"], unit="ratio")
    quoted = [f"global_{d}_bytes_per_sector" for d in (directions or {})]  # directions with LDG/STG behind them
    for concept in ("sectors_per_request_global_load", "sectors_per_request_global_store", "global_sectors",
                    "global_sectors_ideal", *quoted,
                    "l1_hit_rate_pct", "l1_throughput_pct"):
        if kernel.get(concept) is not None:
            evidence_table[concept] = evidence(kernel.get(concept))
    if directions and kernel.get("global_sectors_excess_share") is not None \
            and _direction_waste(kernel, directions) < limits["min_excess_share"]:
        # the LDG/STG bytes per sector find them used while the source counters find excess: the excess lies in
        # instructions the bytes per sector do not average (cp.async); quoting them would contradict the title
        notes.append("the LDG/STG bytes per sector find the sectors used (" + _which(directions)[2:] + "); they "
                     "average only LDG/STG instructions, the source counters every global instruction, cp.async "
                     "(LDGSTS) included")
        directions_quoted = None
    else:
        directions_quoted = directions
    which = _which(directions_quoted)
    on_async = kernel.excess_share_on("LDGSTS", "memory_l2_theoretical_sectors_global",
                                      "memory_l2_theoretical_sectors_global_ideal")
    async_copies = on_async is not None and on_async >= limits["async_copy_share"]
    if async_copies:
        which += f"; {on_async:.0%} of the excess on cp.async (LDGSTS) copies to shared memory"
    title = f"{excess_share:.0%} of global-memory sectors are wasted by uncoalesced access{which}"
    if served_by_l1:
        title = (f"Global loads split sectors between requests ({1 / max(1e-9, 1 - excess_share):.1f}x the sector accesses "
                 f"the bytes need{which}); L1 serves the rest ({kernel.get('l1_hit_rate_pct'):.0f}% hit rate), so "
                 "no DRAM or L2 bytes are wasted, but L1 "
                 + (f"({kernel.get('l1_throughput_pct'):.0f}% busy) " if kernel.get("l1_throughput_pct") is not None else "")
                 + "does the extra work")
    return Finding(
        check=ID,
        title=title,
        estimated_speedup=speedup,
        evidence=evidence_table,
        advice=_l1_advice(kernel) if served_by_l1 else ASYNC_COPY_ADVICE if async_copies else side_advice(directions_quoted,
                                                                                                  limits),
        source=kernel.top_spots("memory_l2_theoretical_sectors_global", "memory_l2_theoretical_sectors_global_ideal"),
        notes=notes,
    )
