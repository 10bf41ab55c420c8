"""Compute-bound on a floating-point pipe busy with instructions that could be cheaper.

## What it detects
A kernel whose busiest unit is its FP64 pipe or its FMA (FP32) pipe, at half its peak or more and above
the memory system's share, when a measurable part of that pipe's instructions could go: divisions
(each FP64 division is a Newton-Raphson sequence of about seven FP64 instructions seeded by one
`MUFU.RCP64H`; an IEEE FP32 division is five FFMAs around `MUFU.RCP` and `FCHK`), separate add and
multiply instructions that one fused multiply-add could replace (NVIDIA's `FPInstructions` rule), and FP64
arithmetic on a GPU whose FP64 pipe runs at a small fraction (1/32, 1/64) of its FP32 rate.

## Why it is slow
A pipe-bound kernel runs as fast as its pipe retires instructions: every instruction taken off the
pipe is time taken off the kernel, until the next limit (memory, issue) is reached. `x / y` in FP64
costs the FP64 pipe about seven instructions where `x * r` costs one; a `DADD` and a `DMUL` cost two
where a `DFMA` costs one; on consumer GPUs an FP64 instruction costs what 32-64 FP32 ones do.

## Example
```cuda
double u = vals[UMOM] / r, w = vals[WMOM] / r, t = vals[RHOT] / r;   // three FP64 divisions
flux = (a - b) / 12.0;                                             // a division by a constant
```

## Instead
```cuda
double inv_r = 1.0 / r;                                            // one division, reused
double u = vals[UMOM] * inv_r, w = vals[WMOM] * inv_r, t = vals[RHOT] * inv_r;
flux = (a - b) * (1.0 / 12.0);                                     // folded at compile time
```

## Known problems
Divisions are counted from the per-opcode breakdown (`--section InstructionStats`, in `--set full`):
one `MUFU.RCP64H` per FP64 division or reciprocal. Without it only the fused/non-fused mix is judged.
`1.0 / x` counts as a division though hoisting cannot remove the last one of a value; the estimate
assumes each division becomes one multiplication (divisions by values that change every time stay).
Fusing counts one add and one multiply per pair, an upper bound: the compiler already fuses what it
may (`-fmad=true`), what is left is often not a product feeding a sum. FP64-to-FP32 holds only where
FP32's precision is enough; the estimate assumes all of it moves. Special functions (`pow`, `exp`,
`sin` in FP64) are long DFMA polynomials that this check does not separate from other arithmetic.
Thread instruction counts are turned into warp instructions at 32 threads.
Where the report holds a variant with the same launch shape and global traffic, a name of the same leading
word and fewer instructions (`fp64_recip` beside `fp64_divide`), the measured difference is the estimate.

## Options
- `min_pipe_share`: share of its peak at which an FP pipe counts as the kernel's limiter.
- `fp64_division_pipe_instructions`: FP64-pipe instructions a division saves when it becomes a multiplication.
- `fp32_division_pipe_instructions`: FMA-pipe instructions an IEEE FP32 division saves as a multiplication.
- `max_fp64_rate_ratio`: FP64/FP32 peak ratio at or below which FP64 counts as slow on the GPU.
- `min_removable_share`: share of the pipe's instructions that must be removable before it speaks.
- `max_tensor_pipe_pct`: tensor-pipe activity above which the kernel is matrix math: not this check's.
"""

import re

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, memory_bound_share, unjudged
from nsanalyze.checks.libraries import library_of

ID = "costly-fp-math"
WARP = 32.0
ADVICE = """Take work off the busy floating-point pipe.

- **Divisions:** compute a reciprocal once and multiply (`inv = 1.0 / r; a * inv; b * inv`); write a
  division by a constant as a multiplication by its reciprocal (`x * (1.0 / 12.0)`), which the compiler
  folds; FP64 division is a ~7-instruction Newton sequence, the multiplication one instruction.
- **Unfused add and multiply:** write `fma(a, b, c)` (or `a * b + c` without `-fmad=false`) so that one
  DFMA/FFMA replaces a DMUL and a DADD.
- **FP64 on a GPU with a slow FP64 pipe (1/32-1/64 rate):** use `float` where its precision is enough
  (accumulate in FP64, compute in FP32), and float literals (`1.0f`) so that FP32 code stays FP32.

```cuda
// before: three FP64 divisions per cell, and one by a constant
double u = ru / r, w = rw / r, t = rt / r;   flux = (a - b) / 12.0;
// after: one division; multiplications by reciprocals
double inv_r = 1.0 / r;
double u = ru * inv_r, w = rw * inv_r, t = rt * inv_r;   flux = (a - b) * (1.0 / 12.0);
```"""



