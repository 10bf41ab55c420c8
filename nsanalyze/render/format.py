"""Number formatting shared by the human-readable renderers."""

from __future__ import annotations

import os
from collections import Counter

import humanize

from nsanalyze.checks.program._host_class import WAIT_CLASSES
from nsanalyze.numbers import duration_text


def duration(ns) -> str:
    """9.52 ms, 812 ns, 2.50 µs: nanoseconds as people read them (numbers.duration_text)."""
    return duration_text(ns)


def percent(share) -> str:
    return "-" if share is None else f"{100 * float(share):.0f}%"


def quantity(value, unit: str = "") -> str:
    """38.7 GFLOP, 493 TFLOP/s, 67.1 MB: a measured value with its unit, scaled."""
    if value is None:
        return "-"
    value = float(value)
    if unit in ("byte", "bytes", "B"):
        return humanize.naturalsize(value)
    if unit == "ns":
        return duration(value)
    if unit == "ratio":
        return percent(value)
    if unit == "%":
        return f"{value:.3g}%"
    if unit in ("hz", "Hz"):
        unit = "Hz"
    if value == 0 or 1e-3 <= abs(value) < 1e3:
        return f"{value:.3g} {unit}".strip()
    if not unit and abs(value) < 1e-3:   # a count or ratio without a unit: 0.000947 waves, not "947 µ"
        return f"{value:.3g}"
    return humanize.metric(value, unit).replace("μ", "µ").strip()


NOT_MEASURED = "not measured"


def evidence_value(entry: dict) -> str:
    """An evidence entry's value (and threshold) for a reader; the JSON keeps the raw numbers, and its null, a value
    the profile does not hold (or not as a finite number), reads `not measured` rather than a blank."""
    value = entry.get("value")
    if value is None:
        return NOT_MEASURED
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return visible(value)
    text = quantity(value, entry.get("unit", ""))
    threshold = entry.get("threshold")
    if isinstance(threshold, (int, float)) and threshold != value and text == quantity(threshold, entry.get("unit", "")):
        # a value that reads as its threshold: one more digit, or '3% (threshold > 3%)' reads as not crossed
        unit = entry.get("unit", "")
        return f"{100 * float(value):.1f}%" if unit == "ratio" else f"{float(value):.4g} {unit}".strip()
    return text


# An evidence entry's comparison, as its `compare` says it (">" where it says none)
COMPARES = {">": float.__gt__, ">=": float.__ge__, "<": float.__lt__, "<=": float.__le__}


def threshold_text(entry: dict) -> str:
    """`threshold > 3%`, and `, not crossed` where the value lies on the other side: a finding that speaks on
    another of its conditions shows this one's figure beside its threshold (host-data's `work_share`, 1% against
    >= 30%, read as a failed gate, a user read)."""
    compare = entry.get("compare", ">")
    text = f"threshold {compare} {evidence_value({'value': entry['threshold'], 'unit': entry.get('unit', '')})}"
    value, threshold, test = entry.get("value"), entry.get("threshold"), COMPARES.get(compare)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, threshold))
    return text + (", not crossed" if numbers and test is not None and not test(float(value), float(threshold)) else "")


# A way to collect what a check lacks that is a command line or its options (shown as code); the others are prose
# ("an NVTX range around each step (...)", read as a sentence pasted into a code span, a user read)
COMMAND_STARTS = ("nsys ", "ncu ", "--")


def is_command(text: str) -> bool:
    return str(text).startswith(COMMAND_STARTS)


def shorten(text: str | None, limit: int = 60) -> str:
    if text is None:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"




