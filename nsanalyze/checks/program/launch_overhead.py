"""Kernels shorter than their launch.

## What it detects
The budget's `idle_launch`: GPU idle time while the host issued CUDA calls back to back (each
call and the framework's dispatch before the next, gaps under 0.3 ms), with the kernels that run
shorter than their own launch call as evidence. CUDA calls of every host thread count (PyTorch
launches the backward pass from its autograd thread).

## Why it is slow
Launching costs a few microseconds of CPU each. When kernels take less than that, the GPU
finishes each before the next arrives and the program runs at the speed of the launch loop.

## Example
```cpp
for (int i = 0; i < 200; ++i) small_step<<<4, 256>>>(x, n);   // 0.8 us kernels, 7 us launches
```

## Instead
```cpp
cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);        // record once ...
for (int i = 0; i < 200; ++i) small_step<<<4, 256, 0, s>>>(x, n);
cudaStreamEndCapture(s, &graph); cudaGraphInstantiate(&exec, graph, 0);
cudaGraphLaunch(exec, s);                                      // ... replay with one launch
```

## Known problems
The launch call's CPU time includes driver work that a graph does not remove entirely. The first
launch of a kernel loads its module (100-200 us, once): programs of a handful of launches are
start-up, not launch-bound; the module-loading launch calls a longer run includes are left out of the
saving, and so is the GPU's idle under run-time module loads (the host-activity class jit: CuPy's and Numba's
cuModuleLoadData, nvrtc), which the budget counts as launch wait; a note says how long they took.
A change that is part of this one, unfused-optimizer's on an optimizer written as a loop (its launches fused,
its kernels kept), speaks beside it with what it saves alone; it is counted within this finding's saving,
never added to it, and the findings rank by their savings (the graph, which removes every launch, saves at
least as much): each names the other, since the part is often the smaller change to make (one flag).

Host syncs every step (`.item()`) empty the GPU's queue: the launches after each one pace the GPU, and the
budget counts that wait as launch time. Where the replay of the steps without the syncs saves more than their own
idle time, host-sync claims that wait (checks/program/_claims) and this finding prices what is left of it: the
syncs are the smaller change (a graph cannot capture a sync either).

A graph replays the launch shapes it captured. Where at least half of the pairs of consecutive steps (of the
first 64) launch kernels of other shapes (normalize.steps.shape_changes: a KV cache grown by `torch.cat` each
token), the advice starts with making them static, and `evidence.shape_changes` gives that share. Where most of
those pairs launch other numbers of kernels, the host chooses what to launch step by step (blind69_augment: a
Python loop over a batch's 256 images, each flipped or not at random), and the advice starts with doing that work
over the whole batch, its choices made on the GPU.

Where the host holds the step, a graph takes away the launch paths' host time, which is more than the GPU's
wait on them: the GPU's work, which ran while the host launched, then runs under the host work that stays (a
Python loop's per-parameter optimizer code, say). Where the replay of one graph launch a step saves more than
the whole launch wait (by over 10%), this finding claims the rest from the `idle_host` the wider causes leave
(checks/program/_claims), no more than the GPU's busy time (the work that moves), and host-compute counts
what it leaves of its part: 64 task heads in a Python loop (blind_heads_base) save 37.7 ms a step by the
replay; the finding says 36.8 ms, 32.4 ms of launch wait and the GPU's 4.4 ms a step of idle_host (the fix,
two batched products, saved 43.8 ms: it also took away 7 ms of per-parameter Python, 260 parameter tensors to
8, which a profile cannot tell from the user's own code).

PyTorch's NVTX mode with the inputs' shapes (`emit_nvtx(record_shapes=True)`, nsys's
`--pytorch=autograd-shapes-nvtx`) builds a text on the host for every operator: part of the launch wait is
the annotation's, and removing it is the smaller change. Where the replayed steps hold enough ranges nested in
one another, the median host time from an operator's range to the first range nested in it prices a range
(`evidence.operator_range_ns`; the next text made and pushed), and the finding stands for the annotation's
removal: each range's time taken off the host compute it lies in, replayed (blind82_emitnvtx: 10.8 and 7.5 ms
a step, the twins without emit_nvtx saved 13.5 and 7.9). A note gives the graph's saving. Without the shapes the
ranges cost nothing measurable (opt_loop_annot against opt_loop), and the saving stays the graph's.

## Options
- `min_idle_share`: idle_launch over the window before the check speaks.
- `min_launches`: launches in the window before the program counts as a loop.
- `one_time_launch_ns`: launch call of a kernel launched once above which it counts as a module load.
"""

import re

import numpy as np

