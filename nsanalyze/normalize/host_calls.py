"""What the host's calls did in the window: NVTX ranges with the GPU work launched inside them,
synchronizations and what they cost, launches shorter than their call, host<->device copies.

Each figure is a sort, a prefix sum or a `searchsorted` join by correlation id over the window's arrays
(normalize.activity), linear or n log n in the export's size; what comes back is sized by names and
ranges, never by launches.
"""

from __future__ import annotations

import numpy as np

from nsanalyze.normalize.activity import (ascending, distinct, finder, first_by_key, group_sums, lookup, pair_keys,
                                          process_of)
from nsanalyze.normalize.window import SYNC_APIS, WindowActivity, ids_where, name_like
from nsanalyze.normalize.checked_rows import VALID_NVTX
from nsanalyze.normalize.host_activity import waits_for_gpu
from nsanalyze.normalize.nvtx_ranges import Ranges
from nsanalyze.normalize.polls import NONE as NO_POLLS, PollLoops
from nsanalyze.normalize.steps import OPERATOR_RANGES, OPERATOR_SHAPES
from nsanalyze.read.nsys import NsysExport

CHUNK = 1 << 20  # calls per look-up step (its temporaries are as long as a chunk, not as the calls)
MAX_RANGES = 200  # range names kept, by wall time (PyTorch's emit_nvtx makes one name per op)
HOST_COPY_KINDS = ("Host-to-Device", "Device-to-Host", "Unified Host-to-Device", "Unified Device-to-Host")
# Copies inside one GPU's memory (a copy engine's memcpy: PyTorch's copy_ of contiguous tensors, torch.cat of parts
# past 2^31 elements), which device-copies counts beside the copy kernels
DEVICE_COPY_KINDS = ("Device-to-Device",)


