"""Busy by GPU-Util, idle by SM issue and tensor activity.

## What it detects
From nsys GPU metrics over the analysis window (the steady steps by default): the GPU counts as busy
(GR Active, what `nvidia-smi` reports as utilization) while the tensor cores barely run although
matrix-product kernels (cuBLAS, CUTLASS, cuDNN, by name) take a good share of the GPU time: the
matrix math runs in FP32 on the CUDA cores. Or, without such kernels, the SMs issue on a small
fraction of the busy cycles.

## Why it is slow
GPU-Util only says some kernel was resident. A GPU "100% utilized" by a chain of small,
memory-bound or FP32 kernels leaves most of its arithmetic, the tensor cores above all, unused.

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
Needs an export taken with `--gpu-metrics-devices`; memory-bound work (embedding lookups,
optimizers) legitimately issues little.

## Options
- `min_gr_active_pct`: GR Active above which the GPU counts as "busy".
- `max_sm_issue_pct`, `max_tensor_active_pct`: below these the work is thin.
- `min_matrix_share`: matrix-product kernels' share of GPU compute time before FP32 math is blamed.
- `tensor_speedup`: how much faster those kernels run on tensor cores (conservative).
"""

import re

from nsanalyze.checks.base import Finding, Threshold, budget_part, clamp01, evidence

ID = "low-tensor-activity"
NAME = "program.utilization.tensor"
TITLE = "Busy by GPU-Util, but the tensor cores idle"
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("gpu_metrics",)
BUDGET_PART = "gpu_compute"
THRESHOLDS = {
    "min_gr_active_pct": Threshold(30.0, "below this the GPU is visibly idle: see the budget's idle parts"),
    "max_sm_issue_pct": Threshold(30.0, "tuned kernels issue on well over 30% of SM cycles"),
    "max_tensor_active_pct": Threshold(5.0, "matrix-heavy work keeps tensor cores active far above 5%"),
    "min_matrix_share": Threshold(0.15, "matrix products under 15% of GPU time are not where the time goes"),
    "tensor_speedup": Threshold(2.0, "TF32/BF16 tensor-core peaks are 7-16x FP32 on Ampere and Hopper; "
                                      "real GEMMs on them run at least 2x faster"),
}
SPEEDUP_MODEL = ("matrix-product kernels (cuBLAS, CUTLASS, cuDNN by name) running while the tensor cores idle: their "
                 "time x (1 - 1/tensor_speedup); else (1 - SM issue / GR active) x GR active: busy time with little issued")
# Kernels that do matrix products, by the names cuBLAS, cuBLASLt, CUTLASS, cuDNN and Triton give them.
MATRIX_KERNEL = re.compile(r"gemm|xmma|cutlass|nvjet|wgmma|hmma|matmul|_mma|conv|implicit_gemm|cublas", re.I)
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


def _matrix_time(timeline) -> tuple[float, list[dict]]:
    rows = [r for r in timeline.kernel_summary if MATRIX_KERNEL.search(str(r.get("demangled") or r.get("name") or ""))]
    rows.sort(key=lambda r: -(r.get("duration_ns") or 0))
    return float(sum(r.get("duration_ns") or 0 for r in rows)), [
        {"name": r["name"], "duration_ns": r["duration_ns"], "launches": r["launches"]} for r in rows[:5]]


def run(timeline, limits) -> Finding | None:
    metrics = timeline.gpu_metrics
    gr, issue, tensor = (metrics.get(k) for k in ("gr_active_pct", "sm_issue_pct", "tensor_active_pct"))
    if not gr or gr["mean"] < limits["min_gr_active_pct"]:
        return None
    gr, issue = gr["mean"], issue["mean"] if issue else None
    tensor = tensor["mean"] if tensor else None
    window_ns = timeline.summary["span_ns"] or 0
    compute_ns = budget_part(timeline, "gpu_compute")[0] or (timeline.summary.get("kernel_ns") or 0)
    matrix_ns, matrix_kernels = _matrix_time(timeline)
    matrix_share = matrix_ns / compute_ns if compute_ns else 0.0
    tensor_idle = tensor is not None and tensor < limits["max_tensor_active_pct"]
    issue_text = f", SMs issue on {issue:.0f}% of cycles" if issue is not None else ""
    if tensor_idle and matrix_share >= limits["min_matrix_share"]:
        savings = min(matrix_ns, compute_ns) * (1 - 1 / limits["tensor_speedup"])
        title = (f"GPU-Util {gr:.0f}% in the window{issue_text}, tensor cores active {tensor:.1f}%: matrix products "
                 f"({matrix_share:.0%} of GPU compute time) run on the CUDA cores, not the tensor cores")
    elif issue is not None and issue < limits["max_sm_issue_pct"] and (tensor is None or tensor_idle):
        savings = clamp01((1 - issue / gr) * gr / 100.0) * window_ns
        tensor_text = f", tensor cores active {tensor:.1f}%" if tensor is not None else ""
        title = f"GPU-Util {gr:.0f}% in the window, but SMs issue on {issue:.0f}% of cycles{tensor_text}"
    else:
        return None
    finding = Finding(
        check=ID,
        title=title,
        estimated_speedup=0.0,
        evidence={"gr_active_pct": evidence(gr, limits["min_gr_active_pct"], unit="%"),
                  "sm_issue_pct": evidence(issue, limits["max_sm_issue_pct"], unit="%", compare="<"),
                  "tensor_active_pct": evidence(tensor, limits["max_tensor_active_pct"], unit="%", compare="<"),
                  "matrix_kernel_share": evidence(matrix_share, limits["min_matrix_share"], unit="ratio"),
                  "matrix_kernels": matrix_kernels},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = float(savings)
    return finding
