"""Nsight Compute reports, read through NVIDIA's `ncu_report` module.

Everything is kept raw: metric values as `ncu_report` returns them (base units: ns, byte, hz,
cycle, %), their units, launch attributes, device attributes, NVTX state, NVIDIA's own rule
results and, for the SASS-instanced source counters, the value at each PC with its file:line.
Interpretation happens downstream, in `nsanalyze.normalize`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from nsanalyze.errors import InputError
from nsanalyze.native_stderr import NativeStderr

# SASS-instanced metrics whose per-PC values point a finding at source lines.
SOURCE_COUNTERS = (
    "inst_executed",
    "thread_inst_executed_true",
    "memory_l2_theoretical_sectors_global",
    "memory_l2_theoretical_sectors_global_ideal",
    "memory_l2_theoretical_sectors_local",
    "memory_l1_wavefronts_shared",
    "memory_l1_wavefronts_shared_ideal",
    "smsp__branch_targets_threads_divergent",
    "smsp__pcsamp_sample_count",
    "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
    "smsp__pcsamp_warps_issue_stalled_lg_throttle",
    "smsp__pcsamp_warps_issue_stalled_mio_throttle",
    "smsp__pcsamp_warps_issue_stalled_short_scoreboard",
    "smsp__pcsamp_warps_issue_stalled_barrier",
    "sass__inst_executed_register_spilling",
)


class SourceSpot:
    """One SASS instruction: its value for one source counter, and where it comes from. File, line and
    SASS text are looked up when first read (each lookup costs 0.4-0.7 ms, and most spots are never
    shown: a finding shows the top lines of the spots its check selects). `code`: the function's source
    look-ups (SourceCode); without it, `file`, `line` and `sass` are as given."""

    __slots__ = ("pc", "value", "_where", "_sass", "_code")

    def __init__(self, pc: int, value: float, file: str | None = None, line: int | None = None, sass=None,
                 code: "SourceCode | None" = None):
        self.pc, self.value, self._code = pc, value, code
        self._where = (file, line) if code is None else None
        self._sass = sass

    def _source(self) -> tuple[str | None, int | None]:
        if self._where is None:
            self._where = self._code.where(self.pc)
        return self._where

    @property
    def file(self) -> str | None:
        return self._source()[0]

    @property
    def line(self) -> int | None:
        return self._source()[1]

    @property
    def sass(self) -> str | None:
        if self._sass is None and self._code is not None:
            text = self._code.action_for(self.pc).sass_by_pc(self.pc)
            text = text.strip() if text else ""
            self._sass = "" if set(text) <= {"?"} else text   # ncu's placeholder for an instruction it cannot show
        return self._sass or None


UNASKED = object()   # SourceCode.table before the markers were read


class SourceCode:
    """Where one loaded function's PCs come from in the source. NVIDIA's `ncu_report` builds a launch's
    PC-to-source map (the SASS of the launch's whole module, disassembled, with its line table) on the
    first look-up: 0.05-0.4 s and about 16-20 MB kept until the report is closed, for each launch. So
    launches share maps: launches of one function at one address in one context and device run the same
    code and share one SourceCode; and a function whose PCs lie in a map already built for another
    function of the same context and device (one module, one map) reads that map. The GPT step's
    `--set full` report: 63 launches, 26 functions, 18 modules (maps).

    A module built without a line table (`-lineinfo`: PyTorch's, cuBLAS's) answers "no file" for every PC,
    which NVIDIA's own rules already say for free: they mark hot SASS lines, and where the module has a line
    table, the source line of each too (line_table). Such a function's files are not looked up."""

    __slots__ = ("action", "lines", "built", "peers", "table")

    def __init__(self, action, peers: list | None = None):
        self.action, self.lines, self.built = action, {}, False
        self.peers = peers if peers is not None else []   # the SourceCodes of the same context and device
        self.peers.append(self)
        self.table = UNASKED   # line_table(action): asked at the first look-up (its markers cost up to 1.7 ms)

    def action_for(self, pc: int):
        """The action whose map answers for `pc`: a peer's already-built map where it holds `pc` (its module
        is this function's), else this function's own, built now."""
        if not self.built:
            for peer in self.peers:
                if peer is not self and peer.built and peer.action.sass_by_pc(pc):
                    self.action = peer.action
                    break
            self.built = True
        return self.action

    def where(self, pc: int) -> tuple[str | None, int | None]:
        if self.table is UNASKED:
            self.table = line_table(self.action)
        if self.table is False:
            return (None, None)
        if pc not in self.lines:
            info = self.action_for(pc).source_info(pc)
            self.lines[pc] = (info.file_name(), info.line()) if info is not None else (None, None)
        return self.lines[pc]


def line_table(action) -> bool | None:
    """Whether the launch's module has a line table, as the markers NVIDIA's rules put on the launch say:
    a marker on a SASS instruction (`source_address`) comes with one on its source line (`source_location`)
    exactly where the module has a line table (every launch of the 44 ncu reports of fixtures/ that has a
    SASS marker: 59 with both, 186 with SASS markers only, whose maps give no file for any PC). None where no
    rule marked a SASS line: the map is asked."""
    try:
        markers = action.source_markers() or []
    except Exception:  # noqa: BLE001 - an ncu_report without markers: ask the map
        return None
    if any(isinstance(m, dict) and (m.get("source_location") or {}).get("file_name") for m in markers):
        return True
    return False if any(isinstance(m, dict) and "source_address" in m for m in markers) else None


class SourceCounters:
    """The per-PC values of one launch's SOURCE_COUNTERS, read on first use: a `--set full` report holds
    thousands of PCs per kernel, and only kernels with a finding show source lines. Behaves as a
    read-only mapping metric -> [SourceSpot]; the loaded report stays alive with it. `code`: the
    function's shared source look-ups (SourceCode), where the launch's function is known."""

    def __init__(self, action, available: list[str], keep_alive=None, code: SourceCode | None = None):
        self._action, self._available, self._keep_alive = action, available, keep_alive
        self._read: dict[str, list[SourceSpot]] = {}
        self._code = code or SourceCode(action)

    def get(self, metric: str | None, default=None):
        if metric not in self._available:
            return default
        if metric not in self._read:
            try:
                self._read[metric] = _source_spots(self._action, self._action.metric_by_name(metric), self._code)
            except Exception:  # noqa: BLE001 - a damaged source section costs the source lines only
                self._read[metric] = []
        return self._read[metric]

    def __contains__(self, metric) -> bool:
        return metric in self._available

    def __deepcopy__(self, memo):  # read-only data behind a live report handle: shared, not copied
        return self

    def __iter__(self):
        return iter(self._available)

    def __len__(self) -> int:
        return len(self._available)

    def __getitem__(self, metric: str) -> list[SourceSpot]:
        if metric not in self._available:
            raise KeyError(metric)
        return self.get(metric)


@dataclass
class NcuLaunch:
    """One profiled kernel launch (an `ncu_report` action) with its raw metrics."""

    index: int
    range_index: int
    name: str
    demangled: str
    mangled: str
    metrics: dict[str, float]
    strings: dict[str, str]
    source: "SourceCounters | dict[str, list[SourceSpot]]" = field(default_factory=dict)
    nvtx: list[str] = field(default_factory=list)
    nvidia_rules: list[dict] = field(default_factory=list)


@dataclass
class NcuReport:
    path: str
    launches: list[NcuLaunch]
    units: dict[str, str]
    kind: str = "ncu"
    unmeasured: list[NcuLaunch] = field(default_factory=list)  # launches the report holds no metrics for
    set_aside: dict[str, int] = field(default_factory=dict)   # metric -> values set aside (±inf, -1e12, clock <= 0)
    cache_hold: object = field(default=None, repr=False, compare=False)   # files.CacheHold of its decompressed copy

    @property
    def device_name(self) -> str | None:
        return self.launches[0].strings.get("device__attribute_display_name") if self.launches else None

    @property
    def compute_capability(self) -> str | None:
        if not self.launches:
            return None
        m = self.launches[0].metrics
        major = m.get("device__attribute_compute_capability_major")
        minor = m.get("device__attribute_compute_capability_minor")
        if major is None or minor is None:
            return None
        return f"{int(major)}.{int(minor)}"


def _import_ncu_report():
    try:
        import ncu_report
    except ImportError as exc:  # pragma: no cover - a broken installation, not a bad input
        raise SystemExit(f"nsanalyze: NVIDIA's ncu_report package is not installed ({exc}); run `make setup`") from None
    return ncu_report


def _nvtx_ranges(action) -> list[str]:
    """The NVTX push/pop and start/end ranges open at this launch, outermost first, as domain/name."""
    state = action.nvtx_state()
    if state is None:
        return []
    names = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        prefix = "" if domain_id == 0 else f"{domain.name()}@"
        names.extend(prefix + str(r) for r in domain.push_pop_ranges())
        names.extend(prefix + str(r) for r in domain.start_end_ranges())
    return names


def _source_spots(action, metric, code: SourceCode) -> list[SourceSpot]:
    """The PCs with a nonzero value (read from `action`); their file, line and SASS are looked up through
    `code`, the function's shared map, which caches each PC's file and line."""
    correlation = metric.correlation_ids()
    spots = []
    for i in range(metric.num_instances()):
        value = metric.as_double(i)
        if value:
            spots.append(SourceSpot(pc=correlation.as_uint64(i), value=value, code=code))
    return spots


def _code_key(action, mangled: str):
    """What identifies a launch's loaded code: (function name, context, device, the function's address
    (`launch__function_pcs`)); None where the report does not say."""
    try:
        key = [mangled]
        for name in ("launch__context_id", "launch__device_id", "launch__function_pcs"):
            metric = action.metric_by_name(name)
            if metric is None or not metric.has_value() or metric.num_instances() > 1:
                return None
            key.append(metric.as_uint64(0) if name == "launch__function_pcs" else metric.as_double())
    except Exception:  # noqa: BLE001 - no address: the launch keeps a map of its own
        return None
    return tuple(key)


# Instanced metrics keyed by SASS opcode (not by PC): each opcode's count is kept as `NAME:OPCODE`
# (`sass__inst_executed_per_opcode_with_modifier_all:MUFU.RCP64H`), the plain name keeps the total.
OPCODE_COUNTERS = ("sass__inst_executed_per_opcode_with_modifier_all",)

def _per_opcode(metric, name: str) -> dict[str, float]:
    """`NAME:OPCODE` -> count for an instanced metric whose instances are keyed by opcode text."""
    try:
        if not metric.has_correlation_ids():
            return {}
        ids = metric.correlation_ids()
        out: dict[str, float] = {}
        for i in range(metric.num_instances()):
            value = metric.as_double(i)
            if value is not None and math.isfinite(value):
                key = f"{name}:{ids.as_string(i)}"
                out[key] = out.get(key, 0.0) + value
        return out
    except Exception:  # noqa: BLE001 - an unreadable breakdown costs the opcode counts only
        return {}


# Read whatever metrics a caller asks for: launch identity, duration and the source counters.
ALWAYS_READ = frozenset({"gpu__time_duration.sum", "gpu__time_duration", "device__attribute_display_name",
                         "device__attribute_compute_capability_major", "device__attribute_compute_capability_minor",
                         *SOURCE_COUNTERS, *OPCODE_COUNTERS})


# Values that must be above zero: a clock, a rate, an SM count, a duration of 0 or less is no measurement.
POSITIVE = re.compile(r"frequency|clock_rate|cycles_elapsed\.\w+\.per_second|multiprocessor_count|^gpu__time_duration")


FAR_BELOW_ZERO = -1e9


# Metrics ncu itself leaves NaN in real reports (its derived temporaries, PM sampling buffers): read as
# absent, not counted. A NaN anywhere else is set aside and counted like ±inf.
NCU_OWN_NAN = re.compile(r"derived_temp|pmsampling:")


def impossible(name: str, value: float) -> bool:
    """A value no measurement gives: not finite; a billion or more below zero; or a clock, rate, SM count
    or duration of zero or less. ncu's own counters, derived by subtraction, can be a little below zero
    (-746 shared-memory bank conflicts, -2 L2 sectors in real reports; pct metrics a hundredth below zero,
    maxima above 100%): those are kept, as read."""
    if not math.isfinite(value):
        return True
    return value <= FAR_BELOW_ZERO or (value <= 0 and bool(POSITIVE.search(name)))


def _read_action(ncu_report, action, index: int, range_index: int, units: dict, context=None,
                 wanted: frozenset | None = None, set_aside: dict | None = None,
                 code_of: dict | None = None) -> NcuLaunch:
    metrics: dict[str, float] = {}
    strings: dict[str, str] = {}
    with_source: list[str] = []
    string_kind = ncu_report.IMetric.ValueKind_STRING
    names = action.metric_names()
    if wanted is not None:  # a `--set full` launch holds over 2,000 metrics; the analysis reads a few hundred
        names = [name for name in names if name in wanted]
    for name in names:
        metric = action.metric_by_name(name)
        if metric is None or not metric.has_value():
            continue
        if metric.kind() == string_kind:
            strings[name] = metric.as_string()
            continue
        value = metric.as_double()
        if value is None:
            continue
        if isinstance(value, float) and math.isnan(value) and NCU_OWN_NAN.match(name):
            continue   # ncu's own temporaries and PM samples hold NaN in real reports: no value, as ncu shows it
        if impossible(name, value):   # set aside and counted (NcuReport.set_aside), never used
            if set_aside is not None:
                set_aside[name] = set_aside.get(name, 0) + 1
            continue
        metrics[name] = value
        if name not in units:
            units[name] = metric.unit()
        if name in OPCODE_COUNTERS:
            metrics.update(_per_opcode(metric, name))
        if name in SOURCE_COUNTERS and metric.has_correlation_ids():
            with_source.append(name)
    base = ncu_report.IAction
    mangled = action.name(base.NameBase_MANGLED)
    code = None
    if with_source and code_of is not None:
        key = _code_key(action, mangled)
        code = code_of.get(key) if key else None
        if code is None:
            code = SourceCode(action, code_of.setdefault(key[1:3] if key else None, []) if key else None)
            if key:
                code_of[key] = code
    return NcuLaunch(
        index=index,
        range_index=range_index,
        name=action.name(base.NameBase_FUNCTION),
        demangled=action.name(base.NameBase_DEMANGLED),
        mangled=mangled,
        metrics=metrics,
        strings=strings,
        source=SourceCounters(action, with_source, context, code) if with_source else {},
        nvtx=_nvtx_ranges(action),
        nvidia_rules=list(action.rule_results_as_dicts() or []),
    )


def set_aside_unmeasured(launches: list[NcuLaunch], display: str) -> tuple[list[NcuLaunch], list[NcuLaunch]]:
    """(launches with metrics, renumbered; launches without). A launch ncu could not profile (replay
    failed, profiling stopped) keeps its name but no metrics: the rest of the report is still good.
    A launch without even a name is a record cut off mid-way: the file is damaged."""
    measured = [launch for launch in launches
                if "gpu__time_duration.sum" in launch.metrics or "gpu__time_duration" in launch.metrics]
    if not measured:
        raise InputError(display, f"truncated or damaged report: none of its {len(launches)} launches holds metrics")
    kept = {id(launch) for launch in measured}
    unmeasured = [launch for launch in launches if id(launch) not in kept]
    broken = next((launch for launch in unmeasured if not launch.name), None)
    if broken is not None:
        raise InputError(display, f"truncated or damaged report: launch {broken.index + 1} is incomplete")
    for index, launch in enumerate(measured):
        launch.index = index
    return measured, unmeasured


NCU_SIGNATURE = b"NVR\x00"  # the first bytes of every .ncu-rep


def _with_library_note(exc: InputError, native: NativeStderr) -> InputError:
    if native.said and native.said not in exc.reason:
        return InputError(exc.path, f"{exc.reason} (NVIDIA's reader: {native.said})")
    return exc


def read_ncu(path, display_path=None, metrics=None) -> NcuReport:
    """Loads every range and action of a .ncu-rep. Raises InputError for an unreadable report.
    `metrics`: the raw metric names to keep (besides ALWAYS_READ); None keeps them all."""
    wanted = None if metrics is None else frozenset(metrics) | ALWAYS_READ
    display = str(display_path or path)
    with open(path, "rb") as handle:
        if handle.read(len(NCU_SIGNATURE)) != NCU_SIGNATURE:
            raise InputError(display, "not an Nsight Compute report (wrong file signature)")
    ncu_report = _import_ncu_report()
    native = NativeStderr()
    try:
        with native:
            return _read_loaded(ncu_report, path, display, wanted)
    except InputError as exc:
        raise _with_library_note(exc, native) from None


def _read_loaded(ncu_report, path, display: str, wanted) -> NcuReport:
    try:
        context = ncu_report.load_report(str(path))
    except Exception as exc:  # ncu_report raises a bare Exception/RuntimeError on bad files
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise InputError(display, f"not a readable Nsight Compute report ({message})") from None
    if context is None:
        raise InputError(display, "not a readable Nsight Compute report")
    units: dict[str, str] = {}
    set_aside: dict[str, int] = {}
    launches: list[NcuLaunch] = []
    code_of: dict = {}   # the launches' SourceCode by code key, and the peers' lists by (context, device)
    try:
        for range_index in range(context.num_ranges()):
            profile_range = context.range_by_idx(range_index)
            for action_index in range(profile_range.num_actions()):
                action = profile_range.action_by_idx(action_index)
                launches.append(_read_action(ncu_report, action, len(launches), range_index, units, context, wanted,
                                             set_aside, code_of))
    except Exception as exc:
        raise InputError(display, f"corrupt Nsight Compute report ({exc})") from None
    if not launches:
        raise InputError(display, "not a usable Nsight Compute report: it holds no kernel launches")
    measured, unmeasured = set_aside_unmeasured(launches, display)
    return NcuReport(path=display, launches=measured, units=units, unmeasured=unmeasured, set_aside=set_aside)
