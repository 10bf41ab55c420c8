"""A program finding priced by the change it stands for: the steps around the median step replayed with the
change (normalize.critical_path), against the same replay without it; the window's steps where those around the
median are not a sample of them (critical_path.pricing_block: the timeline's `pricing_block`).

Each program check declares its change (`change=` of its `Check`, in `nsanalyze whatif`'s vocabulary):
`{"remove": (CLASS, ...)}` host-activity classes gone; `{"graph": True}` each step one graph launch;
`{"pinned": True}` pageable copies at the pinned rate; `{"outliers": True}` steps over 1.5x the median at
the median (capped by the time the check measured for its cause: other causes' slow steps are not its); `{"speedup": (ROLE, ...)}` the kernels of these roles faster by the factor that takes the
finding's own savings off their time; `{"remove_kernels": (ROLE, ...)}` those kernels gone with the launch
calls that launched nothing else (their time counted first in the finding's savings); `{"fuse": (ROLE, ...)}`
the kernels of these roles launched as one fused pass (their launch paths gone, their GPU time kept); `{"untune": True}`
the timed trials of an autotuner gone (normalize.tuning: its calls, kernels and the host's time between them, the
step's own launches kept); `{"untime": True}` the program's own timing code gone (its event calls and syncs with the
host's time on their way, normalize.tuning.TimingCode); `{"unbuild": True}` no GPU code built in the steps (the
code's loads gone with the host's time building it before each, critical_path.code_builds). A GPU change on a
step the host holds saves down to the host's floor; what the replay saves is capped by the time the change
takes away (the kernels' time, the class's host time), never more than the time it comes from."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize import gemm_loads, precision
from nsanalyze.normalize.activity import median

OUTLIER_FACTOR = 1.5   # a step this many times the median step is an outlier (`--outliers`)
# The replay and the check's own estimate this far apart (relative): the finding says which it used.
DISAGREE = 0.1
# A change that turns a GPU resting between steps (busy under RESTING_BUSY of them) into one that never rests
# (SUSTAINED_BUSY or more): the finding says the kernels' durations are those measured at rest. On the H200
# twins matmul_sync -> matmul_async the same 27 kernels a step took 3.58 ms, then 4.09 ms once the GPU never
# rested (+14%: its clock under sustained load), so the fix saved 1.68 ms of the replay's 2.12 ms.
RESTING_BUSY, SUSTAINED_BUSY = 0.8, 0.95


@dataclass
class Priced:
    """What the replay of a finding's change saves over the window, and the time it is capped by."""

    savings_ns: float            # what the finding now promises (replayed, capped)
    replayed_ns: float           # the replay's saving over the window, before the cap
    cap_ns: float | None         # the time the change takes away (None: the budget's cap only)
    change: str                  # the change in words
    note: str | None = None      # what the replay cannot hold (the GPU's clock once it never rests)
    dropped_host_ns: float = 0.0  # of what it takes away, the host's launch paths of the kernels it removes or fuses
    replayed_change: object = None   # the critical_path.Change replayed (block_path_after reads what limits next)


def kernels_of(role: str) -> str:
    """A fused role in words: a role's kernels, or a loop's (critical_path.LOOP, "loop:N": one group of loops)."""
    if role == cp.LOOP:
        return "the loops' kernels"
    if role.startswith(cp.LOOP + ":"):
        return "the loop's kernels"
    return f"{role} kernels"


def role_ns(timeline, roles) -> float:
    """The window's kernel time in these roles (timeline.work; "*": every kernel; NARROW_GEMM: the tensor-core GEMMs
    on narrow loads, FP64: the kernels that compute in float64, TF32: the library matrix products on TF32 inputs, from
    the work split's kernels)."""
    work = timeline.work or ()
    ns = float(sum(r.ns for r in work if "*" in roles or r.role in roles))
    analysis = timeline.work_analysis
    if cp.NARROW_GEMM in roles and "*" not in roles and analysis is not None:
        ns += float(sum(k.ns for k in analysis.by_kernel
                        if k.role == "matmul_tensor" and gemm_loads.narrow(k.demangled or k.name)))
    if cp.FP64 in roles and "*" not in roles and analysis is not None:
        ns += float(sum(k.ns for k in analysis.by_kernel if precision.fp64(k.demangled or k.name)))
    if cp.TF32 in roles and "*" not in roles and analysis is not None:
        ns += float(sum(k.ns for k in analysis.by_kernel if precision.tf32(k.demangled or k.name)))
    return ns


