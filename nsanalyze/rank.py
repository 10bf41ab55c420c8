"""The verdict: the one module that settles the checks' raw findings. Checks only report what they measured
(a speedup of their kernel, savings of their budget part); here their overlaps, caps, savings, severity and
order are decided, for kernel and program findings alike.

Kernel findings (ncu):
- per launch (settle_launches): a fix saves at most the time down to the next limiter; a measured twin in the
  report replaces the model's estimate; a kernel near a roof keeps only findings that take load off that roof
  (others drop to `info`: a copy at 90% of DRAM bandwidth is doing its job); a code-level finding on a closed
  library's kernel is `info` (cap_library_kernels).
- `estimated_savings_ns` = estimated_speedup x the kernel's time in the profile (per launch for
  an ncu report alone; the kernel's total time in the nsys timeline when one is joined, priced by the replay
  of its steps where one is trusted: price_kernel_findings).
- A kernel's findings overlap (1 - prod(1 - s_i)), a grid sized by a small problem counts after the
  kernel's own findings, and no kernel saves below its launch floor (the least launch overhead
  measured in its report, at most launch_floor_ns a launch, or the kernel's own time with no SM at work
  where longer); the floor takes from the findings counted after the others first.
- Launch shapes of one kernel are one finding.

Program findings (nsys, kernel lists): settle_program_findings prices each by the replay where its check
declares a change, caps it by its budget part (less what wider causes claim) and the window, and shares a
part among the findings that draw on it, except a finding whose change is part of another's (a role's launches
fused, within one graph launch a step: within_wider_changes), which is counted within that one, never added to
it; across ranks one finding speaks for a cause (one_per_check), a
straggler's host time is counted once (after_the_straggler), and all program savings fit the window
(fit_the_window).

Severity is the savings' share of the report's time; rank 1 is the most time to win.
"""

from __future__ import annotations

import math
import os
import re

from nsanalyze.numbers import duration_text
from nsanalyze.checks import global_settings
from nsanalyze.checks.base import (AT_NEED_SLACK, SEVERITIES, Finding, budget_part, clamp01, evidence,
                                   share_of_need)
from nsanalyze.checks.languages import language_note
from nsanalyze.checks.libraries import CLOSED_LIBRARIES, CODE_LEVEL_CHECKS
from nsanalyze.checks.program._claims import claims_by_cause, counted_beside, unclaimed_part
from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize import pricing
from nsanalyze.normalize.critical_path import SELF_CHECK_TOLERANCE
from nsanalyze.normalize.frameworks import of_kernel_table, other_than_pytorch


# ---------------------------------------------------------------------------------------------------------
# Severity: one scale for every finding ([severity] of checks/thresholds.toml, where the table is).

def severity(savings_ns: float, total_ns: float | None) -> str:
    """The one severity scale: the savings' share of the report's time (the window of an nsys export, the
    profiled kernels' time of an ncu report), with absolute minimums so that microseconds are never high. The
    same share means the same severity whatever the finding's kind or the input's."""
    if not total_ns or savings_ns <= 0:
        return "info"
    cuts = global_settings()["severity"]
    share = savings_ns / total_ns
    if share >= cuts["high"] and savings_ns >= cuts["min_high_ns"]:
        return "high"
    if share >= cuts["medium"] and savings_ns >= cuts["min_medium_ns"]:
        return "medium"
    if share >= cuts["low"]:
        return "low"
    return "info"


def under_minimum(finding: Finding) -> bool:
    """Within its model's noise, so info whatever it saves: a kernel finding under kernel_min_share of its
    kernel's time, a program finding under program_min_share of the window (its estimated_speedup is that share)."""
    cuts = global_settings()["severity"]
    return finding.estimated_speedup < cuts["kernel_min_share" if finding.kernel_id is not None else "program_min_share"]


def program_severity(finding: Finding, window_ns: float) -> str:
    """A program finding's severity on one timeline (the window its estimated_speedup is a share of); rank()
    sets it again on the report's time, which is the same window where the report has one timeline."""
    return "info" if under_minimum(finding) else severity(finding.estimated_savings_ns, window_ns)


def _window_of(finding: Finding) -> float:
    """The window a program finding's speedup is a share of (its savings over that share)."""
    return finding.estimated_savings_ns / finding.estimated_speedup if finding.estimated_speedup else 0.0


# Before rank() knows a kernel finding's savings, its severity only says whether it is capped (info: under the
# kernel minimum of its launch's time, near a roof it does not relieve, a library's code) or not (this).
NOT_CAPPED = "low"


def settle_launches(findings: list[Finding], records: dict, roofs: dict) -> None:
    """The kernel checks' raw findings, one per launch, settled: info under the kernel minimum share of the
    launch's time (rank() sets the others' severity from their savings), the estimate bounded by the next
    limiter or replaced by a measured twin, and findings on kernels near a roof capped at info unless the fix
    relieves that roof."""
    for finding in findings:
        finding.severity = "info" if under_minimum(finding) else NOT_CAPPED
    bound_by_next_limiter(findings, records)
    measured_twins(findings, records)
    apply_roof_gate(findings, roofs)


def cap_library_kernels(findings: list[Finding], kernels: list[dict]) -> None:
    """A code-level finding on a closed library's kernel drops to info: its access pattern is the library's,
    and what the user can change (the call, fusion, layout) is the program finding about its role."""
    for finding in findings:
        kernel = kernels[finding.kernel_id]
        if finding.check not in CODE_LEVEL_CHECKS or kernel.get("library") not in CLOSED_LIBRARIES:
            continue
        if finding.severity != "info":
            finding.notes.append(f"capped at info: a {kernel['library']} kernel, whose code you do not write; "
                                 "change the call (see the advice and the program findings)")
        finding.severity = "info"


def apply_roof_gate(findings: list[Finding], roofline_by_kernel: dict) -> None:
    """Caps at info the findings on kernels near a roof, unless the fix takes load off that roof."""
    for finding in findings:
        roof = roofline_by_kernel.get(finding.kernel_id)
        near = roof.get("near_roof") if roof else None
        if not near or finding.relieves == near:
            continue
        if finding.severity != "info":
            finding.notes.append(f"capped at info: the kernel runs near its {near} roof")
        finding.severity = "info"


def merge_per_kernel(findings: list[Finding], groups, group_of: dict[int, int], duration_ns: dict) -> list[Finding]:
    """Per-launch findings -> one per (check, kernel group): the launch that saves most speaks for the
    group, its savings the sum over the launches that fired, its speedup that over the group's time."""
    merged: dict[tuple, list[Finding]] = {}
    for finding in findings:
        merged.setdefault((finding.check, group_of[finding.kernel_id]), []).append(finding)
    out = []
    for (check, group_id), fired in merged.items():
        group = groups[group_id]
        saved = sum(f.estimated_speedup * duration_ns.get(f.kernel_id, 0.0) for f in fired)
        best = max(fired, key=lambda f: f.estimated_speedup * duration_ns.get(f.kernel_id, 0.0))
        best.kernel_id, best.kernel_name = group_id, group.name
        best.estimated_speedup = clamp01(saved / group.total_ns) if group.total_ns else best.estimated_speedup
        if len(group.launch_ids) > 1:
            best.evidence = {**best.evidence, "launches": {"value": len(fired), "of": len(group.launch_ids)}}
            best.notes.append(f"{len(fired)} of {len(group.launch_ids)} launches of this kernel show it; the "
                              "evidence is that of the launch that saves most")
        if best.severity != "info" or all(f.severity == "info" for f in fired):
            severities = [f.severity for f in fired]
            best.severity = min(severities, key=("high", "medium", "low", "info").index)
        out.append(best)
    return out


def _yields_to() -> dict[str, frozenset[str]]:
    """Checks whose findings count after some others' on the same kernel (check id -> those checks)."""
    from nsanalyze.checks import kernel_checks

    return {c.id: frozenset(c.after) for c in kernel_checks() if c.after}


def _later(finding: Finding, group: list[Finding], yields: dict) -> bool:
    """The finding counts after others present on its kernel: a small grid after the kernel's own code
    problems, tensor cores after a shared-memory bottleneck."""
    if finding.after_others:
        return any(not f.after_others for f in group if f is not finding)
    return any(f.check in yields.get(finding.check, ()) for f in group if f is not finding)


def launch_floor_ns() -> float:
    return float(global_settings()["savings"]["launch_floor_ns"])


