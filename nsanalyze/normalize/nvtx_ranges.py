"""The export's NVTX ranges: read once for the report's readers of them all, and the ranges around stretches of
time, for many stretches in one scan.

The NVTX table has no index: each read is a scan. The phases and the per-range table read every valid range
apart (two scans, and two sets of Python rows: 311k a read on blind82_emitnvtx), and a query a stretch scanned
it once each: the report's ten longest GPU gaps and its host stretches asked 360 times in 14 exports of
fixtures/real, 4.1 s of their 31 s of analysis. Around stretches, the stretches are a VALUES table joined to the
ranges (the ranges outermost, as SQLite then scans them once), and each stretch's order and limit are applied in
Python to the rows in the view's order.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from nsanalyze.normalize.checked_rows import VALID_NVTX
from nsanalyze.read.nsys import NsysExport


class Ranges(NamedTuple):
    """Valid NVTX ranges (normalize.checked_rows), in the view's order."""
    starts: np.ndarray
    ends: np.ndarray
    threads: np.ndarray   # global thread id (-1 where not an integer)
    names: list           # text (None: a range without one)

    def subset(self, keep: np.ndarray) -> "Ranges":
        return Ranges(self.starts[keep], self.ends[keep], self.threads[keep],
                      [name for name, k in zip(self.names, keep.tolist()) if k])

    def named(self) -> "Ranges":
        """Those with a name."""
        return self.subset(np.fromiter((name is not None for name in self.names), bool, len(self.names)))

    def overlapping(self, start: int, end: int) -> "Ranges":
        """Those that end at `start` or later and start before `end`."""
        return self.subset((self.ends >= start) & (self.starts < end))


def read_ranges(export: NsysExport) -> Ranges:
    """Every valid range of the export. (A range "ending" at 2^63-1 is corrupt: it overflowed the phases' per-thread
    offsets. It is left out, and counted in the report's "Left out" line: normalize.checked_rows.)"""
    rows = export.query(f"SELECT start, end, global_tid, name FROM nvtx WHERE {VALID_NVTX}")
    return Ranges(np.fromiter((r[0] for r in rows), np.int64, len(rows)),
                  np.fromiter((r[1] for r in rows), np.int64, len(rows)),
                  np.fromiter((r[2] if isinstance(r[2], int) else -1 for r in rows), np.int64, len(rows)),
                  [r[3] for r in rows])


class Range(NamedTuple):
    name: str | None
    global_tid: int | None
    start: int
    duration_ns: int


def _rows_by_window(export: NsysExport, windows: list[tuple], columns: str, join: str, where: str) -> list[list[Range]]:
    """The view's rows (in its order) that `join` ties to each window of `windows`: (index, start, end, ...)."""
    found: list[list[Range]] = [[] for _ in range(1 + max((w[0] for w in windows), default=-1))]
    if not windows:
        return found
    values = ", ".join("(" + ", ".join(str(int(v)) for v in w) + ")" for w in windows)
    rows = export.query(f"""WITH w({columns}) AS (VALUES {values})
                            SELECT w.i, n.name, n.global_tid, n.start, n.duration_ns FROM nvtx n CROSS JOIN w
                            WHERE {join} AND ({where})""")
    for i, *rest in rows:
        found[i].append(Range(*rest))
    return found


def ranges_around(export: NsysExport, spans: list[tuple[int, int]], where: str = "1") -> list[list[Range]]:
    """For each (start, end) span, the ranges that hold it whole and meet `where` (SQL on the view's columns),
    in the view's order."""
    if not spans:
        return []
    first_end, last_start = min(e for _, e in spans), max(s for s, _ in spans)
    return _rows_by_window(export, [(i, s, e) for i, (s, e) in enumerate(spans)], "i, s, e",
                           f"n.start <= {last_start} AND n.end >= {first_end} AND n.start <= w.s AND n.end >= w.e",
                           where)


def ranges_holding(export: NsysExport, spans: list[tuple[int, int, float, list]], where: str = "1") -> list[list[Range]]:
    """For each (start, end, least overlap, threads) span, the ranges of those threads that overlap it by the least
    overlap or more without holding it whole and meet `where`, in the view's order."""
    windows = [(i, s, e, math.ceil(least), t) for i, (s, e, least, threads) in enumerate(spans)
               for t in dict.fromkeys(int(t) for t in threads if t is not None)]
    if not windows:
        return [[] for _ in spans]
    first_start, last_end = min(w[1] for w in windows), max(w[2] for w in windows)
    found = _rows_by_window(export, windows, "i, s, e, h, t",
                            f"n.start < {last_end} AND n.end > {first_start} AND n.global_tid = w.t "
                            "AND n.start < w.e AND n.end > w.s AND NOT (n.start <= w.s AND n.end >= w.e) "
                            "AND MIN(n.end, w.e) - MAX(n.start, w.s) >= w.h", where)
    return found + [[] for _ in range(len(spans) - len(found))]


def longest_first(ranges: list[Range], limit: int) -> list[Range]:
    """The `limit` longest, longest first; ties in the view's order."""
    return sorted(ranges, key=lambda r: -r.duration_ns)[:limit]
