"""The nsys timeline, aggregated in SQLite: busy and idle time, gaps, streams, NVTX ranges,
synchronization, launches, copies and GPU metrics, within an analysis window.

Nothing here pulls every row into Python: each figure is one SQL aggregate over the stable views
laid by `nsanalyze.read.nsys`, and what comes back is sized by distinct names, streams, ranges
or the top-N gaps, never by the number of kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsanalyze.normalize.budget import IDLE_PARTS, PARTS, as_parts, build_budgets
from nsanalyze.normalize.steps import Steps, find_launch_pattern, find_steps
from nsanalyze.read.nsys import NsysExport

FOREVER = 2**62
TOP_GAPS = 10
MAX_RANGES = 200  # range names kept, by wall time (PyTorch's emit_nvtx makes one name per op)
SYNC_APIS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
             "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")
# Communication kernels (NCCL's device kernels across versions) and peer copies.
COMMUNICATION_KERNEL_PATTERNS = ("nccl%",)
PEER_COPY_KINDS = ("Peer-to-Peer",)
# GPU idle time after host time t: 0 when some GPU work is running at t, else the wait for the next.
# w_busy holds disjoint islands of work on any GPU, so one indexed look-up each answers both questions.
IDLE_AFTER = """(CASE WHEN COALESCE((SELECT b.end FROM w_busy b WHERE b.start <= {t} ORDER BY b.start DESC LIMIT 1), 0) > {t}
    THEN 0 ELSE COALESCE((SELECT MIN(b.start) FROM w_busy b WHERE b.start >= {t}) - {t}, 0) END)"""
# CUDA calls that put work on the GPU or wait for it (SQL over StringIds.value).
WORK_CALLS = " OR ".join(f"value LIKE '{p}%'" for p in (
    "cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cuMemcpy", "cudaMemset",
    "cuMemset", "cudaMemPrefetch", "cuMemPrefetch", *SYNC_APIS))
LONG_CALL_NS = 50_000  # calls this long stay in w_api whatever they are: they show where the host was
HOST_COPY_KINDS = ("Host-to-Device", "Device-to-Host", "Unified Host-to-Device", "Unified Device-to-Host")
GPU_METRIC_NAMES = {  # contract key -> nsys metric name prefix (names carry their unit in brackets)
    "gr_active_pct": "GR Active",
    "sm_active_pct": "SMs Active",
    "sm_issue_pct": "SM Issue",
    "tensor_active_pct": "Tensor Active",
    "dram_read_pct": "DRAM Read Bandwidth",
    "dram_write_pct": "DRAM Write Bandwidth",
    "pcie_rx_pct": "PCIe RX Throughput",
    "pcie_tx_pct": "PCIe TX Throughput",
    "gpc_clock_mhz": "GPC Clock Frequency",
}


@dataclass
class Window:
    start: int
    end: int
    description: str
    kind: str = "capture"  # steady | capture | nvtx-range | skip-first

    def params(self) -> dict:
        return {"window_start": self.start, "window_end": self.end}


@dataclass
class Timeline:
    window: Window
    summary: dict
    devices: list[dict]
    streams: list[dict]
    ranges: list[dict]
    gaps: list[dict]
    syncs: dict
    launches: dict
    copies: dict
    kernel_summary: list[dict] = field(default_factory=list)
    device_kernels: list[dict] = field(default_factory=list)
    gpu_metrics: dict | None = None
    busy_clock: dict | None = None
    budget: list[dict] | None = None       # [{part, ns, share}] over the window (mean over GPUs)
    steps: dict | None = None              # the steady steps (normalize.steps) and their median budget
    host_stretches: list[dict] = field(default_factory=list)  # longest idle_host stretches, with context


def _rows(export: NsysExport, sql: str, params: dict) -> list[dict]:
    return [dict(r) for r in export.query(sql, params)]


def choose_window(export: NsysExport, skip_first_ns: int | None, nvtx_range: str | None,
                  mode: str = "steady", steps: Steps | None = None) -> Window:
    """The analysis window: the user's NVTX range or skip, else the steady steps, else the capture."""
    first = export.scalar("SELECT MIN(start) FROM (SELECT start FROM kernels UNION ALL SELECT start FROM copies)")
    if first is None:
        first = export.scalar("SELECT MIN(start) FROM nvtx") or 0
    start, end, parts, kind = -FOREVER, FOREVER, [], "capture"
    if nvtx_range:
        row = export.query("SELECT MIN(start), MAX(end), COUNT(*) FROM nvtx WHERE name = ?", (nvtx_range,))[0]
        if not row[2]:
            from nsanalyze.errors import InputError
            names = [r[0] for r in export.query("SELECT DISTINCT name FROM nvtx ORDER BY name LIMIT 20")]
            raise InputError(export.path, f"no NVTX range named {nvtx_range!r} (ranges: {', '.join(map(str, names)) or 'none'})")
        start, end = row[0], row[1]
        parts.append(f"NVTX range '{nvtx_range}' ({row[2]} instance(s))")
        kind = "nvtx-range"
    if skip_first_ns:
        start = max(start, min(first + skip_first_ns, FOREVER - 1))  # a huge skip leaves an empty window
        parts.append(f"skipping the first {skip_first_ns / 1e6:g} ms of GPU activity")
        kind = "nvtx-range" if nvtx_range else "skip-first"
    if kind == "capture" and mode == "steady" and steps is None:
        pattern = find_launch_pattern(export)
        if pattern is not None:
            return Window(pattern.start, pattern.end,
                          f"steady state: from the first of {pattern.launches} launches of '{pattern.kernel}' "
                          f"(no step-like NVTX range; the loop read off its most launched kernel); "
                          f"{max(0, pattern.start - first) / 1e9:.2f} s of GPU start-up before it left out", "steady")
    if kind == "capture" and mode == "steady" and steps is not None:
        capture_start = export.scalar("SELECT MIN(start) FROM api_raw")
        capture_start = min(capture_start, first) if capture_start is not None else first
        start, end = int(steps.starts[0]), int(steps.ends[-1])
        startup = max(0, start - capture_start)
        warm = f" and {steps.warmup} warm-up step{'s' if steps.warmup != 1 else ''}" if steps.warmup else ""
        return Window(start, end, f"steady state: steps {steps.first_index}-{steps.total - 1} of '{steps.name}'; "
                                  f"{startup / 1e9:.2f} s before them (start-up{warm}) left out", "steady")
    if kind == "capture":
        parts.append("the whole capture" + (" (no repeating step-like NVTX range found)" if mode == "steady" else ""))
    return Window(start, end, "; ".join(parts), kind)


