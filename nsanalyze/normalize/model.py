"""The program model's typed sections: what the program checks read by attribute, as kernel checks read
KernelView, and what the JSON report's `timeline` is written from (`to_json`).

Each section is a frozen dataclass whose fields are the keys of its JSON object. A section remembers
which keys it carries and in which order (`keys`), so `to_json` writes the object the report has always
had, key for key: a key a section does not carry (a figure an export cannot give) stays absent rather
than null. A figure is added in one place: a field here, and the normalize function that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar


@dataclass(frozen=True)
class Record:
    """A section of the model made from, and written back to, a JSON object."""

    NESTED: ClassVar[dict[str, type]] = {}   # key -> Record type of its object, or of its list's items
    keys: tuple = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, data: dict | None):
        if data is None:
            return None
        if isinstance(data, cls):
            return data
        known = {f.name for f in fields(cls)} - {"keys"}
        unknown = [k for k in data if k not in known]
        if unknown:
            raise KeyError(f"{cls.__name__} has no field for {', '.join(unknown)}")
        return cls(**{k: _typed(cls.NESTED.get(k), v) for k, v in data.items()}, keys=tuple(data))

    def to_json(self) -> dict[str, Any]:
        return {k: plain(getattr(self, k)) for k in self.keys}

    def with_(self, **changes) -> "Record":
        """A copy with these fields set; a field it did not carry is added at the end, as a key is."""
        new = tuple(k for k in changes if k not in self.keys)
        typed = {k: _typed(self.NESTED.get(k), v) for k, v in changes.items()}
        return replace(self, **typed, keys=self.keys + new)


def _typed(kind: type | None, value):
    if kind is None or value is None:
        return value
    if isinstance(value, list):
        return tuple(kind.of(v) if isinstance(v, dict) else v for v in value)
    return kind.of(value) if isinstance(value, dict) else value


def plain(value):
    """A section or a tuple of sections as JSON values."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def part_ns(budget, part: str) -> float:
    """ns of one part in a budget (a tuple of BudgetPart); 0 where the budget lacks it."""
    return next((float(p.ns) for p in budget or () if p.part == part), 0.0)


def records(kind: type, rows) -> tuple:
    return tuple(kind.of(r) for r in rows or ())


@dataclass(frozen=True)
class BudgetPart(Record):
    part: str = ""
    ns: float = 0
    share: float | None = None


@dataclass(frozen=True)
class RoleTime(Record):
    role: str = ""
    ns: float = 0
    share: float | None = None


@dataclass(frozen=True)
class Summary(Record):
    span_ns: float = 0
    gpu_busy_ns: float = 0
    gpu_idle_ns: float = 0
    gpu_busy_share: float | None = None
    kernel_ns: float = 0
    kernels: int = 0
    memcpy_ns: float = 0
    memset_ns: float = 0
    gap_histogram: Any = None
    kernel_filter: Any = None     # `-k`: what was judged and what was filtered out (nsanalyze.kernel_filter)


@dataclass(frozen=True)
class Device(Record):
    NESTED: ClassVar[dict[str, type]] = {"budget": BudgetPart, "work": RoleTime}
    device_id: Any = None
    first_ns: int = 0
    last_ns: int = 0
    gpu_busy_ns: float = 0
    kernel_ns: float = 0
    memcpy_ns: float = 0
    memset_ns: float = 0
    name: str | None = None
    span_ns: float = 0
    gpu_idle_ns: float = 0
    communication_ns: float = 0
    exposed_communication_ns: float = 0
    communication_kernels: int = 0
    communication_wait_ns: float = 0
    compute_kernel_ns: float = 0
    point_to_point_ns: float = 0   # of the communication kernels' time, NCCL's send and receive (devices.POINT_TO_POINT)
    communication_on_compute_streams: bool = False   # every communication kernel on a stream of compute kernels
    window_ns: float | None = None
    budget: tuple | None = None
    work: tuple | None = None
    rank: int | None = None
    device: Any = None
    clock_offset_ns: int | None = None


