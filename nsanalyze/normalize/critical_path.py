"""The program as a dependency graph, replayed: the critical path of a step and what a change would buy.

Nodes: the CUDA calls of the threads that launch GPU work (one chain per thread, the time between two calls
being the host's own compute) and the GPU operations (one chain per stream: kernels, copies, memsets,
whole-graph executions or the node-level kernels of graph launches). Edges:
- program order on a thread; where a thread resumes after another launching thread of its process made
  calls (PyTorch's autograd thread takes over from the main thread and back), the hand-off;
- stream order, and an implied wait on another stream where an operation started later than its stream
  and its launch allow (an event wait, a graph's edge): on the operation that ended last before it;
- launch -> operation, by correlation id (a graph launch -> each of its nodes);
- the calls that wait for the GPU (the host-activity table's `waits_for_gpu` classes: syncs, blocking
  copies, cudaFree, ...) -> the operation queued before them that ended last; a pageable async copy ->
  its own copy; an enqueue call made with the launch queue full -> the operation whose end freed a slot
  (the queue's depth is read from the calls that blocked); a poll loop (a query answered "not ready" again and
  again on one chain, then "ready") -> the operation queued before it that ended last, as one wait (poll_runs).

Replay re-times the nodes in the order they happened: a call starts when its predecessor on the thread
ended plus the host compute between them; an operation starts at max(stream ready + the queue gap, its
launch call's start + the launch latency), both medians measured in the capture; a waiting call returns
at max(its start + its own duration, the awaited operation's end + the time it took to return). The
replay with no change is the self-check: it must give the measured steps within SELF_CHECK_TOLERANCE.
Walking back from a step's end along the dependency that finished last gives its critical path.

A change that takes launches away (kernels gone, a step as one graph launch) takes their launch paths off
the host: each launching call with the helper calls before it and the host compute on its way from the
previous call (launch_paths), a stretch over LAUNCH_PATH_FACTOR x the median counted as the median (the
rest is other host work: a sleep, loading, logging, which stays).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import numpy as np

from nsanalyze.normalize import embedding_grads, gemm_loads, launch_loops, precision, recompute, tuning
from nsanalyze.normalize.activity import PID_SHIFT, Activity, distinct, median, pair_keys
from nsanalyze.normalize.budget import union
from nsanalyze.normalize.host_activity import (Measure, all_threads_inside, base_name, class_order, classify,
                                              intersect, paint, read_os_calls, rules)
from nsanalyze.normalize.checked_rows import VALID_NVTX
from nsanalyze.normalize.host_calls import CAPTURE_BEGINS, CAPTURE_ENDS, COPY_WAIT_GAP_NS, DEVICE_COPY_KINDS
from nsanalyze.normalize.polls import NOT_READY, POLL_NAMES, find_runs
from nsanalyze.normalize.steps import OPERATOR_RANGES
from nsanalyze.normalize.work import ROLES, _launch_roles, _scores_context, annotated_roles, role_of
from nsanalyze.patterns import UserPattern
from nsanalyze.read.nsys import CALL_TABLES, IntQuery, NsysExport

SELF_CHECK_TOLERANCE = 0.02   # the replay without change within 2% of the measured steps, else untrusted
# Replayed at most this many calls and operations (a Python loop): a longer window is replayed as the
# block of consecutive steps around its median step that fits.
REPLAY_EVENTS_AT_MOST = 300_000
# The operations of the block's loops of launches, as a role a change may name (`whatif --fuse loop`); one group
# of them (launch_loops.group_loops) is loop_role(N)
LOOP = "loop"
# The operations that run forward work again in the backward (normalize.recompute), as a role a change may name
RECOMPUTE = "recompute"
# A layer stack's backward passes beyond one per forward pass (normalize.recompute), as a role
REPEATED_BACKWARD = "repeated-backward"
# The copy kernels with the memcpys inside a GPU's memory (host_calls.DEVICE_COPY_KINDS), as a role (device-copies')
DEVICE_COPY = "device-copy"
# Tensor-core GEMMs whose names state operand loads under 16 bytes (normalize.gemm_loads), as a role
NARROW_GEMM = "narrow-gemm"
FP64 = "fp64"   # the kernels that compute in float64 (normalize.precision), whatever their role
TF32 = "tf32"   # the library matrix products on TF32 inputs (normalize.precision)
# The passes over an embedding table's dense gradient: the fills that zero it before its backward writes into it,
# the adds that sum two of them (normalize.embedding_grads), as a role
EMBEDDING_GRAD = "embedding-grad"
# The host-activity classes of calls that wait for the GPU (host_activity.csv's waits_for_gpu: syncs, blocking
# copies): a CUDA graph cannot capture them, and normalize.waits counts a step's waits by them
WAITING_CLASSES = ("sync", "copy")


# The critical path's time in the gaps of a stream between one operation and the next (the GPU's launch latency
# per operation, a few µs): a part of its own, not the role of the work before it (token_gen's graph replayed: 2.8
# µs a kernel of a 827 µs step read as matrix products, a user read)
BETWEEN_OPS = "gpu:between-ops"


def loop_role(group: int) -> str:
    """The role of one group of the block's loops, as role_mask reads it."""
    return f"{LOOP}:{group}"


# An enqueue call this much longer than its name's median, and at least BLOCKED_MIN_NS, waited for a slot.
BLOCKED_FACTOR, BLOCKED_MIN_NS = 5.0, 20_000
MIN_BLOCKED_CALLS = 10        # fewer blocked calls: the queue never filled; no queue edge
QUEUE_SPREAD = 0.1            # the blocked calls' queued operations within 10% of their median: a full queue
# CUDA's launch queue holds about a thousand operations (1022 read on the fixtures' host-runs-ahead loops): calls
# that waited with a handful queued waited for something else (pinned_churn's copies after cudaHostAlloc, 1)
MIN_QUEUE_DEPTH = 64
# A call that no table marks as waiting, long by BLOCKED_FACTOR and BLOCKED_MIN_NS, begun with GPU work queued,
# that returned within this share of its duration after that work ended, waited for it; counted so where at
# least MIN_DRAIN_CALLS of its name's calls did and they are DRAIN_AGREE of its name's long calls begun so. On
# the blind56 KV-cache decoder, cuKernelSetAttribute after each new cuDNN kernel's load: 14-15 ms calls that
# returned 0.3 ms after the copies queued before them ended (2%); a host-only call outlasted by chance ends
# anywhere in its span (share uniform).
DRAIN_TAIL_SHARE, MIN_DRAIN_CALLS, DRAIN_AGREE = 0.1, 5, 0.5
# An operation that started this much later than its stream and launch allow waited for something else.
IMPLIED_WAIT_NS = 5_000
# A poll loop (normalize/polls.py): calls of POLL_NAMES that return "not ready" one after another on a chain, at
# least MIN_POLLS of them, then one that returns ready; the graph tests each run found on the block's chains.
HOST_COMPUTE = "host:compute"
# The host's code before a call, up to its launch path (path_gap: the framework's dispatch of each operation), on the
# critical path: the budget counts that time as the GPU's wait on launches, and a graph removes it
HOST_DISPATCH = "host:dispatch"
# The launch path: the host's stretch from the end of the previous call on its chain that is no helper to
# the end of a launching call (the framework's dispatch, the helper calls, the launch). A stretch this many
# times the block's median stretch holds other host work (a sleep, data loading, logging): the launch's own
# share of it is the median stretch. On the fixtures' eager loops the longest launch stretches are 2-10x the
# median (graphs_eager: median 54 us, longest 0.33 ms); logging, loading and sleeps are thousands of times.
LAUNCH_PATH_FACTOR = 10.0
# Host-activity classes whose calls bring GPU code into the process (host_activity.csv): a module loaded, a JIT-compiled
# image. Inside steady steps they are code built for shapes that change (cuDNN's runtime-fused kernels compiled by
# NVRTC, Triton's, torch.compile's recompiles); the build itself is host code no CUDA call records, before the load.
BUILD_CLASSES = frozenset({"module-load", "jit"})
# Calls that launch nothing and only read the driver's state on the way to a launch (cuKernelGetName before
# each of PyTorch's launches): part of the launch path of the launching call that follows them.
HELPER_CLASSES = frozenset({"query"})

# binding codes
NONE, PREV, CROSS, OWN, WAIT, STREAM, LAUNCH, IMPLIED, FIXED = range(9)
# A pinned copy still costs about this much, whatever its size (setup and latency): pinning a 4 KB copy of 1.6 us
# saves none of it (blind_persample_base: 64 such read-backs a step), as pageable-memcpy's own estimate says
PINNED_COPY_FLOOR_NS = 10_000


def _waits(name: str) -> bool:
    """Whether a CUDA call waits for the GPU's queued work (the host-activity table's `waits_for_gpu`)."""
    base = base_name(name)
    return any(r.source == "cuda" and r.waits_for_gpu and fnmatchcase(base, r.pattern) for r in rules())


