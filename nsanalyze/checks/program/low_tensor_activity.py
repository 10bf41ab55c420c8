"""Matrix products on the CUDA cores, not the tensor cores.

## What it detects
From the work split: the kernels whose names say they are GEMMs or convolutions on the CUDA cores
(role `matmul_simt`: CUTLASS `simt`, cuBLAS `sgemm`/`_ffma_`) take a good share of the GPU's
kernel time, and nsys GPU metrics agree: the tensor cores barely run. Without GPU metrics (an nsys
export recorded without `--gpu-metrics-devices`, a PyTorch profiler trace) the kernel names are the
evidence, and only the names a library gives its kernels count: cuBLAS, cuDNN and CUTLASS spell the
instruction and types into them (`sm80_xmma_gemm_f32f32_..._ffma_`, `cutlass_80_simt_sgemm_...`),
while a name the user chose (`sgemm_tiled`, `matmul`) says nothing certain about the instruction. The
finding says that tensor activity was not measured.

## Why it is slow
FP32 matrix math runs on the CUDA cores at a fraction of the tensor cores' rate (TF32 and BF16 peaks
are 7-16x FP32 on Ampere and Hopper). The GPU looks fully used while most of its arithmetic idles.

## Example
```python
y = model(x)                          # FP32 matmuls on CUDA cores
```

## Instead
```python
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = model(x)                      # tensor cores
```

On an Nsight Compute report alone, kernels whose instruction mix missing-tensor-cores read are left
to it (their FLOP counts outrank their names: a `conv2d` it declined is not re-judged by name), and a
library GEMM beside the user's own kernels that take at least as long is a baseline, not a target.
A GPU without tensor cores (device_caps.csv: the GTX 16xx) gets no finding. Savings never exceed the
kernels' time less a launch floor per launch, as the kernel checks'.

## Known problems
FP64 and integer matrix products that have no tensor-core path on the GPU count too. Matrix-vector
products (`gemv`) are left out: they read each matrix element once, are bound by memory, and run no
faster on tensor cores. Without GPU metrics a user's own GEMM kernel is not judged (its name is no
evidence of its instructions); Nsight Compute's `missing-tensor-cores` judges it from its instruction mix.

## Options
- `max_tensor_active_pct`: tensor activity (GPU metrics) below which the tensor cores count as idle;
  without GPU metrics the check reads the library kernels' names alone.
- `min_matrix_share`: CUDA-core matrix products' share of GPU kernel time before the check speaks.
- `tensor_speedup`: how much faster short GEMM kernels (and all of them on a GPU the device tables do not
  know) run on tensor cores (conservative).
- `large_gemm_ns`: the mean kernel time from which a GEMM counts as large: it runs the device's tensor/FP32
  peak ratio faster (7.4x on Hopper: measured 6.5x on an H200 fp32 MLP with TF32 on).
"""

import re

from nsanalyze.checks import global_settings
from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.checks.libraries import library_of
from nsanalyze.checks.program._roles import kernel_rows
from nsanalyze.checks.program.rank_imbalance import straggler
from nsanalyze.normalize.device_caps import device_caps, has_tensor_cores
from nsanalyze.normalize.kernels import _cc_tuple, tensor_over_fp32

ID = "low-tensor-activity"
BUDGET_PART = "gpu_compute"
# Matrix-vector products: one multiply-add per matrix element read, bound by memory whatever unit multiplies.
MATRIX_VECTOR = re.compile(r"gemv", re.I)
ADVICE = """Put the matrix math on the tensor cores, then make the busy time do more work.

- FP32 matrix products: TF32 or BF16/FP16 inputs (cuBLAS:
  `cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH)`; PyTorch:
  `torch.backends.cuda.matmul.allow_tf32 = True`, `torch.set_float32_matmul_precision("high")`,
  or autocast to BF16/FP16).
- Many small kernels: fuse them into fewer (in PyTorch, `torch.compile` does this), batch requests,
  use CUDA graphs.
- Then profile the top kernels with Nsight Compute to see what limits each.

```python
# before: FP32 GEMMs on the CUDA cores (PyTorch's default matmul precision, "highest")
y = model(x)
# after: TF32 tensor-core GEMMs, one line at start-up (what the saving prices); autocast to BF16 goes further
torch.set_float32_matmul_precision("high")
y = model(x)
```"""