from nsanalyze.normalize import pricing
from nsanalyze.normalize.host_activity import base_name
from nsanalyze.normalize.model import (OPERATOR_RANGES_PER_LAUNCH, OPERATOR_SHAPES_SHARE, Launches, ProfilerCost,
                                      ShapeChanges, plain)
from nsanalyze.normalize.waits import WAITING_CLASSES
from nsanalyze.numbers import duration_text
from nsanalyze.checks.base import Check, Finding, Threshold, budget_part, evidence, per_step_phrase, plural, \
    step_count, time_per_step
from nsanalyze.checks.program import event_timing, pageable_memcpy
from nsanalyze.checks.program._claims import claims_by_cause, launch_speaks, unclaimed_part
from nsanalyze.checks.program._roles import pytorch_inference
from nsanalyze.checks.program.host_sync import BACKWARD_TITLE, backward_waits_text, in_backward, poll_lead
from nsanalyze.checks.program._host_class import shared_lock_lead
from nsanalyze.text import code_span

ID = "launch-overhead"
BUDGET_PART = "idle_launch"
ADVICE = """Launch fewer, bigger kernels.

- Capture the loop in a CUDA graph (`cudaStreamBeginCapture`/`cudaGraphLaunch`;
  PyTorch: `torch.cuda.graphs` / `torch.compile(mode="reduce-overhead")`).
- Fuse element-wise kernels (`torch.compile`, a hand-written fused kernel).
- Do more work per launch: batch the steps, batch requests in generation, and call a model once on a batch, not
  in a Python loop over its items (`model(x[i:i + 1])` for each `i` launches every kernel once an item).

```python
# before: hundreds of tiny launches per step
# after
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g): out = step(static_in)
g.replay()
```"""

CHECK = Check(
    id=ID,
    name="program.launch.overhead",
    title="Launch-bound: the GPU waits on kernel launches",
    section="busy",
    requires=("launches", "budget"),
    optional=("timing_code", "step_waits"),   # what the steps' waits are (the advice's first lines)
    thresholds={"min_idle_share": Threshold(0.03, "the program findings' least share: 3% of the window idle behind launches is "
                                                    "worth a graph where the loop runs"),
                "min_launches": Threshold(10, "a handful of launches is start-up (the first launch loads the module), "
                                              "not a launch-bound loop"),
                "one_time_launch_ns": Threshold(50_000, "a kernel launched once whose launch call takes 50 us or more "
                                                        "loaded its module (measured: 141-157 us); that is start-up")},
    speedup_model=("the budget's idle_launch: GPU idle time while the host was issuing CUDA calls back to back "
                   "(calls and the framework's dispatch between them): what a CUDA graph or fusion removes"),
    budget_part=BUDGET_PART,
    change={"graph": True},  # the replay change priced (program.py)
    advice=ADVICE,
)


def _one_time_ns(launches: Launches, limits) -> float:
    """Launch time of kernels launched once with a module-loading first call: start-up, not overhead."""
    return float(sum(k.mean_launch_ns for k in launches.top
                     if k.launches == 1 and (k.mean_launch_ns or 0) >= limits.one_time_launch_ns))


# The title says "Launch-bound" where the launch wait holds this share of the window or more; under it the launches
# cost time but do not bound the program ("Launch overhead": workflow's 5% was called launch-bound)
LAUNCH_BOUND_SHARE = 0.25


