"""The GPU waits while the thread that launches its work waits itself.

## What it detects
GPU idle time during which every thread that launches the GPU's work sat in a blocking OS call: on a
queue, a lock or a semaphore (a DataLoader whose workers do not keep up), in file, pipe or socket I/O,
in a sleep, or waiting for a child process. The host-activity table (normalize/host_activity.csv) sorts
the OS runtime calls into these classes by name; the time is what the budget's idle parts hold while
those calls run, each nanosecond given to one class.

Where the launching threads' lock waits are mostly timed condition waits (`pthread_cond_timedwait`) a large share
of which end at one timeout of a few milliseconds (normalize/host_activity.lock_timeouts), the lock is CPython's
interpreter lock, handed between threads at the switch interval (5 ms by default): another Python thread of the
process (a batch builder, a metrics thread) holds it. The title and the advice say so, and launch-overhead's advice
leads with it: each launch's Python code waits for the lock too (blind78_gilthread: 34% of 700 timed waits at 5.1 ms).

## Why it is slow
The GPU only runs what the host has queued. A host thread that waits queues nothing: the GPU idles for
as long as the wait lasts, whatever it waits for. This is not the host's own code running (host-compute):
faster Python does not help, only a producer that keeps up, or no wait on the loop's path.

## Example
```python
loader = DataLoader(ds, batch_size=64, num_workers=2)   # two workers cannot keep up with the GPU
for x, y in loader:                                       # the main thread waits on their queue
    train_step(x.cuda(), y.cuda())
```

## Instead
```python
loader = DataLoader(ds, batch_size=64, num_workers=8, prefetch_factor=4,
                    persistent_workers=True, pin_memory=True)
```

## Known problems
Needs OS runtime calls traced (`nsys profile -t cuda,nvtx,osrt`); without them the same time stays in
host-compute's part. A wait that is the program's own choice (a rate limiter, a barrier before
evaluation) lands here too: its calls and NVTX range tell. Waits inside a phase that is not the steps
(a checkpoint's writes) or inside steps that stand out are left to those findings.

## Options
- `min_window_share`: the waits' GPU idle time over the window before the check speaks.
"""

from __future__ import annotations

import numpy as np

from nsanalyze.normalize.host_activity import TIMED_WAITS, base_name
from nsanalyze.numbers import duration_text
from nsanalyze.text import code_span

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.checks.program._claims import LAUNCH_ID, SYNC_ID, claims_by_cause, classes_taken
from nsanalyze.checks.program._host_class import HOST_WAIT_ID, WAIT_CLASSES, WAIT_MIN_SHARE, interpreter_lock, \
    wait_classes, wait_parts
from nsanalyze.checks.program.host_compute import BLOCKED_ADVICE


ID = HOST_WAIT_ID
BUDGET_PART = "idle_host"   # where most of it lies: the budget's idle time on host code
ADVICE = BLOCKED_ADVICE["waiting on a lock, a queue or another thread"]

