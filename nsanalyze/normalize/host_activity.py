"""What the host was doing while the GPU idled: every CUDA call and OS call by a class of the table
`host_activity.csv` (allocator, pinned-alloc, sync, copy, module-load, launch, file-io, lock-wait, ...).

The time budget (normalize.budget) says *that* the GPU idled behind the host; this says *in what*. Each
class's calls in a GPU's processes are merged into islands and painted over the window in the table's
order (a CUDA call before the OS calls it makes; GPU work first of all), so every idle nanosecond goes to
at most one class; what no call covers stays with its budget part (framework dispatch between launches,
the host's own code). A call the table does not know is its own class, named as itself.

Per class: the calls, the host's time inside them, the GPU idle time during them (split by budget part),
and both per steady step, so a check can price a class per step and a step that stands out can say what
its host did.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

import numpy as np

from nsanalyze.normalize.activity import PID_SHIFT, distinct, distinct_in_place
from nsanalyze.normalize.budget import IDLE_PARTS, PARTS, DeviceBudget, union
from nsanalyze.read.nsys import IntQuery, NsysExport

TABLE_PATH = Path(__file__).with_name("host_activity.csv")
# nsys names runtime calls with their API version (`cudaMalloc_v3020`) and per-thread stream suffixes.
_VERSION = re.compile(r"(_v\d+)?(_ptsz|_ptds)?(_v\d+)?$")
UNKNOWN_SOURCE = "cuda"


@dataclass(frozen=True)
class HostClassRule:
    source: str        # "cuda" (runtime and driver API) or "os" (OS runtime calls)
    pattern: str       # fnmatch pattern on the call's name without its version suffix
    name: str          # the class
    waits_for_gpu: bool
    note: str


@lru_cache(maxsize=1)
def rules() -> tuple[HostClassRule, ...]:
    with open(TABLE_PATH, newline="", encoding="utf-8") as handle:
        return tuple(HostClassRule(r["source"], r["pattern"], r["class"], r["waits_for_gpu"] == "yes", r["note"])
                     for r in csv.DictReader(handle))


@lru_cache(maxsize=1)
def class_order() -> tuple[str, ...]:
    """Classes in the table's order: where calls of two classes overlap (two threads), the first wins. The
    table lists lock-wait after the other OS waits: a thread waiting on a condition or lock while another
    sleeps, reads or waits for a child waits for that one (PyTorch's autograd thread while the main thread
    sleeps), so the other's call is the cause."""
    return tuple(dict.fromkeys(r.name for r in rules()))


def base_name(name: str) -> str:
    return _VERSION.sub("", name)


@lru_cache(maxsize=4096)
def classify(name: str, source: str = "cuda") -> str:
    """The class of a call by its name; a name the table does not know is its own class."""
    base = base_name(name)
    for rule in rules():
        if rule.source == source and fnmatchcase(base, rule.pattern):
            return rule.name
    return base


def waits_for_gpu(name: str, source: str = "cuda") -> bool:
    """Whether the host waits for the GPU in this call (the table's waits_for_gpu): cudaStreamSynchronize does,
    cudaStreamWaitEvent, a wait between streams on the GPU, does not."""
    base = base_name(name)
    return any(rule.waits_for_gpu for rule in rules() if rule.source == source and fnmatchcase(base, rule.pattern))


def is_known(class_name: str) -> bool:
    return class_name in class_order()


