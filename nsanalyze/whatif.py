"""`nsanalyze whatif`: what a change would buy, by replaying the program's dependency graph
(normalize.critical_path) with it: kernels faster, host-activity classes gone, each step one graph
launch, outlier steps at the median, pageable copies at the pinned rate, a role's kernels launched as one
fused pass (their launch paths gone, the kernels kept).

The steady steps are replayed twice, as measured and changed; the saving is the difference of the two
replays, taken from the measured steps (so what the model misses cancels). The unchanged replay is the
self-check: off the measured steps by more than 2%, the prediction says it is not trusted."""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass

import numpy as np

from nsanalyze.errors import InputError
from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize.activity import PID_SHIFT, median
from nsanalyze.normalize.host_activity import class_order, rules
# OUTLIER_FACTOR: `--outliers` sets steps over it x the median to the median
from nsanalyze.normalize import pricing
from nsanalyze.normalize.pricing import OUTLIER_FACTOR, kernels_of
from nsanalyze.normalize.steps import find_steps
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profiles
from nsanalyze.read.files import ProfileKind, kind_of
from nsanalyze.read.nsys import NsysExport, sqlite_input_error


WHATIF_READS = "whatif replays an Nsight Systems export (.sqlite) or a PyTorch profiler (Kineto) trace"


@dataclass
class WhatIf:
    speedups: tuple = ()        # ("regex:PATTERN=FACTOR", ...)
    remove: tuple = ()          # host-activity classes
    graph: bool = False
    outliers: bool = False
    pinned: bool = False
    fuse: tuple = ()            # kernel roles (normalize/kernel_roles.csv, range_roles.csv), or loop
    untune: bool = False        # an autotuner's timed trials gone (normalize.tuning)
    untime: bool = False        # the program's own timing code gone (normalize.tuning.TimingCode)
    unbuild: bool = False       # no GPU code built in the steps (normalize.critical_path.code_builds)
    uncheck: bool = False       # the checks of values gone (normalize.critical_path.value_checks)
    data_on_gpu: bool = False   # the data the host handles kept on the GPU (normalize.critical_path.data_handled)
    uncapture: bool = False     # each CUDA graph captured once (normalize.critical_path.graph_captures)
    unannotate: bool = False    # PyTorch's operator ranges gone (normalize.critical_path.operator_ranges)


def check_roles(fuse) -> tuple:
    """`--fuse`'s roles, checked: one error naming the option and the roles there are (the work split's, and
    `loop`: the operations of the steps' loops of launches, normalize/launch_loops.py)."""
    from nsanalyze.normalize.critical_path import LOOP
    from nsanalyze.normalize.work import ROLES

    for role in fuse:
        if role not in ROLES + (LOOP,) and not re.fullmatch(re.escape(LOOP) + r":\d{1,6}", role):
            raise InputError("--fuse", f"{role!r} is no kernel role (one of: {', '.join(ROLES + (LOOP,))}, or "
                                       f"{LOOP}:N, one group of loops as launch-loop's finding names it)")
    return tuple(fuse)


def parse_changes(speedups, remove) -> tuple[tuple, frozenset]:
    """The command's change options, checked: one error naming the option and the reason."""
    parsed = []
    for text in speedups:
        try:
            parsed.append(cp.parse_speedup(text))
        except ValueError as exc:
            raise InputError("--speedup", str(exc)) from None
    known = [name for name in class_order() if any(r.name == name for r in rules())]
    for name in remove:
        if name not in known:
            raise InputError("--remove", f"{name!r} is no class of CUDA or OS calls (one of: {', '.join(known)})")
    return tuple(parsed), frozenset(remove)


def whatif(paths: list[str], options, asked: WhatIf) -> list[dict]:
    speedups, remove = parse_changes(asked.speedups, asked.remove)
    check_roles(asked.fuse)
    if not (speedups or remove or asked.graph or asked.outliers or asked.pinned or asked.fuse or asked.untune
            or asked.untime or asked.unbuild or asked.uncheck or asked.data_on_gpu or asked.uncapture
            or asked.unannotate):
        raise InputError("whatif", "no change given: --speedup, --remove, --graph, --outliers, --pinned, --fuse, "
                                   "--untune, --untime, --unbuild, --uncheck, --data-on-gpu, --uncapture or "
                                   "--unannotate")
    for path in paths:   # refused before an ncu report is read
        if os.path.isfile(path) and kind_of(path) is ProfileKind.NCU:
            raise InputError(path, WHATIF_READS)
    results = []
    for path in paths:
        for profile in read_profiles(path):
            if not isinstance(profile, NsysExport):
                raise InputError(getattr(profile, "path", path), WHATIF_READS)
            try:
                results.append(whatif_export(profile, options, speedups, remove, asked))
            except sqlite3.DatabaseError as exc:
                raise sqlite_input_error(profile.path, exc) from None
    return results