def combine_per_kernel(findings: list[Finding], kernel_time_ns: dict | None = None,
                       kernel_launches: dict | None = None, kernel_floor_ns: dict | None = None) -> None:
    """A kernel's findings overlap: together they promise 1 - prod(1 - s_i) of its time, never the sum.
    Findings that yield to others (a grid sized by a small problem, to the kernel's own code problems)
    count only the time those leave. No kernel runs faster than its launch floor (launch_floor_ns a
    launch): together its findings never save more than its time less that floor."""
    by_kernel: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.kernel_id is not None:
            by_kernel.setdefault(finding.kernel_id, []).append(finding)
    yields = _yields_to()
    default_floor = launch_floor_ns()
    for kernel_id, group in by_kernel.items():
        floor = (kernel_floor_ns or {}).get(kernel_id, default_floor)  # measured per report where it could be
        for finding in group:
            finding.potential = finding.estimated_speedup  # before overlaps and the floor: breaks ties
        later = [f for f in group if _later(f, group, yields)]
        for finding in later:   # on a tie (the floor left nothing to save), the kernel's own problem leads
            finding.counted_after = True
        primary = [f for f in group if f not in later]
        combined, overlapped = _share_overlap(primary)
        left = 1.0 - combined
        later_combined, later_overlapped = _share_overlap(later)
        for finding in later:
            if primary and finding.estimated_speedup > 0:
                finding.notes.append(f"counted after {', '.join(f.check for f in primary)}: of the "
                                     f"{left:.0%} of the kernel's time they leave")
            finding.estimated_speedup *= left
        combined += later_combined * left
        caps = [f.joint_cap for f in group if f.joint_cap is not None]
        joint = max(caps) if caps else None   # of the kernel's launches, the loosest bound
        if joint is not None and combined > joint[0] and len(group) >= 2:
            for finding in group:
                finding.estimated_speedup *= joint[0] / combined
            combined = joint[0]
            overlapped = True
            for finding in group:
                finding.notes.append(f"fixed together, bounded by the next limiter: all of them leave the "
                                     f"{UNIT_NAMES[joint[1]]}'s work as it is ({joint[2]:.1f}% busy now)")
        floor_note = ""
        time_ns, launches = (kernel_time_ns or {}).get(kernel_id), (kernel_launches or {}).get(kernel_id)
        if time_ns and launches:
            cap = max(0.0, 1.0 - launches * floor / time_ns)
            if combined > cap:
                # the floor takes from the findings counted after the others first: they claim what is left
                primary_share = combined - later_combined * left
                keep_primary = min(1.0, cap / primary_share) if primary_share > 0 else 0.0
                keep_later = (cap - primary_share * keep_primary) / (combined - primary_share) \
                    if combined > primary_share else 0.0
                later_ids = {id(f) for f in later}
                for finding in group:
                    finding.estimated_speedup *= keep_later if id(finding) in later_ids else keep_primary
                combined = cap
                floor_note = (f"at most {cap:.0%} of the kernel's time can go: {launches} launch"
                              f"{'es' if launches != 1 else ''} of {time_ns / launches / 1e3:.1f} us each keep a "
                              f"launch floor of about {floor / 1e3:.1f} us")
        for finding in group:
            others = [f.check for f in group if f is not finding and f.estimated_speedup > 0]  # one saving nothing
            if others and (overlapped or later_overlapped or primary and later):               # overlaps nothing
                finding.notes.append(f"overlaps with {', '.join(others)}: "
                                     f"fixed together they save at most {combined:.0%} of the kernel's time"
                                     + (f" ({floor_note})" if floor_note else ""))
            elif floor_note:
                finding.notes.append(floor_note)


def _share_overlap(group: list[Finding]) -> tuple[float, bool]:
    """Scales overlapping findings so that they sum to 1 - prod(1 - s_i); returns that sum and whether
    they had to be scaled."""
    total = sum(f.estimated_speedup for f in group)
    remaining = 1.0
    for finding in group:
        remaining *= 1.0 - finding.estimated_speedup
    combined = 1.0 - remaining
    if len(group) >= 2 and total > combined:
        for finding in group:
            finding.estimated_speedup *= combined / total
        return combined, True
    return min(total, combined), False


def merge_launch_shapes(findings: list[Finding], kernel_keys: dict, kernel_time_ns: dict) -> list[Finding]:
    """One row per (check, kernel): the launch shapes and NVTX ranges of one kernel are evidence of one
    finding. The shape that saves most speaks; savings add up; the speedup is over all the shapes' time."""
    merged: dict[tuple, list[Finding]] = {}
    out = []
    for finding in findings:
        key = kernel_keys.get(finding.kernel_id) if finding.kernel_id is not None else None
        if key is None:
            out.append(finding)
        else:
            merged.setdefault((finding.check, key), []).append(finding)
    for fired in merged.values():
        # the entry that speaks is one of the merged severity: a speaker capped at info (near its roof) beside an
        # entry that was not gave the row the other's severity under its own "capped at info" note
        best = max(fired, key=lambda f: (f.severity != "info", f.estimated_savings_ns, f.estimated_speedup))
        if len(fired) > 1:
            time_ns = sum(kernel_time_ns.get(f.kernel_id, 0.0) for f in fired)
            best.estimated_savings_ns = sum(f.estimated_savings_ns for f in fired)
            best.estimated_speedup = clamp01(best.estimated_savings_ns / time_ns) if time_ns else best.estimated_speedup
            best.kernel_ids, best.kernel_time_ns = sorted(f.kernel_id for f in fired), time_ns
            best.evidence = {**best.evidence, "launch_shapes": {"value": len(fired), "kernel_ids": best.kernel_ids}}
            best.notes.append(f"the kernel ran as {len(fired)} entries (launch shapes, NVTX ranges or template "
                              f"instances) that show this, {duration_text(time_ns)} in all; the evidence is that of the "
                              "one that saves most, the savings those of all")
            order = ("high", "medium", "low", "info")
            best.severity = min((f.severity for f in fired), key=order.index)
        out.append(best)
    return out


def rank(findings: list[Finding], kernel_time_ns: dict, kernel_launches: dict | None = None,
         kernel_keys: dict | None = None, total_ns: float | None = None,
         kernel_floor_ns: dict | None = None) -> list[Finding]:
    """Sets savings and rank; `kernel_time_ns` maps a kernel id (or None for program findings) to time,
    `kernel_launches` its launches (for the launch floor), `kernel_keys` its identity across launch
    shapes, `total_ns` the report's time (every finding's severity is the share of it its savings are)."""
    combine_per_kernel(findings, kernel_time_ns, kernel_launches, kernel_floor_ns)
    for finding in findings:
        if finding.kernel_id is not None or finding.estimated_savings_ns == 0.0:
            time_ns = kernel_time_ns.get(finding.kernel_id, 0.0)
            finding.estimated_savings_ns = finding.estimated_speedup * time_ns
            if finding.kernel_id is not None:
                finding.kernel_ids, finding.kernel_time_ns = [finding.kernel_id], time_ns
    if kernel_keys:
        findings = merge_launch_shapes(findings, kernel_keys, kernel_time_ns)
    within_program_causes(findings, kernel_keys or {})
    if total_ns is None:
        total_ns = sum(t for k, t in kernel_time_ns.items() if k is not None)
    for finding in findings:   # kernel and program findings, any input: one scale, the report's time
        if finding.severity != "info" and not under_minimum(finding):   # kernel: after overlaps and the floor
            finding.severity = severity(finding.estimated_savings_ns, total_ns)
        else:
            finding.severity = "info"
    severity_order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    # at equal savings, a finding counted within another (within_wider_changes) after it: it adds nothing beyond it;
    # but one that saves as much as the wider change (within 1%: `leads`) before it, the smaller change to make
    def savings_key(finding: Finding) -> float:
        outer = next((f for f in findings if finding.leads and f.check == finding.evidence.get("within")),
                     None)
        return -round(max(finding.estimated_savings_ns, outer.estimated_savings_ns if outer else 0.0), 1)

    ordered = sorted(findings, key=lambda f: (f.severity == "info", savings_key(f), not f.leads,
                                              severity_order[f.severity], f.counted_after,
                                              -f.potential, "within" in f.evidence, f.check))
    floor_index = 0  # a kernel finding is never more severe than a finding ranked above it (mixed reports)
    for position, finding in enumerate(ordered, start=1):
        finding.rank = position
        if finding.kernel_id is not None and severity_order[finding.severity] < floor_index:
            finding.notes.append(f"shown as {SEVERITIES[floor_index]}: findings that save more rank above it")
            finding.severity = SEVERITIES[floor_index]
        floor_index = max(floor_index, severity_order[finding.severity])
    # advice written in CUDA C++, for a kernel written in another language: said first, on each finding of the kernel
    # (low-occupancy has no source lines of its own; the kernel's other findings have)
    files: dict[str, list[str]] = {}
    for finding in ordered:
        if finding.kernel_id is not None and finding.source:
            files.setdefault(finding.kernel_name, []).extend(line["file"] for line in finding.source)
    notes = {name: language_note(names) for name, names in files.items()}
    for finding in ordered:
        if finding.kernel_id is not None and notes.get(finding.kernel_name):
            finding.advice = f"{notes[finding.kernel_name]}.\n\n{finding.advice}"
    return ordered


# ---------------------------------------------------------------------------------------------------------
# Program findings (nsys timelines, kernel lists): savings priced by the replay, capped by their budget part,
# shared where they draw on one part, merged across ranks, fitted into the window.

