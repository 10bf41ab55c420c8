"""The short ranked summary printed when no -o is given."""

from __future__ import annotations

import sys

import rich.console
from rich.table import Table
from rich.text import Text

from nsanalyze.render.format import (budget_labels, collect_text, budget_text, distinct_names, duration, gpu_label, health_line, kernel_list_work_line, savings_text,
                                     finding_gpu, ncu_coverage_line, set_aside_note, several_gpus_line, shorten, visible,
                                     window_lines)

class Console(rich.console.Console):
    """rich's console, but a reader that closed the pipe (`nsanalyze report x | head -1`) is the
    reader's choice: BrokenPipeError reaches the CLI, which ends quietly with 0 (rich exits with 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def print_summary(model: dict, console: Console | None = None, limit: int = 15) -> None:
    console = _console(console)
    for profile in model["profiles"]:
        console.print(Text(f"{profile['kind']}: {visible(profile['path'])}  ({visible(gpu_label(profile))})", style="bold"))
        clock = profile.get("clock_control") or {}
        if clock.get("mode") == "locked":
            # the reason carries the evidence and its certainty ("at the base clock", "probably a locked clock")
            console.print(Text(f"  Clock control: {visible(clock['reason'])}; clock-throttling not judged; "
                               "ncu --clock-control none measures it", style="dim"))
        elif clock.get("too_short"):
            console.print(Text(f"  Clock: {visible(clock['reason'])}; clock-throttling not judged", style="dim"))
        if profile.get("unmeasured_launches"):
            names = visible(", ".join(sorted({str(u["name"]) for u in profile["unmeasured_launches"]})))
            console.print(Text(f"  {len(profile['unmeasured_launches'])} launches hold no metrics and are left out: "
                               f"{shorten(names, 100)}"))
        if profile.get("set_aside_values") and profile["kind"] == "ncu":
            console.print(Text("  " + visible(set_aside_note(profile["set_aside_values"]))))
    if several_gpus_line(model):
        console.print(Text(visible(several_gpus_line(model)), style="bold"))
    if ncu_coverage_line(model):
        console.print(Text(ncu_coverage_line(model), style="bold"))
    timeline = model.get("timeline")
    if timeline:
        for line in window_lines(timeline):
            console.print(Text(visible(line)))
    elif model.get("work"):
        console.print(Text(visible(kernel_list_work_line(model))))
    if timeline and len(timeline.get("devices", [])) > 1:
        for device in timeline["devices"]:
            console.print(Text(f"  GPU {visible(device['device_id'])}: {budget_text(device.get('budget'), labels=budget_labels(timeline))}; communication "
                               f"{duration(device['communication_ns'])} (exposed {duration(device['exposed_communication_ns'])})"))
    metrics = model.get("gpu_metrics")
    if metrics and metrics.get("headline"):
        console.print(Text(visible(metrics["headline"])))
    findings = [f for f in model["findings"] if f["severity"] != "info"]
    if not findings:
        console.print(Text(health_line(model)))
    else:
        table = Table(title="What to fix first", show_lines=False)
        several = bool(model.get("gpus"))   # kernels of several GPUs: a GPU column
        for column in ("#", "severity", "check", "kernel / scope", *(("GPU",) if several else ()), "saves", "finding"):
            table.add_column(column, overflow="fold")
        shown = findings[:limit]
        names = distinct_names([visible(f["kernel_name"] or "program") for f in shown], 28)
        gpus = [finding_gpu(model, f) or "-" for f in shown]
        for finding, name, gpu in zip(shown, names, gpus):
            table.add_row(str(finding["rank"]), Text(finding["severity"], style=SEVERITY_STYLE[finding["severity"]]),
                          Text(finding["check"]), Text(name), *((Text(visible(gpu)),) if several else ()),
                          Text(savings_text(finding, model)), Text(visible(finding["title"])))
        console.print(table)
        if len(findings) > limit:
            console.print(f"... and {len(findings) - limit} more findings (write a report with -o for all)")
    if model.get("not_judged"):
        checks = sorted({n["check"] for n in model["not_judged"]})
        collect = collect_text(model)
        console.print(Text(f"Not judged for lack of metrics: {', '.join(checks)}" + (f"; collect {collect}" if collect else "")
                           + " (the Markdown, HTML and JSON reports name the metrics each lacks)", style="dim"))


VERDICT_STYLE = {"regression": "bold red", "improvement": "green", "within noise": "dim", "new kernel": "yellow",
                 "unmatched": "yellow"}


def _console(console: Console | None) -> Console:
    return console or Console(width=None if sys.stdout.isatty() else 140)


def _change(value) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _text(value, width: int | None = None) -> Text:
    text = visible(value if value is not None else "")
    return Text(shorten(text, width) if width else text)


def print_diff(result: dict, console: Console | None = None, limit: int = 25) -> None:
    """`nsanalyze diff` without -o: the comparison as tables on the terminal (plain text, no Markdown)."""
    console = _console(console)
    console.print(Text(f"base: {visible(result['base'][0]['path'])} → new: {visible(result['new'][0]['path'])}",
                       style="bold"))
    if result.get("summary"):
        console.print(Text(visible(result["summary"])))
    steps = result.get("steps")
    if steps:
        table = Table(title="Steps (median; the mean, what the run costs, beside it)", title_justify="left")
        from nsanalyze.render.diff_report import mean_cell

        for column in ("steps", "before", "after", "change", "noise band", "verdict", "mean before → after"):
            table.add_column(column, overflow="fold")
        table.add_row(_text(f"{steps['name']} ({steps['before_count']} / {steps['after_count']})"),
                      duration(steps["before_median_ns"]), duration(steps["after_median_ns"]), _change(steps["change"]),
                      f"±{steps['noise']:.0%}", Text(steps["verdict"], style=VERDICT_STYLE.get(steps["verdict"], "")),
                      mean_cell(steps))
        console.print(table)
    if result.get("budget"):
        from nsanalyze.render.format import BUDGET_LABELS, budget_cell, budget_changed

        scope = result["budget"][0].get("of", "median step")
        table = Table(title=f"Time budget ({'median step' if scope == 'median step' else 'of each window'})",
                      title_justify="left")
        for column in ("part", "before", "after"):
            table.add_column(column)
        for part in result["budget"]:
            if budget_changed(part):
                table.add_row(BUDGET_LABELS.get(part["part"], part["part"]), budget_cell(part, "before"),
                              budget_cell(part, "after"))
        console.print(table)
    program = result.get("program") or {}
    if program.get("findings_gone") or program.get("findings_appeared"):
        console.print(Text(f"Program findings gone: {', '.join(program['findings_gone']) or 'none'}; "
                           f"appeared: {', '.join(program['findings_appeared']) or 'none'}"))
    if program.get("findings_changed"):
        table = Table(title="Program findings that changed", title_justify="left")
        for column in ("check", "severity before → after", "saves before → after"):
            table.add_column(column)
        for c in program["findings_changed"]:
            per_step = c.get("per_step_before_ns") is not None
            table.add_row(c["check"], f"{c['severity_before']} → {c['severity_after']}",
                          f"{duration(c.get('per_step_before_ns' if per_step else 'savings_before_ns'))} → "
                          f"{duration(c.get('per_step_after_ns' if per_step else 'savings_after_ns'))}"
                          + (" a step" if per_step else ""))
        console.print(table)
    for title, rows, name_column, extra in (("NVTX ranges", result.get("ranges") or [], "NVTX range", False),
                                             ("Kernels", result.get("kernels") or [], "kernel", True)):
        if not rows:
            continue
        table = Table(title=title, title_justify="left")
        table.add_column(name_column, overflow="fold", ratio=3)
        clocked = any(row.get("change_in_cycles") is not None for row in rows)   # (a longer change cell, folded)
        for column in ("before", "after", "change", "verdict"):
            table.add_column(column, no_wrap=not (clocked and column == "change"), overflow="fold")
        if extra:
            table.add_column("findings gone", overflow="fold")
            table.add_column("findings new or worse", overflow="fold")
        from nsanalyze.render.format import diff_kernel_name, diff_time, diff_why
        from nsanalyze.render.diff_report import in_cycles

        # every row whose findings changed is shown, beyond the limit too
        shown = [row for i, row in enumerate(rows) if i < limit or row.get("findings_gone") or diff_why(row)]
        for row in shown:
            if extra:
                cells = [_text(diff_kernel_name(row, 60)), diff_time(row, "before"), diff_time(row, "after")]
            else:
                cells = [_text(row["name"], 60), duration(row["before_ns"]), duration(row["after_ns"])]
            cells += [_change(row["change"]) + (" /launch" if row.get("compared") == "per launch" and extra
                                                and row.get("before_per_launch_ns") is not None else "")
                      + in_cycles(row),
                      Text(row["verdict"], style=VERDICT_STYLE.get(row["verdict"], ""))]
            if extra:
                cells += [", ".join(row.get("findings_gone") or []), diff_why(row)]
            table.add_row(*cells)
        console.print(table)
        if len(rows) > len(shown):
            console.print(f"... and {len(rows) - len(shown)} more without changed findings (write a report with -o "
                          "for all)")
    if result.get("predictions"):
        from nsanalyze.render.diff_report import program_checked, actual_text, in_new, prediction_scope, \
            predictions_scope

        program = program_checked(result)
        table = Table(title=f"Predictions checked ({predictions_scope(result)})", title_justify="left")
        for column in ("kernel", "check", "predicted savings", "actual savings",
                       *(("median step saved",) if program else ()), "in the new profile"):
            table.add_column(column, overflow="fold")
        for p in result["predictions"][:limit]:
            table.add_row(_text(p.get("kernel_name") or prediction_scope(p), 50), p["check"],
                          duration(p["predicted_savings_ns"]), actual_text(p),
                          *((duration(p.get("actual_median_savings_ns")),) if program else ()), in_new(p))
        console.print(table)


def print_trend(result: dict, console: Console | None = None, limit: int = 20) -> None:
    """`nsanalyze trend` without -o: the latest run of each series against its baseline, as tables."""
    from nsanalyze.render.format import percent

    console = _console(console)
    runs = result["runs"]
    console.print(Text(visible(f"{len(runs)} runs from {runs[0]['date'] if runs else '-'} to "
                               f"{runs[-1]['date'] if runs else '-'}"), style="bold"))
    for note in result.get("notes") or []:
        console.print(Text(visible(note)))
    programs = result.get("programs") or []
    if len(programs) > 1:   # compared only within one program (its label, else its steps and main kernels)
        console.print(Text(visible(f"{len(programs)} programs, compared each with itself only: " + "; ".join(
            f"{p['name']} ({p['runs']} run{'s' if p['runs'] != 1 else ''})" for p in programs))))
    for title, series in (("Kernels", result.get("kernels") or []), ("NVTX ranges", result.get("ranges") or [])):
        if not series:
            continue
        table = Table(title=title, title_justify="left")
        table.add_column("series", overflow="fold", ratio=3)
        for column in ("runs", "last", "baseline", "change", "noise band", "regression"):
            table.add_column(column, no_wrap=True)
        for s in series[:limit]:
            last = s["points"][-1]
            label = f"{s['name']} ({s['kind']})" if s.get("kind") else s["name"]
            if s.get("gpu"):
                label += f" on {s['gpu']}"
            if len(programs) > 1 and s.get("program"):
                label += f" [{s['program']}]"
            table.add_row(_text(label, 70), str(len(s["points"])), duration(last.get("duration_ns")),
                          duration(last.get("baseline_ns")),
                          percent(last["change"]) if last.get("change") is not None else "-",
                          percent(last["noise"]) if last.get("noise") else "-",
                          Text("yes", style="bold red") if last.get("regression") else "")
        console.print(table)
        if len(series) > limit:
            console.print(f"... and {len(series) - limit} more (write a report with -o for all)")
    accuracy = result.get("prediction_accuracy") or []
    if accuracy:
        table = Table(title="Prediction accuracy", title_justify="left")
        for column in ("check", "findings gone", "predicted", "actual", "actual / predicted"):
            table.add_column(column)
        for a in accuracy:
            ratio = a.get("actual_over_predicted")
            table.add_row(a["check"], str(a["cases"]), duration(a.get("predicted_ns")), duration(a.get("actual_ns")),
                          "-" if ratio is None else f"{ratio:.2f}")
        console.print(table)
