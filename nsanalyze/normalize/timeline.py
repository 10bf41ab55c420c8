"""The nsys timeline within an analysis window: busy and idle time, gaps, streams, NVTX ranges,
synchronization, launches, copies; GPU metrics come from normalize.gpu_metrics.

The window's kernels, copies and CUDA calls are read once into arrays (normalize.activity); each
figure below is a sort, a prefix sum or a `searchsorted` join by correlation id over them, linear or
n log n in the export's size. What comes back as Python objects is sized by names, streams, ranges
or the top-N gaps, never by the number of kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsanalyze.normalize.activity import (Activity, Columns, distinct, first_by_key, group_sums, lookup,
                                          process_of, read_activity)
from nsanalyze.normalize.budget import (COMMUNICATION_PATTERN, IDLE_PARTS, PARTS, SYNC_PREFIXES, as_parts,
                                        build_budgets, union)
from nsanalyze.normalize.gpu_metrics import busy_clock, gpu_metrics, read_samples
from nsanalyze.normalize.phases import find_phases
from nsanalyze.normalize.steps import Steps, find_launch_pattern, find_steps, project_on_gpu
from nsanalyze.read.nsys import GRAPH_NAME_BASE, NsysExport

FOREVER = 2**62
TOP_GAPS = 10
MAX_RANGES = 200  # range names kept, by wall time (PyTorch's emit_nvtx makes one name per op)
SYNC_APIS = SYNC_PREFIXES  # the calls the host waits in (one list with the budget's)
# Communication kernels (NCCL's device kernels across versions) and peer copies.
PEER_COPY_KINDS = ("Peer-to-Peer",)
# CUDA calls that put work on the GPU or wait for it (prefixes, matched as SQL's LIKE would).
WORK_CALL_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cuMemcpy",
                      "cudaMemset", "cuMemset", "cudaMemPrefetch", "cuMemPrefetch", *SYNC_APIS)
LONG_CALL_NS = 50_000  # calls this long count whatever they are: they show where the host was
HOST_COPY_KINDS = ("Host-to-Device", "Device-to-Host", "Unified Host-to-Device", "Unified Device-to-Host")


@dataclass
class Window:
    start: int
    end: int
    description: str
    kind: str = "capture"  # steady | capture | nvtx-range | skip-first

    def params(self) -> dict:
        return {"window_start": self.start, "window_end": self.end}


@dataclass
class Timeline:
    window: Window
    summary: dict
    devices: list[dict]
    streams: list[dict]
    ranges: list[dict]
    gaps: list[dict]
    syncs: dict
    launches: dict
    copies: dict
    kernel_summary: list[dict] = field(default_factory=list)
    device_kernels: list[dict] = field(default_factory=list)
    gpu_metrics: dict | None = None
    busy_clock: dict | None = None
    budget: list[dict] | None = None       # [{part, ns, share}] over the window (mean over GPUs)
    steps: dict | None = None              # the steady steps (normalize.steps) and their median budget
    host_stretches: list[dict] = field(default_factory=list)  # longest idle_host stretches, with context
    notes: list[str] = field(default_factory=list)  # what the export cannot show (graph-level traces)
    phases: list[dict] = field(default_factory=list)  # top-level NVTX range groups over the capture (normalize.phases)
    activity: Activity | None = None       # the arrays read (for the kernel summary; dropped after it)


def _rows(export: NsysExport, sql: str, params: dict) -> list[dict]:
    return [dict(r) for r in export.query(sql, params)]


def choose_window(export: NsysExport, skip_first_ns: int | None, nvtx_range: str | None,
                  mode: str = "steady", steps: Steps | None = None) -> Window:
    """The analysis window: the user's NVTX range or skip, else the steady steps, else the capture."""
    first = export.first_gpu_ns
    if first is None:
        first = export.scalar("SELECT MIN(start) FROM nvtx") or 0
    start, end, parts, kind = -FOREVER, FOREVER, [], "capture"
    if nvtx_range:
        row = export.query("SELECT MIN(start), MAX(end), COUNT(*) FROM nvtx WHERE name = ?", (nvtx_range,))[0]
        if not row[2]:
            from nsanalyze.errors import InputError
            names = [r[0] for r in export.query("SELECT DISTINCT name FROM nvtx ORDER BY name LIMIT 20")]
            raise InputError(export.path, f"no NVTX range named {nvtx_range!r} (ranges: {', '.join(map(str, names)) or 'none'})")
        start, end = row[0], row[1]
        parts.append(f"NVTX range '{nvtx_range}' ({row[2]} instance(s))")
        kind = "nvtx-range"
    if skip_first_ns:
        start = max(start, min(first + skip_first_ns, FOREVER - 1))  # a huge skip leaves an empty window
        parts.append(f"skipping the first {skip_first_ns / 1e6:g} ms of GPU activity")
        kind = "nvtx-range" if nvtx_range else "skip-first"
    if kind == "capture" and mode == "steady" and steps is None:
        pattern = find_launch_pattern(export)
        if pattern is not None:
            return Window(pattern.start, pattern.end,
                          f"steady state: from the first of {pattern.launches} launches of '{pattern.kernel}' "
                          f"(no step-like NVTX range; the loop read off its most launched kernel); "
                          f"{max(0, pattern.start - first) / 1e9:.2f} s of GPU start-up before it left out", "steady")
    if kind == "capture" and mode == "steady" and steps is not None:
        capture_start = export.first_call_ns
        capture_start = min(capture_start, first) if capture_start is not None else first
        start, end = int(steps.starts[0]), int(steps.ends[-1])
        startup = max(0, start - capture_start)
        warm = f" and {steps.warmup} warm-up step{'s' if steps.warmup != 1 else ''}" if steps.warmup else ""
        clock = " on the GPU's clock" if steps.clock == "gpu" else " (host ranges: the steps launched no GPU work)"
        return Window(start, end, f"steady state: steps {steps.first_index}-{steps.total - 1} of '{steps.name}'{clock}; "
                                  f"{startup / 1e9:.2f} s before them (start-up{warm}) left out", "steady")
    if kind == "capture":
        parts.append("the whole capture" + (" (no repeating step-like NVTX range found)" if mode == "steady" else ""))
    return Window(start, end, "; ".join(parts), kind)


