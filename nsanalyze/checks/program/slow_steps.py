"""Steps that stand out: a few slow steps, or every Nth step, hold a large share of the run.

## What it detects
Steady steps whose period on the GPU's clock is far above the median step (normalize.steps), whether
they recur every Nth step (logging, evaluation, checkpoints on a step counter) or come alone, and what
the host and the GPU did in their excess over the median step: host-activity classes
(normalize.host_activity: copies, syncs, file I/O, allocator calls), the host's own code, copies on the GPU.

## Why it is slow
Medians hide spikes. A step that logs a histogram of every weight copies the weights to the host and
computes on the CPU while the GPU idles; once every ten steps it can cost more than the nine steps
between. The run's cost is the mean step, not the median.

## Example
```python
for step, batch in enumerate(loader):
    train_step(batch)
    if step % 10 == 9:
        for name, w in model.named_parameters():
            writer.add_histogram(name, w, step)        # copies every weight to the host, bins on the CPU
```

## Instead
```python
if step % 500 == 499:                                  # much less often
    stats = {n: torch.histc(w.detach().float(), bins=64) for n, w in model.named_parameters()}  # on the GPU
    pending.append((step, {n: h.to("cpu", non_blocking=True) for n, h in stats.items()}))       # small copies
# write the copied results from a side thread or after the loop
```

## Known problems
Slow steps at the start are warm-up and lie outside the window, half the steps at most; a slow step in the middle
of the run is counted here. Where the run's leading slow steps go on past that half, the window starts inside them
(its description says so), and slow steps that all lie in that stretch are its end: the title and the advice say
so, not periodic work (blind79_offload: steps 0-64 of 120, steps 60-64 in the window). A step that is slow because another phase (a checkpoint) lies inside it on the GPU's
clock is told by non-step-phase as well. Slow steps that come at no period and whose extra idle time the
host spent waiting on a queue or a lock (a DataLoader that does not keep up) are the data pipeline's:
host-wait names the wait. Slow steps that come at no period in a run whose steps spend half their time or more idle
on host code, with their excess mostly more of it, are that host work taking longer now and then: host-compute
counts them with the rest (its change takes both away).

## Options
- `outlier_factor`: a step this many times the median step stands out.
- `min_window_share`: the slow steps' excess over the median, as a share of the window, before the check speaks.
- `max_slow_share`: above this share of slow steps the run drifts and no step stands out.
"""

from __future__ import annotations

from math import gcd

import numpy as np

import humanize

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.normalize.budget import PARTS
from nsanalyze.text import code_span

ID = "slow-steps"
PART_WORDS = {"gpu_compute": "GPU compute", "gpu_communication": "communication", "gpu_copy": "copies on the GPU",
              "idle_other": "waits on queued work", "idle_sync": "idle after host syncs",
              "idle_launch": "idle on launches", "idle_host": "idle on host code"}
ADVICE = """Make the slow steps ordinary: do their extra work less often, on the GPU, or off the loop.

- Logging (histograms, images, per-weight statistics): log every N hundred steps; reduce on the GPU
  (`torch.histc`, `.norm()`) and copy only the result; write from a side thread
  (`SummaryWriter` has its own writer thread; keep `add_histogram`'s inputs small).
- Evaluation or checkpoints on a step counter: run them less often, asynchronously
  (`torch.distributed.checkpoint.async_save`), or on a subset.
- Copies of large tensors to the host: pinned buffers with `non_blocking=True`, or not at all.

```python
# before: every 10th step copies all weights to the host and bins them on the CPU
if step % 10 == 9: [writer.add_histogram(n, w, step) for n, w in model.named_parameters()]
# after: rarely, and the binning stays on the GPU
if step % 1000 == 999: [writer.add_histogram(n, w.detach().float().histc(64).cpu(), step) for n, w in params]
```"""

CHECK = Check(
    id=ID,
    name="program.steps.outliers",
    title="Steps that stand out hold a large share of the run",
    section="busy",
    requires=("host_activity",),  # and steps: a run without them has no step to stand out
    thresholds={
        "outlier_factor": Threshold(1.5, "half again the median step is beyond the noise of a steady loop (its MAD "
                                         "is a few percent)", at_least=1.0),
        "min_window_share": Threshold(0.05, "a twentieth of the run in a few steps is worth a look at what they do"),
        "max_slow_share": Threshold(0.25, "when more than a quarter of the steps are slow, the run drifts (a growing "
                                          "cache, a warming clock): no step stands out"),
    },
    speedup_model="each slow step's excess over the median step: done elsewhere or less often, they cost a median step",
    change={"outliers": True},  # the replay change priced (program.py)
    advice=ADVICE,
)


