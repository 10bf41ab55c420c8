"""Diff reports: JSON as is, Markdown for pull requests, and HTML from templates/diff.html.j2."""

from __future__ import annotations

from nsanalyze.render.format import duration
from nsanalyze.render.json_report import dumps
from nsanalyze.render.format import shorten
from nsanalyze.render.markdown import LINE_LIMIT, bounded, escape, name


def _change(value) -> str:
    return "-" if value is None else f"{value:+.1%}"


def in_cycles(row: dict) -> str:
    """` (-0.8% in SM cycles at 1195 -> 1303 MHz)` where the kernel's SM clock moved between the reports: how much
    of its change is the clock's."""
    if row.get("change_in_cycles") is None:
        return ""
    return f" ({_change(row['change_in_cycles'])} in SM cycles at {row['clocks']})"


PREDICTIONS_SCOPE = ("kernel findings of the base that are gone; program findings per mean step on the GPU's clock, "
                     "what the run costs, with what the median step saved beside it")
KERNEL_PREDICTIONS_SCOPE = "kernel findings of the base that are gone"


def predictions_scope(result: dict) -> str:
    """What the predictions table holds: the kernels' alone where no program finding is checked (two ncu reports
    read "program findings per mean step ..." above a median-step column of dashes, a user read)."""
    return PREDICTIONS_SCOPE if program_checked(result) else KERNEL_PREDICTIONS_SCOPE


def program_checked(result: dict) -> bool:
    return any(not p.get("kernel_name") for p in result.get("predictions") or ())


def in_new(prediction: dict) -> str:
    """Whether the predicted finding is gone from the new profile: a finding still there is not what the change
    took away, so its prediction is no check of it (kernel findings are compared only once gone)."""
    if prediction.get("in_new") != "still there":
        return "gone"
    left = prediction.get("in_new_savings_ns")
    return "still there" + (f", {duration(left)} a step" if left is not None else "")


def actual_text(prediction: dict) -> str:
    """What the change saved, and where the SM clock moved, what it saved in SM cycles at the base's clock (the
    clock's own change is no saving of the code)."""
    text = duration(prediction["actual_savings_ns"])
    if prediction.get("actual_savings_in_cycles_ns") is None:
        return text
    return (f"{text}; {duration(prediction['actual_savings_in_cycles_ns'])} in SM cycles "
            f"(the SM clock moved {prediction['clocks']})")


def prediction_scope(prediction: dict) -> str:
    """`program, per mean step`: where a program finding's prediction is checked."""
    return f"program, per {prediction.get('per') or 'step'}"


def mean_cell(steps: dict) -> str:
    """`446 ms → 12.9 ms (-97.1%)`: the mean step, what the run costs, beside the median's verdict."""
    if steps.get("before_mean_ns") is None or steps.get("after_mean_ns") is None:
        return "-"
    return f"{duration(steps['before_mean_ns'])} → {duration(steps['after_mean_ns'])} ({_change(steps.get('mean_change'))})"


def render_json(result: dict) -> str:
    return dumps(result)


