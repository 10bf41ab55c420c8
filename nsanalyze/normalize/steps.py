"""The iterations of a program: the NVTX range that repeats like a training or generation step.

Real runs start with seconds of process start-up and a few slow warm-up steps; what the user wants
judged is the steady state. Steps are the instances of one NVTX range name, numbers normalized
(`step 12` -> `step N`), on the thread that pushed most of them, one after another (not nested in
each other). Among such names the one with a step-like word and the most instances wins.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from nsanalyze.normalize.activity import PID_SHIFT, median, percentile
from nsanalyze.normalize.checked_rows import VALID_NVTX
from nsanalyze.numbers import ms_text
from nsanalyze.read.nsys import NsysExport

MIN_STEPS = 3
# Words that mark a range as one iteration of a loop.
STEP_WORDS = {"step", "steps", "iter", "iteration", "it", "batch", "token", "tok", "decode", "train", "training",
              "request", "req", "microbatch", "sample", "epoch", "update", "generate", "inference", "infer",
              "profilerstep"}  # torch.profiler's ProfilerStep#N
# A warm-up step is slower than the steady steps by more than this factor (first-step autotuning,
# allocator growth, lazy module loading); the steady reference is the median of the second half.
WARMUP_SLOWER = 1.25


@dataclass
class Steps:
    """The instances of the step range, and the steady ones on the clock that tells their length.

    Host ranges say when the host enqueued a step, not when the GPU ran it: an asynchronous host runs
    ahead until the launch queue fills, an `.item()` drains it in one long range, a graphed step is one
    short `cudaGraphLaunch`. So each instance is projected on the GPU (the first and last GPU work that
    the calls made inside it launched, any thread of its process) and a step lasts from its first GPU
    work to the next step's: the GPU's period. Runs whose steps launch no GPU work keep the host clock."""

    name: str
    global_tid: int | None
    host_starts: np.ndarray    # every instance, in order
    host_ends: np.ndarray
    gpu_starts: np.ndarray | None = None   # per instance: first GPU work it launched (-1: none)
    gpu_ends: np.ndarray | None = None     # per instance: end of the last GPU work it launched
    first_calls: np.ndarray | None = None  # per instance: start of the first call that launched its GPU work (-1)
    last_calls: np.ndarray | None = None   # per instance: start of the last call that launched its GPU work (-1)
    warmup: int = 0
    # the instance after the leading slow steps where they go on past the warm-up's cap (leading_slow), else 0
    slow_lead: int = 0
    clock: str = "host"                    # "gpu" once projected with enough GPU work, else "host"
    numbers: np.ndarray | None = None      # per instance: the number its range's name carries (step_numbers)
    names: list | None = None              # per instance: its range's own name, where it carries that number

    def number(self, instance: int) -> int:
        """The step as the report names it: the number in its range's name, else its instance index from 0."""
        return int(self.numbers[instance]) if self.numbers is not None else int(instance)

    def label(self, instance: int) -> str:
        """A step in a sentence: its range's own name where it carries its number (`token 103`, `ProfilerStep#7`;
        token_gen's text read "step 103" of a range named "token 103"), else `step N`."""
        if self.names is not None and self.numbers is not None and 0 <= instance < len(self.names):
            return str(self.names[instance])
        return f"step {self.number(instance)}"

    @property
    def total(self) -> int:
        return len(self.host_starts)

    @property
    def first_index(self) -> int:
        return self.warmup

    @property
    def last_index(self) -> int:
        """The last steady step's instance (not the last instance: one cut by the capture's end carries no time)."""
        steady = self.steady
        return int(steady[-1]) if len(steady) else self.total - 1

    def _timed(self) -> np.ndarray:
        """Indices of the instances that carry a time on the chosen clock."""
        if self.clock == "gpu":
            return np.flatnonzero(self.gpu_starts >= 0)
        return np.arange(self.total)

    @property
    def slow_lead_steps(self) -> tuple[int, int] | None:
        """(first, last) step of the leading slow stretch, as the report numbers them, where it goes on past the
        warm-up's cap (leading_slow); None otherwise."""
        if not self.slow_lead:
            return None
        return self.number(int(self._timed()[0])), self.number(self.slow_lead - 1)

    def _all_intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        timed = self._timed()
        if self.clock != "gpu":
            return timed, self.host_starts[timed], self.host_ends[timed]
        starts = self.gpu_starts[timed]
        ends = np.concatenate((starts[1:], [self.gpu_ends[timed[-1]]])) if len(timed) else starts
        return timed, starts, np.maximum(ends, starts)

    @property
    def starts(self) -> np.ndarray:   # the steady steps, on the chosen clock
        index, starts, _ = self._all_intervals()
        return starts[index >= self.warmup]

    @property
    def ends(self) -> np.ndarray:
        index, _, ends = self._all_intervals()
        return ends[index >= self.warmup]

    @property
    def durations(self) -> np.ndarray:
        return self.ends - self.starts

    @property
    def steady(self) -> np.ndarray:
        """Instance indices of the steady steps (aligned with starts/ends)."""
        index = self._all_intervals()[0]
        return index[index >= self.warmup]

    def inside(self, start: int, end: int) -> "Steps | None":
        """The instances that begin in [start, end) on their clock, all counted (no warm-up: the user's
        window says which steps count), or None when too few remain to be steps."""
        begins = self.gpu_starts if self.clock == "gpu" else self.host_starts
        keep = (begins >= start) & (begins < end)
        if int(keep.sum()) < MIN_STEPS:
            return None
        gpu = (self.gpu_starts[keep], self.gpu_ends[keep]) if self.gpu_starts is not None else (None, None)
        return Steps(self.name, self.global_tid, self.host_starts[keep], self.host_ends[keep], *gpu,
                     warmup=0, clock=self.clock, numbers=self.numbers[keep] if self.numbers is not None else None,
                     names=[n for n, kept in zip(self.names, keep.tolist()) if kept] if self.names is not None else None)

    def next_lead_in(self) -> np.ndarray:
        """Per steady step on the GPU's clock (aligned with starts/ends), the part of its period in which the
        GPU had finished the step's work and the host had already begun the next step without launching
        any of it yet: a stall at the top of the next step (loading its batch) that the GPU's clock counts in
        this one. Zeros on the host's clock."""
        if self.clock != "gpu":
            return np.zeros(len(self.starts), dtype=np.int64)
        timed = self._timed()
        index = self.steady
        position = np.searchsorted(timed, index)
        following = np.minimum(position + 1, len(timed) - 1)
        nxt = timed[following]
        has_next = position + 1 < len(timed)
        began = np.maximum(self.gpu_ends[index], self.host_starts[nxt])
        return np.where(has_next, np.clip(self.gpu_starts[nxt] - began, 0, None), 0).astype(np.int64)

    def host_windows(self) -> tuple[np.ndarray, np.ndarray]:
        """Per steady step (aligned with starts/ends), the host's part of it: from its range's start to the next
        timed instance's (the last: to its own range's end). A host call's cost is named by the step whose
        range it ran in: a wait at the top of step 30 lies in step 29's period on the GPU's clock."""
        timed = self._timed()
        index = self.steady
        position = np.searchsorted(timed, index)
        has_next = position + 1 < len(timed)
        nxt = timed[np.minimum(position + 1, len(timed) - 1)]
        starts = self.host_starts[index]
        return starts, np.where(has_next, self.host_starts[nxt], self.host_ends[index]).astype(np.int64)

    def host_durations(self) -> np.ndarray:
        index = self.steady
        return self.host_ends[index] - self.host_starts[index]

    def summary(self) -> dict:
        durations = self.durations
        host = self.host_durations()
        typical = median(durations)
        out = {"name": self.name, "count": int(len(durations)), "warmup": self.warmup,
               **({"slow_lead_last_step": self.slow_lead_steps[1]} if self.slow_lead else {}),
               "first_step": self.number(self.first_index), "last_step": self.number(self.last_index),
               "clock": self.clock,
               "median_ns": typical, "mean_ns": float(durations.mean()), "p95_ns": percentile(durations, 95),
               "stddev_ns": float(np.std(durations)),
               "mad_ns": median(np.abs(durations - typical)),
               # the last step on the GPU's clock ends with its own work, not at a next step's start: its period
               # is no shortest step (own67_churn1: 11.8 ms beside steps of 50-62 ms, a user read)
               "min_ns": int((durations[:-1] if self.clock == "gpu" and len(durations) > 2 else durations).min()),
               "max_ns": int(durations.max()),
               "start_ns": int(self.starts[0]), "end_ns": int(self.ends[-1]),
               "host_median_ns": median(host), "host_p95_ns": percentile(host, 95),
               "host_min_ns": int(host.min()), "host_max_ns": int(host.max())}
        if self.clock == "gpu":
            lag = self.gpu_starts[self.steady] - self.host_starts[self.steady]
            out["host_lead_ns"] = median(lag)
            out["host_relation"] = host_relation(typical, out["host_median_ns"], out["host_lead_ns"])
            first = self.first_calls[self.steady] if self.first_calls is not None else None
            late = median(first - self.host_starts[self.steady]) if first is not None and (first >= 0).all() else None
            last = self.last_calls[self.steady] if self.last_calls is not None else None
            if last is not None and len(last) and (last >= 0).all():
                # after the later of the step's last launch and the end of its GPU work: a host that waits for the
                # GPU at the step's end (`.item()`, a synchronize) waits, it does not work (matmul_sync: 4.77 ms after
                # its last launch, 2 ms of it the host's own work once the products were done)
                done = np.maximum(last, self.gpu_ends[self.steady])
                out["host_tail_ns"] = median(np.maximum(self.host_ends[self.steady] - done, 0))
            out["host_relation_text"] = host_relation_text(out, late, out.get("host_tail_ns"))
        return out


