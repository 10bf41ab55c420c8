"""Nsight Systems SQLite exports.

Schemas differ across nsys versions (2020.3 lacks mangledName, ENUM tables, TARGET_INFO_GPU's
attribute columns...). This module looks at the tables and columns an export holds and lays
TEMP views with one stable shape over them; everything downstream queries these views and
aggregates in SQLite:

    kernels(start, end, duration_ns, device_id, context_id, stream_id, correlation_id,
            global_pid, short_name_id, demangled_id, grid_x.., block_x.., registers_per_thread,
            shared_mem_bytes, local_mem_per_thread)
    copies(start, end, duration_ns, device_id, stream_id, correlation_id, global_pid, bytes,
           operation, copy_kind, src_kind, dst_kind)       -- memcpy and memset in one
    api(start, end, duration_ns, global_tid, correlation_id, name)   -- CUDA runtime + driver calls
    nvtx(start, end, duration_ns, global_tid, name, domain_id)       -- push/pop and start/end ranges
    syncs(start, end, duration_ns, device_id, stream_id, correlation_id, sync_type)
    strings(id, value)
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nsanalyze.errors import InputError
from nsanalyze.numbers import finite_float

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
KERNEL_COLUMNS = {"start", "end", "deviceId", "streamId", "shortName", "demangledName",
                  "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"}
# Tables every nsys export has, whatever was traced; an SQLite file with none of them is something else.
NSYS_MARKER_TABLES = {"TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU", "ThreadNames", "PROCESSES",
                      "TARGET_INFO_SYSTEM_ENV", "META_DATA_CAPTURE", "ProcessStreams"}

# CUPTI enum values as nsys stores them; used when an export lacks its ENUM_* tables (nsys <= 2021).
MEMCPY_KINDS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
                11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
                5: "Device Static", 6: "Managed Static", 7: "Unknown"}
SYNC_TYPES = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
NVTX_RANGE_EVENT_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
# Rows that cannot be real activity (no integer timestamps, negative length) are left out of the views.
# A row longer than a day (a kernel "ending" at 2^63-1) is corrupt, not a day of work: it would make a
# 292-year span. Such rows are left out and counted (NsysExport.dropped_rows).
MAX_INTERVAL_NS = 86_400 * 10**9
VALID_INTERVAL = (f"typeof(start) = 'integer' AND typeof(end) = 'integer' AND end >= start "
                  f"AND end - start < {MAX_INTERVAL_NS}")
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_NAME_BASE = 1 << 30  # StringIds ids of the names given to whole-graph executions (above any real id; fits int32)
# A copy's size: a non-negative integer, else none (NULL, text, a real, -1e12: set aside and counted).
VALID_BYTES = "CASE WHEN typeof(bytes) = 'integer' AND bytes >= 0 THEN bytes END"
COUNTED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_RUNTIME")
CALL_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
SURVEYED_TABLES = (*COUNTED_TABLES, "CUPTI_ACTIVITY_KIND_DRIVER", GRAPH_TRACE_TABLE)  # in the survey's order


@dataclass
class Device:
    device_id: int
    name: str | None
    sm_count: int | None = None
    clock_hz: float | None = None
    memory_bandwidth_bytes_per_s: float | None = None
    compute_capability: str | None = None


@dataclass
class NsysExport:
    """An open export: a read-only connection with the stable views laid over it."""

    path: str
    connection: sqlite3.Connection
    tables: dict[str, set[str]]
    devices: list[Device] = field(default_factory=list)
    session_start_utc_ns: int | None = None
    kind: str = "nsys"
    arrow: "ArrowReader | None" = None  # a second, Arrow-native reader of the same file (bulk columns)
    graph_level_trace: bool = False     # whole-graph executions are kernel rows (their nodes untraced)
    # The survey (rows left out, where GPU work and calls begin, sizes that are none) is taken when first
    # asked for: from the columns of the capture when read_activity reads it whole (no second scan of
    # the big tables), else by its own scan of each table (_survey). See dropped_rows, set_aside,
    # first_gpu_ns, first_call_ns.
    _surveyed: dict | None = field(default=None, repr=False)   # table -> (invalid rows, first start, bad sizes)
    _set_aside: dict[str, int] = field(default_factory=dict, repr=False)
    _dropped_rows: dict[str, int] = field(default_factory=dict, repr=False)
    _first_gpu_ns: int | None = field(default=None, repr=False)
    _first_call_ns: int | None = field(default=None, repr=False)
    _first_gpu_given: bool = field(default=False, repr=False)
    _row_bounds: dict | None = field(default=None, repr=False)
    _opening_keys: set = field(default_factory=set, repr=False)   # set_aside keys of opening (devices, sizes)
    _kernels_view: str | None = field(default=None, repr=False)   # the kernels view as opening laid it

    @property
    def dropped_rows(self) -> dict[str, int]:
        """Table -> rows without a valid interval (left out of the views)."""
        self.survey()
        return self._dropped_rows

    @property
    def set_aside(self) -> dict[str, int]:
        """"TABLE.column" -> values no GPU has (a clock <= 0, a size that is none)."""
        self.survey()
        return self._set_aside

    @property
    def first_gpu_ns(self) -> int | None:
        """Start of the first kernel, copy or memset (or graph execution)."""
        if not self._first_gpu_given:
            self.survey()
        return self._first_gpu_ns

    @first_gpu_ns.setter
    def first_gpu_ns(self, value: int | None) -> None:  # kernel_filter: where the kept kernels begin
        self._first_gpu_ns, self._first_gpu_given = value, True

    @property
    def first_call_ns(self) -> int | None:
        """Start of the first CUDA runtime or driver call."""
        self.survey()
        return self._first_call_ns

    def survey(self) -> dict:
        """The survey's figures per table, scanning each activity table when no read of the whole capture
        has given them yet."""
        if self._surveyed is None:
            self._record_survey(_survey(self, [t for t in SURVEYED_TABLES if self.has(t, "start", "end")]))
        return self._surveyed

    def survey_from_capture(self, kernels: dict, copies: dict, calls: dict) -> None:
        """The survey's figures from the columns of the whole capture (normalize.activity.read_activity),
        where they settle them: a table whose every row is in its view (the bound on its rows equals the
        rows read: row_bounds) has no row left out, its first
        start is the column's minimum and, for copies, no size read as none (the read marks those -1).
        A table they do not settle (rows left out, a size that is none, a view narrowed by
        kernel_filter) gets its own survey scan, as before. The graph-trace table is always scanned:
        it is small, and its rows may be in the kernels view."""
        if self._surveyed is not None:
            return
        present = [t for t in SURVEYED_TABLES if self.has(t, "start", "end")]
        if not present:
            self._record_survey({})
            return
        totals = {t: n for t, n in self.row_bounds().items() if t in present}
        results = _survey(self, [GRAPH_TRACE_TABLE]) if GRAPH_TRACE_TABLE in totals else {}
        graph_rows = results[GRAPH_TRACE_TABLE][3] if results and self.graph_level_trace else 0

        def first(values: np.ndarray) -> int | None:
            return int(values.min()) if len(values) else None

        scan = []
        if KERNEL_TABLE in totals:
            if totals[KERNEL_TABLE] == len(kernels["start"]) - graph_rows:
                results[KERNEL_TABLE] = (0, first(kernels["start"]), 0, 0)  # graph rows in it: their table's first is lower
            else:
                scan.append(KERNEL_TABLE)
        for table, memset in (("CUPTI_ACTIVITY_KIND_MEMCPY", 0), ("CUPTI_ACTIVITY_KIND_MEMSET", 1)):
            if table in totals:
                rows = copies["memset"] == memset
                if totals[table] == np.count_nonzero(rows) and not (copies["bytes"][rows] == -1).any():
                    results[table] = (0, first(copies["start"][rows]), 0, 0)
                else:
                    scan.append(table)
        api = [t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER") if t in totals]
        if api and all(self.has(t, "nameId") for t in api) and sum(totals[t] for t in api) == len(calls["start"]):
            results.update({t: (0, first(calls["start"]) if i == 0 else None, 0, 0) for i, t in enumerate(api)})
        else:
            scan += api
        results.update(_survey(self, scan))
        self._record_survey({t: results[t] for t in present})

    @property
    def opening_set_aside(self) -> dict[str, int]:
        """The values set aside in opening the export (sizes that are none, device values), what the
        report's profile entry lists; launch shapes set aside in reading the kernels are left to the
        timeline's notes."""
        self.survey()
        return {k: v for k, v in self._set_aside.items() if k in self._opening_keys}

    def row_bounds(self) -> dict[str, int]:
        """A bound on the rows of each activity table, never below them: its rowid range (rowids are
        distinct integers; two b-tree descents, under a millisecond), equal to the count unless rows were
        deleted; COUNT(*) (a pass over every page: 30-100 ms at 300k rows) where the range cannot be
        trusted: a view (which may never end: only the time limit stops it), a table without rowid, a
        column named like the rowid, a range that overflows or is larger than the file could hold. Taken once."""
        if self._row_bounds is None:
            tables = [t for t in SURVEYED_TABLES if t in self.tables]
            stored = {r[0] for r in self.connection.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")} - \
                {r[0] for r in self.connection.execute("SELECT name FROM sqlite_temp_master")}  # (a TEMP one shadows it)
            ranged = [t for t in tables if t in stored and not {c.lower() for c in self.tables[t]} & {"rowid", "oid", "_rowid_"}]
            bounds = {}
            if ranged:
                try:
                    spans = self.connection.execute("SELECT " + ", ".join(
                        f'(SELECT max(rowid) FROM "{t}") - (SELECT min(rowid) FROM "{t}") + 1' for t in ranged)).fetchone()
                except sqlite3.DatabaseError as exc:   # a WITHOUT ROWID table: counted below
                    if "interrupted" in str(exc):      # Ctrl-C, or the time limit: not a table to count
                        raise sqlite_input_error(self.path, exc) from None
                    spans = [None] * len(ranged)
                pages, page_size = (self.connection.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
                most = pages * page_size // 8   # no row is stored in fewer bytes
                bounds = {t: (0 if n is None and _is_empty(self.connection, t) else n) for t, n in zip(ranged, spans)}
                bounds = {t: n for t, n in bounds.items() if isinstance(n, int) and 0 <= n <= most}
            counted = [t for t in tables if t not in bounds]
            if counted:
                counts = self.query("SELECT " + ", ".join(f'(SELECT COUNT(*) FROM "{t}")' for t in counted))[0]
                bounds.update(zip(counted, (int(n) for n in counts)))
            self._row_bounds = {t: bounds[t] for t in tables}
        return self._row_bounds

    def _record_survey(self, results: dict) -> None:
        self._surveyed = results
        bad_bytes = {f"{t}.bytes": r[2] for t, r in results.items() if r[2]}  # sizes that are none: kept, read as none
        self._opening_keys.update(bad_bytes)
        if bad_bytes:  # first among the values set aside, as when the survey ran at opening
            later = dict(self._set_aside)
            self._set_aside.clear()
            self._set_aside.update(bad_bytes)
            self._set_aside.update(later)
        self._dropped_rows.update({t: r[0] for t, r in results.items() if r[0] and t in COUNTED_TABLES})
        gpu = [r[1] for t, r in results.items() if r[1] is not None and t not in CALL_TABLES]
        calls = [r[1] for t, r in results.items() if r[1] is not None and t in CALL_TABLES]
        if not self._first_gpu_given:
            self._first_gpu_ns = min(gpu) if gpu else None
        self._first_call_ns = min(calls) if calls else None

    def query(self, sql: str, params=()) -> list[sqlite3.Row]:
        try:
            return self.connection.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise sqlite_input_error(self.path, exc) from None

    def scalar(self, sql: str, params=()):
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def read_columns(self, queries: list["IntQuery"]) -> list[dict[str, np.ndarray]]:
        """Each query's integer columns as int64 arrays by name. Through Arrow when the export allows it
        (bare columns first, 5x faster than Python rows; the queries run side by side on the machine's
        cores), else in chunks of rows: either way no Python object per value is kept."""
        results: list = [None] * len(queries)
        if self.arrow is not None:
            with ThreadPoolExecutor(max_workers=min(len(queries), os.cpu_count() or 1) or 1) as pool:
                results = list(pool.map(self._arrow_read, queries))
        return [result if result is not None else self._rows(query.fallback or query)
                for query, result in zip(queries, results)]

    def _arrow_read(self, query: "IntQuery") -> dict[str, np.ndarray] | None:
        """A query through Arrow; a bare-table query narrowed to the rows its view holds, or its view's
        query where the bare read fails."""
        result = self.arrow.read(query)
        if result is not None and query.keep is not None:
            return _kept(result, _keep_mask(query.keep, result), query.narrow)
        if result is None and query.fallback is not None:
            return self.arrow.read(query.fallback)
        return result

    def _rows(self, query: "IntQuery") -> dict[str, np.ndarray]:
        cursor = self.connection.cursor()
        cursor.row_factory = None
        names = list(query.columns)
        try:
            cursor.execute(query.sql(checked=True), query.params)
            chunks = []
            while rows := cursor.fetchmany(1 << 16):
                chunks.append(np.array(rows, dtype=np.int64).reshape(-1, len(names)))
        except sqlite3.DatabaseError as exc:
            raise sqlite_input_error(self.path, exc) from None
        table = np.concatenate(chunks) if chunks else np.zeros((0, len(names)), dtype=np.int64)
        return {name: _narrowed(table[:, i]) if name in query.narrow else np.ascontiguousarray(table[:, i])
                for i, name in enumerate(names)}

    def strings(self, ids) -> dict[int, str | None]:
        """StringIds values of these ids, as text (a BLOB name is decoded, bytes that are not UTF-8
        replaced); None where the value is NULL."""
        wanted = sorted({int(i) for i in ids})
        if not wanted:
            return {}
        rows = self.query(f"SELECT id, value FROM StringIds WHERE id IN ({','.join(map(str, wanted))})")
        return {r[0]: _text(r[1]) for r in rows}

    def bare_kernels(self) -> bool:
        """Whether the kernels view is the kernel table's valid rows and nothing else (no graph executions
        added, not narrowed by kernel_filter): what a bare read of the table, tested in numpy, gives too."""
        return (self.arrow is not None and KERNEL_TABLE in self.tables and not self.graph_level_trace
                and self._kernels_view is not None and _view_sql(self.connection, "kernels") == self._kernels_view)

    def has(self, table: str, *columns: str) -> bool:
        return table in self.tables and all(c in self.tables[table] for c in columns)

    @property
    def has_gpu_metrics(self) -> bool:
        return self.has("GPU_METRICS", "timestamp", "metricId", "value") and self.has(
            "TARGET_INFO_GPU_METRICS", "metricId", "metricName")

    @property
    def device_name(self) -> str | None:
        return self.devices[0].name if self.devices else None

    @property
    def compute_capability(self) -> str | None:
        return self.devices[0].compute_capability if self.devices else None

    def close(self) -> None:
        if self.arrow is not None:
            self.arrow.close()
        self.connection.close()


def _buffer_values(column, pyarrow) -> np.ndarray:
    """An Arrow integer array without nulls as numpy, read off its data buffer (pyarrow's to_numpy
    imports pandas: 0.2 s of every run)."""
    if not len(column):
        return np.zeros(0, dtype=np.int64)
    dtype = np.dtype(column.type.to_pandas_dtype()) if column.type != pyarrow.int64() else np.dtype(np.int64)
    return np.frombuffer(column.buffers()[1], dtype=dtype, count=len(column), offset=column.offset * dtype.itemsize)


INT32 = np.iinfo(np.int32)
ARROW_BATCH_ROWS = 1 << 14


def _narrowed(values: np.ndarray) -> np.ndarray:
    """int32 when every value fits (half the memory), else int64."""
    if len(values) and (values.min() < np.iinfo(np.int32).min or values.max() > np.iinfo(np.int32).max):
        return values.astype(np.int64)
    return values.astype(np.int32)


KEEP_CHUNK = 1 << 20   # rows tested at a time


def _keep_mask(keep, columns: dict[str, np.ndarray]) -> np.ndarray:
    """keep(columns), a test of each row on its own, made a chunk of rows at a time: its temporaries (an
    unsigned length and a few flags per row in valid_intervals) are a chunk's, not the table's (at 58M calls
    the length alone was 460 MB)."""
    rows = len(next(iter(columns.values()))) if columns else 0
    if rows <= KEEP_CHUNK:
        return keep(columns)
    mask = np.empty(rows, dtype=bool)
    for at in range(0, rows, KEEP_CHUNK):
        mask[at:at + KEEP_CHUNK] = keep({name: values[at:at + KEEP_CHUNK] for name, values in columns.items()})
    return mask


def _kept(columns: dict[str, np.ndarray], mask: np.ndarray, narrow: frozenset) -> dict[str, np.ndarray]:
    """The rows of `mask`; columns narrowed again where only the rows left out held values past int32
    (as a read of the kept rows alone would have them)."""
    if mask.all():
        return columns
    return {name: _narrowed(values[mask]) if name in narrow and values.dtype == np.int64 else values[mask]
            for name, values in columns.items()}


def valid_intervals(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """VALID_INTERVAL of integer columns, in numpy: end >= start and shorter than MAX_INTERVAL_NS (the
    length taken exactly: end - start as unsigned cannot wrap where end >= start)."""
    return (end >= start) & ((end.view(np.uint64) - start.view(np.uint64)) < MAX_INTERVAL_NS)


@dataclass(frozen=True)
class IntQuery:
    """Integer columns selected from a FROM/WHERE clause. `columns`: name -> (SQL expression, the value
    to read where the export holds no integer there, or None where the view guarantees one)."""

    columns: dict[str, tuple[str, int | None]]
    source: str
    params: dict = field(default_factory=dict)
    narrow: frozenset = frozenset()   # columns kept as int32 where every value fits (ids, launch shape)
    rows_at_most: int | None = None   # a bound on the rows (the tables' COUNT(*)): columns filled in place
    # A read of a table's bare columns, without the view's row tests: `keep` gives, from the columns read,
    # the rows the view would hold (tested in numpy, not per row in SQLite); where the bare read fails (a
    # value that is no integer, a NULL), `fallback`, the view's query, is read instead. Arrow only.
    keep: object = None               # columns -> bool mask of the rows kept
    fallback: "IntQuery | None" = None

    def sql(self, checked: bool) -> str:
        """Checked: each column wrapped in a typeof() test (what Python rows need; 2x slower in SQLite)."""
        parts = []
        for name, (expression, default) in self.columns.items():
            if checked and default is not None:
                expression = f"(CASE WHEN typeof({expression}) = 'integer' THEN {expression} ELSE {default} END)"
            parts.append(f"{expression} AS {name}")
        return f"SELECT {', '.join(parts)} {self.source}"


class ArrowReader:
    """Bulk integer columns through ADBC's SQLite driver, straight into Arrow arrays (no Python object
    per value). It opens the same file read-only with the same TEMP views replayed, and is used only
    when every table the views read is a real table: a view in an export could recurse, and only the
    sqlite3 connection has the time limit. Any failure returns None and the caller reads row by row."""

    def __init__(self, uri: str, view_sql: list[str]):
        import adbc_driver_manager
        import adbc_driver_sqlite
        import pyarrow

        self._pyarrow, self._adbc = pyarrow, adbc_driver_manager
        # The C allocator, not mimalloc: batches freed after their numpy copy go back where numpy
        # allocates from, instead of staying reserved (about 40 MB less at 300k kernels).
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
        self.view_sql = view_sql
        self.database = adbc_driver_manager.AdbcDatabase(driver=adbc_driver_sqlite._driver_path(), uri=uri)

    def read(self, query: "IntQuery") -> dict[str, np.ndarray] | None:
        """The columns read bare, or checked where a bare read held something else than integers; None
        when neither works (the row reader then reports what is wrong). Safe to call from threads:
        each read has its own connection."""
        try:
            connection = self._adbc.AdbcConnection(self.database)
        except Exception:  # noqa: BLE001
            return None
        try:
            for sql in self.view_sql:
                statement = self._adbc.AdbcStatement(connection)
                statement.set_sql_query(sql)
                statement.execute_update()
                statement.close()
            return self._columns(connection, query, checked=False) or self._columns(connection, query, checked=True)
        except Exception:  # noqa: BLE001 - the row reader reports what is wrong with the export
            return None
        finally:
            connection.close()

    def _columns(self, connection, query: "IntQuery", checked: bool) -> dict[str, np.ndarray] | None:
        sql = query.sql(checked)
        for name, value in query.params.items():  # ADBC binds Arrow data: integers go in as literals
            if not isinstance(value, int):
                return None
            sql = sql.replace(f":{name}", f"({int(value)})")
        statement = self._adbc.AdbcStatement(connection)
        try:  # batches of 16k rows, not the driver's 1,024: 16x fewer numpy steps per column (a quarter of the read)
            statement.set_options(**{"adbc.sqlite.query.batch_rows": str(ARROW_BATCH_ROWS)})
        except Exception:  # noqa: BLE001 - a driver without the option: its own batches
            pass
        statement.set_sql_query(sql)
        stream, _ = statement.execute_query()
        reader = self._pyarrow.RecordBatchReader._import_from_c(stream.address)
        # Batch by batch into numpy, each batch freed once copied (and narrowed where asked): the whole
        # Arrow table is never held beside its numpy copy. With a bound on the rows, into arrays of that
        # size (no concatenation at the end, which held every column twice for a moment).
        bound = query.rows_at_most
        filled, batches = 0, 0
        arrays = ({name: np.empty(bound, dtype=np.int32 if name in query.narrow else np.int64) for name in query.columns}
                  if bound is not None else None)
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in query.columns}
        try:
            for batch in reader:
                rows = batch.num_rows
                if arrays is not None and filled + rows > bound:  # more rows than the bound said: chunks from here
                    for name in chunks:
                        chunks[name].append(arrays[name][:filled])
                    arrays = None
                for name, column in zip(query.columns, batch.columns):
                    if len(column) and (column.null_count or not self._pyarrow.types.is_integer(column.type)):
                        return None
                    values = _buffer_values(column, self._pyarrow)
                    if arrays is None:
                        chunks[name].append(_narrowed(values) if name in query.narrow else values.astype(np.int64))
                        continue
                    target = arrays[name]
                    if target.dtype == np.int32 and rows and (values.min() < INT32.min or values.max() > INT32.max):
                        target = arrays[name] = target.astype(np.int64)  # a value past int32: int64 from here
                    target[filled:filled + rows] = values
                filled += rows
                batches += 1
        finally:
            reader.close()
            statement.close()
        if arrays is not None and batches:  # fewer rows than the bound (rows left out by the view): trimmed, copied when far off
            return {name: values[:filled] if filled * 10 >= bound * 9 else values[:filled].copy()
                    for name, values in arrays.items()}
        return {name: np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64) for name, parts in chunks.items()}

    def close(self) -> None:
        self.database.close()


# NSANALYZE_ARROW=0 reads every column row by row through sqlite3 (slower; for comparison and trouble).
USE_ARROW = os.environ.get("NSANALYZE_ARROW", "1") != "0"


def _arrow_reader(export: "NsysExport", uri: str) -> ArrowReader | None:
    """An Arrow reader for the export when it is safe and available, else None."""
    if not USE_ARROW:
        return None
    kinds = dict(export.connection.execute("SELECT name, type FROM sqlite_master"))
    temp = export.connection.execute("SELECT type, name, sql FROM sqlite_temp_master WHERE sql IS NOT NULL "
                                     "ORDER BY rowid").fetchall()
    read = {KERNEL_TABLE, *COUNTED_TABLES, "CUPTI_ACTIVITY_KIND_DRIVER", "NVTX_EVENTS", "StringIds", GRAPH_TRACE_TABLE,
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE",
            "GPU_METRICS"}
    # the views, and the empty stand-ins of tables a capture lacks (_create_views: a capture without kernels,
    # whose GPU metrics were read row by row at a third of the speed), are made again in the reader's connection
    stand_in = {name for t, name, _ in temp if t == "table" and _is_empty(export.connection, name)}
    if any(kinds.get(name, "table") != "table" for name in read) or \
            any(t != "view" and name not in stand_in for t, name, _ in temp):
        return None
    views = [sql.replace(f"CREATE {t.upper()}", f"CREATE TEMP {t.upper()}", 1) for t, _, sql in temp
             if t in ("view", "table")]
    try:
        return ArrowReader(uri, views)
    except Exception:  # noqa: BLE001 - no driver, or it cannot open this file: read row by row
        return None


def _is_empty(connection: sqlite3.Connection, table: str) -> bool:
    try:
        return connection.execute(f'SELECT NOT EXISTS (SELECT 1 FROM "{table}")').fetchone()[0] == 1
    except sqlite3.DatabaseError:
        return False


def _tables(connection: sqlite3.Connection) -> dict[str, set[str]]:
    names = [r[0] for r in connection.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table','view') UNION ALL "
        "SELECT name FROM sqlite_temp_master WHERE type = 'table'")]
    tables = {}
    for name in names:
        quoted = name.replace('"', '""')
        try:
            tables[name] = {r[1] for r in connection.execute(f'PRAGMA table_info("{quoted}")')}
        except sqlite3.DatabaseError:  # an unrelated broken view: not one nsanalyze reads
            continue
    return tables


