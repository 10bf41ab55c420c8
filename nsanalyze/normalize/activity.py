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

from dataclasses import dataclass, field

import numpy as np

from nsanalyze.read.nsys import (CALL_TABLES, GRAPH_TRACE_TABLE, INT32, KERNEL_TABLE, IntQuery, NsysExport, _col,
                                 valid_intervals)

PID_SHIFT = 24           # nsys globalTid / globalPid: the process id sits above bit 24
# Calls are read from this long before the window: a call up to this long that began before it may
# reach into it (longer ones are host work, not dispatch: normalize.budget).
CALL_LOOKBACK_NS = 1_000_000
WHOLE_CAPTURE = 2**62    # a window from -this to this is the whole capture (normalize.window.FOREVER)


class Columns:
    """Columns of equal length, by name. A selection (`where`) copies a column only when it is first
    read: most selections read few of a table's columns, and a table can hold millions of rows. A
    selection that is one run of rows (a window of a capture read in time order: the usual case) is a
    slice, and its columns are views of the table's, read-only: no copy at all.

    `coded`: columns held as a code per row (the column `code`) into a small table of distinct values
    (a kernel's launch shape: eight values a launch, a few hundred distinct shapes in a capture). Read
    by name they are the table's values at each row's code, made when asked for, never kept."""

    def __init__(self, data: dict[str, np.ndarray], mask: np.ndarray | slice | None = None,
                 coded: "Coded | None" = None):
        self._source, self._mask, self._taken, self._coded = data, mask, {}, coded

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("_"):
            raise AttributeError(name)
        coded = self._coded
        if coded is not None and name in coded.values:
            return coded.values[name][getattr(self, coded.code)]
        if name not in self._taken:
            if name not in self._source:
                raise AttributeError(name)
            values = self._source[name]
            if isinstance(self._mask, slice):
                values = values[self._mask]
                values.flags.writeable = False  # a view of the table's column: never written through
            elif self._mask is not None:
                values = values[self._mask]
            self._taken[name] = values
        return self._taken[name]

    def __len__(self) -> int:
        if isinstance(self._mask, slice):
            return self._mask.stop - self._mask.start
        if self._mask is not None:
            return int(np.count_nonzero(self._mask))
        return len(next(iter(self._source.values()))) if self._source else 0

    def names(self) -> list[str]:
        return list(self._source) + (list(self._coded.values) if self._coded is not None else [])

    @property
    def coded(self) -> "Coded | None":
        return self._coded

    def replace(self, name: str, values: np.ndarray) -> None:
        """Sets a column of an unselected table (a conversion done once after reading)."""
        assert self._mask is None
        self._source[name] = values
        self._taken.pop(name, None)

    def where(self, mask: np.ndarray) -> "Columns":
        if mask.all():  # the usual case for a steady window: no copy
            return self
        kept = int(np.count_nonzero(mask))
        first = int(np.argmax(mask)) if kept else 0
        run = kept and bool(mask[first:first + kept].all())   # one run of rows: a slice
        if self._mask is None:
            return Columns(self._source, slice(first, first + kept) if run else mask, self._coded)
        if isinstance(self._mask, slice):
            base = self._mask.start
            if run or not kept:
                return Columns(self._source, slice(base + first, base + first + kept), self._coded)
            size = len(next(iter(self._source.values())))
            combined = np.zeros(size, dtype=bool)
            combined[self._mask] = mask
            return Columns(self._source, combined, self._coded)
        combined = self._mask.copy()  # a selection of a selection: one mask over the source
        combined[combined] = mask
        return Columns(self._source, combined, self._coded)


@dataclass
class Coded:
    """Columns held as codes: `code` names the column of codes, `values` each coded column's value per code
    (the dtype the column had when read)."""

    code: str
    values: dict[str, np.ndarray]


SHAPE_CODE = "shape_code"
CODE_CHUNK = 1 << 20   # rows coded at a time
HASH_MULTIPLIER = 0x9E3779B97F4A7C15   # (2^64 / the golden ratio: a multiplicative hash)