def merge_intervals(rows):
    """Union of intervals per key, streamed: rows are (key, start, end) sorted by key then start;
    yields (key, start, end) of each island of overlapping or touching intervals."""
    key = start = end = None
    for row_key, row_start, row_end in rows:
        if start is None or row_key != key or row_start > end:
            if start is not None:
                yield key, start, end
            key, start, end = row_key, row_start, row_end
        elif row_end > end:
            end = row_end
    if start is not None:
        yield key, start, end


def with_idle_before(islands):
    """(start, end, idle time since the previous island ended) for islands in time order."""
    previous_end = None
    for _, start, end in islands:
        yield start, end, (start - previous_end) if previous_end is not None else None
        previous_end = end


def _materialize(export: NsysExport, window: Window) -> None:
    """Temp tables of the window's activity, indexed for the joins below."""
    con = export.connection
    con.execute("DROP VIEW IF EXISTS temp.w_islands")
    for name in ("w_kernels", "w_copies", "w_activity", "w_islands", "w_api", "w_comm", "w_busy"):
        con.execute(f"DROP TABLE IF EXISTS temp.{name}")
    con.execute("""CREATE TEMP TABLE w_kernels AS SELECT * FROM kernels
                   WHERE start >= :window_start AND start < :window_end""", window.params())
    con.execute("CREATE INDEX temp.w_kernels_corr ON w_kernels(correlation_id)")
    con.execute("""CREATE TEMP TABLE w_copies AS SELECT * FROM copies
                   WHERE start >= :window_start AND start < :window_end""", window.params())
    con.execute("CREATE INDEX temp.w_copies_corr ON w_copies(correlation_id)")
    # One row per correlation id for joins with the calls: an export that repeats ids must not multiply.
    con.execute("DROP TABLE IF EXISTS temp.w_copy_calls")
    con.execute("""CREATE TEMP TABLE w_copy_calls AS SELECT correlation_id, MIN(copy_kind) AS copy_kind,
                   MIN(dst_kind) AS dst_kind FROM w_copies GROUP BY correlation_id""")
    con.execute("CREATE INDEX temp.w_copy_calls_corr ON w_copy_calls(correlation_id)")
    con.execute("CREATE TEMP TABLE w_activity(device_id INTEGER, start INTEGER, end INTEGER)")
    con.execute("""INSERT INTO w_activity
        SELECT device_id, start, end FROM w_kernels UNION ALL SELECT device_id, start, end FROM w_copies""")
    con.execute("CREATE INDEX temp.w_activity_device ON w_activity(device_id, start, end)")
    # Islands of continuous GPU work per device: the union of the kernel and copy intervals, merged
    # in one streaming pass over the rows in time order (SQLite's window functions take 3x longer).
    devices = [r[0] for r in con.execute("SELECT DISTINCT device_id FROM w_activity")]
    con.execute("CREATE TEMP TABLE w_busy(start INTEGER, end INTEGER, idle_before INTEGER)")
    if len(devices) <= 1:  # one GPU: its islands are the busy islands, stored once
        con.executemany("INSERT INTO w_busy VALUES (?, ?, ?)", with_idle_before(merge_intervals(
            con.execute("SELECT device_id, start, end FROM w_activity ORDER BY device_id, start, end"))))
        con.execute(f"""CREATE TEMP VIEW w_islands AS SELECT {int(devices[0]) if devices else 0} AS device_id,
                        start, end FROM w_busy""")
    else:
        con.execute("CREATE TEMP TABLE w_islands(device_id INTEGER, start INTEGER, end INTEGER)")
        con.executemany("INSERT INTO w_islands VALUES (?, ?, ?)", merge_intervals(
            con.execute("SELECT device_id, start, end FROM w_activity ORDER BY device_id, start, end")))
        con.execute("CREATE INDEX temp.w_islands_dev ON w_islands(device_id, start)")
        # The same over all GPUs together, each island with the idle gap in front of it.
        con.executemany("INSERT INTO w_busy VALUES (?, ?, ?)", with_idle_before(merge_intervals(
            con.execute("SELECT 0, start, end FROM w_islands ORDER BY start, end"))))
    con.execute("CREATE UNIQUE INDEX temp.w_busy_start ON w_busy(start)")
    # Communication: NCCL kernels and peer-to-peer copies; everything else on the GPU is compute.
    nccl = " OR ".join(f"s.value LIKE '{p}'" for p in COMMUNICATION_KERNEL_PATTERNS)
    con.execute("""CREATE TEMP TABLE w_comm(device_id INTEGER, stream_id INTEGER, start INTEGER, end INTEGER,
                   duration_ns INTEGER, name TEXT)""")
    con.execute(f"""INSERT INTO w_comm
        SELECT k.device_id, k.stream_id, k.start, k.end, k.duration_ns, s.value AS name FROM w_kernels k
        JOIN StringIds s ON s.id = k.short_name_id WHERE {nccl}
        UNION ALL
        SELECT c.device_id, c.stream_id, c.start, c.end, c.duration_ns, mk.label FROM w_copies c
        JOIN memcpy_kinds mk ON mk.id = c.copy_kind WHERE mk.label IN ({",".join(f"'{k}'" for k in PEER_COPY_KINDS)})""")
    # Only the calls the projections below read: those that put work on the GPU or wait for it, and
    # long ones (what the host was in during a gap). Frameworks make as many other short calls
    # (cudaGetDevice, cudaStreamIsCapturing, ...) as launches; the budget counts those from api_raw.
    wanted = ",".join(str(r[0]) for r in con.execute(f"""
        SELECT id FROM StringIds WHERE id IN (SELECT DISTINCT name_id FROM api_raw) AND ({WORK_CALLS})""")) or "NULL"
    con.execute(f"""CREATE TEMP TABLE w_api AS SELECT a.start, a.end, a.duration_ns, a.global_tid, a.correlation_id,
                       s.value AS name FROM api_raw a LEFT JOIN StringIds s ON s.id = a.name_id
                   WHERE a.end >= :window_start AND a.start < :window_end
                     AND (a.name_id IN ({wanted}) OR a.duration_ns >= {LONG_CALL_NS})""", window.params())
    con.execute("CREATE INDEX temp.w_api_tid ON w_api(global_tid, start)")
    con.execute("CREATE INDEX temp.w_api_corr ON w_api(correlation_id)")
    con.execute("CREATE INDEX temp.w_api_start ON w_api(start)")


