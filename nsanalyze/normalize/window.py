"""The analysis window and the work and calls that bear on it.

The window is the user's NVTX range or skip, else the steady steps (on the GPU's clock when the steps
launch GPU work, normalize.steps), else the loop read off its most launched kernel, else the capture.
WindowActivity holds what every projection shares: the window's work and calls as arrays and the
islands of GPU work per GPU and over all GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.normalize.activity import Activity, Columns, distinct
from nsanalyze.normalize.budget import CHUNK, SYNC_PREFIXES, union
from nsanalyze.normalize.steps import WARMUP_SLOWER, Steps, find_launch_pattern
from nsanalyze.numbers import duration_text
from nsanalyze.read.nsys import NsysExport

FOREVER = 2**62
SYNC_APIS = SYNC_PREFIXES  # the calls the host waits in (one list with the budget's)
# CUDA calls that put work on the GPU or wait for it (prefixes, matched as SQL's LIKE would).
WORK_CALL_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cuMemcpy",
                      "cudaMemset", "cuMemset", "cudaMemPrefetch", "cuMemPrefetch", *SYNC_APIS)
LONG_CALL_NS = 50_000  # calls this long count whatever they are: they show where the host was


@dataclass
class Window:
    start: int
    end: int
    description: str
    kind: str = "capture"  # steady | capture | nvtx-range | skip-first

    def params(self) -> dict:
        return {"window_start": self.start, "window_end": self.end}


def choose_window(export: NsysExport, skip_first_ns: int | None, nvtx_range: str | None,
                  mode: str = "steady", steps: Steps | None = None, named: Steps | None = None) -> Window:
    """The analysis window: the user's NVTX range or skip, else the steady steps, else the capture.
    The NVTX range is taken on the GPU's clock (`named`, projected: from the first GPU work its instances
    launched to the end of the last) where they launched any; an asynchronous host's range says only
    when the work was enqueued. A range that launched nothing keeps its host times."""
    first = export.first_gpu_ns
    if first is None:
        first = export.scalar("SELECT MIN(start) FROM nvtx") or 0
    start, end, parts, kind = -FOREVER, FOREVER, [], "capture"
    if nvtx_range:
        from nsanalyze.normalize.steps import name_clause   # `step N`: the instances the report names so

        clause, params = name_clause(export, nvtx_range)
        row = export.query(f"SELECT MIN(start), MAX(end), COUNT(*) FROM nvtx WHERE {clause}", params)[0]
        if not row[2]:
            from nsanalyze.errors import InputError
            names = [r[0] for r in export.query("SELECT DISTINCT name FROM nvtx ORDER BY name LIMIT 20")]
            raise InputError(export.path, f"no NVTX range named {nvtx_range!r} (ranges: {', '.join(map(str, names)) or 'none'})")
        start, end = row[0], row[1]
        on_gpu = named is not None and named.gpu_starts is not None and bool((named.gpu_starts >= 0).any())
        if on_gpu:
            launched = named.gpu_starts >= 0
            start, end = int(named.gpu_starts[launched].min()), int(named.gpu_ends[launched].max())
        parts.append(f"NVTX range '{nvtx_range}' ({row[2]} instance(s))"
                     + (" on the GPU's clock (the GPU work launched inside it)" if on_gpu else
                        " on the host's clock (it launched no GPU work)"))
        kind = "nvtx-range"
    if skip_first_ns:
        start = max(start, min(first + skip_first_ns, FOREVER - 1))  # a huge skip leaves an empty window
        parts.append(f"skipping the first {skip_first_ns / 1e6:g} ms of GPU activity")
        kind = "nvtx-range" if nvtx_range else "skip-first"
    if kind == "capture" and mode == "steady" and steps is None:
        pattern = find_launch_pattern(export)
        if pattern is not None:  # start-up counted from the first CUDA call: host work before any GPU work too
            return Window(pattern.start, pattern.end,
                          f"steady state: from the first of {pattern.launches} launches of '{pattern.kernel}' "
                          f"(no step-like NVTX range; the loop read off its most launched kernel); "
                          + _left_out(pattern.start - capture_start(export, first), "start-up", "it"), "steady")
    if kind == "capture" and mode == "steady" and steps is not None:
        begin = capture_start(export, first)
        start, end = int(steps.starts[0]), int(steps.ends[-1])
        startup = max(0, start - begin)
        # (one figure for both: "4.42 s of start-up and 1 warm-up step" read as 4.42 s and a step more, a user read)
        warm = f" and {steps.warmup} warm-up step{'s' if steps.warmup != 1 else ''}, together," if steps.warmup else ""
        clock = " on the GPU's clock" if steps.clock == "gpu" else " (host ranges: the steps launched no GPU work)"
        return Window(start, end, f"steady state: steps {steps.number(steps.first_index)}-{steps.number(steps.last_index)} of '{steps.name}'{clock}; "
                                  + _left_out(startup, f"start-up{warm}", "them") + _slow_lead(steps), "steady")
    if kind == "capture":
        asides = []   # said once, in one pair of parentheses
        if export.first_gpu_ns is not None:
            what = ", from its first to its last GPU work"
        elif export.first_call_ns is not None:
            what = ", from its first to its last CUDA call"
            asides.append("no GPU activity recorded")
        else:
            what = ""
            asides.append("no GPU activity and no CUDA call recorded")
        if mode == "steady":
            asides.append("no repeating step-like NVTX range found")
        parts.append(f"the whole capture{what}" + (f" ({'; '.join(asides)})" if asides else ""))
    return Window(start, end, "; ".join(parts), kind)


def _slow_lead(steps: Steps) -> str:
    """Where the leading slow steps go on past the warm-up's cap (steps.leading_slow), that the window starts inside
    them: what a user reads as the run's cost per step includes them, and the steady steps do not."""
    if steps.slow_lead_steps is None:
        return ""
    first, last = steps.slow_lead_steps
    return (f" (warm-up is at most half the steps, but steps {first}-{last} all ran over {WARMUP_SLOWER:g}x the later "
            f"steps' median: a slow stretch, not a warm-up, that the window starts inside; --nvtx-range '{steps.name}' "
            f"counts every step)")


