"""The time budget: every nanosecond of the analysis window, per GPU, given to exactly one part.

    gpu_compute        a compute kernel ran
    gpu_communication  only communication ran (NCCL kernels, peer copies): the exposed part
    gpu_copy           only copies or memsets ran
    idle_sync          the GPU idled after the host waited in a synchronization: the part of the idle
                       time that the work queued before the wait would have covered, had the host not waited
    idle_launch        the host was issuing CUDA calls all along (calls and framework dispatch between
                       them, gaps under DISPATCH_GAP_NS): launch-bound
    idle_host          the host ran its own code (no CUDA call for DISPATCH_GAP_NS or more, or one long
                       runtime call such as cudaMalloc): data loading, preprocessing, bookkeeping
    idle_other         idle although the next work was already queued (dependencies on other streams or
                       devices, graph scheduling): nothing on the host explains it

Parts are found by a sweep over elementary segments: every start and end of every interval of every
layer (kernels, copies, host calls, the sync-covered and queued stretches of each idle gap) cut the
window into segments, each labelled by the first layer active in it (the order above). Sorting and
cumulative sums do it in O(n log n), vectorized; the part of any sub-window (a step) is then a
difference of prefix sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.normalize.activity import CALL_LOOKBACK_NS, Activity, ascending, distinct, first_by_key, lookup

PARTS = ("gpu_compute", "gpu_communication", "gpu_copy", "idle_other", "idle_sync", "idle_launch", "idle_host")
IDLE_PARTS = PARTS[3:]
# Between two CUDA calls a framework spends tens of microseconds in dispatch (Python, autograd, the
# allocator); a few hundred microseconds without any call is the host doing its own work.
DISPATCH_GAP_NS = 300_000
# A single runtime call this long (cudaMalloc, module loading, cudaHostAlloc) is host work, not a launch.
LONG_CALL_NS = CALL_LOOKBACK_NS
# A kernel starts a few microseconds after its launch call returns; later than this, it was queued behind
# something other than the host.
LAUNCH_LATENCY_NS = 20_000
SYNC_PREFIXES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuCtxSynchronize",
                 "cuStreamSynchronize", "cuEventSynchronize", "cudaStreamWaitEvent")
# Copies the host waits for: the runtime's and driver's synchronous memcpy calls.
SYNC_COPY_PREFIXES = ("cudaMemcpy", "cuMemcpy")
COMMUNICATION_PATTERN = "nccl%"
PEER_COPY_KIND = 10  # CUPTI's Peer-to-Peer memcpy kind, where the export has no ENUM table to say


@dataclass
class Labelled:
    """The window cut into segments, each with its part index into PARTS."""

    starts: np.ndarray
    ends: np.ndarray
    labels: np.ndarray

    def totals(self, start: int | None = None, end: int | None = None) -> dict[str, int]:
        """ns per part, over the whole window or over [start, end) within it."""
        if start is None:
            length = self.ends - self.starts
            sums = np.bincount(self.labels, weights=length, minlength=len(PARTS))
        else:
            sums = self.totals_many(np.array([start]), np.array([end]))[0]
        return {part: int(round(sums[i])) for i, part in enumerate(PARTS)}

    def stretches(self, label: int, limit: int) -> list[tuple[int, int]]:
        """The longest runs of adjacent segments with this label, longest first."""
        mask = self.labels == label
        starts, ends = union(self.starts[mask], self.ends[mask])
        order = np.argsort(ends - starts)[::-1][:limit]
        return [(int(starts[i]), int(ends[i])) for i in order]

    def totals_many(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """ns per part for many sub-windows at once: one row per sub-window, one column per part."""
        out = np.zeros((len(starts), len(PARTS)))
        for index in range(len(PARTS)):
            mask = self.labels == index
            seg_starts, seg_ends = self.starts[mask], self.ends[mask]
            out[:, index] = _covered(seg_starts, seg_ends, ends) - _covered(seg_starts, seg_ends, starts)
        return out


@dataclass
class DeviceBudget:
    device_id: int
    start: int
    end: int
    labelled: Labelled
    processes: list[int]

    def parts(self) -> list[dict]:
        return as_parts(self.labelled.totals(), self.end - self.start)


def as_parts(totals: dict[str, float], window_ns: float) -> list[dict]:
    return [{"part": part, "ns": int(round(totals[part])),
             "share": (totals[part] / window_ns) if window_ns else None} for part in PARTS]


def _covered(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted intervals [starts, ends) that lies before each time in t."""
    if len(starts) == 0:
        return np.zeros(len(t))
    cumulative = np.concatenate(([0], np.cumsum(ends - starts)))
    index = np.searchsorted(starts, t, side="right") - 1
    before = cumulative[np.maximum(index, 0)]
    partial = np.clip(t - starts[np.maximum(index, 0)], 0, (ends - starts)[np.maximum(index, 0)])
    return np.where(index >= 0, before + partial, 0)