# The host is "ahead" when the GPU starts a step's work more than this many steps after the host began it.
AHEAD_STEPS = 1.0


def host_relation(gpu_median: float, host_median: float, lead: float) -> str:
    """How the host's step ranges relate to the GPU's: `ahead` (the host enqueues steps faster than the
    GPU runs them: the GPU is the bound), `in step` (within a step of each other: a sync each step, or a host as fast as the GPU)."""
    if gpu_median > 0 and lead > AHEAD_STEPS * gpu_median:
        return "ahead"
    return "in step"


def host_relation_text(summary: dict, first_launch_ns: float | None = None, tail_ns: float | None = None) -> str:
    """`first_launch_ns`: the median time from a step's range start to its first launching call: over LATE_START_SHARE
    of a step, the host's own time before it holds the step (a wait on a loader's queue), which "keep pace" alone
    does not say; a GPU busy with the step before delays a step's work without it (a host that runs ahead).
    `tail_ns`: the median time from a step's last launching call, or the end of its GPU work where that is later,
    to its range's end: over LATE_START_SHARE of a step, the host's own work after the step's GPU work holds it
    (logging, checkpoints, housekeeping: blind70_reviews' gc.collect() at the end of every step, 244 ms of a 294 ms
    step)."""
    ms = ms_text
    figures = (f"host ranges: median {ms(summary['host_median_ns'])}, {ms(summary['host_min_ns'])} to "
               f"{ms(summary['host_max_ns'])}; the GPU's period: median {ms(summary['median_ns'])}")
    if summary["host_relation"] == "ahead":
        return (f"The host runs ahead: it enqueues steps faster than the GPU runs them and the GPU starts a step "
                f"{ms(summary['host_lead_ns'])} after the host began it: the GPU is the bound ({figures}).")
    # within a step of each other: a sync each step, or a host about as fast as the GPU; "take turns" said a sync
    # where a loop that reads its loss every 10th step ran up to 7.6 ms ahead, then even (a blind twin)
    step = summary["median_ns"]
    if first_launch_ns is not None and step and first_launch_ns >= LATE_START_SHARE * step:
        return (f"Host and GPU keep pace, the host first: the host's first launch of a step comes "
                f"{ms(first_launch_ns)} after it began the step ({first_launch_ns / step:.0%} of a median step: "
                f"waiting for its data, or preparing it), and the GPU starts the step's work "
                f"{ms(summary['host_lead_ns'])} after the host began it ({figures}).")
    if tail_ns is not None and step and tail_ns >= LATE_START_SHARE * step:
        return (f"Host and GPU keep pace, the host last: the host ends a step {ms(tail_ns)} after its last launch "
                f"and the step's GPU work ({tail_ns / step:.0%} of a median step: its own work at the step's end, "
                f"logging or checkpoints, or a wait there, on a program it runs or a lock: the host findings say "
                f"which), and the GPU starts the step's work "
                f"{ms(summary['host_lead_ns'])} after the host began it ({figures}).")
    lead = summary["host_lead_ns"]
    if step and lead >= LATE_START_SHARE * step:   # its first launch early: the GPU busy with the step before
        # (copy56_vocab: 77.3 ms of a 78.8 ms step, GPU-bound, read "keep pace" a user read; 1.5 ms more is "ahead")
        return (f"The host runs close to a step ahead: the GPU starts a step's work {ms(lead)} after the host began it "
                f"({lead / step:.0%} of a median step), busy with the step before until then ({figures}).")
    return (f"Host and GPU keep pace: the GPU starts a step's work {ms(lead)} after the host began "
            f"it, within one step ({figures}).")


