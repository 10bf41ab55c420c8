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
Pinning memory is costly itself (pin once, reuse buffers). The saving is the GPU's idle time under
the calls that staged the copies to the device (the copy-async class's idle time, in the share of its
calls that uploaded pageable memory: small copies cost that, not their bytes), plus the pageable
copies' time less the time their bytes take at the rate pinned copies reach on the link: the
export's own large pinned copies of that direction when it has some, else a practical per-link figure by GPU (the export does not name the link; see `checks/program/_copies.py`). On an
H200 (PCIe 5.0) pair of the same loop, pageable 8.9 GB/s against pinned 55.4 GB/s, it predicts
24.6 ms of the 25.8 ms a step that pinning saved. Overlap with compute, which pinned asynchronous
copies also allow, is transfer-bound's to count.

Where every steady step uploads exactly as many pageable bytes and the copies hold half of a median step or more,
the advice first asks whether those are the same tensors each step, to move once before the loop
(`evidence.same_upload_bytes_per_step`): blind69_graph uploads its GCN's whole graph, 649 MB, at the top of every
step; pinning, which this finding prices (62.7 ms a step), saved less than moving it once (80.2 ms). A profile
cannot tell the same bytes from a new batch of the same size, so the advice asks and the saving stays pinning's.

## Options
- `min_copies`: pageable copies before the check speaks.
- `near_link_share`: pageable copies at this share of the pinned rate or above gain nothing from pinning.
"""

from dataclasses import asdict

from humanize import naturalsize

from nsanalyze.normalize.critical_path import READ_BACK_KIND, UPLOAD_KIND
from nsanalyze.normalize.model import plain
from nsanalyze.numbers import duration_text
from nsanalyze.checks.base import Check, Finding, Threshold, evidence, median_step_part, plural, step_count
from nsanalyze.checks.program._copies import PINNED_SHARE_NEAR_LINK, pageable_saving


ID = "pageable-memcpy"
BUDGET_PART = "gpu_copy"
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

# Where every pageable copy reads back (device to host): the same advice with a read back as its example (blind77_hostsnap,
# 101 reads back a step and nothing uploaded, was shown an upload, a user read)
READ_BACK_ADVICE = """Use pinned (page-locked) host buffers for anything copied to or from the GPU repeatedly.

- CUDA: `cudaMallocHost`/`cudaHostAlloc`, or `cudaHostRegister` an existing buffer.
- PyTorch: read back into pinned tensors allocated once (`torch.empty(..., pin_memory=True)`) with
  `dst.copy_(src, non_blocking=True)`, and wait on an event before the host reads them, not after every copy.
- Reuse pinned buffers: pinning is expensive, do it once.

```python
# before: each read back into a new pageable tensor, waited for
host = [t.cpu() for t in tensors]
# after: into pinned buffers allocated once, queued without a wait
host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]   # once, before the loop
for dst, src in zip(host, tensors):
    dst.copy_(src, non_blocking=True)
done = torch.cuda.Event(); done.record()                                           # done.synchronize() before use
```"""

CHECK = Check(
    id=ID,
    name="program.copies.pageable",
    title="Copies from or to pageable host memory",
    section="busy",
    requires=("copies",),
    optional=("step_copy_bytes",),   # the same uploads every step: the advice asks first whether they need to cross
    thresholds={
        "min_copies": Threshold(1, "one large pageable copy in a loop is already a stall"),
        "near_link_share": Threshold(PINNED_SHARE_NEAR_LINK, "a copy at 80% of what pinned copies reach has no staging "
                                                              "cost left worth a change"),
    },
    speedup_model=("the GPU's idle time under the calls that staged the copies, plus, per direction, the pageable "
                   "copies' time less their bytes over the rate pinned copies reach (the export's own large pinned "
                   "copies, else the GPU's link), at least ~10 us a copy, never more than the copies' own time"),
    change={"pinned": True},  # the replay change priced (program.py)
    budget_part=BUDGET_PART,
    advice=ADVICE,
)


# The host-activity class of asynchronous copy calls (host_activity.csv): from pageable memory the driver stages the
# bytes before the call returns, and the GPU may idle all along
COPY_CLASS = "copy-async"
def upload_copies(timeline) -> int:
    """The window's copies of pageable memory to the device (UPLOAD_KIND): those whose calls pinning frees."""
    pageable = timeline.copies.pageable if getattr(timeline, "copies", None) is not None else None
    return sum(d.copies or 0 for d in pageable.by_direction if d.copy_kind == UPLOAD_KIND) if pageable is not None else 0