def distinct_names(names: list[str], limit: int) -> list[str]:
    """Names cut to `limit` that stay apart: where two cut names read the same (cuBLAS kernels that differ
    only in a tile size in the middle), each keeps its start and shows, after "…", where it differs."""
    cut = [shorten(n, limit) for n in names]
    counts = Counter(cut)   # (list.count per name made a table of 2,000 findings take seconds)
    for label in {c for c in cut if counts[c] > 1}:
        group = [i for i, c in enumerate(cut) if c == label]
        for i in group:
            others = [names[j] for j in group if names[j] != names[i]]
            if not others:
                continue
            differs = max(len(os.path.commonprefix([names[i], other])) for other in others)
            head = max(4, limit // 3)
            start = max(head, differs - 4)
            cut[i] = shorten(names[i][:head] + "…" + names[i][start:], limit) if start > head else names[i][:limit - 1] + "…"
    return cut

BUDGET_LABELS = {"gpu_compute": "compute", "gpu_communication": "exposed communication", "gpu_copy": "copies",
                 "idle_other": "idle (queued work waits)", "idle_sync": "idle after syncs",
                 "idle_launch": "idle on launches", "idle_host": "idle on host code"}


def budget_labels(timeline: dict | None, median_step: bool = False) -> dict[str, str]:
    """BUDGET_LABELS, with `idle_launch` named after the class of CUDA calls that held most of it.

    The part is GPU idle time while the host issued CUDA calls back to back; those calls are launches in an eager
    loop, but allocator calls (`cudaMalloc`/`cudaFree` every step) or memsets fill it as well, and calling them
    launches sends the reader to CUDA graphs for an allocator problem. The window's host-activity classes say
    which calls the idle time lay under. For a median step's budget (`median_step`) only a class with calls in half
    the steps or more names a part: one that runs in a few steps is not in the median one (blind76_epochs: "idle
    while the host waits (for a child process)" on a median step without a fork, its workers started each epoch)."""
    labels = dict(BUDGET_LABELS)
    classes = ((timeline or {}).get("host_activity") or {}).get("classes") or []
    steps = ((timeline or {}).get("steps") or {}).get("count") or 0
    if median_step and steps:
        classes = [c for c in classes if c.get("steps_with_calls") is None or 2 * c["steps_with_calls"] >= steps]

    def top_under(part: str, sources: tuple = ("cuda",)) -> dict | None:   # the class of calls under most of a part
        under = [c for c in classes if c.get("source") in sources and (c.get("idle_by_part") or {}).get(part)]
        return max(under, key=lambda c: c["idle_by_part"][part]) if under else None
    top = top_under("idle_launch")
    if top is not None and top["class"] != "launch":
        labels["idle_launch"] = f"idle on CUDA calls (mostly {visible(top['class'])})"
    # one long runtime call (a cudaFree of 30 ms) counts as host code in the budget (normalize.budget): where such
    # calls of one class hold most of that part, the label names them, as allocator-churn's finding does (it read
    # "idle on host code (mostly long allocator calls)" beside "idle on CUDA calls (mostly allocator)": host code and
    # CUDA calls at once, a user read of quasiben's workflow); and where
    # the thread sat in OS calls that wait on something else (a DataLoader's queue, a lock, a sleep), it was
    # not running host code at all (blind68_loader: "idle on host code 76%" beside host-wait's sem_clockwait)
    host_ns = sum(p.get("ns") or 0 for p in (timeline or {}).get("budget") or [] if p.get("part") == "idle_host")
    top = top_under("idle_host", ("cuda", "os"))
    if top is not None and host_ns and top["idle_by_part"]["idle_host"] >= 0.5 * host_ns:
        waiting = WAIT_CLASSES.get(top["class"]) if top.get("source") == "os" else None
        labels["idle_host"] = (f"idle while the host waits ({waiting.removeprefix('waiting ')})" if waiting else
                               f"idle in long {visible(top['class'])} calls")
    return labels


def budget_text(budget: list[dict] | None, min_share: float = 0.01, labels: dict[str, str] | None = None) -> str:
    """`compute 10%, idle on launches 87%, idle on host code 3%`: the parts of 1% or more, largest first."""
    labels = labels or BUDGET_LABELS
    parts = sorted((p for p in budget or [] if (p.get("share") or 0) >= min_share), key=lambda p: -p["share"])
    return ", ".join(f"{labels.get(p['part'], p['part'])} {percent(p['share'])}" for p in parts)


WORK_LABELS = {"matmul_tensor": "tensor-core GEMM", "matmul_simt": "CUDA-core GEMM/GEMV", "attention_fused": "fused attention",
               "attention_unfused": "attention written out", "normalization": "normalization",
               "elementwise": "elementwise", "reduction": "reductions", "gather": "gathers and scatters by index", "layout": "layout changes", "cast": "casts",
               "copy": "copies and fills", "communication": "communication", "optimizer": "optimizer", "graph": "CUDA graphs",
               "other": "other", "filtered_out": "other kernels (filtered out)"}


def work_text(work: list[dict] | None, min_share: float = 0.01) -> str:
    """`attention written out 78%, tensor-core GEMM 14%, ...`: the roles of 1% or more, largest first."""
    parts = sorted((w for w in work or [] if (w.get("share") or 0) >= min_share), key=lambda w: -w["share"])
    return ", ".join(f"{WORK_LABELS.get(w['role'], w['role'])} {percent(w['share'])}" for w in parts)


def kernel_list_work_line(model: dict) -> str:
    """An ncu report's total, what its findings' savings are measured against, and its split by role."""
    total = sum(w["ns"] for w in model["work"])
    launches = sum(k.get("launches") or 0 for k in model.get("kernels") or [])
    line = f"Profiled kernel time {duration(total)} over {launches} launch{'es' if launches != 1 else ''} (ncu, each replayed alone)"
    # a program's own kernels, none of a library's or a framework's role, are `other` whole: "by role: other 100%"
    # said nothing (a user read of NCAR's V100 report)
    if all(w["role"] == "other" for w in model["work"] if w.get("share")):
        return line + ": the program's own kernels, none of a known library's or framework's role"
    return f"{line}, by role: {work_text(model['work'])}"


def window_lines(timeline: dict) -> list[str]:
    """The header lines every renderer shows for an nsys timeline: window, steps, budget."""
    lines = [f"Window: {timeline['window']['description']}"]
    if timeline.get("dropped_rows"):
        lines.append("Left out: " + ", ".join(f"{n} rows of {t} without a valid interval (no start/end, or longer "
                                               "than a day)" for t, n in timeline["dropped_rows"].items()))
    steps = timeline.get("steps")
    # Several exports merged as ranks: the window, steps and budget are the first export's (each GPU's budget
    # follows the header); its wait "for a rank the export does not hold" is for a rank the report holds.
    ranks = len((timeline.get("merged") or {}).get("ranks") or ())
    of_rank = " of rank 0 (the first export)" if ranks > 1 else ""
    if steps:
        clock = " on the GPU's clock" if steps.get("clock") == "gpu" else ""
        mean = f", mean {duration(steps['mean_ns'])}" if steps.get("mean_ns") else ""
        lines.append(f"Steps{of_rank}: {steps['count']} of '{steps['name']}'{clock}, median {duration(steps['median_ns'])}{mean} "
                     f"(p95 {duration(steps['p95_ns'])}, min {duration(steps['min_ns'])}, max {duration(steps['max_ns'])})")
        if steps.get("host_relation_text"):
            lines.append(steps["host_relation_text"])
        if steps.get("speed_change_text"):
            lines.append(steps["speed_change_text"])
        if steps.get("rank_wait_text") and ranks <= 1:   # its own line: the time this export cannot price
            lines.append(steps["rank_wait_text"])
    for note in timeline.get("notes") or []:
        lines.append(note)
    phases = timeline.get("phases") or []
    if phases:
        lines.append("Phases: " + ", ".join(phase_text(p) for p in phases))
    if timeline.get("budget"):
        gpus = len(timeline.get("devices") or ())
        # (the budget over several GPUs is each part's mean over them, normalize.timeline._mean_budget and
        # _steps_section: the header said nothing of it, and a user read took 35 ms "saved" on mfu_2gpu_after for a sum over two GPUs)
        mean = f"the mean of its {gpus} GPUs" if gpus > 1 and ranks <= 1 else ""
        scope = (f"a median step{f' ({mean})' if mean else ''}" if steps and steps.get("budget") else
                 f"the window ({duration(timeline['span_ns'])}{f', {mean}' if mean else ''})") + of_rank
        median_step = bool(steps and steps.get("budget"))
        labels = budget_labels(timeline, median_step)
        lines.append(f"Time budget of {scope}: "
                     f"{budget_text((steps or {}).get('budget') or timeline['budget'], labels=labels)}")
    if timeline.get("work"):
        trials = timeline.get("timed_trials") or {}
        tuner = (f" ({trials['kernel_share']:.0%} of the replayed steps' GPU time is an autotuner's candidates, "
                 "which the roles count)") if trials.get("kernel_share", 0) >= 0.05 else ""
        lines.append(f"GPU kernel time{of_rank} by role: {work_text(timeline['work'])}{tuner}")
    return lines


def phase_text(phase: dict) -> str:
    """`epoch N ×3 (8.88 s: checkpoint ×3 7.99 s, train_step N ×60 768 ms)`: a phase and what it holds; one made by
    several processes (ranks) says so, its count and time summed over them (`step N ×300 over 2 processes`)."""
    inside = ", ".join(f"{visible(c['name'])} ×{c['count']} {duration(c['duration_ns'])}"
                       for c in phase.get("children") or [])
    over = f" over {phase['processes']} processes" if phase.get("processes", 0) > 1 else ""
    return (f"{visible(phase['name'])} ×{phase['count']}{over} ({duration(phase['duration_ns'])}"
            + (" in all" if over else "") + _gpu_side(phase) + (f": {inside}" if inside else "")
            + (", outside the window" if not phase["in_window_ns"] else "") + ")")


# The GPU's side of a phase is told where it differs from the host range's by this share of the range or more: a
# range only queues its work (dev_suite's `launches`: 1.52 ms on the host, its 200 kernels spanning 370 µs on the GPU,
# done 7.72 ms after the range)
GPU_SIDE_SHARE = 0.25


def _gpu_side(phase: dict) -> str:
    """`; its GPU work spans 370 µs, done 7.72 ms after the range`, where the work a phase launched ran for another
    time than its host range, or ended well after it; '' otherwise. A span, first start to last end: not busy time
    (numba-jit's copy phase: 479 µs, of which its kernels and copies take a few)."""
    gpu_ns, after_ns = phase.get("gpu_ns"), phase.get("gpu_end_after_ns")
    host_ns = phase.get("duration_ns") or 0
    if gpu_ns is None or not host_ns:
        return ""
    each_ns = host_ns / max(1, phase.get("count") or 1)
    late = after_ns is not None and after_ns > GPU_SIDE_SHARE * each_ns
    if abs(gpu_ns - host_ns) <= GPU_SIDE_SHARE * host_ns and not late:
        return ""
    where = ("" if not late else f", done {duration(after_ns)} after the range" if phase.get("count") == 1
             else f", done a median {duration(after_ns)} after each range")
    return f" on the host; its GPU work spans {duration(gpu_ns)}{where}"


VERDICT_CHECKS = ("gpu-not-traced", "one-long-kernel", "transfer-bound")


def savings_text(finding: dict, model: dict | None = None) -> str:
    """A finding's savings as its row shows them, and where it speaks for several entries of one kernel (launch
    shapes, NVTX ranges: rank.merge_launch_shapes), the time of all of them that they come from: 1.21 ms beside a
    1.05 ms row read as more than the kernel's time. A program finding's savings over a window of steps also a step
    (`242 ms (3.06 ms a step)`): its title speaks of steps, and a window's total beside it read as another figure."""
    text = duration(finding.get("estimated_savings_ns"))
    ids = finding.get("kernel_ids") or []
    if len(ids) > 1 and finding.get("kernel_time_ns"):
        text += f" of {len(ids)} entries' {duration(finding['kernel_time_ns'])}"
    steps = ((model or {}).get("timeline") or {}).get("steps") or {}
    count = steps.get("count") if isinstance(steps, dict) else None
    if count and finding.get("kernel_name") is None and finding.get("estimated_savings_ns"):
        text += f" ({duration(finding['estimated_savings_ns'] / count)} a step)"
    within = (finding.get("evidence") or {}).get("within")
    if isinstance(within, str) and finding.get("kernel_name") is None:   # a row beside its wider change: not added
        text += f", within {within}'s"
    return text


def next_limit_line(model: dict) -> str | None:
    """`After #1 (launch-overhead): the median step replays in 9.51 ms (54.6 ms replayed unchanged); its critical
    path is then ...`: what limits the steps once the finding that saves most is fixed (rank._next_limit's note), or
    None."""
    for finding in model.get("findings") or []:
        note = next((n for n in finding.get("notes") or [] if n.startswith("next: ")), None)
        if note is not None:
            return f"After #{finding['rank']} ({finding['check']}): {note.removeprefix('next: ')}."
    return None


def health_line(model: dict) -> str:
    """What to say when nothing is above info: claim health only for what could be judged, and name the info findings
    whose saving is not measured (time at stake: a cause found, not a healthy program)."""
    line = _health_line(model)
    unpriced = [f for f in model.get("findings") or [] if f["severity"] == "info" and f.get("kernel_name") is None
                and any(note.startswith("saving not measured") for note in f.get("notes") or [])]
    return line + "".join(f" Found, with its saving not measured: {f['title']} ({f['check']}, info)." for f in unpriced[:2])


def _health_line(model: dict) -> str:
    timeline = model.get("timeline")
    # info findings that are the verdict when nothing else speaks: CUDA API rows without GPU activity
    # (WSL2) say what they show; a program that is one long kernel says so and points to ncu; copies at
    # the link's rate filling the window say that the link is the limit (only fewer bytes help)
    verdict = next((f for check in VERDICT_CHECKS for f in model.get("findings") or [] if f["check"] == check), None)
    if verdict is not None:
        # a verdict whose saving is not estimated says what is at stake (h100_2gpu_1s: copies 97% of the window, a
        # finding at info, which read as "below what is worth a change")
        stake = next((n for n in verdict.get("notes") or [] if "time at stake" in n), None)
        return verdict["title"] + "." + (f" {stake[0].upper()}{stake[1:]}." if stake and verdict["severity"] == "info" else "")
    if timeline is not None and not timeline.get("budget") and not model["kernels"]:
        return ("No GPU activity recorded (no kernels or copies in the export): profile with CUDA tracing on, "
                "e.g. nsys profile -t cuda,nvtx,osrt, and export with nsys export --type sqlite.")
    unjudged = sorted({n["check"] for n in model.get("not_judged") or []})
    rank_wait = ((timeline or {}).get("steps") or {}).get("rank_wait_text")
    if rank_wait and len(((timeline or {}).get("merged") or {}).get("ranks") or ()) <= 1:
        return ("No findings above info that this export can price: its collectives' wait for a rank it does not "
                "hold (above) is time at stake, not a measured saving"
                + (f"; {len(unjudged)} checks could not judge ({', '.join(unjudged)}): the profile lacks their "
                   "metrics." if unjudged else "."))
    roof = _nearest_roof(model)
    if unjudged:
        return (f"No findings above info from the checks that could judge; {len(unjudged)} could not "
                f"({', '.join(unjudged)}): the profile lacks their metrics{_collect_hint(model)}"
                + (f". {roof[0].upper()}{roof[1:]}." if roof else "."))
    return (f"No findings above info: no check's threshold is crossed"
            + (f" (not a proof that nothing holds the program back: {roof})." if roof else "."))


def _collect_hint(model: dict) -> str:
    """`; collect --set full`: collect_text with its lead, or nothing."""
    wanted = collect_text(model)
    return f"; collect {wanted}" if wanted else ""


def collect_text(model: dict) -> str:
    """What the checks that could not judge need collected (the not-judged entries' `collect`, without the reasons
    in brackets that the report says elsewhere), all of three, else the first two and a count: `--set full and --clock-control none`."""
    # the options without their reasons; per option, the metrics by name that collect the same (checks._collect), or
    # None where an entry has no such names (source counters): the option alone then (rgb_original read "--set full
    # and --set full or --metrics ...", and a union of names would promise bank-conflicts what only the set gives)
    options: dict[str, list[str] | None] = {}
    for entry in model.get("not_judged") or []:
        collect = entry.get("collect")
        if not collect:
            continue
        option, by_name = collect.split(" (")[0], collect.rfind(", or --metrics ")
        names = options.setdefault(option, [])
        if by_name < 0:
            options[option] = None
        elif names is not None:
            names += [n for n in collect[by_name + len(", or --metrics "):].split(",") if n and n not in names]
    wanted = sorted(option + (f" or --metrics {','.join(names)}" if names else "") for option, names in options.items())
    # an option another one extends collects it too (quickstart read "nsys profile -t cuda,nvtx and nsys profile -t
    # cuda,nvtx with one NVTX range per step")
    wanted = [w for w in wanted if not any(other.startswith(w + " ") for other in wanted)]
    if len(wanted) <= 3:   # "and 1 more" would hide a name in the room it takes
        return " and ".join(wanted)
    return " and ".join(wanted[:2]) + f" and {len(wanted) - 2} more"


def not_judged_groups(entries: list[dict]) -> list[dict]:
    """The not-judged entries (one a check and kernel) as one a check, in the entries' order: the kernels it could
    not judge (`program` for a program check), the concepts missing for any of them, the options that collect
    them."""
    grouped: dict[str, dict] = {}
    for entry in entries:
        row = grouped.setdefault(entry["check"], {"check": entry["check"], "kernels": [], "missing": [], "collect": []})
        name = entry.get("kernel_name") or "program"
        if name not in row["kernels"]:
            row["kernels"].append(name)
        for concept in entry.get("missing") or []:
            if concept not in row["missing"]:
                row["missing"].append(concept)
        if entry.get("collect") and entry["collect"] not in row["collect"]:
            row["collect"].append(entry["collect"])
    return list(grouped.values())


def _nearest_roof(model: dict) -> str:
    """Where no threshold is crossed, how near its roof the kernel that takes most of the time runs (an ncu
    report), whether or not every check could judge: 'no finding' is not 'nothing to gain' for a kernel at 70% of
    DRAM with room at 12% occupancy, and a report that lacks some checks' metrics still measures its roofs."""
    measured = [k for k in model.get("kernels") or [] if (k.get("roofline") or {}).get("bound") and k.get("total_ns")]
    if not measured or model.get("timeline"):
        return ""
    longest = max(measured, key=lambda k: k["total_ns"])
    roof = longest["roofline"]
    shares = {"compute": roof.get("compute_share"), "memory": roof.get("memory_share")}
    unit, share = max(((u, v) for u, v in shares.items() if v is not None), key=lambda uv: uv[1], default=(None, None))
    if unit is None:
        return ""
    if unit == "compute" and roof.get("precision") == "tensor":
        unit = "compute (tensor pipe)"
    total = sum(k.get("total_ns") or 0 for k in model["kernels"])   # (more than 0: `measured` has time)
    return (f"the longest kernel, {longest['total_ns'] / total:.0%} of the time, runs at {share:.0%} of its {unit} roof, "
            f"{roof['bound']}-bound")


from nsanalyze.text import CONTROL, INVISIBLE, code_span, show_invisible, visible  # noqa: E402,F401 - the renderers' names


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_text(value):
    """A text cell of a CSV from profile text: control, bidi and zero-width characters shown as escapes
    (`\\x1b`, `\\u202e`: a CSV printed on a terminal or opened in an editor shows what the name holds),
    and one that a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, CR first) gets a
    leading `'`, so it is shown as text. Numbers are left as they are."""
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START):
        return "'" + visible(value)
    return visible(value)


