"""Program analysis of Nsight Systems exports: timeline, GPU metrics and the program checks.

Also joins an nsys export with ncu reports of the same program: each ncu kernel's savings are
weighted by that kernel's total time in the nsys timeline (matched by name).
"""

from __future__ import annotations

import math
import re
import sqlite3
from dataclasses import dataclass, field

from nsanalyze.checks import global_settings, limits_for, program_checks
from nsanalyze.checks.base import Finding, NotJudged, budget_part, evidence, severity_for
from nsanalyze.checks.program._claims import claims_by_cause, unclaimed_part

# Checks whose findings claim budget time of a wider cause (checks/program/_host_class.claims): their own
# savings are not capped by what they claim.
WIDER_CAUSES = {"allocator-churn", "pinned-alloc-churn", "slow-steps", "non-step-phase", "host-wait"}
from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize import model, pricing
from nsanalyze.normalize.critical_path import SELF_CHECK_TOLERANCE
from nsanalyze.normalize.checked_rows import invalid_rows
from nsanalyze.normalize.timeline import Timeline, build_timeline
from nsanalyze.numbers import duration_text, finite
from nsanalyze.read.nsys import NsysExport, sqlite_input_error
from nsanalyze.render.format import set_aside_note


@dataclass
class ProgramResult:
    sections: dict
    findings: list[Finding]
    kernels: list[dict]
    kernel_summary: list[dict]
    not_judged: list[NotJudged] = field(default_factory=list)
    step_block: object | None = None   # the replayed steps around the median (one export): prices kernel findings
    step_count: int = 0                # the steps in its window


def run_program_checks(timeline: Timeline, overrides=None, only: set[str] | None = None):
    """Runs the program checks on one timeline; returns (findings, not judged).

    A finding's savings come from one part of the time budget (its check's BUDGET_PART) and never
    exceed it; findings drawing on the same part overlap, so together they promise 1 - prod(1 - s_i)
    of it, never the plain sum."""
    findings, not_judged = [], []
    cuts = global_settings()["severity"]
    span = timeline.summary.span_ns or 0
    for check in program_checks():
        if only is not None and check.id not in only:
            continue
        missing = [name for name in check.requires if getattr(timeline, name, None) is None
                   or (name == "work" and _graphs_hide_kernels(timeline))]
        if missing:
            hint = "nsys profile --gpu-metrics-devices=all" if "gpu_metrics" in missing or "busy_clock" in missing \
                else "nsys profile --cuda-graph-trace=node" if "work" in missing and timeline.work \
                else "nsys profile -t cuda,nvtx"
            not_judged.append(NotJudged(check.id, None, missing, hint))
            continue
        finding = check.run(timeline, limits_for(check, overrides))
        if finding is None:
            continue
        if finding.estimated_savings_ns == 0.0:
            finding.estimated_savings_ns = finding.estimated_speedup * span
        replay_note = _price_by_replay(timeline, check, finding)
        part = check.budget_part
        finding.budget_part = part
        whole = budget_part(timeline, part, finding.budget_device)[0] if part and timeline.budget else span
        # a wider cause prices its own claim, which may span parts (its part only names where most of it lies)
        limit = span if check.id in WIDER_CAUSES else \
            unclaimed_part(timeline, part, finding.budget_device)[0] if part and timeline.budget else whole
        if limit < whole and finding.estimated_savings_ns > limit:
            causes = ", ".join(f"{cause} ({duration_text(parts[part])})" for cause, parts in claims_by_cause(timeline).items()
                               if parts.get(part))
            finding.notes.append(f"of the {duration_text(whole)} of {part} time, {duration_text((whole - limit))} lie in wider "
                                 f"causes that their own findings count ({causes}); this one counts the "
                                 f"{duration_text(limit)} left")
        finding.estimated_savings_ns = min(finding.estimated_savings_ns, limit, span) if span else 0.0
        if replay_note is not None:   # written once the caps have set the figure it names
            finding.notes.append(replay_note(finding.estimated_savings_ns))
        finding.check = check.id
        findings.append(finding)
    _combine_overlapping(findings, timeline)
    for finding in findings:
        finding.estimated_speedup = min(1.0, finding.estimated_savings_ns / span) if span else 0.0
        finding.severity = severity_for(finding.estimated_speedup, cuts)
    return findings, not_judged


def _graphs_hide_kernels(timeline: Timeline) -> bool:
    """A graph-level trace whose whole-graph executions hold most of the kernel time: the kernels' roles,
    which the busy-GPU checks read, are not in the export, so those checks cannot judge."""
    total = sum(r.ns for r in timeline.work or ())
    return bool(total) and sum(r.ns for r in timeline.work if r.role == "graph") >= 0.5 * total