def coded_columns(table: dict[str, np.ndarray], names: tuple[str, ...], code: str) -> Coded | None:
    """Replaces the columns `names` of `table` (in place) by one int32 code per row into a table of their
    distinct combinations, in order of first appearance. Exact: rows are grouped by a hash of their values
    a chunk at a time, checked against the values; a chunk where two combinations share a hash is grouped
    by its values. None (the table unchanged) where a column is missing."""
    if not all(name in table for name in names):
        return None
    columns = [table[name] for name in names]
    n = len(columns[0]) if columns else 0
    codes = np.empty(n, dtype=np.int32)
    known: dict[tuple, int] = {}
    for at in range(0, n, CODE_CHUNK):
        part = [c[at:at + CODE_CHUNK] for c in columns]
        hashed = np.zeros(len(part[0]), dtype=np.uint64)
        for values in part:
            hashed *= np.uint64(HASH_MULTIPLIER)   # (wraps: a hash)
            hashed ^= values.astype(np.int64).view(np.uint64)
        _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
        del hashed
        inverse = inverse.ravel()
        if any((values[first][inverse] != values).any() for values in part):   # a shared hash: by values
            rows = np.stack([values.astype(np.int64) for values in part], axis=1)
            _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
            inverse = inverse.ravel()
            del rows
        keys = list(zip(*(values[first].tolist() for values in part)))
        local = np.empty(len(keys), dtype=np.int32)
        for j in np.argsort(first).tolist():   # new combinations coded in order of first appearance
            local[j] = known.setdefault(keys[j], len(known))
        codes[at:at + len(inverse)] = local[inverse]
    values = {name: np.array([key[i] for key in known], dtype=column.dtype) for i, (name, column) in
              enumerate(zip(names, columns))}
    for name in names:
        del table[name]
    table[code] = codes
    return Coded(code, values)


def process_of(global_id: np.ndarray) -> np.ndarray:
    """Process id of nsys global thread/process ids; -1 stays -1. int32 where every process fits (process
    ids do: the bits above the thread's), else int64; made a chunk at a time (no int64 temporary as long
    as the column: at 58M calls that was 460 MB beside the columns)."""
    processes = np.empty(len(global_id), dtype=np.int32)
    for at in range(0, len(global_id), CODE_CHUNK):
        ids = global_id[at:at + CODE_CHUNK]
        process = ids >> PID_SHIFT   # a negative id shifts to a negative value: set to -1 below
        process[ids < 0] = -1
        if process.min() < INT32.min or process.max() > INT32.max:   # past int32: the whole column as int64
            process = global_id >> PID_SHIFT
            process[global_id < 0] = -1
            return process
        processes[at:at + len(process)] = process
    return processes


