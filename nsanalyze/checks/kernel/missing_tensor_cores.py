"""Matrix arithmetic on the FMA pipes while the tensor cores idle.

## What it detects
A kernel that spends its time on FP32 (or FP16) fused multiply-adds fed from shared-memory
tiles, the shape of a hand-written matrix product or convolution, with no or negligible
tensor-pipe activity.

## Why it is slow
Since Volta, tensor cores run matrix products several times faster than the FMA pipes: on
Hopper the dense TF32 roof is about 7x and the BF16 roof about 15x the FP32 FMA roof. A GEMM on
FFMA leaves most of the chip's arithmetic unused.

## Example
```cuda
for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];   // FFMA, one product per thread
```

## Instead
```python
torch.backends.cuda.matmul.allow_tf32 = True     # cuBLAS picks TF32 tensor-core kernels
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = x @ w
```

Only GEMM-like work counts: FMAs (FP32 FFMA, FP16 HFMA and half2 HFMA2) are most of the
floating-point instructions, and operands come from shared-memory tiles with reuse (FLOP per DRAM
byte). On GPUs whose FP16 pipe is the tensor pipe (V100, A100, H100) the tensor pipe's busy cycles
include plain HFMA2: the MMA operation counters decide when the report holds them. When shared
memory is the bottleneck (L1 near its roof with heavy bank-conflict replays), that is fixed first:
the tensor-core savings count after bank-conflicts.

The GPU's tensor cores are looked up by model in `normalize/device_caps.csv` (NVIDIA's
specifications), not inferred from compute capability: a GTX 1660 (TU116, CC 7.5 like the RTX 20
series) has none, and gets no advice to use them.

Where the report holds a kernel that runs the same product on tensor cores (as many tensor operations as
the kernel's FLOPs), the measured difference is the estimate instead (`rank.measured_twins`).

## Known problems
It cannot see that the arithmetic is a matrix product; it looks for FMA-dominated FP work that
reads operands from shared memory, at scale. A stencil with the same shape can trip it. FP32
results on tensor cores (TF32) carry a 10-bit mantissa: check that the model tolerates it.

## Options
- `min_fp16_pipe_pct`: FP16 pipe use from which FP16 work is estimated where the report has no HFMA counters.
- `min_fp_roof_share`: FP32/FP16 FLOP rate over that roof before the kernel counts as FMA work at scale.
- `max_tensor_pipe_pct`: tensor-pipe activity below which tensor cores count as unused.
- `tensor_efficiency`: the share of the tensor roof a library kernel reaches, for the estimate.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, unjudged

ID = "missing-tensor-cores"
ADVICE = """Run the matrix products on tensor cores.

- Call cuBLAS/cuBLASLt or CUTLASS instead of a hand-written FMA loop, with a tensor-core math mode:
  `cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)` keeps FP32 storage and computes in TF32.
- PyTorch: `torch.backends.cuda.matmul.allow_tf32 = True` (and `torch.backends.cudnn.allow_tf32`),
  or `torch.autocast("cuda", dtype=torch.bfloat16)` for BF16 with FP32 accumulation.
- In your own kernels use WMMA (`nvcuda::wmma`) or `mma.sync`/`wgmma` (Hopper) fragments.
- Tensor cores want aligned shapes: M, N, K multiples of 8 (TF32/FP16/BF16; 16 for INT8) and
  16-byte aligned leading dimensions, or cuBLAS falls back to slower paths.