def every_nth(indices: np.ndarray, first: int, last: int) -> int | None:
    """N when the outliers recur every Nth step (at least 2 of them, nearly every such step of the run)."""
    if len(indices) < 2:
        return None
    period = 0
    for d in np.diff(indices):
        period = gcd(period, int(d))
    if period < 2:
        return None
    expected = sum(1 for i in range(first, last + 1) if i % period == int(indices[0]) % period)
    return period if expected and len(indices) >= 0.8 * expected else None


def outliers(timeline, limits) -> tuple[np.ndarray, float, np.ndarray] | None:
    """(slow-step mask over the steady steps, their excess over the median step less the time inside other
    phases, that time per slow step), when the slow steps hold enough of the window to speak."""
    periods = timeline.step_periods
    window_ns = timeline.summary.span_ns or 0
    if periods is None or len(periods) < 3 or not window_ns:
        return None
    typical = float(np.median(periods))
    slow = periods > limits.outlier_factor * typical
    if not slow.any() or slow.sum() > len(periods) // 2:
        return None
    if slow.sum() > limits.max_slow_share * len(periods):
        return None   # a third of the steps slower is a trend (a growing KV cache), not steps that stand out
    in_phases = _in_other_phases(timeline, slow)
    excess = float(np.clip(periods[slow] - typical - in_phases, 0, None).sum())
    if excess / window_ns < limits.min_window_share:
        return None
    irregular = every_nth(timeline.step_indices[slow], int(timeline.step_indices[0]),
                          int(timeline.step_indices[-1])) is None
    if irregular and _waiting_share(timeline, slow) >= WAITING_SHARE:
        return None   # irregular stalls on a queue: the data pipeline, host-wait names the wait
    if _trials_in_every_step(timeline, slow):
        return None   # an autotuner in every step, slower in some: autotuning's stretches, one cause
    if irregular and _more_of_the_same_host_work(timeline, slow):
        return None   # the host's own work of every step, longer in some: host-compute's cause, one change
    return slow, excess, in_phases


# Irregular slow steps whose excess is mostly the GPU idle on host code, in a run whose other steps spend this share of
# their time or more idle on host code, are the steps' own host work taking longer now and then: blind71_cpuemb's CPU
# embedding tables and optimizer, 72% of a median step, 89 ms in 18 steps of 89 against a 32 ms median; the fix (the
# tables on the GPU) took both away, 31.8 ms a step, and slow-steps' 10.1 ms beside host-compute's 21.6 split it.
OWN_HOST_SHARE = 0.5


def _more_of_the_same_host_work(timeline, slow: np.ndarray) -> bool:
    """Whether the slow steps' excess is mostly idle_host and the other steps spend OWN_HOST_SHARE or more of their
    time idle on host code."""
    activity = timeline.host_activity
    parts = activity.step_parts if activity is not None else None
    if parts is None or len(parts) != len(slow) or slow.all():
        return False
    host = PARTS.index("idle_host")
    usual = np.median(parts[~slow], axis=0)
    extra = np.clip(parts[slow] - usual, 0, None).sum(axis=0)
    return bool(extra.sum()) and extra[host] >= 0.5 * extra.sum() and usual[host] >= OWN_HOST_SHARE * usual.sum()


def _trials_in_every_step(timeline, slow: np.ndarray) -> bool:
    """Whether the replayed steps time trials (normalize.tuning) and the steps that do not stand out time as many
    as the slow ones, a quarter of them or more: a tuner of every step (tune52_ms: cuDNN's benchmark mode meets a
    new shape each step, 640 event records a step in the others, 650 in the two slow ones). Its slow steps are its
    slower tunings: `whatif --untune --outliers` saves what `--untune` does, and autotuning claims that time."""
    if getattr(timeline, "timed_trials", None) is None:
        return False
    activity = timeline.host_activity
    records = activity.by_class("event-record") if activity is not None else None
    if records is None or records.step_calls is None or len(records.step_calls) != len(slow) or slow.all():
        return False
    others = float(np.median(records.step_calls[~slow]))
    return others >= TRIALS_MIN_RECORDS and others >= 0.25 * float(np.median(records.step_calls[slow]))