def pair_keys(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """high * 2^32 + low as int64: the join key of (process, correlation id), (device, stream) and the like,
    exact whatever the columns' widths (an int32 column widened first, never wrapped)."""
    keys = np.multiply(high, 1 << 32, dtype=np.int64)
    keys += low
    return keys


@dataclass
class Activity:
    """Kernels and copies that overlap the window, and the CUDA calls that may bear on it."""

    start: int
    end: int
    kernels: Columns   # start, end, device_id, stream_id, correlation_id, pid, short_name_id, demangled_id
    copies: Columns    # ... bytes, memset (0/1), copy_kind, src_kind, dst_kind
    calls: Columns     # start, end, pid, correlation_id, name_id
    # nsys global thread ids of the calls that launched kernels (the GPU's host threads, not CUDA's helpers):
    # the array, or the task making it (beside the rest: see read_activity)
    launching: object = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def launching_threads(self) -> np.ndarray:
        return self.launching.result() if hasattr(self.launching, "result") else self.launching

    def within(self, start: int, end: int, calls_from: int | None = None) -> "Activity":
        """The part of a wider read that bears on the window [start, end): work overlapping it, and the
        calls from `calls_from` (default: just before the window) that may have launched or delayed it."""
        calls_from = start if calls_from is None else min(start, calls_from)
        kernels = self.kernels.where((self.kernels.end >= start) & (self.kernels.start < end))
        copies = self.copies.where((self.copies.end >= start) & (self.copies.start < end))
        calls = self.calls.where((self.calls.end > calls_from - CALL_LOOKBACK_NS) & (self.calls.start < end))
        return Activity(start, end, kernels, copies, calls, self.launching)

    def launch_call_starts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, launch call start, launch call pid) of every kernel and copy, in that order: the
        call found by (process, correlation id), or by correlation id alone where the work's process is
        unknown; -1 where no call is found."""
        calls = self.calls
        work_pid = np.concatenate((self.kernels.pid, self.copies.pid))
        work_corr = np.concatenate((self.kernels.correlation_id, self.copies.correlation_id))
        by_key = lookup(first_by_key(pair_keys(np.maximum(calls.pid, 0), calls.correlation_id)),
                        np.where(work_corr >= 0, pair_keys(np.maximum(work_pid, 0), work_corr), -1))
        unknown = (work_pid < 0) & (by_key < 0)
        call = by_key
        if unknown.any():  # work of an unknown process: its call by correlation id alone
            call = np.where(unknown, lookup(first_by_key(calls.correlation_id), work_corr), by_key)
        found = call >= 0
        safe = np.maximum(call, 0)
        starts = np.where(found, calls.start[safe] if len(calls) else -1, -1)
        pids = np.where(found, calls.pid[safe] if len(calls) else -1, -1)
        return (np.concatenate((self.kernels.start, self.copies.start)),
                np.concatenate((self.kernels.end, self.copies.end)), starts, pids)

    def in_window(self, table: Columns) -> Columns:
        """Rows that start inside the window (how kernel and copy totals are counted)."""
        return table.where((table.start >= self.start) & (table.start < self.end))


# Launch shape read with each kernel (for the kernel summary); where the export holds no integer, a
# value that leaves the summary's MIN (or MAX) untouched and reads as "absent".
NO_MIN, NO_MAX = 2**62, -1
KERNEL_SHAPE = {"grid_x": NO_MIN, "grid_y": NO_MIN, "grid_z": NO_MIN, "block_x": NO_MIN, "block_y": NO_MIN,
                "block_z": NO_MIN, "registers_per_thread": NO_MAX, "shared_mem_bytes": NO_MAX}


# Ids and launch shape: kept as int32 where every value fits (half the memory of a table of millions
# of kernels), int64 where one does not (read.nsys: checked, never truncated). Keys made of two of them
# (device and stream, process and correlation id) are made in int64 (pair_keys). The `pid` column is
# read as nsys global ids (past int32) and narrowed when it becomes process ids (process_of).
NARROW_COLUMNS = frozenset({"short_name_id", "demangled_id", "name_id", *KERNEL_SHAPE, "copy_kind", "src_kind", "dst_kind",
                            "memset", "correlation_id", "device_id", "stream_id"})


def kernels_query(where: str, params: dict, rows_at_most: int | None = None) -> IntQuery:
    """Kernels (from the `kernels` view) matching `where`, with their ids and launch shape."""
    return IntQuery({"start": ("start", None), "end": ("end", None), "device_id": ("device_id", None),
                     "stream_id": ("stream_id", -1), "correlation_id": ("correlation_id", -1), "pid": ("global_pid", -1),
                     "short_name_id": ("short_name_id", -1), "demangled_id": ("demangled_id", -1),
                     **{name: (name, absent) for name, absent in KERNEL_SHAPE.items()}},
                    f"FROM kernels WHERE {where}", params, NARROW_COLUMNS, rows_at_most)


def _bare_kernels(export: NsysExport, view: IntQuery, start: int, end: int) -> IntQuery:
    """The kernels of `view` (end >= start of the window, start < its end) read bare from the kernel
    table, the view's row tests done in numpy (a third less work in SQLite); the view where that fails."""
    k = KERNEL_TABLE
    expressions = {"start": "start", "end": "end", "device_id": "deviceId", "stream_id": "streamId",
                   "correlation_id": _col(export, k, "correlationId", "-1"), "pid": _col(export, k, "globalPid", "-1"),
                   "short_name_id": "shortName", "demangled_id": "demangledName", "grid_x": "gridX", "grid_y": "gridY",
                   "grid_z": "gridZ", "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ",
                   "registers_per_thread": _col(export, k, "registersPerThread", str(NO_MAX)),
                   "shared_mem_bytes": f"{_col(export, k, 'staticSharedMemory', '0')} + "
                                       f"{_col(export, k, 'dynamicSharedMemory', '0')}"}
    assert set(expressions) == set(view.columns)

    def keep(columns: dict) -> np.ndarray:   # the view's rows (deviceId: an integer, or the read failed)
        return valid_intervals(columns["start"], columns["end"]) & (columns["end"] >= start) & (columns["start"] < end)

    return IntQuery({name: (expressions[name], None) for name in view.columns}, f'FROM "{k}"', {}, view.narrow,
                    view.rows_at_most, keep, view)


