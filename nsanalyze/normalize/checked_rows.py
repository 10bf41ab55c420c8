"""Rows of the NVTX, OS-runtime and synchronization tables that hold no interval: left out and counted.

The reader's views keep kernels, copies, memsets and CUDA calls to valid intervals and count the rest
(NsysExport.dropped_rows). Its NVTX view tests the types and the order of start and end but not the
length: an NVTX range "ending" at 2^63-1 (a corrupt row) overflowed the phases' per-thread offsets (an
internal error) and made 292-year steps and ranges. `VALID_NVTX` is the test the consumers of the view
add; `invalid_rows` counts, per table, the rows that fail it, for the report's "Left out" line.
"""

from __future__ import annotations

import sqlite3

from nsanalyze.read.nsys import MAX_INTERVAL_NS, NVTX_RANGE_EVENT_TYPES, NsysExport

VALID_NVTX = f"end - start < {MAX_INTERVAL_NS}"
_NOT_AN_INTERVAL = (f"NOT (typeof(start) = 'integer' AND typeof(end) = 'integer' AND end >= start "
                    f"AND end - start < {MAX_INTERVAL_NS})")
_TABLES = {   # table -> the rows that should be intervals
    "NVTX_EVENTS": f"eventType IN {NVTX_RANGE_EVENT_TYPES} AND end IS NOT NULL",
    "OSRT_API": "1",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "1",
}


def invalid_rows(export: NsysExport) -> dict[str, int]:
    """Per table, the rows left out for want of a valid interval (none where the table is absent).
    NVTX ranges without an end (never closed) are left out silently, as nsys stats does."""
    counts = {}
    for table, rows in _TABLES.items():
        need = ("start", "end", "eventType") if table == "NVTX_EVENTS" else ("start", "end")
        if not export.has(table, *need):
            continue
        try:
            n = export.scalar(f"SELECT COUNT(*) FROM {table} WHERE {rows} AND {_NOT_AN_INTERVAL}")
        except sqlite3.Error:
            continue
        if n:
            counts[table] = int(n)
    return counts