def run(timeline, limits) -> Finding | None:
    idle_ns, share = unclaimed_part(timeline, BUDGET_PART)
    launches = timeline.launches
    if not launch_speaks(launches, share, limits):
        return None  # start-up only (the first launch loads the module: no loop to graph), or too little wait
    # module loads are not launches a graph removes: the first launches that load their module, and the idle
    # under run-time module loads (the jit class: cuModuleLoadData of CuPy's or Numba's kernels, nvrtc)
    first, jit = _one_time_ns(launches, limits), _jit_idle_ns(timeline)
    one_time = min(idle_ns, first + jit)
    step_text = per_step_phrase(timeline, BUDGET_PART, idle_ns, share)
    what = ("first launches that load their module" if first else "") + \
        (" and " if first and jit else "") + ("run-time module loads" if jit else "")
    loading = (f" ({one_time / 1e6:.2g} ms of it {what}: start-up, not saved)" if one_time >= 0.1 * idle_ns else "")
    between = _between_calls(timeline)
    where = (f"; {between[0]:.0%} of this wait lies between the CUDA calls (the host's per-operator code), "
             f"{between[1]:.0%} in them" if between else "")
    finding = Finding(
        check=ID,
        title=f"{'Launch-bound' if share >= LAUNCH_BOUND_SHARE else 'Launch overhead'}: the GPU waits on kernel "
              f"launches {share:.0%} of the window{step_text}{loading}{where}; "
              f"{launches.short_kernels:,} of {plural(launches.launches, 'kernel')} run shorter than their launch call",
        estimated_speedup=share,
        evidence={"idle_launch_share": evidence(share, limits.min_idle_share, unit="ratio"),
                  "idle_launch_ns": evidence(idle_ns, unit="ns"),
                  "short_kernels": evidence(launches.short_kernels),
                  "short_kernel_ns": evidence(launches.short_kernel_ns, unit="ns"),
                  "short_launch_api_ns": evidence(launches.short_launch_api_ns, unit="ns"),
                  "kernels": plain(launches.top)},
        advice=ADVICE,
        notes=[_left_out_note(one_time, first, jit)] if one_time else [],
    )
    finding.estimated_savings_ns = idle_ns - one_time   # module loading is once per process: no graph removes it
    if between:
        finding.evidence["idle_launch_between_calls_share"] = evidence(between[0], BETWEEN_CALLS_SHARE, unit="ratio",
                                                                       compare=">=")
        finding.advice = BETWEEN_CALLS_LEAD.format(share=f"{between[0]:.0%}") + finding.advice
    shapes = _changing_shapes(timeline)
    waits, placed = _waits_per_step(timeline), getattr(timeline, "step_waits", None)
    if waits is None and placed is not None and round(placed.polls_per_step) >= 1:   # waits no call's name says
        waits = (placed.per_step, placed.poll_call)
    if shapes or waits:   # a graph comes after what the lead paragraph asks: no graph example (before the paragraphs
        finding.advice = ADVICE.split("\n```python")[0]   # the framework's ops and the lead put above it)
    _framework_ops(finding, launches, timeline)
    if shapes:
        changes = timeline.shape_changes
        finding.advice = shapes + finding.advice
        finding.evidence["shape_changes"] = evidence(changes.changed / changes.compared, SHAPES_CHANGE_SHARE,
                                                     unit="ratio", compare=">=")
    if waits:
        timing = getattr(timeline, "timing_code", None)
        finding.advice = _waits_first(*waits, timing=timing, timing_found=timing is not None
                                      and event_timing.ID in claims_by_cause(timeline),
                                      waits=placed, uploads=pageable_memcpy.blocking_uploads_per_step(timeline),
                                      size_reads=_size_reads_per_step(timeline)) + finding.advice
        finding.evidence["waits_per_step"] = evidence(waits[0])
        if in_backward(placed):
            finding.title += BACKWARD_TITLE.format(n=placed.backward_per_step)
    if not shapes and not waits and pytorch_inference(timeline):
        finding.advice = INFERENCE_LEAD + finding.advice
    if launches.annotated_with_shapes:   # PyTorch's NVTX mode with the inputs' shapes: host work in every launch gap
        _annotation_first(finding, timeline, launches)
    blocking = getattr(timeline, "blocking_launch_share", None)
    if blocking is not None and blocking >= BLOCKING_SHARE:   # launches made synchronous: that setting first
        finding.title += (f"; {blocking:.0%} of the launch calls return only once their kernel has ended: the "
                          "launches are synchronous")
        finding.advice = BLOCKING_LEAD.format(share=f"{blocking:.0%}") + finding.advice
    shared = shared_lock_lead(timeline)
    if shared:   # the interpreter lock slows each launch: the other thread first
        finding.advice = shared + finding.advice
        finding.title += "; the launching thread shares Python's interpreter lock with another thread"
    return finding


# The title says where the launch wait lies where this share of it or more falls between the CUDA calls, not in them:
# the GPU then waits on the host's own code from one operator to the next (blind70_word2vec_fix1: 104 of the 139 ms
# between the calls, 28 ms in cudaLaunchKernel), which "waits on kernel launches" alone reads as the calls' cost
BETWEEN_CALLS_SHARE = 0.5
BETWEEN_CALLS_LEAD = ("{share} of this wait lies between the CUDA calls, not in them: the host's code from one "
                      "operator to the next (Python, the framework's dispatch and autograd) paces the GPU. A CUDA graph "
                      "(PyTorch: `torch.compile(mode=\"reduce-overhead\")`) removes that code with the launches; cheaper "
                      "launch calls alone would not.\n\n")


