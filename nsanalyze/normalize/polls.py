"""Poll loops: a host that waits for the GPU by asking, again and again, whether its work is done
(`while not event.query(): time.sleep(0)`), not in a sync call. Each loop is one wait, from its first query to the
answer "ready", and the budget and the syncs count it as a sync call's wait: the GPU idles after it while the host
refills the queue (blind77_pollwait: 309 not-ready queries a step, then one ready 0.05 ms after the last kernel).

The calls' names say nothing of this; their return values do. A run on one thread of MIN_POLLS or more queries of
one name answered "not ready" (cudaErrorNotReady, CUDA_ERROR_NOT_READY: 600), with no other call between them, ended
by the same query answered ready, is a poll loop where it waited for the GPU: the work of its process queued before
the ready answer that ended last was still running when the polling began, and had ended by the answer. PyTorch's
caching allocator queries events too, one per allocation, each run ended by a launch (blind57_landcover_fix: 44,691
not-ready queries, no poll loop). A Kineto trace records no return values: no poll loop is found in one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.normalize.activity import Activity, process_of
from nsanalyze.normalize.host_activity import base_name
from nsanalyze.read.nsys import CALL_TABLES, IntQuery, NsysExport

POLL_NAMES = frozenset({"cudaEventQuery", "cudaStreamQuery", "cuEventQuery", "cuStreamQuery"})
NOT_READY = 600
MIN_POLLS = 3


@dataclass(frozen=True)
class PollLoops:
    """The window's poll loops that waited for the GPU, one row each: process, first query's start, ready answer's
    end, the query's name id, and the not-ready answers before it."""

    pid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name_id: np.ndarray
    not_ready: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


NONE = PollLoops(*(np.zeros(0, np.int64) for _ in range(5)))


def _query_calls(activity: Activity, call_names: dict[int, str | None]) -> tuple[list[int], int]:
    """The name ids of the poll queries among the calls, and how many of the window's calls are queries."""
    query_ids = [i for i, name in call_names.items() if isinstance(name, str) and base_name(name) in POLL_NAMES]
    return query_ids, int(np.isin(activity.calls.name_id, query_ids).sum()) if query_ids else 0


def answered_tables(export: NsysExport) -> list[str]:
    """The call tables that record each call's return value (a Kineto trace's converted tables hold 0 there)."""
    return [t for t in CALL_TABLES if export.has(t, "start", "end", "globalTid", "nameId", "returnValue")]


def unread_note(export: NsysExport, activity: Activity, call_names: dict[int, str | None]) -> list[str]:
    """A note where the window holds poll queries enough for a loop but the profile records no return values: its
    poll loops, if any, cannot be told, and count as the host's own time."""
    query_ids, queries = _query_calls(activity, call_names)
    if queries <= MIN_POLLS or answered_tables(export):
        return []
    names = " and ".join(sorted({base_name(call_names[i]) for i in query_ids}))
    return [f"{queries:,} calls of {names} in the window, and the profile records no call's return value: a host "
            "that polls the GPU until its work is done (`while not event.query(): ...`) cannot be told from one "
            "that asks once, so such waits, if any, count as the host's own time, not as syncs (an nsys export "
            "records the answers)."]


def poll_loops(export: NsysExport, activity: Activity, call_names: dict[int, str | None]) -> PollLoops:
    """The poll loops of the window's calls (module docstring). Reads the export only where the window holds
    MIN_POLLS + 1 query calls or more: the calls of the threads answered "not ready" in it, with their return
    values (one columnar query)."""
    query_ids, queries = _query_calls(activity, call_names)
    tables = answered_tables(export) if queries > MIN_POLLS else []
    if not tables:
        return NONE
    where = f"start >= {int(activity.start)} AND start < {int(activity.end)} AND end >= start"
    union = " UNION ALL ".join(f'SELECT start, end, globalTid AS tid, nameId AS name_id, returnValue AS ret FROM "{t}" '
                               f"WHERE {where}" for t in tables)
    names = ("start", "end", "tid", "name_id", "ret")
    rows = export.read_columns([IntQuery({n: (n, -1) for n in names}, f"FROM ({union}) WHERE tid IN "
                                         f"(SELECT tid FROM ({union}) WHERE ret = {NOT_READY})")])[0]
    if len(rows["start"]) <= MIN_POLLS:
        return NONE
    order = np.lexsort((rows["end"], rows["start"], rows["tid"]))
    start, end, tid, name = (rows[n][order] for n in ("start", "end", "tid", "name_id"))
    query = np.isin(name, query_ids)
    first, ready = find_runs(tid, name, query, query & (rows["ret"][order] == NOT_READY))
    if not len(ready):
        return NONE
    pid = process_of(tid[ready]).astype(np.int64)
    waited = _waited(activity, pid, start[first], start[ready], end[ready])
    return PollLoops(pid[waited], start[first][waited], end[ready][waited], name[ready][waited],
                     (ready - first)[waited].astype(np.int64))


def find_runs(thread: np.ndarray, name: np.ndarray, query: np.ndarray, not_ready: np.ndarray) -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
    """The poll loops' candidates among calls in thread-then-time order: (the first not-ready answer, the ready
    answer that ends its run), where MIN_POLLS or more answers of one query on the thread came "not ready" one after
    another, nothing between them, and the next call is that query answered ready. Whether each waited for the GPU
    is the caller's test."""
    same = np.zeros(len(thread), bool)   # the call before on the same thread is a call of the same name
    same[1:] = (thread[1:] == thread[:-1]) & (name[1:] == name[:-1])
    begins = not_ready & ~(np.roll(not_ready, 1) & same)
    run = np.cumsum(begins) - 1
    first_of_run = np.flatnonzero(begins)
    ready = np.flatnonzero(query[1:] & ~not_ready[1:] & not_ready[:-1] & same[1:]) + 1
    first = first_of_run[run[ready - 1]] if len(ready) else np.zeros(0, np.int64)
    long = ready - first >= MIN_POLLS
    return first[long], ready[long]


def _waited(activity: Activity, pid: np.ndarray, first_start: np.ndarray, ready_start: np.ndarray,
            ready_end: np.ndarray) -> np.ndarray:
    """Per loop, whether it waited for the GPU: of its process's work launched before the ready answer, the one that
    ended last was running when the polling began and had ended by the answer (as critical_path's graph tests)."""
    _, op_end, launch_start, launch_pid = activity.launch_call_starts()
    waited = np.zeros(len(pid), bool)
    for process in np.unique(pid).tolist():
        mine = (launch_pid == process) & (launch_start >= 0)
        if not mine.any():
            continue
        by_launch = np.argsort(launch_start[mine], kind="stable")
        launched, ends = launch_start[mine][by_launch], np.maximum.accumulate(op_end[mine][by_launch])
        at = np.flatnonzero(pid == process)
        position = np.searchsorted(launched, ready_start[at], side="right") - 1
        last_end = np.where(position >= 0, ends[np.maximum(position, 0)], np.iinfo(np.int64).min)
        waited[at] = (first_start[at] < last_end) & (last_end <= ready_end[at])
    return waited
