"""What every check shares: its declaration, the view of a kernel it reads, the raw finding it returns.

A check is a module in checks/kernel/ or checks/program/: its documentation (the module docstring), one
declaration `CHECK = Check(...)` beside its logic, and `run(kernel_or_timeline, limits) -> Finding | None`
(a pure function). A kernel check may also define `applies(kernel) -> bool` (hardware the GPU has).
The registry (checks/__init__.py) validates every declaration when it loads them; `scripts/new_check.py`
writes a new one.

The module docstring uses fixed headings: What it detects / Why it is slow / Example /
Instead / Known problems / Options; a registry test fails when one is missing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from nsanalyze.numbers import duration_text, finite

SEVERITIES = ("high", "medium", "low", "info")
SECTIONS = ("busy", "work", "memory", "tensor", "kernel")  # the report's sections, in its order (render/html.py)
ROOFS = ("memory", "compute")                               # what a kernel finding's fix may relieve
KINDS = ("kernel", "program")
CHECK_ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


@dataclass(frozen=True)
class Threshold:
    default: float
    why: str
    at_least: float = 0.0   # the least value --set accepts: no threshold is negative; a factor is 1 or more


@dataclass(frozen=True, eq=False)
class Check:
    """One check, declared once in its module (`CHECK = Check(...)`). A misspelled field is a TypeError
    when the module is imported; the registry checks the rest (unique ids, known REQUIRES) when it loads."""

    id: str                           # the id users see: --skip, --set ID.key, the report's `check` (contract)
    name: str                         # a dotted name (SARIF's rule name)
    title: str                        # one line
    section: str                      # the report section its findings appear in (SECTIONS)
    requires: tuple[str, ...]         # what it cannot judge without: kernel concepts, or Timeline attributes
    thresholds: Mapping[str, Threshold]  # {key: Threshold(default, why)}; overridable with --set ID.key=value
    speedup_model: str                # how estimated_speedup is computed, in words
    advice: str                       # Markdown with a before/after example
    optional: tuple[str, ...] = ()    # what it uses when present
    collect: str = "--set full"       # kernel checks: the ncu option that collects what `requires` needs
    relieves: str | None = None       # kernel checks: the roof a fix takes load off (ROOFS), or None
    after: tuple[str, ...] = ()       # kernel checks: checks whose savings this one counts after (rank.py)
    budget_part: str | None = None    # program checks: the part of the time budget its savings come from
    change: Any = None                # the change the finding stands for, replayed by `nsanalyze whatif`
    # kernel checks: (program check, kernel role) where that program check states the same cause over the kernels
    # of that role (missing-tensor-cores on a CUDA-core GEMM within low-tensor-activity): rank.within_program_causes
    part_of: tuple[str, str] | None = None
    # program checks: the kernel roles whose kernels the finding's change replaces (fused=True, the foreach optimizer's
    # kernels): a kernel finding on one of them is counted within the finding and capped at info, its own fix moot
    # once the change is made (gpt_bf16: nine of seventeen rows were launch shapes of the foreach optimizer's kernels)
    replaces_roles: tuple[str, ...] = ()
    # filled in by the registry from the module: not declared
    kind: str = ""
    run: Callable | None = None
    applies: Callable | None = None
    doc: str = ""

    def __post_init__(self):
        problems = []
        if not isinstance(self.id, str) or not CHECK_ID.fullmatch(self.id):
            problems.append(f"id {self.id!r} is not lower-case words joined by '-'")
        if self.section not in SECTIONS:
            problems.append(f"section {self.section!r} is none of {', '.join(SECTIONS)}")
        if self.relieves is not None and self.relieves not in ROOFS:
            problems.append(f"relieves {self.relieves!r} is none of {', '.join(ROOFS)} (or None)")
        for attribute in ("requires", "optional", "after", "replaces_roles"):
            value = getattr(self, attribute)
            if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                problems.append(f"{attribute} must be a tuple of names, not {value!r}")
        if not all(isinstance(k, str) and isinstance(t, Threshold) for k, t in dict(self.thresholds).items()):
            problems.append("thresholds must map names to Threshold(default, why)")
        if problems:
            raise ValueError(f"check {self.id!r}: " + "; ".join(problems))


@dataclass
class Finding:
    check: str
    title: str
    estimated_speedup: float
    evidence: dict[str, dict[str, Any]]
    advice: str
    kernel_name: str | None = None
    kernel_id: int | None = None
    severity: str = "info"
    estimated_savings_ns: float = 0.0
    rank: int = 0
    source: "list[dict[str, Any]] | SourceLines" = field(default_factory=list)
    device_id: int | None = None
    notes: list[str] = field(default_factory=list)
    relieves: str | None = None     # set by the registry from the check's; a check may narrow it for one kernel
    # ("on-chip": its fix takes load off L1/L2 only, not off the DRAM roof that rank.apply_roof_gate reads)
    budget_part: str | None = None  # program findings: the part of the time budget their savings come from
    budget_device: Any = None       # ... and the GPU whose budget it is, when one GPU's time is saved
    gpu: dict | None = None         # program findings about one GPU: {rank, device} as integers
    after_others: bool = False      # kernel findings: savings count after the kernel's other findings
    kernel_ids: list[int] = field(default_factory=list)  # kernel findings: every kernel entry the savings cover
    kernel_time_ns: float | None = None  # kernel findings: their time, what estimated_speedup is a share of
    # kernel findings: (share, unit, % busy) the launch's findings fixed together save at most (rank._bound_together)
    joint_cap: tuple | None = None
    # program findings: the change this finding stands for where its check states more than one (its `change`
    # otherwise; unfused-optimizer: a loop's launches fused, or passes faster), and, with budget_part set by the
    # check, the part its savings come from (the check's budget_part otherwise). Not in the JSON: the notes say it.
    change: Any = None
    # set by the ranking, not in the JSON: a kernel finding's share before overlaps and the floor (breaks ties), and
    # whether its savings count after the kernel's other findings (rank.apply_overlaps)
    potential: float = 0.0
    counted_after: bool = False
    # program findings: the critical_path.Change whose replay priced the savings (rank._next_limit replays what
    # limits next from it), whether the loop's kernels name its change (launch-loop: fused=True, nn.LSTM), and
    # whether, counted within a wider finding, it saves as much and so ranks first (rank.within_wider_changes)
    replayed_change: Any = None
    names_its_change: bool = False
    leads: bool = False
    # program findings: of its replayed saving, the host's launch paths of the kernels its change removes or fuses
    # (pricing.Priced.dropped_host_ns), which a graph of the whole step removes too (rank.settle_program_findings)
    dropped_host_ns: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "check": self.check,
            "severity": self.severity,
            "kernel_name": self.kernel_name,
            "kernel_id": self.kernel_id,
            "title": self.title,
            "evidence": self.evidence,
            "estimated_speedup": round(self.estimated_speedup, 4),
            "estimated_savings_ns": round(self.estimated_savings_ns, 1),
            "advice": self.advice,
            "source": list(self.source),
            "device_id": self.device_id,
            "notes": self.notes,
            **({"budget_part": self.budget_part} if self.budget_part else {}),
            **({"budget_device": self.budget_device} if self.budget_device is not None else {}),
            **({"gpu": self.gpu} if self.gpu is not None else {}),
            **({"kernel_ids": self.kernel_ids, "kernel_time_ns": round(self.kernel_time_ns or 0.0, 1)}
               if self.kernel_id is not None else {}),
        }


@dataclass
class NotJudged:
    """A check that could not look at a kernel: which concepts were missing and how to collect them."""

    check: str
    kernel_name: str | None
    missing: list[str]
    collect: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "kernel_name": self.kernel_name, "missing": self.missing, "collect": self.collect}


def unjudged(*missing: str, collect: str = "") -> NotJudged:
    """What a check's run() returns when the kernel lacks what it judges by, beyond its REQUIRES (e.g. any
    one of several ways to measure coalescing): the check is then listed as not judged, never silent.
    The registry fills in the check, the kernel and, when `collect` is empty, the check's COLLECT."""
    return NotJudged("", None, list(missing), collect)