def _bare_calls(export: NsysExport, view: IntQuery, start: int, end: int) -> IntQuery | None:
    """The calls of `view` read bare from the runtime and driver tables (one after the other, as the view's
    UNION ALL), its row tests done in numpy; the view where that fails."""
    parts = [f"SELECT start AS start, end AS end, {_col(export, t, 'globalTid', '-1')} AS pid, "
             f"{_col(export, t, 'correlationId', '-1')} AS correlation_id, nameId AS name_id FROM \"{t}\""
             for t in CALL_TABLES if export.has(t, "start", "end", "nameId")]
    if not parts:
        return None
    names = ("start", "end", "pid", "correlation_id", "name_id")
    assert tuple(view.columns) == names

    def keep(columns: dict) -> np.ndarray:
        return (valid_intervals(columns["start"], columns["end"]) & (columns["end"] > start - CALL_LOOKBACK_NS)
                & (columns["start"] < end))

    return IntQuery({name: (name, None) for name in names}, "FROM (" + " UNION ALL ".join(parts) + ")", {},
                    view.narrow, view.rows_at_most, keep, view)


def read_kernels(export: NsysExport, where: str, params: dict) -> Columns:
    return _with_valid_shape(_with_processes(_kernel_columns(export.read_columns([kernels_query(where, params)])[0])))


def _kernel_columns(table: dict[str, np.ndarray]) -> Columns:
    """The kernels' columns, their launch shape held as one code per kernel (Coded)."""
    return Columns(table, coded=coded_columns(table, tuple(KERNEL_SHAPE), SHAPE_CODE))


def _with_valid_shape(table: Columns, set_aside: dict | None = None) -> Columns:
    """A negative grid, block, register or shared-memory size is no launch shape: read as absent (and
    counted in `set_aside` under the kernel table, when given)."""
    bad = 0
    coded = table.coded
    rows = None   # kernels per code, where the shape is coded
    for name, absent in KERNEL_SHAPE.items():
        held = coded is not None and name in coded.values
        values = coded.values[name] if held else getattr(table, name, None)
        if values is None:
            continue
        wrong = values < (0 if absent == NO_MIN else -1)
        if wrong.any():
            if held:
                rows = np.bincount(getattr(table, coded.code), minlength=len(values)) if rows is None else rows
                bad += int(rows[wrong].sum())
            else:
                bad += int(np.count_nonzero(wrong))
            fixed = np.where(wrong, values.dtype.type(absent) if absent == NO_MAX else NO_MIN, values)
            if held:
                coded.values[name] = fixed
            else:
                table.replace(name, fixed)
    if bad and set_aside is not None:
        key = "CUPTI_ACTIVITY_KIND_KERNEL launch shape"
        set_aside[key] = set_aside.get(key, 0) + bad
    return table