def union(starts: np.ndarray, ends: np.ndarray, tolerance: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted islands of the intervals; gaps up to `tolerance` are bridged."""
    if len(starts) == 0:
        return starts, ends
    if not ascending(starts):  # in order already (calls, one stream's kernels): no index, no sorted copies
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        del order
    running_end = np.maximum.accumulate(ends)
    new_island = np.empty(len(starts), dtype=bool)
    new_island[0] = True
    new_island[1:] = starts[1:] > running_end[:-1] + tolerance
    first = np.flatnonzero(new_island)
    last = np.concatenate((first[1:] - 1, [len(starts) - 1]))
    return starts[first], running_end[last]


def clipped(values: np.ndarray, low: int, high: int) -> np.ndarray:
    """np.clip, without the copy when every value lies within already (the usual case: work inside its
    window; a copy of millions of intervals each time is what the budget's peak memory was made of)."""
    if not len(values) or (values.min() >= low and values.max() <= high):
        return values
    return np.clip(values, low, high)


def label_segments(layers: list, window: tuple[int, int]) -> Labelled:
    """Cuts the window at every island edge of every layer; labels each segment by the first active
    layer (layer index = part index), or the last part when none is active. A layer is (starts, ends),
    or a function that returns them (made when needed, freed once merged). Each layer is first merged
    into disjoint islands, so a segment lies wholly inside or outside each: one `searchsorted` per layer."""
    start, end = window
    islands = []
    for layer in layers:
        s, e = layer() if callable(layer) else layer
        s, e = clipped(s, start, end), clipped(e, start, end)
        keep = e > s
        islands.append(union(s, e) if keep.all() else union(s[keep], e[keep]))
        del s, e, keep
    times = distinct(np.concatenate([np.array([start, end], dtype=np.int64)] + [edge for pair in islands for edge in pair]))
    seg_starts, seg_ends = times[:-1], times[1:]
    label = np.full(len(seg_starts), len(PARTS) - 1, dtype=np.int8)
    for index in reversed(range(len(layers))):  # paint from the last layer to the first
        island_starts, island_ends = islands[index]
        if len(island_starts):
            at = np.searchsorted(island_starts, seg_starts, side="right") - 1
            label[(at >= 0) & (seg_starts < island_ends[np.maximum(at, 0)])] = index
    return Labelled(seg_starts, seg_ends, label)


def wait_name_ids(names: dict[int, str | None]) -> set[int]:
    """Name ids of the CUDA calls the host waits in: syncs and synchronous copies."""
    waits = set()
    for name_id, name in names.items():
        if not isinstance(name, str):
            continue
        if name.startswith(SYNC_PREFIXES) or (
                name.startswith(SYNC_COPY_PREFIXES) and "Async" not in name and "Peer" not in name):
            waits.add(name_id)
    return waits


def build_budgets(activity: Activity, call_names: dict[int, str | None], communication_ids: set[int],
                  peer_copy_kinds: set[int] = frozenset({PEER_COPY_KIND})) -> list[DeviceBudget]:
    """One budget per GPU with activity in the window. `call_names` names the calls' name ids;
    `communication_ids` are the kernel name ids of communication (NCCL) kernels, `peer_copy_kinds`
    the memcpy kinds of peer-to-peer copies."""
    start, end = activity.start, activity.end
    kernels = activity.kernels.where(activity.kernels.end > start)
    copies = activity.copies.where(activity.copies.end > start)
    device = np.concatenate((kernels.device_id, copies.device_id))
    if not len(device):
        return []
    act_start = np.concatenate((kernels.start, copies.start))
    act_end = np.concatenate((kernels.end, copies.end))
    kind = np.concatenate((np.isin(kernels.short_name_id, list(communication_ids)).astype(np.int8),
                           np.where(np.isin(copies.copy_kind, list(peer_copy_kinds)), 1, 2).astype(np.int8)))
    act_pid = _at_least_zero(np.concatenate((kernels.pid, copies.pid)))
    act_corr = np.concatenate((kernels.correlation_id, copies.correlation_id))
    calls = activity.calls
    api_start, api_end, api_corr = calls.start, calls.end, calls.correlation_id
    api_pid = _at_least_zero(calls.pid)
    api_wait = np.isin(calls.name_id, list(wait_name_ids(call_names)))
    # Launch call per (process, correlation id): its end is when the host handed over that GPU work.
    launch_keys = api_pid * (1 << 32)
    launch_keys += api_corr
    launches = first_by_key(launch_keys)
    del launch_keys

    budgets = []
    for device_id in distinct(device):
        on = _subset(device == device_id)
        pids = distinct(on(act_pid))
        mine = _subset(np.isin(api_pid, pids) if len(pids) else np.zeros(len(api_pid), dtype=bool))
        first = max(start, int(on(act_start).min())) if start <= -(1 << 61) else start
        last = min(end, int(on(act_end).max())) if end >= (1 << 61) else end
        labelled = _device_labels(
            (on(act_start), on(act_end), on(kind), on(act_pid) * (1 << 32) + on(act_corr)),
            (mine(api_start), mine(api_end), mine(api_wait)), (launches, api_end), (first, last),
            host_traced=bool(len(mine(api_start))))
        budgets.append(DeviceBudget(int(device_id), first, last, labelled, [int(p) for p in pids]))
    return budgets


def _at_least_zero(values: np.ndarray) -> np.ndarray:
    """np.maximum(values, 0), without the copy when no value is below zero."""
    return values if not len(values) or values.min() >= 0 else np.maximum(values, 0)


def _subset(mask: np.ndarray):
    """A function that selects the masked rows of an array, without a copy when all are selected."""
    if mask.all():
        return lambda values: values
    return lambda values: values[mask]


def _device_labels(activity, host, launch_ends, window, host_traced: bool = True) -> Labelled:
    act_start, act_end, kind, act_key = activity
    api_start, api_end, api_wait = host
    start, end = window
    # Idle gaps: the complement of all GPU work in the window.
    busy_s, busy_e = union(clipped(act_start, start, end), clipped(act_end, start, end))
    gap_s = np.concatenate(([start], busy_e))
    gap_e = np.concatenate((busy_s, [end]))
    real = gap_e > gap_s
    gap_s, gap_e = gap_s[real], gap_e[real]
    # Work already queued when the gap ended: find the launch of the work that ends each gap.
    next_key = np.full(len(gap_e), -1, dtype=np.int64)
    if ascending(act_start):
        sorted_starts, sorted_keys = act_start, act_key
    else:
        by_start = np.argsort(act_start, kind="stable")
        sorted_starts, sorted_keys = act_start[by_start], act_key[by_start]
        del by_start
    at = np.searchsorted(sorted_starts, gap_e, side="left")
    has_next = (at < len(sorted_starts))
    next_key[has_next] = sorted_keys[at[has_next]]
    del sorted_starts, sorted_keys
    launches, call_ends = launch_ends
    found = lookup(launches, next_key)
    matched = has_next & (found >= 0)
    launched = np.where(matched, call_ends[np.maximum(found, 0)] if len(call_ends) else 0, np.iinfo(np.int64).max)
    queued = matched & (launched < gap_e - LAUNCH_LATENCY_NS)
    other_s = np.maximum(gap_s, np.where(queued, launched, gap_e))[queued]
    other_e = gap_e[queued]
    # Waits that returned inside a gap: the gap's first part, as long as the work queued before the wait.
    wait_s, wait_e = api_start[api_wait], api_end[api_wait]
    sync_s, sync_e = np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    if len(wait_e) and len(gap_s):
        index = np.searchsorted(gap_s, wait_e, side="right") - 1
        inside = (index >= 0) & (wait_e <= gap_e[np.maximum(index, 0)])
        index, ws, we = index[inside], wait_s[inside], wait_e[inside]
        covered = np.zeros(len(gap_s), dtype=np.int64)
        np.maximum.at(covered, index, we - np.minimum(ws, gap_s[index]))
        covered = np.minimum(covered, gap_e - gap_s)
        has = covered > 0
        sync_s, sync_e = gap_s[has], gap_s[has] + covered[has]
    # Dispatch: short non-waiting calls, bridged over the framework's gaps between them.
    short = ~api_wait & (api_end - api_start < LONG_CALL_NS)
    dispatch_s, dispatch_e = union(api_start[short], api_end[short], DISPATCH_GAP_NS)
    if not host_traced:  # no CUDA calls recorded: no host cause can be told, all idle time is "other"
        other_s, other_e = gap_s, gap_e
    layers = [  # the work's layers selected when labelled, one at a time (each a copy of millions of intervals)
        lambda: (act_start[kind == 0], act_end[kind == 0]),
        lambda: (act_start[kind == 1], act_end[kind == 1]),
        lambda: (act_start[kind == 2], act_end[kind == 2]),
        (other_s, other_e),
        (sync_s, sync_e),
        (dispatch_s, dispatch_e),
    ]
    return label_segments(layers, (start, end))
