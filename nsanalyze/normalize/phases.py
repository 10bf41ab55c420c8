"""Phases of a run: the top-level NVTX ranges over the whole capture, grouped by name.

Real programs have phases (loading, warm-up, training steps, evaluation, checkpoints, a request loop).
The analysis window keeps one of them (the steady steps); a phase outside it must still be seen, and a
phase inside it that is not a step (a checkpoint between epochs) can hold most of the window. Each
phase gets its instances, its host time and a budget from a capture-wide budget (normalize.budget),
so its share of idle time and its cause can be told. Names are normalized (`eval 3` -> `eval N`).
"""

from __future__ import annotations

import re

import numpy as np

from nsanalyze.normalize.activity import process_of
from nsanalyze.normalize.budget import IDLE_PARTS, PARTS, as_parts
from nsanalyze.normalize.steps import normalize_name
from nsanalyze.normalize.nvtx_ranges import Ranges

MAX_PHASES = 8
# Ranges named after code, not after a phase of the run: PyTorch's emit_nvtx op ranges (`aten::linear,
# seq = 12, op_id = 40`) and C++ function scopes (`FSDP::pre_forward`). Phases are named by their authors.
CODE_RANGE = re.compile(r"::|, (seq|op_id) = ")
MAX_INSTANCES_SHOWN = 500  # per phase, the longest, for the time line picture
MIN_PHASE_SHARE = 0.01  # of the capture's span: shorter top-level ranges are detail, not phases


