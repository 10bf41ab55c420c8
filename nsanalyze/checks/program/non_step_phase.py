"""A phase that is not the steps holds the window: checkpoints, evaluation, data loading between epochs.

## What it detects
The run's phases (normalize.phases: its top-level NVTX ranges over the whole capture, grouped by
name) that are not the step range, that lie inside the analysis window for a large share of it, and
in which the GPU does little compute: their instances (the `checkpoint` after every epoch, an `eval`
loop) take the window's time away from the steps the rest of the report measures per step.

## Why it is slow
Training throughput is steps per second of wall time. A checkpoint that copies the weights to the
host through pageable memory and writes them in the training process, or an evaluation that runs
every few steps, stops the steps for as long as it lasts; per-step figures never show it.

## Example
```python
for epoch in range(epochs):
    train_one_epoch()
    torch.save(model.state_dict(), f"ckpt{epoch}.pt")   # blocks training while it copies and writes
```

## Instead
```python
import torch.distributed.checkpoint as dcp
future = dcp.async_save(model.state_dict(), checkpoint_id=f"ckpt{epoch}")   # writes in the background
# or: save every N epochs; evaluate on a subset, or less often
```

## Known problems
The phase's cause is read off its own budget (where its GPU idles); a phase whose GPU computes is
judged by the kernel checks instead. Phases are found by NVTX ranges: an unmarked checkpoint shows up
as host-compute or host-sync time between steps.

## Options
- `min_window_share`: the phase's time inside the window before the check speaks.
- `min_idle_share`: the share of the phase in which the GPU does not compute.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.normalize.model import part_ns, plain

ID = "non-step-phase"
# Where the phase's time goes, in words, by budget part.
CAUSES = {
    "gpu_copy": "copies between host and GPU",
    "gpu_communication": "communication",
    "idle_sync": "host waits on the GPU in synchronizations",
    "idle_host": "the host's own code (serialization, file I/O, Python)",
    "idle_launch": "kernel launches",
    "idle_other": "waits on queued work",
}
ADVICE = """Take the phase off the steps' path.

- Checkpoints: save asynchronously (`torch.distributed.checkpoint.async_save`, or copy to pinned host
  buffers with `non_blocking=True` and write from a thread), save every N epochs, keep only what resumes.
- Evaluation: run it less often, on a subset, under `torch.inference_mode()` with a larger batch.
- Data loading between epochs: `DataLoader(persistent_workers=True)` keeps workers across epochs.

```python
import torch.distributed.checkpoint as dcp
pending = dcp.async_save(model.state_dict(), checkpoint_id=f"ckpt/{epoch}")
...
pending.result()   # before the next save
```"""

CHECK = Check(
    id=ID,
    name="program.phase",
    title="A phase that is not the steps holds the window",
    section="busy",
    requires=("budget",),
    thresholds={
        "min_window_share": Threshold(0.10, "a tenth of the window outside the steps changes the run's throughput"),
        "min_idle_share": Threshold(0.50, "a phase whose GPU computes most of its time is GPU work, judged by kernels"),
    },
    speedup_model=("the phase's time inside the window in which its GPU does not compute: made asynchronous, "
                   "less frequent or overlapped, the steps would not wait for it"),
    change={"outliers": True},  # the replay change priced (program.py)
    advice=ADVICE,
)


def _candidates(phases: list, window_ns: float, limits, parent=None) -> list[tuple]:
    """(savings, phase, parts, idle share, window share, parent) of every phase at every level that
    holds enough of the window and whose GPU mostly does not compute."""
    out = []
    for phase in phases:
        if phase.is_steps or not phase.budget or not phase.duration_ns:
            continue
        if _holds_the_steps(phase):   # (its other children, a checkpoint in each epoch, may still speak)
            out += _candidates(phase.children, window_ns, limits, phase)
            continue
        # inside the window where that is known: instances the window cuts hold another mix
        budget, span = ((phase.in_window_budget, phase.in_window_ns) if phase.in_window_budget and phase.in_window_ns
                        else (phase.budget, phase.duration_ns))
        parts = {p.part: p.ns for p in budget}
        idle_share = 1.0 - part_ns(budget, "gpu_compute") / span
        window_share = phase.in_window_ns / window_ns
        if window_share >= limits.min_window_share and idle_share >= limits.min_idle_share:
            out.append((phase.in_window_ns * idle_share, phase, parts, idle_share, window_share, parent))
        out += _candidates(phase.children, window_ns, limits, phase)
    return out


# A phase whose step children hold this share of its time or more is the steps' container (an `epoch N` range around
# each epoch's steps), not a phase beside them: blind76_epochs' 8 epochs hold all 160 steps in 4.36 s of 4.36 s, and
# were told as "a phase that is not the steps holds 100% of the window", with checkpoint advice first, where each
# epoch's first step waited on its DataLoader's workers starting again
STEPS_HELD_SHARE = 0.9


def _holds_the_steps(phase) -> bool:
    """Whether the phase's instances are mostly its steps (STEPS_HELD_SHARE of its time)."""
    held = sum(child.duration_ns for child in phase.children if child.is_steps)
    return held >= STEPS_HELD_SHARE * phase.duration_ns


# A nested phase speaks for its parent when it holds at least this share of the parent's savings: the
# checkpoint inside each epoch, not the epoch that also holds the steps.
DEEPEST_SHARE = 0.5