@dataclass(frozen=True)
class DeviceKernel(Record):
    device_id: Any = None
    name: str | None = None
    duration_ns: float = 0
    launches: int | None = None


@dataclass(frozen=True)
class LaunchedKernel(Record):
    name: str | None = None
    launches: int = 0
    mean_kernel_ns: float = 0
    mean_launch_ns: float = 0


@dataclass(frozen=True)
class OpLaunches(Record):
    op: str = ""
    launches: int = 0
    per_step: float | None = None
    share: float | None = None
    loop_ops: tuple = ()   # a loop's entry (read.kineto._op_loops): its ops in the order they run, `op` their names


# Launches whose kernels lie outside the window: at most a full launch queue (about 1,020 operations on the H200)
# at each of its edges.
QUEUED_AT_EDGES = 2 * 1024
# Launch calls beyond their kernels by this share of them: the profile lost kernel records (Launches.lost_kernels).
LOST_KERNELS_SHARE = 0.1


@dataclass(frozen=True)
class ProfilerCost(Record):
    launches: int = 0
    launches_per_step: float | None = None
    cpu_ops: int | None = None
    launch_calls: int | None = None
    record_shapes: bool | None = None
    cpu_ops_per_launch: float | None = None


# PyTorch's operator ranges (steps.OPERATOR_RANGES) at this many a kernel launch call or more: every operator
# annotated (GindaChen's nsys-ai fixtures: 5.0 and 4.7 a launch; opt_loop_annot 3.3)
OPERATOR_RANGES_PER_LAUNCH = 1.0
# Of them, this share or more with the inputs' shapes in their text: record_shapes=True, whose text costs the host
# microseconds an operator (blind82_emitnvtx: 2,598 such ranges a step, 16.6 and 22.3 ms a step saved without them
# in round 82's recordings, 13.5 and 7.9 ms in round 83's); without the shapes the ranges cost little (opt_loop_annot, nsys --pytorch=autograd-nvtx: 5,140
# ranges a step, its mean step 42.4 ms against 43.5 ms for the same program unannotated, opt_loop)
OPERATOR_SHAPES_SHARE = 0.5


@dataclass(frozen=True)
class Launches(Record):
    NESTED: ClassVar[dict[str, type]] = {"top": LaunchedKernel, "by_op": OpLaunches, "profiler": ProfilerCost}
    launches: int = 0
    short_kernels: int = 0
    short_kernel_ns: float = 0
    short_launch_api_ns: float = 0
    idle_before_short_ns: float = 0
    top: tuple = ()
    by_op: tuple = ()
    profiler: ProfilerCost | None = None
    launch_calls: int = 0        # kernel launch calls in the window (cudaLaunchKernel, cuLaunchKernel, ...)
    captured_launch_calls: int = 0   # of them, made inside a stream capture: graph nodes recorded, no kernel run
    operator_ranges: int = 0     # NVTX ranges PyTorch's NVTX mode pushed around operators (steps.OPERATOR_RANGES)
    operator_ranges_with_shapes: int = 0   # ... whose text holds the inputs' shapes (record_shapes=True)
    # the median host time from an operator's range to the first operator range nested in it, the replayed steps'
    # (critical_path.operator_ranges): a range's host cost as the profile measures it
    operator_range_ns: float | None = None

    @property
    def operator_ranges_per_launch(self) -> float:
        """PyTorch's operator ranges a kernel launch call."""
        return self.operator_ranges / self.launch_calls if self.launch_calls else 0.0

    @property
    def operator_shapes_share(self) -> float:
        """The share of PyTorch's operator ranges whose text holds the inputs' shapes."""
        return self.operator_ranges_with_shapes / self.operator_ranges if self.operator_ranges else 0.0

    @property
    def every_operator_annotated(self) -> bool:
        """PyTorch's NVTX mode on: OPERATOR_RANGES_PER_LAUNCH operator ranges a launch call or more."""
        return bool(self.launch_calls) and self.operator_ranges_per_launch >= OPERATOR_RANGES_PER_LAUNCH

    @property
    def annotated_with_shapes(self) -> bool:
        """Every operator annotated, most ranges with the inputs' shapes in their text (OPERATOR_SHAPES_SHARE)."""
        return self.every_operator_annotated and self.operator_shapes_share >= OPERATOR_SHAPES_SHARE

    @property
    def lost_kernels(self) -> int:
        """Launch calls beyond the kernels joined to them, past what a full queue at each window edge holds: kernel
        records the profiler dropped (its buffers full, a trace cut or filtered). 0 where none are missing. The
        launches made inside a stream capture run nothing: none is counted (blind78_recapture: a graph captured each
        step, 387 launches a step recorded into it, read as 59k lost kernel records)."""
        return max(0, self.launch_calls - self.captured_launch_calls - self.launches - QUEUED_AT_EDGES)

    @property
    def kernels_lost(self) -> bool:
        return bool(self.launch_calls) and self.lost_kernels >= LOST_KERNELS_SHARE * self.launch_calls


