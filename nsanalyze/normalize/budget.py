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

from nsanalyze.normalize.activity import CALL_LOOKBACK_NS, Activity, ascending, distinct, find, pair_keys

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
CHUNK = 1 << 20  # rows per step where a temporary per row would otherwise be made for millions at once


@dataclass
class Labelled:
    """The window cut into segments, each with its part index into PARTS."""

    starts: np.ndarray
    ends: np.ndarray
    labels: np.ndarray

    def totals(self, start: int | None = None, end: int | None = None) -> dict[str, int]:
        """ns per part, over the whole window or over [start, end) within it."""
        if start is None:   # a chunk at a time (whole nanoseconds: the float sums are exact below 2^53, as
            sums = np.zeros(len(PARTS))   # one bincount's were; no lengths as long as the 12M segments beside)
            for at in range(0, len(self.starts), CHUNK):
                part = slice(at, at + CHUNK)
                sums += np.bincount(self.labels[part], weights=self.ends[part] - self.starts[part],
                                    minlength=len(PARTS))
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
        times = np.concatenate((np.asarray(ends, dtype=np.int64), np.asarray(starts, dtype=np.int64)))
        before = self._before(times)
        return before[:len(ends)] - before[len(ends):]

    def _before(self, times: np.ndarray) -> np.ndarray:
        """ns per part of the segments before each time (a row per time): the segments wholly before it,
        summed per part between the segments the times fall in (one pass over the segments for all
        parts and times, in chunks), and the share of the segment it falls in. Whole nanoseconds: exact."""
        out = np.zeros((len(times), len(PARTS)))
        if not len(self.starts) or not len(times):
            return out
        index = np.searchsorted(self.starts, times, side="right") - 1   # the segment each time falls in
        held = np.maximum(index, 0)
        cuts, cut_of = np.unique(held, return_inverse=True)
        per_bin = np.zeros((len(cuts) + 1) * len(PARTS))
        is_cut = np.zeros(len(self.starts), dtype=bool)
        is_cut[cuts] = True
        cuts_before = 0
        for at in range(0, len(self.starts), CHUNK):   # segment i's bin: the number of cuts at or before it
            stop = min(at + CHUNK, len(self.starts))
            bins = np.cumsum(is_cut[at:stop], dtype=np.int32)
            bins += cuts_before
            cuts_before = int(bins[-1])
            bins *= len(PARTS)
            bins += self.labels[at:stop]
            per_bin += np.bincount(bins, weights=self.ends[at:stop] - self.starts[at:stop], minlength=len(per_bin))
        out[:] = np.cumsum(per_bin.reshape(-1, len(PARTS)), axis=0)[cut_of]   # row k: the segments below cut k
        partial = np.clip(times - self.starts[held], 0, self.ends[held] - self.starts[held])
        out[np.arange(len(times)), self.labels[held]] += partial
        out[index < 0] = 0
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