def _between_calls(timeline) -> tuple[float, float] | None:
    """(share of the budget's launch wait between the CUDA calls, share inside them), where the first is
    BETWEEN_CALLS_SHARE or more; else None. Host activity paints the wait with the classes whose calls cover it: what
    no CUDA class covers is the dispatch between calls (an OS call there, a lock wait, is still between them)."""
    activity = getattr(timeline, "host_activity", None)
    if activity is None or not activity.classes or len(timeline.devices or ()) > 1:
        return None   # (several GPUs: their shares are means over GPUs whose processes' calls differ: not said)
    in_calls = sum(c.idle_by_part.get(BUDGET_PART, 0.0) for c in activity.classes if c.source == "cuda")
    total = activity.idle_ns(BUDGET_PART) + activity.unexplained.get(BUDGET_PART, 0.0)
    if total <= 0 or (total - in_calls) / total < BETWEEN_CALLS_SHARE:
        return None
    return (total - in_calls) / total, in_calls / total


def _annotation_first(finding: Finding, timeline, launches: Launches) -> None:
    """PyTorch's NVTX mode with the inputs' shapes: its removal leads. Where the replayed steps measure a range's
    host time (Launches.operator_range_ns), the finding stands for that removal, its change's: the ranges' host time
    taken from the gaps they lie in, replayed (settle_program_findings prices `unannotate`), and a note gives the
    graph's saving, which holds it; else the saving stays the graph's, and the lead says the annotation's part of it
    is not measured."""
    per_launch, range_ns, steps = launches.operator_ranges_per_launch, launches.operator_range_ns, step_count(timeline)
    finding.evidence["operator_ranges_per_launch"] = evidence(per_launch, OPERATOR_RANGES_PER_LAUNCH, compare=">=")
    finding.evidence["operator_shapes_share"] = evidence(launches.operator_shapes_share, OPERATOR_SHAPES_SHARE,
                                                         unit="ratio", compare=">=")
    lead = ANNOTATION_LEAD.format(per=f"{per_launch:.1f}")
    # (the replay is one process's steps: rank prices no change where the window holds several GPUs)
    if range_ns is None or not finding.estimated_savings_ns or len(timeline.devices or ()) > 1:
        finding.title += (f"; PyTorch's NVTX mode annotates every operator ({per_launch:.1f} ranges a launch call), "
                          "its host work in these gaps")
        finding.advice = lead + ANNOTATION_UNMEASURED + finding.advice
        return
    graph_ns = finding.estimated_savings_ns
    graphed = pricing.price(timeline, CHECK.change, graph_ns)
    graph_ns = graphed.savings_ns if graphed is not None else graph_ns
    finding.estimated_savings_ns = min(finding.estimated_savings_ns, launches.operator_ranges * range_ns)
    finding.change = {"unannotate": range_ns}
    finding.evidence["operator_range_ns"] = evidence(range_ns, unit="ns")
    cost = f"{range_ns / 1e3:.2g} us"
    finding.title += (f"; PyTorch's NVTX mode annotates every operator ({per_launch:.1f} ranges a launch call, "
                      f"{cost} of host time each): its removal is this finding's saving, a graph's is larger")
    finding.advice = lead + ANNOTATION_MEASURED.format(cost=cost) + finding.advice
    per = time_per_step(steps)
    finding.notes.append(f"savings: the annotation's removal, not a graph's: {launches.operator_ranges:,} operator "
                         f"ranges in the window at {cost} each (the median host time from an operator's range to the "
                         "first range nested in it: the next text made and pushed, with a little of the operator's own "
                         "dispatch), taken from the host compute they lie in (on measured twins this came 6-20% under "
                         f"what leaving the annotation out saved); a CUDA graph of the step, which runs no operator's code and so no range, would save "
                         f"{per(graph_ns)} ({'the replay' if graphed is not None else 'its launch wait'}), this "
                         "included")


# PyTorch's operator NVTX ranges (steps.OPERATOR_RANGES) at one or more a kernel launch call, most with the
# inputs' shapes in their text (Launches.annotated_with_shapes): every operator annotated under record_shapes=True, each
# text built on the host as the operator runs (model.OPERATOR_SHAPES_SHARE: what such ranges cost, with shapes and
# without). Priced where the replayed steps measure a range's host time (critical_path.operator_ranges): blind82_emitnvtx
# predicted 10.8 and 7.5 ms a step, its twins without emit_nvtx saved 13.5 and 7.9 (-20%, -6%), where the graph this
# finding priced before said 22.4 and 13.9 (+66%, +76%)
ANNOTATION_LEAD = ("Every operator here runs inside an NVTX range of PyTorch's NVTX mode ({per} a kernel launch call) "
                   "whose text holds the inputs' shapes: `torch.autograd.profiler.emit_nvtx(record_shapes=True)` "
                   "around the loop, or nsys's `--pytorch=autograd-shapes-nvtx`. Each text is built on the host as "
                   "its operator runs, microseconds an operator, so part of this launch wait is the annotation's. "
                   "Where the program enters `emit_nvtx` itself (left from a profiling session), remove it first; "
                   "where nsys added it, profile once with `--pytorch=autograd-nvtx` (no shapes) or without it: the "
                   "wait that stays is the program's own. ")
