"""GPU activity not recorded: what the CUDA API table still shows.

## What it detects
An export with CUDA API calls but no GPU activity (no kernels, copies or memsets): WSL2, or a driver
that does not report GPU activity to nsys, records the calls only. The host's synchronization calls
still show how long it waited for the GPU; long waits mean the program is GPU-bound there.

## Why it is slow
Without the GPU's side nothing can be said about kernels or copies, but a host that spends most of
its time inside `cudaEventSynchronize`/`cudaStreamSynchronize` is waiting on GPU work: the GPU,
not the host, sets the pace.

## Example
```
nsys profile -t cuda,nvtx ./app      # on WSL2: CUDA API rows, no CUPTI kernel or memcpy rows
```

## Instead
```
nsys profile -t cuda,nvtx,osrt ./app       # on native Linux (or a driver with WSL2 GPU tracing)
ncu --set full -o kernels ./app            # kernel metrics do not need the timeline
```

The finding also gives the host's time in pinned host allocation (`cudaHostAlloc`, `cudaMallocHost`,
`cudaFreeHost`, `cudaHostRegister`): pinning is slow, a loop that allocates pinned buffers should
allocate them once. Blocking copy calls are `sync-memcpy`'s, read off the same table.

## Known problems
Copy sizes and kernel durations are not in the API table; the finding carries no savings.

## Options
- `min_wait_ns`: synchronization waits before the check speaks.
"""

import re

from nsanalyze.normalize.model import plain
from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural

HOST_ALLOCATION = re.compile(r"^(?:cudaHostAlloc|cudaMallocHost|cudaFreeHost|cudaHostRegister|cudaHostUnregister|"
                             r"cuMemHostAlloc|cuMemAllocHost|cuMemFreeHost|cuMemHostRegister|cuMemHostUnregister)$")

ID = "gpu-not-traced"
# why an export of each recorder holds the calls but not the GPU's side
WHY = {"nsys": "WSL2 or an old driver",
       "kineto": "the trace has CUDA runtime events but no GPU events: CUDA activity off, or its records dropped"}
ADVICE = """Record the GPU's side, or profile the kernels directly.

- Profile on native Linux, or with a driver and nsys that trace GPU activity under WSL2.
- `ncu --set full` measures kernels without a timeline: what holds each kernel back.
- Meanwhile: long synchronization waits mean the GPU is the bottleneck there; short waits with a
  long wall time mean the host (data loading, Python) is.

```
# before: WSL2, API rows only
nsys profile -t cuda,nvtx -o run ./app
# after: native Linux for the timeline, and the kernels measured directly
nsys profile -t cuda,nvtx,osrt -o run ./app
ncu --set full --import-source yes -o kernels ./app
```"""

# A PyTorch profiler trace with CUDA runtime events but no GPU events: its activities left CUDA's GPU side out,
# or CUPTI dropped the records (its buffers full, or a driver that does not report them, as under WSL2).
TRACE_ADVICE = """Record the GPU's side, or profile the kernels directly.

- Trace with `activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]`, on native Linux or a driver
  that reports GPU activity to CUPTI.
- Keep each trace short (`schedule(wait=1, warmup=1, active=3)`): CUPTI drops GPU records when its
  buffers fill.
- `ncu --set full` measures kernels without a timeline: what holds each kernel back.

```python
# before: no GPU events in the trace
with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof: ...
# after
with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) as prof: ...
```"""

CHECK = Check(
    id=ID,
    name="program.trace.no_gpu_activity",
    title="GPU activity not recorded: what the CUDA API table shows",
    section="busy",
    requires=("summary", "syncs"),
    thresholds={
        "min_wait_ns": Threshold(1_000_000, "a millisecond of synchronization waits is work the GPU held the host for"),
    },
    speedup_model="none: without GPU activity nothing is measured to save; the finding states what the API shows",
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    summary = timeline.summary
    if summary.kernels or summary.memcpy_ns or summary.memset_ns:
        return None  # GPU activity is recorded: the other checks read it
    waits = [s for s in timeline.syncs.explicit if s.wait_ns]
    total = sum(s.wait_ns for s in waits)
    api = [c for c in timeline.api_calls if c.name]
    if not (waits or api) or (total < limits.min_wait_ns and sum(c.total_ns for c in api) < limits.min_wait_ns):
        return None   # (no call at all: nothing to say at any threshold)
    calls = sum(s.calls for s in waits)
    shown = ", ".join(f"{c.name} {c.total_ns / 1e6:.1f} ms ({plural(c.calls, 'call')})" for c in api[:4])
    if waits and total >= limits.min_wait_ns:
        top = max(waits, key=lambda s: s.wait_ns)
        said = (f"the host waiting {total / 1e6:.1f} ms in {plural(calls, 'synchronize call')} "
                f"({top.wait_ns / 1e6:.1f} ms in {top.name}): the GPU sets the pace there")
    else:
        said = "the host's time in CUDA calls"
    pinning = [c for c in api if HOST_ALLOCATION.match(c.name)]
    pinning_ns = sum(c.total_ns for c in pinning)
    if pinning_ns >= limits.min_wait_ns:
        said += (f"; pinned host allocation held it {pinning_ns / 1e6:.1f} ms ("
                 + ", ".join(f"{c.name} {plural(c.calls, 'call')}" for c in pinning)
                 + ("): allocate pinned buffers once and reuse them" if any(c.calls > 1 for c in pinning)
                    else "), once"))
    return Finding(
        check=ID,
        title=f"GPU activity was not recorded ({WHY[timeline.recorder]}); the CUDA API table shows {said}"
              + (f"; longest calls by total time: {shown}" if shown else ""),
        estimated_speedup=0.0,
        evidence={"sync_wait_ns": evidence(total, limits.min_wait_ns, unit="ns"),
                  "sync_calls": evidence(calls), "by_call": plain(tuple(waits[:5])), "api_calls": plain(tuple(api[:10])),
                  "host_allocation_ns": evidence(pinning_ns, unit="ns"), "host_allocation_calls": plain(tuple(pinning))},
        advice=TRACE_ADVICE if timeline.recorder == "kineto" else ADVICE,
        notes=["GPU activity was not recorded: kernel and copy checks cannot judge this export"],
    )
