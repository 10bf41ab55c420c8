"""One GPU holds the others back.

## What it detects
In a multi-GPU profile, the straggler: the GPU that waits least in its collectives because it reaches
them last, while the others wait there for it. The finding names it, whether it is slow on the host
(its GPU idles on its host's code, launches or syncs longer than the others') or on the GPU (it
computes longer), from its own time budget, and the others' waiting is its saving. Without per-GPU
budgets, a device whose compute time (kernels other than communication) exceeds the others'.

## Why it is slow
Synchronous data- or tensor-parallel steps run at the pace of the slowest rank; every other GPU
idles for the difference.

## Example
```python
sampler = DistributedSampler(ds)    # sequences of very different lengths per rank
```

## Instead
```python
# balance work per rank: bucket by length, or pack sequences to equal token counts
```

## Known problems
Per step imbalance (NVTX `step N` ranges) is not separated yet: the check compares the window's
waiting per device, which hides imbalance that alternates between ranks. The saving is the waiting
measured; a waiting GPU's compute kernels that run beside a spinning collective may also shrink once
it no longer waits, which is not counted.

## Options
- `min_imbalance_share`: the others' waiting in collectives over the window (with per-GPU budgets),
  else the slowest device's extra compute over its own compute time.
"""

from dataclasses import asdict, dataclass

from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.normalize.model import part_ns, plain
from nsanalyze.checks.program.host_compute import _blocked


ID = "rank-imbalance"
BUDGET_PART = "gpu_communication"
ADVICE = """Give every GPU the same amount of work.

- Balance the data per rank (length bucketing, sequence packing, equal token counts).
- Check that every rank runs the same kernels: a rank doing extra logging, evaluation or
  checkpointing on the GPU holds the others back.
- Slow on the host: the straggler's own host code (data loading or decoding on that rank, logging,
  a checkpoint write, a sleep) runs while the others wait; move it to loader workers or off the step
  (host-compute's stretches on that GPU show where).
- Look for a slower GPU (clock throttling, a PCIe link at lower width) with `nvidia-smi -q`.

```python
# before: ranks get batches of very different cost
loader = DataLoader(ds, sampler=DistributedSampler(ds))
# after: batches of equal token count per rank
loader = DataLoader(ds, batch_sampler=TokenBudgetSampler(ds, tokens_per_batch=65536, rank=rank))
```"""

CHECK = Check(
    id=ID,
    name="program.communication.imbalance",
    title="One GPU holds the others back",
    section="busy",
    requires=("devices",),
    thresholds={"min_imbalance_share": Threshold(0.05, "a few percent of jitter between GPUs is normal")},
    speedup_model=("with per-GPU budgets: the other GPUs' exposed communication beyond the straggler's (they wait in "
                   "their collectives for it), the least of them (once the straggler catches up the next-slowest GPU "
                   "arrives last): wall-clock time that overlapping communication cannot hide, so exposed-communication "
                   "leaves it to this check; host findings on the straggler's own host time count after it. Where the "
                   "straggler runs the same kernels longer (under half its extra in kernels only it runs), balancing: "
                   "the mean of all GPUs' waits (the straggler's is 0). Without per-GPU budgets, the slow device's "
                   "extra compute time over the mean of the others, or over the mean of all when balancing"),
    change=None,  # the replay change priced (program.py)
    budget_part=BUDGET_PART,
    advice=ADVICE,
)


HOST_PARTS = ("idle_host", "idle_launch", "idle_sync")
HOST_PART_WORDS = {"idle_host": "waiting on host code", "idle_launch": "waiting on kernel launches",
                   "idle_sync": "waiting on synchronizations"}


def _parts(device) -> dict:
    return {p.part: p.ns for p in device.budget}


def _exposed(device) -> float:
    """A GPU's communication with nothing beside it: its budget's part, else the device figure."""
    if device.budget:
        return float(part_ns(device.budget, "gpu_communication"))
    return float(device.exposed_communication_ns or 0.0)


