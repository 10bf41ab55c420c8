"""Host synchronization that leaves the GPU waiting.

## What it detects
Explicit synchronization (`cudaDeviceSynchronize`, `cudaStreamSynchronize`, event syncs) and the
implicit kind behind `.item()`, `.cpu()` and `print(tensor)`: a device-to-host copy the host
must wait for. Its time is the budget's `idle_sync`: after a wait the GPU idles until the host has
queued new work; the part of that idle time that the work queued before the wait would have covered
(had the host gone on instead of waiting) is the sync's, the rest is launch or host time.

## Why it is slow
After a sync the GPU's queue is empty: it idles until the host has launched the next work.
One sync per step in a training or inference loop costs a full launch round trip every time.

## Example
```python
loss_value = loss.item()              # waits for the GPU, every step
```

## Instead
```python
running_loss += loss.detach()         # stays on the GPU; read it every N steps
```

Where most of the host's waits follow a read of one byte to the host (a boolean it tests), the waits are checks
of values made every time: a library's argument validation (torch.distributions' `validate_args`), anomaly
detection, asserts. The title says so, the advice leads with turning them off, and the change replayed takes the
checks away with their waits: each read, the elementwise and reduction kernels before it that made the value, and
the host's way to their calls (blind67_distval: 10.5 and 11.1 ms a step priced, 11.2 and 11.6 saved by its twins;
the waits alone priced 8.4 and 6.2).

## Known problems
Some syncs are needed (timing, end of an epoch); the check counts all of them and ranks by the
idle time they cause. A check's host code beyond the way to its calls (the Python that prepares its arguments)
stays in the replay.

## Options
- `min_idle_share`: idle_sync over the window before the check speaks.
"""

from humanize import naturalsize

from nsanalyze.normalize.host_activity import base_name, waits_for_gpu
from nsanalyze.checks import runs
from nsanalyze.checks.program import host_data, pageable_memcpy
from nsanalyze.checks.program._claims import SYNC_CHANGE, SYNC_ID, SYNC_MIN_SHARE, SYNC_PART, checks_values, \
    claims_by_cause, host_sync_calls, sync_change
from nsanalyze.checks.base import Check, Finding, plural, Threshold, budget_part, evidence, per_step_phrase, \
    step_count
from nsanalyze.numbers import duration_text
from nsanalyze.text import code_span

ID = "host-sync"   # (checks/program/_claims.SYNC_ID names it for the claims)
BUDGET_PART = SYNC_PART
ADVICE = """Synchronize less: keep results on the GPU and read them rarely.

- Replace per-step `.item()`/`.cpu()`/`print(tensor)` with accumulation on the GPU, read every N steps.
- Use `cudaStreamWaitEvent` between streams instead of host-side `cudaStreamSynchronize`.
- Remove `cudaDeviceSynchronize()` left over from debugging.

```python
# before: a host round trip per step
for x in loader: loss = step(x); total += loss.item()
# after: one at the end
for x in loader: loss = step(x); total += loss.detach()
print(total.item())
```"""

# Where the sync call that holds most of the wait comes from in a PyTorch program, for the calls a program's own
# reads do not make (`.item()` and `.cpu()` wait in cudaStreamSynchronize or a device-to-host copy: ADVICE's first
# line). Among a library's: cuDNN's autotuning (`torch.backends.cudnn.benchmark`) times candidate kernels for each
# new input shape, waiting on events and the device.
AUTOTUNING = ("or a library's own, such as cuDNN's autotuning (`torch.backends.cudnn.benchmark = True`), which "
              "times its candidate kernels again for every new input shape: where shapes change from step to step, "
              "turn it off or keep the shapes to a few sizes (pad to buckets).")
SYNC_SOURCES = {
    "cudaEventSynchronize": "the host waits on CUDA events: timing code (`torch.cuda.Event.synchronize()`, "
                            "`elapsed_time`)",
    "cudaDeviceSynchronize": "the host waits for the whole device: `torch.cuda.synchronize()` in the loop (timing, "
                             "debugging)",
}
SYNC_SOURCES.update({"cuEventSynchronize": SYNC_SOURCES["cudaEventSynchronize"],
                     "cuCtxSynchronize": SYNC_SOURCES["cudaDeviceSynchronize"]})

# Waits made inside the backward pass (normalize.waits: on the thread that launches the backward's kernels, not the
# step loop's) are a read-back per gradient or per node: no loop of the program's own makes them
BACKWARD_WAITS_SHARE = 0.5


