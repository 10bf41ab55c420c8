"""The program model of an nsys export: the window, its steps on the GPU's clock, the phases, the time
budget, and what the GPUs and the host did in it (normalize.devices, normalize.host_calls), with the
sampled GPU metrics (normalize.gpu_metrics). The program checks read this as the kernel checks read
KernelView.

The capture's kernels, copies and CUDA calls are read once into arrays (normalize.activity); steps,
phases and the window are cut from them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from nsanalyze.normalize import devices as gpus
from nsanalyze.normalize import host_activity, host_calls, model, recompute, tuning, waits
from nsanalyze.normalize import work as work_split
from nsanalyze.normalize.activity import Activity, ascending, distinct, read_activity
from nsanalyze.normalize.budget import COMMUNICATION_PATTERN, IDLE_PARTS, PARTS, as_parts, build_budgets, union
from nsanalyze.normalize.critical_path import StepBlock, block_critical_path, blocking_launch_share, capture_summary, \
    code_build_summary, data_summary, median_step_block, pricing_block, timing_ns_per_step
from nsanalyze.normalize.gpu_metrics import busy_clock, gpu_metrics, read_samples
from nsanalyze.normalize.nvtx_ranges import Ranges, longest_first, ranges_around, ranges_holding, read_ranges
from nsanalyze.normalize.kernels import KernelTable, normalize_nsys_kernels
from nsanalyze.normalize.phases import find_phases
from nsanalyze.normalize.out_of_memory import refused_allocations
from nsanalyze.normalize.polls import poll_loops, unread_note
from nsanalyze.normalize.steps import (Steps, find_steps, is_step_like, named_range, normalize_name,
                                      project_on_gpu)
from nsanalyze.normalize.work import analyze_work
from nsanalyze.numbers import ms_text
from nsanalyze.normalize.window import (FOREVER, SYNC_APIS, Window, WindowActivity, capture_start,  # noqa: F401
                                        choose_window, ids_where, name_like, window_activity)
from nsanalyze.read.nsys import CALL_TABLES, GRAPH_NAME_BASE, KERNEL_TABLE, NsysExport


@dataclass
class Timeline:
    """The program model of one export. The sections the checks read are typed (normalize.model) once the
    timeline is built; `to_json()` of each is the report's `timeline` object, key for key."""

    window: Window
    summary: model.Summary
    devices: tuple
    streams: list[dict]
    ranges: list[dict]
    gaps: tuple
    syncs: model.Syncs
    launches: model.Launches
    copies: model.Copies
    kernel_summary: list[dict] = field(default_factory=list)
    device_kernels: tuple = ()
    gpu_metrics: dict | None = None
    busy_clock: model.BusyClock | None = None
    budget: tuple | None = None            # (BudgetPart, ...) over the window (mean over GPUs)
    steps: model.StepsSummary | None = None  # the steady steps (normalize.steps) and their median budget
    host_stretches: tuple = ()             # (HostStretch, ...): longest idle_host stretches, with context
    notes: list[str] = field(default_factory=list)  # what the export cannot show (graph-level traces)
    api_calls: tuple = ()                  # (ApiCall, ...): CUDA calls by host time in the window
    phases: tuple = ()                     # (Phase, ...): NVTX range groups over the capture, nested (normalize.phases)
    work: tuple | None = None              # (RoleTime, ...): GPU kernel time by role (normalize.work)
    work_analysis: object | None = None    # normalize.work.WorkAnalysis: what the busy-GPU checks read
    kernel_table: KernelTable | None = None  # the window's kernel summary (normalize.kernels)
    activity: Activity | None = None       # the arrays read (for the kernel summary; dropped after it)
    host_activity: host_activity.HostActivity | None = None  # what the host did while the GPU idled, by class
    step_starts: np.ndarray | None = None   # every steady step on its clock (ns), in order
    step_ends: np.ndarray | None = None
    step_indices: np.ndarray | None = None  # ... and its instance index (0 = the first instance of the range)
    step_numbers: np.ndarray | None = None  # every instance's number in its range's name (Steps.numbers); None: from 0
    step_host_windows: tuple | None = None  # ... and the host's part of it: (starts, ends) (Steps.host_windows)
    shape_changes: model.ShapeChanges | None = None   # ... how often consecutive ones launch other shapes
    step_next_lead_in: np.ndarray | None = None  # ... and the next step's stall before its first GPU work
    #                                              that falls in this step's period (Steps.next_lead_in)
    step_copy_bytes: dict = field(default_factory=dict)
    copy_growth: model.CopyGrowth | None = None   # device-to-device copies growing every step (copy_growth)
    # ... allocations the driver refused for want of memory in them (normalize.out_of_memory); None: none
    refused_allocations: model.RefusedAllocations | None = None
    left_out: model.LeftOut | None = None  # start-up and warm-up before a steady window
    kernel_list: model.KernelList | None = None  # an ncu report's kernel list: what it tells beside the kernels  # "Device-to-Host from/to Pageable" -> bytes per steady step
    # The critical path of a median step, [{part, ns, share}] (normalize.critical_path); None where the
    # replay of its steps does not reproduce them (self-check) or there are no steps on the GPU's clock.
    critical_path: list[dict] | None = None
    step_block: StepBlock | None = None     # ... the steps it replayed
    # the steps that price the findings (program.py): step_block, or the window's steps where its mean step is not
    # the window's (critical_path.pricing_block)
    pricing_block: StepBlock | None = None
    timed_trials: model.TimedTrials | None = None   # ... their timed trials (normalize.tuning); None: none
    timing_code: model.TimingCode | None = None     # ... the program's own timing code (normalize.tuning); None: none
    code_builds: model.CodeBuilds | None = None     # ... GPU code they load (normalize.critical_path); None: none
    graph_captures: model.GraphCaptures | None = None   # ... CUDA graphs they capture (normalize.critical_path)
    # the launching threads' timed waits that end at one timeout: a lock handed over on a timer (the GIL)
    lock_timeouts: host_activity.LockTimeouts | None = None
    # processes begun and ended inside the window beside the launching ones: programs the loop runs and waits for
    child_processes: host_activity.ChildProcesses | None = None
    host_data: model.HostData | None = None         # ... data the host uploads or reads back (critical_path); None: none
    recomputation: model.Recomputation | None = None  # ... forward work run again (normalize.recompute); None: none
    repeated_backward: model.RepeatedBackward | None = None  # ... backward passes run again (normalize.recompute)
    step_waits: model.StepWaits | None = None   # ... their waits for the GPU, the backward's (normalize.waits)
    # ... of their kernel launch calls, the share that returned only once their kernel had ended (critical_path.
    # blocking_launch_share): launches made synchronous (CUDA_LAUNCH_BLOCKING=1, a debugger); None: no steps
    blocking_launch_share: float | None = None
    recorder: str = "nsys"                  # what recorded it: "nsys", or "kineto" (the PyTorch profiler's trace)

    def metric_mean(self, name: str) -> float | None:
        """The window's mean of a sampled GPU metric (normalize.gpu_metrics: `sm_issue_pct`, ...); None
        where the export has no GPU metrics or not that one."""
        stats = (self.gpu_metrics or {}).get(name)
        return stats.get("mean") if isinstance(stats, dict) else None

    def gpu_names(self) -> list:
        """The GPUs the profile names: the timeline's devices, then an ncu kernel list's (device tables read them)."""
        listed = self.kernel_list.device_names if self.kernel_list is not None else ()
        return [d.name for d in self.devices or ()] + list(listed)

    def step_number(self, instance: int) -> int:
        """A step as the report names it: the number its range's name carries, else its instance index."""
        numbers = self.step_numbers
        return int(numbers[instance]) if numbers is not None and 0 <= instance < len(numbers) else int(instance)

    @property
    def step_periods(self) -> np.ndarray | None:
        return None if self.step_starts is None else self.step_ends - self.step_starts

    @classmethod
    def of_kernel_list(cls, window: Window, kernel_ns: float, analysis, gpu_metrics: dict | None,
                       kernel_list: model.KernelList | None = None) -> "Timeline":
        """The model of an ncu report's kernel list: its kernels' time is the window, there is no host side."""
        return cls(window=window, summary=model.Summary.of({"span_ns": kernel_ns, "kernel_ns": kernel_ns}),
                   devices=(), streams=[], ranges=[], gaps=(), syncs=model.Syncs(), launches=model.Launches(),
                   copies=model.Copies(), work=model.records(model.RoleTime, analysis.work), work_analysis=analysis,
                   gpu_metrics=gpu_metrics, kernel_list=kernel_list)

    def typed(self) -> "Timeline":
        """The sections made by the normalize functions as typed records (normalize.model)."""
        self.summary = model.Summary.of(self.summary)
        self.devices = model.records(model.Device, self.devices)
        self.device_kernels = model.records(model.DeviceKernel, self.device_kernels)
        self.syncs, self.launches = model.Syncs.of(self.syncs), model.Launches.of(self.launches)
        self.copies = model.Copies.of(self.copies)
        self.budget = model.records(model.BudgetPart, self.budget) if self.budget is not None else None
        self.steps = model.StepsSummary.of(self.steps)
        self.host_stretches = model.records(model.HostStretch, self.host_stretches)
        self.api_calls = model.records(model.ApiCall, self.api_calls)
        self.gaps = model.records(model.Gap, self.gaps)
        self.busy_clock = model.BusyClock.of(self.busy_clock)
        self.phases = model.records(model.Phase, self.phases)
        self.work = model.records(model.RoleTime, self.work) if self.work is not None else None
        self.timed_trials = model.TimedTrials.of(self.timed_trials)
        self.timing_code = model.TimingCode.of(self.timing_code)
        self.code_builds = model.CodeBuilds.of(self.code_builds)
        self.graph_captures = model.GraphCaptures.of(self.graph_captures)
        self.host_data = model.HostData.of(self.host_data)
        self.recomputation = model.Recomputation.of(self.recomputation)
        self.repeated_backward = model.RepeatedBackward.of(self.repeated_backward)
        return self


