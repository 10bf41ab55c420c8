"""`nsanalyze stats`: the summary tables of `nsys stats`, computed from the export without an NVIDIA tool.

Each table is one SQL statement over the reader's views (read/nsys.py): the rows are grouped and
aggregated in SQLite (sum, count, mean, median through ROW_NUMBER(), the sample standard deviation
from a second pass over the group's mean), never one Python step per row. Column names, their order,
the sort (total time, largest first) and the figures' rounding are those of nsys stats' CSV output:

    cuda_api_sum           CUDA runtime and driver calls, by name
    cuda_gpu_kern_sum      kernels, by demangled name (the kernel table only: a graph launch traced
                           at graph level, CUPTI_ACTIVITY_KIND_GRAPH_TRACE, is not a kernel)
    cuda_gpu_mem_time_sum  memcpy (by direction) and memset, by time
    cuda_gpu_mem_size_sum  the same, by size in MB (10^6 bytes)
    nvtx_sum               NVTX push/pop and start/end ranges, by style and domain:name
    osrt_sum               OS runtime calls, by name

`window`: None for the whole capture (nsys stats' figures), or a StatsWindow: GPU rows (kernels,
copies) that start inside [start, end), host rows (calls, NVTX ranges, OS calls) that start inside
[host_start, end) (`--window steady`: the steady window `report` analyses, host side from the first
steady step's host range).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from nsanalyze.errors import InputError
from nsanalyze.read import nsys as nsys_reader
from nsanalyze.read.nsys import NVTX_RANGE_EVENT_TYPES, NsysExport, sqlite_input_error

REPORTS = ("cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum",
           "osrt_sum")
DEFAULT_REPORTS = REPORTS

TIME_STATS = ("Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)")
COLUMNS = {
    "cuda_api_sum": ("Time (%)", "Total Time (ns)", "Num Calls", *TIME_STATS, "Name"),
    "cuda_gpu_kern_sum": ("Time (%)", "Total Time (ns)", "Instances", *TIME_STATS, "Name"),
    "cuda_gpu_mem_time_sum": ("Time (%)", "Total Time (ns)", "Count", *TIME_STATS, "Operation"),
    "cuda_gpu_mem_size_sum": ("Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)",
                              "Operation"),
    "nvtx_sum": ("Time (%)", "Total Time (ns)", "Instances", *TIME_STATS, "Style", "Range"),
    "osrt_sum": ("Time (%)", "Total Time (ns)", "Num Calls", *TIME_STATS, "Name"),
}
# How nsys prints each column: "int" as is, "1" one decimal, "3" three decimals, "text".
DECIMALS = {"Time (%)": 1, "Avg (ns)": 1, "Med (ns)": 1, "StdDev (ns)": 1, "Total (MB)": 3, "Avg (MB)": 3,
            "Med (MB)": 3, "Min (MB)": 3, "Max (MB)": 3, "StdDev (MB)": 3}

GRAPH_NAME_BASE = getattr(nsys_reader, "GRAPH_NAME_BASE", None)
NVTX_DOMAIN_CREATE = 75  # NVTX_EVENTS.eventType of nvtxDomainCreate: text is the domain's name


HOST_REPORTS = {"cuda_api_sum", "nvtx_sum", "osrt_sum"}


@dataclass(frozen=True)
class StatsWindow:
    start: int
    end: int
    host_start: int
    description: str


def steady_window(export: NsysExport) -> StatsWindow:
    """The window `nsanalyze report` analyses by default (the steady steps), as the timeline chooses it."""
    from nsanalyze.normalize.activity import read_activity
    from nsanalyze.normalize.steps import find_steps, project_on_gpu
    from nsanalyze.normalize.timeline import FOREVER, choose_window

    steps = find_steps(export, None)
    if steps is not None:
        capture = read_activity(export, (-FOREVER, FOREVER))
        project_on_gpu(steps, *capture.launch_call_starts())
    window = choose_window(export, None, None, "steady", steps)
    host_start = int(steps.host_starts[steps.first_index]) if steps is not None and window.kind == "steady" \
        else window.start
    return StatsWindow(int(window.start), int(window.end), min(host_start, int(window.start)), window.description)


def _sources(export: NsysExport) -> dict[str, tuple[str, str]]:
    """Per report: (SELECT of `key`, `label` and the value `v` (ns, or bytes), extra label columns)."""
    memcpy_name = ("CASE WHEN c.operation = 'memset' THEN '[CUDA memset]' "
                   "ELSE '[CUDA memcpy ' || COALESCE(m.label, 'Unknown') || ']' END")
    copies = (f"SELECT {memcpy_name} AS key, {memcpy_name} AS label, c.{{value}} AS v, c.start AS start "
              "FROM copies c LEFT JOIN memcpy_kinds m ON m.id = c.copy_kind")
    nvtx = None
    if export.has("NVTX_EVENTS", "start", "end", "eventType"):
        # The nvtx view holds the ranges without their style: read the same rows with their event type.
        text = "COALESCE(n.text, s.value)" if export.has("NVTX_EVENTS", "text") else "s.value"
        strings = "LEFT JOIN StringIds s ON s.id = n.textId" if export.has("NVTX_EVENTS", "textId") else \
            "LEFT JOIN StringIds s ON 0"
        if export.has("NVTX_EVENTS", "domainId", "text"):
            domains = (f"LEFT JOIN (SELECT domainId AS id, MIN(text) AS name FROM NVTX_EVENTS WHERE eventType = "
                       f"{NVTX_DOMAIN_CREATE} GROUP BY domainId) d ON d.id = n.domainId")
            domain = "COALESCE(d.name, '')"
        else:
            domains, domain = "", "''"
        style = "CASE WHEN n.eventType = 60 THEN 'StartEnd' ELSE 'PushPop' END"
        label = f"{domain} || ':' || COALESCE({text}, '')"
        nvtx = (f"SELECT {style} || char(31) || {label} AS key, {style} AS style, {label} AS label, "
                f"n.end - n.start AS v, n.start AS start FROM NVTX_EVENTS n {strings} {domains} "
                f"WHERE n.eventType IN {NVTX_RANGE_EVENT_TYPES} AND typeof(n.start) = 'integer' "
                "AND typeof(n.end) = 'integer' AND n.end >= n.start")
    osrt = None
    if export.has("OSRT_API", "start", "end", "nameId"):
        osrt = ("SELECT o.nameId AS key, s.value AS label, o.end - o.start AS v, o.start AS start FROM OSRT_API o "
                "LEFT JOIN StringIds s ON s.id = o.nameId WHERE typeof(o.start) = 'integer' "
                "AND typeof(o.end) = 'integer' AND o.end >= o.start")
    return {
        # nsys prints a call's name without its API version suffix (cudaMalloc_v3020: cudaMalloc; the
        # 7-character cudaGraphLaunch_v10000 stays as it is, as nsys's substr(name, -6, 2) = '_v' test leaves it).
        "cuda_api_sum": ("SELECT a.name AS key, CASE WHEN substr(a.name, -6, 2) = '_v' THEN "
                         "substr(a.name, 1, length(a.name) - 6) ELSE a.name END AS label, a.duration_ns AS v, "
                         "a.start AS start FROM api a", ""),
        # The kernel table's rows only: whole-graph executions of a graph-level trace are rows of the
        # kernels view for the timeline, but nsys stats does not count them as kernels.
        "cuda_gpu_kern_sum": ("SELECT k.demangled_id AS key, s.value AS label, k.duration_ns AS v, k.start AS start "
                              "FROM kernels k LEFT JOIN StringIds s ON s.id = k.demangled_id"
                              + (f" WHERE k.demangled_id < {GRAPH_NAME_BASE}" if GRAPH_NAME_BASE else ""), ""),
        "cuda_gpu_mem_time_sum": (copies.format(value="duration_ns"), ""),
        "cuda_gpu_mem_size_sum": (copies.format(value="bytes"), ""),
        "nvtx_sum": (nvtx, ", MIN(style) AS style") if nvtx else (None, ""),
        "osrt_sum": (osrt, ""),
    }


def _aggregate_sql(source: str, extra: str, window) -> str:
    """Per key: total, n, mean, median, min, max and the sample standard deviation, all in SQLite."""
    where = "" if window is None else "WHERE start >= :window_start AND start < :window_end"

    return f"""
    WITH rows_ AS (SELECT * FROM ({source}) {where}),
    ranked AS (SELECT key, v, ROW_NUMBER() OVER (PARTITION BY key ORDER BY v) AS rn,
                      COUNT(*) OVER (PARTITION BY key) AS n FROM rows_),
    medians AS (SELECT key, AVG(v) AS med FROM ranked WHERE rn IN ((n + 1) / 2, (n + 2) / 2) GROUP BY key),
    groups AS (SELECT key, MIN(label) AS label, SUM(v) AS total, COUNT(*) AS n, AVG(v) AS mean,
                      MIN(v) AS lo, MAX(v) AS hi {extra} FROM rows_ GROUP BY key),
    spread AS (SELECT r.key, SUM((r.v - g.mean) * (r.v - g.mean)) AS ss FROM rows_ r JOIN groups g ON g.key = r.key
               GROUP BY r.key)
    SELECT g.*, m.med, CASE WHEN g.n > 1 THEN sqrt(s.ss / (g.n - 1)) ELSE 0.0 END AS stddev,
           g.total * 100.0 / (SELECT SUM(total) FROM groups) AS pct
    FROM groups g JOIN medians m ON m.key = g.key JOIN spread s ON s.key = g.key
    ORDER BY g.total DESC, g.key"""


def _ensure_sqrt(connection: sqlite3.Connection) -> None:
    """SQLite builds without the math functions get sqrt from Python (called once per group)."""
    try:
        connection.execute("SELECT sqrt(4.0)").fetchone()
    except sqlite3.OperationalError:
        connection.create_function("sqrt", 1, lambda x: math.sqrt(x) if x is not None and x >= 0 else None,
                                   deterministic=True)


def table(export: NsysExport, report: str, window=None) -> list[dict]:
    """One nsys stats table as rows (column name -> value), figures rounded as nsys prints them."""
    if report not in COLUMNS:
        raise InputError(report, f"unknown stats report (known: {', '.join(REPORTS)})")
    _ensure_sqrt(export.connection)
    source, extra = _sources(export)[report]
    if source is None:
        return []
    params = {} if window is None else {
        "window_start": window.host_start if report in HOST_REPORTS else window.start, "window_end": window.end}
    try:
        rows = export.connection.execute(_aggregate_sql(source, extra, window), params).fetchall()
    except sqlite3.DatabaseError as exc:
        raise sqlite_input_error(export.path, exc) from None
    return [_row(report, row) for row in rows]


def _row(report: str, row) -> dict:
    row = dict(row)
    if report == "cuda_gpu_mem_size_sum":
        mb = 1e6
        values = [row["total"] / mb, row["n"], row["mean"] / mb, row["med"] / mb, row["lo"] / mb, row["hi"] / mb,
                  row["stddev"] / mb, row["label"]]
    else:
        values = [row["pct"], row["total"], row["n"], row["mean"], row["med"], row["lo"], row["hi"], row["stddev"]]
        values += [row["style"], row["label"]] if report == "nvtx_sum" else [row["label"]]
    out = {}
    for name, value in zip(COLUMNS[report], values):
        if name in DECIMALS and value is not None:
            value = _round(value, DECIMALS[name])
        out[name] = value
    return out


def _round(value: float, decimals: int) -> float:
    """SQLite's round(), which nsys stats' SQL applies: half away from zero on the exact binary value
    (73859.25 is exact: 73859.3; 210840.65 is 210840.6499.. in binary: 210840.6)."""
    exact = Decimal(float(value))
    return float(exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def stats(export: NsysExport, reports=DEFAULT_REPORTS, window=None) -> dict[str, list[dict]]:
    return {report: table(export, report, window) for report in reports}


def _cell(name: str, value) -> str:
    if value is None:
        return ""
    if name in DECIMALS:
        return f"{value:.{DECIMALS[name]}f}"
    if isinstance(value, str):   # profile text: never a spreadsheet formula
        from nsanalyze.render.format import csv_text

        return csv_text(value)
    return str(value)


def to_csv(report: str, rows: list[dict]) -> str:
    """nsys stats' CSV: a header of the column names, then the rows (quoted where needed)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS[report])
    for row in rows:
        writer.writerow([_cell(name, row[name]) for name in COLUMNS[report]])
    return buffer.getvalue()