CHECK = Check(
    id=ID,
    name="program.host.wait",
    title="The GPU waits while its host thread waits (a queue, a lock, I/O, a sleep)",
    section="busy",
    requires=("host_activity",),
    thresholds={"min_window_share": Threshold(WAIT_MIN_SHARE, "a twentieth of the window spent waiting on a queue or I/O is "
                                                    "worth a producer that keeps up")},
    speedup_model=("the GPU idle time the waiting classes' calls cover (host-activity table), less what a phase or "
                   "steps that stand out claim of each budget part: with the wait gone, the host queues work at once"),
    # no replay change: `whatif --remove lock-wait` replays the waits gone (critical_path.gap_os_ns), but the steps
    # around the median priced blind68_loader at 111.3 and 124.9 ms a step against 116.6 and 137.6 saved, where the
    # window's idle time under the waits says 115.7 and 133.3 (the waits vary from step to step)
    change=None,
    budget_part=BUDGET_PART,
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    window_ns = timeline.summary.span_ns or 0
    taken = classes_taken(timeline)   # (a class another finding holds: host-data's checkpoint writes)
    classes = sorted(wait_classes(timeline, taken), key=lambda c: -c.idle_ns)
    if not window_ns or not classes:
        return None
    others: dict[str, float] = {}
    for cause, parts in claims_by_cause(timeline).items():
        for part, ns in parts.items():
            if cause not in (ID, SYNC_ID, LAUNCH_ID):   # (host-sync and launch-overhead claim after the waits)
                others[part] = others.get(part, 0.0) + ns
    savings = sum(wait_parts(timeline, others, taken).values())
    share = savings / window_ns
    if share < limits.min_window_share:
        return None
    top = classes[0]
    kind = WAIT_CLASSES[top.name]
    lock = interpreter_lock(timeline, top)
    # the timed waits first where they are the interpreter lock's (blind78_gilthread listed the autograd thread's
    # hand-off, pthread_cond_wait, before the lock's pthread_cond_timedwait, a user read)
    calls = sorted(top.top_calls[:3], key=lambda call: base_name(call[0]) not in TIMED_WAITS) if lock \
        else top.top_calls[:3]
    names = ", ".join(name for name, _, _ in calls)
    per_step = ""
    if top.step_idle_ns is not None and timeline.steps and timeline.steps.count:
        per_step = f", {savings / timeline.steps.count / 1e6:.2f} ms a step"
    where, held = _few_steps(timeline, classes)
    forks = _forks_lead(timeline, top, held)
    programs = "" if forks else _programs(timeline, top)
    if programs:
        where += programs[0]
    if lock:
        where += lock[0]
    finding = Finding(
        check=ID,
        title=(f"The GPU idles {duration_text(savings)} ({share:.0%} of the window{per_step}) while the thread that "
               f"launches its work waits, not computing: {kind} in {names} ({duration_text(top.idle_ns)} of GPU idle "
               f"time, {plural(top.calls, 'call')}){where}"),
        estimated_speedup=share,
        evidence={"wait_share": evidence(share, limits.min_window_share, unit="ratio"),
                  "wait_idle_ns": evidence(savings, unit="ns"),
                  "classes": [{"class": c.name, "what": WAIT_CLASSES[c.name], "calls": c.calls,
                               "idle_ns": int(round(c.idle_ns)), "host_ns": int(round(c.host_ns)),
                               "top_calls": [{"name": n, "calls": k, "ns": int(ns)} for n, k, ns in c.top_calls[:3]]}
                              for c in classes]},
        advice=forks + FORK_ADVICE if forks else lock[1] + GIL_ADVICE if lock else
        programs[1] + BLOCKED_ADVICE["waiting for a child process"] if programs else
        _writes_lead(top) + BLOCKED_ADVICE[kind],
    )
    raw = sum(c.idle_ns for c in classes)
    if savings < 0.95 * raw:
        finding.notes.append(f"{duration_text(raw - savings)} of the waits lie in time a phase or steps that stand out "
                             "claim (their findings count it)")
    finding.estimated_savings_ns = savings
    return finding


# The waits are told step by step where at most this share of the steps holds at least HELD_SHARE of them:
# a mean a step would hide that a few steps wait (a loader's workers falling behind now and then).
FEW_STEPS, HELD_SHARE = 0.25, 0.7
# a step whose waits come within this factor of the least of the steps that hold HELD_SHARE is one of them
ALIKE = 0.5


def _few_steps(timeline, classes) -> tuple[str, list]:
    """(`; 318 ms of it in 17 of 149 steps (63, 66, 73, ...)`, those steps' numbers) where a few steps hold most of
    the waits, else ("", []). A wait is named by the step whose host range it ran in (Steps.host_windows):
    shard_prefetched's `join()` at the top of steps 30 and 50 idles the GPU in the periods of steps 29 and 49 on its
    clock, and a user looks for 30 and 50."""
    windows = getattr(timeline, "step_host_windows", None)
    indices = getattr(timeline, "step_indices", None)
    if windows is None or indices is None or len(windows[0]) != len(indices):
        return "", []
    starts, ends = windows
    idle = np.zeros(len(starts))
    for c in classes:
        for gpu in c.idle_islands:
            idle += c.idle_in(gpu, starts, ends) / c.gpus
    total = float(idle.sum())
    if not total:
        return "", []
    order = np.argsort(-idle, kind="stable")
    held = np.cumsum(idle[order])
    count = int(np.searchsorted(held, HELD_SHARE * total) + 1)
    # and the steps alike to those: within ALIKE of the least of them (blind76_epochs: the share's cut named 5 of the
    # 7 epochs' first steps, 167-195 ms of waits each, and read as all of them, a user read)
    count = max(count, int(np.sum(idle >= ALIKE * idle[order[count - 1]])))
    if count > FEW_STEPS * len(idle):
        return "", []
    named = [timeline.step_number(int(i)) for i in np.sort(indices[order[:count]])]
    shown = ", ".join(str(n) for n in named[:8]) + (", ..." if count > 8 else "")
    return f"; {held[count - 1] / 1e6:.0f} ms of it in {count} of {plural(len(idle), 'step')} ({shown})", named


# Of a child-process class's time, this share or more in `fork`: the launching process copied to start workers
# (Python's multiprocessing, a DataLoader starting its workers), not a program run to its end (subprocess.run's time
# lies in waitpid). blind76_epochs: 42 forks of 15.7 ms each, 659 of the class's 662 ms
FORK_SHARE = 0.5
FORK_CALLS = ("fork", "vfork")

FORK_ADVICE = """Start worker processes once, not in the loop.

- A DataLoader iterated once an epoch: `persistent_workers=True` keeps its workers between epochs; without it, each
  new iteration shuts them down, forks new ones (each a copy of the training process) and waits for their first
  batches.
- A `multiprocessing.Pool` or `ProcessPoolExecutor` made inside the loop: make it once, before the loop, and reuse it.

```python
loader = DataLoader(ds, batch_size=128, num_workers=6, pin_memory=True, persistent_workers=True)
for epoch in range(epochs):
    for x, y in loader:
        ...
```"""


GIL_ADVICE = """Keep other Python threads from holding the interpreter lock while the loop launches.

- A thread that prepares batches in Python (tokenizing, augmenting, building lists): move it to processes
  (`DataLoader(num_workers=N)`, `multiprocessing`), which have interpreters of their own.
- Work a library can do with the lock released (NumPy on large arrays, a Rust tokenizer's batch call, PIL's
  decoders) holds it less: call it on whole batches, not item by item in Python.
- A metrics or logging thread: make it wake less often, or hand it tensors to read every N steps.

```python
# before: a thread in this process builds the batches in Python
threading.Thread(target=fill_queue, args=(q,), daemon=True).start()
# after: worker processes build them
loader = DataLoader(ds, batch_size=None, num_workers=2, prefetch_factor=4, persistent_workers=True)
```"""


# Of the file-io class's time, this share or more in writes and flushes to disk: files written in the loop
# (blind79_fsynclog: a checkpoint and a metrics line saved and fsync'd every step, fsync 3.2 ms a call)
WRITES_SHARE = 0.5
WRITE_CALLS = ("write", "pwrite", "writev", "pwritev", "fsync", "fdatasync", "fwrite", "fflush", "sync_file_range")


def _writes_lead(top) -> str:
    """Where the launching thread's file I/O is mostly writes and flushes (WRITES_SHARE), a first paragraph naming
    them: a checkpoint or a log written in the loop; else ''."""
    if top.name != "file-io" or not top.host_ns:
        return ""
    writes = [(name, calls, ns) for name, calls, ns in top.top_calls if name.rstrip("0123456789") in WRITE_CALLS]
    if sum(ns for _, _, ns in writes) < WRITES_SHARE * top.host_ns:
        return ""
    said = ", ".join(f"{code_span(name)} ({plural(calls, 'call')}, {duration_text(ns)})" for name, calls, ns in writes)
    return (f"Most of the waits are writes: {said}. A checkpoint or a log written (and flushed to disk) inside the "
            "loop: write it every N steps and at the end, without an fsync each time, or hand it to a thread or "
            "process of its own after a non-blocking copy.\n\n")


def _forks_lead(timeline, top, held: list) -> str:
    """Where the launching thread's child-process waits are mostly forks (FORK_SHARE), what they are: workers
    started by forking, once an instance of the phase that holds the steps (an epoch) where the steps that hold the
    waits recur at its number of steps."""
    if top.name != "child-process" or not top.host_ns:
        return ""
    forks = [(calls, ns) for name, calls, ns in top.top_calls if name in FORK_CALLS]
    count, ns = sum(c for c, _ in forks), sum(t for _, t in forks)
    if not count or ns < FORK_SHARE * top.host_ns:
        return ""
    text = (f"The launching thread forks processes: {plural(count, '`fork` call')} of {duration_text(ns / count)} "
            "each (a copy of the training process), the way Python's multiprocessing starts workers, a DataLoader's "
            "among them.")
    epoch = _phase_of_each(timeline, held)
    if epoch:
        text += (f" They come at the first step of each {code_span(epoch)} (steps {', '.join(map(str, held[:5]))}"
                 f"{', ...' if len(held) > 5 else ''}): a DataLoader with `persistent_workers=False`, the default, "
                 "starts its workers again for each pass over its data.")
    return text + "\n\n"


# The launching thread's waits on pipes or for a child (io-wait, child-process) are a program the loop runs and waits
# for where processes that begin and end inside the window (normalize/host_activity.child_processes) come this often a
# step or more (blind80_gpumon: 118 runs of nvidia-smi in 119 steps, read through pipes in poll: "I/O")
PROGRAMS_PER_STEP = 0.5
PROGRAM_WAITS = ("io-wait", "child-process")


def _programs(timeline, top) -> tuple[str, str] | None:
    """(what the title adds, the advice's first paragraph) where the top wait class is a program the loop runs each
    step and waits for (PROGRAMS_PER_STEP); else None."""
    found = getattr(timeline, "child_processes", None)
    steps = timeline.steps.count if timeline.steps is not None and timeline.steps.count else 0
    if found is None or top.name not in PROGRAM_WAITS or (steps and found.count < PROGRAMS_PER_STEP * steps):
        return None
    named = ", ".join(f"{code_span(name)} {count}x" for name, count in found.names[:3])
    which = f" (of those the export names: {named})" if named else ""
    often = f", {found.count / steps:.1f} a step" if steps else ""
    return (f"; {plural(found.count, 'process')} began and ended in the window{often}{which}: a program the loop "
            "runs and waits for",
            f"The loop runs a program and waits for it: {plural(found.count, 'process')} began and ended inside the "
            f"window{often}, each alive {duration_text(found.median_ns)} at the median{which}, while the launching "
            f"thread waited in {code_span(top.top_calls[0][0])} and the like: `subprocess.run`, `os.system` or "
            "`check_output`, its output read through a pipe until it exits. Run it less often, from a thread of its "
            "own that keeps the latest result, or use a library in the process (NVML through `pynvml` for GPU "
            "figures) instead of a program each step.\n\n")


def _phase_of_each(timeline, held: list) -> str | None:
    """The name of the phase that holds the steps (an `epoch N` range around each epoch's steps) where the steps
    holding the waits lie that phase's steps apart, or a multiple of them; else None."""
    numbers = [n for n in held if isinstance(n, int)]
    if len(numbers) < 2:
        return None
    for phase in timeline.phases or ():
        steps = [child for child in phase.children if child.is_steps]
        if not steps or not phase.count:
            continue
        each = round(steps[0].count / phase.count)
        gaps = [b - a for a, b in zip(numbers, numbers[1:])]
        if each >= 2 and all(gap > 0 and gap % each == 0 for gap in gaps):
            return phase.name
    return None
