"""Matrix products on the CUDA cores, not the tensor cores.

## What it detects
From the work split: the kernels whose names say they are GEMMs or convolutions on the CUDA cores
(role `matmul_simt`: CUTLASS `simt`, cuBLAS `sgemm`/`_ffma_`/`gemv`) take a good share of the GPU's
kernel time, and nsys GPU metrics agree: the tensor cores barely run. Without GPU metrics the work
split still shows the CUDA-core GEMMs' share (`timeline.work`), but no finding is raised.

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

## Known problems
FP64 and integer matrix products that have no tensor-core path on the GPU count too.

## Options
- `max_tensor_active_pct`: tensor activity (GPU metrics) below which the tensor cores count as idle.
- `min_matrix_share`: CUDA-core matrix products' share of GPU kernel time before the check speaks.
- `tensor_speedup`: how much faster those kernels run on tensor cores (conservative).
"""

from nsanalyze.checks.base import Finding, Threshold, evidence

ID = "low-tensor-activity"
NAME = "program.utilization.tensor"
TITLE = "Matrix products on the CUDA cores, not the tensor cores"
SECTION = "work"  # the report section its findings appear in
REQUIRES = ("gpu_metrics", "work")
BUDGET_PART = "gpu_compute"
THRESHOLDS = {
    "max_tensor_active_pct": Threshold(5.0, "matrix-heavy work keeps tensor cores active far above 5%"),
    "min_matrix_share": Threshold(0.15, "matrix products under 15% of GPU time are not where the time goes"),
    "tensor_speedup": Threshold(2.0, "TF32/BF16 tensor-core peaks are 7-16x FP32 on Ampere and Hopper; "
                                      "real GEMMs on them run at least 2x faster"),
}
SPEEDUP_MODEL = ("the CUDA-core matrix products' time (role matmul_simt, by kernel name) x (1 - 1/tensor_speedup)")
ADVICE = """Put the matrix math on the tensor cores, then make the busy time do more work.

- FP32 matrix products: enable TF32 (`torch.backends.cuda.matmul.allow_tf32 = True`,
  `torch.set_float32_matmul_precision("high")`) or autocast to BF16/FP16.
- Many small kernels: fuse (`torch.compile`), batch requests, use CUDA graphs.
- Then profile the top kernels with Nsight Compute to see what limits each.

```python
# before: FP32 GEMMs on CUDA cores (PyTorch's default)
y = model(x)
# after
with torch.autocast("cuda", dtype=torch.bfloat16): y = model(x)
```"""



def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    if analysis is None or not analysis.kernel_ns:
        return None
    simt_ns = analysis.role_ns("matmul_simt")
    matrix_share = simt_ns / analysis.kernel_ns
    if matrix_share < limits["min_matrix_share"]:
        return None
    metrics = timeline.gpu_metrics or {}
    gr, issue, tensor = (metrics.get(k, {}).get("mean") if metrics.get(k) else None
                         for k in ("gr_active_pct", "sm_issue_pct", "tensor_active_pct"))
    if tensor is not None and tensor >= limits["max_tensor_active_pct"]:
        return None  # the tensor cores run: the names' CUDA-core GEMMs are not where the time goes
    measured = "".join([f", GPU-Util {gr:.0f}%" if gr is not None else "",
                        f", SMs issue on {issue:.0f}% of cycles" if issue is not None else "",
                        f", tensor cores active {tensor:.1f}%" if tensor is not None else ""])
    kernels = analysis.kernels_of("matmul_simt")
    finding = Finding(
        check=ID,
        title=f"Matrix products on the CUDA cores: FP32 GEMM kernels ({matrix_share:.0%} of GPU kernel time) do not "
              f"use the tensor cores{measured}",
        estimated_speedup=0.0,
        evidence={"matrix_kernel_share": evidence(matrix_share, limits["min_matrix_share"], unit="ratio"),
                  "gr_active_pct": evidence(gr, unit="%"),
                  "sm_issue_pct": evidence(issue, unit="%"),
                  "tensor_active_pct": evidence(tensor, limits["max_tensor_active_pct"], unit="%", compare="<"),
                  "matrix_kernels": [{"name": k["name"], "duration_ns": k["ns"], "launches": k["launches"]}
                                     for k in kernels]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = simt_ns * (1 - 1 / limits["tensor_speedup"])
    return finding
