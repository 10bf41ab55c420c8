"""What removing one class of host calls (normalize.host_activity) gives back, step by step.

A host call removed from a step shortens the host's side of that step by its time, and the step by at
most the GPU's idle time in it: the GPU's own work stays. So the saving of a class is, summed over the
steady steps, min(host time in the class's calls, GPU idle time) of each step; without steps, the GPU's idle
time while the class's calls ran (the window's idle time elsewhere is not theirs). The budget-part checks leave that idle time to these checks (checks/program/_claims.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.checks.base import budget_part, plural
from nsanalyze.numbers import duration_text


@dataclass(frozen=True)
class ClassCost:
    calls: int
    host_ns: float            # host time inside the class's calls in the window
    savings_ns: float         # what removing them gives back (see the module's docstring)
    steps: int                # steady steps
    steps_with_calls: int     # steady steps in which such a call begins
    per_step_host_ns: float   # median over the steps with calls
    per_step_savings_ns: float  # savings over the steady steps, a step
    top_calls: tuple
    per_step_calls: float = 0.0   # median calls over the steps with calls


def class_cost(timeline, class_name: str) -> ClassCost | None:
    activity = timeline.host_activity
    entry = activity.by_class(class_name) if activity is not None else None
    if entry is None or not entry.calls:
        return None
    idle = activity.step_idle_ns()
    if entry.step_host_ns is not None and idle is not None and len(idle):
        per_step = np.minimum(entry.step_host_ns, idle)
        with_calls = entry.step_calls > 0
        in_steps = float(per_step.sum())
        # calls outside the steady steps (between them, in a phase) give back their idle time
        outside = max(0.0, entry.idle_ns - float(entry.step_idle_ns.sum()))
        return ClassCost(entry.calls, entry.host_ns, in_steps + outside, len(idle), int(with_calls.sum()),
                         float(np.median(entry.step_host_ns[with_calls])) if with_calls.any() else 0.0,
                         in_steps / len(idle), entry.top_calls,
                         float(np.median(entry.step_calls[with_calls])) if with_calls.any() else 0.0)
    # without steps: the GPU's idle time during the class's calls (the window's whole idle time, host code and other
    # calls' included, was claimed: nvtx-examples' workflow read 66.6 ms behind its allocator calls, 47.4 ms idle
    # while they ran)
    return ClassCost(entry.calls, entry.host_ns, min(entry.host_ns, entry.idle_ns), 0, 0, 0.0, 0.0, entry.top_calls)


def priced_class(timeline, class_name: str, min_window_share: float) -> tuple[ClassCost, float] | None:
    """(cost, its share of the window) of removing a class's calls, when that share reaches the threshold."""
    cost = class_cost(timeline, class_name)
    window_ns = timeline.summary.span_ns or 0
    if cost is None or not window_ns:
        return None
    share = cost.savings_ns / window_ns
    return (cost, share) if share >= min_window_share else None


def calls_evidence(cost: ClassCost) -> list[dict]:
    return [{"name": n, "calls": c, "ns": int(ns)} for n, c, ns in cost.top_calls]


def cost_phrase(cost: ClassCost, share: float) -> str:
    """The time a class's calls cost, as class_cost measures it: with steps, their host time counted up to each step's
    GPU idle time (not the GPU's idle under the calls themselves: blind82_nocache's allocator calls held the host
    6,376 ms, the GPU idle 5,146 ms of it, a user read took "the GPU idles 6,376 ms behind them" for the latter);
    without steps, the GPU's idle time while they ran. Its figure a step is a mean over the steps, said so beside the
    calls' median (copy56_catlog: "16.81 ms a step" read as the median step's, where 12 of 94 steps hold most of it,
    a user read)."""
    if cost.steps:
        return (f"the host spends {cost.savings_ns / 1e6:.1f} ms in them, counted up to each step's GPU idle time "
                f"({share:.0%} of the window; a mean {cost.per_step_savings_ns / 1e6:.2f} ms a step)")
    return f"the GPU idles {cost.savings_ns / 1e6:.1f} ms while they run ({share:.0%} of the window)"


def calls_phrase(cost: ClassCost) -> str:
    names = "/".join(name for name, _, _ in cost.top_calls[:3])
    if cost.steps:   # (calls a step: the window on the GPU's clock cuts the last step's calls made after its GPU
        # work: alloc_churn's Kineto trace read 616 calls in 6 steps where each step makes 112, a user read)
        return (f"{plural(cost.calls, names + ' call')} (a median {cost.per_step_calls:,.0f} a step), in "
                f"{cost.steps_with_calls} of {plural(cost.steps, 'steady step')} "
                f"(a median {cost.per_step_host_ns / 1e6:.2f} ms of host time in a step that has them)")
    return f"{plural(cost.calls, names + ' call')} ({cost.host_ns / 1e6:.1f} ms of host time)"


