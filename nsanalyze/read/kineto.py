"""PyTorch profiler (Kineto) Chrome-trace JSON, read as an Nsight Systems export.

A Kineto trace (`*.json`, `*.json.gz`, `*.pt.trace.json[.gz]`) holds the same CUPTI activity as an nsys
export: kernels, memcpy/memset, CUDA runtime and driver calls (joined to their GPU work by
`args.correlation`), plus what nsys lacks: the framework op of every call (`cpu_op`), the
`record_function` annotations (`user_annotation`) and the `ProfilerStep#N` steps. It is converted once
into an SQLite file with the tables and columns of an nsys export (CUPTI_ACTIVITY_KIND_KERNEL, ...,
NVTX_EVENTS, StringIds, TARGET_INFO_GPU), kept in the decompression cache keyed by the trace's content,
and opened with `read_nsys`: everything downstream is the nsys pipeline, unchanged, on kind `kineto`.

Kineto's timestamps are float microseconds on the Unix clock minus `baseTimeNanoseconds`; they become
integer nanoseconds (rounded; a duration is rounded on its own so lengths stay exact), and
`baseTimeNanoseconds` is the session start (TARGET_INFO_SESSION_START_TIME), so per-rank traces line up.
GPU work of one stream that overlaps its predecessor by the rounding is clipped to start where the
predecessor ends. Extra tables the checks may read, for Kineto only:

    KINETO_CALL_OPS(correlationId, globalTid, start, depth, op)  -- the CPU ops and annotations around each
                                                                    CUDA call, outermost (depth 0) first, 3 at most
    KINETO_META(key, value)                                -- rank, world size, CPU ops, record_shapes
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from nsanalyze.errors import InputError

FORMAT_VERSION = 5  # bump when the conversion changes: cached conversions of older versions are not reused
PID_SHIFT = 24      # as nsys: globalTid = pid << 24 | tid (nsanalyze.normalize.activity.PID_SHIFT)
TID_MASK = (1 << PID_SHIFT) - 1

KERNEL_CATS = {"kernel"}
MEMCPY_CATS = {"gpu_memcpy", "memcpy"}
MEMSET_CATS = {"gpu_memset", "memset"}
RUNTIME_CATS = {"cuda_runtime", "runtime"}
DRIVER_CATS = {"cuda_driver"}
SYNC_CATS = {"cuda_sync"}
ANNOTATION_CATS = {"user_annotation"}
# Kineto's GPU projection of each annotation (`gpu_user_annotation`, on the GPU's pid and stream): not a host
# range. Read as one, ProfilerStep#N there (longer than the host's own when a graph replay is the step) won
# the choice of steps and the steps "launched no GPU work". The steps are projected on the GPU from the
# host's ranges instead (normalize.steps), which gives the same periods.
GPU_ANNOTATION_CATS = {"gpu_user_annotation"}
CPU_OP_CATS = {"cpu_op", "operator"}  # python_function frames (with_stack) would make `<module>` the top op
CALL_OP_DEPTH = 3
STEP_NAME = re.compile(r"^ProfilerStep#\d+$")

# CUPTI's enums as nsys stores them (nsanalyze.read.nsys.MEMCPY_KINDS, MEMORY_KINDS, SYNC_TYPES)
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8,
              "HtoH": 9, "PtoP": 10}
MEMORY_KINDS = {"pageable": 0, "pinned": 1, "device": 2, "array": 3, "managed": 4}
SYNC_KINDS = (("event", 1), ("wait", 2), ("stream", 3), ("context", 4), ("device", 4))
LAUNCH_CALL = re.compile(r"^(cudaLaunch|cuLaunch|cudaGraphLaunch|cuGraphLaunch)")


def is_kineto_name(name: str) -> bool:
    name = name.lower()
    for suffix in (".xz", ".gz"):
        name = name.removesuffix(suffix)
    return name.endswith(".json")


def trace_files(folder: Path) -> list[Path]:
    """The Kineto traces directly in a folder (one per rank), by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and is_kineto_name(p.name))