ANNOTATION_MEASURED = ("This finding's saving is that removal's: each range's host time ({cost}, measured between "
                       "nested ranges) taken from the steps and replayed. A graph saves more (its note), on the wait "
                       "that stays.\n\n")
ANNOTATION_UNMEASURED = ("This finding's saving is a graph's, and smaller once the annotation is gone: how much of it "
                         "is the annotation's, this profile does not measure (too few nested ranges in the replayed "
                         "steps).\n\n")


# Of the steps' launch calls, this share or more returning only once their kernel ended: the launches are synchronous
# (critical_path.blocking_launch_share: blind82_launchblock under CUDA_LAUNCH_BLOCKING=1, all 515 a step; asynchronous
# loops of fixtures/real at most 2%). Unsetting it saved 17.6 and 13.7 ms a step (its two pairs), where the graph
# this finding prices would have had to wait all the same.
BLOCKING_SHARE = 0.9
BLOCKING_LEAD = ("{share} of the launch calls return only once their kernel has ended: the launches are synchronous, "
                 "the host waiting for each kernel before it launches the next. That is what `CUDA_LAUNCH_BLOCKING=1` "
                 "in the environment does (a debugging setting, often left in a launch script or a notebook), as do "
                 "a debugger or a sanitizer (`compute-sanitizer`) attached: unset it first (`env | grep CUDA_LAUNCH`), "
                 "and the host runs ahead of the GPU again. This finding's saving is the graph's below; without the "
                 "setting most of it comes back by itself.\n\n")


# A PyTorch loop that trains nothing (no backward, no optimizer kernels: inference or generation): the first thing to
# rule out is autograd left on. blind73_lmgen (chosen blind): GPT-2 generation under `model.eval()` without
# `torch.no_grad()` spent 59 us of host time a launch against 43 us with it (SQL: the twins' GPU periods over their
# 2,624 launches a step), the same kernels, 36.5 and 73.0 ms a step saved; nothing in an export says autograd was on,
# so the paragraph asks, and the savings stay the graph's.
INFERENCE_LEAD = ("These steps run no backward pass (inference or generation): first make sure autograd is off "
                  "(`torch.inference_mode()` or `torch.no_grad()` around the loop; `model.eval()` does not turn it off). "
                  "With autograd on, every operation records a graph node and keeps its inputs for a backward that "
                  "never runs: host time on every launch, and memory until the outputs are freed. This finding's "
                  "saving is a CUDA graph's of the step; autograd off saves part of it, how much the profile cannot "
                  "tell (a GPT-2 generation loop's twin without it saved a quarter to a half of its step).\n\n")



# Consecutive steps whose kernels change, at this share of them or more (model.ShapeChanges.vary)
SHAPES_CHANGE_SHARE = ShapeChanges.SHARE


def _changing_shapes(timeline) -> str:
    """A paragraph for steps whose kernels change launch shape from one step to the next (normalize.steps.
    shape_changes), which a CUDA graph's replay of captured shapes does not allow as they are; '' otherwise. Where
    the steps read back data-dependent sizes (model.Copies.size_reads), those sizes are what changes the shapes
    (blind74_masksync: its inputs padded to 128, its masked selections' kernels of another grid every step)."""
    changes = getattr(timeline, "shape_changes", None)
    if changes is None or not changes.vary:
        return ""
    if changes.recount:   # other numbers of kernels, not other shapes
        return (f"The steps launch other numbers of kernels from one step to the next ({changes.recounted} of the "
                f"first {changes.compared} pairs of consecutive steps differ in their count): the host decides step by step, "
                "or item by item, what to launch (a Python loop over a batch's items with random choices, as "
                "per-sample augmentation written per image does; a branch or loop on the data). A CUDA graph captures "
                "one such path. Make the work the same every step first: the per-item work as one operation over the "
                "whole batch, its random choices made as tensors on the GPU (masks, `torch.where`, gathered indices); "
                "then capture the step.\n\n")
    example = f"; most often {code_span(changes.example)}" if changes.example else ""   # (a name from the profile)
    if round(_size_reads_per_step(timeline)):
        return (f"The steps' kernels change launch shape from one step to the next ({changes.changed} of the first "
                f"{changes.compared} pairs of consecutive steps differ{example}): those after the data-dependent "
                "results above, whose sizes change with the data, and a CUDA graph replays the shapes it captured. "
                "The fixed-shape forms above make them static too.\n\n")
    return (f"The steps' kernels change launch shape from one step to the next ({changes.changed} of the first "
            f"{changes.compared} pairs of consecutive steps differ{example}), and a CUDA graph replays the shapes it "
            "captured. Make the shapes static first: a cache allocated once at its largest size and written in place "
            "(not grown by `torch.cat` each step: a static KV cache), inputs padded to a few sizes (one graph per "
            "size); then capture the step.\n\n")