# Checks whose findings claim budget time of a wider cause (checks/program/_host_class.claims): their own
# savings are not capped by what they claim.
WIDER_CAUSES = {"allocator-churn", "pinned-alloc-churn", "slow-steps", "non-step-phase", "host-sync", "host-wait",
                "autotuning", "event-timing", "runtime-compilation", "graph-recapture", "host-data"}


def settle_program_findings(findings: list[Finding], timeline) -> None:
    """The program checks' raw findings on one timeline, settled: savings (the check's own estimate, else its
    speedup of the window; the replay's price where its check declares a change) never exceed the budget part
    they come from (less what wider causes claim of it) nor the window; findings drawing on the same part
    overlap, so together they promise 1 - prod(1 - s_i) of it, never the plain sum; then speedup and severity."""
    from nsanalyze.checks import check_by_id

    span = timeline.summary.span_ns or 0
    claims = claims_by_cause(timeline) if timeline.budget else {}   # (once: the wider causes' limits, the others' notes)
    replay_notes = []   # (finding, where its note goes, the note): written once every cap has set the figure
    own_first = []      # findings whose claimed_parts list their own part first, then the parts beside it
    capped_titles = []   # wider causes cut to what they claim, whose titles state their own estimate
    in_graph: set[int] = set()   # findings whose launch paths' saving a graph of the step counts (_graphed_beside)
    for finding in findings:
        check = check_by_id(finding.check)
        if finding.estimated_savings_ns == 0.0:
            finding.estimated_savings_ns = finding.estimated_speedup * span
        replay_note = _price_by_replay(timeline, check, finding)
        part = finding.budget_part or check.budget_part   # a finding may name its own (unfused-optimizer's loop)
        finding.budget_part = part
        whole = budget_part(timeline, part, finding.budget_device)[0] if part and timeline.budget else span
        # a wider cause prices its own claim, which may span parts (its part only names where most of it lies):
        # never more than the time it claims over all of them, which its evidence lists where it spans several
        if check.id in WIDER_CAUSES:
            limit = _claimed_limit(finding, span, claims)
            # (a cut below the figures' precision is no news: "the 2.28 s ..., not the 2.28 s estimated")
            if finding.estimated_savings_ns > limit and \
                    duration_text(limit) != duration_text(finding.estimated_savings_ns):
                finding.notes.append(f"savings: the {duration_text(limit)} of the budget its cause claims (where the "
                                     f"time it explains lies), not the {duration_text(finding.estimated_savings_ns)} "
                                     "estimated, which is more than the time it comes from")
                # (its title states its replay, which the causes claimed before it cut: shard_shards' host-data
                # replayed 12.2 ms a step, 5.47 of it beside slow-steps' excess)
                capped_titles.append(finding)
        else:
            limit = unclaimed_part(timeline, part, finding.budget_device, finding.check)[0] if part and timeline.budget \
                else whole
            beside_it = counted_beside(timeline, claims, finding.check)   # (the claims its limit was cut by)
            shared = _shared_part_note(whole, limit, part, span, beside_it, findings,
                                       stepped=getattr(timeline, "steps", None) is not None) \
                if part and finding.budget_device is None else None
            if finding.dropped_host_ns and part and part.startswith("gpu_") and finding.estimated_savings_ns > limit \
                    and _graphed_beside(finding, findings):
                # its replay's saving, more than its GPU part holds, is mostly the launch paths of its kernels, which
                # lie in the GPU's wait on launches, not in that part; a graph of the whole step (launch-overhead's
                # change) takes every launch path, these with them: it keeps its GPU time (blind_persample_base's
                # layout-conversion said 26.9 ms a step, the whole compute part as a cap, for 11.2 ms of conversion
                # and NCHW kernels on a launch-bound step whose launches the finding before it counts). A replay
                # the part holds stands (blind57_lm's recompute: its kernels and their launches, as the fix measured)
                own = _own_estimate(finding)
                limit = min(limit, max(own, finding.estimated_savings_ns - finding.dropped_host_ns))
                in_graph.add(id(finding))
            if shared:
                finding.notes.append(shared)
            elif limit < whole and finding.estimated_savings_ns > limit:
                finding.notes.append(_wider_causes_note(whole, limit, part, beside_it, findings))
            beside = _beside_part(finding, claims) if finding.budget_device is None else {}
            if beside:   # its change's time in other parts (checks/program/_claims: the replay's); the evidence
                # lists every part its savings come from, its own first, as a wider cause's does
                finding.evidence = {**finding.evidence, "claimed_parts": [{"part": part, "ns": round(limit)}] + [
                    {"part": p, "ns": round(ns)} for p, ns in sorted(beside.items(), key=lambda kv: -kv[1])]}
                own_first.append(finding)
                limit += sum(beside.values())
                count = timeline.steps.count if getattr(timeline, "steps", None) is not None else None
                amount = (lambda ns: f"{ns / count / 1e6:.2f} ms a step") if count else duration_text
                finding.notes.append(f"savings beyond its {part} time: "
                                     f"{', '.join(f'{amount(ns)} of {p}' for p, ns in beside.items())}, where the "
                                     "replay of its change puts them: the change saves the host time it takes away, "
                                     "and the GPU's work, which ran while the host did that, then runs while the "
                                     "host does the rest (counted here, not in that part's finding)")
        finding.estimated_savings_ns = min(finding.estimated_savings_ns, limit, span) if span else 0.0
        if replay_note is not None:   # with the figure the budget's caps leave, before the overlaps share a part
            replay_notes.append((finding, len(finding.notes), replay_note, finding.estimated_savings_ns))
    within_wider_changes(findings, timeline)
    _combine_overlapping(findings, timeline, claims)
    for finding, at, replay_note, capped_ns in replay_notes:   # the figure it names is the finding's, after every cap and share
        finding.notes.insert(at, replay_note(finding.estimated_savings_ns, capped_ns, id(finding) in in_graph))
        _title_says_savings(finding, timeline)
    for finding in capped_titles:   # (their titles state a saving: a cut past the figures' rounding is said there)
        if not any(finding is noted for noted, *_ in replay_notes):
            _title_says_savings(finding, timeline, CAPPED_TITLE_SAYS_SAVINGS)
    for finding in own_first:   # its own part's entry: what its savings take of that part, no longer the part's limit
        own, *beside_parts = finding.evidence["claimed_parts"]
        taken = finding.estimated_savings_ns - sum(c["ns"] for c in beside_parts)
        own["ns"] = round(min(own["ns"], max(0.0, taken)))
    for finding in findings:
        finding.estimated_speedup = min(1.0, finding.estimated_savings_ns / span) if span else 0.0
        finding.severity = program_severity(finding, span)
    _next_limit(findings, timeline)
    _after_first(findings, timeline)


# Parts of the changed step's critical path named in the note, at least this share of it each
NEXT_PART_SHARE = 0.1
# Block steps with a tuner's trials at this share or more: the shapes change in most steps (the next-limit line says
# what a new shape costs without the tuner is not measured)
EVERY_STEP_TUNED = 0.5
# A changed path this much the host's, after steps whose GPU was busy this share of their time: said to be a guess
HOST_LED, PACED_BUSY = 0.5, 0.8