def read_activity(export: NsysExport, window: tuple[int, int], submit=None) -> Activity:
    """The window's kernels, copies and calls as columns. `submit(fn, *args)`: where the launching threads
    are found (a task beside the caller's next steps: they are asked for late), else now."""
    start, end = window
    params = {"ws": start, "we": end}
    # Rows at most (the views' tables' bounds): the columns are filled in place, never concatenated.
    counts = export.row_bounds()
    at_most = lambda *tables: sum(counts.get(t, 0) for t in tables)  # noqa: E731
    graphs = (GRAPH_TRACE_TABLE,) if export.graph_level_trace else ()
    copies = IntQuery({"start": ("start", None), "end": ("end", None), "device_id": ("device_id", None),
                       "stream_id": ("stream_id", -1), "correlation_id": ("correlation_id", -1),
                       "pid": ("global_pid", -1), "bytes": ("bytes", -1), "memset": ("operation = 'memset'", None),
                       "copy_kind": ("copy_kind", -1), "src_kind": ("src_kind", -1), "dst_kind": ("dst_kind", -1)},
                      "FROM copies WHERE end >= :ws AND start < :we", params, NARROW_COLUMNS,
                      at_most("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    calls = IntQuery({"start": ("start", None), "end": ("end", None), "pid": ("global_tid", -1),
                      "correlation_id": ("correlation_id", -1), "name_id": ("name_id", -1)},
                     f"FROM api_raw WHERE end > :ws - {CALL_LOOKBACK_NS} AND start < :we", params, NARROW_COLUMNS,
                     at_most(*CALL_TABLES))
    kernels = kernels_query("end >= :ws AND start < :we", params, at_most(KERNEL_TABLE, *graphs))
    if export.bare_kernels():
        kernels = _bare_kernels(export, kernels, start, end)
    if export.arrow is not None:
        calls = _bare_calls(export, calls, start, end) or calls
    tables = export.read_columns([kernels, calls, copies])
    shapes = coded_columns(tables[0], tuple(KERNEL_SHAPE), SHAPE_CODE)   # (coded at once: not held beside what follows)
    if start <= -WHOLE_CAPTURE and end >= WHOLE_CAPTURE:  # the survey from these columns: no second scan
        export.survey_from_capture(kernels=tables[0], calls=tables[1], copies=tables[2])
    sizes = tables[2]["bytes"]
    if (sizes == -1).any():  # no size (NULL, text, a negative): read as 0, as the view's NULL always was
        tables[2]["bytes"] = np.where(sizes == -1, 0, sizes)
    ids = [{name: table[name] for name in ("pid", "correlation_id")} for table in tables[:2]]  # (before pid is a process)
    threads = (submit or _now)(_launching_threads, *ids)
    del ids   # (made now, or held by the task beside: not here beside the process ids made next)
    kernels, calls, copies = (_with_processes(Columns(table, coded=coded)) for table, coded in zip(tables, (shapes, None, None)))
    return Activity(start, end, _with_valid_shape(kernels, export.set_aside), copies, calls, threads)


def _now(fn, *args):
    return fn(*args)


def _launching_threads(kernels: dict, calls: dict) -> np.ndarray:
    """Distinct global thread ids of the calls that launched a kernel, matched as the launch look-up is: by
    (process, correlation id), by correlation id alone where the kernel's process is unknown. Taken from the
    columns before their ids become process ids (a second scan of the call table cost 0.37 s at 577k calls).
    The calls are marked a chunk at a time against the kernels' keys, made once: at 58M calls a key, a
    process and an index per call at once were 2 GB beside the columns."""
    kernel_process, kernel_corr = process_of(kernels["pid"]), kernels["correlation_id"]
    call_pid, call_corr = calls["pid"], calls["correlation_id"]
    processes = distinct(kernel_process[kernel_process >= 0])
    top = int(max(kernel_corr.max(initial=-1), call_corr.max(initial=-1))) + 1
    by_process = _Marker(kernel_process, kernel_corr, processes, top)
    unknown = (kernel_process < 0) & (kernel_corr >= 0)
    anywhere = None
    if unknown.any():   # kernels of no known process: their calls by correlation id alone, in any process
        anywhere = _Marker(np.zeros(int(unknown.sum()), dtype=np.int64), kernel_corr[unknown],
                           np.zeros(1, dtype=np.int64), top)
    del kernel_process, unknown
    threads = []
    for at in range(0, len(call_pid), MARK_CHUNK):
        pid, corr = call_pid[at:at + MARK_CHUNK], call_corr[at:at + MARK_CHUNK]
        launched = by_process(process_of(pid), corr)
        if anywhere is not None:
            launched |= anywhere(np.zeros_like(corr), corr)
        threads.append(distinct(pid[launched & (pid >= 0)]))
    return distinct(np.concatenate(threads)) if threads else call_pid[:0].copy()


MARK_CHUNK = 1 << 20   # calls marked at a time
MARK_TABLE_MAX = 1 << 26   # flags at most in the table of (process, correlation id); sorted keys beyond


