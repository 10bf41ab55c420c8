"""Allocations the driver refused for want of memory, told by their return values.

A caching allocator that asks the driver for a block and is refused (cudaMalloc answers cudaErrorMemoryAllocation,
cuMemAlloc and cuMemCreate CUDA_ERROR_OUT_OF_MEMORY: both 2) frees the blocks it keeps and asks again: PyTorch's
`num_alloc_retries`. Call by call that looks like a cache emptied by the program (cudaFree after cudaFree, then
cudaMalloc); the refused call before the frees tells them apart (copy56_catlog's store grown by torch.cat: 7 refusals,
each followed by six cudaFree of 4-13 ms). A Kineto trace records no return values: none is found in one.
"""

from __future__ import annotations

import re

import numpy as np

from nsanalyze.normalize import model
from nsanalyze.normalize.activity import Activity, process_of
from nsanalyze.normalize.host_activity import base_name
from nsanalyze.normalize.polls import answered_tables
from nsanalyze.read.nsys import IntQuery, NsysExport

OUT_OF_MEMORY = 2   # cudaErrorMemoryAllocation (runtime API), CUDA_ERROR_OUT_OF_MEMORY (driver API)
# Calls that take device memory (not pinned host memory: cudaMallocHost, cuMemAllocHost)
ALLOCATION = re.compile(r"cu(?:da)?(?:Malloc(?!Host)\w*|MemAlloc(?!Host)\w*|MemCreate)")


def allocation_ids(call_names: dict[int, str | None]) -> list[int]:
    """The name ids of the calls that take device memory (ALLOCATION)."""
    return [i for i, name in call_names.items() if isinstance(name, str) and ALLOCATION.fullmatch(base_name(name))]


def refused_allocations(export: NsysExport, activity: Activity, call_names: dict[int, str | None],
                        windows: tuple[np.ndarray, np.ndarray] | None) -> model.RefusedAllocations | None:
    """The steady steps' allocations refused for want of memory (module docstring), by the processes that ran the
    window's kernels, counted in each step's host window; None where no step had one, or the export records no
    return values."""
    ids = allocation_ids(call_names)
    if not ids or not np.isin(activity.calls.name_id, ids).any():
        return None   # no allocation in the window's calls (read already): no scan of the call tables (2.8M rows 0.4 s)
    tables = answered_tables(export)
    if not tables or windows is None or not len(windows[0]):
        return None
    starts, ends = windows
    union = " UNION ALL ".join(
        f'SELECT start, globalTid AS tid, nameId AS name_id FROM "{t}" WHERE returnValue = {OUT_OF_MEMORY} AND nameId '
        f"IN ({', '.join(map(str, ids))}) AND start >= {int(starts.min())} AND start < {int(ends.max())}"
        for t in tables)
    rows = export.read_columns([IntQuery({n: (n, -1) for n in ("start", "tid", "name_id")}, f"FROM ({union})")])[0]
    mine = np.isin(process_of(rows["tid"]), np.unique(activity.kernels.pid))
    at = np.searchsorted(starts, rows["start"][mine], side="right") - 1
    inside = (at >= 0) & (rows["start"][mine] < ends[np.maximum(at, 0)])
    if not inside.any():
        return None
    names, counts = np.unique(rows["name_id"][mine][inside], return_counts=True)
    return model.RefusedAllocations.of({"refused": int(inside.sum()), "steps_with": len(np.unique(at[inside])),
                                        "steps": len(starts),
                                        "call": base_name(call_names[int(names[np.argmax(counts)])])})
