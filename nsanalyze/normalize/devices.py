"""What each GPU and stream did in the window: busy time, kernels, copies, communication, idle gaps."""

from __future__ import annotations

import re

import numpy as np

from nsanalyze.normalize.activity import ascending, group_sums, largest, pair_keys
from nsanalyze.normalize.window import WindowActivity
from nsanalyze.normalize.checked_rows import VALID_NVTX
from nsanalyze.normalize.nvtx_ranges import ranges_around
from nsanalyze.read.nsys import NsysExport

TOP_GAPS = 10
# Communication kernels (NCCL's device kernels across versions) and peer copies.
PEER_COPY_KINDS = ("Peer-to-Peer",)
# NCCL's point-to-point kernels (send and receive: pipeline stages, all-to-all), by name across versions
# (`ncclDevKernel_SendRecv`, `ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t`, `ncclSendRecvKernel_copy_i8`), not collectives
POINT_TO_POINT = re.compile(r"SendRecv|_Send|_Recv")


def devices(export: NsysExport, wa: WindowActivity, comm_ids: np.ndarray, exposed_ns: dict[int, int]) -> list[dict]:
    """Per GPU: busy time, kernels, copies, communication; `exposed_ns` is each GPU's exposed
    communication, the budget's gpu_communication part (found by its sweep in linear time)."""
    names = {d.device_id: d.name for d in export.devices}
    kernels, copies = wa.kernels, wa.copies
    nccl = np.isin(kernels.short_name_id, comm_ids)
    comm_names = export.strings(comm_ids) if len(comm_ids) else {}
    p2p_ids = [i for i, name in comm_names.items() if name and POINT_TO_POINT.search(name)]
    p2p = nccl & np.isin(kernels.short_name_id, p2p_ids) if p2p_ids else np.zeros(len(nccl), bool)
    peer = np.isin(copies.copy_kind, [k for k, label in wa.copy_kinds.items() if label in PEER_COPY_KINDS]) \
        & (copies.memset == 0)
    rows = []
    for device_id, (starts, ends) in sorted(wa.islands.items()):
        on_k, on_c = kernels.device_id == device_id, copies.device_id == device_id
        k_ns, c_ns = kernels.end - kernels.start, copies.end - copies.start
        comm_kernels, comm_copies = on_k & nccl, on_c & peer
        kernel_comm_ns = int(k_ns[comm_kernels].sum())
        has_comm = bool(comm_kernels.any() or comm_copies.any())
        row = {"device_id": device_id, "first_ns": int(starts[0]), "last_ns": int(ends[-1]),
               "gpu_busy_ns": int((ends - starts).sum()), "kernel_ns": int(k_ns[on_k].sum()),
               "memcpy_ns": int(c_ns[on_c & (copies.memset == 0)].sum()),
               "memset_ns": int(c_ns[on_c & (copies.memset == 1)].sum()), "name": names.get(device_id)}
        row["span_ns"] = row["last_ns"] - row["first_ns"]
        row["gpu_idle_ns"] = row["span_ns"] - row["gpu_busy_ns"]
        row["communication_ns"] = kernel_comm_ns + int(c_ns[comm_copies].sum())
        row["exposed_communication_ns"] = exposed_ns.get(device_id, 0) if has_comm else 0
        row["communication_kernels"] = int(comm_kernels.sum() + comm_copies.sum())
        row["communication_wait_ns"] = _beyond_fast_launches(kernels.short_name_id[comm_kernels], k_ns[comm_kernels])
        row["compute_kernel_ns"] = row["kernel_ns"] - kernel_comm_ns
        row["point_to_point_ns"] = int(k_ns[comm_kernels & p2p].sum())
        # every communication kernel on the stream that runs most of the compute kernels' time: one stream runs its
        # kernels one after another, so none of that communication can overlap that compute (a communication stream
        # that also runs a copy or a cast kernel is not the compute's)
        comm_streams = np.unique(kernels.stream_id[comm_kernels])
        compute = on_k & ~nccl
        streams, per_stream = np.unique(kernels.stream_id[compute], return_inverse=True)
        main = streams[np.argmax(np.bincount(per_stream, weights=k_ns[compute]))] if len(streams) else None
        row["communication_on_compute_streams"] = bool(len(comm_streams)) and main is not None and \
            bool((comm_streams == main).all())
        rows.append(row)
    return rows


# A collective's launches of one kind that take their 10th-percentile time or less do not wait for another
# rank; what the others take beyond it is waiting (for a rank arriving later), at least this many launches.
FAST_PERCENTILE, MIN_COLLECTIVES = 10, 10


def _beyond_fast_launches(name_ids: np.ndarray, durations: np.ndarray) -> int:
    """Per kind of collective (kernel name), its time beyond its launches' 10th-percentile duration: in a
    synchronous collective, the time a rank waits for the others to arrive. One rank's export sees only it."""
    total = 0
    for name in np.unique(name_ids):
        mine = durations[name_ids == name]
        if len(mine) >= MIN_COLLECTIVES:
            total += int(mine.sum() - len(mine) * np.percentile(mine, FAST_PERCENTILE))
    return total