def union(starts: np.ndarray, ends: np.ndarray, tolerance: int = 0, owned: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted islands of the intervals; gaps up to `tolerance` are bridged. `owned`: the
    arrays are the caller's own copies, which may be overwritten."""
    if len(starts) == 0:
        return starts, ends
    if ascending(starts):  # in order already (calls, one stream's kernels): no index, no sorted copies
        return _merge(starts, ends, tolerance, own_ends=owned)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    del order
    return _merge(starts, ends, tolerance, own_ends=True)


def _merge(starts: np.ndarray, ends: np.ndarray, tolerance: int = 0, own_ends: bool = False):
    """union() of intervals sorted by start. With `own_ends` the ends (a copy of the caller's) are
    overwritten by their running maximum instead of a new array being made; ends already in order
    are their own running maximum."""
    n = len(starts)
    if own_ends:
        running_end = np.maximum.accumulate(ends, out=ends)
    else:
        running_end = ends if ascending(ends) else np.maximum.accumulate(ends)
    new_island = np.empty(n, dtype=bool)
    new_island[0] = True
    if tolerance:  # in chunks: running_end + tolerance is a temporary as long as its chunk
        for at in range(1, n, CHUNK):
            stop = min(n, at + CHUNK)
            np.greater(starts[at:stop], running_end[at - 1:stop - 1] + tolerance, out=new_island[at:stop])
    else:
        np.greater(starts[1:], running_end[:-1], out=new_island[1:])
    island_end = np.empty(n, dtype=bool)  # the last interval of each island: the one before a new island
    island_end[:-1] = new_island[1:]
    island_end[-1] = True
    return starts[new_island], running_end[island_end]


def clipped(values: np.ndarray, low: int, high: int) -> np.ndarray:
    """np.clip, without the copy when every value lies within already (the usual case: work inside its
    window; a copy of millions of intervals each time is what the budget's peak memory was made of)."""
    if not len(values) or (values.min() >= low and values.max() <= high):
        return values
    return np.clip(values, low, high)


def _islands(layer, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """A layer's intervals clipped to the window, empty ones dropped, merged into islands."""
    s, e = layer() if callable(layer) else layer
    owned = callable(layer)  # a selection made for this: a copy of the work's columns
    s, e = clipped(s, start, end), clipped(e, start, end)
    keep = e > s
    if not keep.all():
        s, e, owned = s[keep], e[keep], True
    del keep
    return union(s, e, owned=owned)


def label_segments(layers: list, window: tuple[int, int]) -> Labelled:
    """Cuts the window at every island edge of every layer; labels each segment by the first active
    layer (layer index = part index), or the last part when none is active. A layer is (starts, ends),
    or a function that returns them (made when needed, freed once merged). Each layer is first merged
    into disjoint islands, so a segment lies wholly inside or outside each, and the segments inside an
    island are a run between the indices of its edges among the cut times: a +1 at its start, a -1 at
    its end, a running sum (int8) marks the layer's segments."""
    start, end = window
    islands = [_islands(layer, start, end) for layer in layers]
    times = np.concatenate([np.array([start, end], dtype=np.int64)] + [edge for pair in islands for edge in pair])
    if not ascending(times):
        times.sort()
    first = np.empty(len(times), dtype=bool)  # distinct, in place of a sorted copy and a copy of that
    first[0] = True
    np.not_equal(times[1:], times[:-1], out=first[1:])
    if not first.all():
        times = times[first]
    del first
    segments = len(times) - 1
    label = np.full(segments, len(PARTS) - 1, dtype=np.int8)
    for index in reversed(range(len(layers))):  # paint from the last layer to the first
        island_starts, island_ends = islands[index]
        islands[index] = None
        if not len(island_starts):
            continue
        edges = np.zeros(segments + 1, dtype=np.int8)
        edges[np.searchsorted(times, island_starts)] = 1   # the islands are disjoint: no index repeats
        edges[np.searchsorted(times, island_ends)] = -1
        del island_starts, island_ends
        inside = np.cumsum(edges[:-1], dtype=np.int8).view(bool)  # 1 inside an island, else 0
        del edges
        label[inside] = index
        del inside
    return Labelled(times[:-1], times[1:], label)


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
                  peer_copy_kinds: set[int] = frozenset({PEER_COPY_KIND}), polls=None) -> list[DeviceBudget]:
    """One budget per GPU with activity in the window. `call_names` names the calls' name ids;
    `communication_ids` are the kernel name ids of communication (NCCL) kernels, `peer_copy_kinds`
    the memcpy kinds of peer-to-peer copies; `polls` the window's poll loops (normalize/polls.py), each a wait as a
    sync call is.

    Memory: done in three passes so that no two of the big working sets are held at once (at 6M
    kernels and 11.5M calls each is hundreds of MB): each GPU's idle gaps and the work that ends each;
    then the launch look-up of every call, asked only for those gaps and freed; then each GPU's sweep."""
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
    del kernels, copies
    calls = activity.calls
    api_start, api_end = calls.start, calls.end
    api_pid = _at_least_zero(calls.pid)
    api_wait = np.isin(calls.name_id, list(wait_name_ids(call_names)))

    gpus = []
    for device_id in distinct(device):
        on = _subset(device == device_id)
        pids = distinct(on(act_pid))
        first = max(start, int(on(act_start).min())) if start <= -(1 << 61) else start
        last = min(end, int(on(act_end).max())) if end >= (1 << 61) else end
        gaps = _gaps(on(act_start), on(act_end), on(act_pid), on(act_corr), (first, last))
        gpus.append((int(device_id), on, pids, first, last, list(gaps)))
    del act_pid, act_corr
    if len(gpus) == 1:
        del device  # every row is on this GPU (`on` selects all): the column is not needed again
    # Launch call per (process, correlation id): its end is when the host handed over that GPU work.
    launches = _launch_ends(api_pid, calls.correlation_id, api_end)
    for gpu in gpus:
        gaps = gpu[5]
        gaps[2] = _launched(launches, gaps[2])  # the next work's key replaced by its launch's end
    del launches
    if polls is not None and len(polls):   # each poll loop a wait, from its first query to its ready answer
        api_start, api_end = np.concatenate((api_start, polls.start)), np.concatenate((api_end, polls.end))
        api_pid = np.concatenate((api_pid, polls.pid.astype(api_pid.dtype)))
        api_wait = np.concatenate((api_wait, np.ones(len(polls), bool)))

    budgets = []
    for device_id, on, pids, first, last, gaps in gpus:
        mine = _subset(np.isin(api_pid, pids) if len(pids) else np.zeros(len(api_pid), dtype=bool))
        labelled = _device_labels((on(act_start), on(act_end), on(kind)), (mine(api_start), mine(api_end), mine(api_wait)),
                                  gaps, (first, last), host_traced=bool(len(mine(api_start))))
        budgets.append(DeviceBudget(device_id, first, last, labelled, [int(p) for p in pids]))
    return budgets


def _at_least_zero(values: np.ndarray) -> np.ndarray:
    """np.maximum(values, 0), without the copy when no value is below zero."""
    return values if not len(values) or values.min() >= 0 else np.maximum(values, 0)


def _subset(mask: np.ndarray):
    """A function that selects the masked rows of an array, without a copy when all are selected."""
    if mask.all():
        return lambda values: values
    return lambda values: values[mask]


def _gaps(act_start, act_end, act_pid, act_corr, window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The idle gaps of one GPU's work in the window (the complement of its islands), and the
    (process, correlation id) key of the work that ends each gap (-1: none follows)."""
    start, end = window
    busy_s, busy_e = union(clipped(act_start, start, end), clipped(act_end, start, end))
    gap_s = np.concatenate(([start], busy_e))
    gap_e = np.concatenate((busy_s, [end]))
    del busy_s, busy_e
    real = gap_e > gap_s
    if not real.all():
        gap_s, gap_e = gap_s[real], gap_e[real]
    del real
    # The first work (in start order, the export's order among equal starts) starting at or after each gap's end.
    by_start = None if ascending(act_start) else np.argsort(act_start, kind="stable")
    at = np.searchsorted(act_start if by_start is None else act_start[by_start], gap_e, side="left")
    has_next = at < len(act_start)
    np.minimum(at, len(act_start) - 1, out=at)
    if by_start is not None:
        at = by_start[at]
        del by_start
    next_key = pair_keys(act_pid[at], act_corr[at])
    next_key[~has_next] = -1
    return gap_s, gap_e, next_key


def _launch_ends(call_pid, call_corr, call_end) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct (process, correlation id) keys of the calls, end of each key's first call)."""
    keys = pair_keys(call_pid, call_corr)
    if ascending(keys):
        ends = call_end
    else:
        order = np.argsort(keys, kind="stable")
        keys, ends = keys[order], call_end[order]
        del order
    if len(keys) > 1:
        first = np.empty(len(keys), dtype=bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        if not first.all():
            keys, ends = keys[first], ends[first]
    return keys, ends


def _launched(launches, keys: np.ndarray) -> np.ndarray:
    """End of the launch call of each key (int64's largest where none, or the key is -1)."""
    sorted_keys, ends = launches
    never = np.iinfo(np.int64).max
    if not len(sorted_keys):
        return np.full(len(keys), never, dtype=np.int64)
    at = find(sorted_keys, keys)
    found = at >= 0
    np.maximum(at, 0, out=at)
    return np.where(found, ends[at], never)


def _device_labels(activity, host, gaps, window, host_traced: bool = True) -> Labelled:
    act_start, act_end, kind = activity
    api_start, api_end, api_wait = host
    start, end = window
    gap_s, gap_e, launched = gaps
    gaps.clear()  # the caller's list: the gaps are freed here once used, not when every GPU is done
    # Work already queued when the gap ended: its launch call returned well before.
    queued = launched < gap_e - LAUNCH_LATENCY_NS
    other_s, other_e = np.maximum(gap_s[queued], launched[queued]), gap_e[queued]
    del queued, launched
    # Waits that returned inside a gap: the gap's first part, as long as the work queued before the wait.
    wait_s, wait_e = api_start[api_wait], api_end[api_wait]
    sync_s, sync_e = np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    if len(wait_e) and len(gap_s):
        index = np.searchsorted(gap_s, wait_e, side="right") - 1
        inside = (index >= 0) & (wait_e <= gap_e[np.maximum(index, 0)])
        index, ws, we = index[inside], wait_s[inside], wait_e[inside]
        touched = distinct(index)  # the gaps a wait returned in, in gap order
        covered = np.zeros(len(touched), dtype=np.int64)
        np.maximum.at(covered, np.searchsorted(touched, index), we - np.minimum(ws, gap_s[index]))
        covered = np.minimum(covered, gap_e[touched] - gap_s[touched])
        has = covered > 0
        sync_s = gap_s[touched][has]
        sync_e = sync_s + covered[has]
        del index, inside, ws, we, touched, covered, has
    del wait_s, wait_e
    # Dispatch: short non-waiting calls, bridged over the framework's gaps between them.
    short = ~api_wait & (api_end - api_start < LONG_CALL_NS)
    dispatch_s, dispatch_e = union(api_start[short], api_end[short], DISPATCH_GAP_NS, owned=True)
    del short
    if not host_traced:  # no CUDA calls recorded: no host cause can be told, all idle time is "other"
        other_s, other_e = gap_s, gap_e
    del gap_s, gap_e

    def work(part: int):  # the work's layers selected when labelled, one at a time (each a copy of millions of intervals)
        return lambda: (act_start[kind == part], act_end[kind == part])

    layers = [work(0), work(1), work(2), (other_s, other_e), (sync_s, sync_e), (dispatch_s, dispatch_e)]
    del other_s, other_e, sync_s, sync_e, dispatch_s, dispatch_e
    return label_segments(layers, (start, end))
