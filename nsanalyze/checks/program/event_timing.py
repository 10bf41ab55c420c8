"""Timing code left in the loop: the host times its own work with CUDA events and waits for every result.

## What it detects
Timed event pairs in most of the replayed steps around the median step (normalize.tuning): two CUDA event
records around the program's own launches, then at once a host sync on the second, with nothing run before
to warm up (a tuner's trials are warmed up: that is autotuning's). This is the usual way to log how long a
layer or a phase takes: `torch.cuda.Event(enable_timing=True)` pairs, `end.synchronize()` and
`start.elapsed_time(end)`, every step.

## Why it is slow
Each wait empties the GPU's queue: after it, the GPU idles until the host has launched the next work. And
the timing is host work of its own: creating, recording, querying and destroying events, each a Python call
into the framework and one into the driver. In a step the host already holds, all of it adds to the step.

## Example
```python
for name, layer in layers:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); x = layer(x); end.record()
    end.synchronize()                       # waits for the GPU, per layer, every step
    times[name].append(start.elapsed_time(end))
```

## Instead
```python
x = model(x)                                # no timing in the loop; profile a few steps instead,
if step % 100 == 0:                         # or time rarely, with the waits you already make
    ...
```

## Known problems
Read on the replayed steps around the median step, of an nsys export or a Kineto trace (since round 54: on
kin54's traced ResNet-50 it finds the five timed stages a step that the trace's calls show; the profiler
slows the host, so a trace's saving is its own run's, not the program's without the profiler). The replay prices removing the timing: its event calls, its syncs and the host's time on
the way to each, at most the typical launch path per call (a longer gap holds the program's other work:
before a timed phase lies the code before it). Keeping the events but reading them rarely keeps their calls'
host time and saves the waits only. On host-bound steps the host's own speed drifts between runs by more
than a few timings cost (a ResNet-50's identical timed runs: 34.0 and 39.9 ms a step), so a twin there
may show a saving or a loss the timing does not explain.

## Options
- `min_timings`: timed event pairs a step before the check speaks.
- `min_step_share`: the replayed steps that hold them.
- `min_window_share`: the saving's share of the window.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.checks.program.autotuning import (host_cause_saving, in_most_steps, in_replayed_steps,
                                                 replay_claims)
from nsanalyze.numbers import duration_text

ID = "event-timing"
ADVICE = """Take the timing out of the loop, or stop waiting for it every step.

- Measure phases with the profiler (`nsys profile` with NVTX ranges, `torch.profiler`) on a few steps, not with
  event pairs synchronized in every step of every run.
- Where the loop must report times, record the events without waiting and read `elapsed_time` every N steps,
  after a sync the loop makes anyway (the events' calls stay; the waits go).

```python
# before: a wait per layer, every step
end.record(); end.synchronize(); times.append(start.elapsed_time(end))
# after: read every 100 steps, once the last event has completed
end.record(); pairs.append((start, end))
if step % 100 == 0:
    pairs[-1][1].synchronize()
    times += [s.elapsed_time(e) for s, e in pairs]; pairs.clear()
```"""

CHECK = Check(
    id=ID,
    name="program.event_timing",
    title="Timing code waits for the GPU in every step",
    section="busy",
    requires=(),
    optional=("timing_code", "budget"),
    thresholds={
        "min_timings": Threshold(2, "one timing a step is a step's own sync (host-sync's); timing code times "
                                    "several phases or layers"),
        "min_step_share": Threshold(0.5, "in fewer steps the timing is a step that stands out (slow-steps)"),
        "min_window_share": Threshold(0.03, "under 3% of the window the timing is noise"),
    },
    speedup_model=("the replay of the steps without the timing code: its event calls and syncs gone with the "
                   "host's time on the way to each, at most a typical launch path a call (normalize.tuning."
                   "TimingCode), the work it timed kept; capped by the time those calls and their way take"),
    change={"untime": True},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def timed(timeline, limits):
    """(the window's timing code, what removing it saves over the window) where this check speaks, else None."""
    timing = getattr(timeline, "timing_code", None)
    if timing is None or not in_most_steps(timeline, timing, timing.steps_with_timings, timing.timings_per_step,
                                           limits.min_timings, limits):
        return None
    saving = host_cause_saving(timeline, CHECK.change, timing.host_ns_per_step, timing.step_ns,
                               limits.min_window_share)
    return (timing, saving) if saving is not None else None


def claimed_parts(timeline, limits, taken: dict[str, float]) -> dict[str, float]:
    """What this check's finding claims of the budget's parts, within what the causes before it leave
    (autotuning.replay_claims): no kernels, its saving from the idle parts, and of the syncs' idle time at least
    the share of the host's sync time the timing's syncs hold."""
    found = timed(timeline, limits)
    if found is None or not timeline.budget:
        return {}
    timing, saving = found
    return replay_claims(timeline, taken, saving, 0.0, timing.sync_share)


def run(timeline, limits) -> Finding | None:
    found = timed(timeline, limits)
    if found is None:
        return None
    timing, saving = found
    steps = timeline.steps.count
    span = timeline.summary.span_ns
    in_steps = in_replayed_steps(timing.steps_with_timings, timing.steps)
    per_step = saving / steps
    finding = Finding(
        check=ID,
        title=(f"Timing code waits for the GPU in {in_steps}: {timing.timings_per_step:.0f} event pairs a step, each "
               f"synchronized, cost {duration_text(per_step)} of those steps' {duration_text(timing.step_ns)} mean "
               f"({_how(timing, per_step)})"),
        estimated_speedup=min(1.0, saving / span),
        evidence={"timings_per_step": evidence(timing.timings_per_step, limits.min_timings, compare=">="),
                  "step_share": evidence(timing.steps_with_timings / timing.steps, limits.min_step_share,
                                         unit="ratio", compare=">="),
                  "window_share": evidence(min(1.0, saving / span), limits.min_window_share, unit="ratio", compare=">="),
                  "timing_calls_per_step": evidence(timing.calls_per_step),
                  "timing_host_ns_per_step": evidence(timing.host_ns_per_step, unit="ns"),
                  "timing_sync_ns_per_step": evidence(timing.sync_ns_per_step, unit="ns")},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = saving
    if timing.sync_ns_per_step < per_step:
        finding.notes.append(f"of the saving, the syncs' own calls hold {duration_text(timing.sync_ns_per_step)} a "
                             "step; the rest is the events' calls and the host's time on their way, which reading "
                             "the events rarely (no waits) keeps")
    return finding


def _how(timing, per_step: float) -> str:
    """Where the saving comes from: the host's work on the timing (its calls and their way, the waits aside) where
    that is half the saving or more (a step the host holds: trit52's MLP), else the GPU's queue the waits empty (a
    step the GPU holds: time53's ResNet-50 at batch 256, whose waits hold 25 ms a step of work that runs anyway)."""
    if timing.host_ns_per_step - timing.sync_ns_per_step >= 0.5 * per_step:
        return f"{plural(round(timing.calls_per_step), 'CUDA call')} a step and the host's time on their way"
    return "each wait empties the GPU's queue, which idles until the host has launched the next work"