def _price_by_replay(timeline: Timeline, check, finding: Finding):
    """The finding's savings: what the replay of the steps saves with the change its check declares
    (its `change`, normalize.pricing), capped by the time the change takes away; the check's own estimate where
    no change maps or the replay is not trusted. Where the two disagree, returns the note that says which
    figure the finding's savings are (called with them once the budget's caps have set them)."""
    declared = check.change
    if not declared or len(timeline.devices) > 1:   # the replay is one process's steps: one GPU's
        return None
    own = finding.estimated_savings_ns
    block = getattr(timeline, "step_block", None)
    rate = None
    if declared.get("pinned") and block is not None:
        from nsanalyze.checks.program._copies import reference_rate

        rate = {kind: reference_rate(timeline, label)[0] for kind, label in block.graph.copy_kinds.items()}
    priced = pricing.price(timeline, declared, own, rate)
    steps = timeline.steps.count if timeline.steps is not None and timeline.steps.count else None
    per_step = (lambda ns: f"{ns / steps / 1e6:.2f} ms a step") if steps else (lambda ns: f"{ns / 1e6:.2f} ms")
    if priced is None:
        if block is not None and not block.trusted:
            finding.notes.append(f"savings: the check's own estimate; the replay of the steps misses the measured "
                                 f"ones by {block.self_check_error:.1%} (it must come within "
                                 f"{SELF_CHECK_TOLERANCE:.0%} to price a change)")
        return None
    finding.estimated_savings_ns = priced.savings_ns
    finding.evidence = {**finding.evidence, "replayed_savings_ns": evidence(priced.replayed_ns, unit="ns"),
                        "check_savings_ns": evidence(own, unit="ns")}
    if priced.note:
        finding.notes.append(f"replay: {priced.note}")
    if abs(priced.savings_ns - own) <= pricing.DISAGREE * max(own, priced.savings_ns):
        return None
    capped = priced.cap_ns is not None and priced.replayed_ns > priced.cap_ns
    replay = (f"the replay of the steps with {priced.change} ({per_step(priced.savings_ns)}"
              + (f", capped by the {per_step(priced.cap_ns)} the change takes away" if capped else "") + ")")
    off_path = ("; the kernels are not all on the step's critical path: faster, they save only down to what "
                "the host and the other work take" if (declared.get("speedup") or declared.get("remove_kernels"))
                and priced.savings_ns < own else "")

    def note(final_ns: float) -> str:
        """Names the figure the savings are: the caps after the replay can only lower it."""
        def near(a: float, b: float) -> bool:
            return abs(a - b) <= 0.01 * max(a, b)
        if near(final_ns, priced.savings_ns):
            return f"savings: {replay}, not the check's own estimate ({per_step(own)}){off_path}"
        if near(final_ns, own):
            return (f"savings: the check's own estimate ({per_step(own)}), what its budget part leaves it; {replay} "
                    "is more: it also takes away time beside this cause, which other findings count")
        return (f"savings: {per_step(final_ns)}, what its budget part leaves it; {replay} and the check's own "
                f"estimate ({per_step(own)}) are both more")
    return note


def _combine_overlapping(findings: list[Finding], timeline: Timeline) -> None:
    """Findings that draw on one budget part share it: scale them to 1 - prod(1 - s_i) of the part.
    A finding counted after the others (after_others: transfer-bound after pageable-memcpy) already holds
    only what they leave of the part: it is named beside them and not scaled again."""
    by_part: dict[tuple, list[Finding]] = {}
    for finding in findings:   # a wider cause's claim is already taken out of the others' parts
        if finding.budget_part and timeline.budget and finding.check not in WIDER_CAUSES:
            by_part.setdefault((finding.budget_part, finding.budget_device), []).append(finding)
    for (part, device), group in by_part.items():
        later = [f for f in group if f.after_others and len(group) > 1]
        group = [f for f in group if f not in later]
        for finding in later:
            finding.notes.append(f"overlaps with {', '.join(f.check for f in group)} (the same {part} time): "
                                 "counted after them, of what they leave")
        for finding in group:
            if later:
                finding.notes.append(f"{', '.join(f.check for f in later)} counts after this, of the {part} "
                                     "time it leaves")
        if len(group) < 2:
            continue
        part_ns = unclaimed_part(timeline, part, device)[0]
        if not part_ns:
            continue
        remaining = 1.0
        for finding in group:
            remaining *= 1.0 - min(1.0, finding.estimated_savings_ns / part_ns)
        combined, total = (1.0 - remaining) * part_ns, sum(f.estimated_savings_ns for f in group)
        for finding in group:
            others = ", ".join(f.check for f in group if f is not finding)
            finding.notes.append(f"overlaps with {others} (the same {part} time): together they save at most "
                                 f"{combined / 1e6:.2f} ms")
            if total > combined:
                finding.estimated_savings_ns *= combined / total


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
                      launches=model.Launches(), copies=model.Copies(), device_kernels=tuple(device_kernels))
    budgets = [t.budget for t in timelines if t.budget]
    if budgets:  # each part averaged over the ranks: wall-clock time, as for the GPUs of one export
        merged.budget = tuple(model.BudgetPart.of({"part": parts[0].part, "ns": sum(p.ns for p in parts) / len(parts),
                                                   "share": sum(p.share or 0 for p in parts) / len(parts)})
                              for parts in zip(*budgets))
    return section, merged


