"""Synchronous memory copies that block the host.

## What it detects
`cudaMemcpy` (not `...Async`) transfers, the ones `nsys analyze` reports: the host waits for
each to finish (host-to-device copies of 64 KB or less are left out, as the driver returns early).

## Why it is slow
While the host waits it cannot queue the next kernels, so the GPU drains and idles after every
copy; the copy itself cannot overlap compute on another stream.

## Example
```cpp
cudaMemcpy(d_in, h_in, bytes, cudaMemcpyHostToDevice);
kernel<<<g, b>>>(d_in);
```

## Instead
```cpp
cudaMemcpyAsync(d_in, h_in_pinned, bytes, cudaMemcpyHostToDevice, stream);
kernel<<<g, b, 0, stream>>>(d_in);
```

Without GPU activity in the export (WSL2, an old driver: CUDA API rows only), the copy calls of the
API table are read instead: `cudaMemcpy`, `cudaMemcpy2D/3D`, `...ToSymbol`/`...FromSymbol` and the
driver's `cuMemcpy*` block the host by design, and an `...Async` call that holds the host for
`min_blocking_call_ns` on average is blocking too (from pageable memory the driver stages the copy
before returning; from pinned memory it returns in microseconds). The memory kind and the bytes are
not in the API table: the finding says so.

## Known problems
A synchronous copy at program start (loading weights) is harmless; look at the ones in loops.
Made asynchronous, a copy still moves its bytes: the saving is the GPU's idle time after each copy, up to the copy's
own length (the host's work after it then overlaps the copy), not the copy's time; pinned memory (pageable-memcpy)
is what shortens the copy itself.
From the API table alone the savings are the host time of the calls, at most: how much of it the
copy itself needs once asynchronous is not recorded.

## Options
- `min_copies`: synchronous copies before the check speaks.
- `min_blocking_call_ns`: mean host time of an asynchronous copy call (API table only) that makes it blocking.
"""

import re

from nsanalyze.normalize.model import SyncCopies, plain
from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.numbers import duration_text

ID = "sync-memcpy"
BUDGET_PART = "gpu_copy"
# copy calls of the runtime and driver APIs that return only once the copy is done (API table only)
BLOCKING_COPY = re.compile(r"^(?:cudaMemcpy(?:2D|3D)?(?:ToArray|FromArray|ToSymbol|FromSymbol|Peer)?|cuMemcpy\w*?)$")
ASYNC_COPY = re.compile(r"^(?:cudaMemcpy\w*Async|cuMemcpy\w*Async)$")
ADVICE = """Issue copies asynchronously, from pinned memory, on a stream, and synchronize once where the result is needed.

```cpp
// before
cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
// after
cudaMemcpyAsync(d, h_pinned, bytes, cudaMemcpyHostToDevice, stream);
```"""

CHECK = Check(
    id=ID,
    name="program.copies.sync",
    title="Synchronous copies block the host",
    section="busy",
    requires=("copies",),
    thresholds={"min_copies": Threshold(1, "each one drains the GPU's queue"),
                "min_blocking_call_ns": Threshold(100_000, "an asynchronous copy from pinned memory returns in ~10 us; "
                                                           "one that holds the host 10x that waited for the copy")},
    speedup_model=("the GPU's idle time after each copy, up to the copy's length: done asynchronously, the copy runs "
                   "while the host does the work that followed it"),
    budget_part=BUDGET_PART,
    change={"remove": ("copy",)},  # the replay change priced (program.py)
    advice=ADVICE,
)


def _gpu_not_traced(timeline) -> bool:
    summary = timeline.summary
    return not (summary.kernels or summary.memcpy_ns or summary.memset_ns) and bool(timeline.api_calls)


def _from_api(timeline, limits) -> Finding | None:
    """The copy calls of an export without GPU activity that held the host: blocking by name, or
    asynchronous calls that held it min_blocking_call_ns on average."""
    calls = []
    for call in timeline.api_calls:
        name = call.name or ""
        if ASYNC_COPY.match(name):
            if call.calls and call.total_ns / call.calls >= limits.min_blocking_call_ns:
                calls.append((call, "asynchronous by name, but it held the host "
                                    f"{call.total_ns / call.calls / 1e6:.3g} ms a call"))
        elif BLOCKING_COPY.match(name):
            calls.append((call, "synchronous: returns once the copy is done"))
    count, total = sum(c.calls for c, _ in calls), sum(c.total_ns for c, _ in calls)
    if count < limits.min_copies or not total:
        return None
    shown = ", ".join(f"{c.name} {c.total_ns / 1e6:.1f} ms ({plural(c.calls, 'call')})" for c, _ in calls[:3])
    finding = Finding(
        check=ID,
        title=f"{plural(count, 'copy call')} blocked the host for {total / 1e6:.1f} ms by the CUDA API table "
              f"({shown}); GPU activity was not recorded, so their bytes and memory kind are not known",
        estimated_speedup=0.0,
        evidence={"blocking_copy_calls": evidence(count, limits.min_copies, compare=">="),
                  "blocking_copy_call_ns": evidence(total, unit="ns"),
                  "calls": [dict(c.to_json(), why=why) for c, why in calls[:5]]},
        advice=ADVICE,
        notes=["from the CUDA API table (no GPU activity recorded): host time in the copy calls; the saving is "
               "at most that time, since what the copy itself needs once asynchronous is not recorded",
               "a copy call that blocks is synchronous or from pageable memory: pin the buffer and use "
               "cudaMemcpyAsync / non_blocking=True"],
    )
    finding.estimated_savings_ns = float(total)
    return finding


def run(timeline, limits) -> Finding | None:
    sync = timeline.copies.sync or SyncCopies()
    if not sync.copies and _gpu_not_traced(timeline):
        return _from_api(timeline, limits)
    if sync.copies < limits.min_copies:
        return None
    finding = Finding(
        check=ID,
        title=f"{plural(sync.copies, 'synchronous copy')} blocked the host for {duration_text(sync.duration_ns)}",
        estimated_speedup=0.0,
        evidence={"sync_copies": evidence(sync.copies, limits.min_copies, compare=">="),
                  "sync_copy_ns": evidence(sync.duration_ns, unit="ns"),
                  "largest": plain(sync.top[:5])},
        advice=ADVICE,
    )
    # made asynchronous, a copy still moves its bytes: what it saves is the GPU's idle time after it that the host's
    # work then overlaps, up to the copy's own length (dev_suite: 9.52 ms of upload, then 3.4 ms of the host freeing
    # its buffer before the next launch; the finding said 9.52 ms, the whole copy)
    idle = sync.idle_after_ns
    finding.estimated_savings_ns = float(sync.duration_ns) if idle is None else min(float(sync.duration_ns), idle)
    if idle is not None:
        finding.evidence["idle_after_ns"] = evidence(idle, unit="ns")
        if sync.idle_after_by_part:   # its savings lie in the idle part the host's work after the copies filled
            finding.budget_part = max(sync.idle_after_by_part, key=sync.idle_after_by_part.get)
        finding.notes.append(f"savings: the GPU's idle time after the copies, up to each copy's length "
                             f"({duration_text(idle)}): made asynchronous, a copy still takes its time on the GPU, "
                             "and the host's work after it runs meanwhile")
    return finding
