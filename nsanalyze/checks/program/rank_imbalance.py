"""One GPU holds the others back.

## What it detects
In a multi-GPU profile, a device whose compute time (kernels other than communication) exceeds
the others': the others finish their share early and wait for it in the next collective. The
finding names the slow device and the kernels where its extra time goes.

## Why it is slow
Synchronous data- or tensor-parallel steps run at the pace of the slowest rank; every other GPU
idles for the difference.

## Example
```python
sampler = DistributedSampler(ds)    # sequences of very different lengths per rank
```

## Instead
```python
# balance work per rank: bucket by length, or pack sequences to equal token counts
```

## Known problems
Per step imbalance (NVTX `step N` ranges) is not separated yet: the check compares whole-capture
compute time per device, which hides imbalance that alternates between ranks.

## Options
- `min_imbalance_share`: extra compute of the slowest device over its own compute time.
"""

from nsanalyze.checks.base import Finding, Threshold, evidence

ID = "rank-imbalance"
NAME = "program.communication.imbalance"
TITLE = "One GPU holds the others back"
REQUIRES = ("devices",)
THRESHOLDS = {"min_imbalance_share": Threshold(0.05, "a few percent of jitter between GPUs is normal")}
SPEEDUP_MODEL = "the slow device's extra compute time over the mean of the others: what the others wait"
ADVICE = """Give every GPU the same amount of work.

- Balance the data per rank (length bucketing, sequence packing, equal token counts).
- Check that every rank runs the same kernels: a rank doing extra logging, evaluation or
  checkpointing on the GPU holds the others back.
- Look for a slower GPU (clock throttling, a PCIe link at lower width) with `nvidia-smi -q`.

```python
# before: ranks get batches of very different cost
loader = DataLoader(ds, sampler=DistributedSampler(ds))
# after: batches of equal token count per rank
loader = DataLoader(ds, batch_sampler=TokenBudgetSampler(ds, tokens_per_batch=65536, rank=rank))
```"""


def run(timeline, limits) -> Finding | None:
    devices = timeline.devices
    if len(devices) < 2:
        return None
    slow = max(devices, key=lambda d: d["compute_kernel_ns"])
    others = [d for d in devices if d is not slow]
    mean_others = sum(d["compute_kernel_ns"] for d in others) / len(others)
    extra = slow["compute_kernel_ns"] - mean_others
    share = extra / slow["compute_kernel_ns"] if slow["compute_kernel_ns"] else 0.0
    if share < limits["min_imbalance_share"]:
        return None
    per_kernel: dict[str, dict] = {}
    for row in timeline.device_kernels:
        entry = per_kernel.setdefault(row["name"], {"slow": 0, "others": 0})
        entry["slow" if row["device_id"] == slow["device_id"] else "others"] += row["duration_ns"]
    where = sorted(((name, v["slow"] - v["others"] / len(others)) for name, v in per_kernel.items()),
                   key=lambda item: -item[1])[:3]
    finding = Finding(
        check=ID,
        title=f"GPU {slow['device_id']} computes {extra / 1e6:.1f} ms ({share:.0%}) longer than the others; "
              f"most of it in {where[0][0] if where else 'its kernels'}",
        estimated_speedup=0.0,
        evidence={"imbalance_share": evidence(share, limits["min_imbalance_share"], unit="ratio"),
                  "extra_compute_ns": evidence(extra, unit="ns"),
                  "compute_ns_per_device": {str(d["device_id"]): d["compute_kernel_ns"] for d in devices},
                  "extra_by_kernel": [{"name": n, "extra_ns": e} for n, e in where if e > 0]},
        advice=ADVICE,
        device_id=slow["device_id"],
    )
    finding.estimated_savings_ns = float(extra)
    return finding