def build_timeline(export: NsysExport, skip_first_ns=None, nvtx_range=None, mode: str = "steady") -> Timeline:
    with _Side() as side:
        timeline, kernels_later, host_later = _timeline(export, skip_first_ns, nvtx_range, mode, side)
        # (asked for here, once the budget's segments and the window's selections are freed)
        timeline.kernel_table, timeline.work_analysis = kernels_later.result()
        timeline.host_activity = host_later.result()
    timeline.host_stretches = _own_code(timeline.host_stretches, timeline.host_activity)
    timeline.kernel_summary = timeline.kernel_table.rows
    work_split.attach(timeline, timeline.work_analysis)
    return timeline.typed()


def _timeline(export: NsysExport, skip_first_ns, nvtx_range, mode: str, side: "_Side") -> tuple:
    steps = find_steps(export, nvtx_range)
    bounds = export.row_bounds()
    side.choose(sum(bounds.get(t, 0) for t in (KERNEL_TABLE, *CALL_TABLES)))
    capture = read_activity(export, (-FOREVER, FOREVER), side.submit)  # once: steps, phases and the window read from it
    if steps is not None:
        project_on_gpu(steps, *capture.launch_call_starts())
    named = named_range(export, nvtx_range) if nvtx_range else None
    if named is not None:
        project_on_gpu(named, *capture.launch_call_starts())
    window = choose_window(export, skip_first_ns, nvtx_range, mode, steps, named)
    host_from = int(steps.host_starts[steps.first_index]) if steps is not None and window.kind == "steady" else None
    if named is not None and window.kind == "nvtx-range":
        host_from = int(named.host_starts[0])  # the calls made inside the range launched the window's work
    step_name = steps.name if steps is not None else None   # a phase of its own only when no steps repeat
    if steps is not None and window.kind in ("nvtx-range", "skip-first"):
        steps = steps.inside(window.start, window.end)  # the steps of the user's window, not of the capture
    activity = capture.within(window.start, window.end, host_from)
    call_names = export.strings(distinct(capture.calls.name_id))
    comm_ids = np.array([r[0] for r in export.query("SELECT id FROM StringIds WHERE value LIKE ?",
                                                    (COMMUNICATION_PATTERN,))], dtype=np.int64)
    wa = window_activity(export, activity, call_names)
    peer_kinds = {k for k, label in wa.copy_kinds.items() if label in gpus.PEER_COPY_KINDS}
    polls = poll_loops(export, activity, call_names)
    syncs_later = side.submit_last(host_calls.syncs, wa, polls)
    budgets_later = side.submit(build_budgets, activity, call_names, set(comm_ids.tolist()), peer_kinds, polls)
    kernels_later = side.submit_last(_kernels_and_work, export, window, activity.kernels,
                                     _kernel_names(export, activity) if side.beside else None,
                                     work_split.annotated_roles(export, activity), _reads_to_host(wa))
    nvtx = read_ranges(export)   # (the phases' too)
    host_side = {"streams": gpus.streams(wa), "ranges": host_calls.ranges(nvtx, wa), "gaps": gpus.gaps(export, wa),
                 "syncs": syncs_later.result(), "launches": host_calls.launches(export, wa),
                 "copies": host_calls.copies(wa, host_calls.size_kernel_ids(export))}
    timeline, host_later = _timeline_after_budgets(export, window, steps, step_name, capture, activity, wa, call_names,
                                       comm_ids, peer_kinds, budgets_later.result(), host_side, side, nvtx)
    return timeline, kernels_later, host_later