def whatif_export(export: NsysExport, options, speedups, remove, asked: WhatIf) -> dict:
    timeline = build_timeline(export, options.skip_first_ns, options.nvtx_range, options.window)
    steps = find_steps(export, options.nvtx_range)
    if steps is None or timeline.steps is None or timeline.step_starts is None or timeline.steps.clock != "gpu":
        raise InputError(export.path, "no steps on the GPU's clock in the window (an NVTX range per step, or a "
                                      "trace's ProfilerStep#N, that launches GPU work): whatif replays steps")
    pid = steps.global_tid >> PID_SHIFT if steps.global_tid is not None and steps.global_tid >= 0 else None
    activity = timeline.activity
    instances = timeline.step_indices
    if timeline.window.kind in ("nvtx-range", "skip-first"):
        # the timeline counts the steps inside the window from 0: the first is the instance whose host range
        # holds the call that launched the window's first step's first GPU work
        instances = _instances_from(export, steps, activity, timeline)
        if instances is None:
            raise InputError(export.path, "the window's steps could not be matched to their NVTX ranges to replay")
    block = cp.step_block(export, activity, activity.launching_threads, steps.host_starts, steps.host_ends,
                          instances, timeline.step_starts, pid, step_gpu_ends=timeline.step_ends, threads=False)
    if block is None:
        raise InputError(export.path, "the steps' calls and GPU work could not be replayed (no launch calls found)")
    pinned_rate = _pinned_rate(export, timeline) if asked.pinned else None
    change = cp.Change(speedups, remove, asked.graph, pinned_rate, fuse=tuple(asked.fuse), untuned=asked.untune,
                       untimed=asked.untime, unbuilt=asked.unbuild, unchecked=asked.uncheck,
                       data_on_gpu=asked.data_on_gpu, uncaptured=asked.uncapture,
                       unannotated=(block.graph.annotation_ns or 0.0) if asked.unannotate else 0.0)
    changed = cp.replay(block.graph, change)
    ok = block.base.valid(block.with_last) & changed.valid(block.with_last)
    predicted = block.measured - (block.replayed - changed.periods(block.with_last))
    measured = block.measured[ok]
    predicted = predicted[ok]
    if asked.outliers:
        typical = median(predicted)
        predicted = np.where(predicted > OUTLIER_FACTOR * typical, typical, predicted)
    base_step, predicted_step = median(measured), median(predicted)
    steps_in_window = timeline.steps.count
    base_window = float(timeline.summary.span_ns or measured.sum())
    saved_per_step = float(measured.sum() - predicted.sum()) / len(measured)
    # never under the GPU's work left (critical_path.saving_bound: the replayed steps may idle more than the others);
    # outlier steps set to the median take GPU work away beside the replay
    taken = (cp.gpu_work(block, block.base, ok) - cp.gpu_work(block, changed, ok)) / max(int(ok.sum()), 1)
    predicted_window = base_window - min(saved_per_step * steps_in_window, cp.idle_ns_and_taken(
        None if asked.outliers else timeline.summary.gpu_idle_ns, taken, steps_in_window))
    path_before = cp.critical_path(block.graph, block.base, block.median_step)
    path_after = cp.critical_path(block.graph, changed, block.median_step)
    changes = _changes(block.graph, speedups, remove, asked, pinned_rate, len(block.graph.step_first_op)) \
        + [_fuse_change(block, role) for role in asked.fuse]
    return {
        "profile": export.path,
        "base_step_ns": base_step, "predicted_step_ns": predicted_step,
        "base_mean_step_ns": float(measured.mean()), "predicted_mean_step_ns": float(predicted.mean()),
        "base_window_ns": base_window, "predicted_window_ns": predicted_window,
        "steps": int(steps_in_window), "replayed_steps": int(len(measured)),
        "self_check": {"replayed_ns": float(block.replayed[ok].sum()), "measured_ns": float(measured.sum()),
                       "error": block.self_check_error, "tolerance": cp.SELF_CHECK_TOLERANCE,
                       "trusted": block.trusted},
        "critical_path": _rounded(path_after), "critical_path_before": _rounded(path_before),
        "changes": changes,
        "notes": list(block.graph.notes) + _traced_host_note(export, timeline)
        + _replayed_note(int(len(measured)), int(steps_in_window)),
        "caveats": _uncapturable(export, block, asked) + _unrepeated(timeline, asked) + _matched_nothing(changes)
        + _loop_groups_note(changes) + _unshaped(timeline, block.graph, asked),
    }