def label(device) -> str:
    """`GPU 1`, or `rank 1 (GPU 1:1)` for merged per-rank exports."""
    if isinstance(device.device_id, str) and device.rank is not None:
        return f"rank {device.rank} (GPU {device.device_id})"
    return f"GPU {device.device_id}"


@dataclass(frozen=True)
class DeviceTime:
    """One GPU's figures beside the straggler's (the finding's per-device table)."""
    device_id: object
    compute_ns: float
    host_ns: float
    communication_ns: float
    exposed_communication_ns: float
    waiting_ns: float


@dataclass(frozen=True)
class Straggler:
    """The GPUs that meet in collectives, and the one the others wait for."""
    straggler: object          # the Device that waits least in its collectives
    others: list
    transfer_ns: float         # what the straggler itself spends in bare collectives: the transfers
    waits: dict                # device id -> time it waits for the straggler
    wait_ns: float             # the least any other GPU waits: the saving
    least_waiting: object
    worst: object              # the GPU with the most exposed communication


def straggler(devices) -> Straggler | None:
    """GPUs that meet in collectives: the straggler is the one that waits least in them (it reaches them last);
    each other GPU's exposed communication beyond the straggler's is waiting for it, the rest (what the
    straggler itself spends in bare collectives) is the transfers. Overlap with compute can hide the transfers,
    never the waiting; only the straggler catching up removes it, and then only until the next-slowest GPU
    is the last to arrive: the saving is the least any other GPU waits. None with fewer than two
    communicating GPUs."""
    talking = [d for d in devices if d.communication_ns]
    if len(talking) < 2:
        return None
    slow = min(talking, key=_exposed)
    others = [d for d in talking if d is not slow]
    transfer = _exposed(slow)
    waits = {d.device_id: max(0.0, _exposed(d) - transfer) for d in others}
    first = min(others, key=lambda d: waits[d.device_id])
    return Straggler(slow, others, transfer, waits, waits[first.device_id], first, max(talking, key=_exposed))


def slow_side(found: Straggler) -> tuple[float, float, str]:
    """(the straggler's host-idle time beyond the others' mean, its compute beyond theirs, where it is slow: "on the
    host" where the former is the larger, else "on the GPU"), from the GPUs' budgets."""
    parts = {d.device_id: _parts(d) for d in (found.straggler, *found.others)}
    mine = parts[found.straggler.device_id]

    def mean_others(keys):
        return sum(sum(parts[d.device_id].get(k, 0.0) for k in keys) for d in found.others) / len(found.others)
    extra_host = sum(mine.get(k, 0.0) for k in HOST_PARTS) - mean_others(HOST_PARTS)
    extra_compute = part_ns(found.straggler.budget, "gpu_compute") - mean_others(("gpu_compute",))
    return extra_host, extra_compute, "on the host" if extra_host > extra_compute else "on the GPU"


# The straggler's extra GPU time is its own work (rank-specific: evaluation, logging, extra products) when at
# least this share of it lies in kernels no other GPU runs; otherwise the same kernels take longer on it
# (more data, longer sequences) and the fix is balancing.
OWN_WORK_SHARE = 0.5


def own_kernel_share(timeline, slow, others) -> float | None:
    """Of the straggler's kernel time beyond the others' mean, name by name, the share in kernels no other GPU
    runs. None without a per-device kernel breakdown."""
    mine: dict[str, float] = {}
    theirs: dict[str, float] = {}
    ids = {d.device_id for d in others}
    for row in timeline.device_kernels:
        if row.device_id == slow.device_id:
            mine[row.name] = mine.get(row.name, 0.0) + row.duration_ns
        elif row.device_id in ids:
            theirs[row.name] = theirs.get(row.name, 0.0) + row.duration_ns / len(ids)
    excess = {name: ns - theirs.get(name, 0.0) for name, ns in mine.items()}
    total = sum(e for e in excess.values() if e > 0)
    if not total:
        return None
    return sum(e for name, e in excess.items() if e > 0 and name not in theirs) / total