# The host-activity classes of calls that wait for the GPU (normalize.waits.WAITING_CLASSES): a CUDA graph cannot
# capture them.


def _waits_per_step(timeline) -> tuple[float, str] | None:
    """(calls a median steady step makes that wait for the GPU, the commonest of them), or None where the steps make
    none or are not known: a step that waits cannot be captured whole in a CUDA graph."""
    activity = getattr(timeline, "host_activity", None)
    if activity is None:
        return None
    entries = [activity.by_class(name) for name in WAITING_CLASSES]
    entries = [e for e in entries if e is not None and e.step_calls is not None and len(e.step_calls)]
    if not entries:
        return None
    median = float(np.median(np.sum([e.step_calls for e in entries], axis=0)))
    if median < 1:
        return None
    calls = [call for e in entries for call in e.top_calls]
    return (median, max(calls, key=lambda call: call[1])[0]) if calls else None


# Waits a step from which the loop moves data piece by piece, not a loss read once a step: a read-back per input or
# request (the blind twin of per-image inference: 64 waits a step, batching the fix) or an upload per layer (a causal
# mask built on the CPU and copied in each of 6 layers: 6, building it once on the GPU the fix). Fewer moves are then
# the change; the waits' direction is not told apart here, so the advice names both.
PER_ITEM_WAITS = 4
# a wait for the whole device (PyTorch's `torch.cuda.synchronize()`): no copy or read-back behind it, unlike the
# stream syncs of `.item()` and `.cpu()`
DEVICE_SYNCS = ("cudaDeviceSynchronize", "cuCtxSynchronize")


def _size_reads_per_step(timeline) -> float:
    """Reads a steady step makes of a data-dependent result's size (model.Copies.size_reads)."""
    steps = step_count(timeline)
    copies = getattr(timeline, "copies", None)
    return copies.size_reads / steps if steps and copies is not None else 0.0