def _timeline_after_budgets(export, window, steps, step_name, capture, activity, wa, call_names, comm_ids, peer_kinds,
                            budgets, host_side, side: "_Side", nvtx: Ranges) -> tuple:
    devices = gpus.devices(export, wa, comm_ids, {b.device_id: b.labelled.totals()["gpu_communication"] for b in budgets})
    kernel_ns, copy_ns = wa.kernels.end - wa.kernels.start, wa.copies.end - wa.copies.start
    totals = (int(kernel_ns.sum()), len(wa.kernels), int(copy_ns[wa.copies.memset == 0].sum()),
              int(copy_ns[wa.copies.memset == 1].sum()))
    by_device = {b.device_id: b for b in budgets}
    sync_idle_after(host_side["copies"]["sync"], by_device)
    for device in devices:
        budget = by_device.get(device["device_id"])
        if budget is not None:
            device["window_ns"] = budget.end - budget.start
            device["budget"] = budget.parts()
    if window.start > -FOREVER and window.end < FOREVER:
        span = window.end - window.start
    elif devices:
        span = max(d["last_ns"] for d in devices) - min(d["first_ns"] for d in devices)
    else:  # CUDA API rows without GPU activity (WSL2): the span of the calls is the program's time
        span = int(capture.calls.end.max() - capture.calls.start.min()) if len(capture.calls) else 0
    overall = _mean_budget(budgets)
    busy = sum(d["gpu_busy_ns"] for d in devices)
    idle = sum(d["gpu_idle_ns"] for d in devices)
    summary = {"span_ns": span, "gpu_busy_ns": busy, "gpu_idle_ns": idle,
               "gpu_busy_share": busy / (busy + idle) if busy + idle else None,
               "kernel_ns": totals[0], "kernels": totals[1], "memcpy_ns": totals[2], "memset_ns": totals[3],
               "gap_histogram": gpus.gap_histogram(wa)}
    if overall:
        window_ns = sum(p["ns"] for p in overall)
        summary["span_ns"] = window_ns
        summary["gpu_busy_share"] = sum(p["ns"] for p in overall if p["part"] not in IDLE_PARTS) / window_ns \
            if window_ns else None
    ranges = host_side["ranges"]
    timeline = Timeline(window=window, summary=summary, devices=devices, recorder=export.kind, **host_side)
    timeline.budget = overall
    timeline.activity = activity
    timeline.steps = _steps_section(steps, budgets, capture, call_names) if steps is not None else None
    if timeline.steps is not None and len(devices) == 1 and devices[0].get("communication_ns") and \
            devices[0].get("communication_wait_ns", 0) >= 0.5 * devices[0]["communication_ns"]:
        timeline.steps["rank_wait_text"] = _rank_wait_text(devices[0])
    if steps is not None and timeline.steps is not None:
        timeline.step_starts, timeline.step_ends = steps.starts.copy(), steps.ends.copy()
        timeline.step_indices = steps.steady.copy()
        timeline.step_numbers = steps.numbers
        timeline.step_host_windows = steps.host_windows()
        timeline.shape_changes = _shape_changes(export, activity, timeline.step_starts, timeline.step_ends)
        timeline.step_next_lead_in = steps.next_lead_in()
        timeline.step_copy_bytes = _step_copy_bytes(wa, timeline.step_starts, timeline.step_ends)
        timeline.copy_growth = copy_growth(_step_device_copy_bytes(wa, timeline.step_starts, timeline.step_ends),
                                           [steps.number(int(i)) for i in timeline.step_indices])
        timeline.refused_allocations = refused_allocations(export, activity, call_names, timeline.step_host_windows)
    host_later, timeline.lock_timeouts = _host_activity(export, budgets, activity, call_names,
                                                        capture.launching_threads,
                                                        steps if timeline.steps is not None else None, side)
    if export.kind == "nsys" and budgets and window.start > -FOREVER and window.end < FOREVER:
        timeline.child_processes = host_activity.child_processes(export, window.start, window.end,
                                                                 capture.launching_threads)
    # -- the critical path of a median step (normalize.critical_path) --
    if export.kind in ("nsys", "kineto") and timeline.steps is not None:
        timeline.step_block = median_step_block(export, steps, activity, capture.launching_threads)
        timeline.pricing_block = pricing_block(export, steps, activity, capture.launching_threads,
                                               timeline.step_block, timeline.steps.get("mean_ns"))
        timeline.critical_path = block_critical_path(timeline.step_block)
        timeline.timed_trials = tuning.summary(timeline.step_block)
        timeline.timing_code = tuning.timing_summary(timeline.step_block, timing_ns_per_step(timeline.step_block.graph)
                                                     if timeline.step_block is not None else 0.0)
        timeline.code_builds = code_build_summary(timeline.step_block)
        timeline.graph_captures = capture_summary(timeline.step_block)
        timeline.host_data = data_summary(timeline.step_block)
        timeline.recomputation = recompute.summary(timeline.step_block)
        timeline.repeated_backward = recompute.repeated_summary(timeline.step_block)
        timeline.step_waits = waits.step_waits(export, timeline.step_block.graph if timeline.step_block else None)
        timeline.blocking_launch_share = blocking_launch_share(timeline.step_block.graph) \
            if timeline.step_block is not None else None
    # --
    if export.kind == "kineto":  # the framework op that issued the launches (read.kineto)
        from nsanalyze.read.kineto import launch_attribution

        count = timeline.steps["count"] if timeline.steps and window.kind == "steady" else None
        timeline.launches.update(launch_attribution(export, window.start, window.end, count,
                                                    lambda name: is_step_like(normalize_name(name))) or {})
    timeline.left_out = _left_out(export, window, capture, call_names, steps) if window.kind == "steady" else None
    timeline.notes = _graph_notes(export, wa) + unread_note(export, activity, call_names)
    api_calls = host_calls.api_calls(wa)
    timeline.api_calls = api_calls[:API_CALLS_SHOWN]
    timeline.launches["launch_calls"] = sum(r["calls"] for r in api_calls if host_calls.is_kernel_launch(r["name"]))
    captured = host_calls.captured_launches(wa)
    if captured:   # launches recorded into CUDA graphs run no kernel of their own (the key only where there are some)
        timeline.launches["captured_launch_calls"] = captured
    annotated, shaped = host_calls.operator_ranges(export, wa) if export.kind == "nsys" else (0, 0)
    if annotated:   # PyTorch's NVTX mode: a range around every operator, its text made on the host
        timeline.launches["operator_ranges"] = annotated
        if shaped:
            timeline.launches["operator_ranges_with_shapes"] = shaped
        measured = timeline.step_block.graph.annotation_ns if timeline.step_block is not None else None
        if measured is not None:
            timeline.launches["operator_range_ns"] = measured
        timeline.notes += _operator_ranges_note(annotated, shaped, timeline.launches["launch_calls"])
    timeline.notes += _lost_kernels_note(timeline.launches)
    step_ranges = (steps.host_starts, steps.host_ends) if steps is not None else None
    timeline.host_stretches = _host_stretches(export, budgets, capture.launching_threads, capture.calls, call_names,
                                              step_ranges=step_ranges, kernels=capture.kernels,
                                              copies=capture.copies)
    capture_budgets = lambda: build_budgets(capture, call_names, set(comm_ids.tolist()), peer_kinds)  # noqa: E731
    # the window as the report states it: a capture-wide window's bounds are open, its extent the GPU work's (a phase
    # before numba-jit's first GPU work read as 265 ms inside a window of 147 ms)
    extent = (max(window.start, min((d["first_ns"] for d in devices), default=window.start)),
              min(window.end, max((d["last_ns"] for d in devices), default=window.end)))
    timeline.phases = find_phases(nvtx, capture_budgets, extent, step_name, work=capture.launch_call_starts)
    # GPU metrics are sampled from the capture's start; outside the span of GPU work they only dilute.
    active = Window(max(window.start, min((d["first_ns"] for d in devices), default=window.start)),
                    min(window.end, max((d["last_ns"] for d in devices), default=window.end)), window.description)
    timeline.device_kernels = gpus.device_kernel_breakdown(export, wa) if len(devices) > 1 else []
    samples = read_samples(export)
    timeline.gpu_metrics = gpu_metrics(samples, active.start, active.end, ranges)
    timeline.busy_clock = busy_clock(samples, active.start, active.end,
                                     next((d.clock_hz for d in export.devices if d.clock_hz), None))
    return timeline, host_later


def _host_activity(export: NsysExport, budgets, activity: Activity, call_names: dict, launching_threads: np.ndarray,
                   steps: Steps | None, side: "_Side"):
    """The window's host activity by class (normalize.host_activity), made beside the rest (numpy only): the
    CUDA calls of each GPU's processes, and the OS runtime calls of the threads that launched GPU work where
    the export traced them (read here, on this thread: nothing beside asks SQLite)."""
    if not budgets:   # no GPU work in the window: no idle time to explain
        return _Later(host_activity.HostActivity, ((),)), None
    calls = activity.calls

    def cuda_calls(budget):
        mine = np.isin(calls.pid, budget.processes)
        if mine.all():   # (one GPU's processes made every call: the columns themselves, no copy)
            return calls.start, calls.end, calls.name_id, call_names
        return calls.start[mine], calls.end[mine], calls.name_id[mine], call_names

    os_by_device = {budget.device_id: _os_calls(export, budget, launching_threads) for budget in budgets}
    windows = (steps.starts, steps.ends) if steps is not None else None
    lock = host_activity.lock_timeouts([calls for calls in os_by_device.values() if calls is not None])
    return side.submit_last(host_activity.attribute, budgets, cuda_calls, lambda b: os_by_device[b.device_id],
                            windows), lock


def _left_out(export: NsysExport, window: Window, capture: Activity, call_names: dict, steps: Steps | None):
    """Start-up and warm-up before the steady window: its length, its share of the capture up to the window's
    end, the warm-up steps in it and the host's CUDA calls in it by class (normalize.host_activity)."""
    first = export.first_gpu_ns
    if first is None or window.start <= -FOREVER:
        return None
    begin = capture_start(export, first)
    if window.start <= begin:
        return None
    calls = capture.calls
    mine = (calls.start >= begin) & (calls.start < window.start)
    starts, ends, names = calls.start[mine], np.minimum(calls.end[mine], window.start), calls.name_id[mine]
    rows = []
    context_ns, context_name = _context_creation(starts, ends, names, calls.pid[mine], call_names)
    if context_ns:   # the process's first call that created the context: counted as context, not as its own class
        first = _first_calls(starts, calls.pid[mine])
        keep = np.ones(len(starts), dtype=bool)
        keep[first[(ends[first] - starts[first]) >= CONTEXT_CALL_NS]] = False
        starts, ends, names = starts[keep], ends[keep], names[keep]
        rows.append(model.CallClassTime(class_="context", calls=int((~keep).sum()), host_ns=context_ns,
                                        top_call=context_name))
    for group in host_activity.group_calls(starts, ends, names, call_names, "cuda"):
        merged = union(group.starts.copy(), group.ends.copy(), owned=True)
        ids, counts = np.unique(group.name_ids, return_counts=True)
        top = host_activity.base_name(str(call_names.get(int(ids[np.argmax(counts)])) or "")) if len(ids) else None
        rows.append(model.CallClassTime(class_=group.name, calls=len(group.starts),
                                        host_ns=float((merged[1] - merged[0]).sum()), top_call=top))
    rows.sort(key=lambda r: -r.host_ns)
    kernels = capture.kernels
    busy = (kernels.start >= begin) & (kernels.start < window.start)
    islands = union(kernels.start[busy].copy(), np.minimum(kernels.end[busy], window.start), owned=True)
    warmup_ns = 0.0
    if steps is not None and steps.warmup:
        on_gpu = steps.clock == "gpu"
        first_step = steps.gpu_starts[0] if on_gpu and steps.gpu_starts[0] >= 0 else steps.host_starts[0]
        warmup_ns = float(max(0, window.start - first_step))
    span = window.end - begin
    return model.LeftOut(start_ns=int(begin), end_ns=int(window.start), ns=float(window.start - begin),
                         capture_share=(window.start - begin) / span if span > 0 else 0.0,
                         warmup_steps=steps.warmup if steps is not None else 0, warmup_ns=warmup_ns,
                         gpu_busy_ns=float((islands[1] - islands[0]).sum()), classes=tuple(rows[:8]))