def outlier_excess(periods: np.ndarray) -> float:
    """The time steps over OUTLIER_FACTOR x the median step spend beyond the median: what setting them to
    the median saves."""
    if periods is None or len(periods) < 3:
        return 0.0
    typical = median(periods)
    slow = periods > OUTLIER_FACTOR * typical
    return float((periods[slow] - typical).sum())


def price(timeline, declared: dict | None, own_ns: float, pinned_rate: dict | None = None) -> Priced | None:
    """The finding's savings by its change's replay; None where no change is declared, the steps are not
    replayed (no steps on the GPU's clock) or the replay misses the measured steps (the self-check)."""
    if not declared:
        return None
    steps = timeline.steps
    count = steps.count if steps is not None else 0
    if declared.get("outliers"):
        periods = timeline.step_periods
        if periods is None or len(periods) < 3:
            return None
        excess = outlier_excess(np.asarray(periods, dtype=np.float64))
        # slow for this cause alone: capped by the time the check measured for it (the phase's, the excess)
        return Priced(min(excess, own_ns), excess, own_ns, f"steps over {OUTLIER_FACTOR:g}x the median at the median")
    block = getattr(timeline, "pricing_block", None)
    if block is None or not block.trusted or not count:
        return None
    words, cap_per_step, dropped_per_step = [], 0.0, 0.0
    roles, removed = [], tuple(declared.get("remove_kernels", ()))
    capped = False
    if removed:
        roles.append((removed, math.inf))
        words.append(f"{'/'.join(removed)} kernels gone with their launches")
        dropped_per_step += cp.dropped_host_ns_per_step(block, removed)
        cap_per_step += cp.kernel_ns_per_step(block, removed) + dropped_per_step
        capped = True
    if declared.get("speedup"):
        sped = tuple(declared["speedup"])
        left = max(0.0, own_ns - role_ns(timeline, removed))
        total = role_ns(timeline, sped)
        if total <= 0 or left <= 0:
            if not removed:
                return None
        else:
            share = min(left / total, 1.0)
            factor = math.inf if share >= 1.0 else 1.0 / (1.0 - share)
            roles.append((sped, factor))
            words.append(f"{'/'.join(sped)} kernels {factor:.2g}x faster" if math.isfinite(factor)
                         else f"{'/'.join(sped)} kernels gone")
            cap_per_step += cp.kernel_ns_per_step(block, sped) * share
            capped = True
    classes = tuple(declared.get("remove", ()))
    if classes:
        words.append(f"no {'/'.join(classes)} calls")
        cap_per_step += cp.class_ns_per_step(block, classes)
        capped = True
    fused = tuple(declared.get("fuse", ()))
    if fused:
        words.append(f"{'/'.join(kernels_of(role) for role in fused)} launched as one fused pass")
        fused_paths = cp.dropped_host_ns_per_step(block, fused)   # their launch paths: what the change drops
        dropped_per_step += fused_paths
        cap_per_step += fused_paths
        capped = True
    pinned = pinned_rate if declared.get("pinned") else None
    if declared.get("pinned"):
        if not pinned:
            return None
        graph = block.graph
        waits = cp.copy_waits(graph, cp.pageable_copies(graph) & cp.uploads(graph))
        # (the replay drops an upload's own wait: the pinned copy made with non_blocking=True; said, as pinning alone
        # keeps a blocking .to('cuda') waiting: blind75_tokenize's 2.01 ms a step were those waits, a user read)
        words.append("pageable copies at the pinned rate, with non_blocking=True (their calls return once queued"
                     + (f"; the uploads' waits gone, {waits.sum() / len(block.measured):,.3g} a step" if waits.any()
                        else "") + ")")
        cap_per_step += cp.pageable_ns_per_step(block)   # never more than the copies' time and their calls'
        capped = True
    if declared.get("graph"):   # a graph cannot capture a wait: a step that waits is a graph a stretch between
        graphs = cp.graphs_per_step(block.graph, classes)
        words.append("each step one graph launch" if graphs < 1.5 else
                     f"each step's launches as {graphs:.0f} graph launches, one a stretch between its waits")
    untuned = bool(declared.get("untune")) and block.graph.tuning is not None and block.graph.tuning.any
    if untuned:
        words.append("no timed trials (the tuner's calls, kernels and host time between them)")
        cap_per_step += cp.tuning_ns_per_step(block)   # never more than its stretches
        capped = True
    untimed = bool(declared.get("untime")) and block.graph.timing is not None and block.graph.timing.any
    if untimed:
        words.append("no timing code (its event calls, syncs and the host's time on their way)")
        cap_per_step += cp.timing_ns_per_step(block.graph)   # never more than its calls and their way
        capped = True
    unbuilt = bool(declared.get("unbuild")) and bool(cp.code_builds(block.graph).any())
    if unbuilt:
        words.append("no GPU code built in the steps (its loads and the host's time building it before each)")
        cap_per_step += cp.build_ns_per_step(block.graph)   # never more than the loads and their builds
        capped = True
    unchecked = bool(declared.get("uncheck")) and bool(cp.value_checks(block.graph)[0].any())
    if unchecked:
        words.append("no checks of values (each one-byte read to the host, the kernels that made it, their calls, "
                     "its wait and the host's time on their way)")
        cap_per_step += cp.checks_ns_per_step(block.graph)   # never more than the checks' own time
        capped = True
    uncaptured = bool(declared.get("uncapture")) and bool(cp.graph_captures(block.graph)[0].any())
    if uncaptured:
        words.append("each CUDA graph captured once (its capture, instantiation and destruction gone from the steps)")
        cap_per_step += cp.capture_ns_per_step(block.graph)   # never more than the captures' host time
        capped = True
    on_gpu = bool(declared.get("data_on_gpu")) and bool(cp.data_handled(block.graph)[0].any())
    if on_gpu:
        words.append("the data kept on the GPU (each upload and read back gone with the host's work on it)")
        cap_per_step += cp.data_ns_per_step(block.graph)   # never more than the copies, their calls and that work
        capped = True
    range_ns = float(declared.get("unannotate") or 0.0) if block.graph.c_annotations is not None else 0.0
    if range_ns:
        words.append(f"no operator annotation (each of PyTorch's operator ranges, {range_ns / 1e3:.2g} us of host time, "
                     "gone)")
        cap_per_step += cp.annotation_ns_per_step(block.graph, range_ns)   # never more than the ranges' time
        capped = True
    change = cp.Change(remove=frozenset(classes), graph=bool(declared.get("graph")), pinned_rate=pinned,
                       roles=tuple(roles), fuse=fused, untuned=untuned, untimed=untimed, unbuilt=unbuilt,
                       unchecked=unchecked, data_on_gpu=on_gpu, uncaptured=uncaptured, unannotated=range_ns)
    if change.empty:
        return None
    per_step, busy_before, busy_after = cp.saving_and_busy(block, change)
    if per_step is None:
        return None
    # The replayed steps' saved share, applied to the window's mean step, not their time a step:
    # - a tuner's time follows its steps' shapes (the step is mostly tuning, each new shape its own;
    #   blind_cudnnbench_base2: a 38 ms step among the 6 replayed, their mean 430 ms against the window's 534);
    # - a saving a step over the window's mean step: the replayed steps ran longer than the mean (blind69_augment:
    #   57.5 ms a step saved of steps longer than the window's 53.7 ms mean, 4.20 s of a 3.92 s window). Work a step
    #   the change removes whatever the step's length (a stack's forward run again) keeps its time a step below that.
    if (untuned or per_step > (steps.mean_ns or 0)) and steps.mean_ns and len(block.measured) and \
            block.measured.mean() > 0:
        per_step = per_step / float(block.measured.mean()) * float(steps.mean_ns)
        cap_per_step *= float(steps.mean_ns) / float(block.measured.mean())
    replayed = max(0.0, per_step) * count
    # never past the window's GPU idle and the GPU time the change takes away (critical_path.saving_in_window: the
    # block's saving a step applied to steps that idle less)
    bound = cp.saving_bound(block, change, count, window_idle_ns(timeline))
    notes = []
    if replayed > bound * (1.0 + SAYS_BOUND):
        notes.append(f"the replayed steps' saving, {replayed / count / 1e6:.2f} ms a step over the window's {count} "
                     f"steps, would pass the window's GPU idle and the GPU time the change takes away "
                     f"({bound / count / 1e6:.2f} ms a step): held to it, as the GPU's work left is a floor (the "
                     "replayed steps idle more than the window's others)")
    replayed = min(replayed, bound)
    cap = cap_per_step * count if capped else None
    savings = min(replayed, cap) if cap is not None else replayed
    if busy_before is not None and busy_after is not None and busy_before < RESTING_BUSY <= SUSTAINED_BUSY <= busy_after:
        notes.append(f"the replay keeps the kernels' durations as measured with the GPU busy {busy_before:.0%} of a "
                     f"step; after the change it is busy {busy_after:.0%}: a GPU that never rests may lower its clock "
                     "(power, heat) and run them slower, which saves less (no clock is predicted)")
    note = "; ".join(notes) or None
    return Priced(savings, replayed, cap, ", ".join(words), note, dropped_per_step * count, change)


