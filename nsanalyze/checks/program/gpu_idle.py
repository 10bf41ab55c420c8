"""The GPU waits: idle gaps between GPU work.

## What it detects
The budget's `idle_other`: time in the window when no kernel, copy or memset ran although the work
that ended the idle stretch had already been launched: the GPU waited on something other than the
host (an event or stream on another GPU, a dependency inside a graph). Idle time the host causes is
split off to `launch-overhead`, `host-compute` and `host-sync`; exports without CUDA API tracing
cannot tell the causes apart, and all their idle time lands here.

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
- `min_idle_share`: idle_other over the window before the check speaks.
"""

from nsanalyze.checks.program._claims import unclaimed_part
from nsanalyze.normalize.model import plain
from nsanalyze.checks.base import Check, Finding, Threshold, budget_part, evidence

ID = "gpu-idle"
BUDGET_PART = "idle_other"
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

CHECK = Check(
    id=ID,
    name="program.idle",
    title="The GPU idles with work already queued",
    section="busy",
    requires=("summary", "budget"),
    thresholds={
        "min_idle_share": Threshold(0.10, "a tenth of the time idle is worth a look in any pipeline"),
    },
    speedup_model="the budget's idle_other: idle time that no host cause explains (the next work was already queued)",
    budget_part=BUDGET_PART,
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    idle_ns, share = unclaimed_part(timeline, BUDGET_PART)
    if share < limits.min_idle_share:
        return None
    gaps = timeline.gaps[:3]
    finding = Finding(
        check=ID,
        title=f"The GPU idles {share:.0%} of the window although its next work was already queued "
              "(waiting on other streams, events or devices)",
        estimated_speedup=share,
        evidence={"idle_other_share": evidence(share, limits.min_idle_share, unit="ratio"),
                  "idle_other_ns": evidence(idle_ns, unit="ns"),
                  "largest_gaps": [{"start_ns": g.start, "duration_ns": g.duration_ns, "device_id": g.device_id,
                                    "host_calls": plain(g.host_calls), "nvtx_range": g.nvtx_range} for g in gaps]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = idle_ns
    return finding
