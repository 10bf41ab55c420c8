"""A kernel's dominant warp stall and the fix it implies, from ncu's stall breakdown (WarpStateStats).

ncu splits each issued instruction's warp latency (`warp_latency_cycles`, cycles per issued instruction)
into stall reasons (`stall_<reason>_cycles`, the same unit: they sum to it). A reason that holds at least
`MIN_SHARE` of it is what the kernel's warps wait on: NVIDIA's own CPIStall rule speaks at 30% (metrics
reference, S25). `selected` (issuing) and `not_selected` (ready, another warp issued) are not stalls.
A latency finding (low-ilp, low-occupancy) names the largest reason whatever its share, with the share: what
the warps wait on is its diagnosis; a kernel's first finding of another kind names one only from 30% up.
What each reason means and the fix it implies are data: warp_stalls.csv.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from nsanalyze.checks.base import Finding, KernelView

TABLE = Path(__file__).with_name("warp_stalls.csv")
MIN_SHARE = 0.30        # NVIDIA's CPIStall rule: a reason over 30% of the warp latency is reported


def stall_concepts() -> tuple[str, ...]:
    """The concepts dominant_stall reads (a check's `optional`)."""
    return ("warp_latency_cycles",) + tuple(f"stall_{reason}_cycles" for reason in stall_table())


@dataclass(frozen=True)
class Stall:
    reason: str          # ncu's reason (`long_scoreboard`): the concept is stall_<reason>_cycles
    label: str
    means: str
    fix: str
    cycles: float        # per issued instruction
    share: float         # of the warp latency

    def phrase(self) -> str:
        return f"warps stall most on {self.label} ({self.share:.0%} of their latency: {self.means})"

    def to_evidence(self) -> dict:
        return {"value": self.reason, "share": round(self.share, 4), "cycles": round(self.cycles, 4),
                "means": self.means, "fix": self.fix}


@lru_cache(maxsize=1)
def stall_table() -> dict[str, dict[str, str]]:
    with open(TABLE, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if None in row or any(not value for value in row.values()):
            raise ValueError(f"{TABLE.name}: a row without its 4 fields: {row}")
    return {row["stall"]: row for row in rows}


def dominant_stall(kernel: KernelView, min_share: float = MIN_SHARE) -> Stall | None:
    """The stall reason that holds the most of the kernel's warp latency, when it holds at least `min_share`;
    None where the breakdown is not measured."""
    latency = kernel.get("warp_latency_cycles")
    if not latency or latency <= 0:
        return None
    measured = [(kernel.get(f"stall_{reason}_cycles"), reason) for reason in stall_table()]
    measured = [(cycles, reason) for cycles, reason in measured if cycles is not None and cycles > 0]
    if not measured:
        return None
    cycles, reason = max(measured)
    share = cycles / latency
    if share < min_share:
        return None
    row = stall_table()[reason]
    return Stall(reason, row["label"], row["means"], row["fix"], cycles, min(share, 1.0))


def stall_advice(stall: Stall) -> str:
    """The advice paragraph a finding leads with: the stall and its fix."""
    return f"**Dominant stall: {stall.label}** ({stall.share:.0%} of the warp latency: {stall.means}). Fix: {stall.fix}.\n\n"


# A kernel whose schedulers issue on this share of cycles or more has no latency left to hide: a stall's fix (more
# loads in flight, more ILP) does not apply (the dev suite's one_block_too_many, 99.2% issue, was told to unroll)
ISSUE_BUSY_PCT = 90.0
# Findings whose own cause is what the warps wait on: the stall's generic fix is not theirs (the dev suite's
# histogram, waiting on its contended atomics, was told to double-buffer global-to-shared copies)
OWN_CAUSE_CHECKS = {"atomic-contention": "its contended atomics, the finding's cause"}


def _fix_does_not_apply(finding: Finding, view: KernelView) -> str | None:
    """Why the stall's fix is not the change to make, or None: a busy scheduler, a cause that explains the wait,
    or a library's kernel (whose code the user does not write: a user read found PyTorch's kernels given CUDA edits)."""
    from nsanalyze.checks.libraries import library_of

    issue = view.get("issue_active_pct")
    if issue is not None and issue >= ISSUE_BUSY_PCT:
        return f"its schedulers issue on {issue:.0f}% of cycles, so no latency is left to hide"
    if finding.check in OWN_CAUSE_CHECKS:
        return f"what they wait on is {OWN_CAUSE_CHECKS[finding.check]}"
    library = library_of(finding.kernel_name)
    if library is not None:
        return f"a {library} kernel, whose code you do not write: the finding's advice is the change"
    return None


def name_first_findings_stall(findings: list[Finding], views: dict) -> None:
    """Each kernel's first finding (in rank order) names the kernel's dominant warp stall and the fix it
    implies, where the finding does not already (latency findings do, in their title). `views`: kernel id ->
    KernelView of the kernel's representative launch."""
    seen: set = set()
    for finding in findings:
        if finding.kernel_id is None or finding.kernel_id in seen:
            continue
        seen.add(finding.kernel_id)
        if "dominant_stall" in finding.evidence:
            continue
        view = views.get(finding.kernel_id)
        stall = dominant_stall(view) if view is not None else None
        if stall is None:
            continue
        finding.evidence = {**finding.evidence, "dominant_stall": stall.to_evidence()}
        why_not = _fix_does_not_apply(finding, view)
        finding.notes.append(f"the kernel's {stall.phrase()}; "
                             + (f"{why_not}." if why_not else f"that implies: {stall.fix}."))
