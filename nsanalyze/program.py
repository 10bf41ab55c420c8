"""Program analysis of Nsight Systems exports: timeline, GPU metrics and the program checks.

Also joins an nsys export with ncu reports of the same program: each ncu kernel's savings are
weighted by that kernel's total time in the nsys timeline (matched by name).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from nsanalyze.checks import limits_for, program_checks
from nsanalyze.checks.base import Finding, NotJudged
from nsanalyze.normalize import model
from nsanalyze.normalize.checked_rows import invalid_rows
from nsanalyze.normalize.timeline import Timeline, build_timeline
from nsanalyze.numbers import finite
from nsanalyze.read.nsys import NsysExport, sqlite_input_error
from nsanalyze.rank import (WIDER_CAUSES, after_the_straggler, examples_for_the_framework,  # noqa: F401
                            fit_the_window, one_per_check, price_kernel_findings, settle_program_findings)
from nsanalyze.render.format import set_aside_note


@dataclass
class ProgramResult:
    sections: dict
    findings: list[Finding]
    kernels: list[dict]
    kernel_summary: list[dict]
    not_judged: list[NotJudged] = field(default_factory=list)
    step_block: object | None = None   # the replayed steps that price findings (one export): prices kernel findings
    step_count: int = 0                # the steps in its window


def run_program_checks(timeline: Timeline, overrides=None, only: set[str] | None = None):
    """Runs the program checks on one timeline; returns (findings, not judged). The checks' raw findings are
    settled by rank.settle_program_findings: savings priced and capped by their budget part, overlaps shared,
    severity set."""
    findings, not_judged = [], []
    for check in program_checks():
        if only is not None and check.id not in only:
            continue
        missing = [name for name in check.requires if getattr(timeline, name, None) is None
                   or (name == "work" and _graphs_hide_kernels(timeline))]
        if missing:
            not_judged.append(NotJudged(check.id, None, missing, _collect_hint(missing, timeline)))
            continue
        if timeline.launches.kernels_lost and _blames_idle_time(check):   # the idle time is the profile's loss
            not_judged.append(NotJudged(check.id, None, ["kernel_records"], LOST_KERNELS_HINT))
            continue
        finding = check.run(timeline, limits_for(check, overrides))
        if finding is None:
            continue
        if isinstance(finding, NotJudged):   # the check could not tell what it judges (said, not guessed)
            not_judged.append(finding)
            continue
        finding.check = check.id
        findings.append(finding)
    settle_program_findings(findings, timeline)
    examples_for_the_framework(findings, timeline)
    return findings, not_judged


LOST_KERNELS_HINT = "a capture that keeps every kernel record (a shorter capture, fewer profiled steps)"


def _blames_idle_time(check) -> bool:
    """A check that names a cause of the GPU's idle time (its budget part an idle one, or a wider cause claiming
    idle parts): where the profile lost kernel records (model.Launches.kernels_lost), that time was not measured."""
    return (check.budget_part or "").startswith("idle") or check.id in WIDER_CAUSES


def _collect_hint(missing: list[str], timeline: Timeline) -> str:
    """How to record what a check lacks, with the recorder the profile came from (GPU metrics only nsys samples)."""
    if "gpu_metrics" in missing or "busy_clock" in missing:
        return "nsys profile --gpu-metrics-devices=all"
    if "work" in missing and timeline.work:
        return "nsys profile --cuda-graph-trace=node"
    if timeline.recorder == "kineto":
        return ("torch.profiler with prof.step() each iteration (ProfilerStep#N)" if "steps" in missing else
                "torch.profiler with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    if "steps" in missing and timeline.ranges and timeline.budget:   # CUDA and NVTX traced, no range a step
        return ("an NVTX range around each step (torch.cuda.nvtx.range_push/range_pop: the capture has NVTX ranges, "
                "none of them repeating as steps)")
    return ("nsys profile -t cuda,nvtx with one NVTX range per step (torch.cuda.nvtx.range_push)" if "steps" in missing
            else "nsys profile -t cuda,nvtx")


def _graphs_hide_kernels(timeline: Timeline) -> bool:
    """A graph-level trace whose whole-graph executions hold most of the kernel time: the kernels' roles,
    which the busy-GPU checks read, are not in the export, so those checks cannot judge."""
    total = sum(r.ns for r in timeline.work or ())
    return bool(total) and sum(r.ns for r in timeline.work if r.role == "graph") >= 0.5 * total


def _phase_first_findings(timeline: Timeline, findings: list[Finding]) -> None:
    """Each phase's first cause, read off its own budget: the part that holds most of it, told by the
    check that speaks for that part (budget parts are the checks' BUDGET_PART); the steps' phase is the
    window's and takes the report's first program finding."""
    by_part = {c.budget_part: c.id for c in program_checks()
               if c.budget_part and c.id not in WIDER_CAUSES}   # a part's own check, not a wider cause's
    by_part["gpu_compute"] = None  # GPU work: judged kernel by kernel (ncu), not by a program check
    ranked = sorted(findings, key=lambda f: -f.estimated_savings_ns)

    def first(phase: model.Phase) -> model.Phase:
        children = tuple(first(c) for c in phase.children)
        if children:
            phase = phase.with_(children=children)
        if phase.is_steps and ranked:
            return phase.with_(first_finding={"check": ranked[0].check, "title": ranked[0].title})
        if not phase.budget or not phase.duration_ns:
            return phase
        top = max(phase.budget, key=lambda p: p.ns)
        return phase.with_(first_finding={"check": by_part.get(top.part), "part": top.part, "share": top.share})
    timeline.phases = tuple(first(p) for p in timeline.phases)


def _set_aside(export: NsysExport, timeline: Timeline) -> dict[str, int]:
    """The export's values set aside, and the GPU metric samples set aside (not integers, negative, a
    percentage above 100, a clock of zero or less)."""
    samples = (timeline.gpu_metrics or {}).get("set_aside_samples")
    return {**export.set_aside, **({"GPU_METRICS.value": samples} if samples else {})}


def _timeline_section(export: NsysExport, timeline: Timeline) -> dict:
    return {
        "profile": export.path,
        "window": {"start_ns": timeline.window.start if timeline.window.start > -(2**61)
                   else min((d.first_ns for d in timeline.devices), default=None),
                   "end_ns": timeline.window.end if timeline.window.end < 2**61
                   else max((d.last_ns for d in timeline.devices), default=None),
                   "description": timeline.window.description, "kind": timeline.window.kind},
        **timeline.summary.to_json(),
        "budget": model.plain(timeline.budget),
        "work": model.plain(timeline.work),
        "steps": model.plain(timeline.steps),
        "host_stretches": model.plain(timeline.host_stretches),
        "host_activity": timeline.host_activity.to_json() if timeline.host_activity is not None else None,
        "left_out": model.plain(timeline.left_out),
        "critical_path": timeline.critical_path,
        **({"timed_trials": timeline.timed_trials.to_json()} if timeline.timed_trials is not None else {}),
        **({"timing_code": timeline.timing_code.to_json()} if timeline.timing_code is not None else {}),
        **({"code_builds": timeline.code_builds.to_json()} if timeline.code_builds is not None else {}),
        **({"graph_captures": timeline.graph_captures.to_json()} if timeline.graph_captures is not None else {}),
        **({"host_data": timeline.host_data.to_json()} if timeline.host_data is not None else {}),
        **({"refused_allocations": timeline.refused_allocations.to_json()} if timeline.refused_allocations is not None
           else {}),
        **({"recomputation": timeline.recomputation.to_json()} if timeline.recomputation is not None else {}),
        **({"repeated_backward": timeline.repeated_backward.to_json()} if timeline.repeated_backward is not None
           else {}),
        "phases": model.plain(timeline.phases),
        "notes": timeline.notes + [note for note in [set_aside_note(_set_aside(export, timeline))] if note],
        "api_calls": model.plain(timeline.api_calls),
        "dropped_rows": {**export.dropped_rows, **invalid_rows(export)},
        "devices": model.plain(timeline.devices),
        "streams": timeline.streams,
        "ranges": timeline.ranges,
        "gaps": model.plain(timeline.gaps),
        "syncs": timeline.syncs.to_json(),
        "launches": timeline.launches.to_json(),
        "copies": timeline.copies.to_json(),
    }


def _gpu_metrics_section(timeline: Timeline) -> dict | None:
    metrics = timeline.gpu_metrics
    if not metrics:
        return None
    section = dict(metrics)
    gr, issue, tensor = metrics.get("gr_active_pct"), metrics.get("sm_issue_pct"), metrics.get("tensor_active_pct")
    if gr and issue:
        section["headline"] = (f"GPU busy {gr['mean']:.0f}% of the time by GPU-Util (GR Active), SMs issuing on "
                               f"{issue['mean']:.0f}% of cycles" + (f", tensor cores active {tensor['mean']:.1f}%"
                                                                    if tensor else ""))
    return section


def _merge_ranks(exports: list[NsysExport], timelines: list[Timeline]) -> tuple[dict, Timeline]:
    """Per-rank exports of one run on a common clock (each export's session start, UTC), and a
    timeline-like view over all their devices for the cross-rank checks."""
    starts = [e.session_start_utc_ns for e in exports]
    aligned = all(s is not None for s in starts)
    origin = min(starts) if aligned else None
    ranks, devices, device_kernels = [], [], []
    for rank, (export, timeline) in enumerate(zip(exports, timelines)):
        offset = starts[rank] - origin if aligned else None
        ranks.append({"rank": rank, "profile": export.path, "clock_offset_ns": offset,
                      "devices": [d.device_id for d in timeline.devices]})
        for device in timeline.devices:
            devices.append(device.with_(device_id=f"{rank}:{device.device_id}", rank=rank, device=device.device_id,
                                        first_ns=device.first_ns + (offset or 0), last_ns=device.last_ns + (offset or 0)))
        for row in timeline.device_kernels:
            device_kernels.append(row.with_(device_id=f"{rank}:{row.device_id}"))
        if not timeline.device_kernels:  # single-device exports: the breakdown comes from the kernel summary
            for row in timeline.kernel_summary:
                device_kernels.append(model.DeviceKernel.of(
                    {"device_id": f"{rank}:{timeline.devices[0].device_id}" if timeline.devices else f"{rank}:0",
                     "name": row["name"], "duration_ns": row["duration_ns"]}))
    section = {"ranks": ranks, "clock_alignment": (
        "aligned on each export's session start (TARGET_INFO_SESSION_START_TIME)" if aligned else
        "not aligned: an export lacks TARGET_INFO_SESSION_START_TIME; per-rank figures stand alone")}
    if aligned and devices:
        section["span_ns"] = max(d.last_ns for d in devices) - min(d.first_ns for d in devices)
    windows = [d.window_ns for d in devices if d.window_ns]
    span = sum(windows) / len(windows) if windows else section.get("span_ns", 0)
    merged = Timeline(window=timelines[0].window, summary=timelines[0].summary.with_(span_ns=span),
                      devices=tuple(devices), streams=[], ranges=[], gaps=(), syncs=model.Syncs(),
                      launches=model.Launches(), copies=model.Copies(), device_kernels=tuple(device_kernels),
                      recorder=timelines[0].recorder)
    budgets = [t.budget for t in timelines if t.budget]
    if budgets:  # each part averaged over the ranks: wall-clock time, as for the GPUs of one export
        merged.budget = tuple(model.BudgetPart.of({"part": parts[0].part, "ns": sum(p.ns for p in parts) / len(parts),
                                                   "share": sum(p.share or 0 for p in parts) / len(parts)})
                              for parts in zip(*budgets))
    return section, merged


def _rank_and_device(finding: Finding, devices) -> None:
    """Findings about one GPU carry its integer rank and device beside the contract's device_id."""
    device = next((d for d in devices if d.device_id == finding.device_id), None)
    if device is not None:
        finding.gpu = {"rank": device.rank if device.rank is not None else 0,
                       "device": device.device if device.device is not None else device.device_id}


def analyze_nsys(exports: list[NsysExport], options) -> ProgramResult:
    sections: dict = {}
    per_rank, not_judged, kernels, summary, timelines = [], [], [], [], []
    for export in exports:
        try:
            timeline = build_timeline(export, options.skip_first_ns, options.nvtx_range, options.window)
        except sqlite3.DatabaseError as exc:
            raise sqlite_input_error(export.path, exc) from None
        if getattr(options, "kernel", None):   # -k: the other kernels stay GPU work, only these are judged
            from nsanalyze.kernel_filter import narrow_timeline, parse

            narrow_timeline(timeline, parse(options.kernel), export.path)
        table = timeline.kernel_table
        timeline.activity = None  # the arrays are not needed past here
        rows = table.rows
        for row in rows:
            kernels.append({
                "id": len(kernels), "name": row["name"], "demangled": row["demangled"], "profile": export.path,
                "duration_ns": finite(row["duration_ns"]), "launches": int(row["launches"]),
                "time_share": finite(row["time_share"]), "bound": None, "roofline": None,
                "metrics": {k: finite(row[k]) for k in ("mean_ns", "median_ns", "min_ns", "max_ns", "stddev_ns",
                                                         "registers_per_thread", "shared_mem_per_block_bytes")
                            if k in row},
            })
        summary += rows
        timelines.append(timeline)
        f, n = run_program_checks(timeline, options.thresholds)
        _phase_first_findings(timeline, f)
        per_rank.append(f)
        not_judged += [entry for entry in n if entry.check not in {j.check for j in not_judged}]
        if "timeline" not in sections:  # the first export's timeline is the report's; more exports: see issue on ranks
            sections["timeline"] = _timeline_section(export, timeline)
            metrics = _gpu_metrics_section(timeline)
            if metrics:
                sections["gpu_metrics"] = metrics
    devices = timelines[0].devices if timelines else ()
    if len(exports) > 1:
        merged_section, merged = _merge_ranks(exports, timelines)
        sections["timeline"]["merged"] = merged_section
        devices = merged.devices
        sections["timeline"]["devices"] = model.plain(devices)
        cross_rank = {"rank-imbalance", "exposed-communication"}
        per_rank = [[f for f in findings if f.check not in cross_rank] for findings in per_rank]
        cross, _ = run_program_checks(merged, options.thresholds, only=cross_rank)
        imbalance = next((f for f in cross if f.check == "rank-imbalance"), None)
        for rank, findings in enumerate(per_rank):
            after_the_straggler(findings, imbalance, devices, [d for d in devices if d.rank == rank])
        findings = one_per_check(per_rank, [t.devices for t in timelines]) + cross
    else:
        devices = tuple(d.with_(rank=d.rank if d.rank is not None else 0, device=d.device_id)
                        for d in devices)   # one export: its processes are the ranks
        if timelines:
            timelines[0].devices = devices
            sections["timeline"]["devices"] = model.plain(devices)
        findings = per_rank[0] if per_rank else []
        after_the_straggler(findings, next((f for f in findings if f.check == "rank-imbalance"), None),
                             devices, devices)
    for finding in findings:
        _rank_and_device(finding, devices)
    fit_the_window(findings, sections.get("timeline", {}).get("span_ns") or 0)
    one = timelines[0] if len(timelines) == 1 else None
    return ProgramResult(sections, findings, kernels, summary, not_judged,
                         one.pricing_block if one is not None else None,
                         one.steps.count if one is not None and one.steps is not None else 0)


def _apportion(total: int, shares: list[float]) -> list[int]:
    """Whole counts in proportion to the shares that add up to the total (the largest remainders round up): a name's
    nsys launches over its ncu entries, each entry's part as its share of the time (every entry stated them all)."""
    weight = sum(shares)
    exact = [total * s / weight for s in shares] if weight else [total / len(shares)] * len(shares)
    counts = [int(x) for x in exact]
    for i in sorted(range(len(shares)), key=lambda i: -(exact[i] - counts[i]))[:total - sum(counts)]:
        counts[i] += 1
    return counts


def join_kernel_times(ncu_kernels: list[dict], nsys_summary: list[dict], kernel_time: dict) -> dict | None:
    """Weights ncu findings by each kernel's time in the nsys timeline, matched by name. A name's nsys
    total is counted once: split over the ncu kernels of that name by their share of its ncu time. Returns how
    much of the window's kernel time the ncu report measured (a report of a few launches speaks for its kernels
    only: the largest kernels of the window may never have been profiled), or None without kernel time."""
    by_name: dict[str, dict] = {}
    for row in nsys_summary:
        by_name.setdefault(row["name"], row)
        by_name.setdefault(row["demangled"], row)
    total = sum(r["duration_ns"] for r in nsys_summary) or None
    matches: dict[int, list[dict]] = {}
    for kernel in ncu_kernels:
        match = by_name.get(kernel["demangled"]) or by_name.get(kernel["name"])
        if match:
            matches.setdefault(id(match), []).append(kernel)
    for kernels in matches.values():
        match = by_name.get(kernels[0]["demangled"]) or by_name.get(kernels[0]["name"])
        ncu_total = sum(k.get("total_ns") or k["duration_ns"] or 0.0 for k in kernels) or 1.0
        shares = [(k.get("total_ns") or k["duration_ns"] or 0.0) / ncu_total for k in kernels]
        launches = _apportion(int(match["launches"]), shares)   # (the name's launches once, as its time)
        for kernel, share, count in zip(kernels, shares, launches):
            kernel["nsys"] = {"total_ns": finite(match["duration_ns"] * share), "launches": count,
                              "time_share": finite(match["duration_ns"] * share / total) if total else None}
            kernel_time[kernel["id"]] = float(match["duration_ns"]) * share
    if not total:
        return None
    matched = [by_name.get(ks[0]["demangled"]) or by_name.get(ks[0]["name"]) for ks in matches.values()]
    return {"kernel_time_share": finite(sum(r["duration_ns"] for r in matched) / total),
            "names_measured": len(matched), "names_in_window": len(nsys_summary),
            "window_kernel_ns": finite(total)}