def set_aside_note(counts: dict | None) -> str | None:
    """`Set aside: 2 values that no measurement gives (clockRate ×2): not used`: values read from a good
    file that are not finite, far below zero, or a clock, count or duration not above zero."""
    if not counts:
        return None
    total = sum(counts.values())
    parts = ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items(), key=lambda item: -item[1])[:5])
    more = f" and {len(counts) - 5} more" if len(counts) > 5 else ""
    return (f"Set aside: {total} value{'s' if total != 1 else ''} that no measurement gives (not finite, far below "
            f"zero, or a clock, count or duration of zero or less) in {parts}{more}: not used")


def gpu_label(profile: dict) -> str:
    """The profile's GPU as its header names it: `NVIDIA H100 80GB HBM3, CC 9.0`. An export that does not name its
    GPU (nsys exports stripped of their TARGET_INFO tables) says so, not `unknown GPU, CC ?`; its GPUs' work is there
    (nsys-ai's 2-GPU captures: a user read took "no GPU recorded" beside findings of GPU 0 and GPU 1 as a contradiction)."""
    gpu, cc = profile.get("gpu"), profile.get("compute_capability")
    if not gpu and not cc:
        return "GPU model not recorded in the profile"
    return f"{gpu or 'unknown GPU'}, CC {cc or 'unknown'}"