@dataclass(frozen=True)
class SyncCalls(Record):
    name: str | None = None
    calls: int = 0
    wait_ns: float = 0
    relaunch_gap_ns: float = 0


@dataclass(frozen=True)
class Syncs(Record):
    NESTED: ClassVar[dict[str, type]] = {"explicit": SyncCalls, "implicit": SyncCalls, "polls": SyncCalls}
    explicit: tuple = ()
    implicit: tuple = ()
    relaunch_gap_ns: float = 0
    polls: tuple = ()   # poll loops (normalize/polls.py) by query name: `calls` counts loops, each one wait
    copy_waits: int = 0   # explicit syncs that are an implicit row's copy's own wait (host_calls.copy_waits): one wait


@dataclass(frozen=True)
class CopyRow(Record):
    """One copy, or copies grouped by kind or direction (the figures a group has)."""
    start: int | None = None
    duration_ns: float = 0
    bytes: int = 0
    copy_kind: str | None = None
    src_kind: str | None = None
    dst_kind: str | None = None
    api: str | None = None
    device_id: Any = None
    stream_id: Any = None
    copies: int | None = None
    gb_per_s: float | None = None


@dataclass(frozen=True)
class PageableCopies(Record):
    NESTED: ClassVar[dict[str, type]] = {"async_top": CopyRow, "by_direction": CopyRow}
    copies: int = 0
    duration_ns: float = 0
    bytes: int = 0
    async_top: tuple = ()
    by_direction: tuple = ()


@dataclass(frozen=True)
class SyncCopies(Record):
    NESTED: ClassVar[dict[str, type]] = {"top": CopyRow}
    copies: int = 0
    duration_ns: float = 0
    top: tuple = ()
    idle_after_ns: float | None = None   # the GPU's idle time after each, up to its own length (timeline.sync_idle_after)
    idle_after_by_part: dict | None = None   # ... by the budget's idle part


@dataclass(frozen=True)
class Copies(Record):
    NESTED: ClassVar[dict[str, type]] = {"by_kind": CopyRow, "pageable": PageableCopies,
                                         "pinned_large": CopyRow, "sync": SyncCopies, "on_device": CopyRow}
    by_kind: tuple = ()
    on_device: CopyRow | None = None    # copies inside a GPU's memory (Device-to-Device), summed
    pageable: PageableCopies | None = None
    pinned_large: tuple = ()
    sync: SyncCopies | None = None
    boolean_reads: int = 0   # device-to-host copies of one byte: booleans the host tests
    size_reads: int = 0      # reads of a count right after CUB's counting kernels: a data-dependent result's size


@dataclass(frozen=True)
class HostOutlier(Record):
    step: int = 0
    host_ns: float = 0
    wait: str | None = None
    wait_ns: float = 0