@dataclass
class WindowActivity:
    """What the projections below share: the window's work and calls as arrays, and the islands of
    GPU work (the union of kernel and copy intervals) per GPU and over all GPUs."""

    activity: Activity
    kernels: Columns           # kernels that start in the window
    copies: Columns            # copies and memsets that start in the window
    calls: Columns             # the calls that matter: work, waits and long calls overlapping the window
    call_names: dict           # name id -> name of every call read
    copy_kinds: dict           # memcpy kind id -> label
    memory_kinds: dict         # memory kind id -> label
    islands: dict              # device id -> (starts, ends)
    busy: tuple                # (starts, ends) of the islands over all GPUs

    def idle_after(self, t: np.ndarray) -> np.ndarray:
        """GPU idle time after host time t: 0 when some GPU work runs at t, else the wait for the next."""
        starts, ends = self.busy
        if not len(starts):
            return np.zeros(len(t), dtype=np.int64)
        before = np.searchsorted(starts, t, side="right") - 1
        running = (before >= 0) & (ends[np.maximum(before, 0)] > t)
        after = np.searchsorted(starts, t, side="left")
        wait = np.where(after < len(starts), starts[np.minimum(after, len(starts) - 1)] - t, 0)
        return np.where(running, 0, wait)


def _like(name, prefixes) -> bool:
    """SQL's LIKE 'prefix%': case-insensitive for ASCII."""
    return isinstance(name, str) and name.lower().startswith(tuple(p.lower() for p in prefixes))


def _ids(names: dict, test) -> np.ndarray:
    return np.array([i for i, name in names.items() if test(name)], dtype=np.int64)


