"""The pipeline: read -> normalize -> checks -> rank, producing the report model.

The report model is a plain dict with the shape of the JSON contract (docs/contract.md);
every renderer (json, terminal, markdown, html, pdf, sarif) reads only this dict.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from nsanalyze import __version__
from nsanalyze.checks import global_settings, run_kernel_checks, validate_overrides
from nsanalyze.checks.base import Finding, KernelView
from nsanalyze.errors import InputError
from nsanalyze.normalize import normalize_ncu
from nsanalyze.normalize.kernels import IDENTITY_COLUMNS
from nsanalyze.normalize.roofline import roofline
from nsanalyze.rank import apply_roof_gate, rank
from nsanalyze.read import NcuReport, NsysExport, read_profile

SCHEMA = "nsanalyze/report@1"


@dataclass
class Options:
    thresholds: dict[str, float] = field(default_factory=dict)
    skip_first_ns: int | None = None
    nvtx_range: str | None = None
    window: str = "steady"  # nsys: "steady" (the steady steps when found) or "capture" (everything)


def clean_number(value):
    """JSON-safe numbers: NaN/inf become null, numpy scalars become Python ones."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _profile_entry(profile) -> dict:
    return {"path": profile.path, "kind": profile.kind, "gpu": profile.device_name,
            "compute_capability": profile.compute_capability}


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


def analyze_ncu(report: NcuReport, options: Options) -> tuple[list[dict], list[Finding], list, list[dict]]:
    table = normalize_ncu(report)
    settings = global_settings()["roofline"]
    views, kernels, roofs = [], [], {}
    total = sum(r["duration_ns"] for r in table.rows if r["duration_ns"] is not None) or None
    for record, launch, undefined in zip(table.rows, report.launches, table.undefined):
        roof = roofline(record, settings["near_roof_share"], settings["latency_share"])
        roofs[record["id"]] = roof
        views.append(KernelView(record, launch.source, undefined))
        metrics = {k: clean_number(v) for k, v in record.items()
                   if k not in IDENTITY_COLUMNS and clean_number(v) is not None}
        kernels.append({
            "id": record["id"], "name": record["name"], "demangled": record["demangled"],
            "profile": report.path, "nvtx_range": record["nvtx_range"],
            "duration_ns": clean_number(record["duration_ns"]), "launches": 1,
            "time_share": clean_number(record["duration_ns"] / total) if total and record["duration_ns"] else None,
            "bound": roof["bound"],
            "roofline": {k: clean_number(v) for k, v in roof.items()},
            "metrics": metrics,
        })
    findings, not_judged = run_kernel_checks(views, options.thresholds)
    apply_roof_gate(findings, roofs)
    return kernels, findings, not_judged, _nvidia_rules(report)


def analyze(paths: list[str], options: Options | None = None) -> dict:
    """Analyzes one or more profiles into the report model."""
    options = options or Options()
    try:
        validate_overrides(options.thresholds)
    except ValueError as exc:
        raise InputError("--set", str(exc)) from None
    profiles = [read_profile(path) for path in paths]
    ncu_reports = [p for p in profiles if isinstance(p, NcuReport)]
    nsys_exports = [p for p in profiles if isinstance(p, NsysExport)]

    kernels, findings, not_judged, nvidia_rules = [], [], [], []
    for report in ncu_reports:
        k, f, n, r = analyze_ncu(report, options)
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
        "profiles": [_profile_entry(p) for p in profiles],
        "kernels": kernels,
        "findings": [],
        "not_judged": [n.to_json() for n in not_judged],
        "nvidia_rules": nvidia_rules,
    }

    kernel_time = {k["id"]: (k["duration_ns"] or 0.0) * k["launches"] for k in kernels}
    if nsys_exports:
        from nsanalyze.program import analyze_nsys, join_kernel_times

        program = analyze_nsys(nsys_exports, options)
        model.update(program.sections)
        findings += program.findings
        model["not_judged"] += [n.to_json() for n in program.not_judged]
        if kernels:
            join_kernel_times(kernels, program.kernel_summary, kernel_time)
        else:
            model["kernels"] = program.kernels
    model["findings"] = [f.to_json() for f in rank(findings, kernel_time)]
    for profile in nsys_exports:
        profile.close()
    return model
