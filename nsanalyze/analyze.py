"""The pipeline: read -> normalize -> checks -> rank, producing the report model.

The report model is a plain dict with the shape of the JSON contract (docs/contract.md);
every renderer (json, terminal, markdown, html, pdf, sarif) reads only this dict.
"""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass, field

from nsanalyze import __version__
from nsanalyze.checks import global_settings, run_kernel_checks, runs, skipping, validate_overrides
from nsanalyze.checks.base import Finding, KernelView, NotJudged
from nsanalyze.checks.libraries import hot_source_files, library_advice, library_of
from nsanalyze.checks.stalls import name_first_findings_stall
from nsanalyze.errors import InputError
from nsanalyze.normalize import normalize_ncu
from nsanalyze.numbers import finite
from nsanalyze.text import own_signature_words
from nsanalyze.normalize.clocks import clock_control
from nsanalyze.normalize.kernel_groups import group_launches
from nsanalyze.normalize.kernels import IDENTITY_COLUMNS, metrics_to_read, report_launch_floor
from nsanalyze.normalize.roofline import roofline
from nsanalyze.rank import cap_library_kernels, merge_per_kernel, rank, settle_launches
from nsanalyze.read import NcuReport, NsysExport, read_profile, read_profiles

SCHEMA = "nsanalyze/report@1"


@dataclass
class Options:
    thresholds: dict[str, float] = field(default_factory=dict)
    skip_first_ns: int | None = None
    nvtx_range: str | None = None
    window: str = "steady"  # nsys: "steady" (the steady steps when found) or "capture" (everything)
    kernel: str | None = None  # -k NAME|regex:PATTERN: only these kernels are judged (kernel_filter.py)
    as_ranks: bool = False     # several nsys/Kineto inputs: merge them as ranks whatever the files say
    skip: frozenset[str] = frozenset()  # checks that never run (--skip): the report is that of a build without them


def _profile_entry(profile) -> dict:
    entry = {"path": profile.path, "kind": profile.kind, "gpu": profile.device_name,
             "compute_capability": profile.compute_capability}
    # Impossible values read past (read/ncu.py; read/nsys.py: those of opening the export, not the
    # launch shapes its kernel read sets aside, which the timeline's notes count).
    set_aside = getattr(profile, "opening_set_aside", None) if isinstance(profile, NsysExport) else None
    set_aside = set_aside if set_aside is not None else getattr(profile, "set_aside", None)
    if set_aside:
        entry["set_aside_values"] = dict(set_aside)
    return entry


NVIDIA_LINK = re.compile(r"@(?:section|url):([^:@]*):?([^@]*)@")


def _plain(message: str) -> str:
    """NVIDIA's rule messages embed `@section:Id:Text@` and `@url:Text:https...@` links; keep the text."""
    return NVIDIA_LINK.sub(lambda m: m.group(2) if m.group(0).startswith("@section") else m.group(1), message)


def _nvidia_rules(report: NcuReport) -> list[dict]:
    """NVIDIA's stored rule results, kept as a second opinion in their own order."""
    rules = []
    for launch in report.launches:
        for result in launch.nvidia_rules:
            message = result.get("rule_message") or {}
            speedup = (result.get("speedup_estimation") or {}).get("speedup")
            if not message.get("message"):
                continue
            rules.append({
                "kernel_id": launch.index, "kernel_name": launch.name,
                "rule": result.get("rule_identifier"), "name": result.get("name"),
                "title": message.get("title") or result.get("name"), "message": _plain(message.get("message")),
                "type": {0: "ok", 1: "warning", 2: "optimization", 3: "error"}.get(message.get("type"), "info"),
                "estimated_speedup_pct": speedup,
            })
    return rules


def instance_names(kernels: list[dict]) -> dict:
    """Names that tell apart the template instances of one function in a report (kernel id -> name): the short
    name with the last words of its signature that not all of them share (gpt_bf16_full's Adam step:
    `multi_tensor_apply_kernel[TensorListMetadata, TernaryOpScalarFunctor, LerpFunctor]`, `[..., Sqrt]`), where
    one short name stands for several signatures; kernels of a name of their own are left out."""
    signatures: dict[tuple, set] = {}
    for kernel in kernels:
        if kernel.get("name") and kernel.get("demangled"):
            signatures.setdefault((kernel.get("profile"), kernel["name"]), set()).add(kernel["demangled"])
    own = {key: own_signature_words(alike) for key, alike in signatures.items() if len(alike) > 1}
    label = {key: _telling_words(words) for key, words in own.items()}
    shown = {}
    for kernel in kernels:
        words = label.get((kernel.get("profile"), kernel.get("name")), {}).get(kernel.get("demangled"))
        if words:
            shown[kernel["id"]] = f"{kernel['name']}[{', '.join(words)}]"
    return shown