def without_slow_fp64(advice: str) -> str:
    """The advice without its slow-FP64 item: on a GPU whose FP64 runs at half its FP32 rate (V100, A100, H100) moving
    to float is no saving the check priced (a user read of NCAR's V100 report)."""
    start = advice.index("- **FP64 on a GPU with a slow FP64 pipe")
    return advice[:start] + advice[advice.index("\n\n```", start) + 1:]


CHECK = Check(
    id=ID,
    name="compute.fp.costly",
    title="FP pipe busy with costly instructions: divisions, unfused add/multiply, slow FP64",
    section="kernel",
    requires=("sm_throughput_pct",),
    optional=("fp64_pipe_pct", "fma_pipe_pct", "fp64_add_thread_instructions", "fp64_mul_thread_instructions", "fp64_fma_thread_instructions",
              "fp32_add_thread_instructions", "fp32_mul_thread_instructions", "fp32_fma_thread_instructions",
              "opcode_instructions", "fp64_reciprocal_instructions", "fp32_division_check_instructions",
              "fp64_peak_flops_per_s", "fp32_peak_flops_per_s", "tensor_pipe_pct", "xu_pipe_pct",
              "memory_throughput_pct", "dram_throughput_pct", "sm_throughput_pct"),
    collect="--set full (ComputeWorkloadAnalysis and InstructionStats sections)",
    relieves="compute",
    thresholds={
        "min_pipe_share": Threshold(0.5, "at half its peak or more, and busier than the memory system, an FP pipe is "
                                         "what the kernel waits for; below it, latency or memory sets the time"),
        "fp64_division_pipe_instructions": Threshold(6.0, "CUDA's FP64 division: MUFU.RCP64H, two Newton-Raphson "
                                                          "steps (4 DFMA), the quotient (DMUL) and its correction "
                                                          "(2 DFMA) are 7 FP64-pipe instructions; a multiplication "
                                                          "by a hoisted reciprocal is 1: 6 saved"),
        "fp32_division_pipe_instructions": Threshold(4.0, "an IEEE FP32 division is 5 FFMAs around MUFU.RCP and "
                                                          "FCHK; a multiplication is 1: 4 saved"),
        "max_fp64_rate_ratio": Threshold(1 / 16, "data-center GPUs run FP64 at 1/2 of FP32; consumer and "
                                                 "workstation parts (Turing, GA10x, Ada) at 1/32-1/64"),
        "min_removable_share": Threshold(0.05, "fewer than 5% of the pipe's instructions to remove is within "
                                               "what a rebuild changes anyway"),
        "max_tensor_pipe_pct": Threshold(5.0, "a kernel that keeps its tensor pipe busy is matrix math (GEMM, "
                                              "convolution): its FMA work is the library's"),
    },
    speedup_model=("the pipe's busy share x the share of its instructions the fix removes (divisions turned into "
                   "multiplications, add+multiply pairs fused, or FP64 moved to FP32 at the GPU's rate ratio), "
                   "never more than the distance to the memory roof (1 - memory throughput share); where the "
                   "divisions' MUFU/FCHK keep the XU busiest, 1 - the next-busiest unit's share"),
    advice=ADVICE,
)

CLOSED = frozenset({"cuBLAS", "cuBLASLt", "cuDNN", "CUTLASS", "NCCL"})


SAME_TRAFFIC = 0.1  # a variant that computes the same values loads and stores the same sectors


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()) if w]


def same_work(kernel: KernelView, other: KernelView) -> str | None:
    """Whether `other`, in the same report, computes what the kernel does with cheaper arithmetic: the same launch
    shape, the same global sectors loaded and stored (the same inputs and results), fewer instructions (the fix
    takes some away), and a name of the same leading word that is not a generated sibling (OpenACC's
    compute_x_279_gpu and compute_x_309_gpu are other loops). fp_mix: fp64_divide and fp64_recip (x * rc[j])."""
    mine, theirs = _words(kernel.name), _words(other.name)
    if not mine or not theirs or mine[0] != theirs[0]:
        return None
    if re.sub(r"\d+", "#", kernel.name.lower()) == re.sub(r"\d+", "#", other.name.lower()):
        return None
    for concept in ("grid_size", "block_size"):
        if kernel.get(concept) is None or kernel.get(concept) != other.get(concept):
            return None
    for concept in ("global_load_sectors", "global_store_sectors"):
        a, b = kernel.get(concept), other.get(concept)
        if a is None or b is None or abs(a - b) > SAME_TRAFFIC * max(a, b):
            return None
    instructions, fewer = kernel.get("instructions_executed"), other.get("instructions_executed")
    if not instructions or not fewer or fewer >= instructions:
        return None
    return (f"the same launch shape and global traffic with {fewer / 1e6:.0f}M instructions against this kernel's "
            f"{instructions / 1e6:.0f}M")


