"""The GPU waits while the host computes: data preparation on the critical path.

## What it detects
The budget's `idle_host`: GPU idle time in which the host issued no CUDA call for 0.3 ms or more
(or sat in one long runtime call such as `cudaMalloc`), and no synchronization explains it: the
host was running its own code. The longest stretches are listed with the NVTX range around them and
the OS runtime calls the host made (reads, waits on a queue), when the export traced them.

## Why it is slow
The GPU only runs what the host has queued. When each step first decodes, augments or collates its
batch in the training process, the GPU idles for all of that time, every step.

## Example
```python
for step in range(steps):
    x, y = make_batch(files[step])        # decoding and augmentation in the training loop
    loss = loss_fn(model(x.cuda()), y.cuda()); loss.backward(); opt.step()
```

## Instead
```python
loader = DataLoader(dataset, batch_size=64, num_workers=8, pin_memory=True,
                    prefetch_factor=4, persistent_workers=True)    # batches prepared ahead, in parallel
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    ...
```

## Known problems
Host work that must stay serial (Python bookkeeping that decides the next launch) also lands here;
the NVTX ranges and OS calls in the evidence tell which code it was.

## Options
- `min_idle_share`: idle_host over the window before the check speaks.
"""

from nsanalyze.checks.base import Finding, Threshold, budget_part, evidence, per_step_phrase

ID = "host-compute"
NAME = "program.host.compute"
TITLE = "The GPU waits while the host computes"
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("budget",)
BUDGET_PART = "idle_host"
THRESHOLDS = {"min_idle_share": Threshold(0.05, "a twentieth of the window spent waiting on host code is worth moving")}
SPEEDUP_MODEL = "the budget's idle_host: moved off the critical path (workers, prefetch), the GPU would not wait"
ADVICE = """Take the host work off the critical path.

- Data loading and preprocessing: `DataLoader(num_workers=N, pin_memory=True, prefetch_factor=...,
  persistent_workers=True)`; decode and augment on the GPU (DALI, torchvision.transforms.v2 on tensors).
- Copies from pinned memory with `non_blocking=True`, prefetched a step ahead on a side stream.
- Python bookkeeping (metrics, logging): do it every N steps, or on tensors that stay on the GPU.

```python
# before: the batch is built in the training loop
x, y = make_batch(i)
# after: built ahead by worker processes
loader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True)
```"""


def run(timeline, limits) -> Finding | None:
    idle_ns, share = budget_part(timeline, BUDGET_PART)
    if share < limits["min_idle_share"]:
        return None
    step_text = per_step_phrase(timeline, BUDGET_PART)
    stretches = timeline.host_stretches[:5]
    where = ""
    if stretches and stretches[0].get("nvtx_range"):
        where = f"; longest stretch {stretches[0]['duration_ns'] / 1e6:.1f} ms in range '{stretches[0]['nvtx_range']}'"
    finding = Finding(
        check=ID,
        title=f"The GPU waits while the host runs its own code {share:.0%} of the window{step_text}{where}",
        estimated_speedup=share,
        evidence={"idle_host_share": evidence(share, limits["min_idle_share"], unit="ratio"),
                  "idle_host_ns": evidence(idle_ns, unit="ns"),
                  "longest_stretches": stretches},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = idle_ns
    return finding
