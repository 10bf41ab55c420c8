"""Ranking: order findings across the whole profile by the time they could win.

- `estimated_savings_ns` = estimated_speedup x the kernel's time in the profile (per launch for
  an ncu report alone; the kernel's total time in the nsys timeline when one is joined).
- A kernel near a roof keeps only findings that take load off that roof; others drop to `info`
  (a copy at 90% of DRAM bandwidth is doing its job).
- Rank 1 is the most time to win.
"""

from __future__ import annotations

from nsanalyze.checks import global_settings
from nsanalyze.checks.base import Finding, clamp01, severity_for


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


def combine_per_kernel(findings: list[Finding]) -> None:
    """A kernel's findings overlap: together they promise 1 - prod(1 - s_i) of its time, never the sum."""
    by_kernel: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.kernel_id is not None:
            by_kernel.setdefault(finding.kernel_id, []).append(finding)
    cuts = global_settings()["severity"]
    for group in by_kernel.values():
        total = sum(f.estimated_speedup for f in group)
        remaining = 1.0
        for finding in group:
            remaining *= 1.0 - finding.estimated_speedup
        combined = 1.0 - remaining
        if len(group) < 2 or total <= combined:
            continue
        for finding in group:
            finding.estimated_speedup *= combined / total
            finding.notes.append(f"overlaps with {', '.join(f.check for f in group if f is not finding)}: "
                                 f"fixed together they save at most {combined:.0%} of the kernel's time")
            if finding.severity != "info":
                finding.severity = severity_for(finding.estimated_speedup, cuts)


def rank(findings: list[Finding], kernel_time_ns: dict) -> list[Finding]:
    """Sets savings and rank; `kernel_time_ns` maps a kernel id (or None for program findings) to time."""
    combine_per_kernel(findings)
    for finding in findings:
        if finding.kernel_id is not None or finding.estimated_savings_ns == 0.0:
            time_ns = kernel_time_ns.get(finding.kernel_id, 0.0)
            finding.estimated_savings_ns = finding.estimated_speedup * time_ns
    severity_order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    ordered = sorted(findings, key=lambda f: (f.severity == "info", -f.estimated_savings_ns,
                                              severity_order[f.severity], f.check))
    for position, finding in enumerate(ordered, start=1):
        finding.rank = position
    return ordered