def _outermost(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Indices of the ranges no other of these ranges on their thread encloses, in (thread, start) order."""
    if not len(starts):
        return np.zeros(0, np.int64)
    order = np.lexsort((-ends, starts, threads))
    starts, ends, threads = starts[order], ends[order], threads[order]
    # Running end of the ranges opened before on the same thread: a per-thread offset keeps threads apart.
    thread_rank = np.concatenate(([0], np.cumsum(threads[1:] != threads[:-1])))
    span = int(ends.max() - min(starts.min(), 0)) + 1
    offset_ends = thread_rank * span + (ends - min(starts.min(), 0))
    running = np.maximum.accumulate(offset_ends)
    before = np.concatenate(([-1], running[:-1]))
    top = (thread_rank * span + (starts - min(starts.min(), 0))) >= before
    top[0] = True
    top[1:] |= thread_rank[1:] != thread_rank[:-1]
    return order[top]


def find_phases(nvtx: Ranges, capture_budgets_of, window: tuple[int, int], step_name: str | None,
                work=None) -> list[dict]:
    """The phases of the capture, longest first (at most MAX_PHASES), each with its budget over its own
    instances (GPUs averaged), the share of it that lies inside the analysis window, and its `children`:
    the phases nested directly inside its instances (`epoch N` > `train_step N`, `eval_step N`,
    `checkpoint`), found the same way one level down. `capture_budgets_of()` gives the per-GPU budgets
    over the whole capture; `work` (or a function that makes it), (start, end, launch call start, launch call pid)
    of every kernel and copy (Activity.launch_call_starts): the GPU work each phase launched (gpu_spans)."""
    starts, ends, threads, raw = nvtx.named()
    top = _outermost(starts, ends, threads)
    if not len(top):
        return []
    names = [normalize_name(str(raw[i])) for i in top]
    if len(set(names)) < 2 and step_name in names and not _has_children(starts, ends, threads, top):
        return []  # the steps are the only phase: the window already says it all
    budgets: list = []

    def capture_budgets():
        if not budgets:
            budgets.append(capture_budgets_of())  # built only when the run has phases
        return budgets[0]
    capture_span = int(ends[top].max() - starts[top].min()) or 1
    work = work() if callable(work) else work   # (made only for a run with phases)
    phases = _group(starts, ends, threads, raw, top, window, step_name, capture_span, capture_budgets, depth=0, path=(),
                    work=work)
    if all(p["is_steps"] and not p.get("children") for p in phases):
        return []  # nothing beside the steps: the window already says it all
    return phases


# Nested phases are looked for inside groups of at most this many instances (epochs, evaluation passes),
# this many levels down: a group of thousands of steps holds operator ranges, not phases.
MAX_PARENT_INSTANCES = 1000
MAX_DEPTH = 3


def _has_children(starts, ends, threads, top) -> bool:
    return len(top) < len(starts)


def _group(starts, ends, threads, raw, members: np.ndarray, window, step_name, capture_span, capture_budgets,
           depth: int, path: tuple, work=None) -> list[dict]:
    """Phases of these ranges (indices), grouped by normalized name, longest first."""
    window_start, window_end = window
    names = [normalize_name(str(raw[i])) for i in members]
    codes: dict[str, int] = {}
    code = np.fromiter((codes.setdefault(n, len(codes)) for n in names), np.int64, len(names))
    s_all, e_all = starts[members], ends[members]
    durations = e_all - s_all
    total = np.bincount(code, weights=durations, minlength=len(codes))
    phases = []
    for name, index in sorted(codes.items(), key=lambda item: -total[item[1]]):
        if name != step_name and (total[index] < MIN_PHASE_SHARE * capture_span or CODE_RANGE.search(name)):
            continue
        mine = code == index
        s, e = s_all[mine], e_all[mine]
        inside = np.clip(np.minimum(e, window_end) - np.maximum(s, window_start), 0, None)
        keep = np.argsort(-(e - s), kind="stable")[:MAX_INSTANCES_SHOWN]
        phase = {"name": name, "start_ns": int(s.min()), "end_ns": int(e.max()), "count": int(mine.sum()),
                 "instances": [[int(a), int(b)] for a, b in sorted(zip(s[keep].tolist(), e[keep].tolist()))],
                 "duration_ns": int(durations[mine].sum()), "in_window_ns": int(inside.sum()),
                 "is_steps": name == step_name, "budget": None, "first_finding": None}
        # a phase whose instances come from several processes (one per rank: ddp_host_all's 2 x 150 steps read as
        # "step N ×300" beside a window of 149 steps): how many, so its count and time read as summed over them
        instance_processes = process_of(threads[members[mine]])
        known = int((np.unique(instance_processes) >= 0).sum())
        if known > 1:
            phase["processes"] = known
        if depth:
            phase["path"] = " › ".join((*path, name))
        if work is not None:   # the GPU's side: a host range only queues its work, which can run long after it
            first, last = gpu_spans(s, e, instance_processes, work)
            ran = first >= 0
            if ran.any():
                phase["gpu_ns"] = int((last[ran] - first[ran]).sum())
                phase["gpu_end_after_ns"] = int(np.median(last[ran] - e[ran]))
        budgets = capture_budgets()
        if budgets:
            totals = _totals(budgets, s, e, instance_processes)
            phase["budget"] = as_parts(dict(zip(PARTS, totals)), float(durations[mine].sum()))
            phase["idle_ns"] = int(sum(totals[PARTS.index(p)] for p in IDLE_PARTS))
            # the same over the instances' parts inside the window: what a finding about the phase can
            # claim of the window's budget (instances cut by the window, or past the capture's last GPU
            # work, hold another mix than the whole)
            s_in, e_in = np.maximum(s, window_start), np.minimum(e, window_end)
            cut = e_in > s_in
            if cut.any():   # none where the phase lies outside the window
                in_window = _totals(budgets, s_in[cut], e_in[cut], instance_processes[cut])
                phase["in_window_budget"] = as_parts(dict(zip(PARTS, in_window)), float(inside.sum()))
        if depth < MAX_DEPTH and int(mine.sum()) <= MAX_PARENT_INSTANCES and name != step_name:
            children = _children(starts, ends, threads, members[mine])
            if len(children):
                nested = _group(starts, ends, threads, raw, children, window, step_name, capture_span,
                                capture_budgets, depth + 1, (*path, name), work)
                if nested:
                    phase["children"] = nested
        phases.append(phase)
        if len(phases) == MAX_PHASES:
            break
    return phases


def gpu_spans(starts: np.ndarray, ends: np.ndarray, processes: np.ndarray, work) -> tuple[np.ndarray, np.ndarray]:
    """Per host range [start, end) of a process: the first start and the last end of the GPU work (kernels, copies)
    whose launch call began inside it, by a thread of that process (or of none known), as the steps are put on the
    GPU's clock (steps.project_on_gpu); -1 for both where it launched none. `work`: (start, end, launch call start,
    launch call pid) of every kernel and copy."""
    work_starts, work_ends, call_starts, call_pids = work
    first = np.full(len(starts), -1, np.int64)
    last = np.full(len(starts), -1, np.int64)
    known = call_starts >= 0
    for process in np.unique(processes):
        rows = known & ((call_pids == process) | (call_pids < 0) | (process < 0))
        if not rows.any():
            continue
        order = np.argsort(call_starts[rows], kind="stable")
        launched = call_starts[rows][order]
        # each range's work is a run of the launch-ordered rows, [lo, hi); a sentinel row lets hi reach the end
        begun = np.append(work_starts[rows][order], 0)
        done = np.append(work_ends[rows][order], 0)
        mine = np.flatnonzero(processes == process)
        lo = np.searchsorted(launched, starts[mine], side="left")
        hi = np.searchsorted(launched, ends[mine], side="left")
        some = hi > lo
        if not some.any():
            continue
        bounds = np.ravel(np.column_stack((lo[some], hi[some])))
        first[mine[some]] = np.minimum.reduceat(begun, bounds)[::2]
        last[mine[some]] = np.maximum.reduceat(done, bounds)[::2]
    return first, last


def _totals(budgets, starts: np.ndarray, ends: np.ndarray, processes: np.ndarray) -> np.ndarray:
    """The budget parts' time over these instances, summed: each instance on the GPUs its own process used (a rank's
    steps on its rank's GPU: ddp_host_all's two ranks' steps were each measured on both GPUs, averaged), on all the
    GPUs averaged where its process used none or is not known."""
    out = np.zeros(len(PARTS))
    for process in np.unique(processes):
        mine = processes == process
        own = [b for b in budgets if int(process) in b.processes] or budgets
        out += np.mean([b.labelled.totals_many(starts[mine], ends[mine]).sum(axis=0) for b in own], axis=0)
    return out


def _children(starts, ends, threads, parents: np.ndarray) -> np.ndarray:
    """Indices of the ranges directly inside these parent ranges (on the parent's thread, enclosed by no
    other range inside it)."""
    order = np.argsort(starts[parents], kind="stable")
    p_start, p_end, p_thread = starts[parents][order], ends[parents][order], threads[parents][order]
    candidates = np.flatnonzero(np.isin(threads, p_thread))
    at = np.searchsorted(p_start, starts[candidates], side="right") - 1
    ok = at >= 0
    at = np.maximum(at, 0)
    ok &= (ends[candidates] <= p_end[at]) & (threads[candidates] == p_thread[at])
    ok &= ~np.isin(candidates, parents)
    inside = candidates[ok]
    if not len(inside):
        return inside
    # a range is its parent's child when no other range inside the same parent encloses it: outermost
    # among the ranges inside, the parents kept apart by giving each its own "thread"
    key = at[ok]
    return inside[_outermost(starts[inside], ends[inside], key)]