def evidence(value, threshold=None, *, unit: str = "", compare: str | None = None) -> dict[str, Any]:
    """One evidence entry: the measured value and the limit it was held against."""
    entry: dict[str, Any] = {"value": _round(value)}
    if unit:
        entry["unit"] = unit
    if threshold is not None:
        entry["threshold"] = _round(threshold)
        entry["compare"] = compare or ">"
    return entry


def _round(value):
    value = finite(value)
    return float(f"{value:.6g}") if isinstance(value, float) else value


def clamp01(value: float) -> float:
    return max(0.0, min(1.0, value))


class KernelView:
    """Read-only access to one kernel's normalized concepts; missing values read as None."""

    def __init__(self, values: dict[str, Any], source_spots: dict[str, list] | None = None,
                 undefined: set[str] | None = None):
        self._values = values
        self.source_spots = source_spots or {}
        self.undefined = undefined or set()  # measured, but meaningless here (0/0: no shared memory used)

    @property
    def name(self) -> str:
        return self._values.get("name") or "?"

    @property
    def id(self):
        return self._values.get("id")

    def get(self, concept: str):
        return finite(self._values.get(concept))

    def has(self, *concepts: str) -> bool:
        return all(self.get(c) is not None for c in concepts)

    def missing(self, concepts) -> list[str]:
        return [c for c in concepts if self.get(c) is None]

    def excess_share_on(self, opcode: str, metric: str, ideal_metric: str, limit: int = 8) -> float | None:
        """The share of the kernel's excess `metric` (over `ideal_metric` at the same PC) that SASS instructions
        whose opcode starts with `opcode` carry, from the `limit` instructions with the most excess (each one's
        SASS text is a look-up); None without source counters. Tells what kind of access the excess comes from
        (cp.async's LDGSTS, a vector LDS.128), which changes the fix."""
        excess = [item for item in excess_by_spot(self.source_spots, metric, ideal_metric) if item[0] > 0]
        total = sum(e for e, _ in excess)
        if not total:
            return None
        top = sorted(excess, key=lambda item: -item[0])[:limit]
        return sum(e for e, spot in top if (spot.sass or "").startswith(opcode)) / total

    def top_spots(self, metric: str, ideal_metric: str | None = None, limit: int = 3) -> "SourceLines":
        """The source lines with the most of `metric` (minus `ideal_metric` at the same PC, when given),
        found when first read: a report's per-PC data is large, and most findings are merged away."""
        return SourceLines(self.source_spots, metric, ideal_metric, limit)


