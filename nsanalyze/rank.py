"""Ranking: order findings across the whole profile by the time they could win.

- `estimated_savings_ns` = estimated_speedup x the kernel's time in the profile (per launch for
  an ncu report alone; the kernel's total time in the nsys timeline when one is joined).
- A kernel near a roof keeps only findings that take load off that roof; others drop to `info`
  (a copy at 90% of DRAM bandwidth is doing its job).
- Rank 1 is the most time to win.
"""

from __future__ import annotations

from nsanalyze.checks.base import Finding



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


def rank(findings: list[Finding], kernel_time_ns: dict) -> list[Finding]:
    """Sets savings and rank; `kernel_time_ns` maps a kernel id (or None for program findings) to time."""
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