def _waits_first(per_step: float, name: str, timing=None, waits=None, uploads: float = 0.0,
                 timing_found: bool = False, size_reads: float = 0.0) -> str:
    """The advice's first lines where the steps wait for the GPU: what the waits are, and that they go first.
    `timing`: the steps' timing code (model.TimingCode), whose syncs, where they are most of the host's sync time,
    are the waits, named as event-timing's where that finding is there (`timing_found`: time53_resnet's stayed
    silent, its replay under its threshold); `waits`: where the replayed steps wait (model.StepWaits), the backward pass named where it makes
    most of them; `uploads`: blocking uploads a step, whose own waits they are where there are as many (own67_fixed:
    one `xb.cuda()` of a pageable batch a step, its wait read as a `.item()`); `size_reads`: reads a step of a
    data-dependent result's size, whose waits they are where they are half of them or more (blind74_masksync: 6 a
    step from boolean-mask indexing and `unique`, no `.item()` in the loop)."""
    times = "once" if round(per_step) == 1 else f"{per_step:.0f} times"
    if waits is not None and waits.polls_per_step >= 0.5 * per_step:   # the waits are poll loops
        return poll_lead(waits)
    backward = backward_waits_text(waits)
    if backward:
        return (f"Each step waits for the GPU {times} ({code_span(name)} and the like), and a CUDA graph cannot "
                "capture a step that waits. " + backward)
    if timing is not None and timing.sync_share >= 0.5:
        return (f"Each step waits for the GPU {times}, mostly in its own timing code ({timing.timings_per_step:.0f} "
                f"CUDA event pairs a step, each synchronized{': event-timing' if timing_found else ''}), and a CUDA "
                "graph cannot capture a step "
                "that waits: take the timing out of the loop first, then capture the step.\n\n")
    said = (f"Each step waits for the GPU {times} ({code_span(name)} and "
            "the like: `.item()`, `.cpu()`, `print(tensor)`, a synchronize), and a CUDA graph cannot capture a step "
            "that waits. ")
    if base_name(name) in DEVICE_SYNCS:   # torch.cuda.synchronize(): it moves nothing, it waits for all the work
        return (f"Each step calls {code_span(name)} {times} (`torch.cuda.synchronize()`: host timers between stages, "
                "or a synchronize left from debugging), waiting for all the GPU's work each time, and a CUDA graph "
                "cannot capture a step that waits: drop them first (time stages with CUDA events read every N steps, "
                "or profile instead), then capture the step.\n\n")
    if uploads and round(uploads) >= round(per_step):   # each wait an upload's own: pinned, queued, none is left
        return (f"Each step waits for the GPU {times} ({code_span(name)}), after {plural(round(uploads), 'upload')} a "
                "step from pageable memory (a blocking `.to('cuda')` or `.cuda()` copies, then waits), and a CUDA graph "
                "cannot capture a step that waits: upload from pinned memory with `non_blocking=True` "
                "(pageable-memcpy), then capture the step.\n\n")
    if round(size_reads) and size_reads >= 0.5 * per_step:   # the sizes of data-dependent results, read back
        return (f"Each step waits for the GPU {times} ({code_span(name)}), {size_reads:.0f} of them to read back "
                "how many elements a data-dependent operation produced (a count read right after CUB's counting or "
                "selecting kernels): boolean-mask indexing (`x[mask]`), `nonzero`, `masked_select`, `unique`. The "
                "host cannot go on before it knows the size, and a CUDA graph cannot capture a step that waits. Keep "
                "the shapes fixed: apply the mask as a factor or an ignored label (`F.cross_entropy(logits, labels, "
                "ignore_index=-100)`, `(loss * mask).sum() / mask.sum()`, `torch.where(mask, x, 0)`), count with "
                "`bincount(minlength=...)` or `scatter_add_`, then capture the step.\n\n")
    if per_step >= PER_ITEM_WAITS:
        return said + ("The loop moves data between host and GPU piece by piece and waits each time (a read-back or "
                       "an upload per item, request or layer): first make the moves fewer (batch the inputs or "
                       "requests it handles one at a time, build constants on the GPU once, one read-back a step), "
                       "then capture what remains.\n\n")
    if round(per_step) == 1 and waits is not None and round(waits.at_end_per_step) == 1:   # at the step's end
        return said + ("The one wait comes after the step's last launch: the step reads its result back (scores, a "
                       "token, a loss), and all the work before that read can be one graph, launched once a step "
                       "before it. Where the loop tests the value (`if token.item() == eos`), test it every N steps "
                       "instead and capture the N steps between the tests.\n\n")
    if round(per_step) == 1:   # one value a step: often one the loop itself tests (token_gen: `token.item() == eos`)
        return said + ("One wait a step is often a value the loop itself tests: a generated token against the end of "
                       "sequence (`if token.item() == eos`), a loss for early stopping. Test it every N steps instead "
                       "(run N steps, then check; the few steps past the end cost little), and read logged values "
                       "back every N steps (accumulate them on the GPU); then capture the steps between the tests.\n\n")
    return said + ("Read the values back every N steps instead (accumulate them on the GPU), then capture the "
                   "step.\n\n")


def _left_out_note(total: float, first: float, jit: float) -> str:
    parts = ([f"{duration_text(first)} of launch calls of kernels launched once that load their module"] if first
             else []) \
        + ([f"{duration_text(jit)} of GPU idle under run-time module loads (cuModuleLoadData, nvrtc: host-activity "
            "class jit)"] if jit else [])
    said = parts[0] if len(parts) == 1 else f"{duration_text(total)}: " + "; ".join(parts)
    return f"leaves out {said} (start-up, once per process)"


def _jit_idle_ns(timeline) -> float:
    """The launch part's idle under the calls of the host-activity class `jit` (module loads, run-time links)."""
    activity = getattr(timeline, "host_activity", None)
    entry = activity.by_class("jit") if activity is not None else None
    return float(entry.idle_by_part.get(BUDGET_PART, 0.0)) if entry is not None else 0.0


# A PyTorch profiler (Kineto) trace that records this many CPU ops per kernel launch, or the ops' input
# shapes, spends host time of its own on each op it records. Measured on the launch-bound MLP of
# fixtures/real/graphs_train.py (73 launches a step, 5.6 CPU ops a launch): 47.8 us of host time a launch
# under nsys (3.49 ms steps), 62.9 us under torch.profiler (4.59 ms), 42.5 us under torch.profiler with
# record_shapes (3.10 ms) in a run whose every CUDA call was faster (cudaLaunchKernel 5.5 us against 8.0):
# the profiler's share cannot be told from the host's own speed within one trace, so the note gives the
# trace's figures and bounds the saving by the traced time instead of correcting it.
PROFILER_OPS_PER_LAUNCH = 4.0


