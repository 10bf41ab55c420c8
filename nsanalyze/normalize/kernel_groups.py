"""Launches grouped into kernels: one entry per (kernel, launch configuration, NVTX range).

A training step launches the same library kernels hundreds of times; a finding repeated per launch
buries everything else. A group is what a user changes in one place: one kernel, launched with one
grid and block shape from one framework op (NVTX range). Its time is the sum over its launches.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

SHAPE = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


@dataclass
class KernelGroup:
    id: int
    name: str
    demangled: str | None
    nvtx_range: str | None
    launch_ids: list[int]
    durations_ns: list[float]
    representative: int        # the launch whose metrics stand for the group: the median-duration one

    @property
    def total_ns(self) -> float:
        return float(sum(self.durations_ns))

    def summary(self) -> dict:
        durations = self.durations_ns
        return {"launches": len(durations), "total_ns": self.total_ns, "mean_ns": self.total_ns / len(durations),
                "min_ns": min(durations), "max_ns": max(durations),
                "stddev_ns": statistics.pstdev(durations) if len(durations) > 1 else 0.0,
                "launch_ids": list(self.launch_ids)}


def group_launches(rows: list[dict]) -> tuple[list[KernelGroup], dict[int, int]]:
    """Groups in order of first launch, and the group id of each launch id."""
    groups: dict[tuple, KernelGroup] = {}
    group_of: dict[int, int] = {}
    for row in rows:
        key = (row.get("demangled") or row.get("name"), row.get("nvtx_range"), *(row.get(c) for c in SHAPE))
        group = groups.get(key)
        if group is None:
            group = groups[key] = KernelGroup(len(groups), row.get("name") or "?", row.get("demangled"),
                                              row.get("nvtx_range"), [], [], -1)
        group.launch_ids.append(row["id"])
        group.durations_ns.append(float(row.get("duration_ns") or 0.0))
        group_of[row["id"]] = group.id
    for group in groups.values():
        order = sorted(range(len(group.durations_ns)), key=lambda i: group.durations_ns[i])
        group.representative = group.launch_ids[order[len(order) // 2]]
    return list(groups.values()), group_of