```cuda
// before: one FFMA per product
for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
// after: a 16x16x16 tensor-core fragment per warp (BF16 in, FP32 accumulate)
wmma::load_matrix_sync(a, A + ..., lda);
wmma::load_matrix_sync(b, B + ..., ldb);
wmma::mma_sync(acc, a, b, acc);
```"""

CHECK = Check(
    id=ID,
    name="compute.tensor.missing",
    title="Matrix math on FMA pipes instead of tensor cores",
    section="tensor",
    requires=("duration_ns", "fp32_flops", "fp32_peak_flops_per_s"),
    optional=("tensor_pipe_pct", "tensor_hmma_pipe_pct", "tensor_gmma_pipe_pct", "fp16_flops",
              "shared_load_requests", "shared_wavefronts", "warp_execution_efficiency", "dram_bytes",
              "fma_pipe_pct", "fp16_pipe_pct",
              "tf32_peak_flops_per_s", "bf16_peak_flops_per_s", "fp_fma_share", "fp16_fma_share", "tensor_mma_ops",
              "l1_throughput_pct", "bank_conflict_share", "tensor_cores"),
    collect="--set full (ComputeWorkloadAnalysis and the roofline sections)",
    relieves="compute",
    part_of=("low-tensor-activity", "matmul_simt"),   # a joined nsys export's program view of the same GEMMs
    thresholds={
        "min_fp_roof_share": Threshold(0.05, "below 5% of the FP roof the FMAs are not where the time goes"),
        "min_arithmetic_intensity": Threshold(12.0, "matrix products reuse each operand byte many times (measured GEMMs: "
                                                    "26-380 FLOP per DRAM byte); softmax, layer norm and element-wise "
                                                    "kernels do 0.1-8"),
        "max_tensor_pipe_pct": Threshold(1.0, "a kernel on tensor cores keeps the pipe busy well above 1%"),
        "min_warp_efficiency": Threshold(0.8, "divergent code is not a matrix product; fix divergence first"),
        "min_fma_share": Threshold(0.6, "a matrix product's inner loop is almost all FMA (FFMA, HFMA, HFMA2); softmax, "
                                        "norms and element-wise math are adds, multiplies and special functions"),
        "shared_bottleneck_l1_pct": Threshold(90.0, "L1/shared memory this busy sets the kernel's time"),
        "shared_bottleneck_conflict_share": Threshold(0.4, "with this many bank-conflict replays the shared-memory "
                                                           "pipe is the bottleneck: tensor cores would wait on it too"),
        "min_fp16_pipe_pct": Threshold(20.0, "without HFMA counters, an FP16 pipe issuing on a fifth of its peak is "
                                             "FP16 arithmetic at scale (the fp16 suite's GEMMs: 32%; its stencil: 7%)"),
        "tensor_efficiency": Threshold(0.5, "cuBLAS/CUTLASS GEMMs of moderate size reach about half the dense roof"),
    },
    speedup_model=("1 - (the kernel's FLOPs at tensor_efficiency of the device's dense TF32 roof, or its "
                   "FP16/BF16 roof where TF32 is missing) / the kernel's duration"),
    advice=ADVICE,
)


SAME_PRODUCT = 0.1  # one matrix product counts 2 x M x N x K operations whatever runs it; epilogues add a few


def same_work(kernel: KernelView, other: KernelView) -> str | None:
    """Whether `other`, in the same report, runs the kernel's matrix product on tensor cores: its MMA operations
    (2 x M x N x K, ncu's tensor-path counters) are the kernel's FMA-pipe FLOPs. ncu's roofline weighs every HFMA
    as a packed half2 (4 FLOPs), so a kernel of scalar HFMA reads twice its product's FLOPs: the FP16 part
    matches from half of it up to all of it (fp16 suite: hgemm_scalar 34.4 GFLOP, hgemm_half2 17.2 GFLOP,
    hgemm_wmma's 17.2 G tensor operations, n = 2048). The launch shape may differ: a tensor-core kernel tiles
    the product its own way. Returns how the twin was matched, for the finding's note, or None."""
    ops = other.get("tensor_mma_ops")
    fp32, half = kernel.get("fp32_flops") or 0.0, kernel.get("fp16_flops") or 0.0
    if not ops or not fp32 + half:
        return None
    if not (fp32 + half / 2) * (1 - SAME_PRODUCT) <= ops <= (fp32 + half) * (1 + SAME_PRODUCT):
        return None
    return (f"the same matrix product on tensor cores: {ops / 1e9:.1f} G tensor operations against this kernel's "
            f"{(fp32 + half) / 1e9:.1f} GFLOP")


def _tensor_activity(kernel: KernelView) -> float | None:
    """Tensor-pipe activity that is matrix math. Where the report counts MMA operations, none means none,
    whatever the pipe's busy cycles (which include plain HFMA2 on V100/A100/H100). Without that counter,
    an FP16 FMA kernel's tensor-pipe cycles may be its own HFMA2: not evidence of tensor-core use."""
    ops = kernel.get("tensor_mma_ops")
    if ops is not None and ops <= 0:
        return 0.0
    values = [kernel.get(c) for c in ("tensor_hmma_pipe_pct", "tensor_gmma_pipe_pct", "tensor_pipe_pct")]
    values = [v for v in values if v is not None]
    if ops is None and (kernel.get("fp16_fma_share") or 0.0) >= 0.5:
        return None
    return max(values) if values else None


def applies(kernel: KernelView) -> bool:
    """Not on a GPU without tensor cores (normalize/device_caps.csv): nothing to move the math to, and
    nothing to collect either."""
    return kernel.get("tensor_cores") != 0


def _fp16_flops(kernel: KernelView, duration_s, fp32_peak, limits) -> tuple[float, bool]:
    """(FP16 FLOPs, whether estimated). Reports without the HFMA counters (older ncu, sets without the roofline)
    still count FP16 pipe instructions: a busy FP16 pipe is HFMA/HFMA2 work at about that share of the FP32 roof
    (H200 fp16 suite: 21.2 and 20.7 TFLOP/s measured against 31.7-32.4% x 66.9)."""
    half = kernel.get("fp16_flops")
    if half is not None:
        return half, False
    pipe = kernel.get("fp16_pipe_pct")
    if pipe is None or pipe < limits["min_fp16_pipe_pct"] or not duration_s or not fp32_peak:
        return 0.0, False
    return pipe / 100.0 * fp32_peak * duration_s, True


def _mma_activity(kernel: KernelView) -> float | None:
    """Tensor activity that is surely MMA when the FP16 work is estimated: the MMA operation count, else the HMMA
    instruction rate (the pipe's busy cycles would count the HFMA2 themselves on V100/A100/H100)."""
    ops = kernel.get("tensor_mma_ops")
    if ops is not None:
        return 0.0 if ops <= 0 else None
    return kernel.get("tensor_gmma_pipe_pct")


def run(kernel: KernelView, limits) -> Finding | None:
    if not applies(kernel):
        return None
    duration_s = kernel.get("duration_ns") * 1e-9
    fp32_peak = kernel.get("fp32_peak_flops_per_s")
    half, estimated_half = _fp16_flops(kernel, duration_s, fp32_peak, limits)
    flops = kernel.get("fp32_flops") + half
    if not duration_s or not fp32_peak or not flops:
        return None
    roof_share = flops / duration_s / fp32_peak
    if roof_share < limits["min_fp_roof_share"]:
        return None
    fma_share = kernel.get("fp_fma_share")
    if fma_share is not None and fma_share < limits["min_fma_share"]:
        return None  # not FMA-dominated: not the arithmetic of a matrix product
    dram_bytes = kernel.get("dram_bytes")
    intensity = flops / dram_bytes if dram_bytes else None
    if intensity is not None and intensity < limits["min_arithmetic_intensity"]:
        return None  # memory-bound work far from the compute roofs: tensor cores would not help
    tensor = _tensor_activity(kernel) if not estimated_half else _mma_activity(kernel)
    if tensor is not None and tensor >= limits["max_tensor_pipe_pct"]:
        return None
    efficiency = kernel.get("warp_execution_efficiency")
    if efficiency is not None and efficiency < limits["min_warp_efficiency"]:
        return None
    shared_loads = kernel.get("shared_load_requests") or kernel.get("shared_wavefronts")
    if shared_loads is None and kernel.get("shared_load_requests") is None and kernel.get("shared_wavefronts") is None:
        return unjudged("shared_load_requests", "shared_wavefronts",
                        collect="--set full (MemoryWorkloadAnalysis_Tables and InstructionStats sections)")
    if not shared_loads:  # no operand tiles in shared memory: not the shape of a matrix product
        return None
    tensor_peak = kernel.get("tf32_peak_flops_per_s") or kernel.get("bf16_peak_flops_per_s")
    if tensor_peak is None:
        return unjudged("tf32_peak_flops_per_s", collect="a tensor-core roof for this compute capability "
                                                         "(normalize/tensor_peaks.csv)")
    precision = "FP16" if half > kernel.get("fp32_flops") else "FP32"
    path = "TF32" if kernel.get("tf32_peak_flops_per_s") else "FP16/BF16"
    if precision == "FP16" and kernel.get("bf16_peak_flops_per_s"):
        tensor_peak, path = kernel.get("bf16_peak_flops_per_s"), "FP16/BF16"
    tensor_time_s = flops / (tensor_peak * limits["tensor_efficiency"])
    speedup = clamp01(1 - tensor_time_s / duration_s)
    pipe = "FP16 pipe (HFMA/HFMA2)" if precision == "FP16" else "FMA pipe"
    l1, conflicts = kernel.get("l1_throughput_pct"), kernel.get("bank_conflict_share")
    shared_bound = (l1 is not None and conflicts is not None and l1 >= limits["shared_bottleneck_l1_pct"]
                    and conflicts >= limits["shared_bottleneck_conflict_share"])
    notes = [f"estimate: the same FLOPs at {limits['tensor_efficiency']:.0%} of the {path} tensor roof "
             f"take {tensor_time_s * 1e6:.1f} us instead of {duration_s * 1e6:.1f} us"]
    if estimated_half:
        notes.append(f"FP16 FLOPs estimated from the FP16 pipe's instruction rate ({kernel.get('fp16_pipe_pct'):.0f}% "
                     "of its peak, taken as that share of the FP32 roof in FLOP/s): the report holds no HFMA counters "
                     "(smsp__sass_thread_inst_executed_op_hfma_pred_on, ncu's roofline sections)")
    if shared_bound:  # replays stay whatever pipe does the math: only the rest of the time is the FMA pipe's
        speedup *= 1 - conflicts
        notes.append(f"shared memory is the bottleneck (L1 at {l1:.0f}%, {conflicts:.0%} bank-conflict replays): "
                     "fix the conflicts first; the tensor-core savings count after them")
    facts = {
        "fp_flops": evidence(flops, unit="FLOP"),
        "fp32_roof_share": evidence(roof_share, limits["min_fp_roof_share"], unit="ratio"),
        "tensor_pipe_pct": evidence(tensor, limits["max_tensor_pipe_pct"], unit="%", compare="<"),
        f"{path.lower().replace('/', '_')}_peak_flops_per_s": evidence(tensor_peak, unit="FLOP/s"),
        "shared_load_instructions": evidence(shared_loads),
        "arithmetic_intensity": evidence(intensity, limits["min_arithmetic_intensity"], unit="FLOP/byte"),
    }
    if fma_share is not None:
        facts["fma_share"] = evidence(fma_share, limits["min_fma_share"], unit="ratio")
    return Finding(
        check=ID,
        title=f"{precision} matrix math runs on the {pipe} at {roof_share:.0%} of its roof while the tensor cores idle",
        estimated_speedup=speedup,
        evidence=facts,
        advice=ADVICE,
        notes=notes,
        after_others=shared_bound,
    )