def _fuse_change(block, role: str) -> dict:
    """A --fuse change: the kernels it fuses and the launch paths it takes away a step; for `loop`, each group of
    loops apart (`loop:N`, as launch-loop's finding prices one), so the user sees which loops it took."""
    def entry(fused: str) -> dict:   # kernels only: a loop's memsets go with it, but are none
        return {"role": fused,
                "kernels": int((cp.role_mask(block.graph, (fused,)) & cp.role_mask(block.graph, ("*",))).sum()),
                "launch_path_ns_per_step": cp.dropped_host_ns_per_step(block, (fused,))}
    change = {"change": "fuse", **entry(role)}
    if role == cp.LOOP:
        groups = sorted({loop.group for loop in block.graph.loops})
        motifs = {}
        for loop in block.graph.loops:
            motifs.setdefault(loop.group, loop.motif)
        change["groups"] = [{**entry(cp.loop_role(g)), "motif": list(motifs[g])[:LISTED_MOTIF]} for g in groups]
    return change


LISTED_MOTIF = 6   # kernels of a loop's motif named in a fused group's entry


def _loop_groups_note(changes: list[dict]) -> list[str]:
    """`--fuse loop` over several groups of loops (loops over different items: the optimizer's parameters, a model's
    layers) fuses them all, where launch-loop's finding prices one: a caveat (the terminal prints it beside the
    figure) names each and how to ask for one."""
    notes = []
    for change in changes:
        groups = change.get("groups") or []
        if len(groups) > 1:
            listed = "; ".join(f"{g['role']}: {g['kernels']:,} kernels ({' > '.join(g['motif'])})" for g in groups)
            notes.append(f"--fuse loop fused {len(groups)} groups of loops, loops over different items, which "
                         f"are different changes: {listed}; --fuse {groups[0]['role']} fuses one alone (launch-loop's "
                         "finding names the group it prices)")
    return notes


def _matched_nothing(changes: list[dict]) -> list[str]:
    """A change that found nothing to change in the replayed steps (a pattern no kernel name matches, a role none of
    their kernels has, a class none of their calls is in): its +0% is no prediction of that change."""
    said = []
    for change in changes:
        if change["change"] == "speedup" and change["kernels"] == 0:
            said.append(f"/{change['pattern']}/ matches no kernel of the replayed steps: nothing was changed")
        elif change["change"] == "fuse" and change["kernels"] == 0:
            said.append(f"no kernel of the replayed steps has the role {change['role']}: nothing was fused")
        elif change["change"] == "remove" and change["calls"] == 0:
            said.append(f"no call of the replayed steps is in the class {change['class']}: nothing was removed")
        elif change["change"] == "uncapture" and change["captures"] == 0:
            said.append("the replayed steps capture no CUDA graph: nothing was changed")
        elif change["change"] == "unannotate" and change["ranges"] == 0:
            said.append("the replayed steps push no PyTorch operator range (emit_nvtx, nsys's --pytorch=autograd-nvtx): "
                        "nothing was changed")
    return said


def _uncapturable(export: NsysExport, block, asked: WhatIf) -> list[str]:
    """With --graph, where the steps wait for the GPU: a CUDA graph cannot capture a step that waits, so the replay
    launches one graph a stretch between the waits (critical_path._as_graph_launch), and the line says so: one
    graph a step needs the waits out of the step first (blind_persample_base: 64 read-backs a step, -84% printed
    beside the report's "a CUDA graph cannot capture a step that waits" while the replay was one graph a step)."""
    if not asked.graph:
        return []
    from nsanalyze.normalize.waits import step_waits

    waits = step_waits(export, block.graph)
    if waits is None or waits.per_step < 1:
        return []
    times = "once" if round(waits.per_step) == 1 else f"{waits.per_step:.0f} times"
    return [f"a CUDA graph cannot capture a step that waits: each step waits for the GPU {times} (syncs, read-backs), "
            f"so the replay launches one graph a stretch between the waits ({waits.per_step + 1:.0f} a step); with "
            "the waits out of the step, one graph a step saves more"]