NCU_COVERS_ALL = 0.95   # the ncu report's kernels hold this much of the window's kernel time: no word needed


def several_gpus_line(model: dict) -> str | None:
    """The header's word when ncu reports of different GPUs share one report (their kernels' times are of
    different GPUs); None for one GPU."""
    gpus = model.get("gpus") or []
    if len(gpus) < 2:
        return None
    return (f"Kernels of {len(gpus)} different GPUs ({', '.join(gpus)}): their times are each of its own GPU, "
            "not comparable across them; each kernel names its GPU")


def ncu_coverage_line(model: dict) -> str | None:
    """In a report that joins ncu with nsys, how much of the window's kernel time the ncu kernels are: their findings
    speak for those kernels only. None when not joined, or when ncu measured nearly all of it."""
    coverage = model.get("ncu_coverage")
    if not coverage or coverage.get("kernel_time_share") is None or coverage["kernel_time_share"] >= NCU_COVERS_ALL:
        return None
    return (f"Nsight Compute measured the kernels of {percent(coverage['kernel_time_share'])} of the window's GPU kernel "
            f"time ({coverage['names_measured']} of its {coverage['names_in_window']} kernel names): kernel findings "
            "speak for those only; profile the others (ncu -k regex:NAME) to judge them")


def finding_gpu(model: dict, finding: dict) -> str | None:
    """The GPU of a kernel finding's kernel where the report holds kernels of several GPUs; None otherwise."""
    kernels = model.get("kernels") or []
    kernel_id = finding.get("kernel_id")
    if len(model.get("gpus") or []) > 1 and kernel_id is not None and 0 <= kernel_id < len(kernels):
        return kernels[kernel_id].get("gpu")
    return None


