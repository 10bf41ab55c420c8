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
                         in_steps / len(idle), entry.top_calls)
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


def calls_phrase(cost: ClassCost) -> str:
    names = "/".join(name for name, _, _ in cost.top_calls[:3])
    if cost.steps:
        return (f"{plural(cost.calls, names + ' call')}, in {cost.steps_with_calls} of {plural(cost.steps, 'steady step')} "
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


def wait_classes(timeline) -> list:
    """The window's host-activity classes of waits that cover GPU idle time."""
    activity = timeline.host_activity
    if activity is None:
        return []
    return [c for c in activity.classes if c.name in WAIT_CLASSES and c.idle_ns]


def wait_parts(timeline, other_claims: dict[str, float]) -> dict[str, float]:
    """ns per budget part that host-wait prices: the waiting classes' idle time, part by part no more than what
    the part has left after the wider causes' claims (`other_claims`: a phase, slow steps, allocator classes)."""
    out: dict[str, float] = {}
    for entry in wait_classes(timeline):
        for part, ns in entry.idle_by_part.items():
            out[part] = out.get(part, 0.0) + ns
    return {part: min(ns, max(0.0, budget_part(timeline, part)[0] - other_claims.get(part, 0.0)))
            for part, ns in out.items()}
