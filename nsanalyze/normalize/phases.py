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

from nsanalyze.normalize.budget import IDLE_PARTS, PARTS, as_parts
from nsanalyze.normalize.steps import normalize_name
from nsanalyze.normalize.checked_rows import VALID_NVTX
from nsanalyze.read.nsys import NsysExport

MAX_PHASES = 8
# Ranges named after code, not after a phase of the run: PyTorch's emit_nvtx op ranges (`aten::linear,
# seq = 12, op_id = 40`) and C++ function scopes (`FSDP::pre_forward`). Phases are named by their authors.
CODE_RANGE = re.compile(r"::|, (seq|op_id) = ")
MAX_INSTANCES_SHOWN = 500  # per phase, the longest, for the time line picture
MIN_PHASE_SHARE = 0.01  # of the capture's span: shorter top-level ranges are detail, not phases


def top_level_ranges(export: NsysExport) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(starts, ends, normalized names) of the ranges no other range on their thread encloses."""
    # A range "ending" at 2^63-1 is corrupt, not a phase (it overflowed the per-thread offsets below):
    # left out, and counted in the report's "Left out" line (normalize.checked_rows).
    rows = export.query(f"SELECT start, end, global_tid, name FROM nvtx WHERE name IS NOT NULL AND {VALID_NVTX}")
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    starts = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    ends = np.fromiter((r[1] for r in rows), np.int64, len(rows))
    threads = np.fromiter((r[2] if isinstance(r[2], int) else -1 for r in rows), np.int64, len(rows))
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
    names = [normalize_name(str(rows[i][3])) for i in order[top]]
    return starts[top], ends[top], names


def find_phases(export: NsysExport, capture_budgets_of, window: tuple[int, int], step_name: str | None) -> list[dict]:
    """The phases of the capture, longest first (at most MAX_PHASES), each with its budget over its own
    instances (GPUs averaged) and the share of it that lies inside the analysis window.
    `capture_budgets_of()` gives the per-GPU budgets over the whole capture."""
    starts, ends, names = top_level_ranges(export)
    if not names:
        return []
    codes: dict[str, int] = {}
    code = np.fromiter((codes.setdefault(n, len(codes)) for n in names), np.int64, len(names))
    if len(codes) < 2 and step_name in codes:
        return []  # the steps are the only phase: the window already says it all
    capture_span = int(ends.max() - starts.min()) or 1
    durations = ends - starts
    total = np.bincount(code, weights=durations, minlength=len(codes))
    window_start, window_end = window
    capture_budgets = capture_budgets_of()  # built only when the run has phases
    phases = []
    for name, index in sorted(codes.items(), key=lambda item: -total[item[1]]):
        if name != step_name and (total[index] < MIN_PHASE_SHARE * capture_span or CODE_RANGE.search(name)):
            continue
        mine = code == index
        s, e = starts[mine], ends[mine]
        inside = np.clip(np.minimum(e, window_end) - np.maximum(s, window_start), 0, None)
        keep = np.argsort(-(e - s), kind="stable")[:MAX_INSTANCES_SHOWN]
        phase = {"name": name, "start_ns": int(s.min()), "end_ns": int(e.max()), "count": int(mine.sum()),
                 "instances": [[int(a), int(b)] for a, b in sorted(zip(s[keep].tolist(), e[keep].tolist()))],
                 "duration_ns": int(durations[mine].sum()), "in_window_ns": int(inside.sum()),
                 "is_steps": name == step_name, "budget": None, "first_finding": None}
        if capture_budgets:
            per_device = [b.labelled.totals_many(s, e).sum(axis=0) for b in capture_budgets]
            totals = np.mean(per_device, axis=0)
            phase["budget"] = as_parts(dict(zip(PARTS, totals)), float(durations[mine].sum()))
            phase["idle_ns"] = int(sum(totals[PARTS.index(p)] for p in IDLE_PARTS))
        phases.append(phase)
        if len(phases) == MAX_PHASES:
            break
    if all(p["is_steps"] for p in phases):
        return []  # nothing beside the steps: the window already says it all
    return phases