def _next_limit(findings: list[Finding], timeline) -> None:
    """What limits a median step once the change of the finding that saves most is made: the critical path of that
    step replayed with it (evidence `critical_path_after`, a note the reports show under their table). Fixing one
    bottleneck shows the next: a launch-bound loop graphed is then its GPU's elementwise work, anomaly mode's
    launches graphed its host's own code. Only where that finding's change was replayed (not a check's own
    estimate); that replay is kept from its pricing (critical_path._replayed), not made again."""
    shown = [f for f in findings if f.severity != "info"]
    first = max(shown, key=lambda f: f.estimated_savings_ns) if shown else None
    if first is None or first.replayed_change is None:
        return
    after = cp.block_path_after(getattr(timeline, "step_block", None), first.replayed_change)
    if after is None:
        return
    path, was_ns = after
    step_ns = sum(p["ns"] for p in path)
    if step_ns >= was_ns:
        return   # no shorter step to describe (the change saves in the window's other steps, or nothing)
    named = [p for p in path if p["share"] >= NEXT_PART_SHARE][:3] or path[:1]
    first.evidence = {**first.evidence, "critical_path_after": path}
    # a role the change sped up keeps its name on the path: said with its factor (low-tensor-activity's TF32 GEMMs
    # are still `gpu:matmul_simt` there, by their measured kernels' names)
    faster = {role: factor for roles, factor in first.replayed_change.roles for role in roles}

    def label(part: str) -> str:
        if part == cp.BETWEEN_OPS:
            return f"{part} (the GPU's gaps between one operation and the next: fewer, larger kernels shorten them)"
        factor = faster.get(part.removeprefix("gpu:")) if part.startswith("gpu:") else None
        return f"{part} ({factor:.2g}x faster)" if factor is not None and math.isfinite(factor) else part
    host = cp.host_share(path) or 0.0
    busy = getattr(timeline.steps, "gpu_busy_time_share", None) if timeline.steps is not None else None
    # a host measured beside a GPU it could not outrun ran at the GPU's pace: what its own pace is, the profile
    # does not show (blind57_lm: the replay calls the step host-bound after the change; the fixed run's GPU is busy
    # 97% of it)
    paced = (f" (the measured steps kept the GPU busy {busy:.0%} of their time: the host ran at its pace, and how "
             "fast it runs once the GPU is faster is not measured)" if host >= HOST_LED and busy is not None
             and busy >= PACED_BUSY else "")
    # a tuner that runs in most steps meets a new shape in each: without it the shape still costs the host its
    # library's heuristic choice and the new kernels' loads, which the tuning stretches the change takes away also
    # held (tune52_ms_base1: 15.0 ms replayed, 62.2 ms a step measured with cudnn.benchmark off, 13.9 ms with one shape)
    graph = getattr(getattr(timeline, "step_block", None), "graph", None)
    tuning = graph.tuning if graph is not None else None
    if first.replayed_change.untuned and tuning is not None and \
            tuning.steps_with_trials >= EVERY_STEP_TUNED * len(tuning.trials):
        paced += ("; each step still meets a new shape, whose cost without the tuner (the library's heuristic choice "
                  "of kernels and their loads, on the host) the profile does not show: the step is longer than this")
    # (the step's period as replayed unchanged: a user read took "now" for the header's median step, which the
    # window's steps give, not the replayed block's: 19.3 against 19.5 ms on copy56_catlog)
    first.notes.append(f"next: with this change the median step replays in {duration_text(step_ns)} "
                       f"({duration_text(was_ns)} replayed unchanged); its critical path is then "
                       + ", ".join(f"{p['share']:.0%} {label(p['part'])}" for p in named)
                       + f": what limits it once this is fixed{paced}")


# Fixing one bottleneck shows the next: a finding whose change the steps as measured barely feel (its replay saves
# under AFTER_FIRST_HELD of its check's own estimate: the host paces the step, say) is replayed again with the first
# finding's change made too, and says what it saves then where that is AFTER_FIRST_SHARE of the window or more
# (blind70_word2vec_fix1: its FP32 GEMMs on the CUDA cores save nothing while the host launches each kernel; with each
# step one graph launch, TF32 saves a quarter of the graphed step). At most AFTER_FIRST_AT_MOST findings, those whose own
# estimates are largest, are replayed again (a replay is a pass over the block's calls and operations).
AFTER_FIRST_HELD, AFTER_FIRST_SHARE, AFTER_FIRST_AT_MOST = 0.5, 0.03, 2
AFTER_FIRST_MORE = 1.1   # said only where it is worth this many times its savings now, or more


def _after_first(findings: list[Finding], timeline) -> None:
    """Evidence `savings_after_first_ns` and a note on the findings the first finding's change holds back: what their
    change saves once that one is made (the replay of both, less the replay of the first's alone), over the window."""
    block = getattr(timeline, "pricing_block", None)
    shown = [f for f in findings if f.severity != "info"]
    first = max(shown, key=lambda f: f.estimated_savings_ns) if shown else None
    span = timeline.summary.span_ns or 0
    if first is None or first.replayed_change is None or block is None or not block.trusted or not span:
        return
    held = sorted((f for f in findings if f is not first and f.replayed_change is not None
                   and _own_estimate(f) >= AFTER_FIRST_SHARE * span
                   and f.estimated_savings_ns < AFTER_FIRST_HELD * _own_estimate(f)), key=lambda f: -_own_estimate(f))
    steps = timeline.steps.count if getattr(timeline, "steps", None) is not None else 0
    idle = pricing.window_idle_ns(timeline)
    alone = cp.saving_in_window(block, first.replayed_change, steps, idle) if held and steps else None
    if alone is None:
        return
    for finding in held[:AFTER_FIRST_AT_MOST]:
        # (each over the window, within its GPU idle and the GPU time taken away: a user read found both changes' sum
        # of blind74_masksync_base1 past the GPU work its steps kept, the difference holding)
        both = cp.saving_in_window(block, first.replayed_change.and_(finding.replayed_change), steps, idle)
        more = both - alone if both is not None else 0.0
        more = min(more, _own_estimate(finding))   # never more than the time its change takes away (its check's own)
        # (only where the first's change frees it: where that change takes some of its work away with it, it is
        # worth less after, not more: blind58_multitask's repeated backward held some of its normalization chains)
        if more < AFTER_FIRST_SHARE * span or more <= AFTER_FIRST_MORE * finding.estimated_savings_ns:
            continue
        # (the first finding's check named in the entry: the comment's info line says whose change it follows)
        finding.evidence = {**finding.evidence, "savings_after_first_ns": {**evidence(more, unit="ns"),
                                                                           "after": first.check}}
        # (the difference of two replays, not their figures: each differs from the table's capped savings, and three
        # figures for one change read as three answers, a user read)
        finding.notes.append(f"after {first.check}: with that finding's change made too, this change is then worth "
                             f"{duration_text(more / steps)} a step ({duration_text(more)} over the window): the replay "
                             "of the steps with both changes, against the replay with that one alone; the steps as "
                             "measured hold it back")


# A title's own figure and the finding's savings this far apart (relative) read as two answers to one question
# (own67_fixed1's pageable-memcpy: "1.12 ms less copy time in each 9.00 ms step" beside 3.06 ms a step saved, the
# uploads' waits gone too): the title says the savings as well
TITLE_SAYS_SAVINGS = 0.25
# A wider cause cut to what it claims whose title states its replayed saving a step ("a step saves 44.9 ms"): a cut
# this far or more is two figures for one saving (blind79_offload's host-data: 44.9 ms in the title, 38.3 ms in the
# savings, slow-steps claiming the rest; then 49.1 ms against 46.9: a title's three digits show 2%), so the title
# says the savings too
CAPPED_TITLE_SAYS_SAVINGS = 0.02


def _own_estimate(finding: Finding) -> float:
    """The check's own estimate of a finding priced by its replay (evidence `check_savings_ns`); 0 where none."""
    value = finding.evidence.get("check_savings_ns")
    return float(value.get("value") or 0.0) if isinstance(value, dict) else 0.0


def _title_says_savings(finding: Finding, timeline, tolerance: float = TITLE_SAYS_SAVINGS) -> None:
    """Ends the title with the finding's savings where they stray from the check's own estimate, which its title
    states, past `tolerance`: the savings note says where the difference lies."""
    own = _own_estimate(finding)
    final = finding.estimated_savings_ns
    if not own or not final or abs(final - own) <= tolerance * max(final, own):
        return
    steps = timeline.steps.count if getattr(timeline, "steps", None) is not None and timeline.steps.count else None
    figure = f"{duration_text(final / steps)} a step" if steps else duration_text(final)
    finding.title += (f"; saves {figure} in all (its savings note says how)" if final > own else
                      f"; saves only {figure} (its savings note says why)")


# A part's time that wider causes hold, from which its own finding says who counts what: 1% of the window (less moves
# no figure a reader compares)
SHARED_PART_SHARE = 0.01


def _shared_part_note(whole: float, limit: float, part: str, span: float, claims: dict,
                      findings: list[Finding], stepped: bool = True) -> str | None:
    """Where wider causes hold SHARED_PART_SHARE of the window or more of a part, or a part and what is left of it
    print as different shares: the part's share as the budget has it, what each cause's finding counts of it, what
    no finding prices (a cause under its check's threshold), and what this finding counts, so that its title squares
    with the header's budget line (blind61_anomaly: 62% idle on launches in the header, 44% in launch-overhead's
    title, host-sync counting the rest; mfu_2gpu_before: 5% and 4%, 30 us apart across the rounding edge). None
    otherwise. `stepped`: the header's budget is a median step's (else the window's)."""
    if not span or limit >= whole or (whole - limit < SHARED_PART_SHARE * span
                                      and f"{whole / span:.0%}" == f"{limit / span:.0%}"):
        return None
    speaking = {f.check for f in findings}
    held = sorted(((cause, min(parts[part], whole)) for cause, parts in claims.items() if parts.get(part, 0) > 0),
                  key=lambda held: -held[1])
    counted = [f"{cause}'s finding counts {ns / span:.0%}" if ns >= 0.005 * span else   # ("counts 0%": its time)
               f"{cause}'s finding counts {duration_text(ns)}" for cause, ns in held if cause in speaking]
    unpriced = [f"{cause} ({duration_text(ns)})" for cause, ns in held if cause not in speaking]
    thresholds = "its check's threshold" if len(unpriced) == 1 else "their checks' thresholds"
    header = " (the header's line is a median step's budget)" if stepped else ""
    return (f"the budget's {part} is {whole / span:.0%} of the window{header}: "
            + "".join(f"{text}, " for text in counted)
            + (f"{', '.join(unpriced)} under {thresholds}, which no finding prices, " if unpriced else "")
            + f"and this finding the {limit / span:.0%} left, so no time is counted twice")


