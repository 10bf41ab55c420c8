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

import codecs
import csv
import functools
import json
import json.scanner
import math
import re
import sqlite3
from array import array
from collections import Counter
from itertools import repeat
from pathlib import Path

import msgspec
import numpy as np

from nsanalyze.errors import InputError
from nsanalyze.read.files import content_key, cache_dir, cached, is_kineto_name, open_stream

FORMAT_VERSION = 6  # bump when the conversion changes: cached conversions of older versions are not reused
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
# Kineto names a runtime call its CUPTI callback id has no name for in Kineto's own table "INVALID"; the id
# (args.cbid) names it by NVIDIA's cupti_runtime_cbid.h (kineto_runtime_cbids.csv).
UNNAMED_CALL = "INVALID"
RUNTIME_CBIDS = Path(__file__).with_name("kineto_runtime_cbids.csv")


@functools.lru_cache(maxsize=1)
def runtime_call_names() -> dict[int, str]:
    """CUPTI runtime callback id -> the call's name (kineto_runtime_cbids.csv)."""
    with open(RUNTIME_CBIDS, newline="") as table:
        return {int(row["cbid"]): row["name"] for row in csv.DictReader(row for row in table if not row.startswith("#"))}


# CUPTI's enums as nsys stores them (nsanalyze.read.nsys.MEMCPY_KINDS, MEMORY_KINDS, SYNC_TYPES)
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8,
              "HtoH": 9, "PtoP": 10}
MEMORY_KINDS = {"pageable": 0, "pinned": 1, "device": 2, "array": 3, "managed": 4}
SYNC_KINDS = (("event", 1), ("wait", 2), ("stream", 3), ("context", 4), ("device", 4))
LAUNCH_CALL = re.compile(r"^(cudaLaunch|cuLaunch|cudaGraphLaunch|cuGraphLaunch)")