# host-wait's id and its default min_window_share, here so that the claims (checks/program/_claims.py, which
# host-wait imports) read the one value: the waits claim their time only where host-wait's finding speaks
HOST_WAIT_ID, WAIT_MIN_SHARE = "host-wait", 0.05

# host-activity classes in which the launching threads wait on something else, and what it is (host-wait's
# finding, and its advice's key in host_compute.BLOCKED_ADVICE)
WAIT_CLASSES = {"lock-wait": "waiting on a lock, a queue or another thread",
                "io-wait": "waiting for I/O (files, pipes, sockets)",
                "file-io": "waiting for I/O (files, pipes, sockets)",
                "network": "waiting for I/O (files, pipes, sockets)",
                "sleep": "sleeping",
                "child-process": "waiting for a child process"}


def wait_classes(timeline, taken: tuple = ()) -> list:
    """The window's host-activity classes of waits that cover GPU idle time, less those another cause's finding holds
    (`taken`: _claims.classes_taken)."""
    activity = timeline.host_activity
    if activity is None:
        return []
    return [c for c in activity.classes if c.name in WAIT_CLASSES and c.idle_ns and c.name not in taken]


def wait_parts(timeline, other_claims: dict[str, float], taken: tuple = ()) -> dict[str, float]:
    """ns per budget part that host-wait prices: the waiting classes' idle time (less the classes `taken`), part by
    part no more than what the part has left after the wider causes' claims (`other_claims`: a phase, slow steps,
    allocator classes)."""
    out: dict[str, float] = {}
    for entry in wait_classes(timeline, taken):
        for part, ns in entry.idle_by_part.items():
            out[part] = out.get(part, 0.0) + ns
    return {part: min(ns, max(0.0, budget_part(timeline, part)[0] - other_claims.get(part, 0.0)))
            for part, ns in out.items()}


# Of the lock-wait class's host time, this share or more in timed waits that end at one timeout (the launching
# threads', normalize/host_activity.lock_timeouts): the waits are the interpreter lock's
GIL_SHARE = 0.5


def interpreter_lock(timeline, top) -> tuple[str, str] | None:
    """(what the title adds, the advice's first paragraph) where the launching thread's lock waits are mostly timed
    waits that end at one timeout of a few milliseconds: CPython's interpreter lock (GIL), handed over at the switch
    interval while another thread of the process runs Python (host_activity.lock_timeouts); else None."""
    lock = getattr(timeline, "lock_timeouts", None)
    if lock is None or top.name != "lock-wait" or not top.host_ns or lock.ns < GIL_SHARE * top.host_ns:
        return None
    steps = timeline.steps.count if timeline.steps and timeline.steps.count else 0
    count = f"{lock.calls / steps:.0f} a step" if steps else f"{lock.calls:,}"
    timeout = duration_text(lock.timeout_ns)
    return (f"; {lock.at_timeout / lock.calls:.0%} of its timed waits end at {timeout}: Python's interpreter lock",
            f"The launching thread's lock waits are timed waits ({count}, {duration_text(lock.ns)} in the window), "
            f"{lock.at_timeout:,} of them ending at one timeout, {timeout}: the way CPython hands its interpreter lock "
            "(the GIL) between threads, every switch interval (`sys.getswitchinterval()`, 5 ms by default). Another "
            "thread of this process runs Python while the loop waits for the lock, and each launch's Python code "
            "waits too: what the GPU idles here, and more of the launch wait beside it.\n\n")


def lock_shared(timeline) -> bool:
    """Whether the launching thread shares Python's interpreter lock with another thread: interpreter_lock on the wait
    classes' first (by GPU idle time)."""
    classes = sorted(wait_classes(timeline), key=lambda c: -c.idle_ns) if timeline.host_activity is not None else []
    return bool(classes) and interpreter_lock(timeline, classes[0]) is not None


def shared_lock_lead(timeline) -> str:
    """For a finding on the launches: where the launching thread shares the interpreter lock with another thread
    (interpreter_lock on the wait classes' first), a first paragraph saying that launching is slow for that reason
    (blind78_gilthread: launch-overhead first at 27.2 ms a step, its advice a CUDA graph, where moving the thread's
    work to processes saved 28.9); else ''."""
    if not lock_shared(timeline):
        return ""
    timeout = duration_text(timeline.lock_timeouts.timeout_ns)
    return ("The launching thread shares Python's interpreter lock with another thread of its process (its timed lock "
            f"waits end at {timeout}, the switch interval: host-wait's finding). Each launch's Python code waits for "
            "the lock too, so the launches take longer than the loop's own code needs: move that thread's work to "
            "processes first (DataLoader workers, multiprocessing), then see what launching still costs.\n\n")