def window_activity(export: NsysExport, activity: Activity, call_names: dict) -> WindowActivity:
    kernels, copies = activity.in_window(activity.kernels), activity.in_window(activity.copies)
    calls = activity.calls
    wanted = np.isin(calls.name_id, _ids(call_names, lambda n: _like(n, WORK_CALL_PREFIXES)))
    calls = calls.where((calls.end >= activity.start) & (wanted | (calls.end - calls.start >= LONG_CALL_NS)))
    copy_kinds = {r[0]: r[1] for r in export.query("SELECT id, label FROM memcpy_kinds")}
    memory_kinds = {r[0]: r[1] for r in export.query("SELECT id, label FROM memory_kinds")}
    device = np.concatenate((kernels.device_id, copies.device_id))
    starts = np.concatenate((kernels.start, copies.start))
    ends = np.concatenate((kernels.end, copies.end))
    islands = {int(d): union(starts[device == d], ends[device == d]) for d in distinct(device)}
    if len(islands) == 1:
        busy = next(iter(islands.values()))
    else:
        busy = union(np.concatenate([s for s, _ in islands.values()] or [np.zeros(0, np.int64)]),
                     np.concatenate([e for _, e in islands.values()] or [np.zeros(0, np.int64)]))
    return WindowActivity(activity, kernels, copies, calls, call_names, copy_kinds, memory_kinds, islands, busy)


def _devices(export: NsysExport, wa: WindowActivity, comm_ids: np.ndarray, exposed_ns: dict[int, int]) -> list[dict]:
    """Per GPU: busy time, kernels, copies, communication; `exposed_ns` is each GPU's exposed
    communication, the budget's gpu_communication part (found by its sweep in linear time)."""
    names = {d.device_id: d.name for d in export.devices}
    kernels, copies = wa.kernels, wa.copies
    nccl = np.isin(kernels.short_name_id, comm_ids)
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
        row["compute_kernel_ns"] = row["kernel_ns"] - kernel_comm_ns
        rows.append(row)
    return rows


def device_kernel_breakdown(export: NsysExport, wa: WindowActivity) -> list[dict]:
    """Per device and kernel name: time, for finding where a slow device spends its extra time."""
    kernels = wa.kernels
    key = kernels.device_id * (1 << 32) + kernels.short_name_id
    keys, (ns,), counts = group_sums(key, kernels.end - kernels.start)
    names = export.strings(keys & 0xFFFFFFFF)
    return [{"device_id": int(k >> 32), "name": names[int(k & 0xFFFFFFFF)], "launches": int(n),
             "duration_ns": int(t)} for k, t, n in zip(keys, ns, counts) if int(k & 0xFFFFFFFF) in names]