def chosen(timeline, limits) -> tuple | None:
    """The phase this check speaks of, as its candidate tuple (see _candidates), or None."""
    window_ns = timeline.summary.span_ns or 0
    if not timeline.steps or not window_ns:  # without steps the window is one phase or the other
        return None
    candidates = _candidates(timeline.phases or [], window_ns, limits)
    if not candidates:
        return None
    best = max((c for c in candidates if c[5] is None), key=lambda c: c[0], default=None) or \
        max(candidates, key=lambda c: c[0])
    while True:   # the deepest phase that explains the time
        inner = [c for c in candidates if c[5] is best[1] and c[0] >= DEEPEST_SHARE * best[0]]
        if not inner:
            break
        best = max(inner, key=lambda c: c[0])
    return best


def claimed_parts(timeline, limits) -> dict[str, float]:
    """The chosen phase's budget inside the window, by part: what this check's finding claims."""
    best = chosen(timeline, limits)
    if best is None:
        return {}
    phase = best[1]
    if phase.in_window_budget is not None:
        return {entry.part: entry.ns for entry in phase.in_window_budget if entry.part != "gpu_compute"}
    inside = phase.in_window_ns / phase.duration_ns
    return {entry.part: entry.ns * inside for entry in phase.budget if entry.part != "gpu_compute"}


def run(timeline, limits) -> Finding | None:
    best = chosen(timeline, limits)
    if best is None:
        return None
    window_ns = timeline.summary.span_ns
    savings, phase, parts, idle_share, window_share, _ = best
    cause_part = max(CAUSES, key=lambda part: parts.get(part, 0))
    # the figures of the instances the saving counts: those inside the window where that budget is known
    inside = _instances_in_window(timeline, phase)
    in_window = bool(phase.in_window_budget and phase.in_window_ns and inside)
    span, shown = (phase.in_window_ns, inside) if in_window else (phase.duration_ns, phase.count)
    each = span / shown
    where = f" (in {phase.path.rsplit(' › ', 1)[0]})" if phase.path else ""
    host, host_ns = _host_classes(timeline, phase)
    count = (f"{inside} of its {plural(phase.count, 'instance')} in the window" if inside != phase.count else
             plural(phase.count, 'instance'))
    rest = _what_it_holds(parts, span, host, host_ns)
    finding = Finding(
        check=ID,
        title=(f"The '{phase.name}' phase{where} holds {window_share:.0%} of the window ({count}, "
               f"{each / 1e6:.1f} ms each); the GPU computes in only {1 - idle_share:.0%} of it: {rest}"),
        estimated_speedup=savings / window_ns,
        evidence={"phase": phase.name, "path": phase.path or phase.name, "instances": phase.count,
                  "phase_ns": evidence(phase.duration_ns, unit="ns"),
                  "window_share": evidence(window_share, limits.min_window_share, unit="ratio"),
                  "idle_share": evidence(idle_share, limits.min_idle_share, unit="ratio"),
                  "cause": cause_part, "budget": plain(phase.budget)},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = min(savings, window_ns)
    return finding


# Every part of the phase's time holding this share or more is named in the finding's title.
NAMED_PART_SHARE = 0.2


def _what_it_holds(parts: dict, span: float, host: str, host_ns: float) -> str:
    """The phase's time beside compute, part by part (each at NAMED_PART_SHARE or more): copies and
    communication on the GPU, then its idle time, told by the host's calls where they cover most of it."""
    pieces = [f"{CAUSES[part]} {parts[part] / span:.0%}" for part in ("gpu_copy", "gpu_communication")
              if parts.get(part, 0) >= NAMED_PART_SHARE * span]
    idle = {part: parts.get(part, 0) for part in CAUSES if part.startswith("idle_")}
    idle_ns = sum(idle.values())
    if host and host_ns >= 0.5 * idle_ns:   # the host's calls cover most of the idle time: they are its cause
        pieces.append(f"the GPU idle {idle_ns / span:.0%}, the host mostly in {host}")
    else:
        named = sorted((p for p in idle if idle[p] >= NAMED_PART_SHARE * span), key=lambda p: -idle[p])
        pieces += [f"{CAUSES[part]} {idle[part] / span:.0%}" for part in named]
        if host:
            pieces.append(f"the host meanwhile in {host}")
    if not pieces:
        top = max(CAUSES, key=lambda part: parts.get(part, 0))
        pieces.append(f"mostly {CAUSES[top]} ({parts.get(top, 0) / span:.0%})")
    return "; ".join(pieces)


def _instances_in_window(timeline, phase) -> int:
    """The phase's instances that overlap the analysis window (its priced time lies in those)."""
    start, end = timeline.window.start, timeline.window.end
    return sum(1 for s, e in phase.instances or () if e > start and s < end)


def _host_classes(timeline, phase) -> tuple[str, float]:
    """The host-activity classes that cover the phase's idle time (normalize.host_activity), largest first,
    and the idle time they cover."""
    activity = getattr(timeline, "host_activity", None)
    if activity is None or not phase.instances:
        return "", 0.0
    starts = [s for s, _ in phase.instances]
    ends = [e for _, e in phase.instances]
    covered = [(activity.idle_within(c.name, starts, ends), c) for c in activity.classes]
    idle = phase.idle_ns or 0
    named = sorted(((ns, c) for ns, c in covered if idle and ns >= 0.1 * idle), key=lambda x: -x[0])[:3]
    return (", ".join(f"{c.name} {ns / 1e6:.0f} ms ({', '.join(n for n, _, _ in c.top_calls[:2])})" for ns, c in named),
            sum(ns for ns, _ in named))