def _from_budgets(timeline, devices, limits) -> Finding | None:
    """The straggler is the GPU that waits least in its collectives; the others wait for it there. Whether it is
    slow on the host or on the GPU: which of its host-idle and compute time exceeds the others'; the cause is
    named from its own budget."""
    found = straggler(devices)
    if found is None:
        return None
    slow, others, wait = found.straggler, found.others, found.wait_ns
    window = sum(d.window_ns for d in devices) / len(devices)
    share = wait / window if window else 0.0
    if share < limits.min_imbalance_share:
        return None
    parts = {d.device_id: _parts(d) for d in devices}
    mine = parts[slow.device_id]

    def mean_others(keys):
        return sum(sum(parts[d.device_id][k] for k in keys) for d in others) / len(others)
    extra_host, extra_compute, side = slow_side(found)
    if side == "on the host":
        top = max(HOST_PARTS, key=lambda k: mine[k] - mean_others((k,)))
        cause = (f"its GPU spends {mine[top] / 1e6:.1f} ms {HOST_PART_WORDS[top]} ({top}) against "
                 f"{mean_others((top,)) / 1e6:.1f} ms on the others; {extra_host / 1e6:.1f} ms more host time in all")
        blocked = _blocked([s for s in timeline.host_stretches if s.device_id == slow.device_id][:5])
        if top == "idle_host" and blocked and blocked[0] >= 0.5 and blocked[1]:
            cause += (f"; its launching thread sits in {blocked[1][0].name} ({blocked[1][0].kind}) "
                      f"{blocked[0]:.0%} of its longest host stretches")
    else:
        top = "gpu_compute"
        cause = (f"its GPU computes {part_ns(slow.budget, 'gpu_compute') / 1e6:.1f} ms against {mean_others(('gpu_compute',)) / 1e6:.1f} "
                 f"ms on the others ({extra_compute / 1e6:.1f} ms more)")
    table = [DeviceTime(d.device_id, part_ns(d.budget, "gpu_compute"), sum(part_ns(d.budget, k) for k in HOST_PARTS),
                        d.communication_ns, part_ns(d.budget, "gpu_communication"), found.waits.get(d.device_id, 0.0))
             for d in devices]
    stretches = [s for s in timeline.host_stretches if s.device_id == slow.device_id][:3]
    finding = Finding(
        check=ID,
        title=f"{label(slow)} is the straggler, slow {side}: the other GPUs wait for it in their collectives "
              f"{wait / 1e6:.1f} ms ({share:.0%} of the window), time no overlap can hide; {cause}",
        estimated_speedup=0.0,
        evidence={"wait_share": evidence(share, limits.min_imbalance_share, unit="ratio"),
                  "others_wait_ns": evidence(wait, unit="ns"),
                  "straggler_side": side.removeprefix("on the "),
                  "straggler_part": top,
                  "extra_host_ns": evidence(extra_host, unit="ns"),
                  "extra_compute_ns": evidence(extra_compute, unit="ns"),
                  "transfer_ns": evidence(found.transfer_ns, unit="ns"),
                  "per_device": [asdict(row) for row in table],
                  **({"straggler_host_stretches": plain(tuple(stretches))} if side == "on the host" and stretches
                     else {})},
        advice=ADVICE,
        device_id=slow.device_id,
    )
    # balanced, every GPU runs the mean of their times: each saves its wait less the mean wait (the straggler's
    # is 0); where the straggler's extra is work of its own, dropping or moving that work off the step can give
    # back up to the least any other GPU waits (then the next-slowest GPU arrives last)
    balanced = sum(found.waits.values()) / (len(others) + 1)
    own = own_kernel_share(timeline, slow, others) if side == "on the GPU" else None
    removal = side == "on the host" or (own is not None and own >= OWN_WORK_SHARE)
    if own is not None:
        finding.evidence["extra_in_own_kernels_share"] = evidence(own, OWN_WORK_SHARE, unit="ratio")
    finding.evidence["balanced_savings_ns"] = evidence(balanced, unit="ns")
    if removal:
        what = (f"its host's extra {HOST_PART_WORDS[top]}" if side == "on the host" else
                f"{own:.0%} of its extra kernel time in kernels no other GPU runs")
        spread = (f"; work that must stay, spread evenly over the GPUs, saves {balanced / 1e6:.1f} ms"
                  if top in ("idle_host", "gpu_compute") else "")
        finding.notes.append(f"the saving is the least any other GPU waits for {label(slow)} in its collectives, what "
                             f"it gives back once {label(slow)} catches up ({what}; the next-slowest GPU then arrives "
                             f"last){spread}")
        finding.estimated_savings_ns = float(wait)
    else:
        share_text = f" ({own:.0%} of its extra kernel time in kernels no other GPU runs)" if own is not None else ""
        finding.notes.append(f"the saving is what balancing gives: {label(slow)} runs the same kernels longer{share_text}, "
                             f"so evened out every GPU runs the mean of their times, {balanced / 1e6:.1f} ms sooner "
                             "than the straggler (removing the extra altogether would give the least wait, "
                             f"{wait / 1e6:.1f} ms)")
        finding.estimated_savings_ns = float(balanced)
    finding.budget_device = found.least_waiting.device_id
    return finding