def trace_files(folder: Path) -> list[Path]:
    """The Kineto traces directly in a folder (one per rank), by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and is_kineto_name(p.name))


class _BadJSON(ValueError):
    def __init__(self, msg: str, line: int, column: int):
        super().__init__(msg)
        self.msg, self.line, self.column = msg, line, column


STREAMED = object()   # the value of a top-level key whose array was streamed, not kept
_WS = re.compile(r"[ \t\n\r]*")
_NEXT = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_NEXT_VALUE = re.compile(r"[ \t\n\r]*\{")   # after a `},`: the next value is an object
CHUNK = 1 << 20


# The fast path's errors: msgspec refuses what the standard library's scanner may take (NaN, 1e400, lone surrogate
# escapes, a str holding surrogates) or what is not a run of whole values; the exact path then reads that text
_FAST_REFUSALS = (msgspec.MsgspecError, UnicodeEncodeError, ValueError, RecursionError)
# Batches the fast path may fail in a row before the document is read by the exact path alone (a text whose values
# are not separated as `},{` at the top level, or full of what msgspec refuses)
FAST_FAILURES = 4


class _Document:
    """A JSON document read a piece at a time with the standard library's own scanner: each value of the
    streamed array is parsed whole (`json.JSONDecoder.raw_decode`), then dropped, so memory holds one
    piece of the text and one event, not the document; what the scanner accepts (NaN, integers past
    64 bits, escapes, its nesting limit) and its messages are those of `json.load`. The text's encoding
    (UTF-8, UTF-16 or UTF-32, with or without a BOM) is told from its first bytes, as `json.loads` does.

    A fast path reads the array's values a batch at a time: the whole values of the piece in hand, up to its last
    `}` followed by `,` and the next `{`, decoded at once by msgspec (twice the standard library's speed). Where
    msgspec refuses a batch (NaN, a number past a double, a lone surrogate escape: values msgspec does not take
    but `json.load` does; or a cut that is not between two values, which leaves a string or an object open), the
    exact path reads that text, so every value is the standard library's and so is every error. Where msgspec
    takes a text, its values equal the scanner's (tests/read/test_kineto.py checks both on real traces and
    hostile ones)."""

    def __init__(self, stream):
        self.stream, self.buf, self.i, self.eof = stream, "", 0, False
        self.lines, self.column = 0, 0       # newlines and the last line's length in the text dropped
        decoder = json.JSONDecoder()
        self.raw_decode, self.scan_once = decoder.raw_decode, json.scanner.make_scanner(decoder)
        self.decoder = None
        self.dropped = 0                     # characters of text dropped before the buffer
        self.exact_until = 0                 # the text before this offset is the exact path's (a batch refused)
        self.failures = 0                    # batches refused in a row
        self.fast = msgspec.json.Decoder().decode
        self.fast_values = 0                 # values the fast path gave

    def more(self) -> bool:
        """The next piece of text after what is left of the buffer; False at the end."""
        if self.eof:
            return False
        data = self.stream.read(max(CHUNK, len(self.buf) - self.i))   # a long value: reads double
        if self.decoder is None:
            self.decoder = codecs.getincrementaldecoder(json.detect_encoding(data))("surrogatepass")
        text = self.decoder.decode(data, final=not data)
        self.eof = not data
        newlines = self.buf.count("\n", 0, self.i)    # in the text dropped, counted in place (no copy)
        if newlines:
            self.lines += newlines
            self.column = self.i - self.buf.rfind("\n", 0, self.i) - 1
        else:
            self.column += self.i
        self.dropped += self.i
        self.buf, self.i = self.buf[self.i:] + text, 0
        return True

    def error(self, msg: str, pos: int) -> _BadJSON:
        newlines = self.buf.count("\n", 0, pos)
        column = pos - self.buf.rfind("\n", 0, pos) if newlines else self.column + pos + 1
        return _BadJSON(msg, self.lines + newlines + 1, column)

    def peek(self) -> str:
        """The next character past white space ("" at the end)."""
        while True:
            self.i = _WS.match(self.buf, self.i).end()
            if self.i < len(self.buf):
                return self.buf[self.i]
            if not self.more():
                return ""

    def value(self):
        while True:
            try:
                value, end = self.raw_decode(self.buf, self.i)
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.buf) - 64 or exc.msg.startswith("Unterminated string")
                if cut and self.more():
                    continue
                raise self.error(exc.msg, exc.pos) from None
            if end >= len(self.buf) and self.more():   # a number may go on in the next piece
                continue
            self.i = end
            return value

    def expect(self, chars: str, msg: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            raise self.error(msg, self.i)
        self.i += 1
        return c

    def items(self, on_item) -> None:
        """Each value of the array that starts here, given to `on_item` as it is read."""
        self.expect("[", "Expecting value")
        if self.peek() == "]":
            self.i += 1
            return
        scan, separator = self.scan_once, _NEXT.match
        while True:
            if self.failures < FAST_FAILURES and self.dropped + self.i >= self.exact_until and self._batch(on_item):
                continue
            buf, i = self.buf, self.i
            try:   # the common case, inline: a whole value in the piece, then a comma
                value, end = scan(buf, i)
            except (StopIteration, json.JSONDecodeError):
                end = len(buf)
            if end >= len(buf):   # cut by the piece's end, or not JSON: the careful way
                value, end = self.value(), None
            on_item(value)
            if end is not None:
                found = separator(buf, end)
                if found and found.end() < len(buf):
                    self.i = found.end()
                    continue
                self.i = end
            if self.expect(",]", "Expecting ',' delimiter") == "]":
                return
            self.peek()

    def _batch(self, on_item) -> bool:
        """The whole values from here to the piece's last `},` before a `{`, decoded at once and given to `on_item`;
        True where it took any (the next value then starts here). Where msgspec refuses them, False, and the text up
        to that cut is left to the exact path."""
        buf, i = self.buf, self.i
        cut = buf.rfind("},", i)
        while cut > i and not (following := _NEXT_VALUE.match(buf, cut + 2)):
            cut = buf.rfind("},", i, cut)
        if cut <= i:
            return False
        try:
            values = self.fast("[" + buf[i:cut + 1] + "]")
        except _FAST_REFUSALS:
            self.failures += 1
            self.exact_until = self.dropped + cut + 1
            return False
        self.failures = 0
        self.fast_values += len(values)
        for value in values:
            on_item(value)
        self.i = following.end() - 1
        return True

    def read(self, stream_key: str, on_item) -> object:
        """The document, with each value of the array under `stream_key` (or of a bare top-level array)
        given to `on_item` and replaced by STREAMED."""
        c = self.peek()
        if c == "[":
            self.items(on_item)
            document = STREAMED
        elif c == "{":
            self.i += 1
            document = {}
            if self.peek() == "}":
                self.i += 1
            else:
                while True:
                    if self.peek() != '"':
                        raise self.error("Expecting property name enclosed in double quotes", self.i)
                    key = self.value()
                    self.expect(":", "Expecting ':' delimiter")
                    if self.peek() == "[" and key == stream_key:
                        self.items(on_item)
                        document[key] = STREAMED
                    else:
                        document[key] = self.value()
                    if self.expect(",}", "Expecting ',' delimiter") == "}":
                        break
        else:
            document = self.value()
        if self.peek():
            raise self.error("Extra data", self.i)
        return document


def _load(path: Path, display: str, on_event) -> dict:
    """The trace's top-level keys; each of its events is given to `on_event` as it is read."""
    try:
        with open_stream(path) as stream:
            trace = _Document(stream).read("traceEvents", on_event)
    except _BadJSON as exc:
        raise InputError(display, f"not a readable PyTorch profiler trace: invalid JSON at line {exc.line} "
                                  f"column {exc.column} ({exc.msg}; a truncated file?)") from None
    except UnicodeDecodeError:
        raise InputError(display, "not a readable PyTorch profiler trace: not UTF-8 text") from None
    except RecursionError:
        raise InputError(display, "not a readable PyTorch profiler trace: JSON nested too deeply") from None
    except MemoryError:
        raise InputError(display, "PyTorch profiler trace too large to read into memory") from None
    if trace is STREAMED:  # the Chrome trace format also allows a bare event array
        trace = {"traceEvents": STREAMED}
    if not isinstance(trace, dict) or trace.get("traceEvents") is not STREAMED:
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