def _devices(export: NsysExport, exposed_ns: dict[int, int]) -> list[dict]:
    """Per GPU: busy time, kernels, copies, communication; `exposed_ns` is each GPU's exposed
    communication, the budget's gpu_communication part (found by its sweep in linear time)."""
    rows = _rows(export, """
        SELECT i.device_id, MIN(i.start) AS first_ns, MAX(i.end) AS last_ns, SUM(i.end - i.start) AS gpu_busy_ns,
               (SELECT COALESCE(SUM(duration_ns), 0) FROM w_kernels k WHERE k.device_id = i.device_id) AS kernel_ns,
               (SELECT COALESCE(SUM(duration_ns), 0) FROM w_copies c WHERE c.device_id = i.device_id
                    AND c.operation = 'memcpy') AS memcpy_ns,
               (SELECT COALESCE(SUM(duration_ns), 0) FROM w_copies c WHERE c.device_id = i.device_id
                    AND c.operation = 'memset') AS memset_ns
        FROM w_islands i GROUP BY i.device_id ORDER BY i.device_id""", {})
    names = {d.device_id: d.name for d in export.devices}
    communication = {r["device_id"]: r for r in _communication(export)}
    for row in rows:
        row["name"] = names.get(row["device_id"])
        row["span_ns"] = row["last_ns"] - row["first_ns"]
        row["gpu_idle_ns"] = row["span_ns"] - row["gpu_busy_ns"]
        comm = communication.get(row["device_id"], {})
        row["communication_ns"] = comm.get("communication_ns", 0)
        row["exposed_communication_ns"] = exposed_ns.get(row["device_id"], 0) if comm else 0
        row["communication_kernels"] = comm.get("kernels", 0)
        row["compute_kernel_ns"] = row["kernel_ns"] - comm.get("kernel_communication_ns", 0)
    return rows


def _communication(export: NsysExport) -> list[dict]:
    """Per device: communication (NCCL kernels, peer copies) launched in the window, and its kernel part."""
    return _rows(export, """
        SELECT device_id, COUNT(*) AS kernels, SUM(duration_ns) AS communication_ns,
               SUM(CASE WHEN name = 'Peer-to-Peer' THEN 0 ELSE duration_ns END) AS kernel_communication_ns
        FROM w_comm GROUP BY device_id""", {})


