"""The steps compute in float64.

## What it detects
Kernels that compute in float64 (normalize/precision.py: `f64` and `d884gemm` in library GEMMs' names, `double` in
PyTorch kernels' template arguments) holding `min_share` or more of the GPUs' time in the window. The most common
way there in PyTorch is by accident: `torch.from_numpy` of a NumPy array keeps its float64, and the model is then
made `.double()` to match (or a tensor built from Python floats with `dtype=torch.float64`).

## Why it is slow
Every float64 value moves twice the bytes of a float32 one, so the memory-bound kernels (elementwise, reductions,
normalization, the optimizer) take about twice the time. Matrix products run at the GPU's FP64 rate: on A100 and
H100 the tensor cores take FP64 (DMMA) at about the FP32 rate, elsewhere FP64 runs at a fraction of it (1/64 on
GeForce and most workstation parts). And float64 never reaches the TF32, BF16 or FP16 tensor-core paths.

## Example
```python
x = torch.from_numpy(features)           # a float64 NumPy array: float64 on the GPU too
model = MLP().double().cuda()            # made float64 to match
```

## Instead
```python
x = torch.from_numpy(features.astype(np.float32))   # or torch.from_numpy(features).float()
model = MLP().cuda()                                 # float32, as built
```

## Known problems
The saving is estimated, not measured on the chip: each memory-bound float64 kernel (a matrix-vector product too) at
half its time, each float64 GEMM at the GPU's FP32 rate over its FP64 rate (the device tables: 1 where the tensor cores take FP64, 2 on an
H100 without them, 64 on GeForce parts). On blind71's float64 MLP (H100) this gave 2.3 ms a step against 4.2 ms
measured: cuBLAS ran its float32 GEMMs 1.2x faster than the FP64 tensor-core ones at equal peaks, which the rates
do not hold. A sweep of 36 GEMMs of linear layers on an H100 (bench/fp64_gemm_program.py, without TF32) found the
opposite: float64 at 0.79-1.01x the float32 time, median 0.90x (bench/fp64_gemm_h100.json). cuBLAS's choice of
kernel for a shape decides it either way, so the rate stays the tables' 1; float32 GEMMs gain surely only on the
tensor cores (TF32, bf16), which low-tensor-activity prices once they are float32. A program whose results need float64 (some scientific codes, an ill-conditioned solve) should keep it;
the finding says what it costs.

## Options
- `min_share`: the float64 kernels' share of the GPUs' time in the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, step_count, time_per_step
from nsanalyze.checks.libraries import PYTORCH_LAUNCHES, launch_share
from nsanalyze.checks.program._roles import gpus_window_ns, kernel_rows
from nsanalyze.checks.program.low_tensor_activity import MATRIX_VECTOR
from nsanalyze.normalize.critical_path import FP64
from nsanalyze.normalize.device_caps import compute_capability, device_caps
from nsanalyze.normalize.kernels import tensor_peaks
from nsanalyze.normalize.precision import fp64
from nsanalyze.numbers import duration_text

ID = "fp64-compute"
BUDGET_PART = "gpu_compute"
# A float64 kernel that moves data (not a matrix product) takes this many times its float32 twin's time: twice the
# bytes through memory
BYTES_RATIO = 2.0
# The work split's roles of matrix products, whose float64 time follows the FP64 rate, not the bytes (matrix-vector
# products left out: bound by memory)
GEMM_ROLES = ("matmul_tensor", "matmul_simt")
ADVICE = """Compute in float32 (or lower) unless the results need float64.

- NumPy arrays are float64 by default: convert them as they become tensors (`torch.from_numpy(a).float()`,
  `a.astype(np.float32)`), and do not make the model `.double()` to match.
- Tensors from Python floats or lists: give `dtype=torch.float32`; check `torch.get_default_dtype()` was not set to
  float64.