def in_backward(waits) -> bool:
    """Whether the backward pass makes most of the steps' waits (normalize.waits)."""
    return waits is not None and waits.backward_thread_known and waits.per_step > 0 and \
        waits.backward_per_step >= BACKWARD_WAITS_SHARE * waits.per_step


def poll_lead(waits) -> str:
    """The advice's first lines where the steps' waits are poll loops (normalize.critical_path.poll_runs)."""
    polls = "once" if round(waits.polls_per_step) == 1 else f"{waits.polls_per_step:.0f} times"
    where = " after its last launch" if round(waits.at_end_per_step) >= round(waits.polls_per_step) else ""
    return (f"Each step waits for the GPU {polls}{where} in a poll loop: {code_span(waits.poll_call)} answered "
            f"\"not ready\" {waits.not_ready_per_step:,.0f} times a step, then \"ready\" once the work queued before "
            "it had ended (`while not event.query(): time.sleep(0)`, a progress or heartbeat loop, a wait written by "
            "hand). The host launches nothing meanwhile, so the next step's launches start with the GPU idle: drop "
            "the wait and let the host run ahead, or read the event only where a value is needed (every N steps); "
            "then capture the step.\n\n")


# what a title adds where the backward makes the waits
BACKWARD_TITLE = "; the steps wait {n:.0f} times inside the backward pass (a read-back per gradient)"


def backward_waits_text(waits) -> str:
    """A paragraph naming the backward pass as the waits' place, where it makes most of them (normalize.waits), else
    ''."""
    if not in_backward(waits):
        return ""
    which = (f"All {waits.per_step:.0f} waits a step are" if waits.backward_per_step >= waits.per_step else
             f"{waits.backward_per_step:.0f} of the {waits.per_step:.0f} waits a step are")
    return (f"{which} made inside the backward pass "
            "(on the thread that launches the backward's kernels, not the step loop's): a read-back for each gradient "
            "or autograd node. `torch.autograd.set_detect_anomaly(True)` left on after a NaN hunt does this (it checks "
            "every gradient for NaN with a read-back, and stores a stack trace for every node of the forward: host "
            "time too), and so does a backward hook or a custom autograd Function that calls `.item()`, `.cpu()` or "
            "`bool(tensor)`: turn anomaly detection off outside debugging (`torch.autograd.detect_anomaly()` around "
            "one step where it is needed), and keep such checks on the GPU (`torch.isfinite(grad).all()` "
            "accumulated, read once a step).\n\n")