def _gap_arrays(wa: WindowActivity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device id, start, end) of the idle gaps between islands: per GPU, or over the one GPU."""
    devices, starts, ends = [], [], []
    groups = wa.islands.items() if len(wa.islands) > 1 else [(next(iter(wa.islands), None), wa.busy)]
    for device_id, (s, e) in groups:
        if len(s) > 1:
            starts.append(e[:-1])
            ends.append(s[1:])
            devices.append(np.full(len(s) - 1, -1 if device_id is None else device_id))
    if not starts:
        return (np.zeros(0, np.int64),) * 3
    return np.concatenate(devices), np.concatenate(starts), np.concatenate(ends)


def _gaps(export: NsysExport, wa: WindowActivity) -> list[dict]:
    device, starts, ends = _gap_arrays(wa)
    top = np.argsort(-(ends - starts), kind="stable")[:TOP_GAPS]
    calls = wa.calls
    gaps = []
    for i in top:
        gap = {"device_id": None if device[i] == -1 else int(device[i]), "start": int(starts[i]),
               "end": int(ends[i]), "duration_ns": int(ends[i] - starts[i])}
        # What the host was doing: the CUDA calls overlapping the gap, longest overlap first.
        during = (calls.start < ends[i]) & (calls.end > starts[i])
        overlap = np.minimum(calls.end[during], ends[i]) - np.maximum(calls.start[during], starts[i])
        by_name: dict = {}
        for name_id, ns in zip(calls.name_id[during].tolist(), overlap.tolist()):
            entry = by_name.setdefault(wa.call_names.get(name_id), [0, 0])
            entry[0] += 1
            entry[1] += ns
        gap["host_calls"] = [{"name": name, "calls": n, "overlap_ns": ns} for name, (n, ns) in
                             sorted(by_name.items(), key=lambda item: -item[1][1])[:3]]
        enclosing = export.query("""SELECT name FROM nvtx WHERE start <= :gap_start AND end >= :gap_end
                                    ORDER BY duration_ns ASC LIMIT 1""", {"gap_start": gap["start"], "gap_end": gap["end"]})
        gap["nvtx_range"] = enclosing[0][0] if enclosing else None
        gaps.append(gap)
    return gaps


def _gap_histogram(wa: WindowActivity, bucket_edges_ns=(1_000, 10_000, 100_000, 1_000_000)) -> dict:
    _, starts, ends = _gap_arrays(wa)
    buckets = np.searchsorted(np.array(bucket_edges_ns), ends - starts, side="right")
    labels = [f"< {e / 1000:g} us" for e in bucket_edges_ns] + [f">= {bucket_edges_ns[-1] / 1000:g} us"]
    counts = np.bincount(buckets, minlength=len(labels))
    idle = np.bincount(buckets, weights=ends - starts, minlength=len(labels))
    return {label: {"gaps": int(counts[i]), "idle_ns": int(idle[i])} for i, label in enumerate(labels)}


def _streams(wa: WindowActivity) -> list[dict]:
    kernels, copies = wa.kernels, wa.copies
    rows: dict = {}
    for table, count_key, ns_key in ((kernels, "kernels", "kernel_ns"), (copies, "copies", "copy_ns")):
        key = table.device_id * (1 << 32) + (table.stream_id & 0xFFFFFFFF)
        keys, (ns,), counts = group_sums(key, table.end - table.start)
        for k, t, n in zip(keys.tolist(), ns, counts):
            stream = k & 0xFFFFFFFF
            row = rows.setdefault(k, {"device_id": k >> 32, "stream_id": None if stream == 0xFFFFFFFF else stream,
                                      "kernels": 0, "kernel_ns": 0, "copies": 0, "copy_ns": 0})
            row[count_key], row[ns_key] = int(n), int(t)
    return sorted(rows.values(), key=lambda r: -(r["kernel_ns"] + r["copy_ns"]))


def _work_per_call(wa: WindowActivity) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call of `wa.calls`: the GPU time of the kernels and copies it launched, and the kernel count
    (graph nodes share their launch's correlation id). A call of an unknown process matches any."""
    calls = wa.calls
    unknown = calls.pid == -1
    out = []
    for table in (wa.kernels, wa.copies):
        ns = (table.end - table.start).astype(np.float64)
        valid = table.correlation_id != -1
        per_key = group_sums(table.pid[valid] * (1 << 32) + table.correlation_id[valid], ns[valid])
        per_corr = group_sums(table.correlation_id[valid], ns[valid])
        own_ns, own_n = _gather(per_key, calls.pid * (1 << 32) + calls.correlation_id)
        anon_ns, anon_n = _gather(per_key, -(1 << 32) + calls.correlation_id)
        any_ns, any_n = _gather(per_corr, calls.correlation_id)
        out.append((np.where(unknown, any_ns, own_ns + anon_ns), np.where(unknown, any_n, own_n + anon_n)))
    (kernel_ns, kernels), (copy_ns, _) = out
    no_corr = calls.correlation_id == -1
    return tuple(np.where(no_corr, 0, v) for v in (kernel_ns, kernels, copy_ns))