- CuPy, Numba, JAX: create arrays with `dtype=float32` (JAX: leave `jax_enable_x64` off).
- Then the tensor cores: `torch.set_float32_matmul_precision("high")` (TF32) or `torch.autocast` to bfloat16.
- If a part needs float64 (an accumulation, an ill-conditioned solve), keep that part alone in float64.

```python
# before: float64 from NumPy, the model made to match
x = torch.from_numpy(features).cuda()
model = MLP().double().cuda()
# after
x = torch.from_numpy(features).float().cuda()
model = MLP().cuda()
```"""

CHECK = Check(
    id=ID,
    name="program.work.fp64_compute",
    title="The steps compute in float64",
    section="tensor",
    requires=("work",),
    thresholds={"min_share": Threshold(0.1, "a tenth of the GPUs' time in float64 is a program computing in double, "
                                           "not a loss or a metric accumulated in it")},
    speedup_model=("the float64 kernels' time less what float32 takes: memory-bound kernels (matrix-vector products "
                   "among them) at half their time (half the bytes), matrix products at the GPU's FP32 rate over its "
                   "FP64 rate (device_caps.csv, "
                   "tensor_peaks.csv); priced by the replay of the steps with the float64 kernels that much faster"),
    budget_part=BUDGET_PART,
    change={"speedup": (FP64,)},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def gemm_rate(timeline) -> tuple[float | None, str | None]:
    """(how many times faster a float64 GEMM runs in float32 on the first GPU the tables know, which GPU), or
    (None, None): 1 where the tensor cores take FP64 at the FP32 rate (tensor_peaks.csv), else the FP32 rate over
    the FP64 rate (device_caps.csv)."""
    for name in timeline.gpu_names():
        caps = device_caps(name)
        if not caps:
            continue
        major, minor = compute_capability(caps)
        dmma = tensor_peaks((major, minor), 1.0)["fp64_tensor_peak_flops_per_s"]
        if dmma:
            return 1.0 / dmma, caps["model"]
        if caps["fp64_ratio"]:
            return 1.0 / caps["fp64_ratio"], caps["model"]
    return None, None


TENSOR_LINE = ("- Then the tensor cores: `torch.set_float32_matmul_precision(\"high\")` (TF32) or `torch.autocast` to "
               "bfloat16.")
# Before compute capability 8.0 (Volta, Turing) the tensor cores take float16, not TF32 or bfloat16 (power_iteration
# on a T4 was told to use TF32)
FP16_ONLY_LINE = ("- Then the tensor cores: `torch.autocast(device_type=\"cuda\", dtype=torch.float16)` with a "
                  "`GradScaler` where it trains ({model}: compute capability {cc}, whose tensor cores take float16, "
                  "not TF32 or bfloat16).")


# Where few of the kernels are PyTorch's (CuPy, cuDF: power_iteration, cudf-groupby), PyTorch's switches are no advice
# (a user read: `torch.autocast` with a GradScaler for a CuPy power iteration)
LIBRARY_TENSOR_LINE = ("- Then the tensor cores, where the results allow it: matrix products on float16 or bfloat16 "
                       "arrays, or the library's TF32 math mode for float32 ones{older}.")


def _advice(timeline) -> str:
    """ADVICE, its tensor-core line for the first GPU the device tables know: float16 where it has no TF32 or
    bfloat16 tensor cores; in a library's words where few kernels are PyTorch's (LIBRARY_TENSOR_LINE)."""
    torch = launch_share(timeline, "PyTorch")
    if torch is not None and torch < PYTORCH_LAUNCHES:
        older = next((f" ({caps['model']}: compute capability {caps['compute_capability']}, whose tensor cores take "
                      "float16 only)" for caps in map(device_caps, timeline.gpu_names())
                      if caps and compute_capability(caps)[0] < 8), "")
        return ADVICE.replace(TENSOR_LINE, LIBRARY_TENSOR_LINE.format(older=older))
    for name in timeline.gpu_names():
        caps = device_caps(name)
        if caps:
            major = compute_capability(caps)[0]
            if major < 8:
                return ADVICE.replace(TENSOR_LINE, FP16_ONLY_LINE.format(model=caps["model"],
                                                                         cc=caps["compute_capability"]))
            break
    return ADVICE


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    span = timeline.summary.span_ns or 0
    if analysis is None or not span:
        return None
    kernels = [k for k in analysis.by_kernel if fp64(k.demangled or k.name)]
    fp64_ns = float(sum(k.ns for k in kernels))
    share = fp64_ns / gpus_window_ns(timeline)
    if not kernels or share < limits.min_share:
        return None
    # a matrix-vector product reads each element once: bound by memory, half the bytes in float32 (power_iteration's
    # float64 gemv on a T4 was priced at the T4's 32x FP64 rate, as a GEMM)
    gemm_ns = float(sum(k.ns for k in kernels if k.role in GEMM_ROLES
                        and not MATRIX_VECTOR.search(f"{k.demangled or ''} {k.name or ''}")))
    rate, model = gemm_rate(timeline)
    saved = (fp64_ns - gemm_ns) * (1 - 1 / BYTES_RATIO) + (gemm_ns * (1 - 1 / rate) if rate else 0.0)
    steps = step_count(timeline)
    each = time_per_step(steps)
    kernel_share = fp64_ns / (analysis.kernel_ns or 1)
    gemms = (f"; its matrix products {each(gemm_ns)}, at the {model}'s FP64 rate "
             + ("(its tensor cores take FP64 at the FP32 rate)" if rate == 1.0 else f"(1/{rate:g} of FP32)")
             if gemm_ns and rate else "")
    # (matrix products named only where there are some: power_iteration's float64 work is one gemv, memory-bound)
    notes = [f"saving: the float64 kernels' time less what float32 takes, memory-bound kernels at half their time "
             f"(half the bytes), matrix products at the FP32 rate over the FP64 rate ({rate:g}x on the {model})"
             if rate and gemm_ns else
             "saving: the memory-bound float64 kernels at half their time (half the bytes); the matrix products' "
             f"{duration_text(gemm_ns)} is not estimated (a GPU the device tables do not know)"
             if gemm_ns else
             "saving: the float64 kernels at half their time: float32 moves half the bytes, and none is a matrix "
             "product that the FP64 rate bounds" + (" (matrix-vector products read each element once: memory-bound)"
                                                   if any(k.role in GEMM_ROLES for k in kernels) else "")]
    if rate == 1.0 and gemm_ns:
        notes.append("float32 GEMMs can go further on the tensor cores (TF32, bf16), which this saving does not "
                     "count: low-tensor-activity prices that once they are float32")
    return Finding(
        check=ID,
        title=(f"{'The steps compute' if steps else 'The program computes'} in float64: kernels of double-precision math ({len(kernels)} by name) take "
               f"{kernel_share:.0%} of GPU kernel time ({each(fp64_ns)}){gemms}; float32 moves half the bytes"),
        estimated_speedup=min(1.0, saved / span),
        evidence={"fp64_ns": evidence(fp64_ns, unit="ns"),
                  "fp64_share": evidence(share, limits.min_share, unit="ratio"),   # of the GPUs' time in the window
                  "fp64_kernel_share": evidence(kernel_share, unit="ratio"),   # of GPU kernel time: the title's
                  "fp64_gemm_ns": evidence(gemm_ns, unit="ns"),
                  **({"gemm_fp32_over_fp64": evidence(rate, unit="x")} if rate and gemm_ns else {}),
                  "check_savings_ns": evidence(saved, unit="ns"),
                  "kernels": kernel_rows(sorted(kernels, key=lambda k: -k.ns))},
        advice=_advice(timeline),
        notes=notes,
        estimated_savings_ns=saved,
    )