@dataclass(frozen=True)
class ClassTime:
    """One class of host activity over the window (GPUs averaged) and per steady step."""

    name: str
    source: str                    # "cuda" or "os"
    known: bool                    # a class of the table (else a call name the table does not know)
    calls: int                     # calls in the window
    host_ns: float                 # time the GPU's processes spent inside such calls (merged over threads)
    idle_ns: float                 # GPU idle time during such calls (painted once: no double counting)
    idle_by_part: dict             # idle_ns split by budget part
    top_calls: tuple               # ((name, calls, ns), ...), longest first
    step_calls: np.ndarray | None = None    # per steady step: calls begun in it
    step_host_ns: np.ndarray | None = None  # per steady step: host time inside such calls
    step_idle_ns: np.ndarray | None = None  # per steady step: GPU idle time during them
    idle_islands: dict = field(default_factory=dict)   # GPU id -> the idle time the class covers there:
                                                        # [(starts, ends), ...] in time order
    gpus: int = 1                  # the GPUs whose figures are averaged (idle_islands has those with calls)

    def idle_in(self, device_id, starts, ends) -> np.ndarray:
        """One GPU's idle time that calls of the class cover inside each window [start, end)."""
        parts = self.idle_islands.get(device_id)
        if not parts:
            return np.zeros(len(starts))
        return Measure.of_parts(parts)(np.asarray(starts, np.int64), np.asarray(ends, np.int64))

    def to_json(self) -> dict:
        return {"class": self.name, "source": self.source, "known": self.known, "calls": self.calls,
                "host_ns": int(round(self.host_ns)), "idle_ns": int(round(self.idle_ns)),
                "idle_by_part": {part: int(round(ns)) for part, ns in self.idle_by_part.items() if ns},
                "top_calls": [{"name": n, "calls": c, "ns": int(ns)} for n, c, ns in self.top_calls],
                **({"steps_with_calls": int((self.step_calls > 0).sum())} if self.step_calls is not None else {})}


@dataclass(frozen=True)
class HostActivity:
    """The window's host activity by class, longest GPU idle time first. `unexplained` is the idle time
    no call covers, by budget part (dispatch between launches, the host's own code, waits on queued work)."""

    classes: tuple[ClassTime, ...]
    unexplained: dict = field(default_factory=dict)
    os_traced: bool = False
    step_parts: np.ndarray | None = None   # per steady step, ns per budget part (columns in budget.PARTS)

    def step_idle_ns(self) -> np.ndarray | None:
        """Per steady step, the GPU's idle time (all idle parts)."""
        if self.step_parts is None:
            return None
        return self.step_parts[:, [PARTS.index(p) for p in IDLE_PARTS]].sum(axis=1)

    def by_class(self, name: str) -> ClassTime | None:
        return next((c for c in self.classes if c.name == name), None)

    def idle_within(self, name: str, starts, ends) -> float:
        """GPU idle time (GPUs averaged) that calls of a class cover inside these windows."""
        entry = self.by_class(name)
        if entry is None:
            return 0.0
        return float(sum(entry.idle_in(gpu, starts, ends).sum() for gpu in entry.idle_islands) / entry.gpus)

    def idle_ns(self, part: str, classes: tuple[str, ...] | None = None) -> float:
        """GPU idle time of one budget part that calls of these classes (all, when None) cover."""
        return float(sum(c.idle_by_part.get(part, 0.0) for c in self.classes
                         if classes is None or c.name in classes))

    def to_json(self) -> dict:
        return {"classes": [c.to_json() for c in self.classes if c.calls],
                "unexplained_idle_ns": {p: int(round(ns)) for p, ns in self.unexplained.items() if ns},
                "os_traced": self.os_traced}


def measure_within(starts: np.ndarray, ends: np.ndarray, q_starts: np.ndarray, q_ends: np.ndarray) -> np.ndarray:
    """Length of disjoint sorted intervals inside each query window [q_start, q_end)."""
    return Measure(starts, ends)(q_starts, q_ends)


