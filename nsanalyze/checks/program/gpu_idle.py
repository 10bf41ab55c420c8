"""The GPU waits: idle gaps between GPU work.

## What it detects
Time inside the analysis window when no kernel, copy or memset ran on a GPU, with the largest
gaps, the CUDA calls the host was in during each and the NVTX range around it.

## Why it is slow
An idle GPU is the most expensive bug there is: data loading, Python overhead, host
synchronization or one-at-a-time requests keep it waiting while `nvidia-smi` may still say busy.

## Example
```python
for request in requests:            # one tiny batch at a time, host round trip each
    out = model(request.cuda()).cpu()
```

## Instead
```python
loader = DataLoader(ds, batch_size=64, pin_memory=True, num_workers=4)
for batch in loader:                 # batches prepared ahead, copies overlapped
    out = model(batch.cuda(non_blocking=True))
```

## Known problems
Gaps on purpose (a benchmark that sleeps, a capture that starts before the work) count too:
narrow the window with `--skip-first-ns` or `--nvtx-range`.

## Options
- `min_idle_share`: idle over span before the check speaks.
- `min_gap_ns`: gaps shorter than this are launch latency, not removable.
"""

from nsanalyze.checks.base import Finding, Threshold, clamp01, evidence

ID = "gpu-idle"
NAME = "program.idle"
TITLE = "The GPU sits idle between work"
REQUIRES = ("summary",)
THRESHOLDS = {
    "min_idle_share": Threshold(0.10, "a tenth of the time idle is worth a look in any pipeline"),
    "min_gap_ns": Threshold(10_000, "gaps under 10 us are launch latency that only graphs remove (launch-overhead)"),
}
SPEEDUP_MODEL = "idle time in gaps of at least min_gap_ns, over the window's span: what keeping the GPU fed would save"
ADVICE = """Keep work queued on the GPU.

- Prepare inputs ahead: `DataLoader(num_workers=..., pin_memory=True, prefetch_factor=...)`.
- Remove host round trips inside loops (`.item()`, `.cpu()`, `print(tensor)`), batch requests.
- Overlap copies with compute on separate streams (`non_blocking=True` from pinned memory).
- Look at the largest gaps below: the CUDA call the host was in tells where it waited.

```python
# before: the GPU waits for each request's host round trip
for x in requests: y = model(x.cuda()).cpu()
# after: batched, pinned, asynchronous
batch = torch.stack(requests).pin_memory().cuda(non_blocking=True); y = model(batch)
```"""


def run(timeline, limits) -> Finding | None:
    summary = timeline.summary
    span = summary["span_ns"] * max(1, len(timeline.devices))
    if not span:
        return None
    idle_share = summary["gpu_idle_ns"] / span
    if idle_share < limits["min_idle_share"]:
        return None
    removable = sum(v["idle_ns"] for k, v in summary["gap_histogram"].items()
                    if _bucket_floor_ns(k) >= limits["min_gap_ns"])
    gaps = timeline.gaps[:3]
    where = ""
    if gaps:
        top = gaps[0]
        call = top["host_calls"][0]["name"] if top["host_calls"] else "no CUDA call"
        where = f"; largest gap {top['duration_ns'] / 1e6:.1f} ms during {call}" + (
            f" in range '{top['nvtx_range']}'" if top["nvtx_range"] else "")
    finding = Finding(
        check=ID,
        title=f"GPU idle {idle_share:.0%} of the time{where}",
        estimated_speedup=clamp01(removable / span),
        evidence={"gpu_idle_share": evidence(idle_share, limits["min_idle_share"], unit="ratio"),
                  "gpu_idle_ns": evidence(summary["gpu_idle_ns"], unit="ns"),
                  "removable_idle_ns": evidence(removable, limits["min_gap_ns"], unit="ns"),
                  "largest_gaps": [{"start_ns": g["start"], "duration_ns": g["duration_ns"],
                                    "device_id": g["device_id"], "host_calls": g["host_calls"],
                                    "nvtx_range": g["nvtx_range"]} for g in gaps]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = float(removable)
    return finding


def _bucket_floor_ns(label: str) -> float:
    """Gap-histogram buckets are labelled '< 10 us' / '>= 1000 us'; returns their lower edge."""
    edges = {"< 1 us": 0, "< 10 us": 1_000, "< 100 us": 10_000, "< 1000 us": 100_000, ">= 1000 us": 1_000_000}
    return edges.get(label, 0)