class _Marker:
    """Whether each call's (process, correlation id) is a kernel's. Correlation ids count up from 0 in each
    process, so a table of flags indexed by (process rank, id) answers in one pass; sorted keys where the
    table would be large. `top`: above every correlation id of kernels and calls."""

    def __init__(self, kernel_process, kernel_corr, processes, top: int):
        self.processes, self.top, self.flags, self.keys = processes, top, None, None
        if not len(processes) or top <= 0:
            return
        known = (kernel_corr >= 0) & (kernel_process >= 0)
        if len(processes) * top > MARK_TABLE_MAX:
            keys = pair_keys(kernel_process[known], kernel_corr[known])
            keys.sort()   # (membership only: no index of rows, no distinct copy)
            self.keys = keys
            return
        flags = np.zeros(len(processes) * top + 1, dtype=bool)  # the last flag: "no kernel's", for calls of no process
        if len(processes) == 1:  # one process (the usual case): the id is the index
            flags[kernel_corr[known]] = True
        else:
            flags[np.searchsorted(processes, kernel_process[known]) * top + kernel_corr[known]] = True
        self.flags = flags

    def __call__(self, call_process: np.ndarray, call_corr: np.ndarray) -> np.ndarray:
        processes, top = self.processes, self.top
        if self.keys is not None:
            keys = self.keys
            if not len(keys):
                return np.zeros(len(call_corr), dtype=bool)
            call_keys = np.where((call_process >= 0) & (call_corr >= 0), pair_keys(call_process, call_corr), -1)
            at = np.minimum(np.searchsorted(keys, call_keys), len(keys) - 1)
            return (keys[at] == call_keys) & (call_keys != -1)
        flags = self.flags
        if flags is None:
            return np.zeros(len(call_corr), dtype=bool)
        if len(processes) == 1:
            index = np.where((call_process == processes[0]) & (call_corr >= 0), call_corr, len(flags) - 1)
        else:
            rank = np.minimum(np.searchsorted(processes, call_process), len(processes) - 1)
            index = np.where((processes[rank] == call_process) & (call_corr >= 0), rank * top + call_corr,
                             len(flags) - 1)
        return flags[index]


def _with_processes(table: Columns) -> Columns:
    """The `pid` column read as nsys global ids, turned into process ids in place."""
    table.replace("pid", process_of(table.pid))
    return table


def ascending(values: np.ndarray) -> bool:
    """Whether the values are already in order (an export's tables mostly are, in their row order): a
    stable sort of them would change nothing, and its index and sorted copies need not be made."""
    return len(values) < 2 or bool((values[1:] >= values[:-1]).all())


def first_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, index of each key's first row): the lookup table of a join that takes
    one row per key whatever the export repeats."""
    if ascending(keys):   # (row numbers as int32 where they fit: 46 MB less at 11.5M calls)
        order, sorted_keys = np.arange(len(keys), dtype=np.int32 if len(keys) < 2**31 else np.int64), keys
    else:
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
    first = np.ones(len(sorted_keys), dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    if first.all():  # every key once (the usual case): no copies
        return sorted_keys, order
    return sorted_keys[first], order[first]


def lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    """Row index in the looked-up table for each key, -1 where there is none (or the key is -1)."""
    sorted_keys, rows = table
    at = find(sorted_keys, keys)
    return np.where(at >= 0, rows[np.maximum(at, 0)] if len(rows) else -1, -1)


def find(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Position of each key among the sorted, distinct keys, -1 where it is not there (or the key is -1)."""
    return finder(sorted_keys, len(keys))(keys)


# A table indexed by key: at most this many entries (64 MB), and built only for at least one key per
# this many entries (its build is a pass over the table).
KEY_TABLE_MAX = 1 << 24
KEY_TABLE_KEYS_PER_ENTRY = 1 / 16


def finder(sorted_keys: np.ndarray, queries: int):
    """find() for `queries` keys asked in one or more calls: where the sorted keys lie close together
    (the correlation ids of one process: a run of integers, a fifth of them calls), a table indexed by
    key, built once, two passes over memory in order; else binary search (20-odd random reads per key:
    at 300k kernels against 577k calls, 3x slower)."""
    if not len(sorted_keys):
        return lambda keys: np.full(len(keys), -1, dtype=np.int64)
    low, high = int(sorted_keys[0]), int(sorted_keys[-1])
    span = high - low + 1
    if span > min(8 * len(sorted_keys) + (1 << 20), KEY_TABLE_MAX) or queries < span * KEY_TABLE_KEYS_PER_ENTRY:
        def by_search(keys: np.ndarray) -> np.ndarray:
            at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
            return np.where((sorted_keys[at] == keys) & (keys != -1), at, -1)
        return by_search
    position = np.full(span, -1, dtype=np.int32)
    position[np.subtract(sorted_keys, low, dtype=np.int64)] = np.arange(len(sorted_keys), dtype=np.int32)

    def by_table(keys: np.ndarray) -> np.ndarray:
        inside = (keys >= low) & (keys <= high) & (keys != -1)
        at = np.full(len(keys), -1, dtype=position.dtype)   # (int32: positions in the table's int32)
        at[inside] = position[np.subtract(keys[inside], low, dtype=np.int64)]
        return at
    return by_table