@dataclass(frozen=True)
class StepsSummary(Record):
    NESTED: ClassVar[dict[str, type]] = {"budget": BudgetPart, "host_outliers": HostOutlier}
    name: str = ""
    count: int = 0
    warmup: int = 0
    # the last of the leading slow steps where they go on past the warm-up's cap, half the steps (steps.leading_slow)
    slow_lead_last_step: int | None = None
    first_step: int = 0
    last_step: int = 0
    clock: str = "host"
    median_ns: float = 0
    mean_ns: float | None = None
    p95_ns: float = 0
    stddev_ns: float = 0
    mad_ns: float = 0
    min_ns: int = 0
    max_ns: int = 0
    start_ns: int = 0
    end_ns: int = 0
    host_median_ns: float = 0
    host_p95_ns: float = 0
    host_min_ns: int = 0
    host_max_ns: int = 0
    host_lead_ns: float | None = None
    host_tail_ns: float | None = None     # median time from a step's last launch and GPU work to its host range's end
    host_relation: str | None = None
    host_relation_text: str | None = None
    # One export of a multi-rank run whose collectives mostly wait: for a rank the export does not hold.
    rank_wait_text: str | None = None
    # The steps change pace part way with the same GPU work (normalize.timeline._speed_change): two runs, one line.
    speed_change_text: str | None = None
    gpu_busy_time_share: float | None = None
    host_outliers: tuple = ()
    budget: tuple | None = None


@dataclass(frozen=True)
class TimedTrials(Record):
    """The timed trials of the replayed steps around the median step (normalize.tuning): an autotuner's."""
    steps: int = 0                     # the block's steps
    steps_with_trials: int = 0
    trials_per_step: float = 0         # median over the steps with trials
    stretch_ns_per_step: float = 0     # mean over the block's steps: first trial to last sync
    step_ns: float = 0                 # the block's steps' mean measured period
    kernel_ns_per_step: float = 0      # the trials' and warm-ups' GPU time, mean a step
    kernel_share: float = 0            # ... of the GPU time the block's calls launched
    calls_per_step: float = 0          # the tuner's CUDA calls, mean a step
    own_launches_per_step: float = 0   # the step's own launches inside its stretches, mean a step
    sync_share: float = 0              # of the block's host time in sync calls, the share in the tuner's


@dataclass(frozen=True)
class StepWaits(Record):
    """The waits for the GPU in the replayed steps around the median step (normalize.waits): how many a step, and
    how many of them the backward pass makes (on the thread that launches its kernels)."""
    per_step: float = 0                 # calls of the waiting classes a step, median over the block's steps (an
    #                                     autotuner's and timing code's left out: normalize.tuning names those)
    backward_per_step: float = 0        # of them, made on the backward's thread (median)
    backward_thread_known: bool = False   # the backward's thread was told apart from the step loop's
    at_end_per_step: float = 0          # of them, made after the step's last kernel launch (median): a result read
    polls_per_step: float = 0           # of them, poll loops (median): a query answered "not ready" until it was done
    poll_call: str = ""                 # the query the poll loops call most (cudaEventQuery)
    not_ready_per_step: float = 0       # the poll loops' not-ready answers a step (median)


@dataclass(frozen=True)
class TimingCode(Record):
    """The program's own timing code in the replayed steps around the median step (normalize.tuning.TimingCode):
    event pairs around its work, each waited for by the host, nothing warmed up."""
    steps: int = 0                     # the block's steps
    steps_with_timings: int = 0
    timings_per_step: float = 0        # median over the steps with timings
    step_ns: float = 0                 # the block's steps' mean measured period
    calls_per_step: float = 0          # the timing's CUDA calls (records, syncs, event calls), mean a step
    host_ns_per_step: float = 0        # their time and the host's on the way to each, mean a step
    sync_ns_per_step: float = 0        # of it, the timing's syncs (their waits), mean a step
    sync_share: float = 0              # of the block's host time in sync calls, the share in the timing's


@dataclass(frozen=True)
class CodeBuilds(Record):
    """GPU code loaded inside the replayed steps around the median step (normalize.critical_path.code_builds): a
    module or JIT image a step, built on the host just before (the build is host code no CUDA call records)."""
    steps: int = 0                     # the block's steps
    steps_with_builds: int = 0
    builds_per_step: float = 0         # loads, median over the steps with loads
    step_ns: float = 0                 # the block's steps' mean measured period
    load_ns_per_step: float = 0        # the load calls' own time, mean a step
    host_ns_per_step: float = 0        # ... and the host's time before each beyond a typical launch path, mean a step
    calls: tuple = ()                  # ((name, loads in the block), ...), most first