# A replay held to the window's floor this far (relative) or more says so: less moves no figure's three digits
SAYS_BOUND = 0.005


def window_idle_ns(timeline) -> float | None:
    """The window's GPU idle (None where the timeline has no summary): what a change of the host's alone saves at most."""
    summary = getattr(timeline, "summary", None)
    return summary.gpu_idle_ns if summary is not None else None


def contains(outer: dict | None, inner: dict | None) -> bool:
    """Whether the change `outer` makes every change `inner` makes, so that what inner saves is part of what outer
    saves (never added to it): each step as one graph launch drops every launch path and keeps every kernel's
    time, and so holds a role's kernels launched as one fused pass (their launch paths gone, their time kept); the
    data kept on the GPU, where its copies are the pageable ones (`pageable_within`), holds those copies
    pinned, and where the syncs are their waits (`syncs_within`), the syncs gone; each graph captured once, where
    the steps' allocator calls are the captures' pools (`allocator_within`), the allocator's calls gone."""
    if not outer or not inner or outer == inner:
        return False
    if outer.get("pageable_within") and set(inner) == {"pinned"}:   # the copies pinning would speed up are gone
        return True
    if outer.get("syncs_within") and inner == {"remove": ("sync",)}:   # ... and the syncs, their waits
        return True
    if outer.get("allocator_within") and inner == {"remove": ("allocator",)}:   # a graph's pool kept: no churn
        return True
    return bool(outer.get("graph")) and set(inner) == {"fuse"}


def traced_host_note(profiler) -> str | None:
    """For a replay of a Kineto trace (its launches' ProfilerCost): the host times it keeps hold the PyTorch
    profiler's own CPU-side work, and the profiled host's speed moved with the change on round 54's traced twins
    (docs/performance.md), so the replayed saving is the traced run's. None for an nsys export."""
    if profiler is None or not profiler.cpu_ops_per_launch:
        return None
    shapes = ", with record_shapes=True" if profiler.record_shapes else ""
    return (f"host times are the trace's, the PyTorch profiler's own CPU-side work in them "
            f"({profiler.cpu_ops_per_launch:.1f} CPU ops recorded a launch{shapes}): without the profiler a change "
            "that takes host work away may save less, and one that speeds the GPU up may save more; and a profiled "
            "host's speed can move with the change itself, so the profiled fix may save more or less than this "
            "replay")