CHECK = Check(
    id=ID,
    name="program.utilization.tensor",
    title="Matrix products on the CUDA cores, not the tensor cores",
    section="work",
    requires=("work",),
    optional=("gpu_metrics",),  # tensor activity; without it the library kernels' names are the evidence
    thresholds={
        "max_tensor_active_pct": Threshold(5.0, "matrix-heavy work keeps tensor cores active far above 5%"),
        "min_matrix_share": Threshold(0.15, "matrix products under 15% of GPU time are not where the time goes"),
        "tensor_speedup": Threshold(2.0, "for small GEMMs, and on a GPU the device tables do not know: TF32/BF16 "
                                          "tensor-core peaks are 2-16x FP32 (Ampere's GA10x 2x, A100 8x, Hopper "
                                          "7.4x), so 2x holds on any of them", at_least=1.0),
        "large_gemm_ns": Threshold(50_000, "a GEMM kernel that runs 50 us on the CUDA cores does billions of "
                                           "multiply-adds: large enough to reach most of the tensor cores' peak "
                                           "as well; shorter ones are held by memory, latency and launches"),
    },
    speedup_model=("the CUDA-core matrix products' time (role matmul_simt, by kernel name, matrix-vector products "
                   "left out; without GPU metrics only library kernels) x (1 - 1/speed-up); for GEMM kernels of "
                   "large_gemm_ns or more the speed-up is the GPU's TF32 tensor-core peak over its FP32 peak "
                   "(tensor_peaks.csv by the compute capability of device_caps.csv; the FP16 path's where the GPU "
                   "has no TF32), as GEMMs that reach the same share "
                   "of either peak run (an fp32 MLP on an H200: 6.5x measured with TF32 on, the peaks' 7.4x), "
                   "tensor_speedup for shorter kernels and a GPU the tables do not know: within that time; "
                   "with several GPUs, that of the GPU with most of it, or of the straggler where they meet in "
                   "collectives (the others wait for it)"),
    budget_part=BUDGET_PART,
    change={"speedup": ("matmul_simt",)},  # the replay change priced (program.py)
    advice=ADVICE,
)



def _judged(analysis, by_name_only: bool) -> list:
    """The CUDA-core matrix kernels the check speaks for: role matmul_simt, no matrix-vector products;
    from names alone (no GPU metrics), only the kernels a library named after their instructions."""
    kernels = analysis.kernels_of("matmul_simt", limit=len(analysis.by_kernel))
    kernels = [k for k in kernels if not MATRIX_VECTOR.search(f"{k.demangled or ''} {k.name or ''}")]
    if by_name_only:
        kernels = [k for k in kernels if library_of(k.demangled or k.name)
                   or library_of(k.name)]
    return kernels


def _without_tensor_cores(timeline) -> bool:
    """Every GPU the profile names is one the device table knows to have no tensor cores (a GTX 16xx)."""
    found = [has_tensor_cores(name) for name in timeline.gpu_names() if name]
    return bool(found) and not any(found)


def _tensor_speedup(timeline, fallback: float) -> tuple[float, str]:
    """(speed-up, where it comes from): the first named GPU's TF32 (else FP16-path) tensor peak over its FP32
    peak, from the device tables; the fallback threshold for a GPU they do not know."""
    for name in timeline.gpu_names():
        caps = device_caps(name)
        ratio = tensor_over_fp32(_cc_tuple(caps["compute_capability"])) if caps else None
        if ratio:
            return ratio, (f"the {caps['model']}'s tensor-core peak for FP32 inputs over its FP32 peak, "
                           f"{ratio:g}x, as GEMMs that reach the same share of either peak run")
    return fallback, (f"{fallback:g}x, what TF32/BF16 GEMMs reach on any GPU since Ampere (this GPU is not in the "
                      "device tables)")