def _wider_causes_note(whole: float, limit: float, part: str, claims: dict, findings: list[Finding]) -> str:
    """Which wider causes hold a part's time beyond what a finding counts: those with a finding of their own count it;
    a class under its check's threshold (one cudaHostAlloc a run: own67_fixed1) is priced by no finding, and the
    note said both were counted."""
    speaking = {f.check for f in findings}
    held = [(cause, parts[part]) for cause, parts in claims.items() if parts.get(part)]
    counted = ", ".join(f"{cause} ({duration_text(ns)})" for cause, ns in held if cause in speaking)
    unpriced = ", ".join(f"{cause} ({duration_text(ns)})" for cause, ns in held if cause not in speaking)
    said = (f"that their own findings count ({counted})" if counted else "") + \
        ("; and " if counted and unpriced else "") + \
        (f"that no finding prices, under their checks' thresholds ({unpriced})" if unpriced else "")
    return (f"of the {duration_text(whole)} of {part} time, {duration_text(whole - limit)} lie in wider causes {said}; "
            f"this one counts the {duration_text(limit)} left")


def _beside_part(finding: Finding, claims: dict) -> dict[str, float]:
    """What a part's own finding claims of the other parts (checks/program/_claims: launch-overhead's change, where
    the replay of the steps saves more than its part), by part."""
    return {part: ns for part, ns in claims.get(finding.check, {}).items() if ns > 0 and part != finding.budget_part}


def _claimed_limit(finding: Finding, span: float, claims: dict) -> float:
    """What a wider cause's finding may save: the budget time its cause claims (checks/program/_claims), over
    every part it spans; where that is more than one part, the parts go into its evidence (`claimed_parts`), so a
    reader sees where a saving above its `budget_part` comes from. The window where nothing is claimed."""
    parts = {part: ns for part, ns in claims.get(finding.check, {}).items() if ns > 0}
    if not parts:
        return span
    if len(parts) > 1:
        finding.evidence = {**finding.evidence, "claimed_parts": [
            {"part": part, "ns": round(ns)} for part, ns in sorted(parts.items(), key=lambda kv: -kv[1])]}
    return min(span, sum(parts.values()))


# the host's share of a median step's critical path from which its (a trace's: profiled) times bear on a replay
TRACED_HOST_SHARE = 0.05


def _host_matters(timeline: Timeline, priced, own: float) -> bool:
    """Whether the host's times shape this replay: the host holds part of the median step's critical path, or the
    changed steps save less than the check's own estimate (the host bounds them once the GPU is faster)."""
    host = sum(p["share"] for p in (timeline.critical_path or ()) if p["part"].startswith("host:"))
    return host >= TRACED_HOST_SHARE or priced.savings_ns < (1.0 - pricing.DISAGREE) * own


# The replay and the check's own estimate this far apart (relative) are both visible in a report's three digits (a
# title that states the check's 422.0 ms beside a saving of 389 ms: alloc_churn): the finding says which it is
SAYS_WHICH = 0.02


def _price_by_replay(timeline: Timeline, check, finding: Finding):
    """The finding's savings: what the replay of the steps saves with the change its check declares
    (its `change`, normalize.pricing), capped by the time the change takes away; the check's own estimate where
    no change maps or the replay is not trusted. Where the two disagree, returns the note that says which
    figure the finding's savings are (called with them once the budget's caps have set them)."""
    declared = finding.change or check.change
    if not declared or len(timeline.devices) > 1:   # the replay is one process's steps: one GPU's
        return None
    own = finding.estimated_savings_ns
    block = getattr(timeline, "pricing_block", None)
    rate = None
    if declared.get("pinned") and block is not None:
        from nsanalyze.checks.program._copies import pinned_rates

        rate = pinned_rates(timeline, block.graph)
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
    finding.replayed_change = priced.replayed_change
    finding.dropped_host_ns = priced.dropped_host_ns
    finding.evidence = {**finding.evidence, "replayed_savings_ns": evidence(priced.replayed_ns, unit="ns"),
                        "check_savings_ns": evidence(own, unit="ns")}
    if priced.note:
        finding.notes.append(f"replay: {priced.note}")
    launches = getattr(timeline, "launches", None)
    traced = pricing.traced_host_note(launches.profiler if launches is not None else None)
    if traced and _host_matters(timeline, priced, own) and not any("PyTorch profiler" in n for n in finding.notes):
        finding.notes.append(f"replay: {traced}")
    capped = priced.cap_ns is not None and priced.replayed_ns > priced.cap_ns
    # a replay cut to the time its change takes away is said where the cut shows, even where the figure left is the
    # check's own (own67_churn1's host-data: 42.88 ms a step replayed, 38.25 kept, no note said which, a user read)
    cut = capped and priced.replayed_ns - priced.cap_ns > SAYS_WHICH * priced.replayed_ns
    if abs(priced.savings_ns - own) <= SAYS_WHICH * max(own, priced.savings_ns) and not cut:
        return None
    replay = (f"the replay of the steps with {priced.change} ({per_step(priced.replayed_ns if capped else priced.savings_ns)}"
              + (f", capped by the {per_step(priced.cap_ns)} the change takes away" if capped else "") + ")")
    why_less = ("; the kernels are not all on the step's critical path: faster, they save only down to what "
                "the host and the other work take" if (declared.get("speedup") or declared.get("remove_kernels"))
                and priced.savings_ns < own else "")
    if declared.get("remove") and priced.savings_ns < 0.5 * own:   # the calls go, the host's work beside them stays
        why_less = ("; the replay keeps the host's own work between those calls: where that work comes with the "
                    "calls' cause (a library's autotuning or timing that synchronizes), removing the cause saves up "
                    "to the check's own estimate")

    dropped = priced.dropped_host_ns
    host_part = (f": the change also takes the host's launch paths of those kernels away ({per_step(dropped)}), which "
                 "the check's own estimate, their GPU time, leaves out" if dropped else "")

    def note(final_ns: float, capped_ns: float, in_graph: bool = False) -> str:
        """Names the figure the savings are: the caps after the replay can only lower it. `capped_ns`: the figure
        the budget's caps left, before findings drawing on the same part shared it (_combine_overlapping);
        `in_graph`: its launch paths' share left to a finding whose change graphs the step (_graphed_beside)."""
        def near(a: float, b: float) -> bool:
            return abs(a - b) <= 0.01 * max(a, b)
        if near(final_ns, priced.savings_ns) and near(own, priced.savings_ns):
            return f"savings: {replay}, as the check's own estimate"
        if near(final_ns, priced.savings_ns):
            if per_step(final_ns) != per_step(priced.savings_ns):   # lowered by findings drawing on the same part
                return (f"savings: {per_step(final_ns)}, what the findings it overlaps leave of {replay}, not the "
                        f"check's own estimate ({per_step(own)}){why_less}")
            return f"savings: {replay}, not the check's own estimate ({per_step(own)}){why_less}"
        # what lowered it last: the part's time left after wider causes, or its share of a part that findings it
        # overlaps draw on too (blind58_multitask said "what its budget part leaves it" of a figure the overlap's
        # scaling set, with compute 97% of the step)
        leaves = ("what its budget part leaves it" if near(final_ns, capped_ns) else
                  f"what the findings counted before it leave of the {finding.budget_part} time (the overlap's note)")
        if in_graph and near(final_ns, own):
            return (f"savings: the check's own estimate ({per_step(own)}), the kernels' GPU time; {replay} is more: "
                    f"it also takes their launch paths away ({per_step(dropped)} of host time), which the graph of the "
                    "whole step that another finding stands for takes too (counted there, not twice)")
        if near(final_ns, own):
            return (f"savings: the check's own estimate ({per_step(own)}), {leaves}; {replay} "
                    "is more: it also takes away time beside this cause, which other findings count")
        if own > final_ns:
            return (f"savings: {per_step(final_ns)}, {leaves}; {replay} and the check's own "
                    f"estimate ({per_step(own)}) are both more")
        return (f"savings: {per_step(final_ns)}, {leaves}; {replay} is more, the check's own "
                f"estimate ({per_step(own)}) less{host_part}")
    return note




def _graphed_beside(finding: Finding, findings: list[Finding]) -> bool:
    """Whether another program finding of the list stands for the step as one graph launch (every launch path gone)."""
    return any(f is not finding and f.kernel_id is None and (_change_of(f) or {}).get("graph") for f in findings)


def _change_of(finding: Finding) -> dict | None:
    from nsanalyze.checks import check_by_id

    return finding.change or check_by_id(finding.check).change