# OS-call classes in which the launching threads wait on another thread or process (a DataLoader's queue).
WAITING_CLASSES = ("lock-wait", "io-wait", "sleep")
# Irregular slow steps whose excess idle time is mostly such waits are the pipeline not keeping up.
WAITING_SHARE = 0.5


def _waiting_share(timeline, slow: np.ndarray) -> float:
    """The share of the slow steps' excess GPU idle time in which the host waited on a queue or lock."""
    activity = timeline.host_activity
    idle = activity.step_idle_ns() if activity is not None else None
    if idle is None:
        return 0.0
    excess = float(np.clip(idle[slow] - np.median(idle[~slow]), 0, None).sum())
    waiting = sum(float(np.clip(c.step_idle_ns[slow] - np.median(c.step_idle_ns[~slow]), 0, None).sum())
                  for c in activity.classes if c.name in WAITING_CLASSES and c.step_idle_ns is not None)
    return waiting / excess if excess else 0.0


def excess_by_part(timeline, limits) -> dict[str, float]:
    """The slow steps' excess by budget part (what this check's finding claims of each part)."""
    found = outliers(timeline, limits)
    activity = timeline.host_activity
    if found is None or activity is None or activity.step_parts is None:
        return {}
    slow, excess, _ = found
    parts = np.clip((activity.step_parts[slow] - np.median(activity.step_parts[~slow], axis=0)).sum(axis=0), 0, None)
    scale = excess / parts.sum() if parts.sum() > excess else 1.0
    return {part: float(parts[i] * scale) for i, part in enumerate(PARTS)}


def run(timeline, limits) -> Finding | None:
    found = outliers(timeline, limits)
    if found is None:
        return None
    slow, excess, in_phases = found
    periods, indices = timeline.step_periods, timeline.step_indices
    window_ns = timeline.summary.span_ns
    typical = float(np.median(periods))
    share = excess / window_ns
    steps = _named_steps(timeline, slow, typical)
    n = every_nth(steps, int(indices[0]), int(indices[-1]) + 1)
    shown = ", ".join(str(timeline.step_number(int(i))) for i in steps[:6]) + (", ..." if len(steps) > 6 else "")
    which = (f"every {n}th step ({shown})" if n else
             f"{plural(slow.sum(), 'step')} ({shown})")
    doing = _what_they_do(timeline, slow)
    trials = _timed_trials(timeline, slow)
    if trials:
        doing = "; ".join(filter(None, [doing, f"{trials[0]:.0f} event records and {trials[1]:.0f} syncs a slow step "
                                               f"against {trials[2]:.0f} in the others: timed trials"]))
    mean = float(periods.mean())
    lead = _in_slow_lead(timeline, steps)
    stretch = _stretch(steps) if lead is None and not n else None
    if lead is not None:
        which += f", the end of the run's slow first stretch (to step {lead}, which the window starts inside),"
    elif stretch is not None:
        first, last = (timeline.step_number(int(i)) for i in stretch)
        which += f", {stretch[1] - stretch[0] + 1} of them one after another ({first} to {last}),"
    finding = Finding(
        check=ID,
        title=(f"Steps that stand out: {which} take {_time(np.median(periods[slow]))} against a "
               f"{_time(typical)} median step; {int(slow.sum())} of {plural(len(periods), 'step')} hold "
               f"{periods[slow].sum() / periods.sum():.0%} of the steps' time (mean step {_time(mean)}; "
               f"{_time(excess / len(periods))} a step above the median)"
               + (f"; in their excess: {doing}" if doing else "")),
        estimated_speedup=share,
        evidence={"slow_steps": [timeline.step_number(int(i)) for i in steps], "every_nth": n,
                  "median_step_ns": evidence(typical, unit="ns"), "mean_step_ns": evidence(mean, unit="ns"),
                  "slow_step_median_ns": evidence(float(np.median(periods[slow])), typical * limits.outlier_factor,
                                                  unit="ns"),
                  "excess_ns": evidence(excess, unit="ns"),
                  "excess_share": evidence(share, limits.min_window_share, unit="ratio")},
        advice=(SLOW_LEAD_ADVICE.format(last=lead, option=code_span(f"--nvtx-range '{timeline.steps.name}'"))
                if lead is not None else STRETCH_ADVICE if stretch is not None and not trials else "")
        + ((TRIALS_ADVICE + ADVICE) if trials else ADVICE),
    )
    if in_phases.any():
        finding.notes.append(f"{_time(in_phases.sum())} of the slow steps lie in other NVTX phases (non-step-phase "
                             "speaks for them) and are not counted here")
    finding.estimated_savings_ns = min(excess, window_ns)
    return finding


