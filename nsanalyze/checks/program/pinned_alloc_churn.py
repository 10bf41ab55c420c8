"""Page-locked host memory allocated and freed while the program runs.

## What it detects
`cudaHostAlloc`/`cudaMallocHost`/`cudaFreeHost` (and `cudaHostRegister`, the driver's `cuMemHostAlloc`)
calls in the window, classed by the host-activity table (`normalize/host_activity.csv`), with the GPU
idle time they cost: the host time in them, step by step, up to the GPU's idle time in that step.

## Why it is slow
Pinning host memory asks the operating system to lock every page: milliseconds for a few megabytes,
and `cudaFreeHost` waits for the device. A program that pins a fresh buffer for each transfer pays this
every time, and the GPU waits for it. Pinned buffers are meant to be allocated once and reused.

## Example
```cpp
for (int i = 0; i < n; ++i) {
    float *h; cudaMallocHost(&h, bytes);          // pins pages every iteration
    fill(h); cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s);
    cudaFreeHost(h);
}
```

## Instead
```cpp
float *h; cudaMallocHost(&h, bytes);              // once
for (int i = 0; i < n; ++i) { fill(h); cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s); cudaStreamSynchronize(s); }
cudaFreeHost(h);
```

## Known problems
A program that pins its buffers once at start-up pays the cost once: outside a steady window it is
start-up, and the finding then reads as such. PyTorch's `pin_memory()` caches pinned blocks.

## Options
- `min_window_share`: the savings as a share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.checks.program._host_class import calls_evidence, calls_phrase, cost_phrase, priced_class


ID = "pinned-alloc-churn"
CLASS = "pinned-alloc"
ADVICE = """Allocate page-locked buffers once and reuse them.

- `cudaMallocHost`/`cudaHostAlloc` a staging buffer at start-up, sized for the largest transfer, and
  copy through it; free it at the end.
- PyTorch: `pin_memory=True` in the `DataLoader` (its pinned blocks are cached), or one pinned tensor
  reused with `copy_(..., non_blocking=True)`.

```cpp
// before: pinned per transfer          // after: pinned once
cudaMallocHost(&h, bytes); ...          static float *h = nullptr;
cudaFreeHost(h);                        if (!h) cudaMallocHost(&h, max_bytes);
```"""

CHECK = Check(
    id=ID,
    name="program.host.pinned_alloc",
    title="Page-locked host memory allocated and freed while the program runs",
    section="busy",
    requires=("host_activity",),
    thresholds={"min_window_share": Threshold(0.02, "a fiftieth of the window in pinning calls is worth allocating "
                                                    "the buffer once")},
    speedup_model=("per steady step (or over the window), the host time in pinned-allocation calls, up to the "
                   "GPU's idle time: allocated once and reused, they cost nothing in the loop"),
    change={"remove": ("pinned-alloc",)},  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    priced = priced_class(timeline, CLASS, limits.min_window_share)
    if priced is None:
        return None
    cost, share = priced
    finding = Finding(
        check=ID,
        title=(f"Page-locked host memory is allocated and freed while the program runs: {calls_phrase(cost)}; "
               f"{cost_phrase(cost, share)}: pin a "
               "buffer once and reuse it"),
        estimated_speedup=share,
        evidence={"pinned_alloc_calls": evidence(cost.calls),
                  "pinned_alloc_host_ns": evidence(cost.host_ns, unit="ns"),
                  "savings_share": evidence(share, limits.min_window_share, unit="ratio"),
                  "calls": calls_evidence(cost)},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = cost.savings_ns
    return finding