def _view_sql(connection: sqlite3.Connection, name: str) -> str | None:
    row = connection.execute("SELECT sql FROM sqlite_temp_master WHERE type = 'view' AND name = ?", (name,)).fetchone()
    return row[0] if row else None


def _enum_view(export: NsysExport, view: str, table: str, fallback: dict[int, str]) -> None:
    if export.has(table, "id", "label"):
        sql = f"CREATE TEMP VIEW {view} AS SELECT id, label FROM {table}"
    else:
        values = ",".join(f"({k}, '{v}')" for k, v in fallback.items())
        sql = f"CREATE TEMP VIEW {view}(id, label) AS VALUES {values}"
    export.connection.execute(sql)


def _col(export: NsysExport, table: str, column: str, default: str = "NULL") -> str:
    return column if export.has(table, column) else default


def _graph_rows(export: NsysExport) -> str:
    """Whole-graph executions of a graph-level trace (nsys's default `--cuda-graph-trace=graph`: one row
    per graph launch, no kernel rows for its nodes) as rows of the kernels view, so that they are GPU work
    everywhere: busy time, budget, streams, steps, the launch that issued them (by correlation id). Each
    graph gets a name of its own (GRAPH_NAME_BASE + graphId in the StringIds view)."""
    g = GRAPH_TRACE_TABLE
    if not export.has(g, "start", "end", "deviceId", "streamId", "graphId"):
        return ""
    graph_ids = [r[0] for r in export.connection.execute(
        f"SELECT DISTINCT graphId FROM {g} WHERE typeof(graphId) = 'integer' ORDER BY graphId LIMIT 10000")]
    if not graph_ids:
        return ""
    names = ", ".join(f"({GRAPH_NAME_BASE + i}, '{graph_name(i)}')" for i in graph_ids)
    export.connection.execute("CREATE TEMP VIEW StringIds(id, value) AS SELECT id, value FROM main.StringIds "
                              f"UNION ALL SELECT * FROM (VALUES {names})")
    export.graph_level_trace = True
    return f"""
        UNION ALL SELECT start, end, end - start, deviceId, {_col(export, g, 'contextId')}, streamId,
        {_col(export, g, 'correlationId')}, {_col(export, g, 'globalPid')}, {GRAPH_NAME_BASE} + graphId,
        {GRAPH_NAME_BASE} + graphId, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL
        FROM {g} WHERE {VALID_INTERVAL} AND typeof(deviceId) = 'integer' AND typeof(graphId) = 'integer'"""


