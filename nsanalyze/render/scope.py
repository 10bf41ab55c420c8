"""Where a finding lies without a source line: the profile it was read from and the part of the program it
judges (a kernel and its NVTX range, or the steps / window a program finding measures). SARIF's logical
locations and the `--fail-on` gate's lines on stderr both read it."""

from __future__ import annotations


def window_scope(timeline: dict | None) -> tuple[str, str]:
    """(name, kind) of what an nsys/Kineto program finding measures: the steps as the report prints them
    (`train_step` steps 0-29), else the analysed window."""
    if not timeline:
        return "the report's kernels", "kernels"
    steps = timeline.get("steps")
    if steps:
        first, last = steps.get("first_step"), steps.get("last_step")
        numbers = f" steps {first}-{last}" if first is not None and last is not None and last != first else \
            (f" step {first}" if first is not None else "")
        return f"{steps['name']}{numbers}", "nvtx range"
    window = timeline.get("window") or {}
    kind = window.get("kind")
    if kind == "nvtx-range":   # "NVTX range 'x' (n instance(s)) ..."
        return (window.get("description") or "the NVTX range").split(" (")[0], "nvtx range"
    name = {"steady": "steady window", "capture": "whole capture", "skip-first": "window"}.get(kind, "window")
    start, end = window.get("start_ns"), window.get("end_ns")
    if start is not None and end is not None:
        name += f" {start / 1e9:.3f}-{end / 1e9:.3f} s"
    return name, "window"


def finding_scope(model: dict, finding: dict) -> dict:
    """{"profile", "name", "kind", "key"}: the profile a finding comes from, and the kernel (with its NVTX range) or the
    program part it judges; `device` where it speaks for one GPU of several."""
    kernels = model.get("kernels") or []
    timeline = model.get("timeline")
    kernel_id = finding.get("kernel_id")
    if kernel_id is not None and 0 <= kernel_id < len(kernels):
        kernel = kernels[kernel_id]
        name = str(finding.get("kernel_name") or kernel.get("name") or "kernel")
        if kernel.get("nvtx_range"):
            name += f" in NVTX range {kernel['nvtx_range']}"
        profile = kernel.get("profile")
        scope = {"name": name, "kind": "function", "key": name}
    else:
        name, kind = window_scope(timeline)
        profile = (timeline or {}).get("profile")
        steps = (timeline or {}).get("steps")
        stable = steps["name"] if steps else ((timeline or {}).get("window") or {}).get("kind", kind)
        scope = {"name": name, "kind": kind, "key": str(stable)}   # key: the same in the next run's report
    if profile is None:
        profiles = model.get("profiles") or []
        profile = profiles[0]["path"] if profiles else None
    scope["profile"] = profile
    if finding.get("device_id") is not None and timeline and len(timeline.get("devices") or []) > 1:
        scope["name"] += f" (GPU {finding['device_id']})"
        scope["key"] += f" (GPU {finding['device_id']})"
    return scope


def gate_lines(model: dict, severities: tuple[str, ...], worst: str) -> list[str]:
    """One line per finding at `worst` severity or above: check id, severity, where, savings."""
    from nsanalyze.render.format import duration, percent, visible

    cut = severities.index(worst)
    lines = []
    for finding in model["findings"]:
        if finding["severity"] not in severities or severities.index(finding["severity"]) > cut:
            continue
        scope = finding_scope(model, finding)
        where = ("kernel " if scope["kind"] == "function" else "") + scope["name"]
        lines.append(f"{finding['check']} ({finding['severity']}): {where} in {scope['profile']}: saves "
                     f"{duration(finding.get('estimated_savings_ns'))} ({percent(finding.get('estimated_speedup'))} of the "
                     f"{'kernel' if scope['kind'] == 'function' else 'window'})")
    return [visible(line) for line in lines]