def _ns(micros: np.ndarray) -> np.ndarray:
    """Float microseconds to integer nanoseconds, rounded."""
    return np.rint(np.asarray(micros, dtype=np.float64) * 1000.0).astype(np.int64)


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


NULL = -(1 << 63)   # a missing value in an integer column (no value _int gives is this low)
ROWS = 50_000       # rows handed to SQLite at a time


def _i(value, default=None):
    """_int, with the common case (an int in range) inline."""
    if type(value) is int and -INT_LIMIT < value < INT_LIMIT:
        return value
    return _int(value, default)


def _n(value):
    """_int for a column: NULL for None."""
    if type(value) is int and -INT_LIMIT < value < INT_LIMIT:
        return value
    if value is None:   # the other common case: an id the event does not have
        return NULL
    value = _int(value)
    return NULL if value is None else value


def _dims(value) -> list:
    """A kernel's grid or block: three integers, 1 for one missing or not a number."""
    if type(value) is list and len(value) == 3:   # the common case, inline
        x, y, z = value
        if (type(x) is int and type(y) is int and type(z) is int
                and -INT_LIMIT < x < INT_LIMIT and -INT_LIMIT < y < INT_LIMIT and -INT_LIMIT < z < INT_LIMIT):
            return value
    value = value if isinstance(value, list) else []
    return [_i(v, 1) for v in (value + [1, 1, 1])[:3]]


class _Columns:
    """A table's values as they are read, one typed array per column ('d' float, 'q' integer, NULL
    for a missing one): 8 bytes a value, not a Python object per value and a tuple per row."""

    def __init__(self, **types: str):
        for name, code in types.items():
            setattr(self, name, array(code))
        self._names = tuple(types)

    def __len__(self) -> int:
        return len(getattr(self, self._names[0]))

    def np(self, name: str) -> np.ndarray:
        column = getattr(self, name)
        return np.frombuffer(column, dtype=np.float64 if column.typecode == "d" else np.int64) if len(column) \
            else np.zeros(0, np.float64 if column.typecode == "d" else np.int64)


def _gpu_columns(*extra: str) -> _Columns:
    return _Columns(ts="d", dur="d", device="q", stream="q", corr="q", ctx="q", name="q", **{c: "q" for c in extra})


KERNEL_EXTRA = ("regs", "gx", "gy", "gz", "bx", "by", "bz", "shared", "gnode", "gid")