class Measure:
    """measure_within() of one set of disjoint sorted intervals, asked more than once. The running sum of
    their lengths is made a chunk of intervals at a time (at the 1 GB export the largest class's 6M idle
    pieces and 6M islands each took a float64 array as long as they are, 48 MB, at the attribution's peak),
    each chunk's measure before a query point added to the chunks' before it. The sums are of whole
    nanoseconds, exact in float64 below 2^53 (104 days), so the figures are those of summing in any order,
    and of one running sum over all the intervals."""

    CHUNK = 1 << 20   # intervals summed at a time

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.parts = [(starts, ends)]

    @classmethod
    def of_parts(cls, parts: list[tuple[np.ndarray, np.ndarray]]) -> "Measure":
        """The intervals given as parts in time order (each part's (starts, ends)), not joined into one copy."""
        measure = cls.__new__(cls)
        measure.parts = parts
        return measure

    def __call__(self, q_starts, q_ends) -> np.ndarray:
        chunks = [(starts[at:at + self.CHUNK], ends[at:at + self.CHUNK]) for starts, ends in self.parts
                  for at in range(0, len(starts), self.CHUNK)]
        if not chunks or not len(q_starts):
            return np.zeros(len(q_starts))
        points = np.concatenate((np.asarray(q_ends), np.asarray(q_starts)))
        covered = np.zeros(len(points))   # measure of the intervals before each point
        for s, e in chunks:
            before = np.empty(len(s) + 1)
            before[0] = 0.0
            np.subtract(e, s, out=before[1:], casting="unsafe")
            np.cumsum(before[1:], out=before[1:])
            index = np.searchsorted(s, points, side="right") - 1
            held = np.maximum(index, 0)
            partial = np.clip(points - s[held], 0, (e[held] - s[held]).astype(np.float64))
            covered += np.where(index >= 0, before[held] + partial, 0.0)
        return covered[:len(covered) // 2] - covered[len(covered) // 2:]


def coverage(layers: list[tuple[np.ndarray, np.ndarray]], at_least: int) -> tuple[np.ndarray, np.ndarray]:
    """Where at least `at_least` of these island sets (each disjoint) cover the time: one sweep."""
    if not layers or any(not len(s) for s, _ in layers) and at_least >= len(layers):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    times = np.concatenate([s for s, _ in layers] + [e for _, e in layers])
    step = np.concatenate([np.ones(len(s), np.int64) for s, _ in layers] + [-np.ones(len(e), np.int64) for _, e in layers])
    order = np.lexsort((step, times))   # at one time, an island ending before one starting
    times, depth = times[order], np.cumsum(step[order])
    enough = depth[:-1] >= at_least
    return union(times[:-1][enough], times[1:][enough])


def intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return coverage([a, b], 2)


def all_threads_inside(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where every one of these threads sits inside one of its calls: the host is blocked, not computing.
    A thread that waits in a condition all along (PyTorch's autograd thread between backward passes) does
    not make the main thread's own code a wait."""
    layers = [union(starts[threads == t].copy(), ends[threads == t].copy(), owned=True) for t in distinct(threads)]
    return coverage(layers, len(layers))


def paint(layers: list[tuple[np.ndarray, np.ndarray]], window: tuple[int, int],
          cuts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window cut at every island edge (and at `cuts`), each segment labelled by the first layer whose
    islands cover it (len(layers): none). Layers are disjoint sorted islands (budget.union)."""
    start, end = window
    clipped = []
    for s, e in layers:
        s, e = np.clip(s, start, end), np.clip(e, start, end)
        keep = e > s
        clipped.append((s[keep], e[keep]))
    # every edge written once into one array (no list of clipped copies beside it: at the 1 GB export's
    # 12M cuts and 12M islands that list was 480 MB held at the peak), sorted and made distinct in place
    times = np.empty(2 + (len(cuts) if cuts is not None else 0) + 2 * sum(len(s) for s, _ in clipped), dtype=np.int64)
    times[:2] = start, end
    at = 2
    if cuts is not None:
        np.clip(cuts, start, end, out=times[at:at + len(cuts)])
        at += len(cuts)
    for s, e in clipped:
        times[at:at + len(s)], times[at + len(s):at + 2 * len(s)] = s, e
        at += 2 * len(s)
    times.sort(kind="stable")   # sorted runs (the cuts, each layer's islands): a merge of runs
    times = distinct_in_place(times)
    label = np.full(len(times) - 1, len(layers), dtype=np.int16)
    for index in reversed(range(len(layers))):
        s, e = clipped[index]
        if not len(s):
            continue
        marks = np.zeros(len(times), dtype=np.int8)
        marks[np.searchsorted(times, s)] = 1
        marks[np.searchsorted(times, e)] = -1
        inside = np.cumsum(marks[:-1], dtype=np.int8).view(bool)
        label[inside] = index
    return times[:-1], times[1:], label


@dataclass
class CallsOfClass:
    """The calls of one class in one GPU's processes: their intervals and names."""

    name: str
    source: str
    starts: np.ndarray
    ends: np.ndarray
    name_ids: np.ndarray
    names: dict
    islands: tuple | None = None   # where the class holds the host, when not its calls' own union (OS calls)


def group_calls(starts, ends, name_ids, names: dict, source: str) -> list[CallsOfClass]:
    """Calls split by class (table order first, then unknown names by time)."""
    if not len(starts):
        return []
    ids = distinct(name_ids)
    class_of = {int(i): classify(names.get(int(i)) or f"call {int(i)}", source) for i in ids}
    by_class: dict[str, list[int]] = {}
    for i, cls in class_of.items():
        by_class.setdefault(cls, []).append(i)
    order = {name: k for k, name in enumerate(class_order())}
    groups = []
    for cls, members in by_class.items():
        mask = np.isin(name_ids, members)
        groups.append(CallsOfClass(cls, source, starts[mask], ends[mask], name_ids[mask], names))
    groups.sort(key=lambda g: (order.get(g.name, len(order)), -float((g.ends - g.starts).sum())))
    return groups


class CallColumns:
    """The calls of one GPU's processes split by class as group_calls() splits them (the same classes in the
    same order), without a copy of each class's calls held beside the others: a class code per call (int16),
    and each class's islands made when asked for, one class at a time, its counts a chunk at a time
    (_class_counts). At the 1 GB export's 11.5M calls the copies of every class at once were 230 MB, held
    through the paint."""

    CHUNK = 1 << 20

    def __init__(self, starts, ends, name_ids, names: dict, source: str):
        self.starts, self.ends, self.name_ids, self.names, self.source = starts, ends, name_ids, names, source
        self.classes: list[str] = []
        self.codes = np.zeros(0, dtype=np.int16)
        if not len(starts):
            return
        ids = distinct(name_ids)
        class_of = {int(i): classify(names.get(int(i)) or f"call {int(i)}", source) for i in ids}
        first_seen = list(dict.fromkeys(class_of.values()))   # group_calls' insertion order
        code_of_class = {cls: k for k, cls in enumerate(first_seen)}
        code_of_id = np.array([code_of_class[class_of[int(i)]] for i in ids], dtype=np.int16)
        codes = np.empty(len(starts), dtype=np.int16)
        durations = np.zeros(len(first_seen))
        for at in range(0, len(starts), self.CHUNK):
            part = slice(at, at + self.CHUNK)
            codes[part] = code_of_id[np.searchsorted(ids, name_ids[part])]
            durations += np.bincount(codes[part], weights=ends[part] - starts[part], minlength=len(first_seen))
        order = {name: k for k, name in enumerate(class_order())}
        ranked = sorted(range(len(first_seen)), key=lambda k: (order.get(first_seen[k], len(order)), -durations[k]))
        rank = np.empty(len(first_seen), dtype=np.int16)
        rank[ranked] = np.arange(len(ranked), dtype=np.int16)
        self.codes = rank[codes]   # codes in group_calls' order of classes
        del codes
        self.classes = [first_seen[k] for k in ranked]

    def __len__(self) -> int:
        return len(self.classes)

    def islands(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        mask = self.codes == k
        return union(self.starts[mask], self.ends[mask], owned=True)


def attribute(budgets: list[DeviceBudget], calls_of_device, os_calls_of_device, step_windows) -> HostActivity:
    """Host activity over the budgets' windows (GPUs averaged, as the budget is). `calls_of_device(budget)`
    and `os_calls_of_device(budget)` give (starts, ends, name ids, names) of the calls in that GPU's
    processes (None: not traced); `step_windows` (starts, ends) of the steady steps, or None."""
    acc: dict[tuple[str, str], dict] = {}
    unexplained = {p: 0.0 for p in IDLE_PARTS}
    step_parts = np.zeros((len(step_windows[0]), len(PARTS))) if step_windows is not None else None
    os_traced = False
    for budget in budgets:
        cuda = CallColumns(*calls_of_device(budget), "cuda")
        groups: list = list(range(len(cuda)))   # (the CUDA classes by code: their calls made one at a time)
        os_calls = os_calls_of_device(budget)
        if os_calls is not None:
            os_traced = True
            starts, ends, name_ids, names, threads = os_calls
            blocked = all_threads_inside(starts, ends, threads)
            for group in group_calls(starts, ends, name_ids, names, "os"):
                group.islands = intersect(union(group.starts.copy(), group.ends.copy(), owned=True), blocked)
                groups.append(group)
        islands = [cuda.islands(g) if isinstance(g, int) else g.islands if g.islands is not None else
                   union(g.starts.copy(), g.ends.copy(), owned=True) for g in groups]
        # one cut of the window at every budget segment and class island edge: each piece lies in one budget
        # part and is painted with at most one class, so (class, part) sums are one bincount. Painted a slice
        # of the window at a time (_idle_pieces): the working set is one slice's, not the window's.
        labelled = budget.labelled
        by_class_part = np.zeros((len(groups), len(PARTS)))
        pieces: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in groups]
        for seg_s, seg_e, seg_class, seg_part in _idle_pieces(islands, budget, len(groups)):
            key = seg_class.astype(np.int64)   # (class, part) as one key, made in place
            key *= len(PARTS)
            key += seg_part
            by_class_part += np.bincount(key, weights=seg_e - seg_s,
                                         minlength=len(groups) * len(PARTS)).reshape(len(groups), len(PARTS))
            del key
            order = np.argsort(seg_class, kind="stable")
            bounds = np.searchsorted(seg_class[order], np.arange(len(groups) + 1))
            seg_s, seg_e = seg_s[order], seg_e[order]   # by class, each class's pieces in time order
            del order
            for k in range(len(groups)):
                if bounds[k + 1] > bounds[k]:
                    pieces[k].append((seg_s[bounds[k]:bounds[k + 1]], seg_e[bounds[k]:bounds[k + 1]]))
        idle_total = labelled.totals()
        claimed = by_class_part.sum(axis=0)
        for k, group in enumerate(groups):
            idle = pieces[k]   # this class's pieces, in time order: a part per slice, not joined (a copy of
            pieces[k] = None   # the largest class's pieces was 96 MB at the 1 GB export's attribution peak)
            if isinstance(group, int):   # a CUDA class: its calls read where their code is k, a chunk at a time
                name, source, columns = cuda.classes[k], "cuda", (cuda.starts, cuda.ends, cuda.name_ids, cuda.codes, k)
                names = cuda.names
            else:
                name, source, columns = group.name, group.source, (group.starts, group.ends, group.name_ids, None, k)
                names = group.names
            entry = acc.setdefault((source, name), _empty(step_windows))
            held = Measure(*islands[k])
            islands[k] = groups[k] = None   # (each class's calls and islands let go once counted)
            calls, by_id, step_calls = _class_counts(*columns, budget.start, budget.end, step_windows)
            entry["calls"] += calls
            entry["host_ns"] += float(held(np.array([budget.start]), np.array([budget.end]))[0])
            entry["idle_by_part"] += by_class_part[k]
            entry["islands"].setdefault(budget.device_id, []).extend(idle)
            _count_names(entry["names"], by_id, names)
            if step_windows is not None:
                s, e = step_windows
                entry["step_host_ns"] += held(s, e)
                entry["step_idle_ns"] += Measure.of_parts(idle)(s, e)
                entry["step_calls"] += step_calls
            del held
        del cuda
        for p in IDLE_PARTS:
            unexplained[p] += idle_total[p] - claimed[PARTS.index(p)]
        if step_windows is not None:
            step_parts += budget.labelled.totals_many(*step_windows)
    n = max(len(budgets), 1)
    classes = []
    for (source, name), entry in acc.items():
        idle_by_part = {p: entry["idle_by_part"][PARTS.index(p)] / n for p in IDLE_PARTS}
        top = sorted(entry["names"].items(), key=lambda kv: -kv[1][1])[:5]
        classes.append(ClassTime(
            name=name, source=source, known=is_known(name), calls=entry["calls"] // n if n > 1 else entry["calls"],
            host_ns=entry["host_ns"] / n, idle_ns=sum(idle_by_part.values()), idle_by_part=idle_by_part,
            top_calls=tuple((k, c // n if n > 1 else c, ns / n) for k, (c, ns) in top),   # (a GPU's mean, as calls)
            step_calls=entry["step_calls"] if step_windows is not None else None,
            step_host_ns=entry["step_host_ns"] / n if step_windows is not None else None,
            step_idle_ns=entry["step_idle_ns"] / n if step_windows is not None else None,
            idle_islands=entry["islands"], gpus=n))
    classes.sort(key=lambda c: (-c.idle_ns, -c.host_ns, c.name))
    return HostActivity(tuple(classes), {p: ns / n for p, ns in unexplained.items()}, os_traced,
                        step_parts / n if step_parts is not None else None)


# Budget segments painted at once: the paint's working set is about 60 bytes a segment (16 MB).
PAINT_SLICE_SEGMENTS = 1 << 18


def _idle_pieces(islands: list[tuple[np.ndarray, np.ndarray]], budget: DeviceBudget, groups: int):
    """(starts, ends, class, budget part) of the painted pieces of the window that lie in an idle part and
    are painted with a class, a slice of the window at a time. The slices end at budget segment starts,
    which are cuts of the whole window's paint anyway: the pieces are those of painting the window at once."""
    labelled = budget.labelled
    cuts = labelled.starts
    edges = np.unique(np.clip(cuts[::PAINT_SLICE_SEGMENTS], budget.start, budget.end))
    edges = np.concatenate(([budget.start], edges[(edges > budget.start) & (edges < budget.end)], [budget.end]))
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
        if hi <= lo:
            continue
        layers = []
        for s, e in islands:   # disjoint sorted islands: those that reach into [lo, hi)
            first, last = np.searchsorted(e, lo, side="right"), np.searchsorted(s, hi, side="left")
            layers.append((s[first:last], e[first:last]))
        c0, c1 = np.searchsorted(cuts, lo, side="left"), np.searchsorted(cuts, hi, side="right")
        seg_s, seg_e, seg_class = paint(layers, (lo, hi), cuts[c0:c1])
        at = np.searchsorted(labelled.starts, seg_s, side="right")   # (in place: three arrays as long as the
        at -= 1                                                          # segments were one at a time)
        seg_part = labelled.labels[np.maximum(at, 0, out=at)]
        del at
        idle = (seg_part >= PARTS.index("idle_other")) & (seg_class < groups)
        yield seg_s[idle], seg_e[idle], seg_class[idle], seg_part[idle]


def _run(mask: np.ndarray) -> np.ndarray | slice:
    """The rows of a mask as a slice where they are one run (calls in time order inside a window: the usual
    case; selections through it are views, not copies), else the mask."""
    kept = int(np.count_nonzero(mask))
    first = int(np.argmax(mask)) if kept else 0
    return slice(first, first + kept) if not kept or mask[first:first + kept].all() else mask


def _empty(step_windows) -> dict:
    steps = len(step_windows[0]) if step_windows is not None else 0
    return {"calls": 0, "host_ns": 0.0, "idle_by_part": np.zeros(len(PARTS)), "names": {}, "islands": {},
            "step_host_ns": np.zeros(steps), "step_idle_ns": np.zeros(steps), "step_calls": np.zeros(steps, np.int64)}


COUNT_CHUNK = 1 << 20   # calls counted at a time


def _class_counts(starts, ends, name_ids, codes, code: int, window_start: int, window_end: int, step_windows):
    """(calls, {name id: (calls, ns)}, calls begun in each step) of one class's calls that reach into the window:
    the rows whose code is `code` (all rows where `codes` is None), a chunk at a time (no copy of the class's
    calls: the working set is a chunk's). A name's ns is its calls' time inside the window (threads summed): the
    autograd thread's idle pthread_cond_wait spans the whole run, 7.1 s against a 6.4 s window (blind61_anomaly).
    The durations are whole nanoseconds: their sums are exact in float64 below 2^53, as the sums of int64 were."""
    ids = distinct(np.concatenate([distinct(name_ids[at:at + COUNT_CHUNK] if codes is None else
                                            name_ids[at:at + COUNT_CHUNK][codes[at:at + COUNT_CHUNK] == code])
                                   for at in range(0, len(starts), COUNT_CHUNK)] or [name_ids[:0]]))
    counts, sums = np.zeros(len(ids), np.int64), np.zeros(len(ids))
    step_calls = np.zeros(len(step_windows[0]) if step_windows is not None else 0, np.int64)
    for at in range(0, len(starts), COUNT_CHUNK):
        part = slice(at, at + COUNT_CHUNK)
        c_s, c_e = starts[part], ends[part]
        inside = (c_e > window_start) & (c_s < window_end)
        if codes is not None:
            inside &= codes[part] == code
        c_s, c_e, c_id = c_s[inside], c_e[inside], name_ids[part][inside]
        position = np.searchsorted(ids, c_id)
        counts += np.bincount(position, minlength=len(ids))
        sums += np.bincount(position, weights=np.minimum(c_e, window_end) - np.maximum(c_s, window_start),
                            minlength=len(ids))
        if step_windows is not None:
            s, e = step_windows
            index = np.searchsorted(s, c_s, side="right") - 1
            ok = (index >= 0) & (c_s < e[np.maximum(index, 0)])
            step_calls += np.bincount(index[ok], minlength=len(s))
    by_id = {int(i): (int(c), float(ns)) for i, c, ns in zip(ids.tolist(), counts.tolist(), sums.tolist()) if c}
    return int(counts.sum()), by_id, step_calls


def _count_names(names: dict, by_id: dict, labels: dict) -> None:
    for name_id, (count, ns) in by_id.items():   # (name ids ascending)
        label = base_name(str(labels.get(name_id) or f"call {name_id}"))
        calls, total = names.get(label, (0, 0.0))
        names[label] = (calls + count, total + ns)


# Timed waits on a condition variable, on the threads that launch the GPU's work, where a large share of them end at
# one timeout: a lock handed over on a timer. CPython's interpreter lock (GIL) is one: a thread that wants it waits
# in pthread_cond_timedwait for the switch interval (5 ms by default, sys.getswitchinterval()), then asks the
# holder to drop it and waits again; a lock of the program's own (threading.Lock, queue.Queue) waits on a semaphore
# instead (sem_clockwait). blind78_gilthread: a training loop beside a Python thread that tokenizes its batches,
# 714 timed waits on the launching thread in the window, 242 of them 4.9-5.3 ms, none longer than 5.3 ms.
TIMED_WAITS = ("pthread_cond_timedwait", "pthread_cond_clockwait")
MIN_TIMED_WAITS = 20          # fewer are a wait now and then, no lock handed over all the time
TIMEOUT_SHARE = 0.2           # of the timed waits, ending within TIMEOUT_BAND of the timeout
TIMEOUT_BAND = (0.95, 1.10)   # of the timeout: a wake-up a little after it
MAX_TIMEOUT_NS = 50_000_000   # a timer this long is a watchdog or a poll (a DataLoader's 4 s), not a lock's handover


@dataclass(frozen=True)
class LockTimeouts:
    """The launching threads' timed waits in the window (TIMED_WAITS), where TIMEOUT_SHARE of them or more end at one
    timeout: how many, their time, the timeout and how many ended at it."""

    calls: int
    ns: float
    timeout_ns: float
    at_timeout: int


def lock_timeouts(os_calls: list) -> LockTimeouts | None:
    """LockTimeouts of the launching threads' OS calls (`os_calls`: (starts, ends, name ids, names, threads) for each
    GPU, as attribute takes them), or None where their timed waits do not end at one timeout. The timeout is the
    99th percentile of the waits' durations (most waits end at it or before, woken sooner when the lock comes)."""
    durations = []
    for starts, ends, name_ids, names, _ in os_calls:
        timed = [i for i, name in names.items() if isinstance(name, str) and base_name(name) in TIMED_WAITS]
        mine = np.isin(name_ids, timed)
        durations.append((ends - starts)[mine])
    waits = np.concatenate(durations) if durations else np.zeros(0, np.int64)
    if len(waits) < MIN_TIMED_WAITS:
        return None
    timeout = float(np.percentile(waits, 99))
    low, high = TIMEOUT_BAND
    at = int(((waits >= low * timeout) & (waits <= high * timeout)).sum())
    if not timeout or timeout > MAX_TIMEOUT_NS or at < TIMEOUT_SHARE * len(waits) or waits.max() > 2 * timeout:
        return None
    return LockTimeouts(len(waits), float(waits.sum()), timeout, at)


def read_os_calls(export: NsysExport, threads: list[int], start: int, end: int, outer_only: bool = False,
                  ends_after_start: bool = False) -> dict[str, np.ndarray]:
    """The OS runtime calls of these threads that overlap [start, end), as columns (one query, no Python object per
    row): start, end, name_id, tid. `outer_only`: calls nested in another (nestingLevel > 0) left out, they are its
    time; `ends_after_start`: calls of no length left out."""
    outer = " AND (nestingLevel IS NULL OR nestingLevel = 0)" if outer_only and export.has("OSRT_API", "nestingLevel") \
        else ""
    length = "end > start" if ends_after_start else "end >= start"
    where = (f"FROM OSRT_API WHERE globalTid IN ({','.join(str(int(t)) for t in threads)}) AND end > {int(start)} "
             f"AND start < {int(end)} AND {length}{outer}")
    return export.read_columns([IntQuery({"start": ("start", -1), "end": ("end", -1), "name_id": ("nameId", -1),
                                          "tid": ("globalTid", -1)}, where)])[0]


# Processes whose traced calls all lie inside the window, other than the processes that launch GPU work: programs the
# loop starts and waits for (subprocess.run, os.system, a shell), short-lived beside it. blind80_gpumon: a training loop
# that runs `nvidia-smi --query-gpu=...` after every step, reading its output through pipes until it exits: 120
# processes in the window's 119 steps, the launching thread in poll 48.9 ms a step.
MIN_CHILD_PROCESSES = 3


@dataclass(frozen=True)
class ChildProcesses:
    """The processes that began and ended inside the window (their first traced call to their last), beside the
    launching ones: how many, their median life, and their names where the export holds them ((name, count), most
    first; the export names only some)."""

    count: int
    median_ns: float
    names: tuple = ()


def child_processes(export, start: int, end: int, launching_threads) -> ChildProcesses | None:
    """ChildProcesses of the window [start, end) from the OS runtime calls' first and last time per process (one SQL
    aggregate), or None with fewer than MIN_CHILD_PROCESSES or no OS runtime trace."""
    if not export.has("OSRT_API", "globalTid", "start", "end"):
        return None
    launching = {int(t) >> PID_SHIFT for t in np.asarray(launching_threads).tolist()}
    # (integers only: a damaged or hostile export's text or NULL in these columns is no time)
    rows = export.query(f"""SELECT globalTid >> {PID_SHIFT}, MIN(start), MAX(end) FROM OSRT_API
                            WHERE typeof(globalTid) = 'integer' AND typeof(start) = 'integer'
                              AND typeof(end) = 'integer' AND end >= start
                            GROUP BY globalTid >> {PID_SHIFT}""")
    inside = [(pid, first, last) for pid, first, last in rows
              if pid not in launching and first is not None and first >= start and last <= end]
    if len(inside) < MIN_CHILD_PROCESSES:
        return None
    named: dict[str, int] = {}
    if export.has("PROCESSES", "globalPid", "name"):
        names = dict(export.query(f"SELECT globalPid >> {PID_SHIFT}, name FROM PROCESSES "
                                  "WHERE typeof(globalPid) = 'integer'"))
        for pid, _, _ in inside:
            if names.get(pid):
                named[str(names[pid])] = named.get(str(names[pid]), 0) + 1
    lives = np.array([last - first for _, first, last in inside], dtype=np.float64)
    return ChildProcesses(len(inside), float(np.median(lives)),
                          tuple(sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))))