def within_wider_changes(findings: list[Finding], timeline) -> None:
    """A finding whose change is part of another's (pricing.contains: a role's launches fused, within each step
    as one graph launch) saves part of the same time: both speak, each with what its own change saves alone,
    ranked by that saving like every finding; the part is counted within the whole (evidence `within`), never
    added to it, so the budget's overlaps and the window's fit leave it out. Each says so, with both figures:
    the part is the smaller change (one flag against a graph capture), which a user may well make first."""
    steps = timeline.steps.count if getattr(timeline, "steps", None) is not None and timeline.steps.count else None
    per_step = (lambda ns: f"{ns / steps / 1e6:.2f} ms a step") if steps else (lambda ns: f"{ns / 1e6:.2f} ms")
    told: dict[int, float] = {}   # per outer finding, the savings of the parts its title has named so far
    for inner in findings:
        outer = next((f for f in findings if f is not inner and pricing.contains(_change_of(f), _change_of(inner))),
                     None)
        if outer is None:
            continue
        wider = _change_of(outer) or {}
        removed = "these waits" if (_change_of(inner) or {}).get("remove") else "these copies"   # (syncs, or pinning)
        _count_within(inner, outer, f"counted within {outer.check}: its change ("
                                    + (f"the data kept on the GPU) removes {removed}" if wider.get("data_on_gpu") else
                                       "each graph captured once) keeps the graph's memory pool: these allocator "
                                       "calls go" if wider.get("allocator_within") else
                                       "each step one graph launch) removes these launches")
                                    + f" too; fixed together the two save what {outer.check} says "
                                    f"({per_step(outer.estimated_savings_ns)}), not the sum. Alone, this change saves "
                                    f"{per_step(inner.estimated_savings_ns)}")
        alike = inner.estimated_savings_ns >= 0.99 * outer.estimated_savings_ns   # blind58's LSTM loop: all of it
        # the smaller change that saves as much ranks first where its finding names that change from the kernels (a
        # user read of blind58_lstm: the graph capture led, the loop's own fix, nn.LSTM over the sequence, came second
        # at the same saving); a loop over layers of one width (opt_fused's MLP) is told to graph them: no smaller
        inner.leads = alike and inner.names_its_change
        before = told.get(id(outer), 0.0)
        told[id(outer)] = before + inner.estimated_savings_ns
        # parts of one change that add up past it share its time (opt_loop_annot: the layers' loop 20.01 and the
        # optimizer's 19.52 ms a step of launch-overhead's 36.9, each alone, read as 39.5 ms "of it", a user read)
        shared = before and told[id(outer)] > outer.estimated_savings_ns * 1.001
        outer.title += (f"; {inner.check}'s smaller change saves as much, {per_step(inner.estimated_savings_ns)}" if alike
                        else f"; {inner.check}'s smaller change saves {per_step(inner.estimated_savings_ns)} alone (the "
                        "changes share this wait: together no more than this finding's)" if shared
                        else f"; {inner.check}'s smaller change saves {per_step(inner.estimated_savings_ns)} of it")
        outer.notes.append(f"{inner.check}'s change is part of this one: alone it saves "
                           f"{per_step(inner.estimated_savings_ns)} of these {per_step(outer.estimated_savings_ns)} "
                           "(counted here, not twice)")


def within_program_causes(findings: list[Finding], kernel_keys: dict) -> None:
    """A kernel finding whose cause a program finding states over the kernels of its role (Check.part_of: the
    FP32 GEMMs of a joined nsys export, priced by low-tensor-activity over the window) is part of that saving:
    both speak, the kernel's with its own figures, counted within the program's (evidence `within`), never added."""
    from nsanalyze.checks import check_by_id
    from nsanalyze.normalize.work import role_of

    present = {f.check: f for f in findings if f.kernel_id is None and f.estimated_savings_ns > 0}
    replacing = {role: f for f in present.values() for role in check_by_id(f.check).replaces_roles}
    for finding in findings:
        if finding.kernel_id is None or "within" in finding.evidence:
            continue
        demangled = (kernel_keys.get(finding.kernel_id) or (None, None))[1]   # (profile, demangled or name, ...)
        role = role_of(finding.kernel_name, demangled)
        if role in replacing:
            _replaced_by(finding, replacing[role])
            continue
        part_of = check_by_id(finding.check).part_of
        outer = present.get(part_of[0]) if part_of else None
        if outer is None or role != part_of[1]:
            continue
        _count_within(finding, outer, f"counted within {outer.check}: the program finding prices the same change "
                                      "over all such kernels of the window; this kernel's saving is part of it, not "
                                      "added to it")


def _replaced_by(finding: Finding, outer: Finding) -> None:
    """A kernel finding on a kernel that a program finding's change replaces (Check.replaces_roles): counted within
    it, and at info: tuning a kernel the change removes is work lost once the change is made."""
    _count_within(finding, outer, f"counted within {outer.check}: its change replaces this kernel (its work done by "
                                  "the kernels the change brings in); this kernel's saving is part of that one's, not "
                                  "added to it")
    finding.evidence = {**finding.evidence, "replaced_by": outer.check}
    if finding.severity != "info":
        finding.notes.append(f"capped at info: {outer.check}'s change replaces this kernel; make that change first")
    finding.severity = "info"


def _count_within(inner: Finding, outer: Finding, note: str) -> None:
    """The finding counted within another's saving: evidence `within`, the title and a note say so."""
    inner.evidence = {**inner.evidence, "within": outer.check}
    inner.title += f"; part of {outer.check}'s saving, not added to it"
    inner.notes.append(note)


def _within(finding: Finding, findings: list[Finding]) -> bool:
    """Counted within another finding of the list (within_wider_changes): its savings are part of that one's."""
    outer = finding.evidence.get("within")
    return isinstance(outer, str) and any(f.check == outer for f in findings if f is not finding)


# The work roles a change's special role stands within (critical_path.role_mask): narrow GEMMs are tensor-core
# GEMMs, an embedding gradient's passes fills and adds, device copies copy kernels; the others (recompute, a repeated
# backward, loops, "*") may hold kernels of any role
WITHIN_ROLES = {cp.NARROW_GEMM: {"matmul_tensor"}, cp.TF32: {"matmul_tensor"}, cp.EMBEDDING_GRAD: {"copy", "elementwise"},
                cp.DEVICE_COPY: {"copy"}}


def _kernel_roles(finding: Finding) -> set[str] | None:
    """The work roles of the kernels a finding's change touches (sped up, removed, fused), or None where it may touch
    any (a special role across roles, host calls, copies, a graph): two findings on other roles' kernels cannot
    save the same time."""
    from nsanalyze.normalize.work import ROLES

    change = _change_of(finding) or {}
    named = [r for key in ("speedup", "remove_kernels", "fuse") for r in change.get(key, ())]
    if not named or set(change) - {"speedup", "remove_kernels", "fuse"}:
        return None
    roles: set[str] = set()
    for role in named:
        if role in ROLES:
            roles.add(role)
        elif role in WITHIN_ROLES:
            roles |= WITHIN_ROLES[role]
        else:
            return None
    return roles


def _disjoint(group: list[Finding]) -> bool:
    """Whether every finding of the group changes kernels of its own roles, none of another's."""
    roles = [_kernel_roles(f) for f in group]
    return all(r is not None for r in roles) and \
        all(not (a & b) for i, a in enumerate(roles) for b in roles[i + 1:])


def _replayed_together(group: list[Finding], timeline) -> float | None:
    """What the replay of the steps saves over the window with every finding's change of the group made at once
    (each priced by its replay); None where one was not (a user read of itemlog_every50: "together they save 766 ms,
    the sum" of two replays, each with the other's kernels as measured)."""
    block = getattr(timeline, "pricing_block", None)
    steps = timeline.steps.count if getattr(timeline, "steps", None) is not None else 0
    if block is None or not block.trusted or not steps or any(f.replayed_change is None for f in group):
        return None
    change = group[0].replayed_change
    for finding in group[1:]:
        change = change.and_(finding.replayed_change)
    return cp.saving_in_window(block, change, steps, pricing.window_idle_ns(timeline))