def _launch_room_ns(kernels: list, floor_ns: float) -> float:
    """What the kernels can lose at most: their time less a launch floor per launch (as the kernel checks)."""
    return float(sum(max(0.0, k.ns - (k.launches or 1) * floor_ns) for k in kernels))


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    if analysis is None or not analysis.kernel_ns or _without_tensor_cores(timeline):
        return None
    kernel_list = timeline.kernel_list
    gr, issue, tensor = (timeline.metric_mean(k) for k in ("gr_active_pct", "sm_issue_pct", "tensor_active_pct"))
    by_name_only = tensor is None
    kernels = _judged(analysis, by_name_only)
    # An ncu report's kernels whose instruction mix missing-tensor-cores read (it judged them, fired or
    # declined): their FLOP counts outrank their names.
    by_mix = kernel_list.instruction_mix_judged if kernel_list is not None else ()
    kernels = [k for k in kernels if (k.demangled or k.name) not in by_mix and k.name not in by_mix]
    simt_ns = float(sum(k.ns for k in kernels))
    matrix_share = simt_ns / analysis.kernel_ns
    if not simt_ns or matrix_share < limits.min_matrix_share:   # none at all: nothing to judge, whatever the share
        return None
    if kernel_list is not None and kernel_list.user_kernel_ns >= simt_ns:
        return None  # a profile of the user's own kernels beside a library baseline: the baseline is no target
    if tensor is not None and tensor >= limits.max_tensor_active_pct:
        return None  # the tensor cores run: the names' CUDA-core GEMMs are not where the time goes
    measured = "".join([f", GPU-Util {gr:.0f}%" if gr is not None else "",
                        f", SMs issue on {issue:.0f}% of cycles" if issue is not None else "",
                        f", tensor cores active {tensor:.1f}%" if tensor is not None else
                        " (by their library names; tensor activity was not measured)"])
    libraries = sorted({library_of(k.demangled or k.name) or library_of(k.name) or "?"
                        for k in kernels} - {"?"})
    notes = []
    if by_name_only:
        notes.append("tensor-core activity was not measured (no GPU metrics in this profile: nsys profile "
                     "--gpu-metrics-devices=all measures it); the evidence is the kernel names, which "
                     f"{', '.join(libraries) or 'the libraries'} give after the instruction they run "
                     "(ffma, simt: FP32 multiply-adds on the CUDA cores)")
    finding = Finding(
        check=ID,
        title=f"Matrix products on the CUDA cores: FP32 GEMM kernels ({matrix_share:.0%} of GPU kernel time) do not "
              f"use the tensor cores{measured}",
        estimated_speedup=0.0,
        evidence={"matrix_kernel_share": evidence(matrix_share, limits.min_matrix_share, unit="ratio"),
                  "matrix_kernel_ns": evidence(simt_ns, unit="ns"),
                  "gr_active_pct": evidence(gr, unit="%"),
                  "sm_issue_pct": evidence(issue, unit="%"),
                  "tensor_active_pct": evidence(tensor, limits.max_tensor_active_pct, unit="%", compare="<"),
                  "matrix_kernels": kernel_rows(kernels)},
        advice=ADVICE,
        notes=notes,
    )
    wall_ns, device = _wall_gemm_ns(analysis, simt_ns, timeline.devices)
    if device is not None:  # GPUs run side by side: wall time is saved on the GPU with most GEMM time
        finding.budget_device = device
        finding.evidence["busiest_gpu_matrix_ns"] = evidence(wall_ns, unit="ns")
    # the GEMMs get faster, never more than their own time goes, nor below a launch floor per launch
    floor_ns = (kernel_list.launch_floor_ns if kernel_list is not None else None) or \
        global_settings()["savings"]["launch_floor_ns"]
    room_ns = _launch_room_ns(kernels, floor_ns) * (wall_ns / simt_ns if simt_ns else 0.0)
    speedup, source = _tensor_speedup(timeline, limits.tensor_speedup)
    large_ns = float(sum(k.ns for k in kernels if k.ns >= limits.large_gemm_ns * (k.launches or 1)))
    saved_share = ((large_ns * (1 - 1 / speedup) + (simt_ns - large_ns) * (1 - 1 / limits.tensor_speedup))
                   / simt_ns) if simt_ns else 0.0
    # the speed-up the saving applies, over all the GEMMs' time (graphs_after's showed the large GEMMs' 7.4x where
    # none were large and 2x was applied); the large GEMMs' own beside it
    finding.evidence["tensor_speedup"] = evidence(1 / (1 - saved_share) if saved_share < 1 else None, unit="x")
    finding.evidence["large_gemm_speedup"] = evidence(speedup, unit="x")
    finding.evidence["large_gemm_share"] = evidence(large_ns / simt_ns if simt_ns else None,
                                                    unit="ratio")
    finding.notes.append(f"the matrix products' speed-up on the tensor cores: for GEMM kernels of "
                         f"{limits.large_gemm_ns / 1e3:.0f} us or more ({large_ns / simt_ns:.0%} of their time), "
                         f"{source}; for shorter ones {limits.tensor_speedup:g}x, an assumption (tensor_speedup): "
                         "memory, latency and launches hold them, which the tensor cores do not shorten")
    finding.estimated_savings_ns = min(wall_ns, wall_ns * saved_share, room_ns)
    if finding.estimated_savings_ns < wall_ns * saved_share:
        finding.notes.append(f"savings held to the kernels' time less a launch floor of {floor_ns / 1e3:.1f} us "
                             "a launch")
    return finding


def _wall_gemm_ns(analysis, judged_ns: float, devices=None) -> tuple[float, object]:
    """The judged GEMM time in wall-clock terms: with several GPUs in the window their kernel times add
    up, but they run at the same time; the GPU with the most CUDA-core GEMM time bounds what is saved,
    or, where the GPUs meet in collectives, the straggler's: the others wait for it, so their faster GEMMs
    would only wait longer. Per GPU, the role's time scaled by the judged share of it."""
    if len(analysis.devices) < 2:
        return judged_ns, None
    role_ns = analysis.role_ns("matmul_simt")
    scale = judged_ns / role_ns if role_ns else 0.0
    per_device = {device: sum(e["ns"] for e in split if e["role"] == "matmul_simt") * scale
                  for device, split in analysis.devices.items()}
    device = max(per_device, key=per_device.get)
    found = straggler(devices or [])
    if found is not None and found.straggler.device_id in per_device:
        device = found.straggler.device_id
    return per_device[device], device