def _gather(grouped, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sum, count) of a group_sums result at each key, 0 where the key has no group."""
    group_keys, (sums,), counts = grouped
    index = lookup((group_keys, np.arange(len(group_keys))), keys)
    found = index >= 0
    return (np.where(found, sums[np.maximum(index, 0)] if len(sums) else 0, 0),
            np.where(found, counts[np.maximum(index, 0)] if len(counts) else 0, 0))


def _ranges(export: NsysExport, wa: WindowActivity) -> list[dict]:
    """Per NVTX range name: wall time, and the GPU time of the work its CPU calls launched (calls made
    while the range was open, by any thread of its process)."""
    rows = export.query("SELECT start, end, global_tid, name FROM nvtx WHERE end >= :ws AND start < :we",
                        {"ws": wa.activity.start, "we": wa.activity.end})
    if not rows:
        return []
    starts = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    ends = np.fromiter((r[1] for r in rows), np.int64, len(rows))
    tids = np.fromiter((r[2] if isinstance(r[2], int) else -1 for r in rows), np.int64, len(rows))
    codes: dict = {}
    name_code = np.fromiter((codes.setdefault(r[3], len(codes)) for r in rows), np.int64, len(rows))
    pids = process_of(tids)
    # GPU work launched by the calls of each range's process while it was open: prefix sums per process.
    kernel_ns, kernels, copy_ns = np.zeros(len(rows)), np.zeros(len(rows)), np.zeros(len(rows))
    call_kernel_ns, call_kernels, call_copy_ns = _work_per_call(wa)
    for pid in distinct(pids):
        mine = wa.calls.pid == pid
        order = np.argsort(wa.calls.start[mine], kind="stable")
        call_starts = wa.calls.start[mine][order]
        at = pids == pid
        low = np.searchsorted(call_starts, starts[at], side="left")
        high = np.searchsorted(call_starts, ends[at], side="right")
        for target, values in ((kernel_ns, call_kernel_ns), (kernels, call_kernels), (copy_ns, call_copy_ns)):
            cumulative = np.concatenate(([0], np.cumsum(values[mine][order])))
            target[at] = cumulative[high] - cumulative[low]
    # Depth: ranges open on the same thread when this one starts (ends before starts at one time).
    n = len(rows)
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


def _syncs(wa: WindowActivity) -> dict:
    """Host waits: explicit synchronization calls, and what each cost the GPU afterwards."""
    calls, names = wa.calls, wa.call_names
    explicit_mask = np.isin(calls.name_id, _ids(names, lambda n: _like(n, SYNC_APIS)))
    # Implicit syncs: a synchronous device-to-host copy (what `.item()`/`.cpu()` do) blocks the host too.
    copy_kind, dst_kind = _copy_call_kinds(wa)
    d2h = [k for k, label in wa.copy_kinds.items() if label == "Device-to-Host"]
    asynchronous = np.isin(calls.name_id, _ids(names, lambda n: isinstance(n, str) and "async" in n.lower()))
    named = np.isin(calls.name_id, _ids(names, lambda n: n is not None))
    implicit_mask = np.isin(copy_kind, d2h) & ((named & ~asynchronous) | (dst_kind == 0))
    idle_after = wa.idle_after(calls.end)
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
    implicit = sorted(grouped(implicit_mask, lambda n: n), key=lambda r: (r["name"] is not None, str(r["name"])))
    # Several syncs in a row share one idle stretch: count each stretch once, from the first sync's return.
    wait_ends = np.concatenate((calls.end[explicit_mask], calls.end[implicit_mask]))
    next_start = wait_ends + np.concatenate((idle_after[explicit_mask], idle_after[implicit_mask]))
    idle = next_start > wait_ends
    order = np.lexsort((wait_ends[idle], next_start[idle]))
    stretch, first_end = next_start[idle][order], wait_ends[idle][order]
    first = np.concatenate(([True], stretch[1:] != stretch[:-1])) if len(stretch) else np.zeros(0, bool)
    total = int((stretch[first] - first_end[first]).sum())
    return {"explicit": explicit, "implicit": implicit, "relaunch_gap_ns": total}


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


def _launches(export: NsysExport, wa: WindowActivity) -> dict:
    """Kernel launches whose GPU time is shorter than the CPU time of their launch call, per kernel
    name in one pass: how many, their time, and the GPU idle time in front of them."""
    kernels, calls = wa.kernels, wa.calls
    call = lookup(first_by_key(calls.correlation_id), kernels.correlation_id)  # one call per id, the first
    launch_ids = _ids(wa.call_names, lambda n: _like(n, ("cudaLaunch", "cuLaunch")))
    matched = call >= 0
    matched[matched] = np.isin(calls.name_id[call[matched]], launch_ids)
    k_ns = (kernels.end - kernels.start)[matched]
    a_ns = (calls.end - calls.start)[call[matched]]
    short = k_ns < a_ns
    starts, ends = wa.busy
    idle_before = np.zeros(len(k_ns), dtype=np.int64)
    if len(starts) > 1:
        at = np.minimum(np.searchsorted(starts, kernels.start[matched]), len(starts) - 1)
        exact = (starts[at] == kernels.start[matched]) & (at > 0)
        idle_before = np.where(exact, starts[at] - ends[np.maximum(at - 1, 0)], 0)
    name_ids = kernels.short_name_id[matched]
    name_keys, sums, counts = group_sums(name_ids, short, np.where(short, k_ns, 0), np.where(short, a_ns, 0),
                                        np.where(short, np.minimum(a_ns, idle_before), 0))
    totals = {"launches": int(counts.sum()), "short_kernels": int(sums[0].sum()), "short_kernel_ns": int(sums[1].sum()),
              "short_launch_api_ns": int(sums[2].sum()), "idle_before_short_ns": int(sums[3].sum())}
    top = [i for i in np.argsort(-sums[0], kind="stable")[:5] if sums[0][i] > 0]
    names = export.strings(name_keys[top])
    totals["top"] = [{"name": names.get(int(name_keys[i])), "launches": int(sums[0][i]),
                      "mean_kernel_ns": sums[1][i] / sums[0][i], "mean_launch_ns": sums[2][i] / sums[0][i]}
                     for i in top]
    return totals


def _copies(wa: WindowActivity) -> dict:
    """Host<->device copies by memory kind and issuing API, with the pageable and synchronous ones listed."""
    copies = wa.copies
    host_kinds = [k for k, label in wa.copy_kinds.items() if label in HOST_COPY_KINDS]
    copies = copies.where((copies.memset == 0) & np.isin(copies.copy_kind, host_kinds))
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
    return {"by_kind": by_kind_rows,
            "pageable": {"copies": len(pageable), "duration_ns": sum(r["duration_ns"] for r in pageable),
                         "bytes": sum(r["bytes"] for r in pageable), "async_top": longest(pageable_async)},
            "sync": {"copies": len(sync), "duration_ns": sum(r["duration_ns"] for r in sync), "top": longest(sync)}}


def build_timeline(export: NsysExport, skip_first_ns=None, nvtx_range=None, mode: str = "steady") -> Timeline:
    steps = find_steps(export, nvtx_range)
    capture = read_activity(export, (-FOREVER, FOREVER))  # once: steps, phases and the window read from it
    if steps is not None:
        project_on_gpu(steps, *capture.launch_call_starts())
    window = choose_window(export, skip_first_ns, nvtx_range, mode, steps)
    host_from = int(steps.host_starts[steps.first_index]) if steps is not None and window.kind == "steady" else None
    activity = capture.within(window.start, window.end, host_from)
    call_names = export.strings(distinct(capture.calls.name_id))
    comm_ids = np.array([r[0] for r in export.query("SELECT id FROM StringIds WHERE value LIKE ?",
                                                    (COMMUNICATION_PATTERN,))], dtype=np.int64)
    wa = window_activity(export, activity, call_names)
    peer_kinds = {k for k, label in wa.copy_kinds.items() if label in PEER_COPY_KINDS}
    budgets = build_budgets(activity, call_names, set(comm_ids.tolist()), peer_kinds)
    devices = _devices(export, wa, comm_ids, {b.device_id: b.labelled.totals()["gpu_communication"] for b in budgets})
    kernel_ns, copy_ns = wa.kernels.end - wa.kernels.start, wa.copies.end - wa.copies.start
    totals = (int(kernel_ns.sum()), len(wa.kernels), int(copy_ns[wa.copies.memset == 0].sum()),
              int(copy_ns[wa.copies.memset == 1].sum()))
    by_device = {b.device_id: b for b in budgets}
    for device in devices:
        budget = by_device.get(device["device_id"])
        if budget is not None:
            device["window_ns"] = budget.end - budget.start
            device["budget"] = budget.parts()
    if window.start > -FOREVER and window.end < FOREVER:
        span = window.end - window.start
    else:
        span = max((d["last_ns"] for d in devices), default=0) - min((d["first_ns"] for d in devices), default=0)
    overall = _mean_budget(budgets)
    busy = sum(d["gpu_busy_ns"] for d in devices)
    idle = sum(d["gpu_idle_ns"] for d in devices)
    summary = {"span_ns": span, "gpu_busy_ns": busy, "gpu_idle_ns": idle,
               "gpu_busy_share": busy / (busy + idle) if busy + idle else None,
               "kernel_ns": totals[0], "kernels": totals[1], "memcpy_ns": totals[2], "memset_ns": totals[3],
               "gap_histogram": _gap_histogram(wa)}
    if overall:
        window_ns = sum(p["ns"] for p in overall)
        summary["span_ns"] = window_ns
        summary["gpu_busy_share"] = sum(p["ns"] for p in overall if p["part"] not in IDLE_PARTS) / window_ns \
            if window_ns else None
    ranges = _ranges(export, wa)
    timeline = Timeline(window=window, summary=summary, devices=devices, streams=_streams(wa), ranges=ranges,
                        gaps=_gaps(export, wa), syncs=_syncs(wa), launches=_launches(export, wa), copies=_copies(wa))
    timeline.budget = overall
    timeline.activity = activity
    timeline.steps = _steps_section(steps, budgets, capture, call_names) if steps is not None else None
    timeline.notes = _graph_notes(export, wa)
    timeline.host_stretches = _host_stretches(export, budgets)
    capture_budgets = lambda: build_budgets(capture, call_names, set(comm_ids.tolist()), peer_kinds)  # noqa: E731
    timeline.phases = find_phases(export, capture_budgets, (window.start, window.end),
                                  steps.name if steps is not None else None)
    # GPU metrics are sampled from the capture's start; outside the span of GPU work they only dilute.
    active = Window(max(window.start, min((d["first_ns"] for d in devices), default=window.start)),
                    min(window.end, max((d["last_ns"] for d in devices), default=window.end)), window.description)
    timeline.device_kernels = device_kernel_breakdown(export, wa) if len(devices) > 1 else []
    samples = read_samples(export)
    timeline.gpu_metrics = gpu_metrics(samples, active.start, active.end, ranges)
    timeline.busy_clock = busy_clock(samples, active.start, active.end,
                                     next((d.clock_hz for d in export.devices if d.clock_hz), None))
    return timeline


def _mean_budget(budgets) -> list[dict] | None:
    """One budget for the window: each part's time averaged over the GPUs (wall-clock time, never a sum)."""
    if not budgets:
        return None
    totals = {part: 0.0 for part in PARTS}
    for budget in budgets:
        for part, ns in budget.labelled.totals().items():
            totals[part] += ns / len(budgets)
    window_ns = sum(b.end - b.start for b in budgets) / len(budgets)
    return as_parts(totals, window_ns)