class _Reader:
    """The events of a trace, sorted into the columns the conversion writes as they stream past."""

    def __init__(self):
        self.names: dict[str, int] = {}     # an event's name (as text) -> its number here
        self.name_list: list[str] = []
        self.step_name: list[bool] = []
        self.kernel = _gpu_columns(*KERNEL_EXTRA)
        self.memcpy = _gpu_columns("bytes")
        self.memset = _gpu_columns("bytes")
        self.sync = _gpu_columns()
        self.calls = _Columns(driver="q", ts="d", dur="d", pid="q", tid="q", corr="q", name="q")
        self.marks = _Columns(ts="d", dur="d", pid="q", tid="q", name="q")  # user annotations and steps
        self.ops = _Columns(ts="d", dur="d", pid="q", tid="q", name="q")    # CPU ops
        self.threads: dict = {}
        self.processes: dict = {}
        self.shapes = False
        self.set_aside: Counter = Counter()   # "traceEvents[cat].ts" -> events whose time no measurement gives
        self.cats: dict[str, tuple[str, str]] = {}   # a category as written -> (lower case, what it makes)

    def name(self, value) -> int:
        key = value if type(value) is str else str(value)
        number = self.names.get(key)
        if number is None:
            number = self.names[key] = len(self.name_list)
            self.name_list.append(key)
            self.step_name.append(bool(STEP_NAME.match(_text(key))))
        return number

    def _meta(self, e: dict) -> None:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        pid, tid = _int(e.get("pid")), _int(e.get("tid"), 0)
        if pid is not None and isinstance(args.get("name"), str):
            if e.get("name") == "thread_name":
                self.threads[(pid, tid)] = _text(args["name"])
            elif e.get("name") == "process_name":
                self.processes.setdefault(pid, _text(args["name"]))

    def add(self, e) -> None:
        """One event of the trace (a bound method: the parser calls it once per event)."""
        if type(e) is not dict and not isinstance(e, dict):
            return
        ph = e.get("ph")
        if ph != "X":
            if ph == "M":
                self._meta(e)
            return  # flows (ac2g, fwdbwd), instants, counters: the correlation ids in args join calls to GPU work
        raw = e.get("cat")
        known = self.cats.get(raw) if type(raw) is str else None
        if known is None:
            cat = str(raw or "").lower()
            known = (cat, CAT_KINDS.get(cat, "other"))
            if type(raw) is str:
                self.cats[raw] = known
        cat, kind = known
        ts = e.get("ts")
        if not (type(ts) is float and -MAX_TS_US <= ts <= MAX_TS_US):
            ts = _num(ts)
            if ts is None or abs(ts) > MAX_TS_US:    # NaN, ±inf, text, 3000 years: no time; set aside, counted
                self.set_aside[f"traceEvents[{_text(cat)[:40]}].ts"] += 1
                return
        dur = e.get("dur", 0.0)   # none: 0
        if not (type(dur) is float and 0 <= dur <= MAX_DUR_US):
            dur = _num(dur)
            if dur is None or dur < 0 or dur > MAX_DUR_US:   # a duration below 0 or over a day
                self.set_aside[f"traceEvents[{_text(cat)[:40]}].dur"] += 1
                return
            dur = dur or 0.0
        if kind == "gpu annotation":
            return
        pid = e.get("pid")
        if not (type(pid) is int and -INT_LIMIT < pid < INT_LIMIT):
            pid = _int(pid)
        tid = e.get("tid")
        if not (type(tid) is int and -INT_LIMIT < tid < INT_LIMIT):
            tid = _int(tid, 0)
        if kind == "cpu op" or kind == "other":   # half the events: cpu ops
            if pid is None:
                return
            text = e.get("name")
            name = self.names.get(text) if type(text) is str else None   # a name seen before, inline
            if name is None:
                name = self.name(text)
            if self.step_name[name]:
                t = self.marks
            elif kind == "cpu op":
                t = self.ops
                if not self.shapes:
                    args = e.get("args")
                    self.shapes = isinstance(args, dict) and "Input Dims" in args
            else:
                return
            t.ts.append(ts), t.dur.append(dur), t.pid.append(pid), t.tid.append(tid), t.name.append(name)
            return
        args = e.get("args")
        if type(args) is not dict:
            args = args if isinstance(args, dict) else {}
        if kind == "annotation":
            if pid is None:
                return
            t = self.marks
            t.ts.append(ts), t.dur.append(dur), t.pid.append(pid), t.tid.append(tid)
            t.name.append(self.name(e.get("name")))
        elif kind == "runtime" or kind == "driver":
            if pid is None:
                return
            c = self.calls
            c.driver.append(kind == "driver"), c.ts.append(ts), c.dur.append(dur), c.pid.append(pid)
            name = e.get("name")
            if name == UNNAMED_CALL and kind == "runtime":   # a call newer than the profiler's name table
                name = runtime_call_names().get(_i(args.get("cbid"), None), name)
            c.tid.append(tid), c.corr.append(_n(args.get("correlation"))), c.name.append(self.name(name))
        else:
            device = _i(args.get("device"), pid)
            if device is None:
                return
            t = getattr(self, kind)
            t.ts.append(ts), t.dur.append(dur), t.device.append(device)
            t.stream.append(_i(args.get("stream"), tid))
            t.corr.append(_n(args.get("correlation"))), t.ctx.append(_n(args.get("context")))
            t.name.append(self.name(e.get("name")))
            if t is self.kernel:
                g, b = _dims(args.get("grid")), _dims(args.get("block"))
                t.regs.append(_n(args.get("registers per thread")))
                t.gx.append(g[0]), t.gy.append(g[1]), t.gz.append(g[2])
                t.bx.append(b[0]), t.by.append(b[1]), t.bz.append(b[2])
                t.shared.append(_i(args.get("shared memory"), 0))
                t.gnode.append(_n(args.get("graph node id"))), t.gid.append(_n(args.get("graph id")))
            elif t is not self.sync:
                t.bytes.append(_i(args.get("bytes"), 0))