def _left_out(ns: int, what: str, before: str) -> str:
    """What the window leaves out before the steps, in the unit that reads (`2.13 s`, `812 µs`), or that
    nothing was (a loop from the capture's first call: `0.00 s ... left out` read as if something were)."""
    if ns <= 0:
        return f"nothing before {before} to leave out"
    return f"{duration_text(ns)} of {what} before {before} left out"


def capture_start(export: NsysExport, first_gpu_ns: int) -> int:
    """The program's start as the export shows it: its first CUDA call, or its first GPU work if earlier."""
    first_call = export.first_call_ns
    return min(first_call, first_gpu_ns) if first_call is not None else first_gpu_ns


@dataclass
class WindowActivity:
    """What the projections below share: the window's work and calls as arrays, and the islands of
    GPU work (the union of kernel and copy intervals) per GPU and over all GPUs."""

    activity: Activity
    kernels: Columns           # kernels that start in the window
    copies: Columns            # copies and memsets that start in the window
    calls: Columns             # the calls that matter: work, waits and long calls overlapping the window
    call_names: dict           # name id -> name of every call read
    copy_kinds: dict           # memcpy kind id -> label
    memory_kinds: dict         # memory kind id -> label
    islands: dict              # device id -> (starts, ends)
    busy: tuple                # (starts, ends) of the islands over all GPUs

    def idle_after(self, t: np.ndarray) -> np.ndarray:
        """GPU idle time after host time t: 0 when some GPU work runs at t, else the wait for the next."""
        starts, ends = self.busy
        if not len(starts):
            return np.zeros(len(t), dtype=np.int64)
        out = np.empty(len(t), dtype=np.int64)
        for first in range(0, len(t), CHUNK):  # in chunks: at millions of calls each temporary is tens of MB
            chunk = t[first:first + CHUNK]
            before = np.searchsorted(starts, chunk, side="right") - 1
            running = (before >= 0) & (ends[np.maximum(before, 0)] > chunk)
            after = np.searchsorted(starts, chunk, side="left")
            wait = np.where(after < len(starts), starts[np.minimum(after, len(starts) - 1)] - chunk, 0)
            out[first:first + CHUNK] = np.where(running, 0, wait)
        return out


def name_like(name, prefixes) -> bool:
    """SQL's LIKE 'prefix%': case-insensitive for ASCII."""
    return isinstance(name, str) and name.lower().startswith(tuple(p.lower() for p in prefixes))


def ids_where(names: dict, test) -> np.ndarray:
    return np.array([i for i, name in names.items() if test(name)], dtype=np.int64)


def window_activity(export: NsysExport, activity: Activity, call_names: dict) -> WindowActivity:
    kernels, copies = activity.in_window(activity.kernels), activity.in_window(activity.copies)
    calls = activity.calls
    wanted = np.isin(calls.name_id, ids_where(call_names, lambda n: name_like(n, WORK_CALL_PREFIXES)))
    calls = calls.where((calls.end >= activity.start) & (wanted | (calls.end - calls.start >= LONG_CALL_NS)))
    copy_kinds = {r[0]: r[1] for r in export.query("SELECT id, label FROM memcpy_kinds")}
    memory_kinds = {r[0]: r[1] for r in export.query("SELECT id, label FROM memory_kinds")}
    device = np.concatenate((kernels.device_id, copies.device_id))
    starts = np.concatenate((kernels.start, copies.start))
    ends = np.concatenate((kernels.end, copies.end))
    islands = {int(d): union(starts[device == d], ends[device == d]) for d in distinct(device)}
    if len(islands) == 1:
        busy = next(iter(islands.values()))
    else:
        busy = union(np.concatenate([s for s, _ in islands.values()] or [np.zeros(0, np.int64)]),
                     np.concatenate([e for _, e in islands.values()] or [np.zeros(0, np.int64)]))
    return WindowActivity(activity, kernels, copies, calls, call_names, copy_kinds, memory_kinds, islands, busy)


