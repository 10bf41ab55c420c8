"""Transfer-bound: host-device copies take most of the window.

## What it detects
A window whose time budget goes mostly to copies (`gpu_copy`), more than to compute: the program
moves data between host and GPU more than the GPU computes on it. The finding gives the bytes and
the bandwidth each direction achieved, so that a slow link (pageable staging, small copies) and
too much traffic can be told apart.

## Why it is slow
A copy over PCIe moves 12-50 GB/s (PCIe 3.0-5.0 x16) where the GPU's own memory moves terabytes:
every byte that crosses the link costs 100x its time on the GPU. Copies from pageable memory are
staged through a pinned buffer at about half that rate, and copies that do not overlap compute
leave the GPU idle for their whole length.

## Example
```python
for batch in data:                        # the whole dataset crosses the link every epoch
    x = torch.from_numpy(batch).cuda()    # pageable, synchronous, one batch at a time
    y = model(x)
```

## Instead
```python
data_gpu = torch.from_numpy(all_data).pin_memory().cuda(non_blocking=True)   # once, pinned
for x in data_gpu.split(batch_size):       # the data stays on the GPU
    y = model(x)
```

## Known problems
The export does not name the link: the achieved bandwidth is compared with PCIe's in words only.
Copies a multi-GPU program needs (peer exchange) are counted as copies too.

## Options
- `min_copy_share`: the window's share spent on copies before the check speaks.
- `reducible_share`: the part of the copy time pinned buffers, overlap and fewer transfers win back.
"""

from nsanalyze.checks.base import Finding, Threshold, budget_part, evidence, per_step_phrase, plural

ID = "transfer-bound"
NAME = "program.copies.transfer_bound"
TITLE = "Transfer-bound: copies take most of the window"
SECTION = "busy"  # the report section its findings appear in
REQUIRES = ("copies", "budget")
BUDGET_PART = "gpu_copy"
THRESHOLDS = {
    "min_copy_share": Threshold(0.30, "copies taking 30% of the window outweigh everything but compute; the "
                                      "check also needs them above the compute share"),
    "reducible_share": Threshold(0.5, "pinned buffers (about 2x a pageable copy), overlap with compute and keeping "
                                      "data on the GPU typically win back half of the exposed copy time"),
}
SPEEDUP_MODEL = "reducible_share x the budget's gpu_copy (copy time with no kernel running), in the window's time"
ADVICE = """Move fewer bytes, over a faster path, while the GPU computes.

- Keep data on the GPU across steps; copy results back only when needed (not every iteration).
- Pin the host buffers (`cudaMallocHost`, `tensor.pin_memory()`, `DataLoader(pin_memory=True)`) and copy
  with `cudaMemcpyAsync` / `non_blocking=True` on a side stream, so copies overlap kernels.
- Batch many small copies into one large one (per-copy overhead dominates below ~100 KB).
- Compress or narrow the data before it crosses the link (fp16/bf16, int8, indices instead of masks).

```python
# before: pageable, synchronous, every step
x = torch.from_numpy(batch).cuda()
# after: pinned, asynchronous, overlapped with the previous step's compute
x = torch.from_numpy(batch).pin_memory().cuda(non_blocking=True)
```"""


def _directions(by_kind: list[dict]) -> list[dict]:
    """Per copy direction: copies, bytes, time and the achieved bandwidth (bytes over copy time)."""
    out: dict[str, dict] = {}
    for row in by_kind:
        entry = out.setdefault(row["copy_kind"], {"copy_kind": row["copy_kind"], "copies": 0, "bytes": 0,
                                                   "duration_ns": 0, "pageable_bytes": 0})
        entry["copies"] += int(row.get("copies") or 0)
        entry["bytes"] += int(row.get("bytes") or 0)
        entry["duration_ns"] += int(row.get("duration_ns") or 0)
        if "Pageable" in (row.get("src_kind"), row.get("dst_kind")):
            entry["pageable_bytes"] += int(row.get("bytes") or 0)
    for entry in out.values():
        entry["gb_per_s"] = round(entry["bytes"] / entry["duration_ns"], 2) if entry["duration_ns"] else None
    return sorted(out.values(), key=lambda e: -e["duration_ns"])


def run(timeline, limits) -> Finding | None:
    copy_ns, copy_share = budget_part(timeline, BUDGET_PART)
    _, compute_share = budget_part(timeline, "gpu_compute")
    if copy_share < limits["min_copy_share"] or copy_share <= compute_share:
        return None
    directions = _directions(timeline.copies.get("by_kind") or [])
    if not directions:
        return None
    top = directions[0]
    rate = f" at {top['gb_per_s']:.1f} GB/s" if top["gb_per_s"] else ""
    pageable = sum(d["pageable_bytes"] for d in directions)
    total = sum(d["bytes"] for d in directions)
    finding = Finding(
        check=ID,
        title=f"Transfer-bound: copies take {copy_share:.0%} of the window{per_step_phrase(timeline, BUDGET_PART)}, "
              f"the GPU computes {compute_share:.0%}; {plural(top['copies'], 'copy')} {top['copy_kind'].lower()} "
              f"moved {top['bytes'] / 1e9:.2f} GB{rate}",
        estimated_speedup=0.0,
        evidence={"copy_share": evidence(copy_share, limits["min_copy_share"], unit="ratio"),
                  "compute_share": evidence(compute_share, unit="ratio"),
                  "copy_ns": evidence(copy_ns, unit="ns"),
                  "copy_bytes": evidence(total, unit="byte"),
                  "pageable_share_of_bytes": evidence(pageable / total if total else None, unit="ratio"),
                  "directions": directions},
        advice=ADVICE,
        notes=["achieved bandwidth is bytes over copy time; PCIe 3.0/4.0/5.0 x16 move about 12/25/50 GB/s pinned"]
              + (["some of the bytes come from pageable memory: pin them first (pageable-memcpy)"] if pageable else []),
    )
    finding.estimated_savings_ns = limits["reducible_share"] * copy_ns
    return finding