# A slow step that records this many CUDA events (and syncs on at least half as many) where the other steps record at
# most a quarter as many times candidate kernels: a tuner (autotuning's pattern) meeting input shapes it has not seen.
# tune52_bucket_on (fixtures/real): its 11 slow steps record 650 events and sync 672 times a step (medians; 9 of
# them meet a new shape), the other steps none.
TRIALS_MIN_RECORDS = 8
TRIALS_ADVICE = ("Their extra calls are timed trials: an autotuner (`torch.backends.cudnn.benchmark`, Triton's "
                 "`@triton.autotune`) timing its candidate kernels for input shapes it has not seen. They stop once "
                 "every shape has been tuned: run each shape once before the loop you time, give the tuner fewer "
                 "shapes (pad or bucket them), or turn benchmark mode off.\n\n")


# Slow steps that all lie in the run's leading slow stretch (steps.leading_slow: more than half the steps, past the
# warm-up's cap) are its end, not work done every so often (blind79_offload: steps 60-64 of a stretch to step 64,
# read as periodic logging, a user read)
SLOW_LEAD_ADVICE = ("These steps end the run's slow first stretch, to step {last}: the window leaves at most half the "
                    "steps out as warm-up, and this stretch lasted longer. Whatever slowed it (host memory touched for "
                    "the first time, a cache or a clock warming up, a data set's first pass) costs more than a "
                    "warm-up: read every step ({option}) and compare the first steps with the last.\n\n")


# Slow steps most of which (STRETCH_SHARE, and STRETCH_MIN or more) run one after another are a slow stretch, not work
# done every so often (blind78_recapture: steps 4-13 of 119 at 29-32 ms, the same capture in each as in the 18.7 ms
# steps after them, read with logging and checkpoint advice, a user read)
STRETCH_SHARE, STRETCH_MIN = 0.8, 5
STRETCH_ADVICE = ("Most of these steps run one after another: a slow stretch, not work done every so often. Either the "
                  "same work ran slower for a while (the host's memory, caches or clocks warming up, another process "
                  "on the machine) or something ran only then (an evaluation pass, a data set's first pass): compare "
                  "the stretch's calls with the steps around it (their excess by host activity is in the title) "
                  "before looking for periodic work.\n\n")


def _stretch(steps: np.ndarray) -> tuple[int, int] | None:
    """(first, last) step index of the longest run of consecutive slow steps where it holds STRETCH_SHARE of them and
    STRETCH_MIN or more, else None."""
    ordered = np.unique(steps)
    if len(ordered) < STRETCH_MIN:
        return None
    breaks = np.flatnonzero(np.diff(ordered) != 1)
    starts, ends = np.concatenate(([0], breaks + 1)), np.concatenate((breaks, [len(ordered) - 1]))
    longest = int(np.argmax(ends - starts))
    size = int(ends[longest] - starts[longest] + 1)
    if size < STRETCH_MIN or size < STRETCH_SHARE * len(ordered):
        return None
    return int(ordered[starts[longest]]), int(ordered[ends[longest]])


def _in_slow_lead(timeline, steps: np.ndarray) -> int | None:
    """The last step of the run's leading slow stretch where every one of these slow steps lies in it, else None."""
    summary = getattr(timeline, "steps", None)
    last = getattr(summary, "slow_lead_last_step", None) if summary is not None else None
    if last is None or not len(steps):
        return None
    return last if all(timeline.step_number(int(i)) <= last for i in steps) else None