def render(tables: dict[str, list[dict]], fmt: str, source: str, window_description: str) -> str:
    if fmt == "json":
        return json.dumps({"schema": "nsanalyze/stats@1", "profile": source, "window": window_description,
                           "reports": [{"report": name, "columns": list(COLUMNS[name]), "rows": rows}
                                       for name, rows in tables.items()]}, indent=2) + "\n"
    if fmt == "csv":
        parts = []
        for name, rows in tables.items():
            text = to_csv(name, rows)
            parts.append(text if len(tables) == 1 else f"# {name}\n{text}")
        return "\n".join(parts)
    raise ValueError(fmt)


def _is_text(column: str) -> bool:
    return column in ("Name", "Operation", "Range", "Style")


# Rows a terminal table shows; the rest is counted under it (-o writes them all). rich lays a table out in time
# that grows faster than its rows: 100,000 NVTX ranges ran past 90 s, where their CSV took 9 s.
TERMINAL_ROWS = 500


def print_tables(tables: dict[str, list[dict]], source: str, window_description: str, console=None) -> None:
    """The tables as rich tables on the terminal, long names folded to fit the terminal, the first TERMINAL_ROWS
    rows of each."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from nsanalyze.text import visible

    console = console or Console()
    for name, rows in tables.items():   # profile text as Text: no rich markup, no ESC sequence reaches the terminal
        grid = Table(title=Text(visible(f"{name} ({source}, {window_description})")), title_justify="left",
                     expand=False)
        columns = list(COLUMNS[name])
        left_out = max(len(rows) - TERMINAL_ROWS, 0)
        cells = [[_cell(column, row[column]) for column in columns] for row in rows[:TERMINAL_ROWS]]
        widths = {c: max([len(c.split(" (")[0])] + [len(r[i]) for r in cells]) + 3 for i, c in enumerate(columns)}
        # On a narrow terminal the spread columns go first, so the name keeps 30 characters.
        for dropped in ("StdDev", "Min", "Max", "Med", "Avg"):
            if sum(widths[c] for c in columns if not _is_text(c)) + 30 <= console.width:
                break
            columns = [c for c in columns if not c.startswith(dropped + " ")]
        captions = []
        if len(columns) < len(COLUMNS[name]):
            captions.append(f"narrow terminal: {', '.join(c for c in COLUMNS[name] if c not in columns)} left out")
        if left_out:
            captions.append(f"{left_out:,} more rows left out of the terminal; -o FILE.csv holds all {len(rows):,}")
        if captions:
            grid.caption = "; ".join(captions)
        keep = [COLUMNS[name].index(c) for c in columns]
        cells = [[r[i] for i in keep] for r in cells]
        # A figure column is as wide as its widest figure or the longest word of its header (the header
        # wraps between words, never inside one: `Instances`, not `Insta…`).
        figure_width = {i: max([len(r[i]) for r in cells] + [len(w) for w in c.split()] + [1])
                        for i, c in enumerate(columns) if not _is_text(c)}
        texts = sum(1 for c in columns if _is_text(c)) or 1
        # The figures keep their full width; long names fold onto the next lines within what is left of
        # the terminal (3 characters of border and padding a column, 1 for the last border): a signature
        # cut with "…" could not be told from its overloads.
        name_width = max(12, (console.width - sum(figure_width.values()) - 3 * len(columns) - 1) // texts)
        for i, column in enumerate(columns):
            grid.add_column(column, justify="left" if _is_text(column) else "right",
                            overflow="fold" if _is_text(column) else "ellipsis",
                            no_wrap=False, min_width=figure_width.get(i),
                            max_width=name_width if _is_text(column) else figure_width.get(i))
        for row in cells:
            grid.add_row(*(Text(visible(cell)) for cell in row))
        if not rows:
            console.print(f"{name}: no data in this export")
            continue
        console.print(grid)