def device_kernel_breakdown(export: NsysExport) -> list[dict]:
    """Per device and kernel name: time, for finding where a slow device spends its extra time."""
    return _rows(export, """
        SELECT k.device_id, s.value AS name, COUNT(*) AS launches, SUM(k.duration_ns) AS duration_ns
        FROM w_kernels k JOIN StringIds s ON s.id = k.short_name_id GROUP BY k.device_id, k.short_name_id""", {})


def _gap_rows(export: NsysExport) -> str:
    """SQL for the idle gaps per device (device_id, start, end): read off w_busy with one GPU."""
    if export.connection.execute("SELECT type FROM sqlite_temp_master WHERE name = 'w_islands'").fetchone()[0] == "view":
        return """SELECT (SELECT device_id FROM w_islands LIMIT 1) AS device_id, start - idle_before AS start,
                         start AS end FROM w_busy WHERE idle_before IS NOT NULL"""
    return """SELECT * FROM (SELECT device_id, end AS start, LEAD(start) OVER (PARTITION BY device_id ORDER BY start)
                                 AS end FROM w_islands) WHERE end IS NOT NULL"""


def _gaps(export: NsysExport) -> list[dict]:
    gaps = _rows(export, f"""
        SELECT device_id, start, end, end - start AS duration_ns FROM ({_gap_rows(export)})
        ORDER BY duration_ns DESC LIMIT {TOP_GAPS}""", {})
    for gap in gaps:
        # What the host was doing: the CUDA calls overlapping the gap, longest overlap first.
        calls = export.query("""
            SELECT name, COUNT(*) AS calls, SUM(MIN(end, :gap_end) - MAX(start, :gap_start)) AS overlap_ns
            FROM w_api WHERE start < :gap_end AND end > :gap_start
            GROUP BY name ORDER BY overlap_ns DESC LIMIT 3""", {"gap_start": gap["start"], "gap_end": gap["end"]})
        gap["host_calls"] = [dict(c) for c in calls]
        enclosing = export.query("""SELECT name FROM nvtx WHERE start <= :gap_start AND end >= :gap_end
                                    ORDER BY duration_ns ASC LIMIT 1""", {"gap_start": gap["start"], "gap_end": gap["end"]})
        gap["nvtx_range"] = enclosing[0][0] if enclosing else None
    return gaps


def _gap_histogram(export: NsysExport, bucket_edges_ns=(1_000, 10_000, 100_000, 1_000_000)) -> dict:
    cases = " ".join(f"WHEN end - start < {edge} THEN {i}" for i, edge in enumerate(bucket_edges_ns))
    rows = export.query(f"""
        SELECT CASE {cases} ELSE {len(bucket_edges_ns)} END AS bucket, COUNT(*), SUM(end - start)
        FROM ({_gap_rows(export)}) GROUP BY bucket""")
    labels = [f"< {e / 1000:g} us" for e in bucket_edges_ns] + [f">= {bucket_edges_ns[-1] / 1000:g} us"]
    histogram = {label: {"gaps": 0, "idle_ns": 0} for label in labels}
    for bucket, count, total in rows:
        histogram[labels[bucket]] = {"gaps": count, "idle_ns": total}
    return histogram


def _streams(export: NsysExport) -> list[dict]:
    return _rows(export, """
        SELECT device_id, stream_id, SUM(kernels) AS kernels, SUM(kernel_ns) AS kernel_ns,
               SUM(copies) AS copies, SUM(copy_ns) AS copy_ns FROM (
            SELECT device_id, stream_id, COUNT(*) AS kernels, SUM(duration_ns) AS kernel_ns, 0 AS copies, 0 AS copy_ns
            FROM w_kernels GROUP BY device_id, stream_id
            UNION ALL
            SELECT device_id, stream_id, 0, 0, COUNT(*), SUM(duration_ns) FROM w_copies GROUP BY device_id, stream_id)
        GROUP BY device_id, stream_id ORDER BY kernel_ns + copy_ns DESC""", {})


