"""Busy by GPU-Util, idle by SM issue and tensor activity.

## What it detects
From nsys GPU metrics: the GPU counts as busy (GR Active, what `nvidia-smi` reports as
utilization) while the SMs issue on a small fraction of cycles and the tensor cores barely run.

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
"""

from nsanalyze.checks.base import Finding, Threshold, clamp01, evidence

ID = "low-tensor-activity"
NAME = "program.utilization.tensor"
TITLE = "Busy by GPU-Util, idle by SM issue and tensor activity"
REQUIRES = ("gpu_metrics",)
THRESHOLDS = {
    "min_gr_active_pct": Threshold(30.0, "below this the GPU is visibly idle: see gpu-idle"),
    "max_sm_issue_pct": Threshold(30.0, "tuned kernels issue on well over 30% of SM cycles"),
    "max_tensor_active_pct": Threshold(5.0, "matrix-heavy work keeps tensor cores active far above 5%"),
}
SPEEDUP_MODEL = "(1 - SM issue / GR active) x GR active share of the range: busy time with little issued"
ADVICE = """Make the busy time do more work.

- Matrix products: enable TF32 (`torch.backends.cuda.matmul.allow_tf32 = True`) or autocast to BF16/FP16.
- Many small kernels: fuse (`torch.compile`), batch requests, use CUDA graphs.
- Then profile the top kernels with Nsight Compute to see what limits each.

```python
# before
y = model(x)
# after
with torch.autocast("cuda", dtype=torch.bfloat16): y = model(x)
```"""


def _judge(scope: dict, limits):
    gr, issue, tensor = (scope.get(k) for k in ("gr_active_pct", "sm_issue_pct", "tensor_active_pct"))
    if not gr or not issue:
        return None
    if gr["mean"] < limits["min_gr_active_pct"] or issue["mean"] >= limits["max_sm_issue_pct"]:
        return None
    if tensor and tensor["mean"] >= limits["max_tensor_active_pct"]:
        return None
    return gr["mean"], issue["mean"], tensor["mean"] if tensor else None


def run(timeline, limits) -> Finding | None:
    metrics = timeline.gpu_metrics
    scopes = [("the capture", metrics)] + [(f"range '{r['name']}'", r) for r in metrics.get("ranges", [])]
    hits = [(name, judged) for name, scope in scopes if (judged := _judge(scope, limits))]
    if not hits:
        return None
    name, (gr, issue, tensor) = max(hits, key=lambda h: h[1][0] - h[1][1])
    tensor_text = f", tensor cores active {tensor:.0f}%" if tensor is not None else ""
    finding = Finding(
        check=ID,
        title=f"In {name}: busy {gr:.0f}% of the time by GPU-Util, issuing on {issue:.0f}% of SM cycles{tensor_text}",
        estimated_speedup=clamp01((1 - issue / gr) * gr / 100.0),
        evidence={"gr_active_pct": evidence(gr, limits["min_gr_active_pct"], unit="%"),
                  "sm_issue_pct": evidence(issue, limits["max_sm_issue_pct"], unit="%", compare="<"),
                  "tensor_active_pct": evidence(tensor, limits["max_tensor_active_pct"], unit="%", compare="<"),
                  "scopes": [h[0] for h in hits]},
        advice=ADVICE,
    )
    return finding
