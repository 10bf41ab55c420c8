"""Copies from or to pageable host memory.

## What it detects
Host-device copies whose host side is pageable (ordinary `malloc`/NumPy/PyTorch CPU memory),
listed as `nsys analyze` lists them for asynchronous calls.

## Why it is slow
The driver first copies pageable memory into a pinned staging buffer, so the transfer runs at a
fraction of PCIe bandwidth and a `cudaMemcpyAsync` from pageable memory blocks the host: the
copy cannot overlap compute.

## Example
```python
x = torch.randn(4096, 4096)          # pageable
x_gpu = x.cuda(non_blocking=True)     # silently synchronous
```

## Instead
```python
x = torch.randn(4096, 4096).pin_memory()
x_gpu = x.cuda(non_blocking=True)     # a real asynchronous DMA
```

## Known problems
Pinning memory is costly itself (pin once, reuse buffers); tiny copies gain little.

## Options
- `min_copies`: pageable copies before the check speaks.
"""

from nsanalyze.checks.base import Finding, plural, Threshold, evidence

ID = "pageable-memcpy"
NAME = "program.copies.pageable"
TITLE = "Copies from or to pageable host memory"
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("copies",)
BUDGET_PART = "gpu_copy"
THRESHOLDS = {
    "min_copies": Threshold(1, "one large pageable copy in a loop is already a stall"),
    "pinned_speedup": Threshold(0.5, "pinned copies run at about twice the bandwidth of staged pageable ones"),
}
SPEEDUP_MODEL = "pinned_speedup x time of the pageable copies (staging removed), in the program's time"
ADVICE = """Use pinned (page-locked) host buffers for anything copied to or from the GPU repeatedly.

- CUDA: `cudaMallocHost`/`cudaHostAlloc`, or `cudaHostRegister` an existing buffer.
- PyTorch: `tensor.pin_memory()`, `DataLoader(pin_memory=True)`, then `.cuda(non_blocking=True)`.
- Reuse pinned buffers: pinning is expensive, do it once.

```cpp
// before
float* h = (float*)malloc(bytes); cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s);
// after
float* h; cudaMallocHost(&h, bytes); cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s);
```"""


def run(timeline, limits) -> Finding | None:
    pageable = timeline.copies["pageable"]
    if pageable["copies"] < limits["min_copies"]:
        return None
    finding = Finding(
        check=ID,
        title=f"{plural(pageable['copies'], 'copy')} used pageable host memory "
              f"({pageable['bytes'] / 1e6:.1f} MB, {pageable['duration_ns'] / 1e6:.2f} ms)",
        estimated_speedup=0.0,
        evidence={"pageable_copies": evidence(pageable["copies"], limits["min_copies"], compare=">="),
                  "pageable_bytes": evidence(pageable["bytes"], unit="byte"),
                  "pageable_copy_ns": evidence(pageable["duration_ns"], unit="ns"),
                  "largest_async": pageable["async_top"][:5]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = limits["pinned_speedup"] * pageable["duration_ns"]
    return finding
