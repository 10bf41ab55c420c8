"""What removing one class of host calls (normalize.host_activity) gives back, step by step.

A host call removed from a step shortens the host's side of that step by its time, and the step by at
most the GPU's idle time in it: the GPU's own work stays. So the saving of a class is, summed over the
steady steps, min(host time in the class's calls, GPU idle time) of each step; without steps, the same
over the window. The classes that pace the host (allocator, pinned allocation, module loading) are
claimed by their own checks, so launch-overhead and host-compute leave their idle time to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.checks.base import budget_part

# Classes a check of their own prices: the budget-part checks leave the GPU idle time under them alone.
OWN_CHECK_CLASSES = ("allocator", "pinned-alloc")


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
    window_idle = sum(timeline.host_activity.unexplained.values()) + sum(c.idle_ns for c in activity.classes)
    return ClassCost(entry.calls, entry.host_ns, min(entry.host_ns, window_idle), 0, 0, 0.0, 0.0, entry.top_calls)


def claimed_idle_ns(timeline, part: str) -> float:
    """GPU idle time of a budget part that the own-check classes cover."""
    activity = getattr(timeline, "host_activity", None)
    return activity.idle_ns(part, OWN_CHECK_CLASSES) if activity is not None else 0.0


def claims_by_cause(timeline) -> dict[str, dict[str, float]]:
    """Per wider cause (its check id), the ns of each budget part its finding claims: the allocator and
    pinned-allocation classes' idle time, the excess of steps that stand out (slow-steps), the time of a
    phase that is not the steps (non-step-phase), each with its check's default thresholds. A finding of
    one budget part then prices only what is left, so two findings never sell the same nanoseconds."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.program import allocator_churn, non_step_phase, pinned_alloc_churn, slow_steps

    out: dict[str, dict[str, float]] = {}
    activity = getattr(timeline, "host_activity", None)
    if activity is not None:
        for check in (allocator_churn, pinned_alloc_churn):
            entry = activity.by_class(check.CLASS)
            if entry is not None and entry.idle_ns:
                out[check.ID] = dict(entry.idle_by_part)
        if getattr(timeline, "step_starts", None) is not None:
            out[slow_steps.ID] = slow_steps.excess_by_part(timeline, limits_for(slow_steps))
    if getattr(timeline, "phases", None):
        out[non_step_phase.ID] = non_step_phase.claimed_parts(timeline, limits_for(non_step_phase))
    return {cause: parts for cause, parts in out.items() if any(parts.values())}


def claims(timeline) -> dict[str, float]:
    """ns of each budget part that wider causes claim (claims_by_cause, summed)."""
    out: dict[str, float] = {}
    for parts in claims_by_cause(timeline).values():
        for part, ns in parts.items():
            out[part] = out.get(part, 0.0) + ns
    return out


def unclaimed_part(timeline, part: str, device_id=None) -> tuple[float, float]:
    """(ns, share) of a budget part less what wider causes claim of it (see claims)."""
    ns, share = budget_part(timeline, part, device_id)
    if device_id is not None:
        return ns, share   # one GPU's part: the claims are over the GPUs' mean
    claimed = min(ns, claims(timeline).get(part, 0.0))
    if claimed and ns:
        share *= (ns - claimed) / ns
        ns -= claimed
    return ns, share


def calls_phrase(cost: ClassCost) -> str:
    names = "/".join(name for name, _, _ in cost.top_calls[:3])
    if cost.steps:
        return (f"{cost.calls} {names} calls, in {cost.steps_with_calls} of {cost.steps} steady steps "
                f"({cost.per_step_host_ns / 1e6:.2f} ms of host time in a step that has them)")
    return f"{cost.calls} {names} calls ({cost.host_ns / 1e6:.1f} ms of host time)"
