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
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("devices",)
BUDGET_PART = "gpu_communication"
THRESHOLDS = {"min_imbalance_share": Threshold(0.05, "a few percent of jitter between GPUs is normal")}
SPEEDUP_MODEL = ("with per-GPU budgets: the other GPUs' communication time beyond the straggler's (they wait in "
                 "their collectives for it), averaged over them: wall-clock time; else the slow device's extra "
                 "compute time over the mean of the others")
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


def _parts(device) -> dict:
    return {p["part"]: p["ns"] for p in device["budget"]}


def _from_budgets(timeline, devices, limits) -> Finding | None:
    """The straggler is the GPU that waits least in its collectives; the others wait for it there.
    Whether it is slow on the host or on the GPU: which of its host-idle and compute time exceeds the others'."""
    parts = {d["device_id"]: _parts(d) for d in devices}
    straggler = min(devices, key=lambda d: parts[d["device_id"]]["gpu_communication"])
    others = [d for d in devices if d is not straggler]
    mine = parts[straggler["device_id"]]
    wait = sum(parts[d["device_id"]]["gpu_communication"] - mine["gpu_communication"] for d in others) / len(others)
    window = sum(d["window_ns"] for d in devices) / len(devices)
    share = wait / window if window else 0.0
    if share < limits["min_imbalance_share"]:
        return None
    host_parts = ("idle_host", "idle_launch", "idle_sync")
    def mean_others(keys):
        return sum(sum(parts[d["device_id"]][k] for k in keys) for d in others) / len(others)
    extra_host = sum(mine[k] for k in host_parts) - mean_others(host_parts)
    extra_compute = mine["gpu_compute"] - mean_others(("gpu_compute",))
    side = "on the host" if extra_host > extra_compute else "on the GPU"
    cause = (f"{extra_host / 1e6:.1f} ms more host time than the others (idle waiting on its host)" if side == "on the host"
             else f"{extra_compute / 1e6:.1f} ms more compute than the others")
    table = [{"device_id": d["device_id"], "compute_ns": parts[d["device_id"]]["gpu_compute"],
              "host_ns": sum(parts[d["device_id"]][k] for k in host_parts),
              "communication_ns": d.get("communication_ns"),
              "exposed_communication_ns": parts[d["device_id"]]["gpu_communication"]} for d in devices]
    finding = Finding(
        check=ID,
        title=f"GPU {straggler['device_id']} is the straggler, slow {side}: the other GPUs wait for it in their "
              f"collectives {wait / 1e6:.1f} ms ({share:.0%} of the window); it has {cause}",
        estimated_speedup=0.0,
        evidence={"wait_share": evidence(share, limits["min_imbalance_share"], unit="ratio"),
                  "others_wait_ns": evidence(wait, unit="ns"),
                  "straggler_side": side.removeprefix("on the "),
                  "extra_host_ns": evidence(extra_host, unit="ns"),
                  "extra_compute_ns": evidence(extra_compute, unit="ns"),
                  "per_device": table},
        advice=ADVICE,
        device_id=straggler["device_id"],
    )
    finding.estimated_savings_ns = float(wait)
    finding.budget_device = max(others, key=lambda d: parts[d["device_id"]]["gpu_communication"])["device_id"]
    return finding


def run(timeline, limits) -> Finding | None:
    devices = timeline.devices
    if len(devices) < 2:
        return None
    if all(d.get("budget") for d in devices) and any(d.get("communication_ns") for d in devices):
        return _from_budgets(timeline, devices, limits)
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