def excess_by_spot(source_spots: dict, metric: str, ideal_metric: str | None) -> list[tuple[float, Any]]:
    """(each SASS instruction's `metric` less its `ideal_metric` at the same PC, the instruction), of every
    instruction the metric measures; the value itself where no ideal is given."""
    ideal = {s.pc: s.value for s in source_spots.get(ideal_metric) or []} if ideal_metric else {}
    return [(spot.value - ideal.get(spot.pc, 0.0), spot) for spot in source_spots.get(metric) or []]


class SourceLines(Sequence):
    """A finding's source lines, computed on first use (see KernelView.top_spots)."""

    def __init__(self, source_spots, metric: str, ideal_metric: str | None, limit: int):
        self._arguments = (source_spots, metric, ideal_metric, limit)
        self._lines: list[dict[str, Any]] | None = None

    def _resolve(self) -> list[dict[str, Any]]:
        if self._lines is None:
            source_spots, metric, ideal_metric, limit = self._arguments
            by_line: dict[tuple, dict[str, Any]] = {}
            for excess, spot in excess_by_spot(source_spots, metric, ideal_metric):
                if excess <= 0 or not spot.file:  # the value first: file and line cost a lookup each
                    continue
                key = (spot.file, spot.line)
                entry = by_line.setdefault(key, {"file": spot.file, "line": spot.line, "value": 0.0, "sass": spot.sass})
                entry["value"] += excess
            ranked = sorted(by_line.values(), key=lambda e: -e["value"])[:limit]
            self._lines = [{**e, "value": _round(e["value"])} for e in ranked]
        return self._lines

    def __getitem__(self, index):
        return self._resolve()[index]

    def __len__(self) -> int:
        return len(self._resolve())

    def __eq__(self, other) -> bool:
        return list(self) == list(other)


def memory_bound_share(kernel: KernelView) -> float | None:
    """How much the memory system limits the kernel: its memory speed-of-light share (0..1)."""
    memory = kernel.get("memory_throughput_pct")
    if memory is None:
        memory = kernel.get("dram_throughput_pct")
    return None if memory is None else clamp01(memory / 100.0)


def share_of_need(source, concept: str) -> float | None:
    """The bytes a unit moved (`dram_bytes`, `l2_bytes`) over the bytes the kernel's global accesses need (its ideal
    sectors x 32), from a KernelView or a normalized row; None where either is not measured. At most
    AT_NEED_SLACK, the unit moves no excess: coalescing takes nothing off it."""
    moved, ideal = source.get(concept), source.get("global_sectors_ideal")
    if not isinstance(moved, (int, float)) or not isinstance(ideal, (int, float)) or moved != moved or ideal != ideal \
            or not ideal:
        return None
    return moved / (ideal * 32)


AT_NEED_SLACK = 1.1   # a tenth over the need: tails, misaligned starts


