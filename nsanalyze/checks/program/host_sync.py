"""Host synchronization that leaves the GPU waiting.

## What it detects
Explicit synchronization (`cudaDeviceSynchronize`, `cudaStreamSynchronize`, event syncs) and the
implicit kind behind `.item()`, `.cpu()` and `print(tensor)`: a device-to-host copy the host
must wait for. For each, the GPU time lost until the next kernel starts.

## Why it is slow
After a sync the GPU's queue is empty: it idles until the host has launched the next work.
One sync per step in a training or inference loop costs a full launch round trip every time.

## Example
```python
loss_value = loss.item()              # waits for the GPU, every step
```

## Instead
```python
running_loss += loss.detach()         # stays on the GPU; read it every N steps
```

## Known problems
Some syncs are needed (timing, end of an epoch); the check counts all of them and ranks by the
idle time they cause.

## Options
- `min_relaunch_gap_ns`: GPU idle after syncs, summed, before the check speaks.
"""

from nsanalyze.checks.base import Finding, plural, Threshold, evidence

ID = "host-sync"
NAME = "program.sync.host"
TITLE = "Host synchronization leaves the GPU waiting"
REQUIRES = ("syncs",)
THRESHOLDS = {"min_relaunch_gap_ns": Threshold(100_000, "under 0.1 ms of idle in total the syncs are harmless")}
SPEEDUP_MODEL = ("the GPU idle time between a sync's return and the next kernel's start, each idle stretch "
                 "counted once, at most the window's idle time")
ADVICE = """Synchronize less: keep results on the GPU and read them rarely.

- Replace per-step `.item()`/`.cpu()`/`print(tensor)` with accumulation on the GPU, read every N steps.
- Use `cudaStreamWaitEvent` between streams instead of host-side `cudaStreamSynchronize`.
- Remove `cudaDeviceSynchronize()` left over from debugging.

```python
# before: a host round trip per step
for x in loader: loss = step(x); total += loss.item()
# after: one at the end
for x in loader: loss = step(x); total += loss.detach()
print(total.item())
```"""


def run(timeline, limits) -> Finding | None:
    rows = [dict(r, kind="explicit") for r in timeline.syncs["explicit"]] + \
           [dict(r, kind="implicit (device-to-host copy)") for r in timeline.syncs["implicit"]]
    gap = timeline.syncs["relaunch_gap_ns"]
    if gap < limits["min_relaunch_gap_ns"]:
        return None
    calls = sum(r["calls"] for r in rows)
    window = timeline.summary["span_ns"] or 1
    finding = Finding(
        check=ID,
        title=f"{plural(calls, 'host synchronization')} left the GPU idle {gap / 1e6:.1f} ms before the next kernel",
        estimated_speedup=min(1.0, gap / window),
        evidence={"relaunch_gap_ns": evidence(gap, limits["min_relaunch_gap_ns"], unit="ns"),
                  "sync_calls": evidence(calls),
                  "by_call": sorted(rows, key=lambda r: -r["relaunch_gap_ns"])},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = float(min(gap, timeline.summary["gpu_idle_ns"]))
    return finding