def largest(values: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest values, largest first, ties in index order: what
    np.argsort(-values, kind="stable")[:count] gives, without sorting all of them (the longest 10 of
    300k gaps: a partition, then a sort of the few at least as long as the 10th)."""
    if count <= 0 or len(values) <= max(4 * count, 1024):
        return np.argsort(-values, kind="stable")[:max(count, 0)]
    threshold = np.partition(values, len(values) - count)[len(values) - count]
    candidates = np.flatnonzero(values >= threshold)
    return candidates[np.argsort(-values[candidates], kind="stable")][:count]


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values. np.unique by sorting: numpy 2.4's hash-based unique is 20x slower than a
    sort on millions of integers (40 s against 2 s for 20M here)."""
    ordered = values if ascending(values) else np.sort(values)
    if not len(ordered):
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def distinct_in_place(ordered: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    """distinct() of values already sorted, in the caller's own array: its distinct values moved to its
    front a chunk at a time, the front returned (a view). No second array as long as the values: at
    36M segment edges (the 1 GB export's host-activity paint) that copy was 290 MB at the peak."""
    n = len(ordered)
    if n < 2:
        return ordered
    kept = 1   # ordered[:kept] are the distinct values so far; the next chunk's first value is compared
    for at in range(1, n, chunk):   # with the one before it in the input (a value not yet overwritten:
        values = ordered[at:at + chunk]   # writes stay at or below `at`)
        new = values != ordered[at - 1:at - 1 + len(values)]
        run = values[new]   # (a copy: at most one chunk)
        ordered[kept:kept + len(run)] = run
        kept += len(run)
    return ordered[:kept]


def median(values: np.ndarray) -> float:
    """np.median, the same float operations, without its NaN check (it builds numpy's masked-array
    module: see percentile)."""
    ordered = np.sort(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return float((np.float64(ordered[middle - 1]) + np.float64(ordered[middle])) / 2)


def percentile(values: np.ndarray, q: float) -> float:
    """np.percentile's default (linear) method, the same float operations: numpy's own builds the masked
    array module on first use (30 ms of every report's start-up)."""
    ordered = np.sort(values)
    index = q / 100 * (len(ordered) - 1)
    low = int(np.floor(index))
    high = min(low + 1, len(ordered) - 1)
    a, b, t = ordered[low], ordered[high], index - low
    difference = b - a
    return float(b - difference * (1 - t) if t >= 0.5 else a + difference * t)


def dense_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(code of each key, the distinct keys ascending), codes 0..n-1 in key order, for keys that are
    small non-negative integers (name ids): a table of flags indexed by key, no sort. None for other keys
    (negative, or so large that the table would outgrow the keys)."""
    if not len(keys) or keys.min() < 0 or keys.max() > 4 * len(keys) + (1 << 20):
        return None
    present = np.zeros(int(keys.max()) + 1, dtype=bool)
    present[keys] = True
    return (np.cumsum(present) - 1)[keys], np.flatnonzero(present)


def group_sums(keys: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(distinct keys ascending, the sum of each value column per key, the row count per key). Keys that
    are small integers (name ids) are counted into bins, no sort; integer values sum exactly either way."""
    dense = dense_codes(keys) if all(np.issubdtype(v.dtype, np.integer) or v.dtype == bool for v in values) else None
    if dense is not None:
        codes, distinct_keys = dense
        return (distinct_keys.astype(keys.dtype),
                [np.bincount(codes, weights=np.asarray(v, dtype=np.float64), minlength=len(distinct_keys))
                 for v in values], np.bincount(codes, minlength=len(distinct_keys)))
    order = None if ascending(keys) else np.argsort(keys, kind="stable")  # in order already: no sort, no copies
    ordered = keys if order is None else keys[order]
    if not len(ordered):
        return ordered, [np.zeros(0) for _ in values], np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.concatenate((starts, [len(ordered)])))
    sums = [np.add.reduceat(np.asarray(v, dtype=np.float64) if order is None else np.asarray(v, dtype=np.float64)[order],
                            starts) for v in values]
    return ordered[starts], sums, counts
