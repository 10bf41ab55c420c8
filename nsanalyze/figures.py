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