def _ranges(export: NsysExport, window: Window) -> list[dict]:
    """Per NVTX range name: wall time, and the GPU time of the work its CPU calls launched."""
    export.connection.execute("DROP TABLE IF EXISTS temp.w_nvtx")
    export.connection.execute("""CREATE TEMP TABLE w_nvtx AS SELECT ROW_NUMBER() OVER () AS range_id, * FROM nvtx
        WHERE end >= :window_start AND start < :window_end""", window.params())
    return _rows(export, f"""
        WITH launched AS (  -- CUDA calls made while the range was open, by any thread of its process
            SELECT n.range_id, a.correlation_id, a.global_tid / 16777216 AS pid FROM w_nvtx n
            JOIN w_api a ON a.start >= n.start AND a.start <= n.end
                        AND COALESCE(a.global_tid / 16777216, -1) = COALESCE(n.global_tid / 16777216, -1)),
        kernel_work AS (  -- per launch: graph nodes share their launch's correlation id, summed once here
            SELECT global_pid / 16777216 AS pid, correlation_id, SUM(duration_ns) AS ns, COUNT(*) AS n
            FROM w_kernels GROUP BY 1, 2),
        copy_work AS (
            SELECT global_pid / 16777216 AS pid, correlation_id, SUM(duration_ns) AS ns FROM w_copies GROUP BY 1, 2),
        gpu AS (
            SELECT l.range_id, COALESCE(SUM(k.ns), 0) AS kernel_ns, COALESCE(SUM(k.n), 0) AS kernels,
                   COALESCE(SUM(c.ns), 0) AS copy_ns
            FROM launched l
            LEFT JOIN kernel_work k ON k.correlation_id = l.correlation_id
                 AND (k.pid IS NULL OR l.pid IS NULL OR k.pid = l.pid)
            LEFT JOIN copy_work c ON c.correlation_id = l.correlation_id
                 AND (c.pid IS NULL OR l.pid IS NULL OR c.pid = l.pid)
            GROUP BY l.range_id),
        events AS (
            SELECT global_tid, start AS t, 1 AS delta, range_id FROM w_nvtx
            UNION ALL SELECT global_tid, end, -1, NULL FROM w_nvtx),
        depths AS (  -- ranges open on the same thread when this one starts: 0 = top level
            SELECT range_id, depth FROM (
                SELECT range_id, SUM(delta) OVER (PARTITION BY global_tid ORDER BY t, delta
                                                  ROWS UNBOUNDED PRECEDING) - 1 AS depth FROM events)
            WHERE range_id IS NOT NULL)
        SELECT n.name, COUNT(*) AS instances, SUM(n.duration_ns) AS wall_ns, MIN(n.start) AS first_start,
               MAX(n.end) AS last_end, COALESCE(SUM(g.kernel_ns), 0) AS kernel_ns,
               COALESCE(SUM(g.kernels), 0) AS kernels, COALESCE(SUM(g.copy_ns), 0) AS copy_ns,
               MIN(d.depth) AS depth
        FROM w_nvtx n JOIN depths d ON d.range_id = n.range_id
        LEFT JOIN gpu g ON g.range_id = n.range_id
        GROUP BY n.name ORDER BY wall_ns DESC LIMIT {MAX_RANGES}""", {})


def _syncs(export: NsysExport) -> dict:
    """Host waits: explicit synchronization calls, and what each cost the GPU afterwards."""
    names = " OR ".join(f"a.name LIKE '{n}%'" for n in SYNC_APIS)
    explicit = _rows(export, f"""
        SELECT REPLACE(REPLACE(a.name, '_v3020', ''), '_v2', '') AS name, COUNT(*) AS calls,
               SUM(a.duration_ns) AS wait_ns,
               SUM({IDLE_AFTER.format(t="a.end")}) AS relaunch_gap_ns
        FROM w_api a WHERE {names} GROUP BY 1 ORDER BY wait_ns DESC""", {})
    # Implicit syncs: a synchronous device-to-host copy (what `.item()`/`.cpu()` do) blocks the host too.
    implicit = _rows(export, f"""
        SELECT a.name, COUNT(*) AS calls, SUM(a.duration_ns) AS wait_ns,
               SUM({IDLE_AFTER.format(t="a.end")}) AS relaunch_gap_ns
        FROM w_api a JOIN w_copy_calls c ON c.correlation_id = a.correlation_id
        JOIN memcpy_kinds mk ON mk.id = c.copy_kind
        WHERE mk.label = 'Device-to-Host' AND (a.name NOT LIKE '%Async%' OR c.dst_kind = 0)
        GROUP BY a.name""", {})
    for row in explicit + implicit:
        row["relaunch_gap_ns"] = max(0, row["relaunch_gap_ns"] or 0)
    # Several syncs in a row share one idle stretch: count each stretch once, from the first sync's return.
    total = export.scalar(f"""
        WITH waits AS (
            SELECT a.end FROM w_api a WHERE {names}
            UNION ALL
            SELECT a.end FROM w_api a JOIN w_copy_calls c ON c.correlation_id = a.correlation_id
            JOIN memcpy_kinds mk ON mk.id = c.copy_kind
            WHERE mk.label = 'Device-to-Host' AND (a.name NOT LIKE '%Async%' OR c.dst_kind = 0)),
        next AS (SELECT w.end, w.end + {IDLE_AFTER.format(t="w.end")} AS next_start FROM waits w)
        SELECT COALESCE(SUM(next_start - first_end), 0) FROM (
            SELECT next_start, MIN(end) AS first_end FROM next WHERE next_start > end GROUP BY next_start)""")
    return {"explicit": explicit, "implicit": implicit, "relaunch_gap_ns": total}