@dataclass(frozen=True)
class GraphCaptures(Record):
    """CUDA graphs captured inside the replayed steps around the median step (normalize.critical_path.graph_captures):
    a stream capture a step, the graph then instantiated and launched, and the one before it destroyed."""
    steps: int = 0                       # the block's steps
    steps_with_captures: int = 0
    captures_per_step: float = 0         # median over the steps with captures
    step_ns: float = 0                   # the block's steps' mean measured period
    recorded_launches_per_step: float = 0   # kernel launch calls inside the captures (graph nodes), mean a step
    graph_calls_ns_per_step: float = 0   # the graph-build calls' own time (capture, instantiation, destruction)
    host_ns_per_step: float = 0          # the captures' host time with them: what capturing once takes off the host
    calls: tuple = ()                    # ((graph-build call name, calls in the block), ...), most first
    allocator_within: bool = False       # the steps' allocator calls are the captures' pools (critical_path.POOL_PAIRING)


@dataclass(frozen=True)
class HostData(Record):
    """The data the host handles in the replayed steps around the median step (normalize.critical_path.data_handled):
    what it uploads each step, with its work before each upload, and what it reads back (READ_BACK_MIN_BYTES or
    more a copy), with its work after each read."""
    steps: int = 0                     # the block's steps
    steps_with_data: int = 0           # ... that upload or read back data
    uploads_per_step: float = 0        # copies to the device, mean a step
    upload_bytes_per_step: float = 0
    reads_per_step: float = 0          # copies to the host of READ_BACK_MIN_BYTES or more, mean a step
    read_bytes_per_step: float = 0
    work_before_uploads_ns_per_step: float = 0   # the host's compute before the uploads' calls beyond a launch path
    work_after_reads_ns_per_step: float = 0      # ... after each read (or its wait), before its next call
    copy_ns_per_step: float = 0        # the copies' own GPU time, mean a step
    ns_per_step: float = 0             # all that keeping the data on the GPU takes away at most, mean a step
    step_ns: float = 0                 # the block's steps' mean measured period
    pageable_within: bool = False      # the block's pageable copies are these (critical_path.PAGEABLE_WITHIN_SHARE)
    syncs_within: bool = False         # the block's syncs are these copies' waits (critical_path.SYNCS_WITHIN_SHARE)


@dataclass(frozen=True)
class Recomputation(Record):
    """Forward work run again in the backward in the replayed steps around the median step (normalize.recompute):
    each backward block of a layer stack opens with the forward block's kernels."""
    steps: int = 0                     # the block's steps
    steps_with_recompute: int = 0
    layers: int = 0                    # backward blocks that run the forward again, median over those steps
    forward_kernels: int = 0           # kernels in a forward block
    rerun_kernels: int = 0             # of them, run again in each backward block
    kernels_per_step: float = 0        # kernels run again, mean a step
    kernel_ns_per_step: float = 0      # their GPU time, mean a step
    step_ns: float = 0                 # the block's steps' mean measured period


@dataclass(frozen=True)
class RepeatedBackward(Record):
    """A layer stack's backward run more often than its forward in the replayed steps around the median step
    (normalize.recompute._repeats_in_step): one backward per loss where the losses could be summed."""
    steps: int = 0                     # the block's steps
    steps_with_repeats: int = 0
    forward_passes: int = 0            # runs of the forward's block a step
    backward_passes: int = 0           # backward runs through the stack a step
    layers: int = 0                    # blocks in each run
    kernels_per_step: float = 0        # kernels of the passes beyond one per forward pass, mean a step
    kernel_ns_per_step: float = 0      # their GPU time, mean a step
    step_ns: float = 0                 # the block's steps' mean measured period