def _share(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def render_markdown(result: dict) -> str:
    lines = ["## nsanalyze diff", "", f"base: {name(result['base'][0]['path'])} → new: {name(result['new'][0]['path'])}", ""]
    if result.get("summary"):
        lines += [f"**{escape(shorten(result['summary'], LINE_LIMIT))}**", ""]
    steps = result.get("steps")
    if steps:
        lines += ["| steps | median before | median after | change | noise band | verdict | mean before → after (change) |",
                  "|---|---|---|---|---|---|---|",
                  f"| {name(steps['name'])} ({steps['before_count']} / {steps['after_count']}) | "
                  f"{duration(steps['before_median_ns'])} | {duration(steps['after_median_ns'])} | {_change(steps['change'])} "
                  f"| ±{steps['noise']:.0%} | {steps['verdict']} | {mean_cell(steps)} |", ""]
    if result.get("budget"):
        from nsanalyze.render.format import BUDGET_LABELS, budget_cell, budget_changed

        scope = result["budget"][0].get("of", "median step")
        lines += [f"| time budget ({'median step' if scope == 'median step' else 'of each window'}) | before | after |",
                  "|---|---|---|"]
        lines += [f"| {BUDGET_LABELS.get(b['part'], b['part'])} | {budget_cell(b, 'before')} | {budget_cell(b, 'after')} |"
                  for b in result["budget"] if budget_changed(b)]
        lines.append("")
    program = result.get("program") or {}
    if program.get("findings_gone") or program.get("findings_appeared"):
        lines += [f"Program findings gone: {', '.join(program['findings_gone']) or 'none'}; "
                  f"appeared: {', '.join(program['findings_appeared']) or 'none'}", ""]
    if result["ranges"]:
        lines += ["| NVTX range | GPU time before | after | change | verdict |", "|---|---|---|---|---|"]
        lines += [f"| {name(r['name'])} | {duration(r['before_ns'])} | {duration(r['after_ns'])} | {_change(r['change'])} "
                  f"| {r['verdict']} |" for r in result["ranges"]]
        lines.append("")
    from nsanalyze.render.format import diff_kernel_name, diff_time, diff_why

    lines += ["| kernel | before (×launches) | after (×launches) | change | verdict | findings gone | findings new or worse |",
              "|---|---|---|---|---|---|---|"]
    for k in result["kernels"]:
        per_launch = " per launch" if k.get("compared") == "per launch" and k.get("before_per_launch_ns") is not None \
            else ""
        lines.append(f"| {name(diff_kernel_name(k))} | {escape(diff_time(k, 'before'))} | {escape(diff_time(k, 'after'))} | "
                     f"{_change(k['change'])}{per_launch}{in_cycles(k)} | {k['verdict']} | "
                     f"{', '.join(k['findings_gone'])} | "
                     f"{escape(diff_why(k))} |")
    if result["predictions"]:
        program = program_checked(result)
        lines += ["", f"Predictions checked ({predictions_scope(result)}):", "",
                  "| kernel | check | predicted savings | actual savings | "
                  + ("the median step saved | " if program else "") + "in the new profile |",
                  "|---|---|---|---|---|" + ("---|" if program else "")]
        lines += [f"| {name(p['kernel_name']) if p['kernel_name'] else prediction_scope(p)} | `{p['check']}` | "
                  f"{duration(p['predicted_savings_ns'])} | {actual_text(p)} | "
                  + (f"{duration(p.get('actual_median_savings_ns'))} | " if program else "") + f"{in_new(p)} |"
                  for p in result["predictions"]]
    changed = (result.get("program") or {}).get("findings_changed") or []
    if changed:
        lines += ["", "Program findings that changed:", "", "| check | severity before → after | per step before → after |",
                  "|---|---|---|"]
        lines += [f"| `{c['check']}` | {c['severity_before']} → {c['severity_after']} | "
                  f"{duration(c.get('per_step_before_ns'))} → {duration(c.get('per_step_after_ns'))} |" for c in changed]
    return bounded(lines, "row")


def render_html(result: dict) -> str:
    from nsanalyze.render.html import environment

    from nsanalyze.render.format import BUDGET_LABELS

    from nsanalyze.render.format import budget_cell, budget_changed, diff_kernel_name, diff_time, diff_why

    return environment().get_template("diff.html.j2").render(result=result, change=_change, share=_share,
                                                             labels=BUDGET_LABELS, budget_cell=budget_cell,
                                                             budget_changed=budget_changed, diff_time=diff_time,
                                                             why=diff_why, kernel_name=diff_kernel_name,
                                                             mean_cell=mean_cell, prediction_scope=prediction_scope, in_new=in_new,
                                                             actual_text=actual_text, in_cycles=in_cycles,
                                                             predictions_scope=predictions_scope(result),
                                                             program_checked=program_checked(result))


def render_diff(result: dict, fmt: str) -> str:
    """The diff in the format `fmt` (json, markdown, html), through render.formats' one dispatch."""
    from nsanalyze.render.formats import render

    return render(result, fmt, "diff").decode("utf-8")
