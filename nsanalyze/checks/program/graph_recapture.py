"""A CUDA graph captured anew in every step: the graph's cost paid each time, its gain never had.

## What it detects
Stream captures (`cudaStreamBeginCapture` ... `cudaStreamEndCapture`, then `cudaGraphInstantiate`) in most of the
replayed steps around the median step (normalize.critical_path.graph_captures). A program that captures its step
once replays the same graph each time: its steps hold a graph launch and the copies into the graph's inputs, no
capture.

## Why it is slow
A graph saves the host's work of launching each kernel, but only when it is replayed. Captured again, every step
runs the program's Python and its launch calls to record the nodes (the kernels run nothing then), instantiates the
graph (milliseconds for a few hundred nodes) and destroys the one before: more host work than launching the kernels
directly, and the GPU idles through all of it.

## Example
```python
for batch in stream:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):          # captured again every step: a new input tensor each time
        out = model(batch)
    g.replay()
```

## Instead
```python
static_in = torch.empty_like(first_batch)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):              # captured once, on static buffers
    static_out = model(static_in)
for batch in stream:
    static_in.copy_(batch)             # new data into the graph's input
    g.replay()
```

## Known problems
The replay keeps the graph's launch and its kernels as measured; what capturing once leaves (the input copies)
is the profile's. Shapes that change from step to step need one graph per shape (a few buckets), which this saving
does not count. A program that captures on purpose each time (a graph per request of new shape) lands here too.

## Options
- `min_captures`: captures a step before the check speaks.
- `min_step_share`: the replayed steps that hold them.
- `min_window_share`: the saving's share of the window.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.checks.program.autotuning import host_cause_saving, in_most_steps, in_replayed_steps, replay_claims
from nsanalyze.numbers import duration_text

ID = "graph-recapture"
ADVICE = """Capture the graph once and replay it: copy each step's inputs into the graph's static buffers.

- `torch.cuda.graphs`: capture on static input tensors before the loop; each step `static_in.copy_(batch)` then
  `g.replay()`, and read the outputs from the tensors the capture returned.
- Inputs of a few shapes: one graph per shape (pad to buckets), each captured the first time its shape comes.
- `torch.compile(mode="reduce-overhead")` keeps its graphs per shape; `TORCH_LOGS=cudagraphs` shows re-recording
  (dynamic shapes, or inputs whose addresses change).
- CUDA C++: `cudaGraphExecUpdate` or `cudaGraphExecKernelNodeSetParams` changes a node's arguments without a new
  capture and instantiation.

```python
# before: captured and instantiated every step
for x in stream:
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    g.replay()
# after: captured once
static_x = torch.empty_like(x0)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = model(static_x)
for x in stream:
    static_x.copy_(x)
    g.replay()
```"""

CHECK = Check(
    id=ID,
    name="program.graph_recapture",
    title="A CUDA graph is captured and instantiated in every step",
    section="busy",
    requires=(),
    optional=("graph_captures", "budget"),
    thresholds={
        "min_captures": Threshold(1, "a program that captures its graph once captures nothing in its steady steps"),
        "min_step_share": Threshold(0.5, "in fewer steps a capture is a step that stands out (slow-steps)"),
        "min_window_share": Threshold(0.03, "under 3% of the window the captures are noise"),
    },
    speedup_model=("the replay of the steps with each graph captured once: the captures' calls and the host's time "
                   "between their begin and end (the program's code recording the nodes), and the instantiations and "
                   "destructions, gone; the graph launches and kernels kept (critical_path.graph_captures); capped by "
                   "that host time"),
    change={"uncapture": True},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def change_of(captures) -> dict:
    """The change this finding stands for: each graph captured once; where the steps' allocator calls are the
    captures' pools (critical_path.allocator_within), those calls gone with them, so that allocator-churn's change is
    part of this one (normalize.pricing.contains)."""
    return {**CHECK.change, **({"remove": ("allocator",), "allocator_within": True} if captures.allocator_within
                               else {})}


def captured(timeline, limits):
    """(the steps' graph captures, what capturing once saves over the window) where this check speaks, else None."""
    captures = getattr(timeline, "graph_captures", None)
    if captures is None or not in_most_steps(timeline, captures, captures.steps_with_captures,
                                             captures.captures_per_step, limits.min_captures, limits):
        return None
    saving = host_cause_saving(timeline, change_of(captures), captures.host_ns_per_step, captures.step_ns,
                               limits.min_window_share)
    return (captures, saving) if saving is not None else None


def claimed_parts(timeline, limits, taken: dict[str, float]) -> dict[str, float]:
    """What this check's finding claims of the budget's parts, within what the causes before it leave: no kernels,
    its saving from the idle parts (autotuning.replay_claims)."""
    found = captured(timeline, limits)
    if found is None or not timeline.budget:
        return {}
    return replay_claims(timeline, taken, found[1], 0.0, 0.0)


def run(timeline, limits) -> Finding | None:
    found = captured(timeline, limits)
    if found is None:
        return None
    captures, saving = found
    steps, span = timeline.steps.count, timeline.summary.span_ns
    per_step = saving / steps
    count = "" if round(captures.captures_per_step) == 1 else f"{captures.captures_per_step:.0f} graphs a step, "
    instantiate = sum(n for name, n in captures.calls if "Instantiate" in name)
    finding = Finding(
        check=ID,
        title=(f"A CUDA graph is captured again in {in_replayed_steps(captures.steps_with_captures, captures.steps)}: "
               f"{count}{plural(round(captures.recorded_launches_per_step), 'kernel launch')} recorded and "
               f"{duration_text(captures.graph_calls_ns_per_step)} of capture, instantiation and destruction calls a "
               f"step, {duration_text(captures.host_ns_per_step)} of host time with the code between them; captured "
               f"once, a step saves {duration_text(per_step)} of those steps' {duration_text(captures.step_ns)} mean"),
        estimated_speedup=min(1.0, saving / span),
        evidence={"captures_per_step": evidence(captures.captures_per_step, limits.min_captures, compare=">="),
                  "step_share": evidence(captures.steps_with_captures / captures.steps, limits.min_step_share,
                                         unit="ratio", compare=">="),
                  "window_share": evidence(min(1.0, saving / span), limits.min_window_share, unit="ratio",
                                           compare=">="),
                  "recorded_launches_per_step": evidence(captures.recorded_launches_per_step),
                  "graph_calls_ns_per_step": evidence(captures.graph_calls_ns_per_step, unit="ns"),
                  "capture_host_ns_per_step": evidence(captures.host_ns_per_step, unit="ns"),
                  "instantiations": evidence(instantiate),
                  "calls": [{"name": name, "calls": n} for name, n in captures.calls[:5]]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = saving
    finding.change = change_of(captures)
    return finding