def _warp(kernel: KernelView, concept: str) -> float:
    """A thread-instruction count as warp instructions at full warps (0 when not measured)."""
    return (kernel.get(concept) or 0.0) / WARP


def _xu_bound_divisions(kernel: KernelView, limits, fp64_share: float, fma_share: float, memory: float):
    """Divisions whose reciprocal seeds and range checks (MUFU.RCP, MUFU.RCP64H, FCHK on the XU, a quarter-rate
    unit) keep the XU busier than any FP pipe: as multiplications by hoisted reciprocals that work goes, and
    the kernel runs until its next-busiest unit limits it: 1 - that unit's share, an upper bound on the rest
    (that unit's own share of the division sequences goes too). Other special functions on the XU are not
    counted apart: the note says so."""
    xu = (kernel.get("xu_pipe_pct") or 0.0) / 100
    divisions = (kernel.get("fp32_division_check_instructions") or 0.0) + (kernel.get("fp64_reciprocal_instructions") or 0.0)
    next_unit = max(fp64_share, fma_share, memory)
    if not divisions or xu < limits["min_pipe_share"] or xu <= next_unit:
        return None
    speedup = clamp01(1 - next_unit)
    names = {"FMA (FP32) pipe": fma_share, "FP64 pipe": fp64_share, "memory": memory}
    runner_up = max(names, key=names.get)
    return Finding(
        check=ID,
        title=f"XU pipe at {xu:.0%} of peak with {divisions / 1e6:.1f}M divisions: their reciprocal seeds and checks "
              f"(MUFU.RCP, FCHK) set the kernel's time; multiply by hoisted reciprocals",
        estimated_speedup=speedup,
        evidence={"pipe": {"value": "XU"}, "cause": {"value": "divisions"},
                  "xu_pipe_pct": evidence(xu * 100, limits["min_pipe_share"] * 100, unit="%"),
                  "divisions": evidence(divisions),
                  "next_unit_share": evidence(next_unit, unit="ratio"),
                  "fma_pipe_pct": evidence(fma_share * 100, unit="%"), "fp64_pipe_pct": evidence(fp64_share * 100, unit="%"),
                  "memory_share": evidence(memory, unit="ratio")},
        advice=ADVICE,
        source=kernel.top_spots("inst_executed"),
        notes=[f"without the divisions' XU work the kernel runs until its next-busiest unit ({runner_up}, "
               f"{next_unit:.0%}) limits it: at most {speedup:.0%} saved; other special functions on the XU "
               "(exp, sin, rsqrt) are not counted apart"],
    )