def looks_like_json(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


def _load(path: Path, display: str) -> dict:
    try:
        with open(path, "rb") as handle:
            trace = json.load(handle)
    except json.JSONDecodeError as exc:
        raise InputError(display, f"not a readable PyTorch profiler trace: invalid JSON at line {exc.lineno} "
                                  f"column {exc.colno} ({exc.msg}; a truncated file?)") from None
    except UnicodeDecodeError:
        raise InputError(display, "not a readable PyTorch profiler trace: not UTF-8 text") from None
    except RecursionError:
        raise InputError(display, "not a readable PyTorch profiler trace: JSON nested too deeply") from None
    except MemoryError:
        raise InputError(display, "PyTorch profiler trace too large to read into memory") from None
    if isinstance(trace, list):  # the Chrome trace format also allows a bare event array
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise InputError(display, "not a PyTorch profiler (Kineto) trace: no traceEvents list")
    return trace


INT_LIMIT = 1 << 62     # ids and sizes beyond this are not real (SQLite holds 64 bits)
MAX_TS_US = 1e17        # timestamps: microseconds, about 3000 years
MAX_DUR_US = 86_400e6   # an event over a day long is corrupt (as nsanalyze.read.nsys.MAX_INTERVAL_NS)


def _int(value, default=None):
    if isinstance(value, bool):
        return default
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    elif isinstance(value, str):
        digits = re.search(r"-?\d{1,18}", value)
        value = int(digits.group()) if digits else default
    if isinstance(value, int):
        return value if -INT_LIMIT < value < INT_LIMIT else default
    return default


def _num(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return value if math.isfinite(value) else None


def _text(value) -> str:
    """Text SQLite can store: a lone surrogate (a `\\ud800` escape in the JSON) becomes U+FFFD."""
    text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _global(pid: int, tid: int = 0) -> int:
    """nsys's globalTid (globalPid with tid 0): the process id above bit 24."""
    return ((pid & 0xFFFFFFFF) << PID_SHIFT) | (tid & TID_MASK)


def _ns(micros: list[float]) -> np.ndarray:
    """Float microseconds to integer nanoseconds, rounded."""
    return np.rint(np.asarray(micros, dtype=np.float64) * 1000.0).astype(np.int64) if micros else np.zeros(0, np.int64)


class _Strings:
    def __init__(self):
        self.ids: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        value = _text(value)
        if value not in self.ids:
            self.ids[value] = len(self.ids)
        return self.ids[value]


def short_name(demangled: str) -> str:
    """nsys's shortName: the function's own name, without return type, namespaces, template arguments
    and parameters (`void at::native::f<4>(int)` -> `f`)."""
    name = demangled.strip()

    def strip_group(text: str, open_: str, close: str) -> str:
        if not text.endswith(close):
            return text
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            if text[i] == close:
                depth += 1
            elif text[i] == open_:
                depth -= 1
                if depth == 0:
                    return text[:i].rstrip()
        return text

    name = strip_group(name, "(", ")")
    name = strip_group(name, "<", ">")
    # the last `::` outside template brackets and parentheses
    depth, cut = 0, 0
    for i, ch in enumerate(name):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            cut = i + 2
        elif depth == 0 and ch == " ":
            cut = max(cut, i + 1)
    return name[cut:] or demangled


def _memcpy_kinds(name: str) -> tuple[int, int | None, int | None]:
    """`Memcpy DtoD (Device -> Device)` -> copy kind 8, source and destination memory kinds."""
    kind = next((v for k, v in COPY_KINDS.items() if k in name), 0)
    ends = re.search(r"\(([^()]*)->([^()]*)\)", name)
    if not ends:
        return kind, None, None
    return kind, MEMORY_KINDS.get(ends.group(1).strip().lower()), MEMORY_KINDS.get(ends.group(2).strip().lower())


class _Table:
    def __init__(self, name: str, columns: tuple[str, ...]):
        self.name, self.columns, self.rows = name, columns, []


def convert(trace: dict, target: Path) -> dict:
    """Writes the trace's activity as an nsys-shaped SQLite file; returns facts about the trace."""
    strings = _Strings()
    events = trace["traceEvents"]
    gpu: dict[str, list] = {"kernel": [], "memcpy": [], "memset": [], "sync": []}
    calls: list = []     # (table, ts, dur, pid, tid, correlation, name)
    marks: list = []     # (ts, dur, pid, tid, name)  user annotations and steps
    ops: list = []       # (ts, dur, pid, tid, name)  CPU ops
    threads: dict = {}
    processes: dict = {}
    shapes = False
    set_aside: Counter = Counter()   # "traceEvents[cat].ts" -> events whose time no measurement gives
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M":
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            pid, tid = _int(e.get("pid")), _int(e.get("tid"), 0)
            if pid is not None and isinstance(args.get("name"), str):
                if e.get("name") == "thread_name":
                    threads[(pid, tid)] = _text(args["name"])
                elif e.get("name") == "process_name":
                    processes.setdefault(pid, _text(args["name"]))
            continue
        if ph != "X":
            continue  # flows (ac2g, fwdbwd), instants, counters: the correlation ids in args join calls to GPU work
        cat = str(e.get("cat") or "").lower()
        ts, dur = _num(e.get("ts")), _num(e.get("dur"))
        if ts is None or abs(ts) > MAX_TS_US:    # NaN, ±inf, text, 3000 years: no time; set aside, counted
            set_aside[f"traceEvents[{_text(cat)[:40]}].ts"] += 1
            continue
        if "dur" in e and (dur is None or dur < 0 or dur > MAX_DUR_US):   # a duration below 0 or over a day
            set_aside[f"traceEvents[{_text(cat)[:40]}].dur"] += 1
            continue
        dur = dur or 0.0
        name = _text(e.get("name"))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        pid, tid = _int(e.get("pid")), _int(e.get("tid"), 0)
        if cat in KERNEL_CATS or cat in MEMCPY_CATS or cat in MEMSET_CATS or cat in SYNC_CATS:
            device = _int(args.get("device"), pid)
            stream = _int(args.get("stream"), tid)
            if device is None:
                continue
            key = ("kernel" if cat in KERNEL_CATS else "memcpy" if cat in MEMCPY_CATS
                   else "memset" if cat in MEMSET_CATS else "sync")
            gpu[key].append((ts, dur, device, stream if stream is not None else 0, _int(args.get("correlation")),
                             _int(args.get("context")), name, args))
        elif cat in RUNTIME_CATS or cat in DRIVER_CATS:
            if pid is None:
                continue
            table = "CUPTI_ACTIVITY_KIND_DRIVER" if cat in DRIVER_CATS else "CUPTI_ACTIVITY_KIND_RUNTIME"
            calls.append((table, ts, dur, pid, tid, _int(args.get("correlation")), name))
        elif cat in GPU_ANNOTATION_CATS:
            continue
        elif pid is not None and (cat in ANNOTATION_CATS or STEP_NAME.match(name)):
            marks.append((ts, dur, pid, tid, name))
        elif pid is not None and cat in CPU_OP_CATS:
            ops.append((ts, dur, pid, tid, name))
            shapes = shapes or "Input Dims" in args

    con = sqlite3.connect(target)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    tables: list[_Table] = []

    corr_pid = {c[5]: c[3] for c in calls if c[5] is not None}
    main_pid = Counter(c[3] for c in calls).most_common(1)[0][0] if calls else (
        Counter(m[2] for m in marks).most_common(1)[0][0] if marks else 0)

    def gpu_rows(rows):
        """start/end in ns, same-stream overlaps of rounding clipped."""
        starts = _ns([r[0] for r in rows])
        ends = starts + _ns([r[1] for r in rows])
        order = np.lexsort((starts, [r[3] for r in rows], [r[2] for r in rows])) if rows else np.zeros(0, np.int64)
        for prev, cur in zip(order[:-1], order[1:]):
            if rows[prev][2:4] == rows[cur][2:4] and ends[prev] > starts[cur]:
                if ends[prev] - starts[cur] <= 2:  # rounding: the later one starts where the earlier ends
                    starts[cur] = min(ends[prev], ends[cur])
        return starts, ends

    kernels = _Table("CUPTI_ACTIVITY_KIND_KERNEL", (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
        "shortName", "mangledName", "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "graphNodeId", "graphId"))
    starts, ends = gpu_rows(gpu["kernel"])
    for (ts, dur, device, stream, corr, ctx, name, args), s, t in zip(gpu["kernel"], starts, ends):
        grid = args.get("grid") if isinstance(args.get("grid"), list) else []
        block = args.get("block") if isinstance(args.get("block"), list) else []
        g = [_int(v, 1) for v in (grid + [1, 1, 1])[:3]]
        b = [_int(v, 1) for v in (block + [1, 1, 1])[:3]]
        kernels.rows.append((int(s), int(t), device, ctx, stream, corr, _global(corr_pid.get(corr, main_pid)),
                             strings(name), strings(short_name(name)), strings(name),
                             _int(args.get("registers per thread")), *g, *b,
                             _int(args.get("shared memory"), 0), 0, None,
                             _int(args.get("graph node id")), _int(args.get("graph id"))))
    tables.append(kernels)

    memcpy = _Table("CUPTI_ACTIVITY_KIND_MEMCPY", (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
        "srcKind", "dstKind"))
    starts, ends = gpu_rows(gpu["memcpy"])
    for (ts, dur, device, stream, corr, ctx, name, args), s, t in zip(gpu["memcpy"], starts, ends):
        kind, src, dst = _memcpy_kinds(name)
        memcpy.rows.append((int(s), int(t), device, ctx, stream, corr, _global(corr_pid.get(corr, main_pid)),
                            _int(args.get("bytes"), 0), kind, src, dst))
    tables.append(memcpy)

    memset = _Table("CUPTI_ACTIVITY_KIND_MEMSET", (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value", "bytes",
        "memKind"))
    starts, ends = gpu_rows(gpu["memset"])
    for (ts, dur, device, stream, corr, ctx, name, args), s, t in zip(gpu["memset"], starts, ends):
        kind = re.search(r"\(([^()]*)\)", name)
        memset.rows.append((int(s), int(t), device, ctx, stream, corr, _global(corr_pid.get(corr, main_pid)),
                            0, _int(args.get("bytes"), 0),
                            MEMORY_KINDS.get(kind.group(1).strip().lower()) if kind else None))
    tables.append(memset)

    if gpu["sync"]:
        sync = _Table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", (
            "start", "end", "deviceId", "contextId", "streamId", "correlationId", "syncType", "eventId"))
        starts = _ns([r[0] for r in gpu["sync"]])
        ends = starts + _ns([r[1] for r in gpu["sync"]])
        for (ts, dur, device, stream, corr, ctx, name, args), s, t in zip(gpu["sync"], starts, ends):
            lowered = name.lower()
            sync_type = next((v for word, v in SYNC_KINDS if word in lowered), 0)
            sync.rows.append((int(s), int(t), device, ctx, stream, corr, sync_type, None))
        tables.append(sync)

    call_starts = _ns([c[1] for c in calls])
    call_ends = call_starts + _ns([c[2] for c in calls])
    gtid = [_global(c[3], c[4]) for c in calls]
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        t = _Table(table, ("start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue",
                           "callchainId"))
        t.rows = [(int(call_starts[i]), int(call_ends[i]), 1, gtid[i], c[5], strings(c[6]), 0, None)
                  for i, c in enumerate(calls) if c[0] == table]
        tables.append(t)

    mark_starts = _ns([m[0] for m in marks])
    mark_ends = mark_starts + _ns([m[1] for m in marks])
    nvtx = _Table("NVTX_EVENTS", ("start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid",
                                  "endGlobalTid", "textId", "domainId"))
    nvtx.rows = [(int(mark_starts[i]), int(mark_ends[i]), 59, None, None, None, m[4],
                  _global(m[2], m[3]), None, None, 0) for i, m in enumerate(marks)]
    tables.append(nvtx)

    call_ops = _Table("KINETO_CALL_OPS", ("correlationId", "globalTid", "start", "depth", "op"))
    call_ops.rows = _call_ops(calls, call_starts, gtid, ops, marks)
    tables.append(call_ops)

    gpus = _Table("TARGET_INFO_GPU", ("vmId", "id", "name", "totalMemory", "memoryBandwidth", "clockRate", "smCount",
                                      "computeMajor", "computeMinor", "maxThreadsPerBlock", "threadsPerWarp",
                                      "maxShmemPerBlock", "maxShmemPerBlockOptin", "maxShmemPerSm",
                                      "maxRegistersPerSm"))
    properties = trace.get("deviceProperties") if isinstance(trace.get("deviceProperties"), list) else []
    for p in properties:
        if isinstance(p, dict) and _int(p.get("id")) is not None:
            name = p.get("name") if isinstance(p.get("name"), str) else None
            gpus.rows.append((0, _int(p.get("id")), name, _int(p.get("totalGlobalMem")), None, None,
                              _int(p.get("numSms")), _int(p.get("computeMajor")), _int(p.get("computeMinor")),
                              _int(p.get("maxThreadsPerBlock")), _int(p.get("warpSize")),
                              _int(p.get("sharedMemPerBlock")), _int(p.get("sharedMemPerBlockOptin")),
                              _int(p.get("sharedMemPerMultiprocessor")), _int(p.get("regsPerMultiprocessor"))))
    tables.append(gpus)

    names = _Table("ThreadNames", ("nameId", "priority", "globalTid"))
    names.rows = [(strings(n), 0, _global(pid, tid)) for (pid, tid), n in threads.items()]
    tables.append(names)
    cpu_pids = sorted({c[3] for c in calls} | {m[2] for m in marks} | {o[2] for o in ops})
    procs = _Table("PROCESSES", ("globalPid", "pid", "name"))
    procs.rows = [(_global(pid), pid, processes.get(pid)) for pid in cpu_pids]
    tables.append(procs)

    base = _int(trace.get("baseTimeNanoseconds"))
    if base is not None:
        session = _Table("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "utcTime", "localTime"))
        session.rows = [(base, None, None)]
        tables.append(session)

    info = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    launches = sum(1 for c in calls if LAUNCH_CALL.match(c[6]))
    facts = {"rank": _int(info.get("rank"), 0), "world_size": _int(info.get("world_size")),
             "cpu_ops": len(ops), "launch_calls": launches, "record_shapes": int(shapes),
             "base_time_ns": base, "format_version": FORMAT_VERSION}
    meta = _Table("KINETO_META", ("key", "value"))
    meta.rows = list(facts.items()) + [(f"set_aside:{where}", n) for where, n in sorted(set_aside.items())]
    facts["set_aside"] = dict(set_aside)
    tables.append(meta)

    string_table = _Table("StringIds", ("id", "value"))
    string_table.rows = [(i, s) for s, i in strings.ids.items()]
    tables.append(string_table)

    for t in tables:
        con.execute(f'CREATE TABLE "{t.name}" ({", ".join(t.columns)})')
        con.executemany(f'INSERT INTO "{t.name}" VALUES ({", ".join("?" * len(t.columns))})', t.rows)
    con.commit()
    con.close()
    return facts


def _call_ops(calls, call_starts, gtid, ops, marks) -> list[tuple]:
    """Per CUDA call, the CPU ops and annotations open around it on its thread, outermost first
    (ProfilerStep#N, the steps, left out): one sweep over the thread's frames and calls in time order."""
    frames = [o for o in ops] + [m for m in marks if not STEP_NAME.match(m[4])]
    if not frames or not calls:
        return []
    starts = _ns([f[0] for f in frames])
    ends = starts + _ns([f[1] for f in frames])
    threads = np.array([_global(f[2], f[3]) for f in frames], dtype=np.int64)
    call_tid = np.array(gtid, dtype=np.int64)
    rows = []
    slack = 2  # ns of rounding: a child may end just after its parent
    for thread in np.unique(threads):
        mine = np.flatnonzero(threads == thread)
        mine = mine[np.lexsort((-ends[mine], starts[mine]))]
        on_thread = np.flatnonzero(call_tid == thread)
        on_thread = on_thread[np.argsort(call_starts[on_thread], kind="stable")]
        stack: list[int] = []
        f = 0
        for i in on_thread:
            at = call_starts[i]
            while f < len(mine) and starts[mine[f]] <= at:
                frame = mine[f]
                while stack and ends[stack[-1]] + slack < starts[frame]:
                    stack.pop()
                stack.append(frame)
                f += 1
            while stack and ends[stack[-1]] + slack < at:
                stack.pop()
            for depth, frame in enumerate(stack[:CALL_OP_DEPTH]):
                rows.append((calls[i][5], int(call_tid[i]), int(at), depth, frames[frame][4]))
    return rows


def _content_key(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:24]


def read_kineto(path, display_path=None):
    """Converts a Kineto trace (cached by content) and opens it as an nsys export of kind `kineto`."""
    from nsanalyze.read.files import _evict, _remove_orphans, cache_dir
    from nsanalyze.read.nsys import read_nsys

    path = Path(path)
    display = str(display_path or path)
    stem = Path(display).name
    target = cache_dir() / f"{_content_key(path)}-{stem}.kineto{FORMAT_VERSION}.sqlite"
    _remove_orphans(target.parent)
    if target.exists():
        os.utime(target)
    else:
        trace = _load(path, display)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".partial-{os.getpid()}-")
        os.close(fd)
        try:
            facts = convert(trace, Path(tmp))
            if not facts["launch_calls"] and not _has_gpu_work(Path(tmp)):
                raise InputError(display, "a PyTorch profiler trace without CUDA activity (kernels, copies or "
                                          "CUDA calls): record with activities=[CPU, CUDA]")
            os.replace(tmp, target)
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            raise InputError(display, f"cannot convert the PyTorch profiler trace ({exc.__class__.__name__}: {exc})") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _evict(target)
    export = read_nsys(target, display_path=display)
    export.kind = "kineto"
    export.rank = int(export.scalar("SELECT value FROM KINETO_META WHERE key = 'rank'") or 0)
    for key, n in export.query("SELECT key, value FROM KINETO_META WHERE key LIKE 'set_aside:%'"):
        where = key.removeprefix("set_aside:")    # events left out at the conversion: counted in the notes
        export.set_aside[where] = export.set_aside.get(where, 0) + int(n)
        export._opening_keys.add(where)
    return export


def _has_gpu_work(path: Path) -> bool:
    con = sqlite3.connect(path)
    try:
        return any(con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() for t in
                   ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    finally:
        con.close()


def launch_attribution(export, start_ns: int, end_ns: int, steps: int | None, is_loop=lambda name: False) -> dict | None:
    """Kernel launches in the window by the outermost CPU op or annotation around their launch call that
    is not the loop itself (`is_loop`: a step-like range such as `train_step`), each launch counted once
    (a graph launch once however many kernels it ran), and the profiler's own load."""
    if not export.has("KINETO_CALL_OPS", "correlationId", "depth", "op"):
        return None
    window = {"s": start_ns, "e": end_ns}
    rows = export.query("""SELECT o.correlationId, o.depth, o.op FROM KINETO_CALL_OPS o
        WHERE o.correlationId IN (SELECT correlation_id FROM kernels WHERE start >= :s AND start < :e)
        ORDER BY o.correlationId, o.depth""", window)
    chosen: dict[int, str] = {}
    loop = {}
    for corr, _, op in rows:
        if corr in chosen:
            continue
        if op not in loop:
            loop[op] = bool(is_loop(op))
        if not loop[op]:
            chosen[corr] = op
    counts = Counter(chosen.values())
    total = export.scalar("SELECT COUNT(DISTINCT correlation_id) FROM kernels WHERE start >= :s AND start < :e",
                          window) or 0
    meta = dict(export.query("SELECT key, value FROM KINETO_META"))
    per = steps if steps else None
    by_op = [{"op": op, "launches": int(n), "share": n / total if total else None,
              "per_step": n / per if per else None}
             for op, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]]
    ops = int(meta.get("cpu_ops") or 0)
    calls = int(meta.get("launch_calls") or 0)
    return {"by_op": by_op,
            "profiler": {"launches": int(total), "launches_per_step": total / per if per else None,
                         "cpu_ops": ops, "launch_calls": calls, "record_shapes": bool(int(meta.get("record_shapes") or 0)),
                         "cpu_ops_per_launch": ops / calls if calls else None}}
