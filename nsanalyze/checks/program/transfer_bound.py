"""Transfer-bound: host-device copies take most of the window.

## What it detects
A window whose time budget goes for a large share to copies with no kernel beside them (`gpu_copy`):
the program moves data between host and GPU more than the GPU computes on it, or it moves it in line
with its kernels (a batch copied at the top of each step on the compute stream) where it could move
it beside them. The finding gives the bytes and the bandwidth each direction achieved, so that a slow
link (pageable staging, small copies), too much traffic and copies that wait for no kernel can be
told apart.

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
# or, where each batch must cross: the next one copied on a side stream while this one computes
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    nxt = batches[0].cuda(non_blocking=True)          # pinned host memory
for i in range(len(batches)):
    torch.cuda.current_stream().wait_stream(side); x = nxt
    x.record_stream(torch.cuda.current_stream())
    if i + 1 < len(batches):
        with torch.cuda.stream(side):
            nxt = batches[i + 1].cuda(non_blocking=True)
    y = model(x)
```

## Known problems
The export does not name the link: the reference is the export's own large pinned copies, else a
practical per-link figure by GPU (`checks/program/_copies.py`). Copies a multi-GPU program needs
(peer exchange) are counted as copies too. What fewer bytes would save (keeping data on the GPU,
narrower types) depends on the program and is not promised.

## How much it saves
Counted after `pageable-memcpy` (which claims what pinning wins, the same copy time) and
`sync-memcpy` (which claims the synchronous copies' own time, what making them asynchronous overlaps),
of the copy time they leave: pinned copies below the link's rate (many small copies) win the gap to it; and
copies that could run on a side stream while kernels run hide behind at most the window's compute
time. A program whose copies already run at the link's rate and that computes little saves almost
nothing this way: only fewer bytes help, and the title says so. On the H200 pinned twin (55.4 GB/s,
compute 0.3%), it promises what the compute time could hide, not the 46 ms (half the copy time) it
once did.

## Options
- `min_copy_share`: the window's share spent on copies before the check speaks.
- `near_link_share`: pinned copies at this share of the reference rate run at the link's rate.
"""

from dataclasses import asdict, dataclass

from humanize import naturalsize

from nsanalyze.numbers import duration_text
from nsanalyze.checks import runs
from nsanalyze.checks.base import Check, Finding, Threshold, budget_part, evidence, per_step_phrase, plural, \
    step_count
from nsanalyze.checks.program._copies import (PINNED_SHARE_NEAR_LINK, link_of, pageable_saving, pinned_time_ns,
                                              reference_rate)
from nsanalyze.normalize.critical_path import READ_BACK_KIND

ID = "transfer-bound"
BUDGET_PART = "gpu_copy"
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

# Where every copy reads back (device to host): the same advice with a read back as its example, copied less often
# (blind77_hostsnap: a snapshot read back each step, nothing uploaded, was shown an upload, a user read)
READ_BACK_ADVICE = ADVICE.split("```python")[0] + """```python
# before: read back every step, into new pageable tensors, waited for
host = {k: v.cpu() for k, v in model.state_dict().items()}
# after: every N steps, into pinned buffers allocated once, without a wait
if step % 100 == 0:
    for k, v in model.state_dict().items():
        host[k].copy_(v, non_blocking=True)        # host[k]: torch.empty(..., pin_memory=True), made once
```"""

# Where every byte already comes from pinned memory, the example shows what is left: the copy issued on a side stream
# ahead of its use (blind57_landcover copies pinned batches with non_blocking=True on the compute stream, which
# ADVICE's example calls the fix; its twin prefetches on a side stream)
PINNED_ADVICE = """Copy the next batch on a side stream while this one computes: the bytes already come from pinned
memory, but on the kernels' stream, just before their use, so the GPU waits for each copy.

- A copy stream (`torch.cuda.Stream()`, `cudaStreamCreate`) issues the next step's copies ahead; the compute stream
  waits for them only where it uses them (`wait_stream`, `cudaStreamWaitEvent`).
- Keep the host buffers pinned and the copies asynchronous (`non_blocking=True`, `cudaMemcpyAsync`).
- Keep data on the GPU across steps where it fits, and narrow it before it crosses the link (bf16, int8).

```python
# before: pinned, but copied on the compute stream right before its use
for batch in pinned_batches:
    loss = step(batch.cuda(non_blocking=True))
# after: the next batch copied on a side stream while this one computes
copies = torch.cuda.Stream()
def fetch(batch):
    with torch.cuda.stream(copies):
        return batch.cuda(non_blocking=True)
nxt = fetch(pinned_batches[0])
for i in range(len(pinned_batches)):
    torch.cuda.current_stream().wait_stream(copies)       # this batch's copy has landed
    x, nxt = nxt, (fetch(pinned_batches[i + 1]) if i + 1 < len(pinned_batches) else None)
    x.record_stream(torch.cuda.current_stream())           # used on the compute stream
    loss = step(x)
```"""