def run(kernel: KernelView, limits) -> Finding | None:
    if (kernel.get("tensor_pipe_pct") or 0.0) > limits["max_tensor_pipe_pct"]:
        return None
    if library_of(kernel.name) in CLOSED:
        return None
    memory = memory_bound_share(kernel) or 0.0
    if kernel.get("fp64_pipe_pct") is None or kernel.get("fma_pipe_pct") is None:
        sm_share = kernel.get("sm_throughput_pct") / 100  # no pipe can be busier than the SM's busiest unit
        if sm_share < limits["min_pipe_share"] or sm_share <= memory:
            return None
        return unjudged(*kernel.missing(("fp64_pipe_pct", "fma_pipe_pct")), collect="--section ComputeWorkloadAnalysis")
    fp64_share, fma_share = kernel.get("fp64_pipe_pct") / 100, kernel.get("fma_pipe_pct") / 100
    xu_bound = _xu_bound_divisions(kernel, limits, fp64_share, fma_share, memory)
    if xu_bound is not None:
        return xu_bound
    fp64 = fp64_share >= fma_share
    pipe_share = fp64_share if fp64 else fma_share
    if pipe_share < limits["min_pipe_share"] or pipe_share <= memory:
        return None
    prefix = "fp64" if fp64 else "fp32"
    adds, muls, fmas = (_warp(kernel, f"{prefix}_{w}_thread_instructions") for w in ("add", "mul", "fma"))
    pipe_instructions = adds + muls + fmas
    if pipe_instructions <= 0:
        return None
    opcodes_measured = kernel.get("opcode_instructions") is not None
    if fp64:
        divisions = kernel.get("fp64_reciprocal_instructions") or 0.0
        per_division = limits["fp64_division_pipe_instructions"]
    else:
        divisions = kernel.get("fp32_division_check_instructions") or 0.0
        per_division = limits["fp32_division_pipe_instructions"]
    division_removed = min(divisions * per_division, pipe_instructions)
    # a pair is one add and one multiply; the multiply that ends each division sequence is not a free one
    free_muls = max(0.0, muls - divisions) if fp64 else muls
    fusable = min(adds, free_muls)
    fused_removed = min(fusable, pipe_instructions - division_removed)
    ratio = None
    slow_fp64_removed = 0.0
    peak64, peak32 = kernel.get("fp64_peak_flops_per_s"), kernel.get("fp32_peak_flops_per_s")
    if fp64 and peak64 and peak32:
        ratio = peak64 / peak32
        if ratio <= limits["max_fp64_rate_ratio"]:  # what is left, moved to FP32, costs `ratio` of it
            slow_fp64_removed = (pipe_instructions - division_removed - fused_removed) * (1 - ratio)
    removed = division_removed + fused_removed + slow_fp64_removed
    removable_share = removed / pipe_instructions
    if removable_share < limits["min_removable_share"]:
        return None
    ceiling = max(0.0, 1 - memory)
    speedup = clamp01(min(pipe_share * removable_share, ceiling))
    parts = {"divisions": division_removed, "unfused add+multiply": fused_removed,
             "FP64 on a slow-FP64 GPU": slow_fp64_removed}
    cause = max(parts, key=parts.get)
    pipe = "FP64" if fp64 else "FMA (FP32)"
    notes = [f"{pipe} pipe at {pipe_share:.0%} of peak, memory at {memory:.0%}: removing {removable_share:.0%} of "
             f"the pipe's instructions saves about {pipe_share:.0%} x {removable_share:.0%}"
             + (f", capped at {ceiling:.0%} (the memory roof)" if speedup >= ceiling else "")]
    if not opcodes_measured:
        notes.append("divisions not counted: the report has no per-opcode breakdown (--section InstructionStats "
                     "counts MUFU.RCP64H and FCHK)")
    if slow_fp64_removed:
        notes.append(f"FP64 runs at 1/{1 / ratio:.0f} of the FP32 rate on this GPU: the estimate assumes FP32's "
                     "precision is enough for the FP64 work that remains")
    title_parts = []
    if division_removed:
        title_parts.append(f"{divisions / 1e6:.1f}M {'FP64' if fp64 else 'FP32'} divisions")
    if fused_removed:
        title_parts.append(f"up to {fusable / 1e6:.1f}M unfused add/multiply pairs")   # min(adds, multiplies): a bound
    if slow_fp64_removed:
        title_parts.append(f"FP64 at 1/{1 / ratio:.0f} rate")
    share_of = lambda n: n / pipe_instructions  # noqa: E731
    return Finding(
        check=ID,
        # up to: every division's sequence counted gone, where a reciprocal computed once keeps one for each group
        # of divisions by the same value (the advice's example keeps one of three)
        title=f"{pipe} pipe at {pipe_share:.0%} of peak, up to {removable_share:.0%} of its instructions could go ("
              + ", ".join(title_parts) + ")",
        estimated_speedup=speedup,
        evidence={
            "pipe": {"value": pipe},
            "pipe_share": evidence(pipe_share, limits["min_pipe_share"], unit="ratio"),
            "memory_share": evidence(memory, pipe_share, unit="ratio", compare="<"),
            "cause": {"value": cause},
            "pipe_instructions": evidence(pipe_instructions),
            "add_instructions": evidence(adds),
            "mul_instructions": evidence(muls),
            "fma_instructions": evidence(fmas),
            "divisions": evidence(divisions if opcodes_measured else None),
            "division_share": evidence(share_of(division_removed), unit="ratio"),
            "fusable_pairs": evidence(fusable),
            "fusion_share": evidence(share_of(fused_removed), unit="ratio"),
            "fp64_rate_ratio": evidence(ratio, limits["max_fp64_rate_ratio"], unit="ratio", compare="<=")
            if ratio is not None else evidence(None),
            "slow_fp64_share": evidence(share_of(slow_fp64_removed), unit="ratio"),
            "removable_share": evidence(removable_share, limits["min_removable_share"], unit="ratio"),
            "division_speedup": evidence(min(pipe_share * share_of(division_removed), ceiling), unit="ratio"),
            "xu_pipe_pct": evidence(kernel.get("xu_pipe_pct"), unit="%"),
        },
        advice=ADVICE if slow_fp64_removed else without_slow_fp64(ADVICE),
        source=kernel.top_spots("inst_executed"),
        notes=notes,
    )
