"""An autotuner times candidate kernels in every step: the steps' input shapes keep changing.

## What it detects
Timed trials in most of the replayed steps around the median step (normalize.tuning): GPU work launched
between two CUDA event records and waited for with a host sync, many times a step. That is how a library
picks the fastest of its kernels for an input shape it has not seen: cuDNN with
`torch.backends.cudnn.benchmark = True`, Triton's `@triton.autotune`, a GEMM tuner. Once per shape it is
cheap; where the shape changes every step (variable sequence lengths, multi-scale images, the last
partial batch of every epoch), the tuning runs every step.

## Why it is slow
Each trial waits for the GPU, and between trials the library builds its next candidate on the host
(heuristics, run-time compilation of fused kernels): the GPU idles most of the stretch, and the step's own
work waits until the tuning for each of its layers is done.

## Example
```python
torch.backends.cudnn.benchmark = True
for wave in loader:                 # clips of 1 to 4 s, padded to the longest of each batch
    loss = model(wave.cuda()).mean()   # a new length each step: cuDNN times its kernels again
```

## Instead
```python
torch.backends.cudnn.benchmark = False          # or keep it, with few shapes:
length = -(-wave.shape[-1] // 16000) * 16000    # pad to whole seconds: 4 shapes, each tuned once
wave = torch.nn.functional.pad(wave, (0, length - wave.shape[-1]))
```

## Known problems
Read on the replayed steps around the median step: a tuner that runs in a few steps only (a new
shape now and then) shows as steps that stand out (slow-steps). Timing code of the program's own (an
event pair around each layer, synchronized every step) has the trials' pattern but warms nothing up: it is
not taken for a tuner (event-timing tells it), since removing it keeps the kernels it times.
The step's own launches inside a tuning stretch keep the launch path's typical host time in the replay;
host work of the program that falls between two trials goes with the tuning. Kineto traces are read as nsys
exports are (the same replayed steps), but hold few steps (a profiler's schedule records a handful): a tuner that
meets a new shape in most of them is told, one that tunes now and then may not show in the traced steps at all.

## Options
- `min_trials`: timed trials a step before the check speaks.
- `min_step_share`: the replayed steps that hold trials.
- `min_window_share`: the tuning stretches' share of the window.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count
from nsanalyze.normalize import pricing
from nsanalyze.numbers import duration_text

SYNC_PART = "idle_sync"   # the budget part of the syncs' waits
COMPUTE_PART = "gpu_compute"   # ... of the kernels' time
GPU_PARTS = ("gpu_compute", "gpu_communication", "gpu_copy")   # the GPU's work; the rest is its idle time

ID = "autotuning"
ADVICE = """Tune once per shape, not once per step: give the tuner few shapes, or turn it off.

- `torch.backends.cudnn.benchmark = False` where input shapes vary from step to step (cuDNN's heuristics
  then pick a kernel without timing any), or keep it and pad or bucket the inputs to a few sizes, so that
  each is tuned once.
- Triton's `@triton.autotune`: fewer `configs`, a `key` without the dimensions that vary every step, or
  bucket those dimensions.

```python
# before: a new input shape every step, timed again
torch.backends.cudnn.benchmark = True
y = model(x)
# after: the sizes that vary padded up to a few buckets (multiples of 64), each shape tuned once
# (an image's height and width here; a clip's length alone: pad only the last dimension)
h, w = x.shape[-2:]
x = torch.nn.functional.pad(x, (0, -(-w // 64) * 64 - w, 0, -(-h // 64) * 64 - h))
y = model(x)
```"""

CHECK = Check(
    id=ID,
    name="program.autotuning",
    title="An autotuner times candidate kernels in every step",
    section="busy",
    requires=(),
    optional=("timed_trials", "budget"),
    thresholds={
        "min_trials": Threshold(4, "a tuner tries several candidates for each layer; timing code times a step or two"),
        "min_step_share": Threshold(0.5, "in fewer steps the tuning is a step that stands out (slow-steps)"),
        "min_window_share": Threshold(0.03, "under 3% of the window the tuning is noise"),
    },
    speedup_model=("the replay of the steps without the timed trials: the tuner's calls, kernels and the host's "
                   "time between them gone, the step's own launches kept (normalize.tuning), as a share of the "
                   "replayed steps applied to the window's steps; its own estimate, the tuning stretches' share "
                   "of the replayed steps, likewise"),
    change={"untune": True},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def in_most_steps(timeline, record, steps_with: int, per_step: float, least: float, limits) -> bool:
    """Whether the window has steps and a span, and a replayed block's record (timed trials, timing code) holds its
    pattern in at least min_step_share of the block's steps, `least` times a step or more."""
    steps = step_count(timeline) or 0
    if record is None or not steps or not timeline.summary.span_ns or not record.steps:
        return False
    return steps_with >= limits.min_step_share * record.steps and per_step >= least


def in_replayed_steps(steps_with: int, steps: int) -> str:
    """Where a pattern of the replayed steps around the median step holds, as a title says it."""
    # (consecutive steps in time, the median step among them: a user read took "the 8 around the median" for the 8
    # steps nearest the median's length, which average 4.39 ms on trit52_timed where these took 4.11)
    # (and a sample: "the 8 consecutive steps" beside 8 instantiations read as 8 captures in the run, not 120)
    return (f"every step (each of the {steps} consecutive steps sampled around the median one)" if steps_with == steps
            else f"{steps_with} of the {steps} consecutive steps sampled around the median one")