def _telling_words(own: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per signature, at most three of its own words: those no other signature of the name holds (attn_naive's
    `bfloat16_copy_kernel_cuda`, where its last three, `lambda, float, instance`, were another instance's too), else
    its last ones."""
    out = {}
    for signature, words in own.items():
        others = set().union(*(set(w) for s, w in own.items() if s != signature))
        unique = [w for w in words if w not in others]
        out[signature] = unique[:3] if unique else words[-3:]
    return out


LAUNCH_SEQUENCE = "launch_sequence"   # analyze_ncu's facts: taken out before they become the profile's entry


def analyze_ncu(report: NcuReport, options: Options) -> tuple[list[dict], list[Finding], list, list[dict], dict]:
    """Kernel diagnosis of one report: checks run per launch, then launches group into kernels
    (name, launch shape, NVTX range) and each check speaks once per kernel."""
    table = normalize_ncu(report)
    clock = clock_control(table.rows)
    if clock["mode"] == "locked" or clock.get("too_short"):  # a locked or unread clock says nothing about
        for row in table.rows:                                  # throttling: not judged, not a finding
            row.pop("sm_clock_ratio", None)
    elif clock["mode"] == "below-lock":  # a lock the GPU did not hold: the clock is judged against the lock
        for row in table.rows:
            if finite(row.get("sm_frequency_hz")):
                row["sm_clock_ratio"], row["locked_clock_hz"] = row["sm_frequency_hz"] / clock["lock_hz"], clock["lock_hz"]
    settings = global_settings()["roofline"]
    views, roofs, by_launch = [], {}, {}
    launch_by_id = {record["id"]: launch for record, launch in zip(table.rows, report.launches)}
    for record, launch, undefined in zip(table.rows, report.launches, table.undefined):
        roofs[record["id"]] = roofline(record, settings["near_roof_share"], settings["latency_share"],
                                       settings.get("ready_warps"))
        views.append(KernelView(record, launch.source, undefined))
        by_launch[record["id"]] = record
    findings, not_judged = run_kernel_checks(views, options.thresholds)
    settle_launches(findings, by_launch, roofs)
    groups, group_of = group_launches(table.rows)
    total = sum(g.total_ns for g in groups) or None
    kernels = []
    for group in groups:
        record, roof = by_launch[group.representative], roofs[group.representative]
        spread = group.summary()
        metrics = {k: finite(v) for k, v in record.items()
                   if k not in IDENTITY_COLUMNS and finite(v) is not None}
        metrics.update({"mean_ns": spread["mean_ns"], "min_ns": spread["min_ns"], "max_ns": spread["max_ns"],
                        "stddev_ns": spread["stddev_ns"]})
        kernels.append({
            "id": group.id, "name": group.name, "demangled": group.demangled,
            "profile": report.path, "gpu": report.device_name, "nvtx_range": group.nvtx_range,
            "duration_ns": finite(spread["mean_ns"]), "launches": spread["launches"],
            "total_ns": finite(spread["total_ns"]), "launch_ids": spread["launch_ids"],
            "time_share": finite(group.total_ns / total) if total else None,
            "library": _library(group, launch_by_id),
            "bound": roof["bound"],
            "roofline": {k: finite(v) for k, v in roof.items() if finite(v) is not None},
            "metrics": metrics,
        })
    durations = {r["id"]: float(r.get("duration_ns") or 0.0) for r in table.rows}
    findings = merge_per_kernel(findings, groups, group_of, durations)
    for finding in findings:
        finding.advice = library_advice(kernels[finding.kernel_id], finding.check) + finding.advice
    cap_library_kernels(findings, kernels)
    not_judged = _not_judged_per_kernel(not_judged, clock)
    rules = _nvidia_rules(report)
    seen = set()
    for rule in rules:
        rule["kernel_id"] = group_of[rule["kernel_id"]]
    rules = [r for r in rules if (key := (r["kernel_id"], r["rule"], r["title"])) not in seen and not seen.add(key)]
    floor = report_launch_floor(table.rows, global_settings()["savings"]["launch_floor_ns"])
    facts = {"clock_control": clock, "launch_floor": floor, "unmeasured_launches": [{"index": launch.index, "name": launch.name}
                                                             for launch in report.unmeasured],
             # the launches in the order ncu profiled them (work.analyze_kernel_rows: attention's score kernels)
             LAUNCH_SEQUENCE: [{"name": r["name"], "demangled": r["demangled"], "ns": r.get("duration_ns"),
                                "threads": (r.get("grid_size") or 1) * (r.get("block_size") or 1),
                                "stream": r.get("stream_id")} for r in table.rows]}
    return kernels, findings, not_judged, rules, facts


def _library(group, launch_by_id: dict) -> str | None:
    """The kernel's library by its name's marks, unless its hot source lines are in the user's files (looked
    up only for kernels a name marks as a library's: a few file look-ups each, through the source map its
    module shares with the report's other launches: read.ncu.SourceCode)."""
    name = group.demangled or group.name
    if library_of(name) is None:
        return None
    launch = launch_by_id.get(group.representative)
    return library_of(name, hot_source_files(launch.source) if launch is not None else ())


def _not_judged_per_kernel(not_judged: list[NotJudged], clock: dict) -> list[NotJudged]:
    """One entry per (check, kernel name); a locked clock is one entry for the whole report."""
    out, seen = [], set()
    for entry in not_judged:
        if entry.check == "clock-throttling" and clock["mode"] == "locked":
            entry = NotJudged("clock-throttling", None, ["sm_clock_ratio"],
                              f"--clock-control none (this report ran at a locked clock: {clock['reason']})")
        elif entry.check == "clock-throttling" and clock.get("too_short"):
            entry = NotJudged("clock-throttling", None, ["sm_clock_ratio"],
                              f"--clock-control none on kernels long enough to read a clock ({clock['reason']})")
        key = (entry.check, entry.kernel_name)
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


# Program checks that read only the work split: they also judge a kernel list (ncu) without a timeline.
# low-tensor-activity too, where missing-tensor-cores found nothing (the basic set has no FLOP counts):
# the report's tensor-pipe activity is then the kernels' own, weighted by their time.
KERNEL_LIST_CHECKS = frozenset({"attention-unfused", "layout-conversion", "unfused-elementwise", "low-tensor-activity",
                                "unfused-optimizer", "dtype-casts", "unfused-normalization", "unaligned-gemm",
                                "device-copies"})


def _tensor_activity(kernels: list[dict], kernel_time: dict) -> dict | None:
    """The tensor pipe's activity over the report's kernel time, where kernels holding most of it measured it."""
    measured = [(kernel_time.get(k["id"], 0.0), (k.get("metrics") or {}).get("tensor_pipe_pct")) for k in kernels]
    measured = [(t, v) for t, v in measured if v is not None]
    total, covered = float(sum(kernel_time.values())), float(sum(t for t, _ in measured))
    if not total or covered < 0.5 * total:
        return None
    return {"tensor_active_pct": {"mean": sum(t * v for t, v in measured) / covered}}


def _kernel_list_work(kernels: list[dict], kernel_time: dict, options, kernel_findings: list[Finding],
                      floor_ns: float | None = None, device_names=(),
                      sequences: list[list[dict]] | None = None) -> tuple[list[Finding], list[dict]]:
    """The work split of an ncu report's kernels (their replayed durations times launches) and the findings
    of the checks that need nothing else; the "window" they measure against is the report's kernel time."""
    from nsanalyze.normalize import model
    from nsanalyze.normalize.timeline import Timeline
    from nsanalyze.normalize.window import Window
    from nsanalyze.normalize.work import analyze_kernel_rows
    from nsanalyze.program import run_program_checks

    rows = [{"name": k["name"], "demangled": k.get("demangled"), "duration_ns": kernel_time.get(k["id"], 0.0),
             "launches": k.get("launches"), **_dram_bytes(k)} for k in kernels]
    analysis = analyze_kernel_rows(rows, sequences)
    total = float(sum(kernel_time.values()))
    kernel_list = model.KernelList.of({
        "launch_floor_ns": floor_ns, "device_names": sorted(set(device_names) - {None, ""}),
        # kernels whose FLOPs missing-tensor-cores read: their instruction mix, not their name, decides
        "instruction_mix_judged": frozenset(k.get("demangled") or k["name"] for k in kernels
                                            if (k.get("metrics") or {}).get("fp32_flops") is not None
                                            and runs("missing-tensor-cores")),
        # the user's own kernels (no library's marks, or hot source lines in the user's files)
        "user_kernel_ns": float(sum(kernel_time.get(k["id"], 0.0) for k in kernels if not k.get("library")))})
    timeline = Timeline.of_kernel_list(Window(0, int(total), "the report's kernels", "kernels"), total, analysis,
                                       _tensor_activity(kernels, kernel_time), kernel_list)
    only = set(KERNEL_LIST_CHECKS)
    if any(f.check == "missing-tensor-cores" for f in kernel_findings):
        only.discard("low-tensor-activity")   # the kernel check speaks for those GEMMs, with their FLOPs
    findings, _ = run_program_checks(timeline, options.thresholds, only=only)
    for finding in findings:
        finding.notes.append("from the report's kernel list (ncu times each launch alone, replayed): the share is "
                             "of the profiled kernels' time; an nsys export of the run gives it in wall-clock time")
    return findings, analysis.work


def _dram_bytes(kernel: dict) -> dict:
    """{"dram_bytes": the bytes its launches moved to and from DRAM}, where measured: the representative launch's
    (dram_bytes_read + dram_bytes_write) times the launches of the kernel; {} where not measured."""
    moved = finite((kernel.get("metrics") or {}).get("dram_bytes"))
    return {"dram_bytes": moved * (kernel.get("launches") or 1)} if moved is not None else {}


def _utc(ns: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _capture(export: NsysExport) -> tuple[int, int] | None:
    """When an export's GPU work ran, on the UTC clock: its session start plus its first and last GPU work;
    None where the export does not give its session start (or holds no GPU work)."""
    start = export.session_start_utc_ns
    first, last = export.query("SELECT MIN(s), MAX(e) FROM (SELECT MIN(start) AS s, MAX(end) AS e FROM kernels "
                               "UNION ALL SELECT MIN(start), MAX(end) FROM copies)")[0]   # (one scan, multi-input only)
    if start is None or first is None or last is None:
        return None
    return start + int(first), start + int(last)


def _refuse_copies(exports: list[NsysExport], names: str) -> None:
    """One profile under two names (a copy) is one run, not two ranks: files of equal size are compared by content."""
    import os

    from nsanalyze.read.files import content_key

    by_size: dict[int, list[str]] = {}
    for export in exports:
        try:
            by_size.setdefault(os.path.getsize(export.path), []).append(export.path)
        except OSError:
            continue   # not a plain file here (read from elsewhere): nothing to compare
    for paths in (same for same in by_size.values() if len(same) > 1):
        keys: dict[str, str] = {}
        for path in paths:
            key = content_key(Path(path))
            if key in keys:
                raise InputError(names, f"{path} and {keys[key]} are the same file: one profile, not two ranks")
            keys[key] = path


def check_ranks(exports: list[NsysExport]) -> None:
    """Several nsys exports or Kineto traces are merged as the ranks of one run only when the files say so:
    each trace's distributedInfo names a different rank of one world, or their captures ran at the same time
    (on the UTC clock). Otherwise the inputs are unrelated runs: bad input, one line naming the files and why."""
    if len(exports) < 2:
        return
    names = ", ".join(e.path for e in exports)
    import os

    seen: dict[str, str] = {}
    for export in exports:   # one file twice is one run, not two ranks
        real = os.path.realpath(export.path)
        if real in seen:
            raise InputError(names, f"{export.path} is given twice ({seen[real]}): one profile, not two ranks")
        seen[real] = export.path
    _refuse_copies(exports, names)
    hint = ("; report them one by one (or compare two with nsanalyze diff); --as-ranks merges them anyway")
    worlds = [_distributed(e) for e in exports]
    if all(w is not None for w in worlds):
        ranks = [rank for rank, _ in worlds]
        sizes = {size for _, size in worlds}
        if len(set(ranks)) == len(ranks) and len(sizes) == 1 and (None in sizes or len(ranks) <= max(sizes)):
            return
        raise InputError(names, "not ranks of one run: their distributedInfo names ranks "
                                f"{', '.join(map(str, ranks))} of world sizes {', '.join(map(str, sorted(sizes, key=str)))}"
                         + hint)
    captures = [(_capture(e), e.path) for e in exports]
    unknown = [path for capture, path in captures if capture is None]
    if unknown:
        raise InputError(names, f"cannot tell whether they are ranks of one run: {', '.join(unknown)} gives no "
                                "capture start time (TARGET_INFO_SESSION_START_TIME) and no distributedInfo" + hint)
    captures.sort()
    reach = captures[0][0][1]
    for (start, end), path in captures[1:]:
        if start > reach:
            before = next(p for (s, e), p in captures if e == reach)
            raise InputError(names, f"not ranks of one run: {before} ended at {_utc(reach)}, before {path} began at "
                                    f"{_utc(start)} (ranks of one run are captured at the same time)" + hint)
        reach = max(reach, end)


def _distributed(export: NsysExport) -> tuple[int, int | None] | None:
    """(rank, world size) from a Kineto trace's distributedInfo; None for an nsys export or a trace without it."""
    if export.kind != "kineto" or "KINETO_META" not in export.tables:
        return None
    size = export.scalar("SELECT value FROM KINETO_META WHERE key = 'world_size'")
    if size is None:
        return None
    return int(getattr(export, "rank", 0) or 0), int(size)


def file_kind(path: str) -> str | None:
    """A profile file's kind ("ncu", "nsys", "kineto") from its first bytes, before it is read (a report can
    be 500 MB); None for a folder, whose traces are told apart as they are read."""
    import os

    from nsanalyze.read.files import kind_of

    return kind_of(path).value if os.path.isfile(path) else None


def analyze(paths: list[str], options: Options | None = None) -> dict:
    """Analyzes one or more profiles into the report model; skipped checks never run."""
    options = options or Options()
    with skipping(options.skip):
        return _analyze(paths, options)


def _analyze(paths: list[str], options: Options) -> dict:
    try:
        validate_overrides(options.thresholds)
    except ValueError as exc:
        raise InputError("--set", str(exc)) from None
    from nsanalyze.kernel_filter import filter_ncu, parse

    kernel_filter = parse(options.kernel)
    profiles = [filter_ncu(profile, kernel_filter) for path in paths  # a folder of per-rank PyTorch profiler
                for profile in read_profiles(path, metrics_to_read, read_profile)]   # traces is several
    ncu_reports = [p for p in profiles if isinstance(p, NcuReport)]
    nsys_exports = [p for p in profiles if isinstance(p, NsysExport)]

    if not options.as_ranks:
        try:
            check_ranks(nsys_exports)
        except InputError:
            for export in nsys_exports:
                export.close()
            raise

    kernels, findings, not_judged, nvidia_rules = [], [], [], []
    facts_by_path, sequences = {}, []
    for report in ncu_reports:
        k, f, n, r, facts = analyze_ncu(report, options)
        sequences.append(facts.pop(LAUNCH_SEQUENCE))
        facts_by_path[report.path] = facts
        offset = len(kernels)
        for entry in k:
            entry["id"] += offset
        for finding in f:
            finding.kernel_id += offset
        for rule in r:
            rule["kernel_id"] += offset
        kernels += k
        findings += f
        not_judged += n
        nvidia_rules += r

    model = {
        "schema": SCHEMA,
        "version": __version__,
        "profiles": None,  # below: after the nsys analysis, whose read of the capture gives the exports' survey
        "kernels": kernels,
        "findings": [],
        "not_judged": [n.to_json() for n in not_judged],
        "nvidia_rules": nvidia_rules,
    }

    kernel_time = {k["id"]: k.get("total_ns") or (k["duration_ns"] or 0.0) * k["launches"] for k in kernels}
    if nsys_exports:
        from nsanalyze.program import analyze_nsys, join_kernel_times, price_kernel_findings

        program = analyze_nsys(nsys_exports, options)
        model.update(program.sections)
        findings += program.findings
        model["not_judged"] += [n.to_json() for n in program.not_judged]
        if kernels:
            coverage = join_kernel_times(kernels, program.kernel_summary, kernel_time)
            if coverage is not None:
                model["ncu_coverage"] = coverage
            price_kernel_findings(findings, program, kernels, kernel_time)
        else:
            model["kernels"] = program.kernels
    elif kernels:  # ncu alone: the work checks read the kernel list's split by role (names only)
        floors = [facts["launch_floor"]["ns"] for facts in facts_by_path.values()]
        work_findings, model["work"] = _kernel_list_work(kernels, kernel_time, options, findings,
                                                         min(floors) if floors else None,
                                                         [report.device_name for report in ncu_reports], sequences)
        findings += work_findings
    model["profiles"] = [{**_profile_entry(p), **facts_by_path.get(p.path, {})} for p in profiles]
    ncu_gpus = sorted({str(r.device_name or "unknown GPU") for r in ncu_reports})
    if len(ncu_gpus) > 1:   # one table of kernels timed on different GPUs: said, and each row names its GPU
        model["gpus"] = ncu_gpus
    launches = {k["id"]: k["launches"] for k in kernels if k.get("launches")}
    # one row per (check, kernel): the launch shapes and NVTX ranges of one function (its full, demangled signature)
    # share the fix. Template instances are other kernels under one short name: the Adam step's
    # multi_tensor_apply_kernel<...> over Lerp, multiplies, Sqrt and divides (gpt_bf16_full: 32, 32, 32 and 34
    # registers) merged as one row, the evidence of one instance speaking for the others; so are instances compiled
    # differently (other registers a thread: CUTLASS's `Kernel` of 255 and of 188 registers, one spilling)
    identity = {k["id"]: (k.get("profile"), k.get("demangled") or k["name"],
                          (k.get("metrics") or {}).get("registers_per_thread")) for k in kernels}
    program_ns = (model.get("timeline") or {}).get("span_ns") if nsys_exports else None
    floor_of = {path: facts["launch_floor"]["ns"] for path, facts in facts_by_path.items()}
    # a kernel's floor: the report's least launch overhead, or its own time with no SM at work where longer (the
    # one-block demos: 1.41-1.46 us of 2.2-2.7 us): no fix of its code shortens the time its SMs do not run
    kernel_floor = {k["id"]: max(floor_of[k["profile"]], (k.get("metrics") or {}).get("launch_overhead_ns") or 0.0)
                    for k in kernels if k.get("profile") in floor_of}
    ranked = rank(findings, kernel_time, kernel_launches=launches, kernel_keys=identity, kernel_floor_ns=kernel_floor,
                  total_ns=program_ns or sum(kernel_time.values()) or None)  # the program's time, else the report's
    # each kernel's first finding names what its warps wait on (the dominant stall) and the fix that implies
    name_first_findings_stall(ranked, {k["id"]: KernelView(k["metrics"]) for k in kernels if k.get("metrics")})
    shown = instance_names(kernels)
    for finding in ranked:
        if finding.kernel_id in shown:
            finding.kernel_name = shown[finding.kernel_id]
    model["findings"] = [f.to_json() for f in ranked]
    for profile in nsys_exports:
        profile.close()
    return model


def analyze_each(paths: list[str], options: Options | None = None) -> list[dict]:
    """Each profile's report on its own (diff's two sides). NVIDIA's ncu_report keeps all it read until its
    process ends, so ncu reports are analyzed each in a process of its own: two in one process held both sides'
    memory at once (two GPT steps' --set full reports: 2.66 GB). Other kinds free theirs: analyzed here."""
    from nsanalyze.read.files import ProfileKind, detect_kind

    def is_ncu(path: str) -> bool:
        try:
            return detect_kind(Path(path)) == ProfileKind.NCU
        except (InputError, OSError):
            return False   # analyze() says what is wrong with it
    if sum(is_ncu(p) for p in paths) < 2:
        return [analyze([p], options) for p in paths]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")   # not fork: the parent may have threads
    context.set_forkserver_preload(["nsanalyze._forkserver_guard", "nsanalyze.analyze"])
    reports = []
    for path in paths:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            reports.append(pool.submit(analyze, [path], options).result())
    return reports