# what an event's category (lower case) makes it
CAT_KINDS = {**{c: "kernel" for c in KERNEL_CATS}, **{c: "memcpy" for c in MEMCPY_CATS},
             **{c: "memset" for c in MEMSET_CATS}, **{c: "sync" for c in SYNC_CATS},
             **{c: "runtime" for c in RUNTIME_CATS}, **{c: "driver" for c in DRIVER_CATS},
             **{c: "gpu annotation" for c in GPU_ANNOTATION_CATS}, **{c: "annotation" for c in ANNOTATION_CATS},
             **{c: "cpu op" for c in CPU_OP_CATS}}
def _globals(pid: np.ndarray, tid: np.ndarray | int = 0) -> np.ndarray:
    """_global over columns."""
    return ((pid & 0xFFFFFFFF) << PID_SHIFT) | (np.asarray(tid, dtype=np.int64) & TID_MASK)


def _most_common(values: np.ndarray) -> int:
    """Counter(values).most_common(1)[0][0]: the most frequent, the first seen of equals."""
    unique, first, counts = np.unique(values, return_index=True, return_counts=True)
    best = np.flatnonzero(counts == counts.max())
    return int(unique[best[np.argmin(first[best])]])


def _rows(n: int, *columns):
    """Rows for executemany, made ROWS at a time from columns: numpy arrays (NULL read as None), lists,
    or single values repeated."""
    for lo in range(0, n, ROWS):
        hi = min(n, lo + ROWS)
        parts = []
        for column in columns:
            if isinstance(column, np.ndarray):
                part = column[lo:hi]
                if part.dtype == np.int64 and (part == NULL).any():
                    objects = part.astype(object)
                    objects[part == NULL] = None
                    parts.append(objects.tolist())
                else:
                    parts.append(part.tolist())
            elif isinstance(column, list):
                parts.append(column[lo:hi])
            else:
                parts.append(repeat(column, hi - lo))
        yield from zip(*parts)