def _one_per_check(per_rank: list[list[Finding]], rank_devices: list[list[dict]]) -> list[Finding]:
    """Per-rank findings of one cause become one finding: the rank where it saves most speaks, the
    others are listed; savings stay that rank's wall-clock time, never a sum over ranks."""
    by_check: dict[str, list[tuple[int, Finding]]] = {}
    for rank, findings in enumerate(per_rank):
        for finding in findings:
            by_check.setdefault(finding.check, []).append((rank, finding))
    merged = []
    for check, entries in by_check.items():
        rank, best = max(entries, key=lambda e: e[1].estimated_savings_ns)
        if len(per_rank) > 1:
            best.evidence = {**best.evidence, "ranks": [
                {"rank": r, "estimated_savings_ns": f.estimated_savings_ns, "severity": f.severity, "title": f.title}
                for r, f in entries]}
            best.title = f"rank {rank}: {best.title}" + (f" (also on rank {', '.join(str(r) for r, _ in entries if r != rank)})"
                                                          if len(entries) > 1 else "")
            own = [d.device_id for d in rank_devices[rank]]
            device = best.device_id if best.device_id is not None else (own[0] if len(own) == 1 else None)
            best.device_id = f"{rank}:{device}" if device is not None else None
        merged.append(best)
    return merged


def _after_the_straggler(findings: list[Finding], imbalance: Finding | None, devices: list[dict],
                         own: list[dict]) -> None:
    """A straggler slow on the host: its own host time is what the other GPUs wait for, rank-imbalance's saving.
    A host finding (idle_host, idle_launch, idle_sync) whose budget holds the straggler's GPU is the same cause:
    it keeps only the host time the straggler's excess over the others does not explain, and says so.
    `devices`: every GPU; `own`: the GPUs of the export the findings come from (their budget)."""
    if imbalance is None or imbalance.evidence.get("straggler_side") != "host":
        return
    from nsanalyze.checks.program.rank_imbalance import HOST_PARTS, label

    slow = next((d for d in devices if d.device_id == imbalance.device_id), None)
    others = [d for d in devices if d is not slow and d.budget]
    if slow is None or not others or not slow.budget:
        return
    def part(device, name):
        return next((p.ns for p in device.budget if p.part == name), 0.0)
    cuts = global_settings()["severity"]
    for finding in findings:
        if finding is imbalance or finding.budget_part not in HOST_PARTS:
            continue
        budget = [d for d in own if d.budget and (finding.budget_device is None
                                                  or finding.budget_device in (d.device_id, d.device))]
        if slow not in budget:
            continue
        name = finding.budget_part
        excess = max(0.0, part(slow, name) - sum(part(d, name) for d in others) / len(others)) / len(budget)
        part_ns = sum(part(d, name) for d in budget) / len(budget)
        if not part_ns or not excess:
            continue
        left = max(0.0, part_ns - excess) / part_ns
        finding.notes.append(f"the same cause as rank-imbalance: {excess / 1e6:.2f} ms of this {name} time is the "
                             f"straggler's excess over the other GPUs, the host time they wait for, counted there; this "
                             f"finding keeps the {max(0.0, part_ns - excess) / 1e6:.2f} ms the GPUs share")
        finding.title += f"; {label(slow)} is the straggler, the others wait for this host time (rank-imbalance)"
        finding.evidence = {**finding.evidence, "counted_in": "rank-imbalance"}
        finding.estimated_savings_ns *= left
        finding.estimated_speedup *= left
        finding.severity = severity_for(finding.estimated_speedup, cuts)