# A step's first launch this share of a median step after its range began, or later: the host's own time before it
# holds the step (blind68_loader: 117 ms of a 144 ms step on its loader's queue)
LATE_START_SHARE = 0.5


# A last step that launched under this share of a typical step's GPU work was cut by the capture's end
CUT_LAST_SHARE = 0.5


def project_on_gpu(steps: Steps, work_starts: np.ndarray, work_ends: np.ndarray, call_starts: np.ndarray,
                   call_pids: np.ndarray) -> Steps:
    """Puts the steps on the GPU's clock: per instance, the first start and the last end of the GPU work
    (kernels, copies, graph executions) whose launch call began inside the instance's host range, by a
    thread of the step thread's process. `call_starts` is, per work item, the start of the call that
    launched it (-1 when unknown); warm-up is then counted on the GPU periods."""
    pid = steps.global_tid >> PID_SHIFT if steps.global_tid is not None and steps.global_tid >= 0 else None
    known = call_starts >= 0
    if pid is not None:
        known &= (call_pids == pid) | (call_pids < 0)
    index = np.searchsorted(steps.host_starts, call_starts, side="right") - 1
    inside = known & (index >= 0)
    inside[inside] = call_starts[inside] < steps.host_ends[index[inside]]
    first = np.full(steps.total, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(steps.total, -1, dtype=np.int64)
    np.minimum.at(first, index[inside], work_starts[inside])
    np.maximum.at(last, index[inside], work_ends[inside])
    first_calls = np.full(steps.total, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_calls, index[inside], call_starts[inside])
    last_calls = np.full(steps.total, -1, dtype=np.int64)
    np.maximum.at(last_calls, index[inside], call_starts[inside])
    first[last < 0] = -1
    # a last instance that launched under half the work of a typical one was cut by the capture's end (the GPU's
    # records of power_iteration's last step stop 2.76 ms into its 38.5 ms range): no step, whose period would read
    # as one in the mean of the run's steps
    launched = np.bincount(index[inside], minlength=steps.total)
    worked = np.flatnonzero(last >= 0)
    if len(worked) > MIN_STEPS and launched[worked[-1]] < CUT_LAST_SHARE * median(launched[worked]):
        first[worked[-1]] = last[worked[-1]] = -1
    steps.gpu_starts, steps.gpu_ends = first, last
    steps.first_calls = np.where(last >= 0, first_calls, -1)
    steps.last_calls = np.where(last >= 0, last_calls, -1)
    with_work = int(np.count_nonzero(first >= 0))
    steps.clock = "gpu" if with_work >= max(MIN_STEPS, steps.total // 2) else "host"
    steps.warmup = 0
    _, starts, ends = steps._all_intervals()
    warmup, slow = warm_up(ends - starts)
    steps.warmup = int(steps._timed()[warmup]) if len(starts) else 0
    steps.slow_lead = int(steps._timed()[slow]) if slow else 0
    return steps


@dataclass
class LaunchPattern:
    """Without step ranges: the loop seen in its launches. The kernel launched most often, when its
    launches spread over much of the run, marks where the loop begins; what comes before is start-up."""

    kernel: str
    launches: int
    start: int          # the first launch of that kernel
    end: int            # the end of the last GPU work


MIN_PATTERN_LAUNCHES = 20   # fewer launches of any kernel is no loop to speak of
MIN_PATTERN_SPAN = 0.25     # the kernel's launches cover at least this share of the GPU activity span


# Start-up calls: loading modules and libraries, allocating memory. A loop has done them by its steady state.
STARTUP_CALLS = ("cuLibraryLoad", "cuModuleLoad", "cuModuleGetFunction", "cudaMalloc", "cuMemAlloc", "cudaHostAlloc",
                 "cuMemHostAlloc", "cudaMallocHost", "cuInit", "cudaFree", "cuMemFree", "cuDevicePrimaryCtxRetain",
                 "cuCtxCreate", "cudaGetDeviceCount", "cuGetProcAddress")
MIN_STARTUP_CALL_NS = 1_000_000


def find_launch_pattern(export: NsysExport) -> LaunchPattern | None:
    """The window of a run that has no step-like NVTX range, read off its most launched kernel: from
    its first launch after the last long start-up call (module loading, allocation) in the first half
    of its launches (by time and by count), to the end of the GPU work."""
    row = export.query("""SELECT short_name_id, COUNT(*) AS n, MIN(start), MAX(start) FROM kernels
                          GROUP BY short_name_id ORDER BY n DESC LIMIT 1""")
    if not row or row[0][1] < MIN_PATTERN_LAUNCHES:
        return None
    name_id, launches, first, last = row[0]
    span = export.query("SELECT MIN(start), MAX(end) FROM kernels")[0]
    if span[0] is None or span[1] <= span[0] or (last - first) < MIN_PATTERN_SPAN * (span[1] - span[0]):
        return None
    # before the first half of its launches both by time and by count: a loop of 300 requests (600 launches in 83
    # ms) followed by two short phases (106 in 148 ms) has its middle in time after the loop, where the second
    # phase's pinned allocation made the whole loop "start-up" (dev_infer); a call after half the launches is the
    # loop's own, not start-up
    median = export.scalar("SELECT start FROM kernels WHERE short_name_id = ? ORDER BY start LIMIT 1 OFFSET ?",
                           (name_id, launches // 2))
    middle = min(first + (last - first) // 2, median)
    startup_names = " OR ".join(f"s.value LIKE '{name}%'" for name in STARTUP_CALLS)
    startup_end = export.scalar(f"""SELECT MAX(a.end) FROM api_raw a JOIN main.StringIds s ON s.id = a.name_id
                                    WHERE a.start < {middle} AND a.duration_ns >= {MIN_STARTUP_CALL_NS}
                                      AND ({startup_names})""")
    start = first
    if startup_end is not None and startup_end > first:
        after = export.query("SELECT MIN(start), COUNT(*) FROM kernels WHERE short_name_id = ? AND start >= ?",
                             (name_id, startup_end))[0]
        if after[0] is not None and after[1] >= MIN_PATTERN_LAUNCHES:
            start, launches = after[0], after[1]
    name = export.scalar("SELECT value FROM StringIds WHERE id = ?", (name_id,))
    end = export.scalar("SELECT MAX(end) FROM (SELECT end FROM kernels UNION ALL SELECT end FROM copies)")
    if end - start < MIN_PATTERN_SPAN * (span[1] - span[0]):
        # a long call in the first half moved the start so late that most GPU activity lies before it: that
        # is the program's other phases (nvtx-examples' workflow: 13.9 ms of a 107 ms GPU span), not start-up
        return None
    return LaunchPattern(str(name), int(launches), int(start), int(end))


# The names PyTorch gives the NVTX ranges it pushes around every operator in its NVTX mode
# (`torch.autograd.profiler.emit_nvtx()`, or nsys's `--pytorch=autograd-nvtx`): `aten::linear, seq = 12, op_id = 40`
# (GindaChen's nsys-ai fixtures: 16,782 such ranges for 3,346 launches), with `, sizes = [[16, 512], ...]` appended
# under record_shapes=True (OPERATOR_SHAPES). They annotate operators, never a loop's iterations: find_steps leaves them
# out (`aten::batch_norm, op_id = N` reads as step-like, and a network's layers make it repeat more than the steps)
OPERATOR_RANGES = ("%, op_id = %", "%, seq = %")
OPERATOR_SHAPES = "%, sizes = [%"
# (GLOB: case and `_` as they are; op_id only, which PyTorch's texts carry since 1.10: a user's `decode, seq = 17`
# stays a step candidate)
NOT_OPERATOR_RANGE = "NOT (name GLOB '*, op_id = *')"

DIGIT_RUN = re.compile(r"\d+")
# A digit run (any script's decimal digits) that no ASCII letter or digit, and no other digit, comes before: the
# start of a run that is an instance number (normalize_name's rule; a run that ends the name is one as well)
INSTANCE_RUN = re.compile(r"(?<![A-Za-z0-9\d])\d+")


def _instance_runs(name: str):
    """The spans of the digit runs of `name` that are instance numbers (normalize_name's rule)."""
    for run in DIGIT_RUN.finditer(name):
        start, end = run.span()
        before = name[start - 1] if start else ""
        if end == len(name) or not (before.isascii() and before.isalnum()):
            yield start, end


@functools.lru_cache(maxsize=4096)   # asked again for each instance of a range (phases: one per range)
def normalize_name(name: str) -> str:
    """`step 12` -> `step N`, `epoch3` -> `epochN`: instances of one loop share a name. Digits inside a
    word stay (`bf16_autocast`, `layer3.conv`): they name a thing, not an instance. A run of digits is an
    instance number where no ASCII letter or digit comes before it, or where it ends the name. One regex
    substitution with a one-character look-behind (linear: 10 ms on an untrusted 70 KB name; a first form trying
    `\\d+$` inside runs was quadratic, 39 s), and the name's last run found from its end: PyTorch's NVTX mode
    names every range apart (`aten::mm, op_id = 285336, sizes = [[8192, 512], ...]`), 2,600 a step, and a
    scan of each run in Python took twice as long."""
    end = len(name)
    while end and name[end - 1].isdecimal():   # the last run (str.isdecimal is re's \\d)
        end -= 1
    if end == len(name) or not end or not (name[end - 1].isascii() and name[end - 1].isalnum()):
        return INSTANCE_RUN.sub("N", name)
    return INSTANCE_RUN.sub("N", name[:end]) + "N"   # a run ending the name after a letter: `epoch3`


def instance_number(name: str) -> int | None:
    """The number a step's range carries (`step 12` -> 12, torch.profiler's `ProfilerStep#7` -> 7): its one
    instance-number run; None where it has none or several."""
    runs = list(_instance_runs(name))
    if len(runs) != 1 or runs[0][1] - runs[0][0] > 12:   # 13 digits or more: a timestamp, not a step
        return None
    return int(name[runs[0][0]:runs[0][1]])


def step_numbers(names: list) -> np.ndarray | None:
    """Per instance, the number its range's name carries, where every instance carries one and they increase
    from each to the next: the numbers the user finds in the profile. torch.profiler numbers its steps from the
    schedule's start (mlp_eager's trace: ProfilerStep#5 to #10), a loop may count from 1. Else None: the
    instances are numbered from 0."""
    numbers = [instance_number(n) if isinstance(n, str) else None for n in names]
    if not numbers or any(n is None for n in numbers):
        return None
    out = np.array(numbers, dtype=np.int64)
    return out if bool(np.all(np.diff(out) > 0)) else None


def is_step_like(normalized: str) -> bool:
    if normalized.startswith("Optimizer."):  # torch.optim's record_function ranges (Optimizer.step#AdamW.step)
        return False                         # repeat once per optimizer a step: not the loop's iterations
    return any(word in STEP_WORDS for word in re.split(r"[^a-z]+", normalized.lower()))


def find_steps(export: NsysExport, nvtx_name: str | None = None) -> Steps | None:
    """The steps of the run, or None when no range repeats like one. With `nvtx_name`, that
    range's instances are the steps whatever their name."""
    groups: dict[tuple[str, int], list] = {}
    for name, tid, count, total in export.query(
            f"SELECT name, global_tid, COUNT(*), SUM(duration_ns) FROM nvtx WHERE name IS NOT NULL AND {VALID_NVTX} "
            f"{'' if nvtx_name is not None else 'AND ' + NOT_OPERATOR_RANGE} GROUP BY name, global_tid"):
        if not isinstance(name, str):
            continue
        normalized = normalize_name(name)
        if nvtx_name is not None and normalized != normalize_name(nvtx_name):
            continue
        entry = groups.setdefault((normalized, tid), [0, 0, []])
        entry[0] += count
        entry[1] += total or 0
        entry[2].append(name)
    candidates = [(key, v) for key, v in groups.items() if v[0] >= MIN_STEPS
                  and (nvtx_name is not None or is_step_like(key[0]))]
    if not candidates:
        return None
    (normalized, tid), (_, _, names) = max(candidates, key=lambda c: (c[1][0], c[1][1]))
    starts, ends, instance_names = _instances(export, tid, names)
    if len(starts) < MIN_STEPS:
        return None
    numbers = step_numbers(instance_names)
    warmup, slow = warm_up(ends - starts)
    return Steps(normalized, tid, starts, ends, warmup=warmup, slow_lead=slow,
                 numbers=numbers, names=list(instance_names) if numbers is not None else None)


def name_clause(export: NsysExport, name: str) -> tuple[str, tuple]:
    """The SQL condition on `nvtx.name` for `--nvtx-range NAME`: the ranges of that name; where none has it,
    the ranges the report prints under it (`step N`: step 0, step 1, ..., numbers normalized)."""
    if "N" not in name or export.scalar("SELECT 1 FROM nvtx WHERE name = ? LIMIT 1", (name,)):
        return "name = ?", (name,)
    names = [r[0] for r in export.query("SELECT DISTINCT name FROM nvtx WHERE name IS NOT NULL")
             if isinstance(r[0], str) and normalize_name(r[0]) == name]
    if not names:
        return "name = ?", (name,)
    con = export.connection
    con.execute("DROP TABLE IF EXISTS temp.range_names")
    con.execute("CREATE TEMP TABLE range_names(name TEXT PRIMARY KEY)")
    con.executemany("INSERT OR IGNORE INTO range_names VALUES (?)", [(n,) for n in names])
    return "name IN (SELECT name FROM temp.range_names)", ()


def named_range(export: NsysExport, name: str) -> Steps | None:
    """Every instance of the NVTX range `name` (any thread, one or many), outermost ones only, as Steps
    to project on the GPU: the `--nvtx-range` window is the GPU work those instances launched."""
    clause, params = name_clause(export, name)
    rows = export.query(f"SELECT start, end, global_tid FROM nvtx WHERE {clause} AND end IS NOT NULL AND {VALID_NVTX} "
                        "ORDER BY start, end DESC", params)
    if not rows:
        return None
    starts = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    ends = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    outer = _outermost(starts, ends)
    tids = {r[2] for r in rows}
    return Steps(name, next(iter(tids)) if len(tids) == 1 else None, starts[outer], ends[outer])


def _instances(export: NsysExport, tid, names: list[str]) -> tuple[np.ndarray, np.ndarray, list]:
    con = export.connection
    con.execute("DROP TABLE IF EXISTS temp.step_names")
    con.execute("CREATE TEMP TABLE step_names(name TEXT PRIMARY KEY)")
    con.executemany("INSERT OR IGNORE INTO step_names VALUES (?)", [(n,) for n in names])
    tid_clause = "global_tid IS NULL" if tid is None else "global_tid = ?"
    rows = export.query(f"""SELECT start, end, name FROM nvtx WHERE {tid_clause} AND {VALID_NVTX}
                            AND name IN (SELECT name FROM step_names) ORDER BY start, end DESC""",
                        () if tid is None else (tid,))
    starts = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    ends = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    if len(starts) == 0:
        return starts, ends, []
    outer = _outermost(starts, ends)
    return starts[outer], ends[outer], [r[2] for r, kept in zip(rows, outer.tolist()) if kept]


def _outermost(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Instances (sorted by start) not nested in an earlier one: a nested instance is not a new step."""
    outer = np.ones(len(starts), dtype=bool)
    outer[1:] = starts[1:] >= np.maximum.accumulate(ends)[:-1]
    return outer


def warm_up(durations: np.ndarray) -> tuple[int, int]:
    """(the warm-up: leading steps slower than the settled ones, at most half of them; the leading slow steps where
    they go on past that cap, else 0)."""
    slow = leading_slow(durations)
    warmup = min(slow, len(durations) // 2)
    return warmup, (slow if warmup < slow < len(durations) else 0)


def leading_slow(durations: np.ndarray) -> int:
    """Leading steps slower than WARMUP_SLOWER x the median of the later half, however many: past half of them
    (warm_up's cap) the stretch is more than a warm-up, a slow regime of the run that the window starts inside
    (blind79_offload: steps 0-64 of 120 at 109-186 ms, the later ones at 43-56, the same copies in each)."""
    if len(durations) < MIN_STEPS:
        return 0
    reference = float(np.median(durations[len(durations) // 2:]))
    slow = durations > WARMUP_SLOWER * reference
    return int(np.argmin(slow)) if not slow.all() else len(durations)


# Consecutive steps compared for their kernels' launch shapes (the first steady ones: a bounded working set)
SHAPE_STEPS = 64


def shape_changes(kernels, starts: np.ndarray, ends: np.ndarray) -> tuple[int, int, int | None, int] | None:
    """(pairs of consecutive steps compared, pairs whose kernels differ by name or launch shape, the short-name id of
    the kernel that differed in most pairs, of those pairs the ones whose steps launch other numbers of kernels) over
    the first SHAPE_STEPS steady steps on the GPU's clock: a CUDA graph replays the shapes it captured, so steps whose
    shapes change (a KV cache grown by torch.cat each token, batches of other lengths) cannot be captured as they
    are, nor steps whose host launches another number of kernels each time (blind69_augment: a Python loop over a
    batch's images that flips each one or not at random). None without launch shapes (`shape_code`) or 3 steps."""
    try:
        codes = kernels.shape_code
    except AttributeError:
        return None
    count = min(len(starts), SHAPE_STEPS)
    if count < 3 or not len(codes):
        return None
    begin = kernels.start
    chosen = np.flatnonzero((begin >= starts[0]) & (begin < ends[count - 1]))
    step = np.searchsorted(starts[:count], begin[chosen], side="right") - 1
    key = np.asarray(kernels.short_name_id)[chosen].astype(np.int64) * (1 << 32) + codes[chosen].astype(np.int64)
    order = np.lexsort((key, step))
    step, key = step[order], key[order]
    bounds = np.searchsorted(step, np.arange(count + 1))
    signatures = [key[bounds[i]:bounds[i + 1]] for i in range(count)]
    changed, recounted, names = 0, 0, {}
    for before, after in zip(signatures, signatures[1:]):
        if len(before) == len(after) and np.array_equal(before, after):
            continue
        changed += 1
        # other numbers of kernels whose shapes stay: the kernels both steps launch keep their launch shapes (a
        # shape that changes makes the libraries pick other kernels too: padded lengths, multi-scale inputs)
        if len(before) != len(after):
            both = np.intersect1d(before >> 32, after >> 32)
            kept_b, kept_a = before[np.isin(before >> 32, both)], after[np.isin(after >> 32, both)]
            recounted += bool(np.array_equal(np.unique(kept_b), np.unique(kept_a)))
        for name in np.unique(np.setxor1d(before, after) >> 32).tolist():
            names[name] = names.get(name, 0) + 1
    example = max(names, key=lambda n: (names[n], -n)) if names else None
    return count - 1, changed, example, recounted
