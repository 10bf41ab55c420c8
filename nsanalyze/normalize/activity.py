"""The window's GPU work and CUDA calls as numpy columns, read from the export once.

Every projection of the timeline (the budget, islands and gaps, launches, syncs, copies, NVTX
ranges, kernel medians) works on these arrays with sorts, prefix sums and `searchsorted` joins by
correlation id: each table is read once, in linear time, instead of copied into indexed temp tables
and joined by correlated SQL. What comes back to Python objects is sized by names, streams and
ranges, never by launches.

Sentinels: -1 stands for a value the export does not hold (no correlation id, no process); joins
never match it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.read.nsys import NsysExport

PID_SHIFT = 24           # nsys globalTid / globalPid: the process id sits above bit 24
# Calls are read from this long before the window: a call up to this long that began before it may
# reach into it (longer ones are host work, not dispatch: normalize.budget).
CALL_LOOKBACK_NS = 1_000_000


@dataclass
class Columns:
    """Columns of equal length, by name."""

    data: dict[str, np.ndarray]

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self) -> int:
        return len(next(iter(self.data.values()))) if self.data else 0

    def where(self, mask: np.ndarray) -> "Columns":
        if mask.all():  # the usual case for a steady window: no copy
            return self
        return Columns({name: values[mask] for name, values in self.data.items()})


def _integer(column: str, default: int = -1) -> str:
    """SQL for a column read as an integer, `default` where the export holds no integer there."""
    return f"(CASE WHEN typeof({column}) = 'integer' THEN {column} ELSE {default} END)"


def process_of(global_id: np.ndarray) -> np.ndarray:
    """Process id of nsys global thread/process ids; -1 stays -1."""
    return np.where(global_id >= 0, global_id >> PID_SHIFT, -1)


@dataclass
class Activity:
    """Kernels and copies that overlap the window, and the CUDA calls that may bear on it."""

    start: int
    end: int
    kernels: Columns   # start, end, device_id, stream_id, correlation_id, pid, short_name_id, demangled_id
    copies: Columns    # ... bytes, memset (0/1), copy_kind, src_kind, dst_kind
    calls: Columns     # start, end, tid, pid, correlation_id, name_id

    def in_window(self, table: Columns) -> Columns:
        """Rows that start inside the window (how kernel and copy totals are counted)."""
        return table.where((table.start >= self.start) & (table.start < self.end))


def read_activity(export: NsysExport, window: tuple[int, int]) -> Activity:
    start, end = window
    params = {"ws": start, "we": end}
    kernels = Columns(export.int_columns(f"""
        SELECT start, end, device_id, {_integer("stream_id")} AS stream_id,
               {_integer("correlation_id")} AS correlation_id, {_integer("global_pid")} AS pid,
               {_integer("short_name_id")} AS short_name_id, {_integer("demangled_id")} AS demangled_id
        FROM kernels WHERE end >= :ws AND start < :we""", params))
    kernels.data["pid"] = process_of(kernels.pid)
    copies = Columns(export.int_columns(f"""
        SELECT start, end, device_id, {_integer("stream_id")} AS stream_id,
               {_integer("correlation_id")} AS correlation_id, {_integer("global_pid")} AS pid,
               {_integer("bytes", 0)} AS bytes, operation = 'memset' AS memset, {_integer("copy_kind")} AS copy_kind,
               {_integer("src_kind")} AS src_kind, {_integer("dst_kind")} AS dst_kind
        FROM copies WHERE end >= :ws AND start < :we""", params))
    copies.data["pid"] = process_of(copies.pid)
    calls = Columns(export.int_columns(f"""
        SELECT start, end, {_integer("global_tid")} AS tid, {_integer("correlation_id")} AS correlation_id,
               {_integer("name_id")} AS name_id
        FROM api_raw WHERE end > :ws - {CALL_LOOKBACK_NS} AND start < :we""", params))
    calls.data["pid"] = process_of(calls.tid)
    return Activity(start, end, kernels, copies, calls)


def first_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, index of each key's first row): the lookup table of a join that takes
    one row per key whatever the export repeats."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.ones(len(sorted_keys), dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return sorted_keys[first], order[first]


def lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """Row index in the looked-up table for each key, -1 where there is none (or the key is -1)."""
    sorted_keys, rows = table
    if not len(sorted_keys):
        return np.full(len(keys), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    found = (sorted_keys[at] == keys) & (keys != -1)
    return np.where(found, rows[at], -1)


def group_sums(keys: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(distinct keys ascending, the sum of each value column per key, the row count per key)."""
    distinct, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    sums = [np.bincount(inverse, weights=v, minlength=len(distinct)) for v in values]
    return distinct, sums, counts