def _fit_the_window(findings: list[Finding], window_ns: float) -> None:
    """Causes on different GPUs or parts can describe one lost stretch of wall time (a straggler's host
    work and the others' wait for it): all program savings together never exceed the window."""
    total = sum(f.estimated_savings_ns for f in findings)
    if window_ns and total > window_ns:
        for finding in findings:
            finding.estimated_savings_ns *= window_ns / total
            finding.estimated_speedup = finding.estimated_savings_ns / window_ns
            finding.severity = severity_for(finding.estimated_speedup, global_settings()["severity"])
            finding.notes.append(f"scaled by {window_ns / total:.2f}: the program findings overlap in wall time "
                                 "and together save at most the window")


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
            _after_the_straggler(findings, imbalance, devices, [d for d in devices if d.rank == rank])
        findings = _one_per_check(per_rank, [t.devices for t in timelines]) + cross
    else:
        devices = tuple(d.with_(rank=d.rank if d.rank is not None else 0, device=d.device_id)
                        for d in devices)   # one export: its processes are the ranks
        if timelines:
            timelines[0].devices = devices
            sections["timeline"]["devices"] = model.plain(devices)
        findings = per_rank[0] if per_rank else []
        _after_the_straggler(findings, next((f for f in findings if f.check == "rank-imbalance"), None),
                             devices, devices)
    for finding in findings:
        _rank_and_device(finding, devices)
    _fit_the_window(findings, sections.get("timeline", {}).get("span_ns") or 0)
    one = timelines[0] if len(timelines) == 1 else None
    return ProgramResult(sections, findings, kernels, summary, not_judged,
                         one.step_block if one is not None else None,
                         one.steps.count if one is not None and one.steps is not None else 0)


def join_kernel_times(ncu_kernels: list[dict], nsys_summary: list[dict], kernel_time: dict) -> None:
    """Weights ncu findings by each kernel's time in the nsys timeline, matched by name. A name's nsys
    total is counted once: split over the ncu kernels of that name by their share of its ncu time."""
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
        for kernel in kernels:
            share = (kernel.get("total_ns") or kernel["duration_ns"] or 0.0) / ncu_total
            kernel["nsys"] = {"total_ns": finite(match["duration_ns"] * share), "launches": int(match["launches"]),
                              "time_share": finite(match["duration_ns"] * share / total) if total else None}
            kernel_time[kernel["id"]] = float(match["duration_ns"]) * share


# At most this many kernels' findings are replayed (one replay a kernel, the longest kernels first).
KERNELS_REPLAYED_AT_MOST = 20


def price_kernel_findings(findings: list[Finding], program: ProgramResult, ncu_kernels: list[dict],
                          kernel_time: dict) -> None:
    """Kernel findings joined with nsys time go through the replay of the steps: the kernel faster by the
    share its findings promise together (1 - prod(1 - s)); where the replay saves less (the kernel is off the
    critical path, the host holds the step), each finding's share is scaled to what the replay saves."""
    block = program.step_block
    if block is None or not block.trusted or not program.step_count:
        return
    by_kernel: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.kernel_id is not None and finding.estimated_speedup > 0 and kernel_time.get(finding.kernel_id):
            by_kernel.setdefault(finding.kernel_id, []).append(finding)
    kernels = {k["id"]: k for k in ncu_kernels if k.get("nsys")}
    ranked = sorted((kid for kid in by_kernel if kid in kernels), key=lambda kid: -kernel_time[kid])
    for kernel_id in ranked[:KERNELS_REPLAYED_AT_MOST]:
        group, kernel = by_kernel[kernel_id], kernels[kernel_id]
        left = 1.0
        for finding in group:
            left *= 1.0 - min(finding.estimated_speedup, 1.0)
        share = 1.0 - left
        promised = share * kernel_time[kernel_id]
        names = {n for n in (kernel.get("demangled"), kernel.get("name")) if n}
        pattern = re.compile("^(?:" + "|".join(re.escape(n) for n in names) + ")$")
        if not cp.matching_ops(block.graph, pattern).any():
            continue
        factor = math.inf if share >= 1.0 else 1.0 / (1.0 - share)
        per_step = cp.saving_per_step(block, cp.Change(speedups=(("kernel", pattern, factor),)))
        if per_step is None or not promised:
            continue
        replayed = max(0.0, per_step) * program.step_count
        if replayed >= (1.0 - pricing.DISAGREE) * promised:
            continue
        ratio = replayed / promised
        for finding in group:
            finding.estimated_speedup *= ratio
            finding.notes.append(f"savings: the replay of the steps with this kernel {factor:.2g}x faster saves "
                                 f"{duration_text(replayed)} of the {duration_text(promised)} its findings promise "
                                 f"({ratio:.0%}): the kernel is not all on the critical path (the host or other "
                                 "work holds the step)")