CHECK = Check(
    id=ID,
    name="program.copies.transfer_bound",
    title="Transfer-bound: copies take most of the window",
    section="busy",
    requires=("copies", "budget"),
    thresholds={
        "min_copy_share": Threshold(0.30, "copies with no kernel beside them for 30% of the window outweigh "
                                          "everything but compute (blind57's land-cover loop: 38%, its batch "
                                          "copied in line with the kernels; the other real loops' at most 11%)"),
        "near_link_share": Threshold(PINNED_SHARE_NEAR_LINK, "copies at 80% of what pinned copies reach on the link "
                                                              "run at its rate: no rate left to win"),
    },
    speedup_model=("of the exposed copy time (gpu_copy) pageable-memcpy leaves: pinned copies' time over their bytes at "
                   "the reference rate (when below near_link_share of it), plus what is left, up to the window's "
                   "compute time (copies on a side stream overlap kernels)"),
    budget_part=BUDGET_PART,
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)


@dataclass
class CopyDirection:
    """The window's copies of one direction: count, bytes, time, the pageable part, the reference rate."""
    copy_kind: str
    copies: int = 0
    bytes: int = 0
    duration_ns: float = 0
    pageable_bytes: int = 0
    gb_per_s: float | None = None
    pageable_ns: float = 0
    pageable_copies: int = 0
    reference_gb_per_s: float | None = None
    reference: str | None = None


def _directions(by_kind) -> list[CopyDirection]:
    """Per copy direction: copies, bytes, time and the achieved bandwidth (bytes over copy time)."""
    out: dict[str, CopyDirection] = {}
    for row in by_kind:
        entry = out.setdefault(row.copy_kind, CopyDirection(row.copy_kind))
        entry.copies += int(row.copies or 0)
        entry.bytes += int(row.bytes or 0)
        entry.duration_ns += int(row.duration_ns or 0)
        if "Pageable" in (row.src_kind, row.dst_kind):
            entry.pageable_bytes += int(row.bytes or 0)
    for entry in out.values():
        entry.gb_per_s = round(entry.bytes / entry.duration_ns, 2) if entry.duration_ns else None
    return sorted(out.values(), key=lambda e: -e.duration_ns)


def _rate_gap(timeline, directions: list[CopyDirection], near: float) -> tuple[float, list[CopyDirection]]:
    """What the non-pageable copies lose to the link: their time less their bytes at the reference rate,
    for directions below `near` of it (many small copies, a shared link); with the reference each used."""
    gap = 0.0
    for direction in directions:
        rate, source = reference_rate(timeline, direction.copy_kind)
        direction.reference_gb_per_s, direction.reference = round(rate, 2), source
        pinned_bytes = direction.bytes - direction.pageable_bytes
        pinned_ns = direction.duration_ns - direction.pageable_ns
        if pinned_ns <= 0 or pinned_bytes <= 0 or pinned_bytes / pinned_ns >= near * rate:
            continue
        gap += max(0.0, pinned_ns - pinned_time_ns(direction.copies - direction.pageable_copies, pinned_bytes, rate))
    return gap, directions


