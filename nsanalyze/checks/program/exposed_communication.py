"""Communication the step waits for: NCCL time not hidden behind compute.

## What it detects
Per GPU, the time NCCL kernels (and peer-to-peer copies) run with no compute kernel running on
that GPU at the same time: communication that is exposed instead of overlapped.

## Why it is slow
While a collective runs alone, the GPU's SMs wait. Data-parallel training can hide most gradient
all-reduces behind the backward pass; exposed communication adds to every step.

## Example
```python
loss.backward()                     # all-reduce issued only after the whole backward
dist.all_reduce(grad)
```

## Instead
```python
model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)   # buckets overlap backward
```

## Known problems
Overlap is judged per GPU from kernel intervals: a compute kernel that runs beside a collective
but is slowed by it counts as overlap. Send/receive pairs of pipeline parallelism are exposed by design
when a stage waits for its neighbour.

## Options
- `min_exposed_share`: exposed communication over the device's span before the check speaks.
"""

from nsanalyze.checks.base import Finding, Threshold, evidence

ID = "exposed-communication"
NAME = "program.communication.exposed"
TITLE = "Communication not hidden behind compute"
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("devices",)
BUDGET_PART = "gpu_communication"
THRESHOLDS = {"min_exposed_share": Threshold(0.03, "a few percent of a step in bare collectives is worth overlapping")}
SPEEDUP_MODEL = "the largest exposed communication time of any device: the step waits for the slowest"
ADVICE = """Overlap communication with compute.

- PyTorch DDP: tune `bucket_cap_mb` so that all-reduces start during backward; keep
  `gradient_as_bucket_view=True`; avoid `find_unused_parameters` when it is not needed.
- FSDP: `forward_prefetch=True`, `backward_prefetch=BackwardPrefetch.BACKWARD_PRE`.
- Run communication on its own high-priority stream (`torch.cuda.Stream(priority=-1)`) so that
  it is scheduled as soon as its inputs are ready.
- Fewer, larger messages: bucket small tensors together.

```python
# before: one all-reduce after backward
loss.backward(); [dist.all_reduce(p.grad) for p in model.parameters()]
# after: bucketed all-reduces overlapping backward
model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True); loss.backward()
```"""


def run(timeline, limits) -> Finding | None:
    devices = [d for d in timeline.devices if d.get("communication_ns")]
    if not devices:
        return None
    worst = max(devices, key=lambda d: d["exposed_communication_ns"])
    window = worst.get("window_ns") or worst["span_ns"]
    share = worst["exposed_communication_ns"] / window if window else 0.0
    if share < limits["min_exposed_share"]:
        return None
    hidden = 1 - worst["exposed_communication_ns"] / worst["communication_ns"]
    # Collectives end together: a GPU that waits far longer in them than another waits for that one.
    least = min(timeline.devices, key=lambda d: d.get("exposed_communication_ns") or 0)
    waiting = (worst["exposed_communication_ns"] - (least.get("exposed_communication_ns") or 0)) \
        / worst["exposed_communication_ns"] if least is not worst else 0.0
    cause = (f"it waits in its collectives for GPU {least['device_id']}, a straggler that reaches them later"
             if waiting > 0.5 else "collectives not overlapped with compute")
    finding = Finding(
        check=ID,
        title=f"GPU {worst['device_id']}: {worst['exposed_communication_ns'] / 1e6:.1f} ms of communication "
              f"({share:.0%} of its time) runs with no compute beside it, {hidden:.0%} hidden: {cause}",
        estimated_speedup=0.0,
        evidence={"exposed_share": evidence(share, limits["min_exposed_share"], unit="ratio"),
                  "waiting_for_straggler_share": evidence(waiting, unit="ratio"),
                  "exposed_communication_ns": evidence(worst["exposed_communication_ns"], unit="ns"),
                  "communication_ns": evidence(worst["communication_ns"], unit="ns"),
                  "per_device": [{k: d[k] for k in ("device_id", "communication_ns", "exposed_communication_ns",
                                                    "communication_kernels")} for d in timeline.devices]},
        advice=ADVICE,
        device_id=worst["device_id"],
    )
    finding.estimated_savings_ns = float(worst["exposed_communication_ns"])
    finding.budget_device = worst["device_id"]
    return finding