def _gpu_times(t: _Columns, clip: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """start/end in ns, same-stream overlaps of rounding clipped."""
    starts = _ns(t.np("ts"))
    ends = starts + _ns(t.np("dur"))
    if clip and len(starts) > 1:
        device, stream = t.np("device"), t.np("stream")
        order = np.lexsort((starts, stream, device))
        prev, cur = order[:-1], order[1:]
        overlap = ((device[prev] == device[cur]) & (stream[prev] == stream[cur]) & (ends[prev] > starts[cur])
                   & (ends[prev] - starts[cur] <= 2))   # rounding: the later one starts where the earlier ends
        starts[cur[overlap]] = np.minimum(ends[prev[overlap]], ends[cur[overlap]])
    return starts, ends


def convert(trace: dict, events: _Reader, target: Path) -> dict:
    """Writes the trace's activity as an nsys-shaped SQLite file; returns facts about the trace."""
    strings = _Strings()
    texts = [_text(n) for n in events.name_list]

    con = sqlite3.connect(target)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")

    def write(name: str, columns: tuple[str, ...], rows) -> None:
        con.execute(f'CREATE TABLE "{name}" ({", ".join(columns)})')
        con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(columns))})', rows)

    calls = events.calls
    call_pid, call_corr = calls.np("pid"), calls.np("corr")
    if len(calls):
        main_pid = _most_common(call_pid)
    elif len(events.marks):
        main_pid = _most_common(events.marks.np("pid"))
    else:
        main_pid = 0
    # the process of each correlation id (the last call's that has it), for the GPU work it launched
    known = np.flatnonzero(call_corr != NULL)[::-1]
    corr_keys, first = np.unique(call_corr[known], return_index=True)
    corr_pids = call_pid[known][first]

    def gpu_pids(corr: np.ndarray) -> np.ndarray:
        at = np.clip(np.searchsorted(corr_keys, corr), 0, max(len(corr_keys) - 1, 0))
        found = (corr_keys[at] == corr) & (corr != NULL) if len(corr_keys) else np.zeros(len(corr), bool)
        return _globals(np.where(found, corr_pids[at] if len(corr_keys) else 0, main_pid))

    def ids(name_numbers: np.ndarray, also=None) -> tuple[np.ndarray, np.ndarray | None]:
        """StringIds of the names, given in the order they are first used (and of also(name) after each)."""
        unique, first_at = np.unique(name_numbers, return_index=True)
        own, other = np.zeros(len(texts), np.int64), np.zeros(len(texts), np.int64)
        for number in unique[np.argsort(first_at)].tolist():
            own[number] = strings(texts[number])
            if also:
                other[number] = strings(also(texts[number]))
        return own[name_numbers], other[name_numbers] if also else None

    k = events.kernel
    starts, ends = _gpu_times(k)
    names, shorts = ids(k.np("name"), short_name)
    write("CUPTI_ACTIVITY_KIND_KERNEL", (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName",
        "shortName", "mangledName", "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
        "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "graphNodeId", "graphId"),
        _rows(len(k), starts, ends, k.np("device"), k.np("ctx"), k.np("stream"), k.np("corr"),
              gpu_pids(k.np("corr")), names, shorts, names, k.np("regs"), k.np("gx"), k.np("gy"), k.np("gz"),
              k.np("bx"), k.np("by"), k.np("bz"), k.np("shared"), 0, None, k.np("gnode"), k.np("gid")))

    def by_name(t: _Columns, function) -> list:
        """function(name) of each row's name, worked out once per name."""
        done: dict[int, object] = {}
        return [done[n] if n in done else done.setdefault(n, function(texts[n])) for n in t.np("name").tolist()]

    m = events.memcpy
    starts, ends = _gpu_times(m)
    kinds = by_name(m, _memcpy_kinds)
    write("CUPTI_ACTIVITY_KIND_MEMCPY", (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "bytes", "copyKind",
        "srcKind", "dstKind"),
        _rows(len(m), starts, ends, m.np("device"), m.np("ctx"), m.np("stream"), m.np("corr"),
              gpu_pids(m.np("corr")), m.np("bytes"), [x[0] for x in kinds], [x[1] for x in kinds],
              [x[2] for x in kinds]))

    m = events.memset
    starts, ends = _gpu_times(m)

    def memory_kind(name: str):
        kind = re.search(r"\(([^()]*)\)", name)
        return MEMORY_KINDS.get(kind.group(1).strip().lower()) if kind else None

    write("CUPTI_ACTIVITY_KIND_MEMSET", (
        "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "value", "bytes",
        "memKind"),
        _rows(len(m), starts, ends, m.np("device"), m.np("ctx"), m.np("stream"), m.np("corr"),
              gpu_pids(m.np("corr")), 0, m.np("bytes"), by_name(m, memory_kind)))

    if len(events.sync):
        m = events.sync
        starts, ends = _gpu_times(m, clip=False)
        write("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", (
            "start", "end", "deviceId", "contextId", "streamId", "correlationId", "syncType", "eventId"),
            _rows(len(m), starts, ends, m.np("device"), m.np("ctx"), m.np("stream"), m.np("corr"),
                  by_name(m, lambda name: next((v for word, v in SYNC_KINDS if word in name.lower()), 0)), None))

    call_starts = _ns(calls.np("ts"))
    call_ends = call_starts + _ns(calls.np("dur"))
    gtid = _globals(call_pid, calls.np("tid"))
    driver = calls.np("driver").astype(bool)
    for table, mine in (("CUPTI_ACTIVITY_KIND_RUNTIME", ~driver), ("CUPTI_ACTIVITY_KIND_DRIVER", driver)):
        rows = np.flatnonzero(mine)
        names, _ = ids(calls.np("name")[rows])
        write(table, ("start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue",
                      "callchainId"),
              _rows(len(rows), call_starts[rows], call_ends[rows], 1, gtid[rows], call_corr[rows], names, 0, None))

    marks = events.marks
    mark_starts = _ns(marks.np("ts"))
    write("NVTX_EVENTS", ("start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid",
                          "endGlobalTid", "textId", "domainId"),
          _rows(len(marks), mark_starts, mark_starts + _ns(marks.np("dur")), 59, None, None, None,
                [texts[n] for n in marks.np("name").tolist()], _globals(marks.np("pid"), marks.np("tid")),
                None, None, 0))

    write("KINETO_CALL_OPS", ("correlationId", "globalTid", "start", "depth", "op"),
          _call_ops(events, texts, call_starts, gtid))

    gpus = []
    properties = trace.get("deviceProperties") if isinstance(trace.get("deviceProperties"), list) else []
    for p in properties:
        if isinstance(p, dict) and _int(p.get("id")) is not None:
            name = p.get("name") if isinstance(p.get("name"), str) else None
            gpus.append((0, _int(p.get("id")), name, _int(p.get("totalGlobalMem")), None, None,
                         _int(p.get("numSms")), _int(p.get("computeMajor")), _int(p.get("computeMinor")),
                         _int(p.get("maxThreadsPerBlock")), _int(p.get("warpSize")),
                         _int(p.get("sharedMemPerBlock")), _int(p.get("sharedMemPerBlockOptin")),
                         _int(p.get("sharedMemPerMultiprocessor")), _int(p.get("regsPerMultiprocessor"))))
    write("TARGET_INFO_GPU", ("vmId", "id", "name", "totalMemory", "memoryBandwidth", "clockRate", "smCount",
                              "computeMajor", "computeMinor", "maxThreadsPerBlock", "threadsPerWarp",
                              "maxShmemPerBlock", "maxShmemPerBlockOptin", "maxShmemPerSm", "maxRegistersPerSm"), gpus)

    write("ThreadNames", ("nameId", "priority", "globalTid"),
          [(strings(n), 0, _global(pid, tid)) for (pid, tid), n in events.threads.items()])
    cpu_pids = sorted(set(call_pid.tolist()) | set(marks.np("pid").tolist()) | set(events.ops.np("pid").tolist()))
    write("PROCESSES", ("globalPid", "pid", "name"),
          [(_global(pid), pid, events.processes.get(pid)) for pid in cpu_pids])

    base = _int(trace.get("baseTimeNanoseconds"))
    if base is not None:
        write("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "utcTime", "localTime"), [(base, None, None)])

    info = trace.get("distributedInfo") if isinstance(trace.get("distributedInfo"), dict) else {}
    launching = [bool(LAUNCH_CALL.match(t)) for t in texts]
    launches = sum(launching[n] for n in calls.np("name").tolist())
    facts = {"rank": _int(info.get("rank"), 0), "world_size": _int(info.get("world_size")),
             "cpu_ops": len(events.ops), "launch_calls": launches, "record_shapes": int(events.shapes),
             "base_time_ns": base, "format_version": FORMAT_VERSION}
    write("KINETO_META", ("key", "value"),
          list(facts.items()) + [(f"set_aside:{where}", n) for where, n in sorted(events.set_aside.items())])
    facts["set_aside"] = dict(events.set_aside)

    write("StringIds", ("id", "value"), [(i, s) for s, i in strings.ids.items()])
    con.commit()
    con.close()
    return facts


def _call_ops(events: _Reader, texts: list[str], call_starts: np.ndarray, gtid: np.ndarray):
    """Per CUDA call, the CPU ops and annotations open around it on its thread, outermost first
    (ProfilerStep#N, the steps, left out): one sweep over the thread's frames and calls in time order."""
    ops, marks = events.ops, events.marks
    not_step = ~np.asarray(events.step_name, dtype=bool)[marks.np("name")] if len(marks) else np.zeros(0, bool)

    def frame_column(name: str) -> np.ndarray:
        return np.concatenate([ops.np(name), marks.np(name)[not_step]])

    frame_names = frame_column("name")
    if not len(frame_names) or not len(call_starts):
        return
    starts = _ns(frame_column("ts"))
    ends = starts + _ns(frame_column("dur"))
    threads = _globals(frame_column("pid"), frame_column("tid"))
    corr = events.calls.np("corr")
    slack = 2  # ns of rounding: a child may end just after its parent
    for thread in np.unique(threads):
        mine = np.flatnonzero(threads == thread)
        mine = mine[np.lexsort((-ends[mine], starts[mine]))]
        frame_starts, frame_ends = starts[mine].tolist(), ends[mine].tolist()
        frame_ops = [texts[n] for n in frame_names[mine].tolist()]
        on_thread = np.flatnonzero(gtid == thread)
        on_thread = on_thread[np.argsort(call_starts[on_thread], kind="stable")]
        thread = int(thread)
        stack: list[int] = []   # positions in the thread's frames
        f, count = 0, len(mine)
        for at, c in zip(call_starts[on_thread].tolist(), corr[on_thread].tolist()):
            while f < count and frame_starts[f] <= at:
                while stack and frame_ends[stack[-1]] + slack < frame_starts[f]:
                    stack.pop()
                stack.append(f)
                f += 1
            while stack and frame_ends[stack[-1]] + slack < at:
                stack.pop()
            c = None if c == NULL else c
            for depth, frame in enumerate(stack[:CALL_OP_DEPTH]):
                yield c, thread, at, depth, frame_ops[frame]


def read_kineto(path, display_path=None):
    """Converts a Kineto trace (cached by content) and opens it as an nsys export of kind `kineto`. The
    trace is read as a stream (decompressed as it is read): memory holds the columns the conversion
    writes, not the document."""
    from nsanalyze.read.nsys import read_nsys

    path = Path(path)
    display = str(display_path or path)
    stem = Path(display).name

    def write(partial: Path) -> None:
        events = _Reader()
        trace = _load(path, display, events.add)
        try:
            facts = convert(trace, events, partial)
        except (sqlite3.Error, OverflowError, ValueError) as exc:
            raise InputError(display, f"cannot convert the PyTorch profiler trace ({exc.__class__.__name__}: {exc})") from None
        if not facts["launch_calls"] and not _has_gpu_work(partial):
            if facts.get("set_aside"):   # CUDA events there, none with a time the analysis can use
                most = sorted(facts["set_aside"].items(), key=lambda item: (-item[1], item[0]))
                counted = ", ".join(f"{where} x{n:,}" for where, n in most[:4]) + (", ..." if len(most) > 4 else "")
                raise InputError(display, "no CUDA activity left to analyze: its events were set aside for times no "
                                          f"measurement gives ({counted})")
            raise InputError(display, "a PyTorch profiler trace without CUDA activity (kernels, copies or "
                                      "CUDA calls): record with activities=[CPU, CUDA]")

    target = cached(cache_dir() / f"{content_key(path)}-{stem}.kineto{FORMAT_VERSION}.sqlite", write)
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


# A run of launches whose ops repeat a motif of a few distinct ops this many times in a row is a loop in the program's
# source (a Python loop of in-place ops over tensors): counted as one source, so that the loop is not split over its
# op names (kin54_emaloop's EMA, `p_ema.mul_(d).add_(p, alpha=1 - d)` over 152 tensors: aten::mul_ and aten::add_
# 152 launches a step each, below aten::linear's 196, named first, a user read)
OP_LOOP_REPEATS = 16
OP_LOOP_PERIODS = (2, 3, 4)
OP_LOOP_JOIN = " + "


def _op_loops(ops: list[str]) -> dict[tuple, int]:
    """{motif: launches} of the runs in which a motif of 2-4 distinct ops repeats OP_LOOP_REPEATS times or more in a
    row: each run's launches from its first whole motif, counted once (the shortest period first); a motif named in
    the order its first run began it, its rotations one loop. Found on the ops' codes as columns: a run of period p is
    a stretch where each op equals the one p before it."""
    names, codes = np.unique(np.asarray(ops, dtype=object), return_inverse=True) if ops else ([], np.zeros(0, int))
    loops: dict[tuple, list] = {}
    taken = np.zeros(len(codes), bool)
    for period in OP_LOOP_PERIODS:
        if len(codes) <= period:
            break
        same = np.concatenate(([False], codes[period:] == codes[:-period], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for first, last in zip(edges[::2], edges[1::2]):   # ops[first + period:last + period] repeat the p before
            whole = (last - first + period) // period * period
            motif = tuple(names[codes[first:first + period]])
            if whole < OP_LOOP_REPEATS * period or len(set(motif)) < period or taken[first:first + whole].any():
                continue
            key = min(motif[k:] + motif[:k] for k in range(period))   # one name for each rotation of the loop
            loops.setdefault(key, [motif, 0])[1] += int(whole)
            taken[first:first + whole] = True
    return dict(loops.values())


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
    loops = {}
    for motif, launches in _op_loops(list(chosen.values())).items():   # (corr ids ascend: the launches' order)
        loops[OP_LOOP_JOIN.join(motif)] = list(motif)
        counts[OP_LOOP_JOIN.join(motif)] = launches
        for op in motif:   # the loop's launches counted once, as the loop's
            counts[op] -= launches // len(motif)
            if counts[op] <= 0:
                del counts[op]
    total = export.scalar("SELECT COUNT(DISTINCT correlation_id) FROM kernels WHERE start >= :s AND start < :e",
                          window) or 0
    meta = dict(export.query("SELECT key, value FROM KINETO_META"))
    per = steps if steps else None
    by_op = [{"op": op, "launches": int(n), "share": n / total if total else None,
              "per_step": n / per if per else None, **({"loop_ops": loops[op]} if op in loops else {})}
             for op, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]]
    ops = int(meta.get("cpu_ops") or 0)
    calls = int(meta.get("launch_calls") or 0)
    return {"by_op": by_op,
            "profiler": {"launches": int(total), "launches_per_step": total / per if per else None,
                         "cpu_ops": ops, "launch_calls": calls, "record_shapes": bool(int(meta.get("record_shapes") or 0)),
                         "cpu_ops_per_launch": ops / calls if calls else None}}