CHECK = Check(
    id=ID,
    name="program.sync.host",
    title="Host synchronization leaves the GPU waiting",
    section="busy",
    requires=("syncs", "budget"),
    optional=("critical_path", "timed_trials", "step_waits"),   # a replay that found no tuner rules its guess out of
    #                                                              the advice; the waits the backward makes name it
    thresholds={"min_idle_share": Threshold(SYNC_MIN_SHARE, "under 3% of the window the syncs are cheap insurance")},
    speedup_model=("the budget's idle_sync (of the GPU idle time after each wait, the part that the work queued "
                   "before the wait would have covered had the host not waited) and, where the replay of the steps "
                   "without the syncs saves more, the launch wait their drained queue leaves (checks/program/_claims)"),
    budget_part=BUDGET_PART,
    change=SYNC_CHANGE,  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    claimed = claims_by_cause(timeline).get(ID, {})   # idle_sync, and the launch wait the drained queue leaves
    sync_ns = claimed.get(BUDGET_PART, 0.0)
    idle_ns = sum(claimed.values())
    span = timeline.summary.span_ns or 0
    share = idle_ns / span if span else 0.0
    if share < limits.min_idle_share:
        return None
    rows = [(r, "explicit") for r in timeline.syncs.explicit] + \
           [(r, "implicit (device-to-host copy)") for r in timeline.syncs.implicit] + \
           [(r, "poll loop") for r in timeline.syncs.polls]
    # the host's waits only: a stream waiting on another's event (cudaStreamWaitEvent) holds the GPU's stream, not the
    # host (blind67_distval: 504 of the 758 calls it counted), as host_activity.csv says
    on_gpu = [r for r, kind in rows if kind == "explicit" and r.name and not waits_for_gpu(r.name)]
    calls = host_sync_calls(timeline)
    subject = plural(calls, "host synchronization") + _polls_said(timeline.syncs.polls, calls)
    drained = idle_ns - sync_ns
    if drained > sync_ns:   # most of the cost is the wait on the launches that refill the queue (the replay's)
        steps = step_count(timeline)
        saved = f"{duration_text(idle_ns / steps)} a step ({share:.0%} of the window)" if steps else f"{share:.0%} of the window"
        wait = f"{duration_text(drained / steps)} a step" if steps else duration_text(drained)
        if checks_values(timeline):   # the change takes the checks away with their waits (_claims.sync_change)
            title = (f"{subject} empty the GPU's queue: the replay without them and the "
                     f"checks they wait on saves {saved}, {wait} of it beside the waits (the launches that refill "
                     "the queue after each one, the checks' calls and kernels)")
        else:
            title = (f"{subject} empty the GPU's queue: the replay without them saves "
                     f"{saved}, {wait} of it the GPU's wait on the launches that refill the queue after each one")
    else:
        step_text = per_step_phrase(timeline, BUDGET_PART, idle_ns, share)
        title = (f"{subject} leave the GPU idle {share:.0%} of the window{step_text}: "
                 "the host waits, then works while nothing is queued")
    waits = getattr(timeline, "step_waits", None)
    checks_title, checks_advice = _value_checks(timeline)
    if in_backward(waits):
        title += BACKWARD_TITLE.format(n=waits.backward_per_step)
    elif checks_title:
        title += checks_title
    finding = Finding(
        check=ID,
        title=title,
        estimated_speedup=share,
        # where the claim spans the drained launch wait, its share is what the threshold reads, beside the part's own
        evidence={**({"claimed_share": evidence(share, limits.min_idle_share, unit="ratio"),
                      "idle_sync_share": evidence(sync_ns / span, unit="ratio")} if drained > 0 else
                     {"idle_sync_share": evidence(share, limits.min_idle_share, unit="ratio")}),
                  "idle_sync_ns": evidence(sync_ns, unit="ns"),
                  **({"drained_launch_ns": evidence(drained, unit="ns")} if drained > 0 else {}),
                  "sync_calls": evidence(calls),
                  "by_call": [dict(r.to_json(), kind=kind) for r, kind in sorted(rows, key=lambda r: -r[0].wait_ns)]},
        advice=(_polls_first(rows, waits) or backward_waits_text(waits) or checks_advice or _uploads_first(timeline, calls)
                or _reads_first(timeline)
                or _source_first(rows, timeline.critical_path is not None and timeline.timed_trials is None)) + ADVICE,
    )
    if on_gpu:
        finding.notes.append("not counted as host synchronizations: " + ", ".join(
            f"{r.name} ({plural(r.calls, 'call')})" for r in on_gpu) + ", waits between streams on the GPU; the "
            "host does not wait in them")
    finding.estimated_savings_ns = idle_ns
    finding.change = sync_change(timeline)   # (with the checks of values, where the waits are theirs)
    return finding


def _value_checks(timeline) -> tuple[str, str]:
    """(what the title adds, the advice's first paragraph) where most waits follow a one-byte read: booleans the host
    tests every step, a check of values on the GPU (a library's argument validation, anomaly detection, asserts)."""
    if not checks_values(timeline):
        return "", ""
    reads = timeline.copies.boolean_reads
    steps = step_count(timeline)
    count = f"{reads / steps:.0f} a step" if steps else f"{reads:,}"
    return (f"; {count} wait on a read of one byte to the host (a boolean it tests: a check of values)",
            f"{reads:,} of the waits follow a read of one byte to the host: a boolean the host tests, a check of values "
            "on the GPU made every time (`if mask.any():`, `assert (x >= 0).all()`, `bool(t)`). Libraries make such "
            "checks unasked: torch.distributions validates every argument (`validate_args`, on by default: "
            "`torch.distributions.Distribution.set_default_validate_args(False)` in training), and anomaly detection "
            "checks every gradient (`torch.autograd.set_detect_anomaly(False)`). Turn them off in the loop you time, "
            "or keep your own checks on the GPU (`torch._assert_async(cond)`) or make them every N steps. The saving "
            "is the replay without the checks (their reads and waits, the kernels that made each value, the host's "
            "way to their calls); the host code that prepares a check's arguments stays in it, so turning the "
            "checks off can save more.\n\n")


def _polls_said(polls, calls: int) -> str:
    """What the title adds where some of the waits are poll loops (normalize/polls.py): how many, of which query."""
    loops = sum(r.calls for r in polls)
    if not loops:
        return ""
    names = " and ".join(dict.fromkeys(base_name(r.name) for r in polls if r.name))
    which = f" of {names}" if names else ""
    return f" (poll loops{which})" if loops >= calls else f" ({loops:,} of them poll loops{which})"


def _polls_first(rows, waits) -> str:
    """The advice's first lines where poll loops hold most of the waits' time (normalize/polls.py), from the replayed
    steps' waits where they are poll loops too."""
    total = sum(r.wait_ns for r, _ in rows)
    polled = [r for r, kind in rows if kind == "poll loop"]
    if not total or sum(r.wait_ns for r in polled) < 0.5 * total:
        return ""
    if waits is not None and waits.polls_per_step > 0:
        return poll_lead(waits)
    loops = sum(r.calls for r in polled)
    return (f"The waits are {plural(loops, 'poll loop')}: the host asks {code_span(polled[0].name)} again and again "
            "until the work queued before it has ended (`while not event.query(): time.sleep(0)`, a progress or "
            "heartbeat loop, a wait written by hand). The host launches nothing meanwhile, so the next launches start "
            "with the GPU idle: drop the wait and let the host run ahead, or read the event only where a value is "
            "needed (every N steps).\n\n")


def _uploads_first(timeline, calls: int) -> str:
    """Where the waits are blocking uploads' own (as many uploads from pageable memory a step, each holding the host,
    as waits: PyTorch's `.to("cuda")`, a copy then its stream sync), the advice's first paragraph says so: the loop
    reads nothing back, and the host cannot build its next input while the GPU computes (blind75_tokenize: 3 uploads
    and 3 waits a step, a batch tokenized in Python after each step's waits; the advice was `.item()` and `.cpu()`)."""
    uploads = pageable_memcpy.blocking_uploads_per_step(timeline)
    steps = step_count(timeline)
    if not steps or not round(uploads) or round(uploads) < round(calls / steps):
        return ""
    return (f"The waits are the uploads' own: {plural(round(uploads), 'copy')} a step to the GPU from pageable "
            "memory, each a blocking `.to('cuda')` (a copy, then a wait for it). Nothing is read back: at each upload "
            "the host waits for the work queued before it, so what it does next (building the next input) runs while "
            "the GPU has nothing queued. Pin the inputs and copy with `non_blocking=True` (pageable-memcpy), or keep them on "
            "the GPU; the host then prepares the next step while the GPU computes this one.\n\n")


def _reads_first(timeline) -> str:
    """Where the waits are the reads back of the data the host handles (critical_path.syncs_within: host-data's
    copies and their waits hold the syncs' time), the advice's first paragraph says so: the reads are the cause, not
    a `.item()` (blind79_fsynclog: a checkpoint's 48 reads a step, torch.save of GPU tensors, and the loss read
    once; the advice led with `.item()`)."""
    data = getattr(timeline, "host_data", None)
    if data is None or not data.syncs_within or not round(data.reads_per_step) or not runs(host_data.ID):
        return ""
    return (f"The waits are the reads back of the data the host handles ({host_data.ID}): "
            f"{plural(round(data.reads_per_step), 'copy')} a step to the host "
            f"({naturalsize(data.read_bytes_per_step)}), each waited for (a `.cpu()`, a `torch.save` of "
            "GPU tensors, a copy to pageable memory). Keep that data on the GPU, read it back every N steps, or copy "
            "it into pinned buffers with `non_blocking=True` and use it a step later; removing the waits is part of "
            f"that change, counted within {host_data.ID}'s saving.\n\n")


def _source_first(rows, tuner_ruled_out: bool) -> str:
    """A line naming where the calls come from, where the calls that a program's own reads do not make
    (SYNC_SOURCES) hold most of the wait: the one that waits longest explains it."""
    total = sum(r.wait_ns for r, _ in rows)
    theirs = sorted((r for r, _ in rows if r.name in SYNC_SOURCES), key=lambda r: -r.wait_ns)
    waited = sum(r.wait_ns for r in theirs)
    if not total or waited < 0.5 * total:
        return ""
    names = " and ".join(f"`{r.name}`" for r in theirs[:2])
    source = SYNC_SOURCES[theirs[0].name]
    # the replayed steps were searched for an autotuner's timed trials (normalize.tuning) and held none: not the cause
    source += "." if tuner_ruled_out else " " + AUTOTUNING
    return f"Most of the wait ({waited / total:.0%}) is in {names}: {source}\n\n"