def roof_share(kernel: KernelView) -> float | None:
    """The kernel's distance to its nearest roof: max of compute and memory speed of light (0..1)."""
    values = [kernel.get(c) for c in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct")]
    values = [v for v in values if v is not None]
    return clamp01(max(values) / 100.0) if values else None


def scheduler_busy(kernel) -> tuple[float | None, str]:
    """How busy the schedulers are, in %, and the metric that says it: issue-slot use, else the SM's throughput."""
    if kernel.get("issue_active_pct") is not None:
        return kernel.get("issue_active_pct"), "issue_active_pct"
    if kernel.get("sm_throughput_pct") is not None:
        return kernel.get("sm_throughput_pct"), "sm_throughput_pct"
    return None, "issue_active_pct"


def busy_scaled(waste: float, busy_pct: float | None, unmeasured: str) -> tuple[float, list[str]]:
    """A waste's speedup is its share times how busy the unit it wastes is; where that is not measured, no
    savings are estimated and the note `unmeasured` (what would measure it) says so: never assumed."""
    if busy_pct is None:
        return 0.0, [f"no savings estimated: {unmeasured}"]
    return clamp01(waste * clamp01(busy_pct / 100.0)), []


def size_text(byte_count: float) -> str:
    """Bytes with the unit that reads best (decimal, as ncu prints them): 812 kB, 4.2 MB, 1.75 TB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(byte_count) >= scale:
            return f"{byte_count / scale:.3g} {unit}"
    return f"{byte_count:.0f} B"


def plural(count, noun: str) -> str:
    """`1 copy`, `3 copies`, `2,388 launches`: counts in titles read as sentences (thousands grouped, as the
    other figures of a title)."""
    count = int(count)
    if count == 1:
        return f"1 {noun}"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return f"{count:,} {noun[:-1]}ies"
    if noun.endswith(("ch", "sh", "s", "x")):
        return f"{count:,} {noun}es"
    return f"{count:,} {noun}s"


def budget_part(timeline, part: str, device_id=None) -> tuple[float, float]:
    """(ns, share of the window) of one part of the program's time budget (normalize.budget), over the
    window (GPUs averaged) or of one GPU."""
    entries = timeline.budget or ()
    if device_id is not None:
        entries = next((d.budget or () for d in timeline.devices if d.device_id == device_id), entries)
    for entry in entries:
        if entry.part == part:
            return float(entry.ns), float(entry.share or 0.0)
    return 0.0, 0.0


def step_count(timeline) -> int | None:
    """The steady steps of the window, or None where the run has none (titles then speak of the window)."""
    steps = getattr(timeline, "steps", None)
    return steps.count if steps is not None and steps.count else None


def time_per_step(steps: int | None):
    """A time of the window as titles say it: `3.14 ms a step` where the run has steps, else the window's total."""
    return (lambda ns: f"{duration_text(ns / steps)} a step") if steps else duration_text


def median_step_part(timeline, part: str) -> float | None:
    """ns of one budget part in a median steady step, when the run has steps."""
    for entry in (timeline.steps.budget or ()) if timeline.steps else ():
        if entry.part == part:
            return float(entry.ns)
    return None


# The step's share is said beside the window's where the two print differently: "44% of the window (29.5 ms of a
# median 66.6 ms step, 44%)" said one figure twice, and where they differed by under 3 points the step's was left
# out, so item_sync_heavy_host's title read 57% of the window beside the header's 56% of a median step


def per_step_phrase(timeline, part: str, window_ns: float | None = None, window_share: float | None = None) -> str:
    """` (3.02 ms of a median 3.49 ms step, 87%)`, or nothing when the run has no steps: titles speak per step.
    `window_ns`: the part's time the finding prices, when less than the budget's (a wider cause claims
    the rest): the median step's share is scaled alike. `window_share`: the share of the window the title
    gives before it; the step's own share is left out where it prints the same."""
    per_step = median_step_part(timeline, part)
    if per_step is None:
        return ""
    raw_ns = budget_part(timeline, part)[0]
    if window_ns is not None and raw_ns and window_ns < raw_ns:
        per_step *= window_ns / raw_ns
    # the step's median as the header prints it (3 figures): never 29.68 ms here beside 29.7 ms there
    # the step's own share beside it: a title's share of the window (outlier steps, time between steps) and
    # this figure are two bases, and "24% of the window (1.41 ms of each 4.08 ms step)" read as a contradiction
    share = per_step / timeline.steps.median_ns if timeline.steps.median_ns else 0.0
    text = f"{duration_text(per_step)} of a median {duration_text(timeline.steps.median_ns)} step"
    if window_share is None or f"{share:.0%}" != f"{window_share:.0%}":
        text += f", {share:.0%}"
    window_ns = budget_part(timeline, part)[0] if window_ns is None else window_ns
    steps_ns = per_step * timeline.steps.count
    if window_ns > 2 * steps_ns:  # most of it lies between the steps (a phase, the steps' outliers)
        text += f"; {max(0.0, window_ns - steps_ns) / 1e6:.0f} ms of it between or around the median steps"
    return f" ({text})"
