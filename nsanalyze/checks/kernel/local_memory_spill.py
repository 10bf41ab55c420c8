"""Register spills and local-memory traffic.

## What it detects
Loads and stores to local memory: registers the compiler spilled under a register cap, or
per-thread arrays indexed at run time, which live in local memory.

## Why it is slow
Local memory is off-chip memory cached in L1/L2: every spill is a memory round trip where a
register read would have been free, and it competes with the kernel's real traffic.

## Example
```cuda
__global__ void __launch_bounds__(1024, 2) k(...) {   // caps registers at 32 per thread
    float r[48];                                      // indexed with run-time values
```

## Instead
```cuda
__global__ void __launch_bounds__(256) k(...) {       // room for the registers it needs
```

## Known problems
The spill-instruction count needs ncu 2025 or newer; older reports show local traffic only,
which also includes intended local arrays.

Where DRAM moves no more than the global accesses need, the local traffic stays in L1 and L2: on a
kernel near its DRAM roof the fix takes no load off that roof, and the finding is capped at info
like the latency findings are.

## Options
- `min_local_share`: local bytes over all L1 global+local bytes before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, memory_bound_share, size_text

ID = "local-memory-spill"
ADVICE = """Keep per-thread data in registers.

- Loosen the register cap: raise `__launch_bounds__` threads or drop `minBlocksPerSM`, or remove
  `-maxrregcount`; check `-Xptxas -v` for "bytes spill stores".
- Index per-thread arrays with compile-time constants (fully unrolled loops) so they stay in registers.
- Move large per-thread arrays to shared memory, one slice per thread.

```cuda
// before: 48 floats under a 32-register cap, indexed at run time
__global__ void __launch_bounds__(1024, 2) k(const float* in, float* out) { float r[48]; ... }
// after: room for the registers, compile-time indices
__global__ void __launch_bounds__(256) k(const float* in, float* out) { float r[48]; /* #pragma unroll */ }
```"""

CHECK = Check(
    id=ID,
    name="memory.local.spill",
    title="Register spills and local-memory traffic",
    section="memory",
    requires=("local_bytes",),
    optional=("spill_instructions", "local_instructions", "global_load_sectors", "global_store_sectors",
              "registers_per_thread", "memory_throughput_pct", "dram_bytes", "global_sectors_ideal"),
    collect="--set full (MemoryWorkloadAnalysis_Tables and SourceCounters sections)",
    relieves="memory",
    thresholds={
        "min_local_share": Threshold(0.05, "under 5% of the L1 traffic, local memory costs less than the fix"),
    },
    speedup_model="local bytes / (local + global bytes at L1), times the kernel's memory speed-of-light share",
    advice=ADVICE,
)


DRAM_AT_NEED = 1.1  # DRAM moving no more than this times the bytes the global accesses need carries no local traffic


def _reaches_dram(kernel: KernelView) -> bool:
    """Whether the local traffic can be on DRAM: DRAM moves more than the global accesses need (their ideal sectors).
    Where it moves no more, local memory lives in L1 and L2, and a kernel near its DRAM roof stays there however
    its spills are fixed (FaSTED's MatrixTransferKernel: DRAM 134.5 MB for 134.2 MB of global need, 8.4 MB local)."""
    dram, ideal = kernel.get("dram_bytes"), kernel.get("global_sectors_ideal")
    if dram is None or not ideal:
        return True
    return dram > DRAM_AT_NEED * ideal * 32


def run(kernel: KernelView, limits) -> Finding | None:
    local_bytes = kernel.get("local_bytes")
    if not local_bytes:
        return None
    global_bytes = ((kernel.get("global_load_sectors") or 0.0) + (kernel.get("global_store_sectors") or 0.0)) * 32
    local_share = local_bytes / (local_bytes + global_bytes)
    if local_share < limits["min_local_share"]:
        return None
    spills = kernel.get("spill_instructions")
    memory_share = memory_bound_share(kernel) or 0.0
    facts = {"local_share": evidence(local_share, limits["min_local_share"], unit="ratio"),
             "local_bytes": evidence(local_bytes, unit="byte"),
             "registers_per_thread": evidence(kernel.get("registers_per_thread")),
             "memory_throughput_pct": evidence(kernel.get("memory_throughput_pct"), unit="%")}
    if spills is not None:
        facts["spill_instructions"] = evidence(spills)
    what = "register spills" if spills else "local-memory accesses"
    source = kernel.top_spots("sass__inst_executed_register_spilling") or kernel.top_spots(
        "memory_l2_theoretical_sectors_local")
    finding = Finding(
        check=ID,
        title=f"{local_share:.0%} of L1 traffic is local memory ({what}, {size_text(local_bytes)})",
        estimated_speedup=clamp01(local_share * memory_share),
        evidence=facts,
        advice=ADVICE,
        source=source,
    )
    if not _reaches_dram(kernel):  # the fix takes load off L1 and L2 only: not off the DRAM roof (rank.apply_roof_gate)
        finding.relieves = "on-chip"
        finding.notes.append(f"DRAM moves {size_text(kernel.get('dram_bytes'))}, no more than the global accesses need "
                             f"({size_text(kernel.get('global_sectors_ideal') * 32)}): the local traffic stays in L1 "
                             "and L2, and fixing it takes no load off DRAM")
    return finding
