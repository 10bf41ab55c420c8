"""Per-step and per-instance figures of a report, computed once for every command that compares runs
(`diff`, `batch`'s history database, `trend`): the same range reads the same number everywhere."""

from __future__ import annotations

from nsanalyze.normalize.steps import normalize_name


def ranges_per_instance(ranges: list[dict]) -> dict[str, dict]:
    """NVTX ranges of a report's timeline by normalized name (`step 17` -> `step N`): instances, host (wall)
    time and GPU time (kernels and copies the range's calls launched) per instance: a capture with more
    steps is not slower, and a step whose time is copies is not 0."""
    grouped: dict[str, dict] = {}
    for r in ranges:
        name = normalize_name(str(r["name"]))
        entry = grouped.setdefault(name, {"name": name, "instances": 0, "host_ns": 0.0, "gpu_ns": 0.0})
        entry["instances"] += r.get("instances") or 0
        entry["host_ns"] += r.get("wall_ns") or 0
        entry["gpu_ns"] += (r.get("kernel_ns") or 0) + (r.get("copy_ns") or 0)
    for entry in grouped.values():
        entry["host_ns"] /= max(entry["instances"], 1)
        entry["gpu_ns"] /= max(entry["instances"], 1)
    return grouped


def median_noise(steps: dict) -> float:
    """The relative noise of a run's step time from its own steps: one robust standard deviation of a
    step (1.4826 x the MAD; outliers such as a queue-draining step do not widen it), over the median.
    Not the standard error of the median: steps are not independent draws (a launch-bound loop drifts
    by several percent between the first and second half of one run), so a narrower band would call
    that drift a regression."""
    if not steps.get("median_ns"):
        return 0.0
    return 1.4826 * steps.get("mad_ns", 0.0) / steps["median_ns"]


def steps_in_window(timeline: dict | None) -> float:
    """How many steps an nsys report's window totals cover (1 without steps): kernel totals divided by it
    compare per step, so a capture with more steps is not slower. One rule for diff, batch and trend."""
    steps = (timeline or {}).get("steps")
    return float(steps["count"]) if steps and steps.get("count") else 1.0