def _framework_ops(finding: Finding, launches: Launches, timeline=None) -> None:
    """Kineto traces: the top-level framework op or annotation that issues most launches, and a note
    when the profiler's own CPU-side work inflates the host time this finding is read off."""
    by_op, profiler = launches.by_op or (), launches.profiler or ProfilerCost()
    if by_op and profiler.launches:
        top, per_step = by_op[0], profiler.launches_per_step
        if top.per_step and per_step:
            issues = f" issues {top.per_step:.0f} of {plural(round(per_step), 'launch')} a step"
        else:
            issues = f" issues {top.launches} of {plural(profiler.launches, 'launch')}"
        if top.loop_ops:   # a loop of a few ops in a row (read.kineto._op_loops): named as the loop
            layers = any(LAYER_OP.search(op) for op in top.loop_ops)
            finding.title += f"; a loop of {_and(top.loop_ops)}{' (layers of one shape)' if layers else ''}{issues}"
            finding.advice = (f"A loop of {_and([code_span(op) for op in top.loop_ops])}{issues}: "
                              + (OP_LAYERS_ADVICE if layers else OP_LOOP_ADVICE) + finding.advice)
        else:
            finding.title += f"; {top.op}{issues}"
            # the op's name is the trace's text: in the advice (Markdown) a code span it cannot close
            finding.advice = _op_advice(top.op, code_span(top.op) + issues) + finding.advice
        finding.evidence["launches_by_op"] = plain(by_op[:5])
    profiler_caveat(finding, launches, timeline, "launch-bound programs")


def profiler_caveat(finding: Finding, launches: Launches | None, timeline, where_it_shows: str) -> None:
    """A note (and its evidence) on a finding read off host time when the trace's profiler recorded enough
    per launch to inflate that time (see PROFILER_OPS_PER_LAUNCH): the saving is then an upper bound."""
    profiler = (launches.profiler if launches else None) or ProfilerCost()
    ops_per_launch = profiler.cpu_ops_per_launch or 0
    if not (profiler.record_shapes or ops_per_launch >= PROFILER_OPS_PER_LAUNCH):
        return
    host_per_launch = _host_ns_per_launch(timeline, profiler)
    why = f"{ops_per_launch:.1f} CPU ops recorded a launch" + (", with record_shapes=True"
                                                               if profiler.record_shapes else "")
    finding.evidence["cpu_ops_per_launch"] = evidence(ops_per_launch, PROFILER_OPS_PER_LAUNCH)
    where = ""
    if host_per_launch:
        finding.evidence["host_ns_per_launch"] = evidence(host_per_launch, unit="ns")
        where = f" is part of the {host_per_launch / 1e3:.1f} us of host time a launch in this trace and"
    finding.notes.append(
        f"the PyTorch profiler's own CPU-side work ({why}){where} inflates host time in {where_it_shows}: "
        "this idle time and its saving are an upper bound within the traced time; confirm with nsys"
        + (" or a trace without record_shapes" if profiler.record_shapes else ""))


def _host_ns_per_launch(timeline, profiler: ProfilerCost) -> float | None:
    """The host range of a median step over the launches a step: the host time each launch costs."""
    steps = getattr(timeline, "steps", None)
    host, per_step = steps.host_median_ns if steps else None, profiler.launches_per_step
    return float(host) / per_step if host and per_step else None


OP_LOOP_ADVICE = ("a loop in the program's source that runs these ops on one tensor at a time (an EMA of the weights, a "
                  "hand-written update or clipping over the parameters). The `torch._foreach_*` ops take the lists and "
                  "launch a few kernels for all of them (`torch._foreach_lerp_(ema, params, 1 - decay)`); then fuse or "
                  "graph what is left.\n\n")
# an op of a loop that is a matrix product or a convolution: the loop is a stack of layers of one shape (nn.Sequential
# of equal blocks), whose work no foreach op takes; a graph or torch.compile launches it whole
LAYER_OP = re.compile(r"linear|matmul|\bmm\b|::mm\b|addmm|bmm|conv|einsum|Linear|Mm|Conv", re.IGNORECASE)
OP_LAYERS_ADVICE = ("layers of one shape run one after another (a stack of equal blocks), each a few short kernels: "
                    "capture the stack in a CUDA graph or `torch.compile` it, so that it launches as a few operations."
                    "\n\n")


def _and(names: list[str] | tuple) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _op_advice(op: str, phrase: str) -> str:
    if op.startswith("Optimizer.") or "optim" in op.lower():
        return (f"{phrase}: an optimizer that loops over its parameters launches a few kernels per tensor; "
                "construct it with `foreach=True` (one launch per group of tensors) or `fused=True` "
                "(`torch.optim.AdamW(params, fused=True)`: one kernel a step).\n\n")
    return f"{phrase}: fuse or graph what it runs first (`torch.compile`, CUDA graphs).\n\n"