def _graph_notes(export: NsysExport, wa: WindowActivity) -> list[str]:
    """What a graph-level trace cannot show: the kernels inside the graphs."""
    if not export.graph_level_trace:
        return []
    graphs = wa.kernels.short_name_id >= GRAPH_NAME_BASE
    if not graphs.any():
        return []
    ns = (wa.kernels.end - wa.kernels.start)[graphs]
    return [f"CUDA graphs: {int(graphs.sum())} whole-graph executions in the window ({ns.sum() / 1e6:.1f} ms of GPU "
            f"time, {ns.mean() / 1e6:.3g} ms each), traced at graph level: the kernels inside the graphs are not in "
            "this export (`nsys profile --cuda-graph-trace=node` records them)."]


# A step whose host range is this many times the median host range is an outlier worth naming.
HOST_OUTLIER_FACTOR = 3.0


def _host_outliers(steps: Steps, capture: Activity, call_names: dict, limit: int = 3) -> list[dict]:
    """Steps whose host range is far longer than the others' and the wait inside it (an `.item()` that
    drains the queue): on the GPU's clock they are ordinary steps, on the host's they look unstable."""
    index = steps.steady
    host = steps.host_ends[index] - steps.host_starts[index]
    if not len(host):
        return []
    long = np.flatnonzero(host > HOST_OUTLIER_FACTOR * np.median(host))
    calls = capture.calls
    waits = np.isin(calls.name_id, _ids(call_names, lambda n: _like(n, SYNC_APIS) or (
        _like(n, ("cudaMemcpy", "cuMemcpy")) and "async" not in str(n).lower())))
    wait_start, wait_end, wait_name = calls.start[waits], calls.end[waits], calls.name_id[waits]
    out = []
    for i in long[np.argsort(-host[long])][:limit]:
        start, end = steps.host_starts[index[i]], steps.host_ends[index[i]]
        inside = (wait_start >= start) & (wait_end <= end)
        row = {"step": int(index[i]), "host_ns": int(host[i]), "wait": None, "wait_ns": 0}
        if inside.any():
            longest = np.argmax(np.where(inside, wait_end - wait_start, -1))
            name = call_names.get(int(wait_name[longest]))
            row["wait"] = name.replace("_v3020", "").replace("_v2", "") if isinstance(name, str) else name
            row["wait_ns"] = int(wait_end[longest] - wait_start[longest])
        out.append(row)
    return out