def _launches(export: NsysExport) -> dict:
    """Kernel launches whose GPU time is shorter than the CPU time of their launch call, per kernel
    name in one pass: how many, their time, and the GPU idle time in front of them."""
    rows = _rows(export, """
        SELECT k.short_name_id, COUNT(*) AS launches,
               SUM(k.duration_ns < a.duration_ns) AS short_kernels,
               SUM(CASE WHEN k.duration_ns < a.duration_ns THEN k.duration_ns ELSE 0 END) AS short_kernel_ns,
               SUM(CASE WHEN k.duration_ns < a.duration_ns THEN a.duration_ns ELSE 0 END) AS short_launch_api_ns,
               SUM(CASE WHEN k.duration_ns < a.duration_ns THEN
                   MIN(a.duration_ns, COALESCE((SELECT b.idle_before FROM w_busy b WHERE b.start = k.start), 0))
                   ELSE 0 END) AS idle_before_short_ns
        FROM w_kernels k JOIN w_api a ON a.rowid = (  -- one call per correlation id, whatever the export repeats
            SELECT MIN(rowid) FROM w_api WHERE correlation_id = k.correlation_id)
        WHERE a.name LIKE 'cudaLaunch%' OR a.name LIKE 'cuLaunch%' 
        GROUP BY k.short_name_id""", {})
    totals = {key: sum(r[key] or 0 for r in rows) for key in
              ("launches", "short_kernels", "short_kernel_ns", "short_launch_api_ns", "idle_before_short_ns")}
    top = sorted((r for r in rows if r["short_kernels"]), key=lambda r: -r["short_kernels"])[:5]
    names = dict(export.query(f"SELECT id, value FROM StringIds WHERE id IN ({','.join(str(r['short_name_id']) for r in top) or 'NULL'})"))
    totals["top"] = [{"name": names.get(r["short_name_id"]), "launches": r["short_kernels"],
                      "mean_kernel_ns": r["short_kernel_ns"] / r["short_kernels"],
                      "mean_launch_ns": r["short_launch_api_ns"] / r["short_kernels"]} for r in top]
    return totals


def _copies(export: NsysExport) -> dict:
    """Host<->device copies by memory kind and issuing API, with the pageable and synchronous ones listed."""
    kinds = ",".join(f"'{k}'" for k in HOST_COPY_KINDS)
    base = f"""SELECT c.start, c.duration_ns, c.bytes, mk.label AS copy_kind, sk.label AS src_kind,
                      dk.label AS dst_kind, a.name AS api, c.device_id, c.stream_id
               FROM w_copies c JOIN memcpy_kinds mk ON mk.id = c.copy_kind
               LEFT JOIN memory_kinds sk ON sk.id = c.src_kind LEFT JOIN memory_kinds dk ON dk.id = c.dst_kind
               LEFT JOIN w_api a ON a.rowid = (  -- one call per correlation id, whatever the export repeats
                    SELECT MIN(rowid) FROM w_api WHERE correlation_id = c.correlation_id)
               WHERE c.operation = 'memcpy' AND mk.label IN ({kinds})"""
    by_kind = _rows(export, f"""SELECT copy_kind, src_kind, dst_kind, COUNT(*) AS copies, SUM(bytes) AS bytes,
                                       SUM(duration_ns) AS duration_ns FROM ({base}) GROUP BY 1, 2, 3
                                ORDER BY duration_ns DESC""", {})
    pageable_async = _rows(export, f"""SELECT * FROM ({base}) WHERE (src_kind = 'Pageable' OR dst_kind = 'Pageable')
                                       AND api LIKE '%Async%' ORDER BY duration_ns DESC LIMIT 50""", {})
    pageable_totals = export.query(f"""SELECT COUNT(*), COALESCE(SUM(duration_ns), 0), COALESCE(SUM(bytes), 0)
                                       FROM ({base}) WHERE src_kind = 'Pageable' OR dst_kind = 'Pageable'""")[0]
    # nsys analyze's cuda_memcpy_sync: synchronous copies, except host-to-device ones of 64 KB or less.
    sync = _rows(export, f"""SELECT * FROM ({base}) WHERE api NOT LIKE '%Async%'
                             AND NOT (copy_kind = 'Host-to-Device' AND bytes <= 65536)
                             ORDER BY duration_ns DESC LIMIT 50""", {})
    sync_totals = export.query(f"""SELECT COUNT(*), COALESCE(SUM(duration_ns), 0) FROM ({base})
                                   WHERE api NOT LIKE '%Async%' AND NOT (copy_kind = 'Host-to-Device' AND bytes <= 65536)""")[0]
    return {"by_kind": by_kind, "pageable": {"copies": pageable_totals[0], "duration_ns": pageable_totals[1],
                                             "bytes": pageable_totals[2], "async_top": pageable_async},
            "sync": {"copies": sync_totals[0], "duration_ns": sync_totals[1], "top": sync}}


def _percentiles(histogram: list[tuple[float, int]], quantiles=(0.5, 0.95)) -> dict:
    total = sum(count for _, count in histogram)
    result = {}
    for q in quantiles:
        target, seen = q * total, 0
        for value, count in histogram:
            seen += count
            if seen >= target:
                result[f"p{int(q * 100)}"] = value
                break
    return result