def _combine_overlapping(findings: list[Finding], timeline: Timeline, claims: dict | None = None) -> None:
    """Findings that draw on one budget part share it: together 1 - prod(1 - s_i) of the part, counted in the order
    of their savings, each of what the ones before leave.
    A finding counted after the others (after_others: transfer-bound after pageable-memcpy) already holds
    only what they leave of the part: it is named beside them and not scaled again."""
    claims = claims or {}
    by_part: dict[tuple, list[Finding]] = {}
    for finding in findings:   # a wider cause's claim is already taken out of the others' parts
        if _within(finding, findings):
            continue   # part of another finding's saving: not a second draw on the part
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
        # of a finding's savings, what it claims of other parts (_beside_part) is its own: not shared here
        beside = {id(f): min(f.estimated_savings_ns, sum(_beside_part(f, claims).values())) if device is None else 0.0
                  for f in group}
        remaining = 1.0
        for finding in group:
            remaining *= 1.0 - min(1.0, (finding.estimated_savings_ns - beside[id(finding)]) / part_ns)
        combined = (1.0 - remaining) * part_ns
        total = sum(f.estimated_savings_ns - beside[id(f)] for f in group)
        if total <= part_ns and _disjoint(group):
            # changes of other roles' kernels take other time: they add up, within the part (gpt_fp32's TF32 GEMMs
            # and its attention's softmax: the product above halved the attention's saving, as if the GEMMs'
            # change took time from its kernels)
            joint = _replayed_together(group, timeline)
            together = (f"together they save {duration_text(total)}, the sum" if joint is None
                        or joint >= (1.0 - pricing.DISAGREE) * total else
                        f"the replay of the steps with their changes together saves {duration_text(joint)}, less "
                        f"than the sum of their savings ({duration_text(total)}): made together, each leaves the "
                        "other less to save (the host or other work then holds the step)")
            for finding in group:
                others = ", ".join(f.check for f in group if f is not finding)
                finding.notes.append(f"draws on the same {part} time as {others}, from kernels of other roles: "
                                     f"{together}")
            continue
        # counted in the order of their savings, each of what the ones before leave of the part: the first keeps its
        # own figure (the change a user makes first saves what it says), the next its share of the rest, and together
        # they save 1 - prod(1 - s_i) of it as before. Scaling each alike lowered the first: blind58_multitask's
        # repeated-backward read 60.9 ms a step of its replay's 68.0 where the fix measured 74.6
        left = 1.0
        earlier: list[str] = []
        for finding in sorted(group, key=lambda f: -(f.estimated_savings_ns - beside[id(f)])):
            others = ", ".join(f.check for f in group if f is not finding)
            note = f"overlaps with {others} (the same {part} time): together they save at most {duration_text(combined)}"
            mine = beside[id(finding)]
            own = finding.estimated_savings_ns
            share = min(1.0, (own - mine) / part_ns)
            if total > combined and earlier:
                finding.estimated_savings_ns = mine + (own - mine) * left
                # the figure the finding shows is what the findings before it leave (its evidence keeps its own)
                note += (f"; counted after {', '.join(earlier)}, of the {part} time they leave: this one from "
                         f"{duration_text(own)} to {duration_text(finding.estimated_savings_ns)}")
            elif total > combined:
                note += ", counted first, whole: the others count what it leaves"
            left *= 1.0 - share
            earlier.append(finding.check)
            finding.notes.append(note)




def one_per_check(per_rank: list[list[Finding]], rank_devices: list[list[dict]]) -> list[Finding]:
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




