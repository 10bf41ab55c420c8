"""Timed trials in the loop: the host timing GPU work with CUDA events and waiting for each result, many times a
step. That is what an autotuner does for every input shape it has not seen: cuDNN's benchmark mode
(`torch.backends.cudnn.benchmark`), Triton's autotuner, a GEMM tuner. Each candidate is launched once to warm up,
then timed between two event records and waited for; between candidates the library builds its next plan
(heuristics, run-time compilation), all on the host while the GPU idles.

Read on the block of steps around the median step (normalize.critical_path), one chain of calls per process:
- a trial: two event records (host-activity class `event-record`) with at least one launch between them and
  nothing else but launches, the calls on their way (class `query`) and other event calls, then at once a host
  sync (class `sync`): the wait for that timing (Triton's repetitions of one candidate, timed together: its last);
- a warm-up: the launches just before a sync that comes right before a trial, or just before an event record that
  opens a timing, whose kernels that timing launches again (a candidate run once, then timed);
- a tuner's trials are warmed up (at least MIN_WARMED of them): timing code around the program's own layers times
  them once, with nothing before, and is no tuner. Such trials are the program's timing code (TimingCode): its
  calls are the records and the sync with the event calls next to them; removing it keeps the work it timed;
- a step's tuning stretch: from its first trial (its warm-up) to its last trial's sync. Inside it, the launches
  that are neither trials, warm-ups nor between two records (a timing's repetitions) are the step's own work (the
  chosen kernel, the layers between); everything else is the tuner's: its calls, the trials' kernels and the
  host's time between the calls.

Measured on blind_cudnnbench (fixtures/real, an audio CNN with a new input length each step): 200 trials a step
of the 21 steady steps, each step's stretch from 3-5 ms after its start to 3-4 ms before its end; the twin
without benchmark mode runs the step in 27 ms against 608. Triton's autotuner (trit52_triton_base1): 12 trials a
step (2 of each of 6 configs: its estimate and its last repetition), 1,650 repetitions of each config between
records, 95% of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RECORD_CLASS = "event-record"
EVENT_CLASS = "event"   # the other event calls: creation, queries (elapsed_time's), destruction
SYNC_CLASS = "sync"
# Calls that may lie between a trial's records beside its launches: what a launch calls on its way (PyTorch's
# cuKernelGetName; a memset is a launch here) and the other event calls (PyTorch creates an event at its first
# record: cudaEventCreateWithFlags between a trial's launch and its second record, trit52)
BETWEEN_CLASSES = frozenset({"query", "event"})
LAUNCH_CLASSES = frozenset({"launch", "memset", "graph-launch", "copy-async"})
NO_NAMES: frozenset = frozenset()   # a call that launched nothing
# codes of a call
OTHER, RECORD, SYNC, LAUNCH, BETWEEN = range(5)


@dataclass
class Tuning:
    """The timed trials of the block's steps and what the tuner's change removes."""

    trials: np.ndarray         # per block step: timed trials
    stretch_ns: np.ndarray     # per block step: its tuning stretch, first call's start to last call's end (0: none)
    removed: np.ndarray        # per call: the tuner's (its time and the host's before it go with the change)
    kept: np.ndarray           # per call: a launch of the step's own work inside a stretch (the host's time
    #                            before it shrinks to the launch path's typical)
    gone: np.ndarray           # per operation: launched by a tuner's call (trials, warm-ups)

    @property
    def steps_with_trials(self) -> int:
        return int((self.trials > 0).sum())

    @property
    def any(self) -> bool:
        return bool(self.removed.any())


@dataclass
class TimingCode:
    """The program's own timing code in the block's steps: trials with nothing warmed up (an event pair around
    its work, waited for), and what removing it takes away."""

    timings: np.ndarray        # per block step: timed trials
    removed: np.ndarray        # per call: the timing's (its records, its sync, the event calls next to them)

    @property
    def any(self) -> bool:
        return bool(self.removed.any())


def codes(classes, launched: np.ndarray) -> np.ndarray:
    """Each call's code: RECORD, SYNC, LAUNCH (a call that launched GPU work, or of a launch class), BETWEEN
    (on a launch's way) or OTHER."""
    code_of = {RECORD_CLASS: RECORD, SYNC_CLASS: SYNC, **{c: LAUNCH for c in LAUNCH_CLASSES},
               **{c: BETWEEN for c in BETWEEN_CLASSES}}
    out = np.fromiter((code_of.get(c, OTHER) for c in classes), np.int8, len(classes))
    out[launched & (out != RECORD) & (out != SYNC)] = LAUNCH
    return out


def _record_pairs(code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Consecutive event records of one chain (first, second, as indices) and whether nothing but launches and
    the calls on their way lie between them."""
    records = np.flatnonzero(code == RECORD)
    a, b = records[:-1], records[1:]
    others = np.concatenate(([0], np.cumsum((code != LAUNCH) & (code != BETWEEN))))
    return a, b, others[b] - others[a + 1] == 0


def trials(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The timed trials of one chain of calls (in order): each one's first record and the sync that waits for
    it, as indices."""
    a, b, clean = _record_pairs(code)
    if not len(a):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    launches = np.concatenate(([0], np.cumsum(code == LAUNCH)))
    # between the two records: a launch at least, nothing but launches and the calls on their way
    paired = (launches[b] - launches[a + 1] > 0) & clean
    # right after the second record (helpers aside), a sync: the host waits for this one timing. Records around
    # every iteration of a loop that syncs once at its end (CuPy's stream order, a benchmark's repetitions) are
    # no trials but the last: power_iteration (fixtures/public) records 10 events a step, then syncs twice
    stop = np.flatnonzero(code != BETWEEN)
    at = np.searchsorted(stop, b + 1)
    ok = at < len(stop)
    next_stop = np.where(ok, stop[np.minimum(at, len(stop) - 1)], -1)
    timed = paired & ok & (code[np.maximum(next_stop, 0)] == SYNC)
    return a[timed], next_stop[timed]


def _bracketed(code: np.ndarray) -> np.ndarray:
    """Per call of one chain: a launch between two consecutive event records with nothing but launches and the
    calls on their way between them (a timing's repetitions: Triton's, a pair recorded around each)."""
    a, b, clean = _record_pairs(code)
    if not len(a):
        return np.zeros(len(code), bool)
    edges = np.zeros(len(code) + 1, np.int64)
    np.add.at(edges, a[clean] + 1, 1)
    np.add.at(edges, b[clean], -1)
    return (np.cumsum(edges)[:len(code)] > 0) & (code == LAUNCH)


def find(classes, launched: np.ndarray, call_step: np.ndarray, c_start: np.ndarray, c_end: np.ndarray,
         chain: np.ndarray, op_call: np.ndarray, op_names: list, steps: int) -> tuple[Tuning, TimingCode]:
    """The block's timed trials, step by step: the calls and operations that are a tuner's where they are warmed
    up, else the calls that are the program's own timing code (see the module's docstring). `chain`: each call's
    chain (a process); calls in the order they began; `op_call`: each operation's launching call (-1: none),
    `op_names` its kernel's name (None: no kernel); `call_step`: each call's block step (-1: between the steps'
    host ranges)."""
    n = len(c_start)
    empty = Tuning(np.zeros(steps, np.int64), np.zeros(steps), np.zeros(n, bool), np.zeros(n, bool),
                   np.zeros(len(op_call), bool))
    no_timing = TimingCode(np.zeros(steps, np.int64), np.zeros(n, bool))
    if list(classes).count(RECORD_CLASS) < 2:   # no trial without two records (most programs: none)
        return empty, no_timing
    code = codes(classes, launched)
    names_of: dict[int, set] = {}
    for op, call in enumerate(op_call.tolist()):
        if call >= 0:
            names_of.setdefault(call, set()).add(op_names[op])
    first_all, sync_all, warm, timed = [], [], np.zeros(n, bool), np.zeros(n, bool)
    for c in np.unique(chain):
        mine = np.flatnonzero(chain == c)
        first, sync = trials(code[mine])
        if not len(first):
            continue
        first_all.append(mine[first])
        sync_all.append(mine[sync])
        timed[mine[_bracketed(code[mine])]] = True
        warm[mine[_warm_ups(code[mine], first, [names_of.get(i, NO_NAMES) for i in mine.tolist()])]] = True
    if not first_all:
        return empty, no_timing
    first, sync = np.concatenate(first_all), np.concatenate(sync_all)
    # a tuner warms each candidate up before it times it; timing code times the program's own work, once
    warmed = np.isin(first, np.flatnonzero(warm) + 1) | np.isin(first, _after_warm_sync(code, warm))
    if warmed.sum() < MIN_WARMED * len(first):
        return empty, _timing_code(code, classes, first, sync, chain, call_step, steps)
    removed, kept = np.zeros(n, bool), np.zeros(n, bool)
    per_step, stretch = np.zeros(steps, np.int64), np.zeros(steps, np.float64)
    in_trial = np.zeros(n + 1, np.int64)   # inside a trial: from its first record to its sync
    np.add.at(in_trial, first, 1)
    np.add.at(in_trial, sync + 1, -1)
    tuner = (np.cumsum(in_trial)[:n] > 0) | timed | warm
    for s in range(steps):
        mine = call_step[first] == s
        if not mine.any():
            continue
        per_step[s] = int(mine.sum())
        lo, hi = int(first[mine].min()), int(sync[mine].max())
        before = np.flatnonzero(warm & (call_step == s) & (np.arange(n) < lo))
        if len(before):   # the first trial's warm-up, just before it
            lo = int(before.max())
            while lo > 0 and (warm[lo - 1] or code[lo - 1] == BETWEEN):
                lo -= 1
            while not warm[lo]:   # (the helpers before its first launch are the step's)
                lo += 1
        span = np.zeros(n, bool)
        span[lo:hi + 1] = True
        span &= chain == chain[first[mine][0]]
        own_work = span & (code == LAUNCH) & ~tuner
        for i in np.flatnonzero(own_work).tolist():   # and the calls on its way
            while i > lo and code[i - 1] == BETWEEN and span[i - 1]:
                i -= 1
                own_work[i] = True
        kept |= own_work
        removed |= span & ~own_work
        stretch[s] = float(c_end[hi] - c_start[lo])
    gone = (op_call >= 0) & removed[np.maximum(op_call, 0)]
    return Tuning(per_step, stretch, removed, kept, gone), no_timing


def _timing_code(code: np.ndarray, classes, first: np.ndarray, sync: np.ndarray, chain: np.ndarray,
                 call_step: np.ndarray, steps: int) -> TimingCode:
    """The timing code's calls: each trial's two records with the event calls and helpers just before each (the
    event PyTorch creates at its first record, its capture check before a record), its sync, and the event calls
    right after that sync (elapsed_time's queries, the events' destruction). The program's launches between the
    records, and the helpers on their way, are its own work and stay."""
    n = len(code)
    removed = np.zeros(n, bool)
    event = np.fromiter((c == EVENT_CLASS for c in classes), bool, n)
    before = code == BETWEEN   # on a record's way: event calls and helpers; after a sync: event calls only

    def take_run(i: int, step: int, side: np.ndarray) -> None:
        j = i + step
        while 0 <= j < n and side[j] and chain[j] == chain[i]:
            removed[j] = True
            j += step
    for a, b in zip(first.tolist(), sync.tolist()):
        records = [k for k in range(a, b) if code[k] == RECORD]
        for k in (records[0], records[-1]):
            removed[k] = True
            take_run(k, -1, before)
        removed[b] = True
        take_run(b, +1, event)
    per_step = np.bincount(call_step[first][call_step[first] >= 0], minlength=steps)[:steps]
    return TimingCode(per_step.astype(np.int64), removed)


# Of the trials, at least this share warmed up first (a candidate run once, then timed): a tuner's. Timing code
# around the program's own layers warms nothing up (trit52_timed_base: 8 trials a step, none warmed).
MIN_WARMED = 0.5


def _after_warm_sync(code: np.ndarray, warm: np.ndarray) -> np.ndarray:
    """The calls that follow a warm-up's sync, helpers aside: the first records of warmed trials."""
    syncs = np.flatnonzero((code == SYNC)[1:] & warm[:-1]) + 1
    out = []
    for k in syncs.tolist():
        j = k + 1
        while j < len(code) and code[j] == BETWEEN:
            j += 1
        out.append(j)
    return np.array(out, np.int64)


def _warm_ups(code: np.ndarray, first: np.ndarray, names: list) -> np.ndarray:
    """Per call of one chain: a launch run once before the same kernels are timed. The launches (and the calls on
    their way) just before a sync that comes, helpers aside, right before a trial, or just before an event
    record that opens a timing; of them, those whose kernels the timing that follows launches (the program's own
    launches before a tuner's run with it: the layer before, the chosen kernel). A timing runs from its first call
    to the first sync after it (a trial's sync is that one: no sync lies between its records, `trials`)."""
    n = len(code)
    warm = np.zeros(n, bool)
    trials_from = set(first.tolist())
    kinds = code.tolist()
    before = []   # (the last call before a timing, the timing's first call)
    for k in np.flatnonzero((code == SYNC) | (code == RECORD)).tolist():
        j = k + 1
        if kinds[k] == SYNC:
            while j < n and kinds[j] == BETWEEN:
                j += 1
            if j in trials_from:
                before.append((k, j))
        elif k > 0 and kinds[k - 1] in (LAUNCH, BETWEEN):
            before.append((k, k))
    masks = _name_masks(names) if before else []
    timed = _names_up_to_sync(kinds, masks, [start for _, start in before])
    for k, start in before:
        if start not in timed:   # no sync after it: no timing
            continue
        timed_names = timed[start] & ~NONE_BIT
        i = k - 1
        while i >= 0 and kinds[i] in (LAUNCH, BETWEEN):
            if kinds[i] == LAUNCH and masks[i] and not masks[i] & ~timed_names:
                warm[i] = True
            i -= 1
    return warm


NONE_BIT = 1   # None's bit in _name_masks: an operation without a kernel


def _name_masks(names: list) -> list:
    """Each call's set of kernel names as the bits of one integer (a bit per distinct name of this chain; None has
    NONE_BIT), so that a timing's names are unions of integers, not of sets."""
    bit_of: dict = {None: NONE_BIT}
    masks = []
    for these in names:
        mask = 0
        for name in these:
            bit = bit_of.get(name)
            if bit is None:
                bit = bit_of[name] = 1 << len(bit_of)
            mask |= bit
        masks.append(mask)
    return masks


def _names_up_to_sync(kinds: list, masks: list, starts: list) -> dict:
    """For each start call, the union of the names launched from it up to the first sync after it (starts with no
    sync after them left out), in one pass from the end (a Triton timing spans 1,650 repetitions and a step holds
    hundreds of timings: the union taken per timing was quadratic, 144 s of trit52_triton_base1's report)."""
    wanted = set(starts)
    out, union, synced = {}, 0, False
    for i in range(len(kinds) - 1, min(wanted, default=len(kinds)) - 1, -1):
        if kinds[i] == SYNC:
            union, synced = masks[i], True
        else:
            union |= masks[i]
        if synced and i in wanted:
            out[i] = union
    return out


def summary(block) -> dict | None:
    """The timed trials of a replayed block (normalize.critical_path.StepBlock) as the model's section
    (model.TimedTrials); None where the block is not trusted or holds no trial."""
    if block is None or not block.trusted or block.graph.tuning is None or not block.graph.tuning.any:
        return None
    graph, tuned = block.graph, block.graph.tuning
    steps = len(tuned.trials)
    with_trials = tuned.trials[tuned.trials > 0]
    durations = (graph.o_end - graph.o_start).astype(np.float64)
    launched = float(durations[graph.o_call >= 0].sum())
    mine, all_sync = _sync_ns(graph, tuned.removed)
    return {"steps": steps, "steps_with_trials": int(len(with_trials)),
            "trials_per_step": float(np.median(with_trials)),
            "stretch_ns_per_step": float(tuned.stretch_ns.sum() / steps),
            "step_ns": float(block.measured.mean()) if len(block.measured) else 0.0,
            "kernel_ns_per_step": float(durations[tuned.gone].sum() / steps),
            "kernel_share": float(durations[tuned.gone].sum() / launched) if launched else 0.0,
            "calls_per_step": float(tuned.removed.sum() / steps),
            "own_launches_per_step": float(tuned.kept.sum() / steps),
            "sync_share": mine / all_sync if all_sync else 0.0}


def timing_summary(block, host_ns_per_step: float) -> dict | None:
    """The program's timing code in a replayed block (normalize.critical_path.StepBlock) as the model's section
    (model.TimingCode); None where the block is not trusted or holds none. `host_ns_per_step`: its calls' time
    and the host's on their way (critical_path.timing_ns_per_step)."""
    if block is None or not block.trusted or block.graph.timing is None or not block.graph.timing.any:
        return None
    graph, timing = block.graph, block.graph.timing
    steps = len(timing.timings)
    with_timings = timing.timings[timing.timings > 0]
    mine, all_sync = _sync_ns(graph, timing.removed)
    return {"steps": steps, "steps_with_timings": int(len(with_timings)),
            "timings_per_step": float(np.median(with_timings)),
            "step_ns": float(block.measured.mean()) if len(block.measured) else 0.0,
            "calls_per_step": float(timing.removed.sum() / steps),
            "host_ns_per_step": float(host_ns_per_step),
            "sync_ns_per_step": mine / steps,
            "sync_share": mine / all_sync if all_sync else 0.0}


def _sync_ns(graph, calls: np.ndarray) -> tuple[float, float]:
    """The block's host time in sync calls among `calls` (a mask of calls), and in all of them."""
    syncs = graph.calls_of(SYNC_CLASS)
    sync_ns = (graph.c_end - graph.c_start)[syncs]
    return float(sync_ns[calls[syncs]].sum()), float(sync_ns.sum())