def run(timeline, limits) -> Finding | None:
    copy_ns, copy_share = budget_part(timeline, BUDGET_PART)
    compute_ns, compute_share = budget_part(timeline, "gpu_compute")
    if copy_share < limits.min_copy_share:
        return None
    directions = _directions(timeline.copies.by_kind)
    if not directions:
        return None
    pageable_copies = timeline.copies.pageable
    by_kind = {d.copy_kind: d for d in (pageable_copies.by_direction if pageable_copies is not None else ())}
    for direction in directions:
        own = by_kind.get(direction.copy_kind)
        direction.pageable_ns, direction.pageable_copies = (own.duration_ns, own.copies) if own else (0, 0)
    top = directions[0]
    # every direction that holds a fifth of the copy time or more: copies both ways are named both ways
    shown = [d for d in directions if d is top or d.duration_ns >= 0.2 * sum(x.duration_ns for x in directions)][:2]
    # the window's copies of every GPU are summed; each copy's rate is one GPU's link: say both, or the bytes
    # over one rate read as a time longer than the window
    copying = sum(1 for device in timeline.devices or () if device.memcpy_ns)
    on_gpus = f" over {copying} GPUs" if copying > 1 else ""
    moved = " and ".join(f"{plural(d.copies, 'copy')} {d.copy_kind.lower()} moved {naturalsize(d.bytes)}{on_gpus}"
                         + (f" at {d.gb_per_s:.1f} GB/s{' a GPU' if on_gpus else ''}" if d.gb_per_s else "")
                         for d in shown)
    pageable = sum(d.pageable_bytes for d in directions)
    total = sum(d.bytes for d in directions)
    # pinning is pageable-memcpy's saving, and making the synchronous copies asynchronous sync-memcpy's
    # (their own time): this finding counts what the copy time has left after both (1 - prod(1 - s_i))
    pinning_ns, _ = pageable_saving(timeline) if pageable and runs("pageable-memcpy") else (0.0, [])
    pinning_ns = min(pinning_ns, copy_ns)
    sync_ns = min(float(timeline.copies.sync.duration_ns if timeline.copies.sync and runs("sync-memcpy") else 0), copy_ns)
    claimed_ns = copy_ns * (1 - (1 - pinning_ns / copy_ns) * (1 - sync_ns / copy_ns)) if copy_ns else 0.0
    left_ns = max(0.0, copy_ns - claimed_ns)
    earlier = [c for c, ns in (("pageable-memcpy", pinning_ns), ("sync-memcpy", sync_ns)) if ns]
    gap_ns, directions = _rate_gap(timeline, directions, limits.near_link_share)
    gap_ns = min(gap_ns, left_ns)
    overlap_ns = min(left_ns - gap_ns, compute_ns)
    at_link = not gap_ns and not pinning_ns
    if pinning_ns:
        outlook = (f"; the bytes come from pageable memory: pinning them comes first (pageable-memcpy), after it "
                   f"overlap with compute ({duration_text(compute_ns)} in the window) or fewer bytes save time")
    elif at_link and not link_of(timeline)[2]:
        # the reference is the export's own copies: a rate measured against itself says nothing of the link
        outlook = (f"; the export names no link, and these copies are its only measure of one, so whether the link "
                   f"allows more is not known; fewer bytes, or overlap with the {duration_text(compute_ns)} of "
                   "compute, save time")
    elif at_link and overlap_ns >= 0.5 * left_ns:
        steps = step_count(timeline) or 0
        compute = f"{duration_text(compute_ns / steps)} of compute a step" if steps else \
            f"{duration_text(compute_ns)} of compute"
        outlook = (f", near the {top.reference_gb_per_s:.0f} GB/s pinned copies reach: issued on a side stream "
                   f"ahead of their use, they would run under the kernels ({compute})")
    elif at_link:
        outlook = (f", near the {top.reference_gb_per_s:.0f} GB/s pinned copies reach: the link is the limit; "
                   f"only fewer bytes, or overlap with the {duration_text(compute_ns)} of compute, save time")
    else:
        outlook = (f", below the {top.reference_gb_per_s:.0f} GB/s pinned copies reach: larger, fewer copies "
                   "and overlap with compute save time")
    finding = Finding(
        check=ID,
        title=(f"Transfer-bound: copies take {copy_share:.0%} of the window" if copy_share > compute_share else
               f"Copies hold the GPU with no kernel beside them {copy_share:.0%} of the window")
              + f"{per_step_phrase(timeline, BUDGET_PART, window_share=copy_share)}, the GPU computes {compute_share:.0%}; {moved}{outlook}",
        estimated_speedup=0.0,
        evidence={"copy_share": evidence(copy_share, limits.min_copy_share, unit="ratio"),
                  "compute_share": evidence(compute_share, unit="ratio"),
                  "copy_ns": evidence(copy_ns, unit="ns"),
                  "copy_bytes": evidence(total, unit="byte"),
                  "pageable_share_of_bytes": evidence(pageable / total if total else None, unit="ratio"),
                  "pinning_saves_ns": evidence(pinning_ns, unit="ns"),
                  "rate_gap_ns": evidence(gap_ns, unit="ns"),
                  "overlap_ns": evidence(overlap_ns, unit="ns"),
                  "directions": [asdict(d) for d in directions]},
        advice=(PINNED_ADVICE if total and not pageable and overlap_ns else
                READ_BACK_ADVICE if all(d.copy_kind == READ_BACK_KIND for d in directions) else ADVICE),
        notes=[f"achieved bandwidth is bytes over copy time; the reference is {top.reference}",
               "what fewer bytes would save (data kept on the GPU, narrower types) is not estimated: the copies' "
               f"{duration_text(copy_ns)}, {copy_share:.0%} of the window, are the time at stake"]
              + ([f"counted after {' and '.join(earlier)}: of the {duration_text(left_ns)} of copy time they leave"]
                 if earlier else []),
    )
    finding.after_others = bool(earlier)
    finding.estimated_savings_ns = min(left_ns, gap_ns + overlap_ns)
    return finding