def after_the_straggler(findings: list[Finding], imbalance: Finding | None, devices: list[dict],
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
        window_ns = _window_of(finding)   # savings and share scale alike: the window stays
        finding.estimated_savings_ns *= left
        finding.estimated_speedup *= left
        finding.severity = program_severity(finding, window_ns)




def fit_the_window(findings: list[Finding], window_ns: float) -> None:
    """Causes on different GPUs or parts can describe one lost stretch of wall time (a straggler's host
    work and the others' wait for it): all program savings together never exceed the window."""
    total = sum(f.estimated_savings_ns for f in findings if not _within(f, findings))   # a part counted once
    if window_ns and total > window_ns:
        for finding in findings:
            finding.estimated_savings_ns *= window_ns / total
            finding.estimated_speedup = finding.estimated_savings_ns / window_ns
            finding.severity = program_severity(finding, window_ns)
            finding.notes.append(f"scaled by {window_ns / total:.2f}: the program findings overlap in wall time "
                                 "and together save at most the window")




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


# The throughput units a kernel's time can be bound by (normalized concepts, % of their peak), and which of
# them each check's fix takes work off. A fix can at most bring the kernel down to its busiest unit that
# keeps its work: that unit then runs at what code sustains on it (attainable_pct). Checks not listed (latency: occupancy, ILP, grid size, tail,
# block size; the clock) relieve none: the busiest unit of all bounds them.
UNITS = {
    "issue": ("issue_active_pct",), "dram": ("dram_throughput_pct",), "l2": ("l2_throughput_pct",),
    "l1": ("l1_throughput_pct", "lsu_pipe_pct"), "fma": ("fma_pipe_pct", "fp16_pipe_pct"),
    "alu": ("alu_pipe_pct",), "xu": ("xu_pipe_pct",), "fp64": ("fp64_pipe_pct",), "adu": ("adu_pipe_pct",),
    "tensor": ("tensor_pipe_pct",),
}
UNIT_NAMES = {"issue": "instruction issue", "dram": "DRAM", "l2": "L2", "l1": "L1/shared memory",
              "fma": "FMA pipe", "alu": "ALU pipe", "xu": "XU pipe", "fp64": "FP64 pipe",
              "adu": "ADU pipe (indexed constant loads, branch targets)", "tensor": "tensor pipe"}
RELIEVED_UNITS = {
    "bank-conflicts": ("l1",),                                  # fewer wavefronts; the same instructions issue
    "uncoalesced-global": ("l1", "l2", "dram"),                 # L2, DRAM only where their bytes exceed the need
    "local-memory-spill": ("l1", "l2", "dram", "issue"),
    "atomic-contention": ("l1", "l2"),
    "missing-tensor-cores": ("fma", "issue", "l1", "l2", "alu"),   # another kernel, tiled for the tensor cores
    "costly-fp-math": ("xu", "fp64", "fma", "issue", "alu"),
    "warp-divergence": ("issue", "fma", "alu", "xu", "fp64", "adu"),
    "block-size": ("issue", "fma", "alu", "xu", "fp64", "adu", "l1"),  # full warps: a 32nd of the instructions
    "l2-reuse": ("dram",),                                      # the same L2 requests, fewer of them missing
}
UNBOUNDED = frozenset({"clock-throttling"})  # a faster clock speeds every SM unit alike
# Measured over the cycles the SMs were active (ncu's pct_of_peak_sustained_active): over the kernel's elapsed
# time they are that times the SMs' active share; a grid that leaves SMs idle is not bound by them.
PER_ACTIVE_CYCLE = frozenset({"issue_active_pct", "l1_throughput_pct", "lsu_pipe_pct", "fma_pipe_pct", "fp16_pipe_pct",
                              "alu_pipe_pct", "xu_pipe_pct", "fp64_pipe_pct", "adu_pipe_pct"})


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


def _active_share(record: dict) -> float | None:
    active, elapsed = _number(record.get("sm_active_cycles_avg")), _number(record.get("sm_cycles_elapsed"))
    return clamp01(active / elapsed) if active is not None and elapsed else None


def _at_minimum(record: dict, concept: str) -> bool:
    """The unit (DRAM: dram_bytes, L2: l2_bytes) moves no more than the bytes the global accesses need (the ideal
    sectors'), or the need is unknown: coalescing then takes no bytes off it (L1 hits absorb the excess sectors)."""
    share = share_of_need(record, concept)
    return share is None or share <= AT_NEED_SLACK


def attainable_pct(unit: str) -> float:
    """What code sustains on a unit, in % of its peak ([savings] <unit>_attainable_pct of thresholds.toml; 100
    where none is given): a fix brings its next limiter up to this, not to the peak."""
    global _ATTAINABLE
    if _ATTAINABLE is None:
        settings = global_settings()["savings"]
        _ATTAINABLE = {u: float(settings.get(f"{u}_attainable_pct", 100.0)) for u in UNITS}
    return _ATTAINABLE.get(unit, 100.0)


_ATTAINABLE: dict | None = None


def relieved_units(check: str, record: dict) -> set[str]:
    """The units a check's fix takes work off on this launch (RELIEVED_UNITS; coalescing relieves L2 and DRAM only
    where their bytes exceed the need)."""
    relieved = set(RELIEVED_UNITS.get(check, ()))
    if check == "uncoalesced-global":
        relieved -= {unit for unit, concept in (("dram", "dram_bytes"), ("l2", "l2_bytes")) if _at_minimum(record, concept)}
    return relieved


def next_limiter(check: str, record: dict) -> tuple[str, float] | None:
    """(unit, % busy) of the unit the check's fix leaves its work on that is nearest what code sustains on it
    (attainable_pct), or None when none is measured."""
    if check in UNBOUNDED:
        return None
    return busiest_unit(relieved_units(check, record), record)


def busiest_unit(relieved: set[str], record: dict) -> tuple[str, float] | None:
    """(unit, % busy) of the units outside `relieved` nearest what code sustains on them, or None."""
    busy, active = [], _active_share(record)
    for unit, concepts in UNITS.items():
        if unit in relieved:
            continue
        values = [(_number(record.get(c)), c) for c in concepts]
        values = [v if c not in PER_ACTIVE_CYCLE else v * active for v, c in values
                  if v is not None and (c not in PER_ACTIVE_CYCLE or active is not None)]
        if values:
            busy.append((unit, min(100.0, max(values))))
    return max(busy, key=lambda pair: pair[1] / attainable_pct(pair[0])) if busy else None


def bound_by_next_limiter(findings: list[Finding], records: dict) -> None:
    """A fix saves at most the time down to the next limiter: 1 - its busy share over the share code sustains on
    it (a kernel whose DRAM stays at 80% can lose at most 6% however uncoalesced its loads: DRAM sustains 85%)."""
    for finding in findings:
        record = records.get(finding.kernel_id)
        limiter = next_limiter(finding.check, record) if record else None
        if limiter is None:
            continue
        unit, pct = limiter
        sustained = attainable_pct(unit)
        cap = clamp01(1.0 - pct / sustained)
        if finding.estimated_speedup > cap:
            reach = f", and code sustains about {sustained:.0f}% of its peak" if sustained < 100 else ""
            # the unit's work stays: it is busy pct% of today's time, more of a shorter one (a user read took "stays
            # 44.6% busy after the fix" for the share after it, where the cap is the time at which it reaches 85%)
            finding.notes.append(f"bounded by the next limiter: the fix leaves the {UNIT_NAMES[unit]}'s work as it is "
                                 f"({pct:.1f}% busy now){reach}, so at most {cap:.0%} of the kernel's time can go, "
                                 f"where the {UNIT_NAMES[unit]} would be {min(sustained, 100):.0f}% busy (estimated "
                                 f"{finding.estimated_speedup:.0%})")
            finding.evidence = {**finding.evidence, "next_limiter_pct": {"value": round(pct, 2), "unit": "%",
                                                                          "limiter": unit,
                                                                          "attainable_pct": sustained}}
            finding.estimated_speedup = cap
    _bound_together(findings, records)


def _bound_together(findings: list[Finding], records: dict) -> None:
    """Fixed together, a launch's findings save at most the time down to the unit none of their fixes relieves
    (FaSTED's 16B_Align: coalescing and bank conflicts, each bounded at 18% by a DRAM 70% busy that neither fix
    relieves, promised 32% together: 1 - 0.82^2). Kept on each finding for combine_per_kernel."""
    by_launch: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.kernel_id is not None:
            by_launch.setdefault(finding.kernel_id, []).append(finding)
    for launch, group in by_launch.items():
        record = records.get(launch)
        if len(group) < 2 or not record or any(f.check in UNBOUNDED for f in group):
            continue
        limiter = busiest_unit(set().union(*(relieved_units(f.check, record) for f in group)), record)
        if limiter is None:
            continue
        unit, pct = limiter
        for finding in group:
            finding.joint_cap = (clamp01(1.0 - pct / attainable_pct(unit)), unit, pct)


def _stem_shared(a: str, b: str) -> bool:
    """Two names of one kernel's variants: one is the other with a word added (`transposeSmem`,
    `transposeSmemPad`), or they share most of their characters from the start or the end (`aos_update`,
    `soa_update`). Names alike but for their numbers are generated siblings (`compute_x_279_gpu`,
    `compute_x_309_gpu`: an OpenACC compiler's loops by line), not variants of one kernel."""
    a, b = a.lower(), b.lower()
    if re.sub(r"\d+", "#", a) == re.sub(r"\d+", "#", b):
        return False
    if a in b or b in a:
        return True
    prefix = len(os.path.commonprefix([a, b]))
    suffix = len(os.path.commonprefix([a[::-1], b[::-1]]))
    return max(prefix, suffix) >= 0.6 * min(len(a), len(b))


TWIN_INSTRUCTIONS = 0.25  # variants that differ only in a fix execute about the same instructions (padding: the
# same; AoS to SoA in the dev suite: 10.5 against 13.1 million, the extra pointer arithmetic)


def measured_twins(findings: list[Finding], records: dict) -> None:
    """Where the report holds a variant of the kernel without the problem (same launch shape, about the same
    instructions, a name of the same stem, and the check silent on it), the difference in their measured
    durations is the estimate: that is what the fix bought here."""
    fired = {(f.check, f.kernel_id) for f in findings}
    by_shape: dict[tuple, dict] = {}  # launches of one shape: the only candidates (thousands of launches, few shapes)
    for launch_id, record in records.items():
        by_shape.setdefault((record.get("grid_size"), record.get("block_size")), {})[launch_id] = record
    rules = _same_work_rules()
    for finding in findings:
        record = records.get(finding.kernel_id)
        if not record or not record.get("duration_ns"):
            continue
        if finding.check in rules:
            twin, how = _work_twin(rules[finding.check], finding.check, record, records, fired)
        else:
            twin = _twin(finding.check, record, by_shape.get((record.get("grid_size"), record.get("block_size")), {}),
                         fired)
            how = "launch shape and instructions alike"
        if twin is None:
            continue
        measured = clamp01(1.0 - twin["duration_ns"] / record["duration_ns"])
        # the measurement replaces the model, and the model's bound with it
        finding.notes = [n for n in finding.notes if not n.startswith("bounded by the next limiter")]
        finding.evidence = {k: v for k, v in finding.evidence.items() if k != "next_limiter_pct"}
        finding.notes.append(f"measured in this report: {twin['name']}, the same kernel without this problem ({how}), "
                             f"runs in {twin['duration_ns'] / 1e3:.1f} us against "
                             f"{record['duration_ns'] / 1e3:.1f} us: {measured:.1%} of the time, the estimate "
                             f"(the model said {finding.estimated_speedup:.0%})")
        finding.evidence = {**finding.evidence, "twin_duration_ns": {"value": round(twin["duration_ns"], 1),
                                                                     "unit": "ns", "kernel": twin["name"]}}
        finding.estimated_speedup = measured


def _same_work_rules() -> dict:
    """Checks whose fix changes the instructions themselves (the product on tensor cores, a multiplication for a
    division) say which variant does the same work: `same_work(kernel, other)` in the check's module."""
    from nsanalyze.checks.kernel import costly_fp_math, missing_tensor_cores

    return {module.ID: module.same_work for module in (costly_fp_math, missing_tensor_cores)}


def _work_twin(same_work, check: str, record: dict, records: dict, fired: set) -> tuple[dict | None, str]:
    """The variant the check's own rule finds doing the same work, and the rule's words for it; of several, the
    slowest, which promises least (fp_mix's fp32_divide: fp32_fused, 274 us, before fp32_recip, 268 us)."""
    from nsanalyze.checks.base import KernelView

    mine = KernelView(record)
    candidates = []
    for other_id, other in records.items():
        if other is record or (check, other_id) in fired or other.get("name") == record.get("name"):
            continue
        if not other.get("duration_ns"):
            continue
        how = same_work(mine, KernelView(other))
        if how:
            candidates.append((-other["duration_ns"], other_id, other, how))
    if not candidates:
        return None, ""
    best = min(candidates, key=lambda c: c[:2])
    return best[2], best[3]


def _twin(check: str, record: dict, records: dict, fired: set) -> dict | None:
    """The closest variant: a name that holds the other's whole (`setRowReadCol`, `setRowReadColPad`) before
    one that only shares a stem (`setRowReadRow`), then the nearest instruction count."""
    shape = ("grid_size", "block_size")
    instructions = record.get("instructions_executed")
    name = (record.get("name") or "").lower()
    candidates = []
    for other_id, other in records.items():
        if other is record or (check, other_id) in fired or other.get("name") == record.get("name"):
            continue
        if any(other.get(c) != record.get(c) or other.get(c) is None for c in shape):
            continue
        if not _stem_shared(other.get("name") or "", record.get("name") or ""):
            continue
        theirs = other.get("instructions_executed")
        if not instructions or not theirs or abs(theirs - instructions) > TWIN_INSTRUCTIONS * instructions:
            continue
        if other.get("duration_ns"):
            other_name = (other.get("name") or "").lower()
            contained = name in other_name or other_name in name
            candidates.append((not contained, abs(theirs - instructions), other_id, other))
    return min(candidates, key=lambda c: c[:3])[3] if candidates else None


# A fenced Python example whose code calls PyTorch (`torch.`, `import torch`)
_PYTORCH_EXAMPLE = re.compile(r"\n*```python\n(?:(?!```).)*\btorch\b(?:(?!```).)*```", re.S)


def examples_for_the_framework(findings: list[Finding], timeline) -> None:
    """Where the program's kernels are another Python framework's (CuPy, cuDF, Numba) and none PyTorch's
    (normalize.frameworks), a program finding's PyTorch example is left out, and the advice says why: on
    nvtx-examples' CuPy and cuDF programs, launch-overhead showed `torch.cuda.CUDAGraph` and fp64-compute
    `MLP().double()`. The advice's lines, which name each framework's way, stay."""
    others = other_than_pytorch(of_kernel_table(getattr(timeline, "kernel_table", None)))
    if not others:
        return
    kernels = " and ".join(others)
    for finding in findings:
        if finding.kernel_id is not None or not finding.advice or not _PYTORCH_EXAMPLE.search(finding.advice):
            continue
        finding.advice = (_PYTORCH_EXAMPLE.sub("", finding.advice).rstrip()
                          + f"\n\n(The example, PyTorch code, is left out: this program's kernels are {kernels}'s, "
                            "none PyTorch's.)")
