"""Trend reports: JSON, Markdown, and HTML with one small chart per series (matplotlib SVG)."""

from __future__ import annotations

from markupsafe import Markup

from nsanalyze.render.format import duration, percent
from nsanalyze.render.json_report import dumps
from nsanalyze.render.markdown import bounded, escape, name

TOP = 20


def series_svg(series: dict) -> str:
    from nsanalyze.render.charts import _svg, plt

    points = series["points"]
    figure, axes = plt.subplots(figsize=(4.2, 1.4))
    xs = [p["date"] or f"run {p['run'] + 1}" for p in points]   # a run without a date: its place
    ys = [(p["duration_ns"] or 0) / 1e6 for p in points]
    axes.plot(xs, ys, marker="o", markersize=3, linewidth=1, color="#4a7ab5")
    bands = [(x, p["baseline_ns"] / 1e6, p["noise"]) for x, p in zip(xs, points) if p.get("baseline_ns")]
    if bands:
        axes.fill_between([b[0] for b in bands], [b[1] * (1 - b[2]) for b in bands], [b[1] * (1 + b[2]) for b in bands],
                          color="#4a7ab5", alpha=0.15, linewidth=0)
    for p, x, y in zip(points, xs, ys):
        if p.get("regression"):
            axes.plot([x], [y], marker="o", markersize=6, color="#c0392b")
    axes.set_ylabel("ms", fontsize=7)
    axes.tick_params(labelsize=6)
    return _svg(figure)


def render_json(result: dict) -> str:
    return dumps(result)


def _date(text) -> str:
    """A run's date as stored: a calendar date as it is, anything else (a hand-edited database) escaped."""
    import re

    return text if isinstance(text, str) and re.fullmatch(r"\d{4}-\d\d-\d\d", text) else escape(text)


def render_markdown(result: dict) -> str:
    lines = ["## nsanalyze trend", "", f"{len(result['runs'])} runs from {_date(result['runs'][0]['date']) if result['runs'] else '-'} "
             f"to {_date(result['runs'][-1]['date']) if result['runs'] else '-'}", "",
             *[f"- {escape(note)}" for note in result.get("notes") or []], *([""] if result.get("notes") else []),
             *([f"{len(result['programs'])} programs, compared each with itself only: " + "; ".join(
                 f"{escape(p['name'])} ({p['runs']} run{'s' if p['runs'] != 1 else ''})" for p in result["programs"]), ""]
               if len(result.get("programs") or []) > 1 else []),
             "| kernel | runs | last | baseline | change | noise band | regression |", "|---|---|---|---|---|---|---|"]
    lines += [_row(result, s, f"{name(s['name'])} ({escape(s['kind'])})") for s in result["kernels"][:TOP]]
    # the median step first (the run's headline figure), then the NVTX ranges: a step that got slower is the
    # regression a nightly job exists for, and it showed only in the JSON and a chart
    ranges = sorted(result.get("ranges") or [], key=lambda s: not str(s["name"]).startswith("median step: "))
    if ranges:
        lines += ["", "| step or NVTX range | runs | last | baseline | change | noise band | regression |",
                  "|---|---|---|---|---|---|---|"]
        lines += [_row(result, s, name(s["name"])) for s in ranges[:TOP]]
    if result["prediction_accuracy"]:
        lines += ["", "| check | findings gone | predicted | actual | actual / predicted |", "|---|---|---|---|---|"]
        lines += [f"| `{a['check']}` | {a['cases']} | {duration(a['predicted_ns'])} | {duration(a['actual_ns'])} | "
                  f"{a['actual_over_predicted']:.2f} |" if a["actual_over_predicted"] is not None else
                  f"| `{a['check']}` | {a['cases']} | - | - | - |" for a in result["prediction_accuracy"]]
    return bounded(lines, "row")


def _row(result: dict, series: dict, label: str) -> str:
    """A series' Markdown row: its latest run against the baseline, with its program where there are several."""
    last = series["points"][-1]
    program = f" [{escape(series['program'])}]" if len(result.get("programs") or []) > 1 and series.get("program") else ""
    return (f"| {label}{program} | {len(series['points'])} | {duration(last['duration_ns'])} | "
            f"{duration(last.get('baseline_ns'))} | {percent(last.get('change')) if last.get('change') is not None else '-'} | "
            f"{percent(last.get('noise')) if last.get('noise') else '-'} | {'**yes**' if last.get('regression') else ''} |")


def render_html(result: dict) -> str:
    from nsanalyze.render.html import environment

    # the median step first: the headline figure, whatever its place among the ranges
    headline = [s for s in result["ranges"] if str(s["name"]).startswith("median step: ")]
    charts = {id(s): Markup(series_svg(s)) for s in result["kernels"][:TOP] + result["ranges"][:TOP] + headline
              if len(s["points"]) > 1}
    return environment().get_template("trend.html.j2").render(result=result, charts=charts, top=TOP, id=id,
                                                              headline=headline)


def render_trend(result: dict, fmt: str) -> str:
    """The trend in the format `fmt` (json, markdown, html), through render.formats' one dispatch."""
    from nsanalyze.render.formats import render

    return render(result, fmt, "trend").decode("utf-8")