def host_cause_saving(timeline, change: dict, host_ns_per_step: float, step_ns: float,
                      min_window_share: float) -> float | None:
    """What a host-side cause of the replayed steps (timing code, code builds) saves over the window: its change's
    replay, else its host time a step (at most the step) over the window's steps, never more than the window; None
    under min_window_share of the window."""
    steps, span = timeline.steps.count, timeline.summary.span_ns
    own = min(host_ns_per_step, step_ns) * steps
    priced = pricing.price(timeline, change, own)
    saving = min(priced.savings_ns if priced is not None else own, span)
    return saving if saving >= min_window_share * span else None


def tuned(timeline, limits):
    """The window's timed trials where they are the tuning this check speaks of, else None."""
    trials = getattr(timeline, "timed_trials", None)
    if trials is None or not in_most_steps(timeline, trials, trials.steps_with_trials, trials.trials_per_step,
                                           limits.min_trials, limits):
        return None
    steps, span = timeline.steps.count, timeline.summary.span_ns
    if _stretch_share(trials) * (timeline.steps.mean_ns or 0) * steps < limits.min_window_share * span:
        return None
    return trials


def _stretch_share(trials) -> float:
    """The tuning stretches' share of the replayed steps: a tuner's time follows its steps' shapes, so the window's
    steps hold it in that share (normalize.pricing prices the change the same way)."""
    return min(1.0, trials.stretch_ns_per_step / trials.step_ns) if trials.step_ns else 0.0


def claimed_parts(timeline, limits, taken: dict[str, float]) -> dict[str, float]:
    """What this check's finding claims of the budget's parts, within what the causes before it leave
    (replay_claims): its kernels are the trials' and warm-ups', its saving the replay's (else the stretches' time),
    its syncs the tuner's. The stretches hold most of their steps on the fixtures (blind_cudnnbench: 97%); a shorter
    one is counted where the idle time lies on average."""
    trials = tuned(timeline, limits)
    if trials is None or not timeline.budget:
        return {}
    steps = timeline.steps.count
    own = _stretch_share(trials) * (timeline.steps.mean_ns or 0) * steps
    priced = pricing.price(timeline, CHECK.change, own)
    saving = priced.savings_ns if priced is not None else own
    return replay_claims(timeline, taken, saving, trials.kernel_share, trials.sync_share)


def replay_claims(timeline, taken: dict[str, float], saving: float, kernel_share: float,
                  sync_share: float) -> dict[str, float]:
    """A replayed cause's claim on the budget's parts, within what the causes before it leave (`taken`): of the
    GPU's compute, the share its kernels hold of the replayed steps' GPU time; the rest of its saving from the idle
    parts, as the window's budget holds them, and of the syncs' idle time at least the share of the host's sync
    time its syncs hold (their waits are its)."""
    def left(part) -> float:
        return max(0.0, part.ns - taken.get(part.part, 0.0))
    claims = {p.part: min(left(p), p.ns * kernel_share) for p in timeline.budget if p.part == COMPUTE_PART}
    idle = [p for p in timeline.budget if p.part not in GPU_PARTS and p.ns > 0]
    total = sum(p.ns for p in idle)
    share = min(1.0, max(0.0, saving - sum(claims.values())) / total) if total else 0.0
    for p in idle:
        claims[p.part] = min(left(p), p.ns * (max(share, sync_share) if p.part == SYNC_PART else share))
    return {part: ns for part, ns in claims.items() if ns > 0}


def run(timeline, limits) -> Finding | None:
    trials = tuned(timeline, limits)
    if trials is None:
        return None
    steps = timeline.steps.count
    span = timeline.summary.span_ns
    share = _stretch_share(trials)
    own = share * (timeline.steps.mean_ns or 0) * steps
    in_steps = in_replayed_steps(trials.steps_with_trials, trials.steps)
    finding = Finding(
        check=ID,
        title=(f"An autotuner times candidate kernels in {in_steps}: {trials.trials_per_step:.0f} timed trials a "
               f"step, each waited for by the host, hold {share:.0%} of those steps "
               # a stretch may run on past its step's end into the next (trit52: 414 ms a step of a 398 ms mean)
               f"({duration_text(min(trials.stretch_ns_per_step, trials.step_ns))} of their mean "
               f"{duration_text(trials.step_ns)}): a tuner runs again "
               "for each input shape it has not seen"),
        estimated_speedup=min(1.0, own / span),
        evidence={"trials_per_step": evidence(trials.trials_per_step, limits.min_trials, compare=">="),
                  "step_share": evidence(trials.steps_with_trials / trials.steps, limits.min_step_share, unit="ratio",
                                        compare=">="),
                  "window_share": evidence(min(1.0, own / span), limits.min_window_share, unit="ratio", compare=">="),
                  "stretch_share": evidence(share, unit="ratio"),
                  "stretch_ns_per_step": evidence(trials.stretch_ns_per_step, unit="ns"),
                  "trial_kernel_ns_per_step": evidence(trials.kernel_ns_per_step, unit="ns"),
                  "tuner_calls_per_step": evidence(trials.calls_per_step),
                  "own_launches_per_step": evidence(trials.own_launches_per_step)},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = min(own, span)
    finding.notes.append(f"{plural(round(trials.own_launches_per_step), 'launch')} a step inside the tuning "
                         "stretches are the step's own work (neither timed nor a warm-up): the replay keeps them")
    return finding