@dataclass(frozen=True)
class FirstFinding(Record):
    check: str | None = None
    title: str | None = None
    part: str | None = None
    share: float | None = None


@dataclass(frozen=True)
class Phase(Record):
    NESTED: ClassVar[dict[str, type]] = {"budget": BudgetPart, "in_window_budget": BudgetPart,
                                         "first_finding": FirstFinding}
    name: str = ""
    start_ns: int = 0
    end_ns: int = 0
    count: int = 0
    instances: Any = ()
    duration_ns: float = 0
    in_window_ns: float = 0
    is_steps: bool = False
    budget: tuple | None = None
    in_window_budget: tuple | None = None
    first_finding: FirstFinding | None = None
    path: str | None = None
    idle_ns: float | None = None
    children: tuple = ()
    processes: int | None = None   # only where its instances come from several processes (ranks): how many
    gpu_ns: float | None = None    # the GPU's side, where it launched work: each instance's first start to last end
    gpu_end_after_ns: float | None = None   # of the work it launched, summed; and the median instance's last end
    #                                         less the range's end (the work a range queued runs after it)


Phase.NESTED = {**Phase.NESTED, "children": Phase}


@dataclass(frozen=True)
class OsCalls(Record):
    name: str | None = None
    calls: int = 0
    overlap_ns: float = 0


@dataclass(frozen=True)
class ApiCall(Record):
    name: str | None = None
    calls: int = 0
    total_ns: float = 0


@dataclass(frozen=True)
class ClassInStretch(Record):
    """A host-activity class's CUDA calls inside a host stretch (normalize.host_activity): not the host's own code."""
    name: str | None = None      # the class (host_activity.csv): allocator, module-load, ...
    overlap_ns: float = 0        # the stretch's time its calls cover
    top_calls: tuple = ()        # the class's longest calls over the window, by name


@dataclass(frozen=True)
class CopyGrowth(Record):
    """Device-to-device copies that grow every step (normalize.timeline.copy_growth): a tensor grown by
    concatenation (torch.cat onto a store kept across steps) copies all it holds each time, and needs a larger
    block of memory each time."""
    first_step: int = 0          # the steady steps compared, as the report names them
    last_step: int = 0
    first_bytes: float = 0       # bytes copied on the device in the first step compared ...
    last_bytes: float = 0        # ... and in the last
    correlation: float = 0       # of the bytes a step with the step's place


@dataclass(frozen=True)
class RefusedAllocations(Record):
    """The steady steps' device allocations the driver refused for want of memory (normalize.out_of_memory): each
    time, the caching allocator freed the blocks it kept and allocated again."""
    refused: int = 0             # refused calls in the steady steps
    steps_with: int = 0          # steady steps with one or more
    steps: int = 0               # steady steps
    call: str = ""               # the call refused most often (cudaMalloc)


@dataclass(frozen=True)
class ShapeChanges(Record):
    """How often consecutive steps launch kernels of other launch shapes (normalize.steps.shape_changes)."""
    compared: int = 0            # pairs of consecutive steps compared
    changed: int = 0             # pairs whose kernels differ by name or launch shape
    example: str | None = None   # the kernel that differed in most pairs
    recounted: int = 0           # of the changed pairs, those whose steps launch other numbers of kernels
    # At this share of the pairs or more the steps change (a graph captured once does not fit the next step: token_gen's
    # KV cache grown by torch.cat, 63 of 63 pairs; the training loops of fixtures/real: 0); at this share of the changed
    # pairs or more they change by their number of kernels, not by shapes (blind69_augment's random flips: 62 of 62)
    SHARE: ClassVar[float] = 0.5

    @property
    def vary(self) -> bool:
        return bool(self.compared) and self.changed >= self.SHARE * self.compared

    @property
    def recount(self) -> bool:
        return self.vary and self.recounted >= self.SHARE * self.changed