def _drain_waits(name_ids, c_start, c_end, bound, queued_at, last_ending, o_end):
    """Calls that waited for the GPU by the data, not by their name: those of a name whose long calls, begun with
    work queued, returned just after that work ended (a kernel's first use under CUDA's lazy loading waits for the
    device to drain; a driver call that must see the GPU idle). Calls already bound (a wait by name, a copy, a
    launch: the launch queue's rule reads those) are left out. Returns (calls, the operation each waited for, a
    note) or None. A long host-only call that drained the queue by chance returns anywhere after the queue ran
    dry; its name's long calls do not agree on a return just after it."""
    durations = c_end - c_start
    pos = np.searchsorted(queued_at, c_start, side="right") - 1
    target = np.where(pos >= 0, last_ending[np.maximum(pos, 0)], -1)
    target_end = np.where(target >= 0, o_end[np.maximum(target, 0)], np.iinfo(np.int64).min // 4)
    free = ~bound & (target_end > c_start)
    if not free.any():
        return None
    hits = np.zeros(len(c_start), bool)
    tail = c_end - target_end
    for name_id in distinct(name_ids[free]):
        same = name_ids == name_id
        long = same & free & (durations > max(BLOCKED_FACTOR * median(durations[same]), BLOCKED_MIN_NS))
        mine = long & (tail >= 0) & (tail <= DRAIN_TAIL_SHARE * durations)
        if int(mine.sum()) >= MIN_DRAIN_CALLS and mine.sum() >= DRAIN_AGREE * long.sum():
            hits |= mine
    if not hits.any():
        return None
    idx = np.flatnonzero(hits)
    return idx, target[idx], (f"{len(idx)} calls that no table marks as waiting returned just after the GPU ran dry "
                              f"of the work queued before them: counted as waits for it")


@dataclass
class Graph:
    """A block of consecutive steps as a dependency graph (arrays by node, measured times)."""

    # calls of the launching threads
    c_start: np.ndarray
    c_end: np.ndarray
    c_class: list            # host-activity class per call
    c_prev: np.ndarray       # previous call on the thread (-1)
    c_cross: np.ndarray      # the other thread's call it resumed after (-1)
    c_own: np.ndarray        # the call's own duration (what it takes without waiting)
    c_target: np.ndarray     # the operation it waited for (-1)
    c_tail: np.ndarray       # from that operation's end (or the call's start) to its return
    # GPU operations
    o_start: np.ndarray
    o_end: np.ndarray
    o_call: np.ndarray       # launch call (-1: none in the block; then the operation keeps its times)
    o_prev: np.ndarray       # previous operation on the stream (-1)
    o_implied: np.ndarray    # operation on another stream it waited for (-1)
    o_gap: np.ndarray        # queue gap after the stream's previous operation
    o_latency: np.ndarray    # launch latency from its call's start
    o_label: list            # "gpu:<role>", "gpu:copy", "gpu:memset"
    o_names: list            # (short name, demangled) of kernels, None for copies
    o_copy_kind: np.ndarray  # memcpy kind (-1: kernel or memset)
    o_bytes: np.ndarray
    o_pageable: np.ndarray   # a copy from or to pageable host memory
    # steps (instances of the block, in order)
    step_first_op: list      # per step: indices of the operations its calls launched
    step_index: np.ndarray   # steady-step position of each block step
    queue_depth: int | None = None
    notes: list = field(default_factory=list)
    copy_kinds: dict = field(default_factory=dict)   # memcpy kind id -> its label ("Host-to-Device", ...)
    # the launch path (launch_paths()): per call, the launching call whose path it is (itself, or the next
    # one for the helper calls before it; -1: none) and that path's host stretch; the block's typical stretch
    c_owner: np.ndarray | None = None
    c_stretch: np.ndarray | None = None
    path_typical: float = 0.0
    # loops of launches (normalize.launch_loops): per operation, the group of the loop it is in (-1: none); the
    # loops, step by step
    o_loop: np.ndarray | None = None
    loops: list = field(default_factory=list)
    # forward work run again in the backward (normalize.recompute): per operation, whether it is; the reruns by step
    o_recompute: np.ndarray | None = None
    recomputes: list = field(default_factory=list)
    # a stack's backward passes beyond one per forward pass (normalize.recompute): per operation; by step
    o_repeated: np.ndarray | None = None
    repeated: list = field(default_factory=list)
    c_step: np.ndarray | None = None   # per call: its block step (-1: between the steps' host ranges)
    step_host: tuple | None = None     # (starts, ends) of the block steps' host ranges
    c_names: list | None = None        # per call: its name, without its version suffix
    c_thread: np.ndarray | None = None   # per call: its thread (None: the block is one chain a process)
    c_corr: np.ndarray | None = None     # per call: its correlation id (-1: none; unique within a process)
    c_process: np.ndarray | None = None  # per call: its process id
    o_identity: np.ndarray | None = None   # per operation: its kernel's identity (launch_loops._identities), once made
    tuning: tuning.Tuning | None = None   # timed trials (normalize.tuning): what an autotuner's removal takes
    timing: tuning.TimingCode | None = None   # ... not warmed up: the program's own timing code
    # per call, the position of its name in the block's distinct names; per distinct name, its class (calls_of)
    c_name_position: np.ndarray | None = None
    name_classes: np.ndarray | None = None
    # per call, its thread's OS calls inside the host compute before it (gap_os_time): (the gap as measured,
    # ((host-activity class, ns), ...)); only calls whose gap holds any
    c_gap_os: dict = field(default_factory=dict)
    # PyTorch's operator ranges (operator_ranges): per call, those its chain pushed in the host compute before it;
    # the median host time from an operator's range to the first operator range nested in it (None: too few)
    c_annotations: np.ndarray | None = None
    annotation_ns: float | None = None
    # per call, the host compute before it as measured (from the end of the call it resumed after), and of it the
    # launch path's part (path_gap): the critical path's host:dispatch
    c_gap_ns: np.ndarray | None = None
    c_dispatch_ns: np.ndarray | None = None
    # poll loops (poll_runs): per call, whether it ends one (a wait, of the class sync), and whether it is inside one
    # after its first call (its host time between the queries is the wait's: none of its own)
    c_poll_end: np.ndarray | None = None
    c_in_poll: np.ndarray | None = None

    @functools.cached_property
    def measured_events(self) -> tuple:
        """(the events in measured order, the links as lists): what every replay of the block starts from (replay's
        loop: one integer an event, an event its position in (call starts, operations, call ends); at equal times
        ends first, then operations, then starts), made once a graph. (The measured times are made a replay: kept
        too, they held 34 MB more at trit52_triton_base1's peak for 0.03 s a replay.)"""
        n_calls, n_ops = len(self.c_start), len(self.o_start)
        times = np.concatenate((self.c_start, self.o_start, self.c_end))
        kind = np.concatenate((np.full(n_calls, 2), np.ones(n_ops, np.int64), np.zeros(n_calls, np.int64)))
        order = np.lexsort((kind, times))
        links = tuple(a.tolist() for a in (self.c_prev, self.c_cross, self.o_prev, self.o_call, self.o_implied,
                                           self.c_tail))
        return order, links

    def calls_of(self, classes) -> np.ndarray:
        """Per call, whether its host-activity class is one of `classes`: one test a distinct call name, not one a
        call (trit52_triton_base1's block holds 544k calls of 60 names). A poll loop's last query is a sync."""
        wanted = [classes] if isinstance(classes, str) else list(classes)
        if self.name_classes is None:
            mask = np.fromiter((c in wanted for c in self.c_class), bool, len(self.c_class))
        else:
            mask = np.isin(self.name_classes, wanted)[self.c_name_position]
        if self.c_poll_end is not None and "sync" in wanted:
            mask = mask | self.c_poll_end
        return mask

    @property
    def path_cap(self) -> float:
        """A stretch longer than this holds host work other than the launch's own."""
        return LAUNCH_PATH_FACTOR * self.path_typical

    @property
    def events(self) -> int:
        return len(self.c_start) + len(self.o_start)


@dataclass
class Replay:
    cs: np.ndarray
    ce: np.ndarray
    os: np.ndarray
    oe: np.ndarray
    c_start_bind: np.ndarray
    c_end_bind: np.ndarray
    o_bind: np.ndarray
    step_starts: np.ndarray    # per block step: first operation's start (-1 where none)
    step_ends: np.ndarray      # ... and its operations' last end
    removed_os: frozenset = frozenset()   # the OS classes the change took out of the gaps (gap_os_ns)

    def periods(self, with_last: bool = False) -> np.ndarray:
        """The GPU periods of the block's steps (first work of the next step - its own); the last step's
        to the end of its own work `with_last` (the window's last step: normalize.steps does the same)."""
        periods = np.diff(self.step_starts)
        return np.append(periods, self.step_ends[-1] - self.step_starts[-1]) if with_last else periods

    def valid(self, with_last: bool = False) -> np.ndarray:
        """Where periods() holds a period: the steps on both sides launched GPU work."""
        ok = (self.step_starts[:-1] >= 0) & (self.step_starts[1:] >= 0)
        return np.append(ok, self.step_starts[-1] >= 0) if with_last else ok


@dataclass
class Change:
    """What a replay changes: kernels faster by a factor (regex on their names), host classes removed,
    the steps' launches replaced by one graph launch, pageable copies at the pinned rate."""

    speedups: tuple = ()          # ((label, compiled regex, factor), ...)
    remove: frozenset = frozenset()
    graph: bool = False
    pinned_rate: dict | None = None   # memcpy kind id -> bytes/ns of pinned copies, where pageable ones change
    # ((roles, factor), ...): the kernels of these roles (normalize/kernel_roles.csv; "*" every kernel) faster
    # by the factor; an infinite factor removes them, with the launch calls that launched nothing else
    roles: tuple = ()
    # roles whose kernels are launched as one fused pass: their launch paths go (as for kernels removed), the
    # kernels stay with their measured durations (a fused pass moves fewer bytes: not counted)
    fuse: tuple = ()
    # the timed trials gone (normalize.tuning): the tuner's calls, kernels and the host's time between them; the
    # step's own launches inside its tuning stretch stay, with the launch path's typical host time before each
    untuned: bool = False
    # the program's timing code gone (normalize.tuning.TimingCode): its event calls and syncs with the host's
    # time on the way to each (call_way); the work it timed stays
    untimed: bool = False
    # no GPU code built in the steps (code_builds): the loads gone with the host's time before each beyond a
    # typical launch path (beyond_path); the kernels they load stay, as if built once before the loop
    unbuilt: bool = False
    # the checks of values gone (value_checks): each one-byte read to the host, the short kernels that made the
    # value, their calls and the read's wait, with the host's time on the way to each call (call_way)
    unchecked: bool = False
    # the data the host handles kept on the GPU (data_handled): each copy to the device gone with its calls, its own
    # wait and the host's work before it, each large read to the host with the host's work after it; the GPU work
    # that then does that work is not counted
    data_on_gpu: bool = False
    # each CUDA graph captured once, not in the steps (graph_captures): the calls of its captures and their host time
    # between the begin and the end (the program's code that records the graph's nodes), and its instantiation and
    # destruction, gone; the graph's launch and its kernels stay
    uncaptured: bool = False
    # PyTorch's operator annotation gone (operator_ranges): the host compute before each call less this many ns for
    # each operator range its chain pushed there (c_annotations), never below nothing
    unannotated: float = 0.0

    @property
    def empty(self) -> bool:
        return not self.speedups and not self.remove and not self.graph and self.pinned_rate is None \
            and not self.roles and not self.fuse and not self.untuned and not self.untimed and not self.unbuilt \
            and not self.unchecked and not self.data_on_gpu and not self.uncaptured and not self.unannotated

    def and_(self, other: "Change") -> "Change":
        """Both changes made: what each removes, speeds up or fuses (a role both speed up, by each factor in turn)."""
        return Change(speedups=self.speedups + other.speedups, remove=self.remove | other.remove,
                      graph=self.graph or other.graph,
                      pinned_rate=self.pinned_rate if self.pinned_rate is not None else other.pinned_rate,
                      roles=self.roles + other.roles, fuse=tuple(dict.fromkeys(self.fuse + other.fuse)),
                      untuned=self.untuned or other.untuned, untimed=self.untimed or other.untimed,
                      unbuilt=self.unbuilt or other.unbuilt, unchecked=self.unchecked or other.unchecked,
                      data_on_gpu=self.data_on_gpu or other.data_on_gpu, uncaptured=self.uncaptured or other.uncaptured,
                      unannotated=max(self.unannotated, other.unannotated))


# ---------------------------------------------------------------- the graph


def read_calls(export: NsysExport, start: int, end: int) -> dict[str, np.ndarray]:
    """The CUDA calls begun in [start, end) with their thread (one columnar query: the window's Activity
    holds process ids only); a value that is no integer reads as -1."""
    names = ("start", "end", "tid", "corr", "name_id")
    parts = [f"SELECT start, end, globalTid AS tid, correlationId AS corr, nameId AS name_id FROM \"{t}\" "
             f"WHERE start >= {int(start)} AND start < {int(end)} AND end >= start"
             for t in CALL_TABLES if export.has(t, "start", "end", "nameId", "globalTid", "correlationId")]
    if not parts:
        return {n: np.zeros(0, np.int64) for n in names}
    cols = export.read_columns([IntQuery({n: (n, -1) for n in names}, "FROM (" + " UNION ALL ".join(parts) + ")")])[0]
    order = np.lexsort((cols["end"], cols["start"]))
    return {n: cols[n][order] for n in names}


def process_calls(activity: Activity, start: int, end: int) -> dict[str, np.ndarray]:
    """The window's CUDA calls begun in [start, end), each process's as one chain (`tid` its process id: the
    Activity's calls carry no thread), ordered by start: no second read of the call table."""
    calls = activity.calls
    mask = (calls.start >= start) & (calls.start < end) & (calls.end >= calls.start)
    cols = {"start": calls.start[mask], "end": calls.end[mask], "tid": calls.pid[mask].astype(np.int64) << PID_SHIFT,
            "corr": calls.correlation_id[mask], "name_id": calls.name_id[mask].astype(np.int64)}
    order = np.lexsort((cols["end"], cols["start"]))
    return {n: v[order] for n, v in cols.items()}


def not_ready_calls(export: NsysExport, calls: dict[str, np.ndarray], start: int, end: int) -> np.ndarray:
    """Per call of the block (`calls`, ordered by start and end), whether it returned "not ready" (NOT_READY): one
    columnar query of the call tables' rows that did, in the block, by their return value, matched to the calls by
    start and end (where two threads' calls share both, as many of them as rows)."""
    found = np.zeros(len(calls["start"]), bool)
    parts = [f"SELECT start, end FROM \"{t}\" WHERE start >= {int(start)} AND start < {int(end)} "
             f"AND returnValue = {NOT_READY}" for t in CALL_TABLES if export.has(t, "start", "end", "returnValue")]
    if not parts or not len(found):
        return found
    rows = export.read_columns([IntQuery({"start": ("start", -1), "end": ("end", -1)},
                                         "FROM (" + " UNION ALL ".join(parts) + ")")])[0]
    if not len(rows["start"]):
        return found
    # Calls and rows sorted together by (start, end), a group's calls before its rows: the group's k-th row is its
    # k-th call's, where the group has that many calls.
    n_calls = len(found)
    starts = np.concatenate([calls["start"], rows["start"]])
    ends = np.concatenate([calls["end"], rows["end"]])
    is_row = np.arange(len(starts)) >= n_calls
    order = np.lexsort((is_row, ends, starts))
    s, e = starts[order], ends[order]
    new_group = np.ones(len(order), bool)
    new_group[1:] = (s[1:] != s[:-1]) | (e[1:] != e[:-1])
    group = np.cumsum(new_group) - 1
    group_first = np.flatnonzero(new_group)
    calls_in_group = np.bincount(group, weights=~is_row[order], minlength=len(group_first)).astype(np.int64)
    at = np.flatnonzero(is_row[order])
    k = at - group_first[group[at]] - calls_in_group[group[at]]
    matched = k < calls_in_group[group[at]]
    found[order[group_first[group[at[matched]]] + k[matched]]] = True
    return found


def poll_runs(polled: np.ndarray, not_ready: np.ndarray, name_position: np.ndarray,
              thread: np.ndarray) -> list[tuple[int, list[int]]]:
    """The poll loops' candidates on the block's chains (polls.find_runs over each thread's calls in order): (the
    query that answered ready, the not-ready queries of the same name before it, latest first). Whether it waited for
    the GPU is build_graph's test (it returned after the work queued before it ended, which was running when the
    polling began)."""
    order = np.lexsort((np.arange(len(thread)), thread))   # (the calls are in time order)
    first, ready = find_runs(thread[order], name_position[order], polled[order], not_ready[order])
    return [(int(order[r]), order[f:r][::-1].tolist()) for f, r in zip(first.tolist(), ready.tolist())]


def _busy_until(call_start: np.ndarray, o_end: np.ndarray, device: np.ndarray) -> np.ndarray:
    """Per operation, the latest end of the operations of its GPU whose launch call began before its own: the GPU's
    queued work when it was launched. An operation launched behind other streams' work waits in the device's queue:
    its start less its call's start is that wait, not the launch latency (kin54_sync53_fix1, the host a step ahead of
    the GPU: a memset's stream idle, its "latency" 55 ms, and every launch-bound operation of the replay a step late)."""
    before = np.full(len(call_start), NO_END, np.int64)
    for gpu in distinct(device):
        mine = np.flatnonzero(device == gpu)
        order = mine[np.argsort(call_start[mine], kind="stable")]
        latest = np.maximum.accumulate(o_end[order])
        before[order[1:]] = latest[:-1]
    return before


NO_END = np.iinfo(np.int64).min // 4   # (no operation launched before: _busy_until)


def build_graph(export: NsysExport, activity: Activity, launching_threads: np.ndarray, host_starts: np.ndarray,
                host_ends: np.ndarray, step_pid: int | None, steady_positions: np.ndarray,
                threads: bool = True) -> Graph | None:
    """The graph of the steps whose host ranges are given (consecutive instances, in order). `threads`: the
    launching threads' calls, one chain each (a read of the call table's thread column over the block);
    else each process's calls as one chain (the window's Activity, no read)."""
    if not len(host_starts):
        return None
    block_start, block_end = int(host_starts[0]), int(host_ends[-1])
    if threads:
        calls = read_calls(export, block_start, block_end)
        launching = set(int(t) for t in launching_threads)
        keep = np.isin(calls["tid"], list(launching)) if launching else np.ones(len(calls["tid"]), bool)
    else:
        calls = process_calls(activity, block_start, block_end)
        keep = np.ones(len(calls["tid"]), bool)
    if step_pid is not None:
        keep &= (calls["tid"] >> PID_SHIFT) == step_pid
    calls = {n: v[keep] for n, v in calls.items()}
    n_calls = len(calls["start"])
    if not n_calls:
        return None
    name_ids, call_name = np.unique(calls["name_id"], return_inverse=True)   # per call, its name's position
    names = export.strings(name_ids)
    classes = np.array([classify(names.get(int(i)) or f"call {int(i)}") for i in name_ids.tolist()] + [""], dtype=object)
    c_class = classes[call_name].tolist()
    waiting = np.array([_waits(names.get(int(i)) or "") for i in name_ids.tolist()], dtype=bool)[call_name]

    # operations: those the block's calls launched, and those running between the block's start and the
    # last of them (launched before the block: its past, kept as measured)
    k, c = activity.kernels, activity.copies
    kmask = k.end > block_start
    cmask = c.end > block_start
    if step_pid is not None:
        kmask &= (k.pid == step_pid) | (k.pid < 0)
        cmask &= (c.pid == step_pid) | (c.pid < 0)
    block_corr = calls["corr"][calls["corr"] >= 0]
    if len(block_corr):
        low, high = int(block_corr.min()), int(block_corr.max())
        launched_k = kmask & (k.correlation_id >= low) & (k.correlation_id <= high)
        launched_c = cmask & (c.correlation_id >= low) & (c.correlation_id <= high)
        last = max(int(k.start[launched_k].max(initial=block_start)), int(c.start[launched_c].max(initial=block_start)))
        kmask &= k.start <= last
        cmask &= c.start <= last
    o_start = np.concatenate((k.start[kmask], c.start[cmask]))
    o_end = np.concatenate((k.end[kmask], c.end[cmask]))
    o_stream = np.concatenate((pair_keys(k.device_id[kmask], k.stream_id[kmask]),
                               pair_keys(c.device_id[cmask], c.stream_id[cmask])))
    o_device = np.concatenate((k.device_id[kmask], c.device_id[cmask]))
    o_corr = np.concatenate((k.correlation_id[kmask], c.correlation_id[cmask]))
    nk = int(kmask.sum())
    short, dem = k.short_name_id[kmask], k.demangled_id[kmask]
    op_names = export.strings(np.concatenate((distinct(short), distinct(dem)))) if nk else {}
    memset = c.memset[cmask]
    o_copy_kind = np.concatenate((np.full(nk, -1, np.int64), np.where(memset == 1, -1, c.copy_kind[cmask])))
    o_bytes = np.concatenate((np.zeros(nk, np.int64), c.bytes[cmask]))
    pageable_kinds = [int(i) for i, label in export.query("SELECT id, label FROM memory_kinds")
                      if str(label).lower() == "pageable"]
    o_pageable = np.concatenate((np.zeros(nk, bool), (memset == 0) & (np.isin(c.src_kind[cmask], pageable_kinds)
                                                                     | np.isin(c.dst_kind[cmask], pageable_kinds))))
    o_label = [None] * nk + ["gpu:memset" if m else "gpu:copy" for m in memset]
    o_names = _name_pairs(short, dem, op_names) + [None] * int(cmask.sum())
    annotated = annotated_roles(export, activity)
    for i, role in enumerate(_kernel_roles(export, k.where(kmask), o_names[:nk],
                                           None if annotated is None else annotated[np.asarray(kmask, dtype=bool)])):
        o_label[i] = "gpu:" + role
    order = np.lexsort((o_end, o_start))
    o_start, o_end, o_stream, o_corr, o_copy_kind, o_bytes, o_pageable = (
        a[order] for a in (o_start, o_end, o_stream, o_corr, o_copy_kind, o_bytes, o_pageable))
    o_label = [o_label[i] for i in order]
    o_names = [o_names[i] for i in order]
    n_ops = len(o_start)

    # launch -> operation, by correlation id (one process: ids are unique in it)
    corr_sorted = np.argsort(calls["corr"], kind="stable")
    at = np.searchsorted(calls["corr"][corr_sorted], o_corr)
    at = np.minimum(at, max(n_calls - 1, 0))
    found = (calls["corr"][corr_sorted][at] == o_corr) & (o_corr >= 0)
    o_call = np.where(found, corr_sorted[at], -1)

    # stream order
    o_prev = np.full(n_ops, -1, np.int64)
    by_stream = np.lexsort((np.arange(n_ops), o_stream))
    same = o_stream[by_stream[1:]] == o_stream[by_stream[:-1]]
    o_prev[by_stream[1:][same]] = by_stream[:-1][same]

    # thread order and hand-offs
    tid = calls["tid"]
    c_prev = np.full(n_calls, -1, np.int64)
    by_thread = np.lexsort((np.arange(n_calls), tid))
    same = tid[by_thread[1:]] == tid[by_thread[:-1]]
    c_prev[by_thread[1:][same]] = by_thread[:-1][same]
    overlap = (c_prev >= 0) & (calls["end"][np.maximum(c_prev, 0)] > calls["start"])
    if overlap.any():   # calls of one chain that overlap (threads of a process): after the last one ended
        by_end = np.argsort(calls["end"], kind="stable")
        pos = np.searchsorted(calls["end"][by_end], calls["start"][overlap], side="right") - 1
        c_prev[overlap] = np.where(pos >= 0, by_end[np.maximum(pos, 0)], -1)
    c_cross = np.full(n_calls, -1, np.int64)
    for thread in distinct(tid):
        mine = tid == thread
        others = np.flatnonzero(~mine)
        if not len(others):
            continue
        by_end = others[np.argsort(calls["end"][others], kind="stable")]
        idx = np.flatnonzero(mine)
        pos = np.searchsorted(calls["end"][by_end], calls["start"][idx], side="right") - 1
        ok = pos >= 0
        cand = np.where(ok, by_end[np.maximum(pos, 0)], -1)
        prev = c_prev[idx]
        prev_end = np.where(prev >= 0, calls["end"][np.maximum(prev, 0)], np.iinfo(np.int64).min)
        later = ok & (calls["end"][np.maximum(cand, 0)] > prev_end)
        c_cross[idx[later]] = cand[later]

    # launch latency (the GPU idle when the call began: no operation launched before it still queued or running, on
    # any stream) and queue gap (queued behind the stream)
    has_call = o_call >= 0
    call_start_of_op = np.where(has_call, calls["start"][np.maximum(o_call, 0)], o_start)
    prev_end = np.where(o_prev >= 0, o_end[np.maximum(o_prev, 0)], np.iinfo(np.int64).min // 4)
    busy_until = _busy_until(call_start_of_op, o_end, o_device)
    # (the block's first launch cannot tell: the work launched before the block may still be queued)
    idle_launch = has_call & (call_start_of_op >= prev_end) & (call_start_of_op >= busy_until) & (busy_until > NO_END)
    op_class = classes[np.where(o_call >= 0, call_name[np.maximum(o_call, 0)], -1)]   # classes[-1]: ""
    o_latency = np.zeros(n_ops)
    fallback = median((o_start - call_start_of_op)[idle_launch]) if idle_launch.any() else 0.0
    for cls in set(op_class[has_call].tolist()):
        mine = idle_launch & (op_class == cls)
        o_latency[op_class == cls] = median((o_start - call_start_of_op)[mine]) if mine.any() else fallback
    queued = (o_prev >= 0) & (o_start - prev_end >= 0) & (~has_call | (call_start_of_op + o_latency < prev_end))
    gap = median((o_start - prev_end)[queued]) if queued.any() else 0.0
    # an operation queued behind its stream keeps its own gap (graph nodes, launch shapes differ); one
    # that waited for its launch, the median gap, should it be queued once the change moves it
    o_gap = np.where(queued, o_start - prev_end, gap).astype(np.float64)
    # graph nodes after the first: queued behind their graph's previous node
    # implied waits on another stream
    expected = np.maximum(np.where(o_prev >= 0, prev_end + o_gap, -np.inf),
                          np.where(has_call, call_start_of_op + o_latency, -np.inf))
    late = has_call & (o_start - expected > IMPLIED_WAIT_NS)
    o_implied = np.full(n_ops, -1, np.int64)
    if late.any():
        by_end = np.argsort(o_end, kind="stable")
        pos = np.searchsorted(o_end[by_end], o_start[late], side="right") - 1
        cand = np.where(pos >= 0, by_end[np.maximum(pos, 0)], -1)
        o_implied[np.flatnonzero(late)] = cand

    # poll loops: the ready query of each is a wait (tested below: it returned after the work it waited for)
    polled = np.array([base_name(names.get(int(i)) or "") in POLL_NAMES for i in name_ids.tolist()], bool)[call_name]
    runs = poll_runs(polled, not_ready_calls(export, calls, block_start, block_end), call_name, tid) \
        if polled.any() else []
    waiting[np.array([end for end, _ in runs], np.int64)] = True

    # waits: the operation queued before the call that ended last (device-wide, the call's process)
    c_target = np.full(n_calls, -1, np.int64)
    c_start, c_end = calls["start"], calls["end"]
    by_queue = np.argsort(call_start_of_op, kind="stable")
    ends_q = o_end[by_queue]
    if n_ops:
        prefix = np.maximum.accumulate(ends_q)
        best = np.maximum.accumulate(np.where(ends_q == prefix, np.arange(n_ops), 0))
    if n_ops and waiting.any():
        pos = np.searchsorted(call_start_of_op[by_queue], c_start[waiting], side="right") - 1
        c_target[np.flatnonzero(waiting)] = np.where(pos >= 0, by_queue[best[np.maximum(pos, 0)]], -1)
    # a copy call that returned after its own copy ended waited for it (pageable memory)
    copy_ops = np.flatnonzero(has_call & (o_copy_kind >= 0))
    for i in copy_ops:
        call = int(o_call[i])
        if o_end[i] <= c_end[call] and c_class[call] in ("copy-async", "copy") and \
                (c_target[call] < 0 or o_end[i] > o_end[c_target[call]]):
            c_target[call] = i
    # the launch queue: enqueue calls in order; one made with the queue full waited for a slot
    notes = []
    enqueue = distinct(o_call[has_call])
    last_op_end = np.full(n_calls, -1, np.int64)
    last_op = np.full(n_calls, -1, np.int64)
    np.maximum.at(last_op_end, o_call[has_call], o_end[has_call])
    ends_last = np.flatnonzero(has_call & (o_end == last_op_end[np.maximum(o_call, 0)]))
    np.maximum.at(last_op, o_call[ends_last], ends_last)   # the operation that ends last, per call (the latest of a tie)
    durations = c_end - c_start
    depth = None
    if len(enqueue) > 1:
        enqueue = enqueue[np.argsort(c_start[enqueue], kind="stable")]
        enqueue_class = classes[call_name[enqueue]]
        typical = np.zeros(len(enqueue))
        for cls in set(enqueue_class.tolist()):
            mine = enqueue_class == cls
            typical[mine] = median(durations[enqueue[mine]])
        long = (durations[enqueue] > np.maximum(BLOCKED_FACTOR * typical, BLOCKED_MIN_NS)) & (c_target[enqueue] < 0)
        if int(long.sum()) >= MIN_BLOCKED_CALLS:
            ends_sorted = np.sort(last_op_end[enqueue])
            position = np.flatnonzero(long)
            ended = np.searchsorted(ends_sorted, c_end[enqueue[position]], side="right")
            # counted only where a call of the block had ended: the work queued before the block had then
            # ended too (a stream runs in order), so the count is the queue's, not the block's share of it
            outstanding = (position - ended)[ended >= 1]
            depth = 1
            if len(outstanding) >= MIN_BLOCKED_CALLS:
                low, mid, high = np.percentile(outstanding, [10, 50, 90])
                # a full queue holds the same number of operations at every blocked call; long calls that
                # found it otherwise waited for something else (host work inside the call)
                if high - low <= QUEUE_SPREAD * mid and mid + 1 >= MIN_QUEUE_DEPTH:
                    depth = int(mid) + 1
            if depth > 1:
                released = np.arange(len(enqueue)) - depth
                ok = released >= 0
                idx = enqueue[ok]
                tgt = last_op[enqueue[released[ok]]]
                # a call waits for the slot its operation freed only where that operation ended before the call
                # returned: one that ended after it held no slot this call waited for (the queue was not full then)
                free = (c_target[idx] < 0) & (tgt >= 0) & (o_end[np.maximum(tgt, 0)] <= c_end[idx])
                c_target[idx[free]] = tgt[free]
                notes.append(f"the launch queue filled: {int(long.sum())} enqueue calls waited for a slot; "
                             f"depth read as {depth} operations")
            else:
                depth = None
    if n_ops:
        launched = np.zeros(n_calls, bool)
        launched[o_call[has_call]] = True
        drained = _drain_waits(calls["name_id"], c_start, c_end, (c_target >= 0) | launched, call_start_of_op[by_queue],
                               by_queue[best], o_end)
        if drained is not None:
            c_target[drained[0]] = drained[1]
            notes.append(drained[2])
    else:
        drained = None
    # a poll loop waited where its ready answer came after the work it waited for ended, and that work was still
    # running when the polling began; else its queries were the host's own (the target is let go)
    c_poll_end, c_in_poll = np.zeros(n_calls, bool), np.zeros(n_calls, bool)
    for end, run in runs:
        target = c_target[end]
        if target >= 0 and c_start[run[-1]] < o_end[target] <= c_end[end]:
            c_poll_end[end] = True
            c_in_poll[run[:-1]] = True   # (the first query keeps the host's time before it)
            c_in_poll[end] = True
        else:
            c_target[end] = -1
    target_end = np.where(c_target >= 0, o_end[np.maximum(c_target, 0)], np.iinfo(np.int64).min // 4)
    waited = target_end > c_start
    c_tail = (c_end - np.maximum(c_start, target_end)).astype(np.float64)
    # a poll loop returns when a query after the work's end finds it done: the time from that end is its tail
    c_tail = np.where(c_poll_end, c_end - target_end, c_tail)
    c_tail = np.maximum(c_tail, 0.0)
    # own duration of a call that waited: its name's typical duration when it did not wait
    c_own = durations.astype(np.float64)
    if waited.any():
        ids = calls["name_id"]
        for name_id in distinct(ids[waited]):
            same = ids == name_id
            free = same & ~waited
            own = median(durations[free]) if free.any() else None
            mask = same & waited
            c_own[mask] = np.minimum(durations[mask], own) if own is not None else c_tail[mask]
    if drained is not None:   # their work came after the wait (a module's load): as long with the GPU idle at once
        c_own[drained[0]] = c_tail[drained[0]]
    c_own[c_in_poll & ~c_poll_end] = 0.0   # the not-ready queries: part of the wait, not the host's own time
    if c_poll_end.any():
        notes.append(f"{int(c_poll_end.sum())} poll loops ({int((c_in_poll & ~c_poll_end).sum())} queries answered "
                     "not ready, then one ready after the work queued before them ended): counted as waits for it")

    # steps: the operations launched by each step's calls
    step_of_call = np.searchsorted(host_starts, c_start, side="right") - 1
    inside = (step_of_call >= 0) & (c_start < host_ends[np.maximum(step_of_call, 0)])
    step_ops = [[] for _ in range(len(host_starts))]
    op_step = np.where(has_call, np.where(inside[np.maximum(o_call, 0)], step_of_call[np.maximum(o_call, 0)], -1), -1)
    for s in range(len(host_starts)):
        step_ops[s] = np.flatnonzero(op_step == s)
    copy_kinds = {int(i): str(label) for i, label in export.query("SELECT id, label FROM memcpy_kinds")}
    graph = Graph(c_start, c_end, c_class, c_prev, c_cross, c_own, c_target, c_tail,
                  o_start, o_end, o_call, o_prev, o_implied, o_gap, o_latency, o_label, o_names, o_copy_kind, o_bytes,
                  o_pageable, step_ops, np.asarray(steady_positions), depth, notes, copy_kinds)
    graph.c_name_position, graph.name_classes = call_name, classes
    graph.c_poll_end, graph.c_in_poll = c_poll_end, c_in_poll
    graph.c_owner, graph.c_stretch, graph.path_typical = launch_paths(graph)
    never = np.iinfo(np.int64).min // 4
    resumed = np.maximum(np.where(c_prev >= 0, c_end[np.maximum(c_prev, 0)], never),
                         np.where(c_cross >= 0, c_end[np.maximum(c_cross, 0)], never))
    graph.c_gap_ns = np.where(resumed > never, c_start - resumed, 0).clip(min=0).astype(np.float64)
    graph.c_dispatch_ns = path_gap(graph, graph.c_gap_ns)
    graph.o_loop, graph.loops = launch_loops.find(graph)
    graph.c_step = np.where(inside, step_of_call, -1)
    graph.step_host = (np.asarray(host_starts), np.asarray(host_ends))
    graph.c_thread = tid if threads else None
    graph.c_corr, graph.c_process = calls["corr"], tid >> PID_SHIFT
    graph.c_names = np.array([base_name(names.get(int(i)) or f"call {int(i)}") for i in name_ids.tolist()],
                             dtype=object)[call_name].tolist()
    launched = np.zeros(n_calls, bool)
    launched[o_call[o_call >= 0]] = True
    graph.tuning, graph.timing = tuning.find(c_class, launched, graph.c_step, c_start, c_end, tid, o_call,
                                             [names[0] if names else None for names in o_names], len(host_starts))
    graph.o_recompute, graph.recomputes, graph.o_repeated, graph.repeated = recompute.find(graph)
    graph.c_gap_os = gap_os_time(export, graph, tid, launching_threads)
    if export.kind == "nsys":
        graph.c_annotations, graph.annotation_ns = operator_ranges(export, graph)
    return graph


# At least this many operator ranges nested first in another before their gaps' median measures a range's host time
MIN_NESTED_RANGES = 50


def operator_ranges(export: NsysExport, graph: Graph) -> tuple[np.ndarray | None, float | None]:
    """PyTorch's operator ranges (steps.OPERATOR_RANGES: its NVTX mode pushes one around every operator) in the
    block: (per call, the ranges its chain pushed in the host compute before it, from the end of the chain's call
    before it; the median host time from an operator's range to the first operator range nested in it), (None,
    None) where the block holds none. That nested gap is what the host does between two pushes with no Python in
    between (`aten::t` -> `aten::transpose` -> `aten::as_strided`): the next range's text made and pushed, and the
    little C++ dispatch before it. With the inputs' shapes in the text (record_shapes=True) blind82_emitnvtx's replayed
    steps' gaps are a median 4.2 and 2.9 us, its twins without the ranges saved 5.2 and 3.0 us a range; without the
    shapes opt_loop_annot's are 1.2 us, and its twin saved nothing (docs/performance.md)."""
    if not len(graph.c_start):
        return None, None
    lo, hi = int(graph.c_start.min()), int(graph.c_start.max())
    like = " OR ".join(f"name LIKE '{pattern}'" for pattern in OPERATOR_RANGES)   # (constants: Arrow reads it)
    ranges = export.read_columns([IntQuery({"start": ("start", -1), "end": ("end", -1), "tid": ("global_tid", -1)},
                                           f"FROM nvtx WHERE start >= :lo AND start < :hi AND ({like}) AND {VALID_NVTX}",
                                           {"lo": lo, "hi": hi})])[0]
    starts, ends, tids = ranges["start"], ranges["end"], ranges["tid"]
    if not len(starts):
        return None, None
    by_thread = graph.c_thread is not None
    chain = graph.c_thread if by_thread else graph.c_process
    range_chain = tids if by_thread else tids >> PID_SHIFT
    # (a chain's first call in the block: the compute before it is not measured, nor are ranges counted there)
    resumed = np.where(graph.c_prev >= 0, graph.c_end[np.maximum(graph.c_prev, 0)], graph.c_start)
    pushed = np.zeros(len(graph.c_start), np.int64)
    for key in distinct(chain).tolist():   # (a few threads)
        mine = chain == key
        theirs = np.sort(starts[range_chain == key])
        pushed[mine] = np.searchsorted(theirs, graph.c_start[mine], "right") - \
            np.searchsorted(theirs, resumed[mine], "left")
    order = np.lexsort((-ends, starts, tids))   # by thread, then start, the enclosing range first
    s, e, t = starts[order], ends[order], tids[order]
    first_nested = (t[1:] == t[:-1]) & (e[1:] <= e[:-1])   # the range after another on its thread, inside it
    gaps = (s[1:] - s[:-1])[first_nested]
    return pushed.clip(min=0), (float(np.median(gaps)) if len(gaps) >= MIN_NESTED_RANGES else None)


def annotation_ns_per_step(graph: Graph, range_ns: float) -> float:
    """The host time a step spends on PyTorch's operator ranges at `range_ns` each (operator_ranges), no more than
    the host compute they lie in: what removing them takes away at most."""
    if graph.c_annotations is None or graph.c_gap_ns is None:
        return 0.0
    inside = graph.c_step >= 0 if graph.c_step is not None else np.ones(len(graph.c_start), bool)
    spent = np.minimum(graph.c_annotations * range_ns, graph.c_gap_ns)[inside]
    return float(spent.sum()) / max(len(graph.step_first_op), 1)


def gap_os_time(export: NsysExport, graph: Graph, tids: np.ndarray, launching_threads: np.ndarray) -> dict:
    """Per call, the time in the host compute before it (from the end of the call it resumed after to its start,
    as measured) when every launching thread of the block's processes sat in an OS call, by the host-activity
    class of those calls (host_activity.csv; where two classes overlap, the table's first, as host activity paints
    them), with that gap's length: the critical path names what the host waited on there. blind68_loader's
    training thread spends 212 ms of a 231 ms step in sem_clockwait (the loader's queue), the autograd thread in
    pthread_cond_wait, which the path called host compute. A thread that never entered an OS call in the block
    may have been computing all along: then no gap is labelled. Calls nested in another (nestingLevel > 0) are that
    call's time. `tids`: the block's calls' threads (a process id shifted where the chains are processes')."""
    if not len(graph.c_start) or not export.has("OSRT_API", "start", "end", "nameId", "globalTid"):
        return {}
    processes = set(distinct(tids >> PID_SHIFT).tolist())
    threads = [int(t) for t in distinct(np.asarray(launching_threads, np.int64)).tolist() if t >> PID_SHIFT in processes]
    if not threads:
        return {}
    lo, hi = int(graph.c_start.min()), int(graph.c_start.max())
    calls = read_os_calls(export, threads, lo, hi, outer_only=True, ends_after_start=True)
    if not len(calls["start"]):
        return {}
    os_start, os_end, os_name, os_tid = (calls[n] for n in ("start", "end", "name_id", "tid"))
    if len(distinct(os_tid)) < len(threads):
        return {}
    blocked = all_threads_inside(os_start, os_end, os_tid)
    if not len(blocked[0]):
        return {}
    names = export.strings(distinct(os_name))
    name_class = {int(i): classify(names.get(int(i)) or f"call {int(i)}", "os") for i in distinct(os_name).tolist()}
    named, position = np.unique(os_name, return_inverse=True)   # (a class a distinct name, not one a call)
    call_class = np.array([name_class[int(i)] for i in named.tolist()], dtype=object)[position]
    order = {name: k for k, name in enumerate(class_order())}
    present = sorted(set(call_class.tolist()), key=lambda name: (order.get(name, len(order)), name))
    layers = [intersect(union(os_start[call_class == name].copy(), os_end[call_class == name].copy(), owned=True),
                        blocked) for name in present]
    seg_start, seg_end, label = paint(layers, (lo, hi))
    gaps = np.flatnonzero(graph.c_gap_ns > 0)   # (the gap before each call as measured: build_graph)
    gap_start = graph.c_start - graph.c_gap_ns.astype(np.int64)
    found: dict[int, list] = {}
    for k, name in enumerate(present):
        mine = label == k
        if not mine.any():
            continue
        held = Measure(seg_start[mine], seg_end[mine])(np.maximum(gap_start[gaps], lo), graph.c_start[gaps])
        for c, ns in zip(gaps[held > 0].tolist(), held[held > 0].tolist()):
            found.setdefault(c, []).append((name, float(ns)))
    return {c: (float(graph.c_gap_ns[c]), tuple(by_class)) for c, by_class in found.items()}


def gap_os_ns(graph: Graph, name: str | None = None) -> np.ndarray:
    """Per call, the time of the OS class `name` (None: of every OS class, waits on a queue, a lock, I/O or a sleep,
    not work) in the host compute before it (Graph.c_gap_os): what removing that class (`whatif --remove
    lock-wait`: the loader's queue never empty) takes from the host's gap."""
    waited = np.zeros(len(graph.c_start))
    for call, (_, by_class) in graph.c_gap_os.items():
        waited[call] = sum(ns for cls, ns in by_class if name is None or cls == name)
    return waited


def _name_pairs(short: np.ndarray, demangled: np.ndarray, names: dict) -> list:
    """Per kernel, (short name, demangled name) from the ids: one tuple per distinct pair, shared."""
    if not len(short):
        return []
    pairs, inverse = np.unique(np.stack((short, demangled), axis=1), axis=0, return_inverse=True)
    made = np.empty(len(pairs), dtype=object)
    made[:] = [(names.get(int(s)), names.get(int(d))) for s, d in pairs.tolist()]
    return made[inverse.reshape(-1)].tolist()


def launch_paths(graph: Graph) -> tuple[np.ndarray, np.ndarray, float]:
    """Each launching call's launch path: the helper calls before it on its chain (HELPER_CLASSES, launching
    nothing) back to the previous call that is no helper, and the host stretch from that call's end to its
    own end. Returns per call the launching call whose path holds it (-1: none), per call that stretch (NaN:
    none, or no call before it in the block), and the median stretch of the block's launching calls."""
    n = len(graph.c_start)
    launching = np.zeros(n, bool)
    launching[graph.o_call[graph.o_call >= 0]] = True
    helper = graph.calls_of(HELPER_CLASSES) & ~launching
    owner = np.where(launching, np.arange(n), -1)
    stretch = np.full(n, np.nan)
    prev, c_end = graph.c_prev, graph.c_end
    chained = prev[prev >= 0]
    if not len(chained) or np.bincount(chained).max() <= 1:   # chains (no call the previous one of two): at once
        return _chain_paths(graph, launching, helper, owner, stretch)
    for c in np.flatnonzero(launching).tolist():
        p = int(prev[c])
        while p >= 0 and helper[p] and owner[p] < 0:
            owner[p] = c
            p = int(prev[p])
        if p >= 0 and not helper[p]:
            stretch[c] = float(c_end[c] - c_end[p])
    known = stretch[launching & np.isfinite(stretch)]
    typical = median(known) if len(known) else 0.0
    stretch = np.where(owner >= 0, stretch[np.maximum(owner, 0)], np.nan)
    return owner, stretch, float(typical)


def _chain_paths(graph: Graph, launching, helper, owner, stretch) -> tuple[np.ndarray, np.ndarray, float]:
    """launch_paths where every call is the previous one of at most one call: a helper's path is that of the first
    call after it past helpers only, where that one launches; a launching call's stretch runs from the end of the
    first call before it past helpers only (pointers followed by doubling, not call by call)."""
    n = len(graph.c_start)
    prev, c_end = graph.c_prev, graph.c_end
    after = np.full(n, -1, np.int64)
    has = prev >= 0
    after[prev[has]] = np.flatnonzero(has)
    back = _past_helpers(np.where(helper, prev, np.arange(n)))
    forth = _past_helpers(np.where(helper, after, np.arange(n)))
    ends_at = np.where(forth >= 0, forth, 0)
    owner = np.where(helper & (forth >= 0) & launching[ends_at], forth, owner)
    before = np.where(prev >= 0, back[np.maximum(prev, 0)], -1)
    starts = launching & (before >= 0)
    stretch[starts] = (c_end[starts] - c_end[before[starts]]).astype(float)
    known = stretch[launching & np.isfinite(stretch)]
    typical = median(known) if len(known) else 0.0
    stretch = np.where(owner >= 0, stretch[np.maximum(owner, 0)], np.nan)
    return owner, stretch, float(typical)


def _past_helpers(pointer: np.ndarray) -> np.ndarray:
    """Each call's pointer followed until it stays put (a call that is no helper points at itself) or leaves the
    chain (-1), by doubling."""
    while True:
        further = np.where(pointer >= 0, pointer[np.maximum(pointer, 0)], -1)
        if np.array_equal(further, pointer):
            return pointer
        pointer = further


def path_gap(graph: Graph, gap: np.ndarray) -> np.ndarray:
    """Of each call's gap before it (host compute), the part that is its launch path's: all of it where the
    path's stretch is within the cap, else at most the typical stretch (the rest is other host work).
    A call in no launch path: its gap within the cap, else the typical stretch."""
    cap = graph.path_cap
    stretch = np.where(np.isfinite(graph.c_stretch), graph.c_stretch, gap)
    return np.where(stretch <= cap, gap, np.minimum(gap, graph.path_typical)).clip(min=0.0)


def call_way(graph: Graph, gap: np.ndarray) -> np.ndarray:
    """Of each call's gap before it (host compute), the part that is the way to a call the program makes itself
    (a framework call such as `Event.record()`): at most the typical launch path. A longer gap holds the program's
    other work, which stays: before the first event call of a timed phase lies the code before that phase
    (time53's GPT: 110-370 us there, against a typical path of 36 us)."""
    return np.minimum(gap, graph.path_typical).clip(min=0.0)


# The kernels that make a checked value: the run of these roles on the read's stream just before it, with the
# memsets among them (a reduction's output zeroed before it: anomaly mode's `isnan(grad).any().item()` per gradient
# is an elementwise kernel, a memset, a reduction and the read; blind61_anomaly's base launches 336 of each a step
# more than its fix)
CHECK_ROLES = ("elementwise", "reduction", "cast")
BOOLEAN_BYTES = 1   # a read of one byte to the host: a boolean the host tests


def value_checks(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(operations, calls) of the block's checks of values: each read of one byte to the host (a boolean the host
    tests: `bool(t)`, an assert, torch.distributions' argument validation), the run of short elementwise, reduction
    and cast kernels (and memsets) before it on its stream that made the value (back to another such read or other
    work), and the calls of the read and its wait (copy_waits). blind67_distval: 4 a step, each a comparison and a reduction or two,
    which its fix (validation off) removed with their host code."""
    ops, calls = np.zeros(len(graph.o_start), bool), np.zeros(len(graph.c_start), bool)
    kinds = [kind for kind, label in graph.copy_kinds.items() if label == READ_BACK_KIND]
    reads = np.isin(graph.o_copy_kind, kinds) & (graph.o_bytes == BOOLEAN_BYTES) & (graph.o_call >= 0)
    if not reads.any():
        return ops, calls
    makers = {"gpu:" + role for role in CHECK_ROLES}
    for read in np.flatnonzero(reads).tolist():
        ops[read] = True
        at = int(graph.o_prev[read])
        while at >= 0 and not reads[at] and (graph.o_label[at] == "gpu:memset" or
                                              graph.o_label[at] in makers and graph.o_names[at] is not None):
            ops[at] = True
            at = int(graph.o_prev[at])
    calls[graph.o_call[reads]] = True
    calls |= copy_waits(graph, reads)
    return ops, calls


def checks_ns_per_step(graph: Graph) -> float:
    """The host and GPU time a step spends in its checks of values (value_checks): their calls and the way to each,
    the kernels' launch paths and their time; what removing them takes away at most, beside the idle time their
    waits leave (the replay's)."""
    ops, calls = value_checks(graph)
    if not ops.any():
        return 0.0
    steps = max(len(graph.step_first_op), 1)
    gpu = float((graph.o_end - graph.o_start)[ops & (graph.o_call >= 0)].sum()) / steps
    paths = dropped_paths(graph, ops)   # (the kernels' and reads' calls with their paths; the waits apart, once)
    return calls_host_ns_per_step(graph, calls & ~paths, call_way) + calls_host_ns_per_step(graph, paths) + gpu


def code_builds(graph: Graph) -> np.ndarray:
    """The block's calls inside its steps that bring GPU code in (BUILD_CLASSES), an autotuner's aside (its trials
    and their builds are autotuning's change)."""
    builds = graph.calls_of(BUILD_CLASSES)
    if graph.c_step is not None:
        builds &= graph.c_step >= 0
    if graph.tuning is not None and graph.tuning.any:
        builds &= ~graph.tuning.removed
    return builds


# Stream captures (host_activity.csv's graph-build class): a begin-capture call, the calls that record the graph's
# nodes (their launches run nothing), the end-capture call; then the graph is instantiated, launched, and destroyed
# when it is dropped. A program that captures its graph once does none of it in the steps (blind78_recapture: a
# Conformer's step captured anew each step, 387 launches recorded and a 2.3 ms instantiation a step). The calls'
# names: host_calls.CAPTURE_BEGINS and CAPTURE_ENDS, which the window's count of recorded launches reads too.
GRAPH_BUILD = "graph-build"


def capture_begins(graph: Graph) -> np.ndarray:
    """Per call, whether it begins a stream capture inside the block's steps."""
    if graph.c_names is None or graph.c_step is None:
        return np.zeros(len(graph.c_start), bool)
    return np.isin(graph.c_names, list(CAPTURE_BEGINS)) & (graph.c_step >= 0)


def graph_captures(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The block's calls inside its steps that capture a CUDA graph: (the calls after each begin-capture call up to
    its end-capture call on their chain, whose host time between them is the graph's recording; the begin-capture
    calls and the graph-build class's other calls (instantiation, destruction), whose way to each stays the
    program's)."""
    n = len(graph.c_start)
    none = np.zeros(n, bool), np.zeros(n, bool)
    if graph.c_names is None or graph.c_step is None:
        return none
    begin = np.isin(graph.c_names, list(CAPTURE_BEGINS))
    end = np.isin(graph.c_names, list(CAPTURE_ENDS))
    if not begin.any():
        return none
    chain = graph.c_thread if graph.c_thread is not None else graph.c_process
    if chain is None:
        chain = np.zeros(n, np.int64)
    order = np.lexsort((np.arange(n), chain))   # each chain's calls in time order
    step = begin[order].astype(np.int64) - end[order].astype(np.int64)
    depth = np.cumsum(step)
    first = np.ones(n, bool)
    first[1:] = chain[order][1:] != chain[order][:-1]
    start_of = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    depth = depth - (depth[start_of] - step[start_of])   # counted from each chain's first call
    inside = np.zeros(n, bool)
    inside[order] = (depth > 0) | end[order]
    in_steps = graph.c_step >= 0
    around = (graph.calls_of(GRAPH_BUILD) | begin) & in_steps & ~(inside & ~begin)
    return inside & ~begin & in_steps, around


def whole_gap(graph: Graph, gap: np.ndarray) -> np.ndarray:
    """All of the host compute before a call: inside a capture, the program's code that records the graph."""
    return gap.clip(min=0.0)


def capture_ns_per_step(graph: Graph) -> float:
    """The host time a step spends capturing, instantiating and destroying CUDA graphs (graph_captures): what
    capturing once takes off the host at most."""
    inside, around = graph_captures(graph)
    return calls_host_ns_per_step(graph, inside, whole_gap) + calls_host_ns_per_step(graph, around, call_way)


# A step's allocator calls are its captures' memory pool where those inside the captures (the new graph's pool
# allocated) are at least this share of those outside (the graph before it destroyed, its pool freed): capturing once
# keeps the pool, so the allocator's churn is part of that change (blind78_recapture: 4 cudaMalloc inside each
# capture, 4 cudaFree before the next, nothing else)
POOL_PAIRING = 0.9


def allocator_within(graph: Graph) -> bool:
    """Whether the block's allocator calls in its steps are its captures' pools (POOL_PAIRING)."""
    if graph.c_step is None:
        return False
    allocator = graph.calls_of("allocator") & (graph.c_step >= 0)
    inside = int((allocator & graph_captures(graph)[0]).sum())
    return bool(inside) and inside >= POOL_PAIRING * int(allocator.sum() - inside)


def capture_summary(block: "StepBlock | None") -> dict | None:
    """The steps' CUDA graph captures as the model's section (model.GraphCaptures); None where the block is not
    trusted or its steps capture none."""
    if block is None or not block.trusted or block.graph.c_step is None:
        return None
    graph = block.graph
    inside, around = graph_captures(graph)
    begins = capture_begins(graph)
    if not begins.any():
        return None
    steps = len(graph.step_first_op)
    per_step = np.bincount(graph.c_step[begins], minlength=steps)[:steps]
    launches = inside & graph.calls_of("launch")
    counted: dict[str, int] = {}
    for i in np.flatnonzero(around & ~begins):
        counted[graph.c_names[i]] = counted.get(graph.c_names[i], 0) + 1
    return {"steps": steps, "steps_with_captures": int((per_step > 0).sum()),
            "captures_per_step": float(np.median(per_step[per_step > 0])),
            "step_ns": float(block.measured.mean()) if len(block.measured) else 0.0,
            "recorded_launches_per_step": float(launches.sum()) / steps,
            "graph_calls_ns_per_step": float((graph.c_end - graph.c_start)[around].sum()) / steps,
            "host_ns_per_step": capture_ns_per_step(graph),
            "calls": tuple(sorted(counted.items(), key=lambda item: -item[1])),
            "allocator_within": allocator_within(graph)}


def beyond_path(graph: Graph, gap: np.ndarray) -> np.ndarray:
    """Of the host compute before a call, the part beyond a typical launch path (the way to the call stays): before
    a code load, the code's build, a compiler run on the host that no CUDA call records (blind56's fixed decoder: 35
    ms before each of cuDNN's loads, with its file reads, against a typical path of 30 us)."""
    return (gap - np.minimum(gap, graph.path_typical)).clip(min=0.0)


def build_ns_per_step(graph: Graph) -> float:
    """The host time a step spends loading code and building it before each load: what removing the builds takes
    off the host at most."""
    return calls_host_ns_per_step(graph, code_builds(graph), beyond_path)


def code_build_summary(block: "StepBlock | None") -> dict | None:
    """The steps' code builds as the model's section (model.CodeBuilds); None where the block is not trusted or
    its steps load no code."""
    if block is None or not block.trusted or block.graph.c_step is None:
        return None
    graph = block.graph
    builds = code_builds(graph)
    if not builds.any():
        return None
    steps = len(graph.step_first_op)
    per_step = np.bincount(graph.c_step[builds], minlength=steps)[:steps]
    durations = (graph.c_end - graph.c_start)[builds]
    counted: dict[str, int] = {}
    for i in np.flatnonzero(builds):
        counted[graph.c_names[i]] = counted.get(graph.c_names[i], 0) + 1
    return {"steps": steps, "steps_with_builds": int((per_step > 0).sum()),
            "builds_per_step": float(np.median(per_step[per_step > 0])) if (per_step > 0).any() else 0.0,
            "step_ns": float(block.measured.mean()) if len(block.measured) else 0.0,
            "load_ns_per_step": float(durations.sum()) / steps,
            "host_ns_per_step": build_ns_per_step(graph),
            "calls": tuple(sorted(counted.items(), key=lambda item: -item[1]))}


def data_summary(block: "StepBlock | None") -> dict | None:
    """The data the host handles in the replayed steps (data_handled) as the model's section (model.HostData); None
    where the block is not trusted or its steps neither upload nor read back data."""
    if block is None or not block.trusted:
        return None
    graph = block.graph
    copies, calls, waits, after = data_handled(graph)
    if not copies.any():
        return None
    steps = len(graph.step_first_op)
    up = copies & uploads(graph)
    reads = copies & ~up
    # the host's own work on the data, beyond a typical launch path and its OS waits (a loader's queue): before each
    # upload's calls, after each read
    gap = _gap_before(graph)
    work = (beyond_path(graph, gap) - gap_os_ns(graph)).clip(min=0.0)
    before = (work - earlier_step_ns(graph, gap)).clip(min=0.0)   # (an earlier step's own end work is not the input's)
    upload_calls = calls_making(graph, up)
    step_of = np.full(len(graph.o_start), -1)
    for step, ops in enumerate(graph.step_first_op):
        step_of[ops] = step
    with_data = np.unique(step_of[copies & (step_of >= 0)])
    return {"steps": steps, "steps_with_data": int(len(with_data)),
            "uploads_per_step": float(up.sum()) / steps,
            "upload_bytes_per_step": float(graph.o_bytes[up].sum()) / steps,
            "reads_per_step": float(reads.sum()) / steps,
            "read_bytes_per_step": float(graph.o_bytes[reads].sum()) / steps,
            "work_before_uploads_ns_per_step": float(before[upload_calls & ~after].sum()) / steps,
            "work_after_reads_ns_per_step": float(work[after].sum()) / steps,
            "copy_ns_per_step": float((graph.o_end - graph.o_start)[copies].sum()) / steps,
            "ns_per_step": data_ns_per_step(graph),
            "step_ns": float(block.measured.mean()) if len(block.measured) else 0.0,
            "pageable_within": pageable_within(graph, copies),
            "syncs_within": syncs_within(graph, calls, waits)}


def _kernel_roles(export: NsysExport, kernels, names: list, in_ranges: np.ndarray | None = None) -> list[str]:
    """Each kernel's role as the window's work split gives it (normalize.work): by name, by the annotated
    range its launch started in (`in_ranges`: PyTorch's optimizer step), and attention's scores kernels (the
    elementwise, cast and copy launches between its GEMMs) by context, so a change to a role changes the
    kernels its findings count."""
    roles = [role_of(*n) for n in names]
    launches = _launch_roles(export.strings, kernels, in_ranges)
    if launches is None:
        return roles
    _scores_context(launches)   # relabels the scores' glue in launches["role"]
    order = np.lexsort((np.asarray(kernels.start), np.asarray(kernels.stream_id), np.asarray(kernels.device_id)))
    by_row = np.empty(len(order), dtype=np.int64)
    by_row[order] = launches["role"]
    return [ROLES[int(r)] for r in by_row]


# ---------------------------------------------------------------- replay


@dataclass
class _HostSide:
    """The replay's host side as a change leaves it: the calls removed, each call's own time and the operation it
    waits for (-1: none), and the host compute before each call on its thread (gap_host) and after another
    thread's call (cross_gap)."""
    removed: np.ndarray
    own: np.ndarray
    target: np.ndarray
    gap_host: np.ndarray
    cross_gap: np.ndarray

    def drop(self, graph: Graph, calls: np.ndarray, way) -> None:
        """Takes the calls out with the host's way to each: `way(graph, gap)` is the part of the compute before a
        call that goes with it (a launch path, the way to a call, a build beyond the typical path)."""
        self.removed |= calls
        self.own = np.where(calls, 0.0, self.own)
        self.target = np.where(calls, -1, self.target)
        self.gap_host = np.where(calls, self.gap_host - way(graph, self.gap_host), self.gap_host)
        self.cross_gap = np.where(calls, self.cross_gap - way(graph, self.cross_gap), self.cross_gap)


def replay(graph: Graph, change: Change | None = None) -> Replay:
    """Re-times the graph in the order its nodes happened, with the change applied."""
    change = change or Change()
    n_calls, n_ops = len(graph.c_start), len(graph.o_start)
    duration = (graph.o_end - graph.o_start).astype(np.float64)
    for _, regex, factor in change.speedups:
        hit = matching_ops(graph, regex)
        duration[hit] = 0.0 if np.isinf(factor) else duration[hit] / factor
    gone = np.zeros(n_ops, bool)
    untuned = change.untuned and graph.tuning is not None and graph.tuning.any
    if untuned:   # the trials' and warm-ups' kernels
        duration[graph.tuning.gone] = 0.0
    for roles, factor in change.roles:
        hit = role_mask(graph, roles)
        if np.isinf(factor):
            gone |= hit
            duration[hit] = 0.0
        else:
            duration[hit] /= factor
    checks = value_checks(graph) if change.unchecked else None
    if checks is not None:   # the checks' kernels and reads: their launch paths go below, as removed kernels' do
        gone |= checks[0]
        duration[checks[0]] = 0.0
    if change.pinned_rate:   # at the pinned rate, but no shorter than a pinned copy takes whatever its size
        pageable = pageable_copies(graph)
        rate = np.array([change.pinned_rate.get(int(k)) or np.inf for k in graph.o_copy_kind[pageable]])
        duration[pageable] = np.minimum(duration[pageable],
                                        np.maximum(graph.o_bytes[pageable] / rate, PINNED_COPY_FLOOR_NS))
    removed = graph.calls_of(change.remove) if change.remove else np.zeros(n_calls, bool)
    gap_host, cross_gap = host_gaps(graph)
    os_gone = np.zeros(n_calls)
    for name in change.remove:   # an OS class (a wait on a queue, a lock, I/O): its time between the calls goes
        waited = gap_os_ns(graph, name)
        if waited.any():
            gap_host, cross_gap = (gap_host - waited).clip(min=0.0), (cross_gap - waited).clip(min=0.0)
            os_gone += waited
    paths = dropped_paths(graph, gone | role_mask(graph, change.fuse) if change.fuse else gone)
    removed |= paths
    if untuned:   # the tuner's calls and the host's time before them; the step's own launches keep their path
        tuned = graph.tuning
        removed |= tuned.removed
        gap_host = np.where(tuned.removed, 0.0, np.where(tuned.kept, np.minimum(gap_host, graph.path_typical),
                                                          gap_host))
        cross_gap = np.where(tuned.removed, 0.0, np.where(tuned.kept, np.minimum(cross_gap, graph.path_typical),
                                                           cross_gap))
    host = _HostSide(removed, np.where(removed, 0.0, graph.c_own), np.where(removed, -1, graph.c_target),
                     gap_host, cross_gap)
    if paths.any():   # the launch paths of the calls that launched only kernels gone: the host work goes too
        host.drop(graph, paths, path_gap)
    if change.untimed and graph.timing is not None and graph.timing.any:   # the timing's calls and their way
        host.drop(graph, graph.timing.removed, call_way)
    if checks is not None:   # the reads' waits and the host's way to each (the read calls' paths went above)
        host.drop(graph, checks[1] & ~paths, call_way)
    if change.unbuilt:   # the code's loads and its build before each
        host.drop(graph, code_builds(graph), beyond_path)
    if change.uncaptured:   # the captures' calls with the host's code between them, the instantiations
        inside, around = graph_captures(graph)
        host.drop(graph, inside, whole_gap)
        host.drop(graph, around, call_way)
    if change.data_on_gpu:   # the uploads, the host's work before each and their own waits
        copies, calls, waits, after = data_handled(graph)
        duration[copies] = 0.0
        # (the host's work is the gap less the OS waits still in it: those of a class removed above are gone already)
        work = host_work if not os_gone.any() else \
            (lambda g, gap: (gap - (gap_os_ns(g) - os_gone).clip(min=0.0)).clip(min=0.0))
        # (input_work, but after a read: the host's work before such a call is on what it read, whichever step)
        host.drop(graph, calls & ~after, lambda g, gap: input_work(g, gap, work))
        host.drop(graph, calls & after, work)
        host.drop(graph, waits, call_way)
        # (the work on what was read, its OS waits kept: the call itself stays)
        host.gap_host = np.where(after, host.gap_host - work(graph, host.gap_host), host.gap_host)
        host.cross_gap = np.where(after, host.cross_gap - work(graph, host.cross_gap), host.cross_gap)
    if change.unannotated and graph.c_annotations is not None:   # each operator range's host time before a call
        trim = graph.c_annotations * change.unannotated
        host.gap_host, host.cross_gap = (host.gap_host - trim).clip(min=0.0), (host.cross_gap - trim).clip(min=0.0)
    own, target, gap_host, cross_gap = host.own, host.target, host.gap_host, host.cross_gap
    latency = graph.o_latency.copy()
    gap_ops = graph.o_gap.copy()
    if change.graph:
        own, gap_host, cross_gap, latency = _as_graph_launch(graph, own, gap_host, cross_gap, latency, ~removed)
    if change.pinned_rate:   # a copy from pinned memory returns once queued: as a kernel launch does
        pageable = pageable_copies(graph)
        launches = graph.calls_of("launch")
        queued = median((graph.c_end - graph.c_start)[launches]) if launches.any() else 0.0
        for i in np.flatnonzero(pageable):
            call = graph.o_call[i]
            if target[call] == i:
                target[call] = -1
            own[call] = min(own[call], queued)
        waits = copy_waits(graph, pageable & uploads(graph))   # and an upload's own wait goes with it
        own = np.where(waits, 0.0, own)
        target = np.where(waits, -1, target)

    # the events in measured order (Graph.measured_events), the loop most of a report's time on a block of many calls
    # (trit52_triton_base1: 1.2M events a replay). A call that waits for no operation ends at its start plus its own
    # time: its end is set with its start and its end event left out (no call starts on its chain before it ends).
    order, links = graph.measured_events
    ends_from = n_calls + n_ops
    order = order[(order < ends_from) | (target[np.maximum(order - ends_from, 0)] >= 0)]
    cs, ce, os_, oe = (a.astype(float).tolist() for a in (graph.c_start, graph.c_end, graph.o_start, graph.o_end))
    c_prev, c_cross, o_prev, o_call, o_implied, tail_l = links
    cb_s, cb_e, ob = [NONE] * n_calls, [OWN] * n_calls, [FIXED] * n_ops
    own_l, target_l = own.tolist(), target.tolist()
    gap_l, cross_l, lat_l, qgap_l, dur_l = gap_host.tolist(), cross_gap.tolist(), latency.tolist(), gap_ops.tolist(), \
        duration.tolist()
    for e in order.tolist():
        if e >= ends_from:   # a call's end: the operation it waited for, or its own time
            i = e - ends_from
            t = cs[i] + own_l[i]
            o = target_l[i]
            if oe[o] + tail_l[i] > t:
                ce[i] = oe[o] + tail_l[i]
                cb_e[i] = WAIT
            else:
                ce[i] = t
        elif e < n_calls:   # a call's start: after its chain's previous call, or the other thread's call
            x, p = c_cross[e], c_prev[e]
            if x >= 0:
                t = ce[x] + cross_l[e]
                if p >= 0 and ce[p] > t:
                    cs[e], cb_s[e] = ce[p], PREV
                else:
                    cs[e], cb_s[e] = t, CROSS
            elif p >= 0:
                cs[e], cb_s[e] = ce[p] + gap_l[e], PREV
            if target_l[e] < 0:
                ce[e] = cs[e] + own_l[e]
        else:   # an operation: after its launch, its stream's previous operation and what it implicitly waited for
            i = e - n_calls
            c = o_call[i]
            if c < 0:
                continue   # launched before the block (or by no call seen): keeps its times
            t, b = cs[c] + lat_l[i], LAUNCH
            p = o_prev[i]
            if p >= 0 and oe[p] + qgap_l[i] > t:
                t, b = oe[p] + qgap_l[i], STREAM
            q = o_implied[i]
            if q >= 0 and oe[q] > t:
                t, b = oe[q], IMPLIED
            os_[i], oe[i], ob[i] = t, t + dur_l[i], b
    os_a = np.array(os_)
    oe_a = np.array(oe)
    starts = np.array([os_a[ops].min() if len(ops) else -1.0 for ops in graph.step_first_op])
    ends = np.array([oe_a[ops].max() if len(ops) else -1.0 for ops in graph.step_first_op])
    removed_os = frozenset(name for name in change.remove
                           if any(cls == name for _, by_class in graph.c_gap_os.values() for cls, _ in by_class))
    return Replay(np.array(cs), np.array(ce), os_a, oe_a, np.array(cb_s), np.array(cb_e), np.array(ob), starts, ends,
                  removed_os)


def matching_ops(graph: Graph, regex: UserPattern) -> np.ndarray:
    """The graph's kernels whose short or demangled name the regex finds (each distinct name searched once)."""
    found: dict[str, bool] = {}

    def hit(name: str) -> bool:
        if name not in found:
            found[name] = regex.search(name) is not None
        return found[name]
    return np.array([names is not None and any(n and hit(n) for n in names) for names in graph.o_names], dtype=bool)


def role_mask(graph: Graph, roles) -> np.ndarray:
    """The graph's kernels of these roles ("*": every kernel; copies and memsets are no kernels), and with
    LOOP the operations of its loops of launches (normalize.launch_loops: kernels, memsets among them), with
    "loop:N" those of its group N; with RECOMPUTE the kernels run again in the backward, with DEVICE_COPY the copy
    kernels and the memcpys inside a GPU's memory, with NARROW_GEMM the tensor-core GEMMs on narrow loads, with
    EMBEDDING_GRAD the fills and sums of an embedding's dense gradient, with FP64 the kernels that compute in float64,
    with TF32 the library matrix products on TF32 inputs."""
    labels = np.array(graph.o_label, dtype=object)
    kernels = np.array([names is not None for names in graph.o_names], dtype=bool)
    if "*" in roles:
        return kernels
    mask = kernels & np.isin(labels, ["gpu:" + r for r in roles])
    if RECOMPUTE in roles and graph.o_recompute is not None:
        mask |= graph.o_recompute
    if REPEATED_BACKWARD in roles and graph.o_repeated is not None:
        mask |= graph.o_repeated
    if NARROW_GEMM in roles:
        mask |= kernels & (labels == "gpu:matmul_tensor") & np.array(
            [names is not None and gemm_loads.narrow(names[1] or names[0]) for names in graph.o_names], dtype=bool)
    if FP64 in roles:
        mask |= np.array([names is not None and precision.fp64(names[1] or names[0]) for names in graph.o_names],
                         dtype=bool)
    if TF32 in roles:
        mask |= np.array([names is not None and precision.tf32(names[1] or names[0]) for names in graph.o_names],
                         dtype=bool)
    if EMBEDDING_GRAD in roles:
        mask |= embedding_grads.gradient_passes(graph)
    if DEVICE_COPY in roles:
        on_device = [kind for kind, label in graph.copy_kinds.items() if label in DEVICE_COPY_KINDS]
        mask |= (kernels & (labels == "gpu:copy")) | ((graph.o_copy_kind >= 0) & np.isin(graph.o_copy_kind, on_device))
    if graph.o_loop is not None:
        for role in roles:
            if role == LOOP:
                mask |= graph.o_loop >= 0
            elif role.startswith(LOOP + ":"):   # one group of loops (launch_loops.group_loops)
                mask |= graph.o_loop == int(role[len(LOOP) + 1:])
    return mask


def host_gaps(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Each call's host compute before it: since its predecessor on the chain ended, and since the other
    thread's call it resumed after ended."""
    gap_host = (graph.c_start - np.where(graph.c_prev >= 0, graph.c_end[np.maximum(graph.c_prev, 0)], 0)).astype(float)
    cross_end = np.where(graph.c_cross >= 0, graph.c_end[np.maximum(graph.c_cross, 0)], 0)
    cross_gap = (graph.c_start - cross_end).astype(float)
    if graph.c_in_poll is not None and graph.c_in_poll.any():   # a poll loop's time between its queries is the wait's
        gap_host, cross_gap = np.where(graph.c_in_poll, 0.0, gap_host), np.where(graph.c_in_poll, 0.0, cross_gap)
    return gap_host, cross_gap


def dropped_paths(graph: Graph, gone: np.ndarray) -> np.ndarray:
    """The calls whose launch path goes with kernels that no longer exist: the calls that launched only such
    kernels, and the helper calls on their way (a kernel not launched costs the host nothing)."""
    n_calls = len(graph.c_start)
    if not gone.any():
        return np.zeros(n_calls, bool)
    launched = graph.o_call >= 0
    kept = np.zeros(n_calls, bool)
    kept[graph.o_call[launched & ~gone]] = True
    dropped = np.zeros(n_calls, bool)
    dropped[graph.o_call[launched & gone]] = True
    dropped &= ~kept
    return with_helpers(graph, dropped)


def dropped_host_ns_per_step(block: "StepBlock", roles) -> float:
    """The host time a step spends on the launch paths of the kernels of these roles (calls that launched
    only such kernels, the helper calls before them, the host compute on their way): what removing those
    kernels takes off the host (the replay's change)."""
    return ops_host_ns_per_step(block, role_mask(block.graph, roles))


def ops_host_ns_per_step(block: "StepBlock", ops: np.ndarray) -> float:
    """dropped_host_ns_per_step for the operations of a mask."""
    return calls_host_ns_per_step(block.graph, dropped_paths(block.graph, ops))


def _gap_before(graph: Graph) -> np.ndarray:
    """Each call's host compute before it (host_gaps: the shorter where it resumed after another thread's call); 0
    for a call that follows none in the block (its gap would run from the clock's zero)."""
    gap_host, cross_gap = host_gaps(graph)
    gap = np.where(graph.c_cross >= 0, np.minimum(gap_host, cross_gap), gap_host)
    return np.where((graph.c_prev >= 0) | (graph.c_cross >= 0), gap, 0.0).clip(min=0.0)


def calls_host_ns_per_step(graph: Graph, calls: np.ndarray, way=None) -> float:
    """The host time a step spends in these calls and on the way to each (their time and `way`'s part of the host
    compute before each: path_gap, a launch path's, unless given): what a change that removes them with their way
    takes off the host."""
    gap = _gap_before(graph)
    own = (graph.c_end - graph.c_start).astype(float)
    total = float((own[calls] + (way or path_gap)(graph, gap)[calls]).sum())
    return total / max(len(graph.step_first_op), 1)


# A read to the host this large carries data the host works on (a batch's outputs, gradients, logits), not a value
# it branches on (a size, a flag: 1-8 bytes, host-sync's and the checks of values')
READ_BACK_MIN_BYTES = 64 << 10


def data_handled(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(operations, calls, waits, after) of the data the host handles for the steps: each copy to the device, and
    each read to the host of READ_BACK_MIN_BYTES or more, that a call in the block made; those calls and the helper
    calls on their way; the syncs that wait for them at once (copy_waits); and the calls after each read (or its
    wait), before which the host works on what it read (an upload's call among them: the host's work between a read
    and an upload, a token sampled from logits, is on what it read)."""
    kinds = [kind for kind, label in graph.copy_kinds.items() if label == READ_BACK_KIND]
    reads = np.isin(graph.o_copy_kind, kinds) & (graph.o_bytes >= READ_BACK_MIN_BYTES) & (graph.o_call >= 0)
    copies = (uploads(graph) & (graph.o_call >= 0)) | reads
    calls = calls_making(graph, copies)
    waits = copy_waits(graph, copies) & ~calls
    read_calls = np.zeros(len(graph.c_start), bool)
    read_calls[graph.o_call[reads]] = True
    read_calls |= copy_waits(graph, reads)
    prev = graph.c_prev
    after = (prev >= 0) & read_calls[np.maximum(prev, 0)] & ~read_calls
    return copies, calls, waits, after


def calls_making(graph: Graph, ops: np.ndarray) -> np.ndarray:
    """Per call, whether it made one of these operations, or is a helper call on such a call's way (PyTorch asks
    cudaStreamIsCapturing before a copy from pageable memory)."""
    calls = np.zeros(len(graph.c_start), bool)
    calls[graph.o_call[ops & (graph.o_call >= 0)]] = True
    return with_helpers(graph, calls)


def with_helpers(graph: Graph, calls: np.ndarray) -> np.ndarray:
    """These calls and the helper calls on each one's way (launch_paths: Graph.c_owner)."""
    owner = graph.c_owner
    return calls if owner is None else calls | ((owner >= 0) & calls[np.maximum(owner, 0)])


def host_work(graph: Graph, gap: np.ndarray) -> np.ndarray:
    """The host's compute before a call, less its OS waits in it (gap_os_ns: a loader's queue, a lock, I/O, which
    host-wait's change removes): after a read, the work on what it read."""
    return (gap - gap_os_ns(graph)).clip(min=0.0)


def input_work(graph: Graph, gap: np.ndarray, work=host_work) -> np.ndarray:
    """host_work before a copy's call, less the part inside an earlier step's host range (earlier_step_ns: that
    step's own work at its end): before an upload, the work that built its input (the host's loop before it, its
    gathers, a tokenizer), which goes where the input is made on the GPU. (Not for a call right after a read: its
    host work is on what was read, a checkpoint written at a step's end among it.) `work`: the host's work in a gap
    (host_work; the replay's, where an OS class's waits are gone already)."""
    return (work(graph, gap) - earlier_step_ns(graph, gap)).clip(min=0.0)


def earlier_step_ns(graph: Graph, gap: np.ndarray) -> np.ndarray:
    """Of the host compute before each call (`gap`, up to the call's start), the part inside the host range of an
    earlier step than the call's: that step's own work after its last call (its logging, its housekeeping), not the
    way to this call. blind80_gccollect: a gc.collect() of 310 ms at each step's end, inside its range, read as the
    work that built the next step's 128 KiB upload. A loader's work between the ranges, or inside the call's own
    step, stays the call's."""
    if graph.step_host is None or graph.c_step is None:
        return np.zeros(len(graph.c_start))
    starts, ends = graph.step_host
    begin = graph.c_start - gap
    held = np.searchsorted(starts, begin, side="right") - 1   # the step whose range holds the gap's start
    inside = np.minimum(ends[np.maximum(held, 0)], graph.c_start) - begin
    return np.where((held >= 0) & (held != graph.c_step) & (inside > 0), inside, 0.0)


def data_ns_per_step(graph: Graph) -> float:
    """The time a step spends on the inputs the host uploads (data_handled): the copies, their calls with the host's
    work before each, and their waits' calls; what making the inputs on the GPU takes away at most."""
    copies, calls, waits, after = data_handled(graph)
    if not copies.any():
        return 0.0
    steps = max(len(graph.step_first_op), 1)
    gpu = float((graph.o_end - graph.o_start)[copies].sum()) / steps
    return calls_host_ns_per_step(graph, calls & ~after, input_work) \
        + calls_host_ns_per_step(graph, calls & after, host_work) + calls_host_ns_per_step(graph, waits, call_way) + gpu \
        + float(host_work(graph, _gap_before(graph))[after & ~calls].sum()) / steps


def pageable_copies(graph: Graph) -> np.ndarray:
    """Copies from or to pageable host memory (staged by the host) that a call in the block made."""
    return graph.o_pageable & (graph.o_call >= 0)


# The data's copies holding this share of the block's pageable copy time or more, pinning the pageable copies is part
# of keeping the data on the GPU: the rest are reads of a few bytes whose staging costs their set-up, which pinning
# does not shorten (blind79_offload: 9,090 of 13,620 pageable copies, 99.6% of their time, beside 4,530 reads of
# a step's results)
PAGEABLE_WITHIN_SHARE = 0.95


def pageable_within(graph: Graph, copies: np.ndarray) -> bool:
    """Whether the data's `copies` hold the block's pageable copies (PAGEABLE_WITHIN_SHARE of their time)."""
    pageable = pageable_copies(graph)
    took = (graph.o_end - graph.o_start)[pageable]
    return bool(took.sum() == 0 or took[copies[pageable]].sum() >= PAGEABLE_WITHIN_SHARE * took.sum())


# The data's copies and their waits holding this share of the block's sync calls' time or more, removing the syncs is
# part of keeping the data on the GPU: the rest are a step's own reads (blind79_fsynclog: a checkpoint's 48 reads back
# a step, 96-98% of the wait, beside the loss read once a step)
SYNCS_WITHIN_SHARE = 0.9


def syncs_within(graph: Graph, calls: np.ndarray, waits: np.ndarray) -> bool:
    """Whether the data's copy `calls` and their `waits` are the block's syncs (SYNCS_WITHIN_SHARE of their time)."""
    syncs = graph.calls_of("sync")
    took = graph.c_own[syncs]
    return bool(took.sum() == 0 or took[(calls | waits)[syncs]].sum() >= SYNCS_WITHIN_SHARE * took.sum())


# The copy kind whose calls pinning frees: a copy to the device from pinned memory returns once queued; a read-back
# (device to host) must still wait for its data before the host reads it, pinned or not
UPLOAD_KIND = "Host-to-Device"
READ_BACK_KIND = "Device-to-Host"   # a copy to the host (the export's label)


def uploads(graph: Graph) -> np.ndarray:
    """Per operation, whether it is a copy to the device (UPLOAD_KIND)."""
    kinds = [kind for kind, label in graph.copy_kinds.items() if label == UPLOAD_KIND]
    return np.isin(graph.o_copy_kind, kinds)


def copy_waits(graph: Graph, copies: np.ndarray) -> np.ndarray:
    """Per call, whether it is a sync that waits for one of these copies at once (the next call on the copy call's
    thread, within COPY_WAIT_GAP_NS): a copy from pinned memory made with `non_blocking=True`, which the pinned change
    stands for, needs no such wait."""
    copy_call = np.zeros(len(graph.c_start), bool)
    copy_call[graph.o_call[copies]] = True
    prev = graph.c_prev
    after = prev >= 0
    after[after] = copy_call[prev[after]]
    after[after] = (graph.c_start[after] - graph.c_end[prev[after]]) <= COPY_WAIT_GAP_NS
    return after & graph.calls_of("sync")


def graphs_per_step(graph: Graph, removed: tuple = ()) -> float:
    """Graph launches a median step of the block becomes as graphs (_as_graph_launch): one, and one more after each
    of its waits that the change keeps (`removed`: host-activity classes the change takes away)."""
    if graph.c_step is None or not len(graph.step_first_op):
        return 1.0
    breaks = graph.calls_of([c for c in WAITING_CLASSES if c not in removed]) & (graph.c_step >= 0)
    steps = len(graph.step_first_op)
    return 1.0 + float(np.median(np.bincount(graph.c_step[breaks], minlength=steps)[:steps]))


def _as_graph_launch(graph: Graph, own, gap_host, cross_gap, latency, kept: np.ndarray):
    """Each step's launches as graph launches: a graph cannot capture a call that waits for the GPU (WAITING_CLASSES),
    so each stretch of the step between such waits is one graph (as torch.compile's CUDA graph trees split a step
    at its syncs). Its enqueue calls cost nothing but each stretch's first launch, and of the host compute before
    each, its launch path's part (path_gap: the framework's dispatch); host work beside the launches (a sleep,
    loading, logging: stretches over the cap) and the calls that wait keep their place. `kept`: per call, whether
    the change keeps it (a wait the change removes splits nothing). A step that waits once a gradient is hundreds
    of graphs of a few kernels each (blind61_anomaly_base1: 336 waits a step; one graph a step replayed 30.5 ms a
    step, against 66.7 ms as measured and 19.1 ms with the waits' cause, anomaly detection, taken away)."""
    own, gap_host, cross_gap, latency = own.copy(), gap_host.copy(), cross_gap.copy(), latency.copy()
    enqueues = graph.calls_of(("launch", "memset", "copy-async", "graph-launch", "event", "event-record", "query")) \
        & (graph.c_target < 0)
    breaks = graph.calls_of(WAITING_CLASSES) & kept
    enqueued = np.zeros(len(own), bool)
    for ops in graph.step_first_op:
        if not len(ops):
            continue
        calls = distinct(graph.o_call[ops][graph.o_call[ops] >= 0])
        if not len(calls):
            continue
        first, last = int(calls.min()), int(calls.max())
        inside = np.arange(first + 1, last + 1)
        stretch = np.cumsum(breaks[inside])   # per call, the waits before it in the step: its stretch
        at = np.flatnonzero(enqueues[inside])
        # the first enqueue call of each stretch after a wait launches that stretch's graph: it stays
        opens = (stretch[at] > 0) & np.r_[True, stretch[at][1:] != stretch[at][:-1]]
        enqueued[inside[at[~opens]]] = True
        mine = np.isin(graph.o_call, calls)
        latency[mine] = graph.o_latency[ops[0]]
    own[enqueued] = 0.0
    gap_host[enqueued] -= path_gap(graph, gap_host)[enqueued]
    cross_gap[enqueued] -= path_gap(graph, cross_gap)[enqueued]
    return own, gap_host, cross_gap, latency


# ---------------------------------------------------------------- the critical path


def critical_path(graph: Graph, result: Replay, step: int) -> list[dict] | None:
    """The critical path of block step `step` (it needs the next step's first operation): walking back from
    the next step's first operation along the dependency that finished last, time summed by class."""
    if step + 1 >= len(graph.step_first_op) or result.step_starts[step] < 0 or result.step_starts[step + 1] < 0:
        return None
    t0 = result.step_starts[step]
    ops = graph.step_first_op[step + 1]
    node, i = 1, int(ops[np.argmin(result.os[ops])])
    t = result.os[i]
    parts: dict[str, float] = {}

    def add(label, a, b):
        a, b = max(a, t0), b
        if b > a:
            parts[label] = parts.get(label, 0.0) + (b - a)

    def add_gap(call, a, b):
        """The host compute [a, b] before a call, by what the measured gap held: its thread's OS calls by their
        class (Graph.c_gap_os), the launch path (host:dispatch, path_gap), the rest host compute. A gap the change
        shortened lost its launch path first (a graph's, a fused loop's, a removed call's way), then compute; a
        class it removed is gone from it. Clipped at the step's start, the parts keep their shares."""
        whole, a = b - a, max(a, t0)
        if b <= a:
            return
        gap = float(graph.c_gap_ns[call]) if graph.c_gap_ns is not None else 0.0
        _, by_class = graph.c_gap_os.get(call, (0.0, ()))
        held = [(cls, ns) for cls, ns in by_class if cls not in result.removed_os]
        gap -= sum(ns for cls, ns in by_class if cls in result.removed_os)
        rest = max(0.0, gap - sum(ns for _, ns in held))
        dispatch = min(float(graph.c_dispatch_ns[call]), rest) if graph.c_dispatch_ns is not None else 0.0
        compute = rest - dispatch
        if gap <= 0:
            held, dispatch, compute = [], 0.0, whole
        elif whole < gap:   # shortened by the change: the launch path goes first, then compute, then the waits
            cut = gap - whole
            taken = min(cut, dispatch)
            dispatch, cut = dispatch - taken, cut - taken
            taken = min(cut, compute)
            compute, cut = compute - taken, cut - taken
            if cut > 0:
                kept = sum(ns for _, ns in held)
                held = [(cls, ns * (kept - cut) / kept) for cls, ns in held] if kept > cut else []
        total = sum(ns for _, ns in held) + dispatch + compute
        scale = (b - a) / total if total > 0 else 0.0
        for label, ns in [("host:" + cls, ns) for cls, ns in held] + [(HOST_DISPATCH, dispatch), (HOST_COMPUTE, compute)]:
            if ns > 0:
                parts[label] = parts.get(label, 0.0) + ns * scale

    guard = 0
    while t > t0 and guard < 10 * graph.events + 10:
        guard += 1
        if node == 1:   # an operation's start
            b = result.o_bind[i]
            if b in (STREAM, IMPLIED):
                p = graph.o_prev[i] if b == STREAM else graph.o_implied[i]
                add(BETWEEN_OPS, result.oe[p], t)   # the stream's gap after the work before it
                add(graph.o_label[p], result.os[p], result.oe[p])
                i, t = p, result.os[p]
            elif b == LAUNCH:
                c = graph.o_call[i]
                add("host:" + graph.c_class[c], result.cs[c], t)
                node, i, t = 2, c, result.cs[c]
            else:   # fixed: launched before the block; the stream's work before it, if queued
                p = graph.o_prev[i]
                if p >= 0 and result.os[i] - result.oe[p] <= IMPLIED_WAIT_NS:
                    add(graph.o_label[p], result.os[p], t)
                    i, t = p, result.os[p]
                else:
                    add("unknown", t0, t)
                    break
        elif node == 2:   # a call's start
            b = result.c_start_bind[i]
            p = graph.c_prev[i] if b == PREV else graph.c_cross[i] if b == CROSS else -1
            if p < 0:
                add(HOST_COMPUTE, t0, t)
                break
            add_gap(i, result.ce[p], t)
            node, i, t = 3, p, result.ce[p]
        else:   # a call's end
            label = "host:" + graph.c_class[i]
            if result.c_end_bind[i] == WAIT:
                o = graph.c_target[i]
                add(label, result.oe[o], t)
                add(graph.o_label[o], result.os[o], result.oe[o])
                node, i, t = 1, o, result.os[o]
            else:
                add(label, result.cs[i], t)
                node, t = 2, result.cs[i]
    total = result.step_starts[step + 1] - t0
    return [{"part": part, "ns": float(ns), "share": float(ns / total) if total else None}
            for part, ns in sorted(parts.items(), key=lambda kv: -kv[1])]


def blocking_launch_share(graph: Graph) -> float | None:
    """Of the block's kernel launch calls (the launch class) that launched a kernel, the share that returned at or after
    that kernel's end: a launch that waits for its kernel, as every one does under CUDA_LAUNCH_BLOCKING=1 or a
    debugger's serialized launches (blind82_launchblock: 515 a step, all of them; an asynchronous loop's return in
    microseconds, long before their kernels end). None without such launches."""
    launched = graph.o_call >= 0
    if not launched.any():
        return None
    calls = graph.o_call[launched]
    launch = graph.calls_of("launch")[calls]
    if not launch.any():
        return None
    returned = graph.c_end[calls[launch]]
    return float(np.mean(returned >= graph.o_end[launched][launch]))


def host_share(path: list[dict] | None) -> float | None:
    if not path:
        return None
    total = sum(p["ns"] for p in path)
    return sum(p["ns"] for p in path if p["part"].startswith("host:")) / total if total else None


# ---------------------------------------------------------------- steps and the self-check


@dataclass
class StepBlock:
    """The consecutive steady steps replayed, and the measured periods they give."""

    graph: Graph
    base: Replay
    measured: np.ndarray          # measured GPU periods of the block's steps (the last one's where it ends the window)
    replayed: np.ndarray          # the no-change replay's
    self_check_error: float       # |replayed - measured| over the block, relative
    median_step: int              # block step of the median period
    with_last: bool = False       # the block ends the window: its last step is timed to its own work's end
    # saving_and_busy's results by change (the changes a check's claim and its finding both price: one replay)
    priced: dict = field(default_factory=dict, repr=False, compare=False)
    best_replay: tuple | None = field(default=None, repr=False, compare=False)   # (key, Replay, saving): _replayed

    @property
    def trusted(self) -> bool:
        return self.self_check_error <= SELF_CHECK_TOLERANCE


def step_block(export: NsysExport, activity: Activity, launching_threads: np.ndarray, host_starts: np.ndarray,
               host_ends: np.ndarray, steady: np.ndarray, step_gpu_starts: np.ndarray, step_pid: int | None,
               around_median: int | None = None, step_gpu_ends: np.ndarray | None = None,
               threads: bool = True) -> StepBlock | None:
    """Replays consecutive steady steps: all of them where the window is small enough, else the block
    around the median step (`around_median` steps on each side when given). With `step_gpu_ends` (the
    steps' periods' ends, normalize.steps), a block that ends the window times its last step too."""
    if len(steady) < 3:
        return None
    periods = np.diff(step_gpu_starts)
    mid = int(np.argsort(periods, kind="stable")[len(periods) // 2])
    if around_median is not None:
        lo, hi = max(0, mid - around_median), min(len(steady) - 1, mid + around_median + 1)
    else:
        lo, hi = 0, len(steady) - 1
        calls = len(activity.calls) + len(activity.kernels) + len(activity.copies)
        if calls > REPLAY_EVENTS_AT_MOST:
            half = max(2, int(len(steady) * REPLAY_EVENTS_AT_MOST / calls / 2))
            lo, hi = max(0, mid - half), min(len(steady) - 1, mid + half)
    picked = steady[lo:hi + 1]
    if np.any(np.diff(picked) != 1):   # steps not consecutive (a window of the user's): the first run
        return None
    graph = build_graph(export, activity, launching_threads, host_starts[picked], host_ends[picked], step_pid,
                        np.arange(lo, hi + 1), threads)
    if graph is None:
        return None
    base = replay(graph)
    with_last = step_gpu_ends is not None and hi == len(steady) - 1
    measured = (step_gpu_ends - step_gpu_starts)[lo:hi + 1] if with_last else periods[lo:hi]
    replayed = base.periods(with_last)
    ok = base.valid(with_last)
    if not ok.any():
        return None
    error = abs(float(replayed[ok].sum() - measured[ok].sum())) / max(float(measured[ok].sum()), 1.0)
    return StepBlock(graph, base, measured, replayed, error, mid - lo, with_last)


def _step_pid(steps) -> int | None:
    """The process whose thread holds the step ranges (its calls are one chain), None where not known."""
    return steps.global_tid >> PID_SHIFT if steps.global_tid is not None and steps.global_tid >= 0 else None


def median_step_block(export: NsysExport, steps, activity: Activity, launching_threads: np.ndarray) -> StepBlock | None:
    """The steps around a median step replayed (the report's critical path and the pricing of its findings);
    None without steps on the GPU's clock or where they could not be replayed."""
    if steps is None or steps.clock != "gpu" or len(steps.steady) < 3:
        return None
    pid = _step_pid(steps)
    # each process's calls as one chain (no read of the call table's threads: a report's time matters;
    # on the real loops the paths are those of the threads' chains)
    return step_block(export, activity, launching_threads, steps.host_starts, steps.host_ends, steps.steady,
                      steps.starts, pid, around_median=3, threads=False)


# The block around the median step whose mean period lies this far from the window's mean step (relative) is not a
# sample of the window's steps: a cost that comes in spikes or grows over the run is in or out of its 7 steps by
# chance. Findings are then priced on the window's steps (as many as REPLAY_EVENTS_AT_MOST allows): copy56_catlog's
# allocator calls take 0.3 ms in early steps and up to 137 ms in late ones; its median block, one spike among 7
# steps of a mean 24.2 ms against the window's 32.4, priced their removal at 8.54 ms a step, the window's 93 steps
# replayed at 16.04, and the fix (no allocation in the loop, no growing copies either) saved 19.28.
REPRESENTATIVE = 0.10


def pricing_block(export: NsysExport, steps, activity: Activity, launching_threads: np.ndarray,
                  median_block: StepBlock | None, mean_ns: float | None) -> StepBlock | None:
    """The steps that price findings: the median block where its mean period is within REPRESENTATIVE of the
    window's mean step (`mean_ns`), else the window's steps replayed (the block around the median that
    REPLAY_EVENTS_AT_MOST allows), where that block reproduces them; the median block otherwise."""
    if median_block is None or not mean_ns or len(median_block.measured) >= len(steps.steady) - 1:
        return median_block
    if abs(float(median_block.measured.mean()) / float(mean_ns) - 1.0) <= REPRESENTATIVE:
        return median_block
    pid = _step_pid(steps)
    wide = step_block(export, activity, launching_threads, steps.host_starts, steps.host_ends, steps.steady,
                      steps.starts, pid, step_gpu_ends=steps.ends, threads=False)
    return wide if wide is not None and wide.trusted and len(wide.measured) > len(median_block.measured) \
        else median_block


def block_critical_path(block: StepBlock | None) -> list[dict] | None:
    """For the timeline: the critical path of a median step, [{part, ns, share}] adding up to the step;
    None where the replay of the steps around it misses the measured ones by more than the self-check
    allows (the path would then describe another program)."""
    if block is None or not block.trusted:
        return None
    path = critical_path(block.graph, block.base, block.median_step)
    return [{"part": p["part"], "ns": int(round(p["ns"])), "share": float(p["share"])} for p in path] if path else None


def block_path_after(block: StepBlock | None, change: Change) -> tuple[list[dict], float] | None:
    """The critical path of a median step of the block replayed with the change, [{part, ns, share}] adding up to
    that step, and that step's unchanged replayed period: what limits the steps once the change is made (fixing one
    bottleneck shows the next). The report's median step (its critical path's), where the change does not lengthen
    it; else the step nearest the changed periods' median: the median step may turn into another kind of step (fuse55_mobilenet: the step that drains the queue at the sync
    read 44.7 ms after against 35.8 before, a change that saves 3 ms). None where the block is not trusted or no
    step compares (the last step, whose period needs the next)."""
    if block is None or not block.trusted:
        return None
    changed = _replayed(block, change)
    periods, before = changed.periods(), block.base.periods()
    ok = np.flatnonzero(block.base.valid() & changed.valid())
    if not len(ok):
        return None
    step = block.median_step   # the report's critical path's step, where the change shortens it
    if step not in ok or periods[step] > before[step]:
        step = int(ok[np.argmin(np.abs(periods[ok] - float(np.median(periods[ok]))))])
    path = critical_path(block.graph, changed, step)
    if not path:
        return None
    return ([{"part": p["part"], "ns": int(round(p["ns"])), "share": float(p["share"])} for p in path],
            float(before[step]))


def saving_per_step(block: StepBlock, change: Change) -> float | None:
    """What the change saves of a step: the mean over the block's steps of the unchanged replay's period
    less the changed replay's (what the model misses cancels); None where no period compares."""
    return saving_and_busy(block, change)[0]


def saving_and_busy(block: StepBlock, change: Change) -> tuple[float | None, float | None, float | None]:
    """saving_per_step, and the GPU's busy share of the steps before and after the change (the time of the
    operations the steps launched over their periods): the replay keeps the kernels' measured durations,
    which a GPU kept busy may not hold (its clock under sustained load)."""
    return _priced(block, change)[:3]


def saving_in_window(block: StepBlock, change: Change, steps: int, idle_ns: float | None) -> float | None:
    """What the change saves over a window of `steps` steps: the block's saving a step times the steps, never more
    than the window's GPU idle (`idle_ns`) and the GPU time the change takes away from its steps: the GPU's work
    left is a floor no change of the host's goes under. The block is a sample of the steps; where they do not all
    idle alike, its saving a step applied to all of them could pass that floor (blind74_masksync_base1: its block
    in the slower of two runs, a graph's 44.5 ms a step over 99 steps, 4.41 s, where the window idled 4.36 s, a
    user read). None where no period compares."""
    saving = _priced(block, change)[0]
    return None if saving is None else min(max(0.0, saving) * steps, saving_bound(block, change, steps, idle_ns))


def saving_bound(block: StepBlock, change: Change, steps: int, idle_ns: float | None) -> float:
    """The most the change can save over `steps` steps of a window that idled `idle_ns` (None: not known, no bound):
    that idle and the GPU time the change takes away (its operations' time as measured less as changed, the block's
    mean a step; nothing where it moves only the host's work: a graph, calls gone)."""
    return idle_ns_and_taken(idle_ns, _priced(block, change)[3] or 0.0, steps)


def idle_ns_and_taken(idle_ns: float | None, taken_per_step: float, steps: int) -> float:
    """saving_bound's figure from the GPU time taken away a step (inf where the idle is not known)."""
    return math.inf if idle_ns is None else max(0.0, idle_ns) + max(0.0, taken_per_step) * steps


def _priced(block: StepBlock, change: Change) -> tuple:
    """(saving a step, busy share before, after, GPU time taken away a step), kept per change where the change is
    plain values (no regex): a replay is a pass over every call and operation of the block."""
    key = _change_key(change)
    if key is not None and key in block.priced:
        return block.priced[key]
    result = _saving_and_busy(block, change)
    if key is not None:
        block.priced[key] = result
    return result


def _change_key(change: Change) -> tuple | None:
    """A change as a key of plain values (None with a regex: those are not kept)."""
    pinned = tuple(sorted(change.pinned_rate.items())) if change.pinned_rate is not None else None
    return (change.remove, change.graph, change.roles, change.fuse, change.untuned, change.untimed, change.unbuilt,
            change.unchecked, pinned, change.data_on_gpu, change.uncaptured, change.unannotated) \
        if not change.speedups else None


def _replayed(block: StepBlock, change: Change) -> Replay:
    """The block replayed with the change; the one that saved most so far is kept (one: a replay holds arrays of
    every call and operation), which the finding that saves most asks again for what limits the steps after it
    (block_path_after) without a second pass."""
    key = _change_key(change)
    if key is not None and block.best_replay is not None and block.best_replay[0] == key:
        return block.best_replay[1]
    return replay(block.graph, change)


def _saving_and_busy(block: StepBlock, change: Change) -> tuple:
    changed = _replayed(block, change)
    ok = block.base.valid(block.with_last) & changed.valid(block.with_last)
    if not ok.any():
        return None, None, None, None
    after = changed.periods(block.with_last)[ok]
    saving = float((block.replayed[ok] - after).mean())
    key = _change_key(change)
    if key is not None and (block.best_replay is None or saving > block.best_replay[2]):
        block.best_replay = (key, changed, saving)

    def busy(ns: float, periods) -> float | None:
        total = float(np.sum(periods))
        return min(ns / total, 1.0) if total > 0 else None

    before_ns, after_ns = gpu_work(block, block.base, ok), gpu_work(block, changed, ok)
    return (saving, busy(before_ns, block.replayed[ok]), busy(after_ns, after),
            max(0.0, before_ns - after_ns) / int(ok.sum()))


def gpu_work(block: StepBlock, result: Replay, ok: np.ndarray) -> float:
    """The time of the operations the block's steps (those `ok` marks) launched, in a replay."""
    return sum(float((result.oe - result.os)[block.graph.step_first_op[s]].sum()) for s in np.flatnonzero(ok))


def kernel_ns_per_step(block: StepBlock, roles) -> float:
    """The block's time in kernels of these roles, per step."""
    return ops_ns_per_step(block, role_mask(block.graph, roles))


def ops_ns_per_step(block: StepBlock, ops: np.ndarray) -> float:
    """The block's GPU time in the operations of a mask that its calls launched, per step."""
    graph = block.graph
    mine = ops & (graph.o_call >= 0)
    return float((graph.o_end - graph.o_start)[mine].sum()) / max(len(graph.step_first_op), 1)


def pageable_ns_per_step(block: StepBlock) -> float:
    """The block's time in copies from or to pageable host memory, per step, with the host's time in the uploads'
    calls and in the waits right after them (copy_waits): what moving them to pinned memory, uploaded without a
    wait, can take away at most (a copy at the pinned rate still takes some of it)."""
    graph = block.graph
    mine = pageable_copies(graph)
    up = mine & uploads(graph)   # (a read-back's call waits for its data, pinned or not: only its copy changes)
    calls = copy_waits(graph, up)
    calls[graph.o_call[up]] = True
    host = float((graph.c_end - graph.c_start)[calls].sum())
    return (float((graph.o_end - graph.o_start)[mine].sum()) + host) / max(len(graph.step_first_op), 1)


def tuning_ns_per_step(block: StepBlock) -> float:
    """The block's time in tuning stretches (normalize.tuning), per step: what removing the trials takes away at
    most (the step's own launches inside them stay)."""
    tuned = block.graph.tuning
    return float(tuned.stretch_ns.sum()) / max(len(block.graph.step_first_op), 1) if tuned is not None else 0.0


def timing_ns_per_step(graph: Graph) -> float:
    """The host time a step spends in the timing code's calls and on the way to each (call_way): what removing
    it takes away at most, beside the GPU idle time its syncs leave (the replay's)."""
    timing = graph.timing
    if timing is None or not timing.any:
        return 0.0
    return calls_host_ns_per_step(graph, timing.removed, call_way)


def class_ns_per_step(block: StepBlock, classes) -> float:
    """The block's host time in calls of these host-activity classes, per step: an OS class's, its time between the
    CUDA calls (gap_os_ns); the class sync's, its poll loops' too."""
    graph = block.graph
    mine = graph.calls_of(classes)
    waited = sum(float(gap_os_ns(graph, name).sum()) for name in classes)
    if "sync" in classes and graph.c_in_poll is not None and graph.c_in_poll.any():
        # a poll loop's wait: its queries after the first and the host's time between them (the ready answer,
        # a sync, is counted with the class's calls)
        inside = graph.c_in_poll
        waited += float((graph.c_end - graph.c_start)[inside & ~graph.c_poll_end].sum())
        waited += float(graph.c_gap_ns[inside].sum()) if graph.c_gap_ns is not None else 0.0
    return (float((graph.c_end - graph.c_start)[mine].sum()) + waited) / max(len(graph.step_first_op), 1)


_SPEEDUP = re.compile(r"^regex:(?P<pattern>.+)=(?P<factor>[^=]+)$")


# A factor under 1 is a slowdown. Past a million times slower a kernel of a few µs outlasts the run by far, and at
# 1e-300 the replayed times overflow float64 (an infinite step, a nan prediction): refused, as 0 and negatives are.
MIN_SPEEDUP_FACTOR = 1e-6


def parse_speedup(text: str) -> tuple[str, UserPattern, float]:
    """`regex:PATTERN=FACTOR` -> (text, compiled, factor); ValueError with the reason."""
    match = _SPEEDUP.match(text)
    if not match:
        raise ValueError(f"{text!r}: expected regex:PATTERN=FACTOR")
    try:
        factor = float(match["factor"])
    except ValueError:
        raise ValueError(f"{text!r}: the factor {match['factor']!r} is not a number") from None
    if not np.isfinite(factor) or factor <= 0:
        raise ValueError(f"{text!r}: the factor must be a finite number above 0")
    if factor < MIN_SPEEDUP_FACTOR:
        raise ValueError(f"{text!r}: the factor must be {MIN_SPEEDUP_FACTOR:g} or more (at most a million times slower)")
    try:
        regex = UserPattern(match["pattern"], "--speedup")
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    return text, regex, factor