def _unshaped(timeline, graph, asked: WhatIf) -> list[str]:
    """With --unannotate: where the replayed steps hold too few nested operator ranges to measure a range's cost, the
    change was not made; where the ranges carry no inputs' shapes, the cost measured holds the operators' own dispatch
    and the prediction is too large (opt_loop_annot: 1.2 us a range measured, its twin without ranges no faster)."""
    if not asked.unannotate or graph.c_annotations is None or not graph.c_annotations.any():
        return []
    if graph.annotation_ns is None:
        return [f"too few operator ranges nested in one another (under {cp.MIN_NESTED_RANGES}) to measure what a "
                "range costs the host: nothing was changed"]
    launches = timeline.launches
    if launches is not None and launches.annotated_with_shapes:
        return []
    return ["these operator ranges carry no inputs' shapes (emit_nvtx() without record_shapes, nsys's "
            "--pytorch=autograd-nvtx): such ranges cost the host little, and the time measured between nested ones "
            "is mostly the operators' own dispatch, which stays: the prediction is an upper bound"]


def _unrepeated(timeline, asked: WhatIf) -> list[str]:
    """With --graph, where most pairs of consecutive steps launch other kernels (normalize.steps.shape_changes, as
    launch-overhead reads it): a graph replays the one path it captured (blind69_augment: a Python loop over a
    batch's images, each flipped or not at random, -82% printed without a word)."""
    changes = getattr(timeline, "shape_changes", None)
    if not asked.graph or changes is None or not changes.vary:
        return []
    what = ("other numbers of kernels (the host chooses what to launch step by step)"
            if changes.recount else "kernels of other launch shapes")
    return [f"a CUDA graph replays the launches it captured: {changes.changed} of {changes.compared} pairs of consecutive "
            f"steps launch {what}, and the prediction holds once every step launches the same work"]


def _replayed_note(replayed: int, steps: int) -> list[str]:
    """Where the replay covers fewer steps than the window holds (a block of consecutive steps around the median,
    critical_path.REPLAY_EVENTS_AT_MOST events at most): the step figures are that block's."""
    return [f"the replay covers {replayed} of the window's {steps} steps (consecutive steps around the median; the "
            "step figures are theirs)"] if replayed < steps else []


def _traced_host_note(export: NsysExport, timeline) -> list[str]:
    """A Kineto trace's replay keeps host times that hold the profiler's own work (pricing.traced_host_note)."""
    note = pricing.traced_host_note(timeline.launches.profiler) if export.kind == "kineto" and timeline.launches \
        else None
    return [note] if note else []


def _instances_from(export: NsysExport, steps, activity, timeline) -> np.ndarray | None:
    first = int(timeline.step_starts[0])
    ids = np.concatenate((activity.kernels.correlation_id[activity.kernels.start == first],
                          activity.copies.correlation_id[activity.copies.start == first]))
    ids = ids[ids >= 0]
    if not len(ids):
        return None
    row = export.query("SELECT MIN(start) FROM api_raw WHERE correlation_id = ?", (int(ids[0]),))
    if not row or row[0][0] is None:
        return None
    instance = int(np.searchsorted(steps.host_starts, row[0][0], side="right")) - 1
    instances = instance + (timeline.step_indices - timeline.step_indices[0])
    return instances if instance >= 0 and instances[-1] < steps.total else None


def _rounded(path):
    return [{"part": p["part"], "ns": int(round(p["ns"])), "share": p["share"]} for p in path] if path else []


