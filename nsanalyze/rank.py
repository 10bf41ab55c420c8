"""Ranking: order findings across the whole profile by the time they could win.

- `estimated_savings_ns` = estimated_speedup x the kernel's time in the profile (per launch for
  an ncu report alone; the kernel's total time in the nsys timeline when one is joined).
- A kernel near a roof keeps only findings that take load off that roof; others drop to `info`
  (a copy at 90% of DRAM bandwidth is doing its job).
- A kernel's findings overlap (1 - prod(1 - s_i)), a grid sized by a small problem counts after the
  kernel's own findings, and no kernel saves below its launch floor (the least launch overhead
  measured in its report, at most launch_floor_ns a launch, or the kernel's own time with no SM at work
  where longer); the floor takes from the findings counted after the others first.
- Launch shapes of one kernel are one finding; severity is the savings' share of the report's time.
- Rank 1 is the most time to win.
"""

from __future__ import annotations

import os
import re

from nsanalyze.checks import global_settings
from nsanalyze.checks.base import SEVERITIES, Finding, clamp01


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
            if len(group) >= 2 and (overlapped or later_overlapped or primary and later):
                finding.notes.append(f"overlaps with {', '.join(f.check for f in group if f is not finding)}: "
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
                              f"instances) that show this, {time_ns / 1e3:.4g} us in all; the evidence is that of the "
                              "one that saves most, the savings those of all")
            order = ("high", "medium", "low", "info")
            best.severity = min((f.severity for f in fired), key=order.index)
        out.append(best)
    return out


def report_severity(finding: Finding, total_ns: float) -> str:
    """Severity of a kernel finding from its savings as a share of the report's time, with absolute
    minimums: the ranked table reads in order, and nothing saving a few microseconds is `high`."""
    if finding.severity == "info" or not total_ns:
        return finding.severity
    cuts = global_settings()["report_severity"]
    share, saved = finding.estimated_savings_ns / total_ns, finding.estimated_savings_ns
    if share >= cuts["high"] and saved >= cuts["min_high_ns"]:
        return "high"
    if share >= cuts["medium"] and saved >= cuts["min_medium_ns"]:
        return "medium"
    if share >= cuts["low"] and saved > 0:
        return "low"
    return "info"


def rank(findings: list[Finding], kernel_time_ns: dict, kernel_launches: dict | None = None,
         kernel_keys: dict | None = None, total_ns: float | None = None,
         kernel_floor_ns: dict | None = None) -> list[Finding]:
    """Sets savings and rank; `kernel_time_ns` maps a kernel id (or None for program findings) to time,
    `kernel_launches` its launches (for the launch floor), `kernel_keys` its identity across launch
    shapes, `total_ns` the report's time (kernel severities are shares of it)."""
    combine_per_kernel(findings, kernel_time_ns, kernel_launches, kernel_floor_ns)
    for finding in findings:
        if finding.kernel_id is not None or finding.estimated_savings_ns == 0.0:
            time_ns = kernel_time_ns.get(finding.kernel_id, 0.0)
            finding.estimated_savings_ns = finding.estimated_speedup * time_ns
            if finding.kernel_id is not None:
                finding.kernel_ids, finding.kernel_time_ns = [finding.kernel_id], time_ns
    if kernel_keys:
        findings = merge_launch_shapes(findings, kernel_keys, kernel_time_ns)
    if total_ns is None:
        total_ns = sum(t for k, t in kernel_time_ns.items() if k is not None)
    cuts = global_settings()["severity"]
    joined = any(f.kernel_id is None for f in findings) and any(f.kernel_id is not None for f in findings)
    for finding in findings:
        if finding.kernel_id is not None:
            if finding.severity != "info" and finding.estimated_speedup < cuts["low"]:
                finding.severity = "info"  # under 3% of its kernel after overlaps and the floor
            finding.severity = report_severity(finding, total_ns)
        elif joined:  # program and kernel findings in one table: one scale, the program's time
            finding.severity = report_severity(finding, total_ns)
    severity_order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    ordered = sorted(findings, key=lambda f: (f.severity == "info", -round(f.estimated_savings_ns, 1),
                                              severity_order[f.severity], getattr(f, "counted_after", False),
                                              -getattr(f, "potential", 0.0), f.check))
    floor_index = 0  # a kernel finding is never more severe than a finding ranked above it (mixed reports)
    for position, finding in enumerate(ordered, start=1):
        finding.rank = position
        if finding.kernel_id is not None and severity_order[finding.severity] < floor_index:
            finding.notes.append(f"shown as {SEVERITIES[floor_index]}: findings that save more rank above it")
            finding.severity = SEVERITIES[floor_index]
        floor_index = max(floor_index, severity_order[finding.severity])
    return ordered


# The throughput units a kernel's time can be bound by (normalized concepts, % of their peak), and which of
# them each check's fix takes work off. A fix can at most bring the kernel down to its busiest unit that
# keeps its work: that unit then runs at 100%. Checks not listed (latency: occupancy, ILP, grid size, tail,
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
    "missing-tensor-cores": ("fma", "issue", "l1", "alu"),
    "costly-fp-math": ("xu", "fp64", "fma", "issue", "alu"),
    "warp-divergence": ("issue", "fma", "alu", "xu", "fp64", "adu"),
    "block-size": ("issue", "fma", "alu", "xu", "fp64", "adu", "l1"),  # full warps: a 32nd of the instructions
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
    moved, ideal = record.get(concept), record.get("global_sectors_ideal")
    if not isinstance(moved, (int, float)) or not isinstance(ideal, (int, float)) or ideal != ideal or moved != moved:
        return True
    return moved <= 1.1 * ideal * 32


def next_limiter(check: str, record: dict) -> tuple[str, float] | None:
    """(unit, % busy) of the busiest unit the check's fix leaves its work on, or None when none is measured."""
    if check in UNBOUNDED:
        return None
    relieved = set(RELIEVED_UNITS.get(check, ()))
    if check == "uncoalesced-global":
        relieved -= {unit for unit, concept in (("dram", "dram_bytes"), ("l2", "l2_bytes")) if _at_minimum(record, concept)}
    busy, active = [], _active_share(record)
    for unit, concepts in UNITS.items():
        if unit in relieved:
            continue
        values = [(_number(record.get(c)), c) for c in concepts]
        values = [v if c not in PER_ACTIVE_CYCLE else v * active for v, c in values
                  if v is not None and (c not in PER_ACTIVE_CYCLE or active is not None)]
        if values:
            busy.append((unit, min(100.0, max(values))))
    return max(busy, key=lambda pair: pair[1]) if busy else None


def bound_by_next_limiter(findings: list[Finding], records: dict) -> None:
    """A fix saves at most the time down to the next limiter: 1 - its busy share (a kernel whose DRAM stays at
    89% can lose at most 11% however uncoalesced its loads)."""
    for finding in findings:
        record = records.get(finding.kernel_id)
        limiter = next_limiter(finding.check, record) if record else None
        if limiter is None:
            continue
        unit, pct = limiter
        cap = clamp01(1.0 - pct / 100.0)
        if finding.estimated_speedup > cap:
            finding.notes.append(f"bounded by the next limiter: the {UNIT_NAMES[unit]} stays {pct:.1f}% busy after the "
                                 f"fix, so at most {cap:.0%} of the kernel's time can go (estimated "
                                 f"{finding.estimated_speedup:.0%})")
            finding.evidence = {**finding.evidence, "next_limiter_pct": {"value": round(pct, 2), "unit": "%",
                                                                          "limiter": unit}}
            finding.estimated_speedup = cap


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
                                                                     "kernel": twin["name"]}}
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
