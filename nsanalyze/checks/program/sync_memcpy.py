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

## Known problems
A synchronous copy at program start (loading weights) is harmless; look at the ones in loops.

## Options
- `min_copies`: synchronous copies before the check speaks.
"""

from nsanalyze.checks.base import Finding, plural, Threshold, evidence

ID = "sync-memcpy"
NAME = "program.copies.sync"
TITLE = "Synchronous copies block the host"
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("copies",)
BUDGET_PART = "gpu_copy"
THRESHOLDS = {"min_copies": Threshold(1, "each one drains the GPU's queue")}
SPEEDUP_MODEL = "the copies' own time: done asynchronously on a side stream they overlap compute"
ADVICE = """Issue copies asynchronously, from pinned memory, on a stream, and synchronize once where the result is needed.

```cpp
// before
cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
// after
cudaMemcpyAsync(d, h_pinned, bytes, cudaMemcpyHostToDevice, stream);
```"""


def run(timeline, limits) -> Finding | None:
    sync = timeline.copies["sync"]
    if sync["copies"] < limits["min_copies"]:
        return None
    finding = Finding(
        check=ID,
        title=f"{plural(sync['copies'], 'synchronous copy')} blocked the host for {sync['duration_ns'] / 1e6:.2f} ms",
        estimated_speedup=0.0,
        evidence={"sync_copies": evidence(sync["copies"], limits["min_copies"], compare=">="),
                  "sync_copy_ns": evidence(sync["duration_ns"], unit="ns"),
                  "largest": sync["top"][:5]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = float(sync["duration_ns"])
    return finding