def _steps_section(steps: Steps, budgets, capture: Activity, call_names: dict) -> dict:
    """The steady steps' figures and the budget of a median step (mean shares of the steps, times the median)."""
    section = steps.summary()
    section["host_outliers"] = _host_outliers(steps, capture, call_names)
    if section["host_outliers"] and steps.clock == "gpu":
        top = section["host_outliers"][0]
        wait = f", {top['wait_ns'] / 1e6:.3g} ms of it in {top['wait']} (the host waits for the queued steps)" \
            if top["wait"] else ""
        section["host_relation_text"] = (section.get("host_relation_text", "") + f" {len(section['host_outliers'])} "
                                         f"host range(s) stand out: step {top['step']} took {top['host_ns'] / 1e6:.3g} ms"
                                         f"{wait}; on the GPU's clock it is an ordinary step.").strip()
    if budgets:
        durations = np.maximum(steps.durations, 1)
        shares = np.mean([np.mean(b.labelled.totals_many(steps.starts, steps.ends) / durations[:, None], axis=0)
                          for b in budgets], axis=0)
        section["budget"] = as_parts(dict(zip(PARTS, shares * section["median_ns"])), section["median_ns"])
    return section


def _host_stretches(export: NsysExport, budgets, limit: int = 5) -> list[dict]:
    """The longest stretches in which the GPU waited on the host's own work, with what the host was in:
    the innermost NVTX range around it and the OS runtime calls during it (when traced)."""
    stretches = []
    for budget in budgets:
        stretches += [{"device_id": budget.device_id, "start_ns": s, "duration_ns": e - s}
                      for s, e in budget.labelled.stretches(PARTS.index("idle_host"), limit)]
    stretches = sorted(stretches, key=lambda r: -r["duration_ns"])[:limit]
    osrt = export.has("OSRT_API", "start", "end", "nameId", "globalTid")
    pids = ",".join(str(p) for b in budgets for p in b.processes) or "NULL"
    for stretch in stretches:
        start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
        inner = export.query("""SELECT name FROM nvtx WHERE start <= :s AND end >= :e AND name IS NOT NULL
                                ORDER BY duration_ns LIMIT 1""", {"s": start, "e": end})
        stretch["nvtx_range"] = inner[0][0] if inner else None
    if osrt and stretches:  # one scan of the OS runtime calls for all stretches (the table has no index)
        windows = ", ".join(f"({i}, {r['start_ns']}, {r['start_ns'] + r['duration_ns']})" for i, r in enumerate(stretches))
        rows = export.query(f"""
            WITH w(i, s, e) AS (VALUES {windows})
            SELECT w.i, str.value AS name, COUNT(*) AS calls, SUM(MIN(o.end, w.e) - MAX(o.start, w.s)) AS overlap_ns
            FROM OSRT_API o JOIN w ON o.start < w.e AND o.end > w.s JOIN main.StringIds str ON str.id = o.nameId
            WHERE o.globalTid / 16777216 IN ({pids})
            GROUP BY w.i, o.nameId""")
        for index, stretch in enumerate(stretches):
            mine = sorted((r for r in rows if r[0] == index), key=lambda r: -r[3])[:3]
            stretch["os_calls"] = [{"name": r[1], "calls": r[2], "overlap_ns": r[3]} for r in mine]
    return stretches