def device_kernel_breakdown(export: NsysExport, wa: WindowActivity) -> list[dict]:
    """Per device and kernel name: time, for finding where a slow device spends its extra time."""
    kernels = wa.kernels
    key = pair_keys(kernels.device_id, kernels.short_name_id)
    keys, (ns,), counts = group_sums(key, kernels.end - kernels.start)
    names = export.strings(keys & 0xFFFFFFFF)
    return [{"device_id": int(k >> 32), "name": names[int(k & 0xFFFFFFFF)], "launches": int(n),
             "duration_ns": int(t)} for k, t, n in zip(keys, ns, counts) if int(k & 0xFFFFFFFF) in names]


def _gap_groups(wa: WindowActivity) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(device id, starts, ends) of the idle gaps between islands: per GPU, or over the one GPU (-1: no
    device). Views of the islands, not copies."""
    groups = wa.islands.items() if len(wa.islands) > 1 else [(next(iter(wa.islands), None), wa.busy)]
    return [(-1 if device_id is None else int(device_id), e[:-1], s[1:]) for device_id, (s, e) in groups if len(s) > 1]


def _longest_gaps(groups, count: int) -> list[tuple[int, int, int]]:
    """(device id, start, end) of the `count` longest gaps over all groups, longest first, ties in group then
    time order: largest() over the groups' gaps one after the other, without joining them (each group's
    lengths made in turn)."""
    candidates = []   # (length, group, position)
    for g, (_, starts, ends) in enumerate(groups):
        lengths = ends - starts
        candidates += [(int(lengths[i]), g, int(i)) for i in largest(lengths, count)]
        del lengths
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [(groups[g][0], int(groups[g][1][i]), int(groups[g][2][i])) for _, g, i in candidates[:count]]


def gaps(export: NsysExport, wa: WindowActivity) -> list[dict]:
    top = _longest_gaps(_gap_groups(wa), TOP_GAPS)
    calls = wa.calls
    # Calls in start order (as read): those that may overlap a gap start at most the longest call's
    # length before it, a slice found by binary search instead of a test of every call per gap.
    in_order = ascending(calls.start)
    longest = int((calls.end - calls.start).max()) if len(calls) and in_order else 0
    gaps = []
    around = ranges_around(export, [(s, e) for _, s, e in top], VALID_NVTX)
    for (device, gap_start, gap_end), ranges in zip(top, around):
        gap = {"device_id": None if device == -1 else device, "start": gap_start, "end": gap_end,
               "duration_ns": gap_end - gap_start}
        # What the host was doing: the CUDA calls overlapping the gap, longest overlap first.
        near = slice(int(np.searchsorted(calls.start, gap_start - longest, side="left")),
                     int(np.searchsorted(calls.start, gap_end, side="left"))) if in_order else slice(None)
        call_start, call_end, call_name = calls.start[near], calls.end[near], calls.name_id[near]
        during = (call_start < gap_end) & (call_end > gap_start)
        overlap = np.minimum(call_end[during], gap_end) - np.maximum(call_start[during], gap_start)
        by_name: dict = {}
        for name_id, ns in zip(call_name[during].tolist(), overlap.tolist()):
            entry = by_name.setdefault(wa.call_names.get(name_id), [0, 0])
            entry[0] += 1
            entry[1] += ns
        gap["host_calls"] = [{"name": name, "calls": n, "overlap_ns": ns} for name, (n, ns) in
                             sorted(by_name.items(), key=lambda item: -item[1][1])[:3]]
        gap["nvtx_range"] = min(ranges, key=lambda r: r.duration_ns).name if ranges else None   # the innermost
        gaps.append(gap)
    return gaps


def gap_histogram(wa: WindowActivity, bucket_edges_ns=(1_000, 10_000, 100_000, 1_000_000)) -> dict:
    labels = [f"< {e / 1000:g} us" for e in bucket_edges_ns] + [f">= {bucket_edges_ns[-1] / 1000:g} us"]
    counts, idle = np.zeros(len(labels), dtype=np.int64), np.zeros(len(labels))
    for _, starts, ends in _gap_groups(wa):   # each group's gaps in turn (integer sums: exact in any order)
        lengths = ends - starts
        buckets = np.searchsorted(np.array(bucket_edges_ns), lengths, side="right")
        counts += np.bincount(buckets, minlength=len(labels))
        idle += np.bincount(buckets, weights=lengths, minlength=len(labels))
    return {label: {"gaps": int(counts[i]), "idle_ns": int(idle[i])} for i, label in enumerate(labels)}


def streams(wa: WindowActivity) -> list[dict]:
    kernels, copies = wa.kernels, wa.copies
    rows: dict = {}
    for table, count_key, ns_key in ((kernels, "kernels", "kernel_ns"), (copies, "copies", "copy_ns")):
        key = pair_keys(table.device_id, table.stream_id.astype(np.int64) & 0xFFFFFFFF)
        keys, (ns,), counts = group_sums(key, table.end - table.start)
        for k, t, n in zip(keys.tolist(), ns, counts):
            stream = k & 0xFFFFFFFF
            row = rows.setdefault(k, {"device_id": k >> 32, "stream_id": None if stream == 0xFFFFFFFF else stream,
                                      "kernels": 0, "kernel_ns": 0, "copies": 0, "copy_ns": 0})
            row[count_key], row[ns_key] = int(n), int(t)
    return sorted(rows.values(), key=lambda r: -(r["kernel_ns"] + r["copy_ns"]))