@dataclass(frozen=True)
class HostStretch(Record):
    NESTED: ClassVar[dict[str, type]] = {"os_calls": OsCalls, "thread_os_calls": OsCalls, "jit_calls": ApiCall,
                                         "cuda_classes": ClassInStretch}
    device_id: Any = None
    start_ns: int = 0
    duration_ns: float = 0
    nvtx_range: str | None = None
    nvtx_path: str | None = None
    os_calls: tuple = ()
    host_threads: int | None = None
    blocked_ns: float | None = None
    thread_os_calls: tuple = ()
    jit_calls: tuple = ()   # (ApiCall, ...): JIT links and loads after it, before the host next gave the GPU work
    next_work_ns: int | None = None   # where there are jit_calls, the start of that next call (stretches before
                                      # one such call saw the same loads: the later ones a part of the earlier's)
    in_steps_ns: int | None = None   # its time inside the step ranges (host clock); None where steps are not ranges
    cuda_classes: tuple = ()   # (ClassInStretch, ...): CUDA calls of a host-activity class inside it, longest first
    own_ns: float | None = None   # where there are such calls, its time outside them: the host's own code
    first_kernel: str | None = None   # the kernel whose run ended it, where that was its first run in the capture
    module_loads_after: int = 0   # module-load calls after it, before the host next gave the GPU work (a code build's)
    upload_after_bytes: int = 0   # where that next call was a copy to the GPU, its bytes: the host built those inputs

    @property
    def own_time_ns(self) -> float:
        """The stretch's time in the host's own code (all of it where no classed CUDA call lies inside)."""
        return self.duration_ns if self.own_ns is None else self.own_ns


@dataclass(frozen=True)
class HostCalls(Record):
    name: str | None = None
    calls: int = 0
    overlap_ns: float = 0


@dataclass(frozen=True)
class Gap(Record):
    NESTED: ClassVar[dict[str, type]] = {"host_calls": HostCalls}
    device_id: Any = None
    start: int = 0
    end: int = 0
    duration_ns: float = 0
    host_calls: tuple = ()
    nvtx_range: str | None = None


@dataclass(frozen=True)
class BusyClock(Record):
    median_mhz: float = 0
    max_mhz: float | None = None
    samples: int = 0


@dataclass(frozen=True)
class KernelRole(Record):
    """A kernel name of the window with its role (normalize.work) and its time."""
    name: str | None = None
    demangled: str | None = None
    role: str = "other"
    ns: float = 0
    launches: int = 0
    dram_bytes: float | None = None   # DRAM bytes its launches moved (an ncu report's kernel list); absent elsewhere


@dataclass(frozen=True)
class CallClassTime(Record):
    """Host time in the CUDA calls of one host-activity class (normalize.host_activity)."""
    class_: str = ""
    calls: int = 0
    host_ns: float = 0
    top_call: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"class": self.class_, "calls": self.calls, "host_ns": int(self.host_ns), "top_call": self.top_call}


@dataclass(frozen=True)
class LeftOut(Record):
    """What the steady window leaves out before it: start-up and warm-up steps, with the host's CUDA calls
    in it by class."""
    start_ns: int = 0
    end_ns: int = 0
    ns: float = 0
    capture_share: float = 0      # of the capture from its start to the window's end
    warmup_steps: int = 0
    warmup_ns: float = 0
    gpu_busy_ns: float = 0
    classes: tuple = ()

    def to_json(self) -> dict[str, Any]:
        return {"start_ns": self.start_ns, "end_ns": self.end_ns, "ns": int(self.ns),
                "capture_share": self.capture_share, "warmup_steps": self.warmup_steps,
                "warmup_ns": int(self.warmup_ns), "gpu_busy_ns": int(self.gpu_busy_ns),
                "classes": [c.to_json() for c in self.classes]}


@dataclass(frozen=True)
class KernelList(Record):
    """What an ncu report's kernel list tells the program checks beside its kernels' time."""
    launch_floor_ns: float | None = None   # the report's measured launch floor
    device_names: Any = ()
    instruction_mix_judged: frozenset = frozenset()   # kernels whose FLOPs missing-tensor-cores read
    user_kernel_ns: float = 0              # the user's own kernels (not a library's)