def run(timeline, limits) -> Finding | None:
    devices = timeline.devices
    if len(devices) < 2:
        return None
    if all(d.budget for d in devices) and any(d.communication_ns for d in devices):
        return _from_budgets(timeline, devices, limits)
    slow = max(devices, key=lambda d: d.compute_kernel_ns)
    others = [d for d in devices if d is not slow]
    mean_others = sum(d.compute_kernel_ns for d in others) / len(others)
    extra = slow.compute_kernel_ns - mean_others
    share = extra / slow.compute_kernel_ns if slow.compute_kernel_ns else 0.0
    if share < limits.min_imbalance_share:
        return None
    on_slow: dict[str, float] = {}
    on_others: dict[str, float] = {}
    for row in timeline.device_kernels:
        side = on_slow if row.device_id == slow.device_id else on_others
        on_slow.setdefault(row.name, 0)
        on_others.setdefault(row.name, 0)
        side[row.name] += row.duration_ns
    where = sorted(((name, on_slow[name] - on_others[name] / len(others)) for name in on_slow),
                   key=lambda item: -item[1])[:3]
    finding = Finding(
        check=ID,
        title=f"GPU {slow.device_id} computes {extra / 1e6:.1f} ms ({share:.0%}) longer than the others; "
              f"most of it in {where[0][0] if where else 'its kernels'}",
        estimated_speedup=0.0,
        evidence={"imbalance_share": evidence(share, limits.min_imbalance_share, unit="ratio"),
                  "extra_compute_ns": evidence(extra, unit="ns"),
                  "compute_ns_per_device": {str(d.device_id): d.compute_kernel_ns for d in devices},
                  "extra_by_kernel": [{"name": n, "extra_ns": e} for n, e in where if e > 0]},
        advice=ADVICE,
        device_id=slow.device_id,
    )
    own = own_kernel_share(timeline, slow, others)
    if own is not None and own < OWN_WORK_SHARE:   # the same kernels longer: evened out, all run the mean
        finding.notes.append(f"the saving is what balancing gives: GPU {slow.device_id} runs the same kernels longer, "
                             "so evened out every GPU computes the mean of their times")
        extra *= len(others) / len(devices)
    finding.estimated_savings_ns = float(extra)
    return finding