def blocking_uploads_per_step(timeline) -> float:
    """Uploads from pageable memory a steady step makes whose calls held the host (the idle under them): PyTorch's
    blocking `.to("cuda")`, a copy and then its stream sync, each one of the step's waits."""
    steps = step_count(timeline)
    if not steps or not blocked_idle_by_part(timeline):
        return 0.0
    return upload_copies(timeline) / steps


def blocked_idle_by_part(timeline) -> dict[str, float]:
    """The GPU's idle time, by budget part, under the copy calls that staged pageable memory to the device: the
    copy-async class's idle time in the share of its calls that uploaded pageable memory. PyTorch's `.to("cuda")` of
    a dict batch's 40 small pageable columns left the GPU idle 0.6 ms a step under them (blind67_fields), which the
    copies' own time (0.2 ms) does not show; pinned and copied with `non_blocking=True`, they return at once."""
    activity = timeline.host_activity
    entry = activity.by_class(COPY_CLASS) if activity is not None else None
    uploads = upload_copies(timeline)
    if not uploads or entry is None or not entry.calls or not entry.idle_ns:
        return {}
    share = min(1.0, uploads / entry.calls)
    return {part: ns * share for part, ns in entry.idle_by_part.items() if ns > 0}


def run(timeline, limits) -> Finding | None:
    pageable = timeline.copies.pageable
    if pageable is None or pageable.copies < limits.min_copies:
        return None
    saving_ns, directions = pageable_saving(timeline)
    blocked_ns = sum(blocked_idle_by_part(timeline).values())
    for direction in directions:  # near the pinned rate already: the staging costs nothing worth a change
        if direction.gb_per_s and direction.gb_per_s >= limits.near_link_share * direction.reference_gb_per_s:
            saving_ns -= direction.saving_ns
            direction.saving_ns = 0.0
    top = directions[0] if directions else None
    # a rate under 1 GB/s with two figures (0.05 GB/s: tiny copies), not "0.0 GB/s"
    # where copies go both ways, the rate's direction with its own copies and bytes (dev_infer: "598 copies (1.2 MB)"
    # then "device-to-host at 0.01 GB/s", whose copies hold 4.8 kB of it, read as one set, a user read)
    own = (f" ({plural(top.copies, 'copy')}, {naturalsize(top.bytes)})" if top and len(directions) > 1 else "")
    rate = (f"; {top.copy_kind.lower()}{own} at {top.gb_per_s:.{'1f' if top.gb_per_s >= 1 else '2g'}} GB/s where pinned "
            f"copies reach {top.reference_gb_per_s:.0f} GB/s" if top and top.gb_per_s else "")
    steps = step_count(timeline) or 0
    step_copy_ns = median_step_part(timeline, BUDGET_PART)
    # per step only when the copies are the steps' own (not a checkpoint's between them)
    per_step = (f", {duration_text(saving_ns / steps)} less copy time in each {duration_text(timeline.steps.median_ns)} step"
                if steps and saving_ns and step_copy_ns and saving_ns / steps <= step_copy_ns else "")
    if saving_ns > 0:   # what the copies would take, not a saving: the savings column may share it
        # (where copies go both ways, after one direction's rate: all of them, not that direction's, a user read of
        # offload: "host-to-device (6,780 copies) ...: pinned, they would take 421 ms", 210 ms each way)
        they = "all of them" if len(directions) > 1 else "they"
        outcome = f": pinned, {they} would take {duration_text(pageable.duration_ns - saving_ns)}{per_step}"
    elif any(d.gb_per_s and d.gb_per_s >= limits.near_link_share * d.reference_gb_per_s for d in directions):
        outcome = ": near the pinned rate already, so pinning saves nothing"
    else:   # each copy's setup outweighs its bytes (pinned_time_ns' floor: about PINNED_COPY_FLOOR_NS a copy)
        size = f"of {naturalsize(pageable.bytes / pageable.copies)} on average " if pageable.copies else ""
        # no less: pinned_time_ns' floor may exceed what these copies took (h100_2gpu_1s: 40 µs against 3.36 µs), and
        # "about as long" read as a pinned time of the same size (a user read)
        outcome = f": pinned, they would take no less time (copies {size}cost their setup, not their bytes)"
    # the calls that staged them held the host while the GPU had nothing queued: said where that is a tenth of the
    # finding's time or more (own67_fixed1's title gave 1.12 ms a step of copy time beside a saving of 3.06)
    blocked = (f"; the GPU idles {duration_text(blocked_ns)} under their calls, which hold the host while the driver "
               "stages each copy" if blocked_ns >= 0.1 * (max(saving_ns, 0.0) + blocked_ns) > 0 else "")
    if saving_ns <= 0 and not blocked and outcome.startswith(": pinned"):   # a saving beside "no less time": whence
        outcome += "; what pinning saves is in their calls, which stage each copy on the host"
    finding = Finding(
        check=ID,
        title=f"{plural(pageable.copies, 'copy')} used pageable host memory "
              f"({naturalsize(pageable.bytes)}, {duration_text(pageable.duration_ns)}){rate}{outcome}{blocked}",
        estimated_speedup=0.0,
        evidence={"pageable_copies": evidence(pageable.copies, limits.min_copies, compare=">="),
                  "pageable_bytes": evidence(pageable.bytes, unit="byte"),
                  "pageable_copy_ns": evidence(pageable.duration_ns, unit="ns"),
                  "directions": [asdict(d) for d in directions],
                  "largest_async": plain(pageable.async_top[:5]),
                  "blocked_idle_ns": evidence(blocked_ns, unit="ns")},
        advice=READ_BACK_ADVICE if directions and all(d.copy_kind == READ_BACK_KIND for d in directions) else ADVICE,
        notes=[f"{d.copy_kind}: {d.gb_per_s} GB/s achieved; the reference is {d.reference}"
               for d in directions if d.gb_per_s],
    )
    finding.estimated_savings_ns = min(saving_ns, float(pageable.duration_ns)) + blocked_ns
    same = same_uploads_each_step(timeline, step_copy_ns)
    if same:
        finding.advice = (f"Every step uploads the same {naturalsize(same)} from pageable memory, and the copies hold "
                          f"most of the step. Where those are the same tensors each step (a graph, a table, a dataset "
                          "that fits in the GPU's memory, constants moved to the GPU inside the step), move them once, "
                          f"before the loop: that takes the copies away ({duration_text(step_copy_ns)} of a median "
                          f"step's {duration_text(timeline.steps.median_ns)}), which saves more than pinning them. "
                          "Where each step's data is new, pin it:\n\n" + finding.advice)
        finding.evidence["same_upload_bytes_per_step"] = evidence(same, unit="byte")
    return finding


# The copies hold at least this share of a median step before the advice asks whether the same bytes need crossing
# each step: a new batch rarely costs most of a step; data moved to the GPU again every step does (blind69_graph: a
# GCN's whole graph, 649 MB, uploaded at the top of each step, 64% of it)
SAME_UPLOADS_STEP_SHARE = 0.5


def same_uploads_each_step(timeline, step_copy_ns: float | None) -> float:
    """The bytes every steady step uploads from pageable memory, where all of them upload exactly as many and the
    copies hold SAME_UPLOADS_STEP_SHARE of a median step or more (normalize.timeline's step_copy_bytes); else 0."""
    steps = getattr(timeline, "steps", None)
    per_step = [v for k, v in (getattr(timeline, "step_copy_bytes", None) or {}).items()
                if k.startswith("Host-to-Device") and k.lower().endswith("pageable")]
    if not per_step or steps is None or not steps.median_ns or not step_copy_ns or \
            step_copy_ns < SAME_UPLOADS_STEP_SHARE * steps.median_ns:
        return 0.0
    uploads = per_step[0]
    return float(uploads[0]) if len(uploads) >= 3 and uploads[0] > 0 and (uploads == uploads[0]).all() else 0.0