def _changes(graph: cp.Graph, speedups, remove, asked: WhatIf, pinned_rate, steps: int) -> list[dict]:
    out = []
    durations = graph.o_end - graph.o_start
    for text, regex, factor in speedups:
        hit = np.array([names is not None and any(n and regex.search(n) for n in names) for names in graph.o_names],
                       dtype=bool)
        out.append({"change": "speedup", "pattern": text.removeprefix("regex:").rsplit("=", 1)[0], "factor": factor,
                    "kernels": int(hit.sum()), "kernel_ns_per_step": float(durations[hit].sum()) / steps})
    for name in sorted(remove):
        mine = graph.calls_of(name)
        waited = cp.gap_os_ns(graph, name)   # an OS class: its time between the CUDA calls (Graph.c_gap_os)
        out.append({"change": "remove", "class": name, "calls": int(mine.sum()) + int((waited > 0).sum()),
                    "host_ns_per_step": (float((graph.c_end - graph.c_start)[mine].sum()) + float(waited.sum()))
                    / steps})
    if asked.graph:
        out.append({"change": "graph", "what": "each step's launches as CUDA graph launches, one a stretch between "
                                                  "the step's waits (one a step where it does not wait)"})
    if asked.outliers:
        out.append({"change": "outliers", "what": f"steps over {OUTLIER_FACTOR:g}x the median set to the median"})
    if asked.untune:
        tuned = graph.tuning
        found = tuned is not None and tuned.any
        out.append({"change": "untune", "trials": int(tuned.trials.sum()) if found else 0,
                    "stretch_ns_per_step": float(tuned.stretch_ns.sum()) / steps if found else 0.0})
    if asked.untime:
        timing = graph.timing
        found = timing is not None and timing.any
        out.append({"change": "untime", "timings": int(timing.timings.sum()) if found else 0,
                    "calls": int(timing.removed.sum()) if found else 0,
                    "host_ns_per_step": cp.timing_ns_per_step(graph)})
    if asked.unbuild:
        builds = cp.code_builds(graph)
        out.append({"change": "unbuild", "loads": int(builds.sum()), "host_ns_per_step": cp.build_ns_per_step(graph)})
    if asked.uncheck:
        ops, _ = cp.value_checks(graph)
        reads = int((ops & (graph.o_copy_kind >= 0)).sum())
        out.append({"change": "uncheck", "reads": reads, "kernels": int(ops.sum()) - reads,
                    "ns_per_step": cp.checks_ns_per_step(graph)})
    if asked.data_on_gpu:
        copies, _, _, _ = cp.data_handled(graph)
        up = copies & cp.uploads(graph)
        out.append({"change": "data-on-gpu", "uploads": int(up.sum()), "reads": int((copies & ~up).sum()),
                    "ns_per_step": cp.data_ns_per_step(graph)})
    if asked.uncapture:
        inside, _ = cp.graph_captures(graph)
        out.append({"change": "uncapture", "captures": int(cp.capture_begins(graph).sum()),
                    "recorded_calls": int(inside.sum()),
                    "host_ns_per_step": cp.capture_ns_per_step(graph)})
    if asked.unannotate:
        pushed = graph.c_annotations
        range_ns = graph.annotation_ns
        out.append({"change": "unannotate", "ranges": int(pushed.sum()) if pushed is not None else 0,
                    "range_ns": range_ns,
                    "host_ns_per_step": cp.annotation_ns_per_step(graph, range_ns) if range_ns else 0.0})
    if asked.pinned:
        pageable = cp.pageable_copies(graph)
        kinds = sorted({int(k) for k in graph.o_copy_kind[pageable]})
        out.append({"change": "pinned", "copies": int(pageable.sum()),
                    "pinned_gb_per_s": {str(k): pinned_rate.get(k) for k in kinds}})
    return out


def _pinned_rate(export: NsysExport, timeline) -> dict:
    """Per memcpy kind id, the rate (bytes/ns = GB/s) pinned copies reach in that direction: what the
    pageable-memcpy check prices a pinned copy at (the export's own large pinned copies, else the GPU's link)."""
    from nsanalyze.checks.program._copies import reference_rate

    return {int(kind): reference_rate(timeline, str(label))[0]
            for kind, label in export.query("SELECT id, label FROM memcpy_kinds")}


def label(result: dict) -> str:
    words = []
    for change in result["changes"]:
        if change["change"] == "speedup":
            words.append(f"kernels /{change['pattern']}/ {change['factor']:g}x faster")
        elif change["change"] == "remove":
            words.append(f"no {change['class']} calls")
        elif change["change"] == "graph":
            words.append("each step one graph launch")
        elif change["change"] == "outliers":
            words.append("outlier steps at the median")
        elif change["change"] == "pinned":
            words.append("pageable copies pinned")
        elif change["change"] == "fuse":
            words.append(f"{kernels_of(change['role'])} launched as one fused pass")
        elif change["change"] == "untune":
            words.append(f"no timed trials ({change['trials']} in the replayed steps)")
        elif change["change"] == "untime":
            words.append(f"no timing code ({change['timings']} timed event pairs in the replayed steps)")
        elif change["change"] == "unbuild":
            words.append(f"no GPU code built in the steps ({change['loads']} loads in the replayed steps)")
        elif change["change"] == "uncheck":
            words.append(f"no checks of values ({change['reads']} one-byte reads in the replayed steps)")
        elif change["change"] == "uncapture":
            words.append(f"each CUDA graph captured once ({change['captures']} captures in the replayed steps gone "
                         "with their instantiation)")
        elif change["change"] == "unannotate":
            cost = f", {change['range_ns'] / 1e3:.2g} us each" if change["range_ns"] else ""
            words.append(f"no operator annotation ({change['ranges']:,} PyTorch operator ranges in the replayed "
                         f"steps{cost})")
        elif change["change"] == "data-on-gpu":
            words.append(f"the data kept on the GPU ({change['uploads']} uploads and {change['reads']} reads back in "
                         "the replayed steps gone with the host's work on them)")
    return ", ".join(words)