def _work_per_call(wa: WindowActivity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call of `wa.calls`: the GPU time of the kernels and copies it launched, and the kernel count
    (graph nodes share their launch's correlation id). A call of an unknown process matches any.
    (Sums added into one array per figure, the look-ups in chunks: at 6M calls each temporary is 48 MB.)"""
    calls = wa.calls
    out = []
    for table in (wa.kernels, wa.copies):
        valid = table.correlation_id != -1
        ns = (table.end - table.start)[valid].astype(np.float64)
        per_key = group_sums(pair_keys(table.pid[valid], table.correlation_id[valid]), ns)
        own_ns, own_n = _gather(per_key, pair_keys(calls.pid, calls.correlation_id))
        anon = calls.correlation_id.astype(np.int64)   # the key of (no process, id): -(1 << 32) + id
        anon -= 1 << 32
        group_keys = per_key[0]
        if len(anon) and np.searchsorted(group_keys, anon.min()) < np.searchsorted(group_keys, anon.max(), side="right"):
            anon_ns, anon_n = _gather(per_key, anon)  # (else no work of an unknown process: no key can match)
            own_ns += anon_ns
            own_n += anon_n
            del anon_ns, anon_n
        del per_key, group_keys, anon
        unknown = calls.pid == -1
        if unknown.any():
            any_ns, any_n = _gather(group_sums(table.correlation_id[valid], ns), calls.correlation_id[unknown])
            own_ns[unknown], own_n[unknown] = any_ns, any_n
        out.append((own_ns, own_n))
        del valid, ns, own_ns, own_n
    (kernel_ns, kernels), (copy_ns, _) = out
    no_corr = calls.correlation_id == -1
    for values in (kernel_ns, kernels, copy_ns):
        values[no_corr] = 0
    return kernel_ns, kernels, copy_ns


def _gather(grouped, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sum, count) of a group_sums result at each key, 0 where the key has no group."""
    group_keys, (sums,), counts = grouped
    if not len(group_keys):
        return np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=np.int64)
    out_sums, out_counts = np.empty(len(keys), dtype=sums.dtype), np.empty(len(keys), dtype=counts.dtype)
    position_of = finder(group_keys, len(keys))
    for at in range(0, len(keys), CHUNK):
        index = position_of(keys[at:at + CHUNK])
        found = index >= 0
        np.maximum(index, 0, out=index)
        out_sums[at:at + CHUNK] = np.where(found, sums[index], 0)
        out_counts[at:at + CHUNK] = np.where(found, counts[index], 0)
    return out_sums, out_counts




def operator_ranges(export: NsysExport, wa: WindowActivity) -> tuple[int, int]:
    """(NVTX ranges that start in the window and carry PyTorch's operator annotation (OPERATOR_RANGES), of them those
    whose text holds the inputs' shapes (OPERATOR_SHAPES)): a range pushed around each operator, its text made on
    the host."""
    like = " OR ".join("name LIKE ?" for _ in OPERATOR_RANGES)
    rows = export.query(f"SELECT COUNT(*), SUM(name LIKE ?) FROM nvtx WHERE start >= ? AND start < ? AND ({like}) "
                        f"AND {VALID_NVTX}", (OPERATOR_SHAPES, wa.activity.start, wa.activity.end, *OPERATOR_RANGES))
    return (int(rows[0][0] or 0), int(rows[0][1] or 0)) if rows else (0, 0)


def ranges(nvtx: Ranges, wa: WindowActivity) -> list[dict]:
    """Per NVTX range name (of the export's valid ranges, `nvtx`): wall time, and the GPU time of the work its CPU
    calls launched (calls made while the range was open, by any thread of its process)."""
    starts, ends, tids, names = nvtx.overlapping(wa.activity.start, wa.activity.end)
    n = len(names)
    if not n:
        return []
    codes: dict = {}
    name_code = np.fromiter((codes.setdefault(name, len(codes)) for name in names), np.int64, n)
    pids = process_of(tids)
    # GPU work launched by the calls of each range's process while it was open: prefix sums per process.
    kernel_ns, kernels, copy_ns = np.zeros(n), np.zeros(n), np.zeros(n)
    call_kernel_ns, call_kernels, call_copy_ns = _work_per_call(wa)
    for pid in distinct(pids):
        mine = wa.calls.pid == pid
        mine = None if mine.all() else mine   # one process (the usual case): no copies of its calls
        call_starts = wa.calls.start if mine is None else wa.calls.start[mine]
        order = None if ascending(call_starts) else np.argsort(call_starts, kind="stable")
        call_starts = call_starts if order is None else call_starts[order]
        at = pids == pid
        low = np.searchsorted(call_starts, starts[at], side="left")
        high = np.searchsorted(call_starts, ends[at], side="right")
        del call_starts
        for target, values in ((kernel_ns, call_kernel_ns), (kernels, call_kernels), (copy_ns, call_copy_ns)):
            values = values if mine is None else values[mine]
            values = values if order is None else values[order]
            cumulative = np.empty(len(values) + 1, dtype=np.result_type(np.int64, np.cumsum(values[:1]).dtype))
            cumulative[0] = 0
            np.cumsum(values, out=cumulative[1:])
            target[at] = cumulative[high] - cumulative[low]
            del values, cumulative
    # Depth: ranges open on the same thread when this one starts (ends before starts at one time).
    t = np.concatenate((starts, ends))
    delta = np.concatenate((np.ones(n, np.int64), -np.ones(n, np.int64)))
    thread = np.concatenate((tids, tids))
    order = np.lexsort((np.concatenate((np.arange(n), np.arange(n))), delta, t, thread))
    running = np.empty(2 * n, np.int64)
    sorted_thread, sorted_delta = thread[order], delta[order]
    cumulative = np.cumsum(sorted_delta)
    first = np.concatenate(([True], sorted_thread[1:] != sorted_thread[:-1]))
    base = np.maximum.accumulate(np.where(first, np.arange(2 * n), 0))
    running[order] = cumulative - np.concatenate(([0], cumulative))[base]
    depth = running[:n] - 1
    by_code = {code: name for name, code in codes.items()}
    out = []
    _, inverse = None, name_code  # codes are 0..n-1
    groups = np.arange(len(codes))
    wall = np.bincount(inverse, weights=ends - starts)
    for index in np.argsort(-wall, kind="stable")[:MAX_RANGES]:
        members = inverse == index
        out.append({"name": by_code[int(groups[index])], "instances": int(members.sum()),
                    "wall_ns": int(wall[index]), "first_start": int(starts[members].min()),
                    "last_end": int(ends[members].max()), "kernel_ns": int(kernel_ns[members].sum()),
                    "kernels": int(kernels[members].sum()), "copy_ns": int(copy_ns[members].sum()),
                    "depth": int(depth[members].min())})
    return out


def syncs(wa: WindowActivity, polls: PollLoops = NO_POLLS) -> dict:
    """Host waits: explicit synchronization calls, and what each cost the GPU afterwards; and the poll loops, each
    one wait from its first query to its ready answer (normalize/polls.py)."""
    calls, names = wa.calls, wa.call_names
    explicit_mask = np.isin(calls.name_id, ids_where(names, lambda n: name_like(n, SYNC_APIS)))
    # Implicit syncs: a synchronous device-to-host copy (what `.item()`/`.cpu()` do) blocks the host too.
    copy_kind, dst_kind = _copy_call_kinds(wa)
    d2h = [k for k, label in wa.copy_kinds.items() if label == "Device-to-Host"]
    asynchronous = np.isin(calls.name_id, ids_where(names, lambda n: isinstance(n, str) and "async" in n.lower()))
    named = np.isin(calls.name_id, ids_where(names, lambda n: n is not None))
    implicit_mask = np.isin(copy_kind, d2h) & ((named & ~asynchronous) | (dst_kind == 0))
    waits = explicit_mask | implicit_mask  # the GPU's idle time after a call is asked of these calls only
    idle_after = np.zeros(len(calls), dtype=np.int64)
    idle_after[waits] = wa.idle_after(calls.end[waits])
    duration = calls.end - calls.start

    def grouped(mask, label) -> list[dict]:
        rows: dict = {}
        for name_id, wait, gap in zip(calls.name_id[mask].tolist(), duration[mask].tolist(), idle_after[mask].tolist()):
            row = rows.setdefault(label(names.get(name_id)), {"calls": 0, "wait_ns": 0, "relaunch_gap_ns": 0})
            row["calls"] += 1
            row["wait_ns"] += wait
            row["relaunch_gap_ns"] += gap
        return [{"name": name, **row, "relaunch_gap_ns": max(0, row["relaunch_gap_ns"])} for name, row in rows.items()]

    explicit = sorted(grouped(explicit_mask, lambda n: n.replace("_v3020", "").replace("_v2", "")),
                      key=lambda r: -r["wait_ns"])
    poll_idle = wa.idle_after(polls.end) if len(polls) else np.zeros(0, np.int64)
    loops: dict = {}
    for name_id, wait, gap in zip(polls.name_id.tolist(), (polls.end - polls.start).tolist(), poll_idle.tolist()):
        name = names.get(name_id)
        row = loops.setdefault(name.replace("_v3020", "").replace("_v2", "") if isinstance(name, str) else name,
                               {"calls": 0, "wait_ns": 0, "relaunch_gap_ns": 0})
        row["calls"] += 1
        row["wait_ns"] += wait
        row["relaunch_gap_ns"] += max(0, gap)
    polled = sorted(({"name": name, **row} for name, row in loops.items()), key=lambda r: -r["wait_ns"])
    implicit = sorted(grouped(implicit_mask, lambda n: n), key=lambda r: (r["name"] is not None, str(r["name"])))
    # Several syncs in a row share one idle stretch: count each stretch once, from the first sync's return.
    wait_ends = np.concatenate((calls.end[explicit_mask], calls.end[implicit_mask], polls.end))
    next_start = wait_ends + np.concatenate((idle_after[explicit_mask], idle_after[implicit_mask], poll_idle))
    idle = next_start > wait_ends
    order = np.lexsort((wait_ends[idle], next_start[idle]))
    stretch, first_end = next_start[idle][order], wait_ends[idle][order]
    first = np.concatenate(([True], stretch[1:] != stretch[:-1])) if len(stretch) else np.zeros(0, bool)
    total = int((stretch[first] - first_end[first]).sum())
    result = {"explicit": explicit, "implicit": implicit, "relaunch_gap_ns": total,
              "copy_waits": copy_wait_count(calls, implicit_mask, explicit_mask & np.isin(
                  calls.name_id, ids_where(names, lambda n: isinstance(n, str) and waits_for_gpu(n))))}
    if polled:   # (the key only where there are loops: reports of programs without them read as before)
        result["polls"] = polled
    return result


# A sync call this soon after a copy call of its process is that copy's own wait: PyTorch's blocking `.to()` from
# pageable memory and its `.item()` are a cudaMemcpyAsync, then a cudaStreamSynchronize 0.2-13 us after it
# (blind67_fields: 3,004 pairs, 0.43 us on average); a sync the program calls itself comes through the interpreter,
# later
COPY_WAIT_GAP_NS = 20_000


def copy_wait_count(calls, copy_calls: np.ndarray, sync_calls: np.ndarray) -> int:
    """How many sync calls are a copy call's own wait: the next of these calls in its process after a copy to the
    host, within COPY_WAIT_GAP_NS (critical_path.copy_waits marks them by thread in a replayed block's graph). The host waits once in the pair (blind79_fsynclog: 48 reads back a step, each a
    copy and its sync, read as 97 synchronizations a step when each call was one)."""
    pick = np.flatnonzero(copy_calls | sync_calls)
    if len(pick) < 2:
        return 0
    order = pick[np.lexsort((calls.start[pick], calls.pid[pick]))]
    prev, this = order[:-1], order[1:]
    paired = (sync_calls[this] & copy_calls[prev] & (calls.pid[this] == calls.pid[prev])
              & (calls.start[this] >= calls.end[prev]) & (calls.start[this] - calls.end[prev] <= COPY_WAIT_GAP_NS))
    return int(paired.sum())


def _copy_call_kinds(wa: WindowActivity) -> tuple[np.ndarray, np.ndarray]:
    """Per call: the (least) copy kind and destination memory kind of the copies it issued, -1 for none."""
    copies = wa.copies
    keep = copies.correlation_id != -1
    corr = copies.correlation_id[keep]
    big = np.iinfo(np.int64).max
    kinds = []
    for values in (copies.copy_kind[keep], copies.dst_kind[keep]):
        order = np.lexsort((np.where(values == -1, big, values), corr))
        table = first_by_key(corr[order])
        index = lookup((table[0], order[table[1]]), wa.calls.correlation_id)
        kinds.append(np.where(index >= 0, values[np.maximum(index, 0)] if len(values) else -1, -1))
    return kinds[0], kinds[1]


def is_kernel_launch(name) -> bool:
    """A call that launches one kernel (not a host function, not a graph)."""
    return name_like(name, ("cudaLaunch", "cuLaunch")) and not name_like(name, ("cudaLaunchHostFunc", "cuLaunchHostFunc"))


def launches(export: NsysExport, wa: WindowActivity) -> dict:
    """Kernel launches whose GPU time is shorter than the CPU time of their launch call, per kernel
    name in one pass: how many, their time, and the GPU idle time in front of them. The kernels a chunk at
    a time, their sums per name merged (whole nanoseconds: exact in float64, one pass's sums): at 6M
    launches each per-launch figure was 48 MB, a dozen of them at the stage's peak."""
    kernels, calls = wa.kernels, wa.calls
    sorted_keys, rows = first_by_key(calls.correlation_id)   # one call per id, the first
    position_of = finder(sorted_keys, len(kernels))
    launch_ids = ids_where(wa.call_names, is_kernel_launch)
    starts, ends = wa.busy
    by_id: dict[int, list] = {}   # short name id -> [short launches, kernel ns, launch ns, idle ns, launches]
    for first in range(0, len(kernels), CHUNK):
        part = slice(first, first + CHUNK)
        at = position_of(kernels.correlation_id[part])
        call = np.where(at >= 0, rows[np.maximum(at, 0)] if len(rows) else -1, -1)   # (lookup)
        del at
        matched = call >= 0
        matched[matched] = np.isin(calls.name_id[call[matched]], launch_ids)
        call = call[matched]
        kernel_starts = kernels.start[part][matched]
        k_ns = kernels.end[part][matched] - kernel_starts
        a_ns = calls.end[call] - calls.start[call]
        del call
        short = k_ns < a_ns
        idle_before = np.zeros(len(k_ns), dtype=np.int64)
        if len(starts) > 1:
            at = np.minimum(np.searchsorted(starts, kernel_starts), len(starts) - 1)
            exact = (starts[at] == kernel_starts) & (at > 0)
            idle_before = np.where(exact, starts[at] - ends[np.maximum(at - 1, 0)], 0)
            del at, exact
        name_ids = kernels.short_name_id[part][matched]
        del matched, kernel_starts
        # Each figure zeroed where the kernel is not short, in place.
        np.minimum(a_ns, idle_before, out=idle_before)
        long = ~short
        for values in (k_ns, a_ns, idle_before):
            values[long] = 0
        keys, part_sums, part_counts = group_sums(name_ids, short, k_ns, a_ns, idle_before)
        for key, n, *figures in zip(keys.tolist(), part_counts.tolist(), *(v.tolist() for v in part_sums)):
            entry = by_id.setdefault(key, [0.0, 0.0, 0.0, 0.0, 0])
            for i, value in enumerate(figures):
                entry[i] += value
            entry[4] += n
        del long, values, short, k_ns, a_ns, idle_before, name_ids
    ids = sorted(by_id)   # (name ids ascending, as one pass gave them)
    name_keys = np.array(ids, dtype=np.int64)
    sums = [np.array([by_id[k][i] for k in ids], dtype=np.float64) for i in range(4)]
    counts = np.array([by_id[k][4] for k in ids], dtype=np.int64)
    totals = {"launches": int(counts.sum()), "short_kernels": int(sums[0].sum()), "short_kernel_ns": int(sums[1].sum()),
              "short_launch_api_ns": int(sums[2].sum()), "idle_before_short_ns": int(sums[3].sum())}
    top = [i for i in np.argsort(-sums[0], kind="stable")[:5] if sums[0][i] > 0]
    names = export.strings(name_keys[top])
    totals["top"] = [{"name": names.get(int(name_keys[i])), "launches": int(sums[0][i]),
                      "mean_kernel_ns": sums[1][i] / sums[0][i], "mean_launch_ns": sums[2][i] / sums[0][i]}
                     for i in top]
    return totals


# CUB's device-wide kernels that count or select (kernel short names, SQL LIKE patterns): PyTorch's boolean-mask
# indexing, `nonzero`, `masked_select` and `unique` run them, then read the count back to size their output
# (blind74_masksync: a 4-byte read after each `DeviceReduceSingleTileKernel` of `x[mask]`, an 8-byte one after
# `DeviceReduceByKeyKernel` of `unique`)
SIZE_KERNELS = ("DeviceReduceSingleTileKernel%", "DeviceReduceByKeyKernel%", "DeviceSelectSweepKernel%",
                "DeviceCompactInitKernel%", "DeviceRunLengthEncode%", "DeviceReduceKernel%")
SIZE_READ_BYTES = 8   # a count: an int32 or int64
SIZE_WALK = 64        # kernels looked back from a read for its stream's last (other streams' kernels between)


def size_kernel_ids(export: NsysExport) -> np.ndarray:
    """Name ids of the SIZE_KERNELS in the export's strings."""
    where = " OR ".join("value LIKE ?" for _ in SIZE_KERNELS)
    return np.array([r[0] for r in export.query(f"SELECT id FROM StringIds WHERE {where}", SIZE_KERNELS)],
                    dtype=np.int64)


def _size_reads(wa: WindowActivity, copies, to_host: list, size_ids: np.ndarray) -> int:
    """Reads to the host of at most SIZE_READ_BYTES whose stream's last kernel before them is one of CUB's counting
    kernels (SIZE_KERNELS): the host reading a data-dependent result's size. Each read's kernel is found by walking
    back from the last kernel that started before it (the window's kernels in start order) to one of its stream,
    SIZE_WALK kernels at most: a few reads, never a table's worth of temporaries (a capture of 30M kernels)."""
    kernels = wa.kernels
    reads = np.flatnonzero((copies.bytes <= SIZE_READ_BYTES) & np.isin(copies.copy_kind, to_host))
    if not len(reads) or not len(size_ids) or not len(kernels) or not np.isin(kernels.short_name_id, size_ids).any():
        return 0
    starts = kernels.start
    order = None if ascending(starts) else np.argsort(starts, kind="stable")
    at_start = copies.start[reads]
    pos = np.searchsorted(starts if order is None else starts[order], at_start, side="right") - 1
    read_keys = pair_keys(copies.device_id[reads], copies.stream_id[reads])
    found = np.full(len(reads), -1, dtype=np.int64)
    pending = np.ones(len(reads), dtype=bool)
    for back in range(SIZE_WALK):
        at = pos - back
        look = np.flatnonzero(pending & (at >= 0))
        if not len(look):
            break
        rows = at[look] if order is None else order[at[look]]
        hit = (pair_keys(kernels.device_id[rows], kernels.stream_id[rows]) == read_keys[look]) & \
            (kernels.end[rows] <= at_start[look])
        found[look[hit]] = rows[hit]
        pending[look[hit]] = False
    last = found[found >= 0]
    return int(np.isin(kernels.short_name_id[last], size_ids).sum())


def copies(wa: WindowActivity, size_ids: np.ndarray | None = None) -> dict:
    """Host<->device copies by memory kind and issuing API, with the pageable and synchronous ones listed; and the
    copies inside a GPU's memory, summed."""
    copies = wa.copies
    device_kinds = [k for k, label in wa.copy_kinds.items() if label in DEVICE_COPY_KINDS]
    on_device = (copies.memset == 0) & np.isin(copies.copy_kind, device_kinds)
    on_device_row = {"copy_kind": DEVICE_COPY_KINDS[0], "copies": int(on_device.sum()),
                     "bytes": int(copies.bytes[on_device].sum()),
                     "duration_ns": int((copies.end[on_device] - copies.start[on_device]).sum())}
    host_kinds = [k for k, label in wa.copy_kinds.items() if label in HOST_COPY_KINDS]
    copies = copies.where((copies.memset == 0) & np.isin(copies.copy_kind, host_kinds))
    to_host = [k for k, label in wa.copy_kinds.items() if label == "Device-to-Host"]
    # one byte to the host: a boolean the host tests (`if mask.any():`, an assert, a library's argument check)
    boolean_reads = int(((copies.bytes == 1) & np.isin(copies.copy_kind, to_host)).sum())
    size_reads = _size_reads(wa, copies, to_host, size_ids) if size_ids is not None else 0
    call = lookup(first_by_key(wa.calls.correlation_id), copies.correlation_id)
    api = [wa.call_names.get(n) if i >= 0 else None
           for i, n in zip(call.tolist(), wa.calls.name_id[np.maximum(call, 0)].tolist() if len(wa.calls) else [])]
    duration = copies.end - copies.start
    rows = [{"start": s, "duration_ns": d, "bytes": b, "copy_kind": wa.copy_kinds.get(k),
             "src_kind": wa.memory_kinds.get(src), "dst_kind": wa.memory_kinds.get(dst), "api": a,
             "device_id": dev, "stream_id": None if stream == -1 else stream}
            for s, d, b, k, src, dst, a, dev, stream in zip(
                copies.start.tolist(), duration.tolist(), copies.bytes.tolist(), copies.copy_kind.tolist(),
                copies.src_kind.tolist(), copies.dst_kind.tolist(), api, copies.device_id.tolist(),
                copies.stream_id.tolist())]
    by_kind: dict = {}
    for row in rows:
        entry = by_kind.setdefault((row["copy_kind"], row["src_kind"], row["dst_kind"]), [0, 0, 0])
        entry[0] += 1
        entry[1] += row["bytes"]
        entry[2] += row["duration_ns"]
    by_kind_rows = sorted(({"copy_kind": k[0], "src_kind": k[1], "dst_kind": k[2], "copies": n, "bytes": b,
                            "duration_ns": d} for k, (n, b, d) in by_kind.items()), key=lambda r: -r["duration_ns"])
    pageable = [r for r in rows if "Pageable" in (r["src_kind"], r["dst_kind"])]
    pageable_async = [r for r in pageable if r["api"] is not None and "async" in r["api"].lower()]
    # nsys analyze's cuda_memcpy_sync: synchronous copies, except host-to-device ones of 64 KB or less.
    sync = [r for r in rows if r["api"] is not None and "async" not in r["api"].lower()
            and not (r["copy_kind"] == "Host-to-Device" and r["bytes"] <= 65536)]
    longest = lambda rs: sorted(rs, key=lambda r: -r["duration_ns"])[:50]  # noqa: E731
    # pinned copies large enough to run at the link's rate (per-copy latency is ~10 us): what this machine's
    # link reaches, per direction, as the pageable and transfer checks hold their copies against
    pinned_large = [r for r in rows if "Pinned" in (r["src_kind"], r["dst_kind"]) and r["bytes"] >= PINNED_RATE_MIN_BYTES]
    return {"by_kind": by_kind_rows, "on_device": on_device_row, "boolean_reads": boolean_reads, "size_reads": size_reads,
            "pageable": {"copies": len(pageable), "duration_ns": sum(r["duration_ns"] for r in pageable),
                         "bytes": sum(r["bytes"] for r in pageable), "async_top": longest(pageable_async),
                         "by_direction": _by_direction(pageable)},
            "pinned_large": _by_direction(pinned_large),
            "sync": {"copies": len(sync), "duration_ns": sum(r["duration_ns"] for r in sync), "top": longest(sync),
                     # each copy's device, end and length: the GPU's idle time after it (timeline.sync_idle_after)
                     "spans": [(r["device_id"], r["start"] + r["duration_ns"], r["duration_ns"]) for r in sync]}}


PINNED_RATE_MIN_BYTES = 1 << 20


def _by_direction(rows: list[dict]) -> list[dict]:
    """Copies, bytes and time per copy kind (Host-to-Device, ...), longest first."""
    out: dict = {}
    for row in rows:
        entry = out.setdefault(row["copy_kind"], {"copy_kind": row["copy_kind"], "copies": 0, "bytes": 0, "duration_ns": 0})
        entry["copies"] += 1
        entry["bytes"] += row["bytes"]
        entry["duration_ns"] += row["duration_ns"]
    return sorted(out.values(), key=lambda e: -e["duration_ns"])


CAPTURE_BEGINS, CAPTURE_ENDS = ("cudaStreamBeginCapture", "cuStreamBeginCapture"), ("cudaStreamEndCapture",
                                                                                   "cuStreamEndCapture")


def capture_intervals(calls, names: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(process, start, end) of each stream capture among the calls: a begin-capture call to the end-capture call of
    its process after it. The calls in between record a CUDA graph's nodes: their launches run nothing then."""
    begin = np.isin(calls.name_id, ids_where(names, lambda n: name_like(n, CAPTURE_BEGINS)))
    end = np.isin(calls.name_id, ids_where(names, lambda n: name_like(n, CAPTURE_ENDS)))
    if not begin.any() or not end.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    pid = np.concatenate((calls.pid[begin], calls.pid[end])).astype(np.int64)
    time = np.concatenate((calls.start[begin], calls.end[end]))
    is_end = np.concatenate((np.zeros(int(begin.sum()), bool), np.ones(int(end.sum()), bool)))
    order = np.lexsort((is_end, time, pid))
    pid, time, is_end = pid[order], time[order], is_end[order]
    pairs = np.flatnonzero(~is_end[:-1] & is_end[1:] & (pid[:-1] == pid[1:]))   # a begin, then its process's end
    return pid[pairs], time[pairs], time[pairs + 1]


def captured_launches(wa: WindowActivity) -> int:
    """The window's kernel launch calls made inside a stream capture (capture_intervals): graph nodes recorded, no
    kernel run, so no kernel record is missing for them."""
    calls = wa.calls   # (the window's work calls: its launches; the captures from all its calls)
    pids, starts, ends = capture_intervals(wa.activity.calls, wa.call_names)
    if not len(pids):
        return 0
    launch = np.isin(calls.name_id, ids_where(wa.call_names, is_kernel_launch)) & \
        (calls.start >= wa.activity.start) & (calls.start < wa.activity.end)
    count = 0
    for pid in np.unique(pids).tolist():
        mine = pids == pid
        at = calls.start[launch & (calls.pid == pid)]
        index = np.searchsorted(starts[mine], at, side="right") - 1
        count += int(((index >= 0) & (at < ends[mine][np.maximum(index, 0)])).sum())
    return count


def api_calls(wa: WindowActivity) -> list[dict]:
    """The CUDA calls that took the host's time in the window, by name (version suffixes dropped), costliest
    first: calls and total time. What an export without GPU activity (WSL2) still tells; every name, so that
    counts of one kind (the launches) are whole (the report keeps API_CALLS_SHOWN)."""
    calls = wa.calls
    by_id: dict[int, list] = {}   # name id -> [ns, calls], summed a chunk of calls at a time (whole nanoseconds:
    for at in range(0, len(calls), CHUNK):   # exact in float64, the sums of one pass; five temporaries per
        part = slice(at, at + CHUNK)          # call otherwise, 170 MB at x20)
        starts = calls.start[part]
        inside = (starts >= wa.activity.start) & (starts < wa.activity.end)
        keys, (total,), counts = group_sums(calls.name_id[part][inside], (calls.end[part] - starts)[inside])
        for key, ns, n in zip(keys.tolist(), total.tolist(), counts.tolist()):
            entry = by_id.setdefault(key, [0.0, 0])
            entry[0] += ns
            entry[1] += n
    rows: dict = {}
    for key, (ns, n) in sorted(by_id.items()):   # (name ids ascending, as one pass gave them)
        name = wa.call_names.get(int(key))
        name = name.split("_v")[0] if isinstance(name, str) and "_v" in name else name
        row = rows.setdefault(name, {"name": name, "calls": 0, "total_ns": 0})
        row["calls"] += int(n)
        row["total_ns"] += int(ns)
    return sorted(rows.values(), key=lambda r: -r["total_ns"])
