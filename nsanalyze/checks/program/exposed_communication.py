"""Communication the step waits for: NCCL time not hidden behind compute.

## What it detects
Per GPU, the time NCCL kernels (and peer-to-peer copies) run with no compute kernel running on
that GPU at the same time: communication that is exposed instead of overlapped.

## Why it is slow
While a collective runs alone, the GPU's SMs wait. Data-parallel training can hide most gradient
all-reduces behind the backward pass; exposed communication adds to every step.

## Example
```python
loss.backward()                     # all-reduce issued only after the whole backward
dist.all_reduce(grad)
```

## Instead
```python
model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)   # buckets overlap backward
```

## Known problems
With several GPUs, a collective's exposed time is the transfer plus the wait for the last GPU to
arrive; the transfer is read off the GPU that waits least. Overlap is judged per GPU from kernel
intervals: a compute kernel that runs beside a collective but is slowed by it counts as overlap.
Send/receive pairs of pipeline parallelism are exposed by design when a stage waits for its neighbour.
One GPU alone in the export, whose collectives run mostly beyond their fast launches, waits for a rank the
export does not hold: the finding leads with that wait and the report's header states it (time at stake, not
a saving: what makes the other rank late is in its own export, so the finding is info); profile all ranks and
report them together (`--as-ranks`) to find and price the straggler (rank-imbalance).

## Options
- `min_exposed_share`: exposed communication over the device's span before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.checks import limits_for
from nsanalyze.checks.program import rank_imbalance
from nsanalyze.checks.program.rank_imbalance import _exposed, label, slow_side, straggler

ID = "exposed-communication"
BUDGET_PART = "gpu_communication"
ADVICE = """Overlap communication with compute.

- PyTorch DDP: tune `bucket_cap_mb` so that all-reduces start during backward; keep
  `gradient_as_bucket_view=True`; avoid `find_unused_parameters` when it is not needed.
- FSDP: `forward_prefetch=True`, `backward_prefetch=BackwardPrefetch.BACKWARD_PRE`.
- Run communication on its own high-priority stream (`torch.cuda.Stream(priority=-1)`) so that
  it is scheduled as soon as its inputs are ready.
- Fewer, larger messages: bucket small tensors together.

```python
# before: one all-reduce after backward
loss.backward(); [dist.all_reduce(p.grad) for p in model.parameters()]
# after: bucketed all-reduces overlapping backward
model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True); loss.backward()
```"""

# Where most of the communication is NCCL's send and receive (devices.POINT_TO_POINT: pipeline stages, all-to-all), the
# collectives' DDP and FSDP advice does not apply (nsys-ai's mfu_2gpu_after: ncclDevKernel_SendRecv only, a user read)
P2P_SHARE = 0.5
P2P_ADVICE = """Overlap the point-to-point transfers with compute.

- Between pipeline stages: post the sends and receives asynchronously (`dist.isend`/`dist.irecv`,
  `dist.batch_isend_irecv`) and compute another micro-batch while they run; wait on a request only where its
  data is used.
- More micro-batches a step (an interleaved 1F1B schedule) keep each stage computing while its neighbours'
  transfers run.
- Run the transfers on a stream of their own, so that they can run beside the compute kernels.
- Fewer, larger messages: one buffer, not many tensors.