# A process's first CUDA call this long created the CUDA context (the runtime initializes lazily, inside whatever
# call comes first: a cudaMemsetAsync of 2 s is context creation, not a memset).
API_CALLS_SHOWN = 50   # CUDA call names the report lists (costliest first); counts read every name
CONTEXT_CALL_NS = 50_000_000


def _first_calls(starts: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """Index of each process's first call."""
    order = np.lexsort((starts, pids))
    first = np.ones(len(order), dtype=bool)
    first[1:] = pids[order][1:] != pids[order][:-1]
    return order[first]


def _context_creation(starts, ends, names, pids, call_names: dict) -> tuple[float, str | None]:
    """Host time of the processes' first CUDA calls long enough to have created the context, and the name of
    the longest of them."""
    if not len(starts):
        return 0.0, None
    first = _first_calls(starts, pids)
    long = first[(ends[first] - starts[first]) >= CONTEXT_CALL_NS]
    if not len(long):
        return 0.0, None
    longest = long[np.argmax(ends[long] - starts[long])]
    name = host_activity.base_name(str(call_names.get(int(names[longest])) or ""))
    return float((ends[long] - starts[long]).sum()), f"{name}, the first CUDA call"


def _copies_in_steps(wa: WindowActivity, kinds: tuple, starts: np.ndarray, ends: np.ndarray):
    """(mask, step index) of the copies (not memsets) of these copy-kind labels that start inside a steady step."""
    copies = wa.copies
    ids = [k for k, label in wa.copy_kinds.items() if label in kinds]
    mine = (copies.memset == 0) & np.isin(copies.copy_kind, ids)
    index = np.searchsorted(starts, copies.start, side="right") - 1
    return mine & (index >= 0) & (copies.start < ends[np.maximum(index, 0)]), index


def _step_copy_bytes(wa: WindowActivity, starts: np.ndarray, ends: np.ndarray) -> dict:
    """Bytes copied between host and device in each steady step (by copy start), by direction and host
    memory kind (`Device-to-Host, Pageable`): what a step that stands out moved."""
    copies = wa.copies
    if not len(copies) or not len(starts):
        return {}
    mine, index = _copies_in_steps(wa, host_calls.HOST_COPY_KINDS, starts, ends)
    out = {}
    for kind, src, dst in {(int(k), int(s), int(d)) for k, s, d in
                           zip(copies.copy_kind[mine], copies.src_kind[mine], copies.dst_kind[mine])}:
        group = mine & (copies.copy_kind == kind) & (copies.src_kind == src) & (copies.dst_kind == dst)
        host = wa.memory_kinds.get(dst if "to-Host" in str(wa.copy_kinds.get(kind)) else src)
        label = f"{wa.copy_kinds.get(kind)}, {host}"
        out[label] = out.get(label, 0) + np.bincount(index[group], weights=copies.bytes[group], minlength=len(starts))
    return out


def _step_device_copy_bytes(wa: WindowActivity, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Bytes copied inside GPU memory (device-to-device memcpys) in each steady step, by copy start."""
    if not len(wa.copies) or not len(starts):
        return np.zeros(len(starts))
    mine, index = _copies_in_steps(wa, host_calls.DEVICE_COPY_KINDS, starts, ends)
    return np.bincount(index[mine], weights=wa.copies.bytes[mine], minlength=len(starts)).astype(np.float64)


# Copies that grow: over at least GROWTH_STEPS steady steps, the bytes a step correlate with the step's place by
# GROWTH_CORRELATION or more, the last GROWTH_EDGE steps copy GROWTH_RATIO x what the first did, and most steps copy.
# copy56_catlog's store of logits grown by torch.cat each batch: 4.3 GB in step 20, 19.6 GB in step 94 (r = 1.00); the
# training loops of fixtures/real copy the same bytes each step (r near 0) or none.
GROWTH_STEPS, GROWTH_CORRELATION, GROWTH_RATIO, GROWTH_EDGE = 8, 0.9, 2.0, 5


def copy_growth(per_step: np.ndarray, numbers: list[int]) -> model.CopyGrowth | None:
    """The steps' device-to-device copies where they grow steadily from step to step (GROWTH_*), else None: from the
    first step that made such copies on (copy56_catlog's store is concatenated by copy kernels, no memcpy, for its
    first 19 steps), where that is half the steps or more."""
    made = np.flatnonzero(per_step)
    if not len(made) or len(per_step) - made[0] < max(GROWTH_STEPS, len(per_step) / 2):
        return None
    per_step, numbers = per_step[made[0]:], numbers[made[0]:]
    n = len(per_step)
    if np.count_nonzero(per_step) < 0.8 * n or float(np.std(per_step)) == 0.0:
        return None
    correlation = float(np.corrcoef(np.arange(n), per_step)[0, 1])
    first, last = float(np.median(per_step[:GROWTH_EDGE])), float(np.median(per_step[-GROWTH_EDGE:]))
    if correlation < GROWTH_CORRELATION or not first or last < GROWTH_RATIO * first:
        return None
    # the report names two steps and their bytes: those steps' own (the medians above judge the growth; a user read
    # of copy56_catlog found the medians, steps 22's and 92's bytes, given as steps 20's and 94's)
    return model.CopyGrowth(first_step=int(numbers[0]), last_step=int(numbers[-1]), first_bytes=float(per_step[0]),
                            last_bytes=float(per_step[-1]), correlation=correlation)


def _os_calls(export: NsysExport, budget, launching_threads: np.ndarray):
    """(starts, ends, name ids, names, threads) of the OS runtime calls of the threads that launched this GPU's
    work, in its window; None where the export has none or a launching thread never made one."""
    threads = [int(t) for t in launching_threads if int(t) >> 24 in set(budget.processes)]
    if not threads or not export.has("OSRT_API", "start", "end", "nameId", "globalTid"):
        return None
    calls = host_activity.read_os_calls(export, threads, budget.start, budget.end)
    starts, ends, name_ids, tids = (calls[n] for n in ("start", "end", "name_id", "tid"))
    if len(threads) > 1 and len(distinct(tids)) < len(threads):
        return None if not len(starts) else (starts[:0], ends[:0], name_ids[:0], {}, tids[:0])  # a thread never blocked
    return starts, ends, name_ids, export.strings(distinct(name_ids)) if len(starts) else {}, tids


def _kernel_names(export: NsysExport, activity: Activity):
    """export.strings for the window's kernel names, read now (on this thread) for the kernel summary and
    the work split made beside."""
    kernels = activity.kernels
    names = export.strings(np.concatenate((distinct(kernels.short_name_id), distinct(kernels.demangled_id))))
    return lambda ids: {i: names[i] for i in {int(i) for i in ids} if i in names}


def _kernels_and_work(export: NsysExport, window: Window, kernels, strings, in_ranges=None, reads=None) -> tuple:
    """The window's kernel summary (one row per name) and its GPU time by role (normalize.work)."""
    table = normalize_nsys_kernels(export, (window.start, window.end), kernels, strings)
    return table, analyze_work(export, (window.start, window.end), table.rows, kernels, strings, in_ranges, reads)


def _shape_changes(export: NsysExport, activity, starts, ends) -> model.ShapeChanges | None:
    """normalize.steps.shape_changes over the window's kernels, the example kernel by name."""
    from nsanalyze.normalize.steps import shape_changes

    found = shape_changes(activity.kernels, starts, ends)
    if found is None:
        return None
    compared, changed, example, recounted = found
    return model.ShapeChanges(compared=compared, changed=changed,
                              example=export.strings([example]).get(example) if example is not None else None,
                              recounted=recounted)


def _reads_to_host(wa) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, devices, streams) of the window's copies from a GPU to the host: reads that end a chain of kernels
    (normalize.work)."""
    copies = wa.copies
    to_host = [k for k, label in wa.copy_kinds.items() if label == "Device-to-Host"]
    mine = (copies.memset == 0) & np.isin(copies.copy_kind, to_host)
    return copies.start[mine], copies.device_id[mine], copies.stream_id[mine]



# Above this many kernels and calls (the capture's tables) the launching threads, the syncs' figures, the
# budget and the kernel summary are made in turn, not beside the rest: the working sets held at once would
# set the peak memory of a capture of millions of launches.
BESIDE_AT_MOST = 4_000_000


def _return_freed_memory() -> None:
    """For a capture of millions of launches: freed blocks above 17 MB go back to the kernel when freed, and
    the heap keeps at most 17 MB free (glibc's mmap and trim thresholds), in place of the command's setting
    for small reports (cli._reuse_freed_memory: blocks up to 32 MB from the heap, 64 MB of free heap kept).
    Between the stages of a large capture the heap's freed blocks left holes the next stage's arrays did not
    fit. On the x20 export (GNU time, one run each, load 1): 32 MB 1,970 MB peak, 38.4 s (3.9 s system);
    17 MB 1,739 MB, 40.4 s (5.0 s); 128 KB 1,691 MB, 44.8 s (10.2 s: the page faults of every chunk's
    temporaries, 1M rows of int64 = 8 MB, taken from the kernel each time). The report the same. Nothing off
    glibc."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 17 << 20)
    mallopt(m_trim_threshold, 17 << 20)


class _Side:
    """Where the syncs' figures, the budget and the kernel summary are made: on the machine's second core,
    beside the other host calls' figures (numpy releases the GIL in its loops over the arrays; all only
    read the window's columns), or in turn on one core or for a large capture, in the order the stages
    had when they ran one after the other (each working set freed before the next is made). Either way
    the same figures. Nothing run beside asks SQLite: a thread waiting for the connection while holding
    the GIL, and one inside SQLite whose progress handler (the time limit) waits for the GIL, would wait
    for each other."""

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None

    @property
    def beside(self) -> bool:
        return self._pool is not None

    def choose(self, rows: int) -> None:
        if rows <= BESIDE_AT_MOST and (os.cpu_count() or 1) > 1:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsanalyze-beside")
        if rows > BESIDE_AT_MOST:
            _return_freed_memory()

    def submit(self, fn, *args):
        """Beside, or in turn: now."""
        if self._pool is not None:
            return self._pool.submit(fn, *args)
        task = _Later(fn, args)
        task.result()
        return task

    def submit_last(self, fn, *args):
        """Beside, or in turn: when its result is asked for."""
        return self._pool.submit(fn, *args) if self._pool is not None else _Later(fn, args)

    def __enter__(self) -> "_Side":
        return self

    def __exit__(self, *exc) -> bool:
        if self._pool is not None:   # on an error too: its tasks end before the error goes on
            self._pool.shutdown(wait=True)
        return False


class _Later:
    """A task run when its result is first asked for."""

    def __init__(self, fn, args):
        self._task, self._value = (fn, args), None

    def result(self):
        if self._task is not None:
            fn, args = self._task
            self._task = None
            self._value = fn(*args)
        return self._value


def sync_idle_after(sync: dict, by_device: dict) -> None:
    """The GPU's idle time after each synchronous copy, up to the copy's own length, summed (`idle_after_ns`): what
    the copy made asynchronous saves, the host's work after it then running while the copy does (dev_suite: a 9.52 ms
    upload, then 3.4 ms of the host freeing its buffer before the next launch; the copy itself stays)."""
    spans = sync.pop("spans", [])
    idle = dict.fromkeys(IDLE_PARTS, 0.0)
    for device, budget in by_device.items():
        mine = [(end, length) for dev, end, length in spans if dev == device]
        if not mine:
            continue
        ends = np.array([end for end, _ in mine], dtype=np.int64)
        upto = np.minimum(ends + np.array([length for _, length in mine], dtype=np.int64), budget.end)
        inside = (ends >= budget.start) & (upto > ends)
        if inside.any():
            parts = budget.labelled.totals_many(ends[inside], upto[inside]).sum(axis=0)
            for part in IDLE_PARTS:
                idle[part] += float(parts[PARTS.index(part)])
    sync["idle_after_ns"] = sum(idle.values())
    sync["idle_after_by_part"] = {part: ns for part, ns in idle.items() if ns}


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


def _lost_kernels_note(launches: dict) -> list[str]:
    """Where launch calls far outnumber the kernels joined to them, the GPU's idle time is the profiler's loss."""
    typed = model.Launches.of(launches)
    if not typed.kernels_lost:
        return []
    lost, calls = typed.lost_kernels, typed.launch_calls
    return [f"kernel records missing: at least {lost:,} of the window's {calls:,} kernel launch calls have no kernel in this "
            "profile (the profiler dropped them: its buffers full, or the trace cut or filtered); the GPU's idle time "
            "and what it is blamed on are not measured here"]


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


def _operator_ranges_note(ranges: int, shaped: int, launch_calls: int) -> list[str]:
    """Where every operator carries PyTorch's NVTX range (model.OPERATOR_RANGES_PER_LAUNCH), what the host's times
    hold: with the inputs' shapes (model.OPERATOR_SHAPES_SHARE), the texts' host work; without, little. Said once for
    every finding that reads them."""
    launches = model.Launches(operator_ranges=ranges, operator_ranges_with_shapes=shaped, launch_calls=launch_calls)
    if not launches.every_operator_annotated:
        return []
    told = (f"PyTorch's NVTX mode annotated every operator: {ranges:,} operator ranges in the window, "
            f"{ranges / launch_calls:.1f} a kernel launch call")
    if launches.annotated_with_shapes:
        return [f"{told}, with the inputs' shapes in their text (`torch.autograd.profiler.emit_nvtx(record_shapes="
                "True)` in the program, or nsys's `--pytorch=autograd-shapes-nvtx`). Each text is built on the host as "
                "its operator runs, microseconds an operator, so the host's times here, and the launch and host "
                "findings read from them, hold that work: where the program enters `emit_nvtx` itself, that is host "
                "time to win back; where nsys added it, profile once with `--pytorch=autograd-nvtx` (no shapes) or "
                "without it."]
    return [f"{told}, without the inputs' shapes (`torch.autograd.profiler.emit_nvtx()`, or nsys's "
            "`--pytorch=autograd-nvtx`): such ranges cost the host little, and the host's times here are near the "
            "program's own."]


# A step whose host range is this many times the median host range is an outlier worth naming.
HOST_OUTLIER_FACTOR = 3.0


def _host_outliers(steps: Steps, capture: Activity, call_names: dict, limit: int = 3) -> list[dict]:
    """Steps whose host range is far longer than the others' and the wait inside it (an `.item()` that
    drains the queue): on the GPU's clock they are ordinary steps, on the host's they look unstable."""
    index = steps.steady
    host = steps.host_ends[index] - steps.host_starts[index]
    if not len(host):
        return []
    # far longer than the others, and by enough to matter next to a step: half a median step or more
    typical = float(np.median(steps.durations)) if len(steps.durations) else 0.0
    long = np.flatnonzero((host > HOST_OUTLIER_FACTOR * np.median(host)) & (host - np.median(host) >= 0.5 * typical))
    calls = capture.calls
    waits = np.isin(calls.name_id, ids_where(call_names, lambda n: name_like(n, SYNC_APIS) or (
        name_like(n, ("cudaMemcpy", "cuMemcpy")) and "async" not in str(n).lower())))
    wait_start, wait_end, wait_name = calls.start[waits], calls.end[waits], calls.name_id[waits]
    out = []
    for i in long[np.argsort(-host[long])][:limit]:
        start, end = steps.host_starts[index[i]], steps.host_ends[index[i]]
        inside = (wait_start >= start) & (wait_end <= end)
        row = {"step": steps.number(index[i]), "host_ns": int(host[i]), "wait": None, "wait_ns": 0,
               "instance": int(index[i])}
        if inside.any():
            longest = np.argmax(np.where(inside, wait_end - wait_start, -1))
            name = call_names.get(int(wait_name[longest]))
            row["wait"] = name.replace("_v3020", "").replace("_v2", "") if isinstance(name, str) else name
            row["wait_ns"] = int(wait_end[longest] - wait_start[longest])
        out.append(row)
    return out


def _gpu_clock_phrase(steps: Steps, instance: int, median_ns: float) -> str:
    """What a step whose host range stands out took on the GPU's clock: ordinary, or itself slow."""
    where = np.flatnonzero(steps.steady == instance)
    if not len(where) or not median_ns:
        return "on the GPU's clock it is an ordinary step."
    period = float(steps.durations[where[0]])
    if period <= 1.5 * median_ns:
        before = np.flatnonzero(steps.steady == instance - 1)
        stall = float(steps.next_lead_in()[before[0]]) if len(before) else 0.0
        if stall > 0.5 * median_ns:   # its host stalled before launching: the GPU's clock counts that earlier
            return (f"on the GPU's clock its {ms_text(stall)} before its first GPU work count in "
                    f"{steps.label(instance - 1)}'s period (the GPU, done with that step, waited on this one's host).")
        return "on the GPU's clock it is an ordinary step."
    return f"on the GPU's clock it took {ms_text(period)} too ({period / median_ns:.0f}x the median step)."


def _steps_section(steps: Steps, budgets, capture: Activity, call_names: dict) -> dict:
    """The steady steps' figures and the budget of a median step (mean shares of the steps, times the median)."""
    section = steps.summary()
    base_text = section.get("host_relation_text", "")
    section["host_outliers"] = _host_outliers(steps, capture, call_names)
    instances = [row.pop("instance") for row in section["host_outliers"]]   # the rows name steps by number
    if section["host_outliers"] and steps.clock == "gpu":
        top = section["host_outliers"][0]
        # the wait is named as the reason only where it holds most of the range
        wait = f", {ms_text(top['wait_ns'])} of it in {top['wait']} (the host waits for the queued steps)" \
            if top["wait"] and top["wait_ns"] >= 0.5 * top["host_ns"] else ""
        section["host_relation_text"] = (section.get("host_relation_text", "") + " " + (
                                         "1 host range stands out" if len(section["host_outliers"]) == 1 else
                                         f"{len(section['host_outliers'])} host ranges stand out") + f": {steps.label(instances[0])} took {ms_text(top['host_ns'])}"
                                         f"{wait}; " + _gpu_clock_phrase(steps, instances[0], section["median_ns"])).strip()
    if budgets:
        durations = np.maximum(steps.durations, 1)
        per_step = [b.labelled.totals_many(steps.starts, steps.ends) for b in budgets]
        shares = np.mean([np.mean(t / durations[:, None], axis=0) for t in per_step], axis=0)
        section["budget"] = as_parts(dict(zip(PARTS, shares * section["median_ns"])), section["median_ns"])
        # over the steps' whole time, not a median step's: long steps weigh what they cost
        busy = [PARTS.index(p) for p in PARTS if p not in IDLE_PARTS]
        section["gpu_busy_time_share"] = float(np.mean([t[:, busy].sum() for t in per_step]) / durations.sum())
        change = _speed_change(steps, np.mean([t[:, busy].sum(axis=1) for t in per_step], axis=0))
        if change:
            section["speed_change_text"] = change
        if section.get("host_relation") == "ahead" and section["gpu_busy_time_share"] < BOUND_BUSY_SHARE:
            section["host_relation_text"] = section["host_relation_text"].replace(base_text, _not_bound_over_time(section), 1)
        elif section.get("host_relation") == "ahead":   # busy, but with what: copies or collectives are not compute
            totals = np.mean([t.sum(axis=0) for t in per_step], axis=0)
            top = max(busy, key=lambda k: totals[k])
            if PARTS[top] in BOUND_WORDS and totals[top] >= 0.5 * totals[busy].sum():
                words = (f"{BOUND_WORDS[PARTS[top]]} {totals[top] / durations.sum():.0%} of the steps' time, compute "
                         f"{totals[PARTS.index('gpu_compute')] / durations.sum():.0%}")
                section["host_relation_text"] = section["host_relation_text"].replace("the GPU is the bound", words, 1)
    return section


# The steps change pace part way: a split of the steps into two runs, each a tenth of them and 5 steps or more, whose median
# periods differ by SPEED_CHANGE or more and whose middle halves do not overlap, while the GPU's busy time a step stays
# within SAME_WORK of itself: the GPU did the same work and waited longer in one run (blind74_masksync_base1: steps 1-16
# near 45 ms, then 72 ms with 23 ms of kernels a step in both; its second recording ran at 51 ms). The report's
# figures then describe a mix of two paces, and its median the slower run's where that is the longer.
SPEED_CHANGE, SAME_WORK, SPEED_RUN_SHARE, SPEED_RUN_STEPS, SPEED_STEPS = 1.25, 0.1, 0.1, 5, 20


def _speed_change(steps: Steps, busy: np.ndarray) -> str | None:
    """The header's line where the steps change pace part way with the same GPU work (SPEED_CHANGE); else None."""
    periods = steps.durations.astype(np.float64)
    n = len(periods)
    if n < SPEED_STEPS or len(busy) != n:
        return None
    low = max(int(np.ceil(SPEED_RUN_SHARE * n)), SPEED_RUN_STEPS)
    cuts = np.arange(low, n - low + 1)
    if not len(cuts):
        return None
    total, squares = np.concatenate(([0.0], np.cumsum(periods))), np.concatenate(([0.0], np.cumsum(periods ** 2)))

    def spread(a, b):   # sum of squares about the mean of periods[a:b], for arrays of bounds
        count = b - a
        return squares[b] - squares[a] - (total[b] - total[a]) ** 2 / count
    cut = int(cuts[np.argmin(spread(0, cuts) + spread(cuts, n))])
    first, second = periods[:cut], periods[cut:]
    m1, m2 = float(np.median(first)), float(np.median(second))
    q1, q2 = np.percentile(first, [25, 75]), np.percentile(second, [25, 75])
    w1, w2 = float(np.median(busy[:cut])), float(np.median(busy[cut:]))
    if max(m1, m2) < SPEED_CHANGE * min(m1, m2) or not (q1[1] < q2[0] or q2[1] < q1[0]) or \
            abs(w1 - w2) > SAME_WORK * max(w1, w2):
        return None
    number = lambda i: steps.number(int(steps.steady[i]))
    slower = "the later" if m2 > m1 else "the earlier"
    return (f"The steps change pace part way with the same GPU work: steps {number(0)}-{number(cut - 1)} ran at a "
            f"median {ms_text(m1)} a step and steps {number(cut)}-{number(n - 1)} at {ms_text(m2)}, the GPU busy "
            f"{ms_text(w1)} and {ms_text(w2)} a step; in {slower} run it waited longer on the host (other load on the machine, or the "
            "program's own host work growing). The figures below describe both runs together: a second recording "
            "tells the program's pace from the machine's.")


# "The GPU is the bound" holds for a run only where its GPU is busy this share of the steps' whole time.
BOUND_BUSY_SHARE = 0.8
# ... and names what keeps it busy where that is not compute (half its busy time or more)
BOUND_WORDS = {"gpu_copy": "the link is the bound: copies between host and GPU take",
               "gpu_communication": "the collectives are the bound: communication takes"}


def _not_bound_over_time(section: dict) -> str:
    """The host runs ahead in a median step, yet the GPU idles much of the steps' time: the steps that stand out
    are where the host is the bound, and they weigh what they cost."""
    ms = ms_text
    return (f"The host runs ahead in a median step (the GPU starts a step {ms(section['host_lead_ns'])} after the "
            f"host began it), but the GPU is busy only {section['gpu_busy_time_share']:.0%} of the steps' whole time "
            f"(mean step {ms(section['mean_ns'])}, median {ms(section['median_ns'])}): over the run the GPU is not "
            "the bound; the steps that stand out, where it waits, hold the time.")


def _rank_wait_text(device: dict) -> str:
    """One GPU alone whose collectives run mostly beyond their fast launches: how long they waited, measured, and
    how to find the rank they waited for, which the export does not hold."""
    # the wait that left the GPU with nothing else to run: within the budget's exposed communication
    exposed = next((float(p["ns"]) for p in device.get("budget") or () if p["part"] == "gpu_communication"),
                   float(device.get("exposed_communication_ns") or 0))
    wait, window = min(float(device["communication_wait_ns"]), exposed), float(device.get("window_ns") or 0)
    share = f" ({wait / window:.0%} of the window)" if window else ""
    return (f"This rank's collectives waited {ms_text(wait)}{share} for another rank, with no compute beside them "
            "(their time beyond their fast launches): the late rank is not in this export, and what holds it is not "
            "measured here; profile all ranks (one nsys profile around the launcher, or nsys profile -o "
            "rank%q{RANK} in each rank's command) and report them together: nsanalyze report rank0.sqlite "
            "rank1.sqlite --as-ranks.")


# Host stretches kept: the longest by the host's own code (_own_code), of twice as many longest by their whole time
HOST_STRETCHES = 5


def _own_code(stretches: list[dict], activity, keep: int = HOST_STRETCHES) -> list[dict]:
    """The stretches, each with the time CUDA calls of a host-activity class cover in it (a 30.6 ms cudaFree inside
    a 34.3 ms stretch is the allocator's, not the host's code: quasiben's workflow) and what that leaves, the
    host's own code; the `keep` longest by that, longest first."""
    if activity is None or not activity.classes:
        return stretches[:keep]
    classes = [c for c in activity.classes if c.source == "cuda" and c.idle_islands]
    covered: dict = {}   # (class index, stretch index) -> ns: one measure of a class's islands per GPU, not per stretch
    for device in {s["device_id"] for s in stretches}:
        at = [i for i, s in enumerate(stretches) if s["device_id"] == device]
        starts = [stretches[i]["start_ns"] for i in at]
        ends = [stretches[i]["start_ns"] + stretches[i]["duration_ns"] for i in at]
        for k, c in enumerate(classes):
            for i, ns in zip(at, c.idle_in(device, starts, ends).tolist()):
                covered[k, i] = ns
    for i, stretch in enumerate(stretches):
        inside = [(covered.get((k, i), 0.0), c) for k, c in enumerate(classes)]
        inside = sorted(((ns, c) for ns, c in inside if ns > 0), key=lambda item: (-item[0], item[1].name))
        if inside:
            stretch["cuda_classes"] = [{"name": c.name, "overlap_ns": ns, "top_calls": [n for n, _, _ in c.top_calls[:3]]}
                                       for ns, c in inside]
            stretch["own_ns"] = max(stretch["duration_ns"] - sum(ns for ns, _ in inside), 0)
    return sorted(stretches, key=lambda r: -r.get("own_ns", r["duration_ns"]))[:keep]


def _host_stretches(export: NsysExport, budgets, launching_threads: np.ndarray, calls=None, call_names=None,
                    limit: int = 2 * HOST_STRETCHES, step_ranges=None, kernels=None, copies=None) -> list[dict]:
    """The longest stretches in which the GPU waited on the host's own work, with what the host was in:
    the innermost NVTX range around it, the OS runtime calls during it (when traced), the JIT-compiled code
    it linked and loaded after it, before it next gave the GPU work (`jit_calls`: the host was compiling it),
    and, where the steps are host ranges (`step_ranges`: starts, ends), how much of it lies inside them
    (`in_steps_ns`: a stretch between them is the loop's code before a step, such as fetching its batch), and
    the kernel whose run ended it where that was the kernel's first in the capture (`first_kernel`, of `kernels`:
    the capture's), and the bytes of the copy to the GPU that ended it, where the host's next call that gave the GPU
    work was one (`upload_after_bytes`, of `copies`: the host built those inputs)."""
    stretches = []
    for budget in budgets:
        stretches += [{"device_id": budget.device_id, "start_ns": s, "duration_ns": e - s}
                      for s, e in budget.labelled.stretches(PARTS.index("idle_host"), limit)]
    stretches = sorted(stretches, key=lambda r: -r["duration_ns"])[:limit]
    if calls is not None and call_names is not None and len(calls):
        processes = {b.device_id: list(b.processes) for b in budgets}
        upload_kinds = [int(i) for i, label in export.query("SELECT id, label FROM memcpy_kinds")
                        if label in UPLOAD_KINDS]
        for stretch in stretches:
            loads, next_work, module_loads, next_row = _jit_calls_after(
                calls, call_names, processes.get(stretch["device_id"], []), stretch["start_ns"] + stretch["duration_ns"])
            if copies is not None and next_row is not None:
                upload = _upload_at(calls, copies, next_row, upload_kinds)
                if upload:
                    stretch["upload_after_bytes"] = upload
            if module_loads:
                stretch["module_loads_after"] = module_loads
            if loads:
                stretch["jit_calls"] = loads
                if next_work is not None:
                    stretch["next_work_ns"] = next_work
    if kernels is not None:
        _first_kernels(export, stretches, kernels)
    osrt = export.has("OSRT_API", "start", "end", "nameId", "globalTid")
    pids = ",".join(str(p) for b in budgets for p in b.processes) or "NULL"
    spans = [(r["start_ns"], r["start_ns"] + r["duration_ns"]) for r in stretches]
    arounds = [longest_first(ranges, 8) for ranges in ranges_around(export, spans, "n.name IS NOT NULL")]
    helds = ranges_holding(export, [(s, e, RANGE_HOLDS * (e - s), [around[-1].global_tid] if around else
                                     [int(t) for t in launching_threads]) for (s, e), around in zip(spans, arounds)],
                           "n.name IS NOT NULL")
    for stretch, (start, end), around, held in zip(stretches, spans, arounds, helds):
        # a range that holds nearly all of it names it too, though the stretch starts or ends a call outside it
        # (power_iteration: 'IO 190' holds 99.6% of a 26.7 ms stretch the step range alone encloses): a range of
        # the thread of the innermost one around it, else of a thread that launches GPU work (never another
        # rank's or a worker's)
        # every such range, outermost first, so the innermost is named: a stretch that starts 19 us before 'step 28'
        # holds 'step 28' and, 99.6% of it, 'make_batch' inside it (own67_churn), the range that says what ran
        held = sorted(held, key=lambda r: (-r.duration_ns, r.start))[:8]
        around = [*around, *held]
        stretch["nvtx_range"] = around[-1].name if around else None
        if step_ranges is not None:
            inside = np.minimum(step_ranges[1], end) - np.maximum(step_ranges[0], start)
            stretch["in_steps_ns"] = int(inside[inside > 0].sum())
        if len(around) > 1:   # outermost to innermost: `epoch 2 › checkpoint`
            stretch["nvtx_path"] = " › ".join(str(r.name) for r in around)
    if osrt and stretches:  # one scan of the OS runtime calls for all stretches (the table has no index)
        windows = ", ".join(f"({i}, {r['start_ns']}, {r['start_ns'] + r['duration_ns']})" for i, r in enumerate(stretches))
        first = min(r["start_ns"] for r in stretches)
        last = max(r["start_ns"] + r["duration_ns"] for r in stretches)
        # the table outermost, each row tested against the stretches' span before the stretches themselves: SQLite
        # chose one scan per stretch (fuse55_resnet_fix1: 1.3M OS calls, 5 stretches, 1.7 s; this 0.3 s)
        rows = export.query(f"""
            WITH w(i, s, e) AS (VALUES {windows})
            SELECT w.i, o.globalTid, MAX(o.start, w.s), MIN(o.end, w.e), o.nameId, str.value
            FROM OSRT_API o CROSS JOIN w JOIN main.StringIds str ON str.id = o.nameId
            WHERE o.start < {last} AND o.end > {first} AND o.start < w.e AND o.end > w.s
            AND o.globalTid / 16777216 IN ({pids})""")
        rows.sort(key=lambda row: row[0])   # by stretch, each in the table's order: as one scan per stretch gave
        os_calls: dict = {}   # (stretch, name id) -> [name, calls, overlap]
        for i, _, start, end, name_id, name in rows:
            entry = os_calls.setdefault((i, name_id), [name, 0, 0])
            entry[1] += 1
            entry[2] += end - start
        in_order = sorted(os_calls, key=_sql_order)   # ties in name id order, as SQL's GROUP BY gave them
        for index, stretch in enumerate(stretches):
            mine = sorted((os_calls[k] for k in in_order if k[0] == index), key=lambda r: -r[2])[:3]
            stretch["os_calls"] = [{"name": name, "calls": calls, "overlap_ns": overlap} for name, calls, overlap in mine]
        _launching_thread_calls(stretches, {b.device_id: set(b.processes) for b in budgets}, launching_threads, rows)
    return stretches


# A stretch before a kernel's first run is set-up for it where the GPU's wait before its next run is at most this share
# of the stretch: dev_infer's 47 ms before its first M=300 GEMM, then µs before each of the next; a capture that began
# mid-run (a Kineto trace) sees first runs of kernels that run every step after the same host code, which is not set-up
FIRST_RUN_REPEATS_AT_MOST = 0.25
FIRST_RUN_CHUNK = 1 << 22   # kernels compared at a time


def _first_kernels(export: NsysExport, stretches: list[dict], kernels) -> None:
    """Marks each stretch that the first run in the capture of a kernel ended, where the kernel's next run came
    without such a wait (`first_kernel`: its name): the host's time before it was set-up for code it had not run
    yet (a library choosing and loading a kernel for a new shape, a first dispatch), which a process pays once.
    dev_infer: its five longest stretches, 14-47 ms each, end at the first run of an fp32 GEMM (the batched phase's
    first M=300 forward) or of a bf16 one (autocast's first), each run 60 times after it."""
    if not len(kernels) or not stretches:
        return
    chunks = [slice(lo, lo + FIRST_RUN_CHUNK) for lo in range(0, len(kernels), FIRST_RUN_CHUNK)]
    never = np.iinfo(np.int64).max

    def first_start(rows, device) -> tuple[int, int] | None:
        """(start, row) of the earliest kernel on the device among the rows each chunk's mask selects."""
        best = None
        for part in chunks:
            chosen = rows(part)
            if device is not None:
                chosen &= kernels.device_id[part] == device
            if chosen.any():
                at = int(np.argmin(np.where(chosen, kernels.start[part], never)))
                if best is None or kernels.start[part][at] < best[0]:
                    best = (int(kernels.start[part][at]), part.start + at)
        return best

    for stretch in stretches:   # (a chunk of the capture's kernels at a time: no mask as long as the capture)
        end, device = stretch["start_ns"] + stretch["duration_ns"], stretch["device_id"]
        found = first_start(lambda part: kernels.start[part] >= end, device)
        if found is None:
            continue
        began, row = found
        name = int(kernels.short_name_id[row])
        if any(bool(np.any((kernels.short_name_id[part] == name) & (kernels.start[part] < began))) for part in chunks):
            continue
        again = first_start(lambda part: (kernels.short_name_id[part] == name) & (kernels.start[part] > began), device)
        if again is None:   # run once: its host code before it may be the work itself, not set-up
            continue
        busy_until = max((int(kernels.end[part][(kernels.start[part] < again[0]) & (kernels.end[part] <= again[0])
                                                 & ((kernels.device_id[part] == device) if device is not None else True)]
                              .max(initial=0)) for part in chunks), default=0)
        if again[0] - max(busy_until, began) <= FIRST_RUN_REPEATS_AT_MOST * stretch["duration_ns"]:
            stretch["first_kernel"] = export.strings([name]).get(name)


# Host-activity classes (host_activity.csv) of the calls that give the GPU work: where the host's next such call
# comes, what it did since is no longer preparation
ISSUING_CLASSES = ("launch", "graph-launch", "copy", "copy-async", "memset")
COPY_CLASSES = ("copy", "copy-async")
UPLOAD_KINDS = ("Host-to-Device", "Unified Host-to-Device")   # a copy to the GPU: what a stretch before it built
JIT_CLASS, MODULE_LOAD_CLASS = "jit", "module-load"
RANGE_HOLDS = 0.9   # an NVTX range holding this share of a host stretch names it (the innermost of its path)
CALLS_AFTER_STRETCH = 64   # the calls looked at after a stretch for the next one that gives the GPU work


def _jit_calls_after(calls, call_names: dict, pids: list,
                     at_ns: int) -> tuple[list[dict], int | None, int, int | None]:
    """The calls of the class `jit` (host_activity.csv: a run-time link, a module loaded from an image in memory,
    nvrtc) the processes made from `at_ns` until their next call that gives the GPU work: by name, calls, time;
    that call's start (None where it is not among the calls looked at); the calls of the class `module-load`
    among them (a library loaded: at a kernel's first launch, or a build of every step's); and that call's row
    where it is a copy (None otherwise)."""
    index = _first_calls_after(calls, pids, at_ns, CALLS_AFTER_STRETCH)
    loads: dict[str, list] = {}
    next_work, module_loads, copy_row = None, 0, None
    for i in index:
        name = str(call_names.get(int(calls.name_id[i])) or "")
        kind = host_activity.classify(name)
        if kind in ISSUING_CLASSES:
            next_work = int(calls.start[i])
            copy_row = int(i) if kind in COPY_CLASSES else None
            break
        if kind == JIT_CLASS:
            entry = loads.setdefault(host_activity.base_name(name), [0, 0])
            entry[0] += 1
            entry[1] += int(calls.end[i] - calls.start[i])
        module_loads += kind == MODULE_LOAD_CLASS
    return [{"name": n, "calls": c, "total_ns": ns} for n, (c, ns) in loads.items()], next_work, module_loads, copy_row


def _upload_at(calls, copies, row: int, upload_kinds: list[int]) -> int:
    """The bytes the copy call at `row` moved to the GPU (its copies matched by process and correlation id), 0
    where it moved none there (a copy to the host, on the device, or not traced)."""
    corr, pid = int(calls.correlation_id[row]), int(calls.pid[row])
    if corr < 0 or not len(copies):
        return 0
    match = np.flatnonzero((copies.correlation_id == corr) & ((copies.pid == pid) | (copies.pid < 0)) & (copies.memset == 0))
    return int(copies.bytes[match][np.isin(copies.copy_kind[match], upload_kinds)].sum()) if len(match) else 0


AFTER_CHUNK = 1 << 20   # calls looked through at a time for the first ones after a stretch


def _first_calls_after(calls, pids: list, at_ns: int, count: int) -> np.ndarray:
    """Rows of the first `count` calls of these processes from `at_ns` on, by start then row: what a stable
    sort of all of them gives, taken a chunk of calls at a time, each chunk's first `count` kept (at 11.5M
    calls the rows of every call after a stretch, their starts and their order were 280 MB at once)."""
    kept = []
    for at in range(0, len(calls), AFTER_CHUNK):
        starts = calls.start[at:at + AFTER_CHUNK]
        index = np.flatnonzero(np.isin(calls.pid[at:at + AFTER_CHUNK], pids) & (starts >= at_ns))
        if not ascending(starts[index]):
            index = index[np.argsort(starts[index], kind="stable")]
        kept.append(index[:count] + at)
    index = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)   # chunk by chunk: rows ascending
    return index[np.argsort(calls.start[index], kind="stable")][:count]    # among equal starts


def _sql_order(key: tuple):
    """A (stretch, name id) key in SQLite's order of values: numbers before text."""
    stretch, value = key
    number = isinstance(value, (int, float))
    return stretch, not number, value if number else str(value)


def _launching_thread_calls(stretches: list[dict], pids_by_device: dict, launching_threads: np.ndarray,
                            rows: list[tuple]) -> None:
    """Per stretch, the OS calls of the threads that launched GPU work in its GPU's processes: `host_threads`,
    `blocked_ns` (time all of them sat inside OS calls) and `thread_os_calls` (the calls of the one that sat in
    them least). Other threads (CUDA's, NCCL's helpers) wait all along and are not the GPU's host. `rows`:
    (stretch, thread, start, end, name id, name) of the OS calls in the stretches, clipped to them."""
    pids = {p for s in stretches for p in pids_by_device.get(s["device_id"], ())}
    # the threads that launched GPU work (a helper thread that only queries events is not the GPU's host)
    threads = [int(t) for t in launching_threads if int(t) // 16777216 in pids]
    if not threads:
        return
    launching = set(threads)
    rows = [row for row in rows if row[1] in launching]
    for index, stretch in enumerate(stretches):
        mine = {t for t in threads if t // 16777216 in pids_by_device.get(stretch["device_id"], ())}
        spans: dict[int, list] = {t: [] for t in mine}
        calls: dict[int, dict] = {t: {} for t in mine}
        for i, tid, start, end, _, name in rows:
            if i != index or tid not in mine:
                continue
            spans[tid].append((start, end))
            entry = calls[tid].setdefault(name, [0, 0])
            entry[0] += 1
            entry[1] += end - start
        stretch["host_threads"] = len(mine)
        stretch["blocked_ns"] = _all_inside_calls(list(spans.values()), stretch["start_ns"],
                                            stretch["start_ns"] + stretch["duration_ns"])
        # the calls of the thread that sat in OS calls least: where all were blocked, its calls bound it
        least = min(mine, key=lambda t: sum(o for _, o in calls[t].values())) if mine else None
        stretch["thread_os_calls"] = [{"name": n, "calls": c, "overlap_ns": o} for n, (c, o) in
                                      sorted(calls[least].items(), key=lambda kv: -kv[1][1])[:3]] if least else []


def _all_inside_calls(per_thread: list[list], start: int, end: int) -> int:
    """Time in [start, end) during which every thread is inside one of its intervals: each thread's
    intervals merged (budget.union), then one sweep over all their edges counting the threads inside."""
    if not per_thread:
        return 0
    edges, steps = [], []
    for intervals in per_thread:
        starts, ends = (np.array(values, dtype=np.int64) for values in zip(*intervals)) if intervals else \
            (np.zeros(0, dtype=np.int64),) * 2
        starts, ends = union(starts, ends)
        edges += [starts, ends]
        steps += [np.ones(len(starts), dtype=np.int64), -np.ones(len(ends), dtype=np.int64)]
    times, step = np.concatenate(edges), np.concatenate(steps)
    order = np.lexsort((step, times))  # at one time, a thread leaving before one entering
    times, inside = times[order], np.cumsum(step[order])
    return int((np.diff(times)[inside[:-1] == len(per_thread)]).sum())