def graph_name(graph_id: int) -> str:
    return f"CUDA graph {graph_id} (graph-level trace)"


def _create_views(export: NsysExport) -> None:
    con = export.connection
    k = KERNEL_TABLE
    if k not in export.tables:  # a capture without CUDA kernels: the same view, empty
        k = "_no_kernels"
        con.execute(f"""CREATE TEMP TABLE {k}(start, end, deviceId, contextId, streamId, correlationId, globalPid,
            shortName, demangledName, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread,
            staticSharedMemory, dynamicSharedMemory, localMemoryPerThread)""")
        export.tables[k] = _tables(con)[k]
    con.execute(f"""CREATE TEMP VIEW kernels AS SELECT
        start, end, end - start AS duration_ns, deviceId AS device_id,
        {_col(export, k, 'contextId')} AS context_id, streamId AS stream_id,
        {_col(export, k, 'correlationId')} AS correlation_id, {_col(export, k, 'globalPid')} AS global_pid,
        shortName AS short_name_id, demangledName AS demangled_id,
        gridX AS grid_x, gridY AS grid_y, gridZ AS grid_z, blockX AS block_x, blockY AS block_y, blockZ AS block_z,
        {_col(export, k, 'registersPerThread')} AS registers_per_thread,
        {_col(export, k, 'staticSharedMemory', '0')} + {_col(export, k, 'dynamicSharedMemory', '0')} AS shared_mem_bytes,
        {_col(export, k, 'localMemoryPerThread')} AS local_mem_per_thread
        FROM {k} WHERE {VALID_INTERVAL} AND typeof(deviceId) = 'integer'{_graph_rows(export)}""")
    export._kernels_view = _view_sql(con, "kernels")

    _enum_view(export, "memcpy_kinds", "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KINDS)
    _enum_view(export, "memory_kinds", "ENUM_CUDA_MEM_KIND", MEMORY_KINDS)
    _enum_view(export, "sync_types", "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPES)

    parts = []
    mc = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if mc in export.tables:
        parts.append(f"""SELECT start, end, end - start AS duration_ns, deviceId AS device_id, streamId AS stream_id,
            {_col(export, mc, 'correlationId')} AS correlation_id, {_col(export, mc, 'globalPid')} AS global_pid,
            {VALID_BYTES} AS bytes, 'memcpy' AS operation, copyKind AS copy_kind,
            {_col(export, mc, 'srcKind')} AS src_kind, {_col(export, mc, 'dstKind')} AS dst_kind FROM {mc}
            WHERE {VALID_INTERVAL} AND typeof(deviceId) = 'integer'""")
    ms = "CUPTI_ACTIVITY_KIND_MEMSET"
    if ms in export.tables:
        parts.append(f"""SELECT start, end, end - start, deviceId, streamId,
            {_col(export, ms, 'correlationId')}, {_col(export, ms, 'globalPid')},
            {VALID_BYTES}, 'memset', NULL, NULL, {_col(export, ms, 'memKind')} FROM {ms}
            WHERE {VALID_INTERVAL} AND typeof(deviceId) = 'integer'""")
    if not parts:
        parts.append("SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0")
    con.execute("""CREATE TEMP VIEW copies(start, end, duration_ns, device_id, stream_id, correlation_id,
        global_pid, bytes, operation, copy_kind, src_kind, dst_kind) AS """ + " UNION ALL ".join(parts))

    api_parts = []
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if export.has(table, "start", "end", "nameId"):
            api_parts.append(f"""SELECT start, end, end - start, {_col(export, table, 'globalTid')},
                {_col(export, table, 'correlationId')}, nameId FROM {table} WHERE {VALID_INTERVAL}""")
    if not api_parts:
        api_parts.append("SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE 0")
    con.execute("CREATE TEMP VIEW api_raw(start, end, duration_ns, global_tid, correlation_id, name_id) AS "
                + " UNION ALL ".join(api_parts))
    con.execute("""CREATE TEMP VIEW api AS SELECT a.start, a.end, a.duration_ns, a.global_tid, a.correlation_id,
        s.value AS name FROM api_raw a LEFT JOIN main.StringIds s ON s.id = a.name_id""")

    nv = "NVTX_EVENTS"
    if export.has(nv, "start", "end", "eventType"):
        text_id = _col(export, nv, "textId")
        con.execute(f"""CREATE TEMP VIEW nvtx AS SELECT n.start, n.end, n.end - n.start AS duration_ns,
            {_col(export, nv, 'globalTid')} AS global_tid,
            COALESCE(n.text, s.value) AS name, {_col(export, nv, 'domainId', '0')} AS domain_id
            FROM {nv} n LEFT JOIN main.StringIds s ON s.id = {text_id}
            WHERE n.eventType IN {NVTX_RANGE_EVENT_TYPES} AND typeof(n.start) = 'integer'
              AND typeof(n.end) = 'integer' AND n.end >= n.start""")
    else:
        con.execute("""CREATE TEMP VIEW nvtx(start, end, duration_ns, global_tid, name, domain_id)
            AS SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""")

    sy = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if export.has(sy, "start", "end", "syncType"):
        con.execute(f"""CREATE TEMP VIEW syncs AS SELECT y.start, y.end, y.end - y.start AS duration_ns,
            y.deviceId AS device_id, y.streamId AS stream_id, {_col(export, sy, 'correlationId')} AS correlation_id,
            t.label AS sync_type FROM {sy} y LEFT JOIN sync_types t ON t.id = y.syncType
            WHERE typeof(y.start) = 'integer' AND typeof(y.end) = 'integer' AND y.end >= y.start""")
    else:
        con.execute("""CREATE TEMP VIEW syncs(start, end, duration_ns, device_id, stream_id, correlation_id, sync_type)
            AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0""")


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _number(value):
    return finite_float(value)


def _positive(value, where: str, set_aside: dict | None):
    """A count, clock or bandwidth: a finite number above zero, else None; a value that is there but is
    no such number (text, NaN, ±inf, 0, -1) is counted in `set_aside` under `where`."""
    number = _number(value)
    if number is not None and number > 0:
        return number
    if value is not None and set_aside is not None:
        set_aside[where] = set_aside.get(where, 0) + 1
    return None


DEVICE_COLUMNS = ("smCount", "clockRate", "memoryBandwidth")


def _device(row, table: str = "TARGET_INFO_GPU", set_aside: dict | None = None) -> Device:
    """A device from TARGET_INFO_*: numbers that are not positive numbers, and names that are not text,
    become None (and are counted in `set_aside`: a clock rate of -1 is no clock)."""
    name = row[1] if isinstance(row[1], str) else None
    cc = row[5] if isinstance(row[5], str) and row[5].replace(".", "").isdigit() else None
    sm, clock, bandwidth = (_positive(row[i], f"{table}.{column}", set_aside)
                            for i, column in zip((2, 3, 4), DEVICE_COLUMNS))
    return Device(row[0], name, sm, clock, bandwidth, cc)


def _devices(export: NsysExport) -> list[Device]:
    devices: dict[int, Device] = {}
    if export.has("TARGET_INFO_GPU", "id", "name", "smCount"):  # nsys 2021+
        cc = "computeMajor || '.' || computeMinor" if export.has("TARGET_INFO_GPU", "computeMajor") else "NULL"
        for row in export.query(f"""SELECT id, name, smCount, clockRate, memoryBandwidth, {cc} FROM TARGET_INFO_GPU
                                     WHERE typeof(id) = 'integer'"""):
            devices[row[0]] = _device(row, "TARGET_INFO_GPU", export._set_aside)
    elif export.has("TARGET_INFO_CUDA_GPU", "deviceId", "name"):  # nsys 2020.x
        for row in export.query("""SELECT deviceId, name, numMultiprocessors, coreClockRate * 1000,
                globalMemoryBandwidth * 1000, computeCapabilityMajor || '.' || computeCapabilityMinor
                FROM TARGET_INFO_CUDA_GPU WHERE typeof(deviceId) = 'integer'"""):
            devices[row[0]] = _device(row, "TARGET_INFO_CUDA_GPU", export._set_aside)
    elif export.has("TARGET_INFO_GPU", "deviceId", "name"):
        for row in export.query("SELECT deviceId, name FROM TARGET_INFO_GPU WHERE typeof(deviceId) = 'integer'"):
            devices[row[0]] = Device(row[0], row[1])
    # Without a description of the GPUs (exports without TARGET_INFO_GPU): the ones that ran kernels.
    if not devices:
        for (device_id,) in export.query("SELECT DISTINCT device_id FROM kernels"):
            devices.setdefault(device_id, Device(device_id, None))
    return [devices[k] for k in sorted(devices)]


def _survey(export: NsysExport, tables: list[str]) -> dict[str, tuple[int, int | None, int, int]]:
    """One scan of each of these activity tables, side by side, without sorting: table -> (rows left out
    as invalid, the first start of a valid row on a device, sizes that are no size, rows of the kernels
    view (graph executions))."""
    queries, names = [], []
    for table in tables:
        if not export.has(table, "start", "end"):
            continue
        gpu = table not in CALL_TABLES
        on_device = "typeof(deviceId) = 'integer'" if gpu else "1"
        grade = f"CASE WHEN NOT ({VALID_INTERVAL}) THEN 0 WHEN {on_device} THEN 2 ELSE 1 END"
        sized = table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") and export.has(table, "bytes")
        bad_bytes = f"bytes IS NOT NULL AND ({VALID_BYTES}) IS NULL" if sized else "0"
        in_view = "typeof(graphId) = 'integer'" if table == GRAPH_TRACE_TABLE and export.has(table, "graphId") else "0"
        queries.append(IntQuery({"invalid": ("COALESCE(SUM(grade = 0), 0)", None),
                                 "first": ("MIN(CASE WHEN grade = 2 THEN start END)", -1),
                                 "bad_bytes": ("COALESCE(SUM(grade != 0 AND bad_bytes), 0)", None),
                                 "in_view": ("COALESCE(SUM(grade = 2 AND in_view), 0)", None)},
                                f"FROM (SELECT {grade} AS grade, start, {bad_bytes} AS bad_bytes, {in_view} AS in_view "
                                f'FROM "{table}")'))
        names.append(table)
    results = {}
    for table, result in zip(names, export.read_columns(queries) if queries else []):
        first = int(result["first"][0]) if len(result["first"]) and result["first"][0] != -1 else None
        results[table] = (int(result["invalid"].sum()), first, int(result["bad_bytes"].sum()), int(result["in_view"].sum()))
    return results


# SQLite's time on one export: 60 s and 3 s per MB (a 3 MB export 69 s, a 1 GB one 50 minutes, where
# reading it takes about 30 s); NSANALYZE_SQL_TIME_LIMIT_S sets one limit for every export.
SQL_TIME_BASE_S, SQL_TIME_PER_MB_S = 60.0, 3.0


def _limit_from_environment() -> float | None:
    try:
        value = float(os.environ.get("NSANALYZE_SQL_TIME_LIMIT_S", "0"))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


SQL_TIME_LIMIT_S = _limit_from_environment()


def time_limit_s(path) -> float:
    """The SQLite time limit of an export: NSANALYZE_SQL_TIME_LIMIT_S when set, else scaled with its size."""
    if SQL_TIME_LIMIT_S is not None:
        return SQL_TIME_LIMIT_S
    try:
        size_mb = os.stat(path).st_size / 1e6
    except OSError:
        size_mb = 0.0
    return SQL_TIME_BASE_S + SQL_TIME_PER_MB_S * size_mb


_TIMED_OUT: dict[str, float] = {}   # exports whose SQLite work was stopped by their time limit -> the limit


def sqlite_input_error(path: str, exc: sqlite3.DatabaseError) -> BaseException:
    """The exception for a failed SQLite read. "interrupted" is the time limit only when the limit
    stopped it; else it was Ctrl-C (SIGINT arrives in the progress handler, which SQLite turns into
    "interrupted"): a KeyboardInterrupt, exit 130, not bad input."""
    if "interrupted" in str(exc):
        if path not in _TIMED_OUT:
            return KeyboardInterrupt()
        return InputError(path, f"reading the export took over {_TIMED_OUT[path]:g} s in SQLite (a recursive view or "
                                "an exploding join?); NSANALYZE_SQL_TIME_LIMIT_S raises the limit")
    return InputError(path, f"SQLite error while reading the export ({exc})")


def _limit_time(connection: sqlite3.Connection, display: str, limit_s: float | None = None) -> None:
    """A hostile export (a recursive view, a join that explodes) must end, not hang: SQLite work on
    one export stops after `limit_s` (time_limit_s: scaled with its size), and the read fails as bad input."""
    limit = SQL_TIME_LIMIT_S or SQL_TIME_BASE_S if limit_s is None else limit_s
    deadline = time.monotonic() + limit
    _TIMED_OUT.pop(display, None)

    def progress() -> int:
        if time.monotonic() > deadline:
            _TIMED_OUT[display] = limit
            return 1
        return 0

    connection.set_progress_handler(progress, 200_000)


def read_nsys(path, display_path=None) -> NsysExport:
    """Opens an export read-only and checks that it holds what nsanalyze needs."""
    display = str(display_path or path)
    uri = Path(path).resolve().as_uri()  # percent-encoded: '%', '?' and '#' in a name stay part of the path
    try:
        try:
            connection_uri = f"{uri}?mode=ro"
            connection = sqlite3.connect(connection_uri, uri=True, check_same_thread=False)
            tables = _tables(connection)
        except sqlite3.OperationalError:  # read-only storage that SQLite cannot lock: the file won't change
            connection_uri = f"{uri}?mode=ro&immutable=1"
            connection = sqlite3.connect(connection_uri, uri=True, check_same_thread=False)
            tables = _tables(connection)
        connection.row_factory = sqlite3.Row
    except sqlite3.DatabaseError as exc:
        raise InputError(display, f"not a readable SQLite database ({exc})") from None
    _limit_time(connection, display, time_limit_s(path))
    export = NsysExport(path=display, connection=connection, tables=tables)
    if "StringIds" not in tables or not (set(tables) & NSYS_MARKER_TABLES):
        raise InputError(display, "not an Nsight Systems export (no StringIds and target-info tables)")
    if KERNEL_TABLE in tables:
        missing = KERNEL_COLUMNS - tables[KERNEL_TABLE]
        if missing:
            raise InputError(display, f"{KERNEL_TABLE} lacks columns {sorted(missing)}")
    try:
        _create_views(export)
    except sqlite3.DatabaseError as exc:
        raise InputError(display, f"unexpected Nsight Systems schema ({exc})") from None
    export.arrow = _arrow_reader(export, connection_uri)
    export.devices = _devices(export)
    export._opening_keys.update(export._set_aside)
    if export.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        export.session_start_utc_ns = export.scalar("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    return export