def gpu_metrics(export: NsysExport, window: Window, ranges: list[dict]) -> dict | None:
    """Mean and percentiles of each sampled GPU metric, over the window and per top-level NVTX range.

    Values are integers from a small set (percent, MHz), so a GROUP BY value histogram gives
    exact percentiles without sorting millions of samples."""
    if not export.has_gpu_metrics:
        return None
    ids = {}
    for metric_id, name in export.query("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS"):
        for key, prefix in GPU_METRIC_NAMES.items():
            if name.startswith(prefix + " [") and key not in ids:
                ids[key] = metric_id
    if not ids:
        return None

    def summarize(start, end) -> dict:
        placeholders = ",".join(str(i) for i in ids.values())
        rows = export.query(f"""SELECT metricId, value, COUNT(*) FROM GPU_METRICS
                                WHERE metricId IN ({placeholders}) AND timestamp >= ? AND timestamp < ?
                                GROUP BY metricId, value ORDER BY metricId, value""", (start, end))
        by_id: dict[int, list] = {}
        for metric_id, value, count in rows:
            by_id.setdefault(metric_id, []).append((value, count))
        out = {}
        for key, metric_id in ids.items():
            hist = by_id.get(metric_id)
            if not hist:
                out[key] = None
                continue
            n = sum(c for _, c in hist)
            scale = _unit_scale(key, hist)
            hist = [(v * scale, c) for v, c in hist]
            out[key] = {"mean": sum(v * c for v, c in hist) / n, **_percentiles(hist), "samples": n}
        return out

    overall = summarize(window.start, window.end)
    top_level = [r for r in ranges if r.get("depth") == 0]
    per_range = []
    for r in top_level:
        entry = summarize(max(window.start, r["first_start"]), min(window.end, r["last_end"]))
        per_range.append({"name": r["name"], **entry})
    timeline_rows = export.query(f"""SELECT (timestamp - :s) / :bucket AS b, metricId, AVG(value)
        FROM GPU_METRICS WHERE metricId IN ({','.join(str(ids[k]) for k in ('gr_active_pct', 'sm_issue_pct', 'tensor_active_pct') if k in ids)})
        AND timestamp >= :s AND timestamp < :e GROUP BY b, metricId ORDER BY b""",
        _series_params(export, window))
    series: dict[str, list] = {}
    names_by_id = {v: k for k, v in ids.items()}
    params = _series_params(export, window)
    for bucket, metric_id, mean in timeline_rows:
        series.setdefault(names_by_id[metric_id], []).append([params["s"] + bucket * params["bucket"], mean])
    return {**overall, "ranges": per_range, "series": series, "series_bucket_ns": params["bucket"]}


def _unit_scale(key: str, histogram) -> float:
    """nsys 2025 stores "GPC Clock Frequency [MHz]" samples in Hz; bring them to MHz."""
    if key.endswith("_mhz") and histogram and histogram[-1][0] > 100_000:
        return 1e-6
    return 1.0