```python
# before: blocking send and receive between stages
dist.send(out, dst=next_rank); dist.recv(inp, src=prev_rank)
# after: posted together, waited on where the data is used
reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, next_rank), dist.P2POp(dist.irecv, inp, prev_rank)])
other = stage(next_microbatch)          # computes while they run
for req in reqs: req.wait()
```"""
SHARED_STREAM_LEAD = ("{gpu}'s communication kernels run on the stream of its compute kernels: a stream runs its kernels "
                      "one after another, so none of that communication can hide behind compute, whatever the schedule. "
                      "Give it a stream of its own first, with events ordering it after the kernels that make its "
                      "data and before those that use it.\n\n")


def _advice(worst) -> str:
    """ADVICE, or P2P_ADVICE where send and receive hold most of the communication; led by SHARED_STREAM_LEAD where
    every communication kernel shares a stream with the compute."""
    p2p = worst.communication_ns and worst.point_to_point_ns >= P2P_SHARE * worst.communication_ns
    lead = SHARED_STREAM_LEAD.format(gpu=label(worst)) if worst.communication_on_compute_streams else ""
    return lead + (P2P_ADVICE if p2p else ADVICE)


CHECK = Check(
    id=ID,
    name="program.communication.exposed",
    title="Communication not hidden behind compute",
    section="busy",
    requires=("devices",),
    thresholds={"min_exposed_share": Threshold(0.03, "a few percent of a step in bare collectives is worth overlapping")},
    speedup_model=("the transfers, at most: the exposed communication of the GPU that waits least in its collectives "
                   "(the straggler's; its own waits where another GPU arrives later are not told apart); what the "
                   "others spend beyond it is waiting for the straggler, which overlap cannot hide (rank-imbalance's "
                   "saving)"),
    budget_part=BUDGET_PART,
    change={"speedup": ("communication",)},  # the replay change priced (program.py)
    advice=ADVICE,
)


# One GPU whose collectives spend this share of their time beyond their fast launches waits for other ranks.
ONE_RANK_WAIT_SHARE = 0.5


def _where_late(found) -> str:
    """Where the straggler is slow, as rank-imbalance tells it (rank_imbalance.slow_side), and what removes the wait: a
    GPU as busy as the others but idle longer is held by its host, where balancing work says nothing
    (mfu_2gpu_before's GPU 1: 6.7 ms more idle, 2.4 ms more compute, a user read)."""
    if not found.straggler.budget:
        return ": balancing the GPUs removes that"
    extra_host, extra_compute, side = slow_side(found)
    if side == "on the GPU":
        return (f", slow on the GPU (its compute {extra_compute / 1e6:.1f} ms longer): balancing the GPUs' work "
                "removes that")
    compute = "no longer" if extra_compute <= 0 else f"{extra_compute / 1e6:.1f} ms longer"
    return (f", slow on the host (its GPU idles {extra_host / 1e6:.1f} ms more than the others', its compute "
            f"{compute}): what holds its host removes that")


def run(timeline, limits) -> Finding | None:
    devices = [d for d in timeline.devices if d.communication_ns]
    if not devices:
        return None
    found = straggler(devices)
    worst = found.worst if found else max(devices, key=_exposed)
    exposed = _exposed(worst)
    window = worst.window_ns or worst.span_ns
    share = exposed / window if window else 0.0
    if share < limits.min_exposed_share:
        return None
    hidden = 1 - worst.exposed_communication_ns / worst.communication_ns
    # Collectives end together: what a GPU spends in them beyond the straggler's own bare collectives is waiting
    # for it. Overlap hides transfers, never waiting: that is rank-imbalance's, this finding keeps the transfers.
    transfer = found.transfer_ns if found else exposed
    waiting_ns = max(0.0, exposed - transfer)
    waiting = waiting_ns / exposed if exposed else 0.0
    title = (f"{label(worst)}: {exposed / 1e6:.1f} ms of communication ({share:.0%} of its time) runs with no compute "
             f"beside it, {hidden:.0%} hidden")
    if found and waiting > 0.5:
        title += (f"; {waiting_ns / 1e6:.1f} ms of it ({waiting:.0%}) waits for {label(found.straggler)}, a "
                  f"straggler that reaches the collectives later{_where_late(found)}, overlap cannot; "
                  f"the transfers themselves, at most {transfer / 1e6:.1f} ms, could hide behind compute")
    elif found and waiting_ns > 0:
        title += (f": collectives not overlapped with compute, {transfer / 1e6:.1f} ms of transfers; "
                  f"{waiting_ns / 1e6:.1f} ms more is waiting for {label(found.straggler)}")
    elif len(devices) == 1 and worst.communication_wait_ns >= ONE_RANK_WAIT_SHARE * worst.communication_ns:
        # one GPU alone in the export: its collectives' time beyond their fast launches is waiting for ranks
        # this export does not hold; that is no overlap's to hide
        waiting_ns = min(float(worst.communication_wait_ns), exposed)
        waiting = waiting_ns / exposed if exposed else 0.0
        transfer = exposed - waiting_ns
        title = (f"{label(worst)} waits {waiting_ns / 1e6:.1f} ms ({waiting_ns / window:.0%} of its time) in collectives "
                 "for another rank, which this export does not hold: profile all ranks and report them together "
                 "(--as-ranks) to find the straggler; its communication runs "
                 f"{exposed / 1e6:.1f} ms with no compute beside it, {hidden:.0%} hidden"
                 + (f"; the transfers themselves, {transfer / 1e6:.1f} ms, could hide behind compute"
                    if transfer >= 0.01 * exposed else ", and nothing of it is left for overlap to hide"))
    else:
        title += ": collectives not overlapped with compute"
    finding = Finding(
        check=ID,
        title=title,
        estimated_speedup=0.0,
        evidence={"exposed_share": evidence(share, limits.min_exposed_share, unit="ratio"),
                  "waiting_for_straggler_share": evidence(waiting, unit="ratio"),
                  "waiting_for_straggler_ns": evidence(waiting_ns, unit="ns"),
                  "transfer_ns": evidence(transfer, unit="ns"),
                  "exposed_communication_ns": evidence(worst.exposed_communication_ns, unit="ns"),
                  "communication_ns": evidence(worst.communication_ns, unit="ns"),
                  "per_device": [{"device_id": d.device_id, "communication_ns": d.communication_ns,
                                  "exposed_communication_ns": d.exposed_communication_ns,
                                  "communication_kernels": d.communication_kernels} for d in timeline.devices]},
        advice=_advice(worst),
        device_id=worst.device_id,
    )
    if not found and waiting_ns > 0:
        finding.notes.append(f"saves the transfers only, {transfer / 1e6:.2f} ms; the other {waiting_ns / 1e6:.2f} ms is "
                             "waiting for another rank: the time at stake, not a saving this export measures (what "
                             "makes the other rank late is in its own export); balancing the ranks gives it back "
                             "(rank-imbalance, given every rank's export: nsys profile in each rank's process, then "
                             "nsanalyze report with all of them, --as-ranks)")
    if found and waiting_ns > 0:
        finding.notes.append(f"saves the transfers only, at most {transfer / 1e6:.2f} ms (the exposed communication of "
                             f"{label(found.straggler)}, the GPU that waits least in the collectives: where the others "
                             "reach one after it, it waits too, which its own time does not tell apart from its "
                             f"transfers); the other {waiting_ns / 1e6:.2f} ms "
                             "is waiting for the straggler: the straggler catching up gives it back, not faster "
                             "transfers (rank-imbalance, which prices that, speaks from "
                             f"{limits_for(rank_imbalance).min_imbalance_share:.0%} of the window"
                             # (the wait's own share beside it: a user read looked for a rank-imbalance finding that
                             # a 3% wait does not make, mfu_2gpu_before)
                             + (f"; this wait is {waiting_ns / window:.0%} of it" if window else "") + ")")
    finding.estimated_savings_ns = float(transfer)
    finding.budget_device = (found.straggler if found else worst).device_id
    return finding
