"""The short ranked summary printed when no -o is given."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from nsanalyze.render.format import budget_text, duration, health_line, shorten, visible, window_lines

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def print_summary(model: dict, console: Console | None = None, limit: int = 15) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 140)
    for profile in model["profiles"]:
        console.print(Text(f"{profile['kind']}: {visible(profile['path'])}  ({visible(profile['gpu']) or 'unknown GPU'}, "
                           f"CC {profile['compute_capability'] or '?'})", style="bold"))
        clock = profile.get("clock_control") or {}
        if clock.get("mode") == "locked":
            console.print(Text(f"  Clocks locked ({clock['reason']}): clock-throttling not judged; "
                               "ncu --clock-control none measures it", style="dim"))
        if profile.get("unmeasured_launches"):
            names = visible(", ".join(sorted({str(u["name"]) for u in profile["unmeasured_launches"]})))
            console.print(Text(f"  {len(profile['unmeasured_launches'])} launches hold no metrics and are left out: "
                               f"{shorten(names, 100)}"))
    timeline = model.get("timeline")
    if timeline:
        for line in window_lines(timeline):
            console.print(Text(visible(line)))
    if timeline and len(timeline.get("devices", [])) > 1:
        for device in timeline["devices"]:
            console.print(Text(f"  GPU {visible(device['device_id'])}: {budget_text(device.get('budget'))}; communication "
                               f"{duration(device['communication_ns'])} (exposed {duration(device['exposed_communication_ns'])})"))
    metrics = model.get("gpu_metrics")
    if metrics and metrics.get("headline"):
        console.print(Text(visible(metrics["headline"])))
    findings = [f for f in model["findings"] if f["severity"] != "info"]
    if not findings:
        console.print(Text(health_line(model)))
    else:
        table = Table(title="What to fix first", show_lines=False)
        for column in ("#", "severity", "check", "kernel / scope", "saves", "finding"):
            table.add_column(column, overflow="fold")
        for finding in findings[:limit]:
            table.add_row(str(finding["rank"]), Text(finding["severity"], style=SEVERITY_STYLE[finding["severity"]]),
                          Text(finding["check"]), Text(shorten(visible(finding["kernel_name"] or "program"), 28)),
                          Text(duration(finding["estimated_savings_ns"])), Text(visible(finding["title"])))
        console.print(table)
        if len(findings) > limit:
            console.print(f"... and {len(findings) - limit} more findings (write a report with -o for all)")
    if model.get("not_judged"):
        checks = sorted({n["check"] for n in model["not_judged"]})
        console.print(Text(f"Not judged for lack of metrics: {', '.join(checks)} "
                           "(the report's 'not judged' section names the profiler options that collect them)", style="dim"))