def scope_names(model: dict, findings: list[dict]) -> list[str]:
    """Each finding's kernel (or `program`), with its GPU where the report holds kernels of several GPUs."""
    return [(finding["kernel_name"] or "program") + (f" ({gpu})" if (gpu := finding_gpu(model, finding)) else "")
            for finding in findings]


def budget_changed(part: dict) -> bool:
    """A diff's budget part worth a row: a share of 0.5% or more on either side, or one that moved by 0.1%."""
    before, after = part.get("before_share") or 0, part.get("after_share") or 0
    return before >= 0.005 or after >= 0.005 or abs(after - before) >= 0.001


def budget_cell(part: dict, side: str) -> str:
    """`30.2 ms (99%)`: a diff's budget part on one side, its time beside its share."""
    share, ns = part.get(f"{side}_share"), part.get(f"{side}_ns")
    if share is None:
        return "-"
    return f"{duration(ns)} ({share:.0%})" if ns is not None else f"{share:.0%}"


def diff_time(row: dict, side: str) -> str:
    """A diff kernel row's time on one side with its launches: `1.20 ms ×200`, and the time of one launch
    where the counts differ and the rows are compared per launch."""
    ns, launches = row.get(f"{side}_ns"), row.get(f"launches_{side}")
    if ns is None:
        return "-"
    text = duration(ns)
    if launches is not None and (row.get("launches_before"), row.get("launches_after")) != (1, 1):   # one launch
        text += f" ×{launches:,.0f}" if launches >= 1000 else f" ×{launches:.3g}"                  # each: said once
        # (a count a step of a thousand or more in full: 2,048, not 2.05e+03)
    if row.get(f"{side}_per_launch_ns") is not None:
        text += f" ({duration(row[f'{side}_per_launch_ns'])} each)"
    return text


def diff_why(row: dict) -> str:
    """New findings of a kernel, and findings of both profiles that grew (`uncoalesced-global 1.2 ms → 3.4 ms`)."""
    parts = list(row.get("findings_appeared") or [])
    parts += [f"{w['check']} {duration(w['savings_before_ns'])} → {duration(w['savings_after_ns'])}"
              for w in row.get("findings_worse") or []]
    return ", ".join(parts)


def diff_kernel_name(row: dict, limit: int | None = None) -> str:
    """A diff row's kernel, with its launch shape where its name runs at several (the name is what is
    shortened to `limit`, never the shape that tells the rows apart)."""
    shape = f" [{row['shape']}]" if row.get("shape") else ""
    name = str(row["name"])
    return (shorten(name, max(8, limit - len(shape))) if limit else name) + shape