def _series_params(export: NsysExport, window: Window, points: int = 400) -> dict:
    first, last = export.query("SELECT MIN(timestamp), MAX(timestamp) FROM GPU_METRICS")[0]
    start, end = max(first, window.start), min(last, window.end)
    return {"s": start, "e": end + 1, "bucket": max(1, (end - start) // points + 1)}


def build_timeline(export: NsysExport, skip_first_ns=None, nvtx_range=None, mode: str = "steady") -> Timeline:
    steps = find_steps(export, nvtx_range)
    window = choose_window(export, skip_first_ns, nvtx_range, mode, steps)
    _materialize(export, window)
    budgets = build_budgets(export, (window.start, window.end))
    devices = _devices(export, {b.device_id: b.labelled.totals()["gpu_communication"] for b in budgets})
    totals = export.query("""SELECT (SELECT COALESCE(SUM(duration_ns), 0) FROM w_kernels),
                                    (SELECT COUNT(*) FROM w_kernels),
                                    (SELECT COALESCE(SUM(duration_ns), 0) FROM w_copies WHERE operation = 'memcpy'),
                                    (SELECT COALESCE(SUM(duration_ns), 0) FROM w_copies WHERE operation = 'memset')""")[0]
    by_device = {b.device_id: b for b in budgets}
    for device in devices:
        budget = by_device.get(device["device_id"])
        if budget is not None:
            device["window_ns"] = budget.end - budget.start
            device["budget"] = budget.parts()
    if window.start > -FOREVER and window.end < FOREVER:
        span = window.end - window.start
    else:
        span = max((d["last_ns"] for d in devices), default=0) - min((d["first_ns"] for d in devices), default=0)
    overall = _mean_budget(budgets)
    busy = sum(d["gpu_busy_ns"] for d in devices)
    idle = sum(d["gpu_idle_ns"] for d in devices)
    summary = {"span_ns": span, "gpu_busy_ns": busy, "gpu_idle_ns": idle,
               "gpu_busy_share": busy / (busy + idle) if busy + idle else None,
               "kernel_ns": totals[0], "kernels": totals[1], "memcpy_ns": totals[2], "memset_ns": totals[3],
               "gap_histogram": _gap_histogram(export)}
    if overall:
        window_ns = sum(p["ns"] for p in overall)
        summary["span_ns"] = window_ns
        summary["gpu_busy_share"] = sum(p["ns"] for p in overall if p["part"] not in IDLE_PARTS) / window_ns \
            if window_ns else None
    ranges = _ranges(export, window)
    timeline = Timeline(window=window, summary=summary, devices=devices, streams=_streams(export), ranges=ranges,
                        gaps=_gaps(export), syncs=_syncs(export), launches=_launches(export), copies=_copies(export))
    timeline.budget = overall
    timeline.steps = _steps_section(steps, budgets) if steps is not None else None
    timeline.host_stretches = _host_stretches(export, budgets)
    # GPU metrics are sampled from the capture's start; outside the span of GPU work they only dilute.
    active = Window(max(window.start, min((d["first_ns"] for d in devices), default=window.start)),
                    min(window.end, max((d["last_ns"] for d in devices), default=window.end)), window.description)
    timeline.device_kernels = device_kernel_breakdown(export) if len(devices) > 1 else []
    timeline.gpu_metrics = gpu_metrics(export, active, ranges)
    timeline.busy_clock = busy_clock(export, active)
    return timeline


def _mean_budget(budgets) -> list[dict] | None:
    """One budget for the window: each part's time averaged over the GPUs (wall-clock time, never a sum)."""
    if not budgets:
        return None
    totals = {part: 0.0 for part in PARTS}
    for budget in budgets:
        for part, ns in budget.labelled.totals().items():
            totals[part] += ns / len(budgets)
    window_ns = sum(b.end - b.start for b in budgets) / len(budgets)
    return as_parts(totals, window_ns)


def _steps_section(steps: Steps, budgets) -> dict:
    """The steady steps' figures and the budget of a median step (mean shares of the steps, times the median)."""
    section = steps.summary()
    if budgets:
        durations = np.maximum(steps.durations, 1)
        shares = np.mean([np.mean(b.labelled.totals_many(steps.starts, steps.ends) / durations[:, None], axis=0)
                          for b in budgets], axis=0)
        section["budget"] = as_parts(dict(zip(PARTS, shares * section["median_ns"])), section["median_ns"])
    return section


def _host_stretches(export: NsysExport, budgets, limit: int = 5) -> list[dict]:
    """The longest stretches in which the GPU waited on the host's own work, with what the host was in:
    the innermost NVTX range around it and the OS runtime calls during it (when traced)."""
    stretches = []
    for budget in budgets:
        stretches += [{"device_id": budget.device_id, "start_ns": s, "duration_ns": e - s}
                      for s, e in budget.labelled.stretches(PARTS.index("idle_host"), limit)]
    stretches = sorted(stretches, key=lambda r: -r["duration_ns"])[:limit]
    osrt = export.has("OSRT_API", "start", "end", "nameId", "globalTid")
    pids = ",".join(str(p) for b in budgets for p in b.processes) or "NULL"
    for stretch in stretches:
        start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
        inner = export.query("""SELECT name FROM nvtx WHERE start <= :s AND end >= :e AND name IS NOT NULL
                                ORDER BY duration_ns LIMIT 1""", {"s": start, "e": end})
        stretch["nvtx_range"] = inner[0][0] if inner else None
        if osrt:
            stretch["os_calls"] = [dict(r) for r in export.query(f"""
                SELECT s.value AS name, COUNT(*) AS calls, SUM(MIN(o.end, :e) - MAX(o.start, :s)) AS overlap_ns
                FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId WHERE o.start < :e AND o.end > :s
                     AND o.globalTid / 16777216 IN ({pids})
                GROUP BY o.nameId ORDER BY overlap_ns DESC LIMIT 3""", {"s": start, "e": end})]
    return stretches


def busy_clock(export: NsysExport, window: Window, min_gr_active_pct: int = 50) -> dict | None:
    """Median GPC clock over the samples in which the GPU was busy (GR Active >= min)."""
    if not export.has_gpu_metrics:
        return None
    ids = dict(export.query("SELECT metricName, metricId FROM TARGET_INFO_GPU_METRICS"))
    clock = next((v for k, v in ids.items() if k.startswith(GPU_METRIC_NAMES["gpc_clock_mhz"])), None)
    active = next((v for k, v in ids.items() if k.startswith(GPU_METRIC_NAMES["gr_active_pct"])), None)
    if clock is None or active is None:
        return None
    histogram = [(v, c) for v, c in export.query("""
        SELECT c.value, COUNT(*) FROM GPU_METRICS c JOIN GPU_METRICS g
            ON g.timestamp = c.timestamp AND g.metricId = ? AND g.value >= ?
        WHERE c.metricId = ? AND c.timestamp >= ? AND c.timestamp < ?
        GROUP BY c.value ORDER BY c.value""", (active, min_gr_active_pct, clock, window.start, window.end))]
    if not histogram:
        return None
    scale = _unit_scale("gpc_clock_mhz", histogram)
    median = _percentiles([(v * scale, c) for v, c in histogram], (0.5,))["p50"]
    device_hz = next((d.clock_hz for d in export.devices if d.clock_hz), None)
    maximum = device_hz / 1e6 if device_hz else histogram[-1][0] * scale
    return {"median_mhz": median, "max_mhz": maximum, "samples": sum(c for _, c in histogram)}