def _timed_trials(timeline, slow: np.ndarray) -> tuple[float, float, float] | None:
    """(event records a slow step, syncs a slow step, event records in the others) where the slow steps time
    GPU work and the others do not (TRIALS_MIN_RECORDS), else None: medians of the host-activity table's calls."""
    activity = timeline.host_activity
    records = activity.by_class("event-record") if activity is not None else None
    syncs = activity.by_class("sync") if activity is not None else None
    if records is None or syncs is None or records.step_calls is None or syncs.step_calls is None \
            or len(records.step_calls) != len(slow) or slow.all():
        return None
    mine, others = float(np.median(records.step_calls[slow])), float(np.median(records.step_calls[~slow]))
    synced = float(np.median(syncs.step_calls[slow]))
    if mine < TRIALS_MIN_RECORDS or others > 0.25 * mine or synced < 0.5 * mine:
        return None
    return mine, synced, others


def _named_steps(timeline, slow: np.ndarray, typical: float) -> np.ndarray:
    """The step each slow period belongs to: its own, or the next one where most of its excess is the next
    step's stall before its first GPU work (the host began that step, loading its batch, while the GPU,
    done with this step's work, waited: the GPU's clock counts that wait in this step's period)."""
    indices = timeline.step_indices[slow]
    lead = getattr(timeline, "step_next_lead_in", None)
    if lead is None:
        return indices
    excess = timeline.step_periods[slow] - typical
    return np.where(lead[slow] >= 0.5 * excess, indices + 1, indices)


def _time(ns: float) -> str:
    return humanize.metric(float(ns) * 1e-9, "s").replace("μ", "µ")


def _in_other_phases(timeline, slow: np.ndarray) -> np.ndarray:
    """Per slow step, the time inside instances of phases that are not the steps (a checkpoint that falls
    between two steps lies inside a step on the GPU's clock): that phase's own finding tells it."""
    starts, ends = timeline.step_starts[slow], timeline.step_ends[slow]
    inside = np.zeros(len(starts))
    for phase in _all_phases(timeline.phases or []):
        if phase.is_steps:
            continue
        for begin, end in phase.instances or ():
            inside += np.clip(np.minimum(ends, end) - np.maximum(starts, begin), 0, None)
    return np.minimum(inside, ends - starts)


def _all_phases(phases: list) -> list:
    """The phases and their nested phases, outermost first; a nested phase counts only where its parent
    does not (the parent's instances hold it)."""
    return phases


def _what_they_do(timeline, slow: np.ndarray) -> str:
    """The largest parts of the slow steps' excess over a median step: host-activity classes (host time in
    their calls) and the budget parts the excess went to."""
    activity = timeline.host_activity
    if activity is None or activity.step_parts is None:
        return ""
    normal = ~slow
    parts = activity.step_parts
    part_excess = (parts[slow] - np.median(parts[normal], axis=0)).sum(axis=0)
    total = float(np.clip(part_excess, 0, None).sum()) or 1.0
    words = [f"{PART_WORDS.get(p, p)} {_time(part_excess[i])}" for i, p in enumerate(PARTS)
             if part_excess[i] > 0.1 * total]
    classes = []
    for entry in activity.classes:
        if entry.step_host_ns is None:
            continue
        extra = float((entry.step_idle_ns[slow] - np.median(entry.step_idle_ns[normal])).sum())
        if extra > 0.05 * total:
            classes.append((extra, entry))
    classes.sort(key=lambda c: -c[0])
    calls = [f"{e.name} {_time(x)} ({', '.join(n for n, _, _ in e.top_calls[:2])})" for x, e in classes[:3]]
    moved = [f"{humanize.naturalsize(extra)} {_direction(label)} a slow step"
             for label, per_step in timeline.step_copy_bytes.items()
             if (extra := float(np.median(per_step[slow]) - np.median(per_step[normal]))) >= MIN_COPY_BYTES]
    return "; ".join(filter(None, [", ".join(words), ("the GPU idle while the host was in " + ", ".join(calls)) if calls else "",
                                   ("copies of " + ", ".join(moved)) if moved else ""]))


def _direction(label: str) -> str:
    """`Device-to-Host, Pageable` -> `device-to-host into pageable memory`."""
    direction, _, memory = label.partition(", ")
    into = "into" if direction.endswith("to-Host") else "from"
    return f"{direction.lower()} {into} {memory.lower()} memory" if memory else direction.lower()


# Copies a slow step makes beyond an ordinary one are named from this many bytes (a tensor's worth, not a scalar).
MIN_COPY_BYTES = 1 << 20

