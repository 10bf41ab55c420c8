"""Self-contained HTML from templates/report.html.j2: inline CSS and SVG, no scripts, no network.

The same HTML, with print CSS, is what the PDF renderer hands to WeasyPrint.
"""

from __future__ import annotations

from functools import lru_cache

from jinja2 import Environment, PackageLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from nsanalyze.checks import check_by_id
from nsanalyze.checks.base import SECTIONS
from nsanalyze.render import charts
from nsanalyze.render.format import (distinct_names, duration, evidence_value, threshold_text, is_command, gpu_label, health_line, next_limit_line, ncu_coverage_line, percent, quantity, savings_text, shorten,
                                     set_aside_note, show_invisible, window_lines)

SUMMARY_ROWS = 15  # "What to fix first" lists these; every finding still has its card below  # an expert's order of diagnosis


def _section_of(finding: dict) -> str:
    """The section a finding's check declares (its Check's `section`): a new check can't be dropped."""
    check = check_by_id(finding["check"])
    return check.section if check else "kernel"


def _highlight(code: str, language: str, _attrs) -> str:
    try:
        lexer = get_lexer_by_name(language or "text")
    except ClassNotFound:
        lexer = get_lexer_by_name("text")
    return highlight(code, lexer, HtmlFormatter(nowrap=True))


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    # no raw HTML, links or images: the advice holds none of its own, so any would come from a name
    return MarkdownIt("commonmark", {"html": False, "highlight": _highlight}).disable(["link", "image", "autolink"])


def markdown_filter(text: str) -> Markup:
    # html=False: raw HTML in the text is escaped; bidi and zero-width characters shown as escapes
    return Markup(_markdown().render(show_invisible(text or "")))


@lru_cache(maxsize=1)
def _code_spans() -> MarkdownIt:
    # code spans and nothing else: a title's `torch.cuda.empty_cache()` shown as code, never a link or emphasis
    return MarkdownIt("zero", {"html": False}).enable("backticks")


def inline_code(text: str) -> Markup:
    """A finding's title or note: its Markdown code spans as <code>, the rest escaped text (the titles wrote
    "`torch.cuda.empty_cache()`" with its backticks in the HTML)."""
    return Markup(_code_spans().renderInline(show_invisible(text or "")))


def _finalize(value):
    """Every `{{ value }}` of the template: text from the profile with bidi and zero-width characters
    (U+202E, U+200B) shown as escapes; Markup (charts, rendered advice) is already safe."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return show_invisible(value)
    return value


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("nsanalyze.render", "templates"), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True, finalize=_finalize)
    env.filters.update(duration=duration, percent=percent, quantity=quantity, shorten=shorten,
                       markdown=markdown_filter, inline_code=inline_code)
    env.globals.update(window_lines=window_lines, evidence_value=evidence_value, threshold_text=threshold_text, is_command=is_command, health_line=health_line, next_limit_line=next_limit_line, savings_text=savings_text,
                       set_aside_note=set_aside_note, gpu_label=gpu_label,
                       ncu_coverage_line=ncu_coverage_line)
    return env


def view(model: dict) -> dict:
    """What the template shows, derived from the report model only."""
    findings = model["findings"]
    shown = [f for f in findings if f["severity"] != "info"]
    by_section = {name: [] for name in SECTIONS}
    for finding in shown:
        by_section.setdefault(_section_of(finding), []).append(finding)
    kernels = model["kernels"]
    listed = sorted(kernels, key=lambda k: -(k.get("time_share") or 0))[:100]
    return {
        "model": model,
        # names cut so that two stay apart (cuBLAS kernels that differ in a tile size past the cut read alike)
        "scope_labels": dict(zip((f["rank"] for f in findings),
                                 distinct_names([f["kernel_name"] or "program" for f in findings], 48))),
        "kernel_labels": dict(zip((k["id"] for k in listed), distinct_names([k["name"] for k in listed], 48))),
        "top": shown[:3],
        "shown": shown,
        "summary_rows": shown[:SUMMARY_ROWS],
        "info": [f for f in findings if f["severity"] == "info"],
        "sections": by_section,
        "kernels": listed,
        "kernels_left": max(0, len(kernels) - 100),
        "charts": {
            "budget": Markup(charts.budget_svg(model.get("timeline")) or ""),
            "critical_path": Markup(charts.critical_path_svg(model.get("timeline")) or ""),
            "phases": Markup(charts.phases_svg(model.get("timeline")) or ""),
            "work": Markup(charts.work_svg(model.get("timeline")) or ""),
            "roofline": Markup(charts.roofline_svg(kernels, list(dict.fromkeys(
                f["kernel_id"] for f in shown if f["kernel_id"] is not None))) or ""),
            "top_kernels": Markup(charts.top_kernels_svg(kernels) or ""),
            "utilization": Markup(charts.utilization_svg(model.get("gpu_metrics")) or ""),
            "devices": Markup(charts.devices_svg((model.get("timeline") or {}).get("devices") or []) or ""),
            "ranges": Markup(charts.ranges_svg((model.get("timeline") or {}).get("ranges") or []) or ""),
        },
        "pygments_css": HtmlFormatter(style="friendly").get_style_defs("pre"),
        "second_opinion": second_opinion(model),
    }


def second_opinion(model: dict) -> list[dict]:
    """Per kernel: our first finding beside NVIDIA's highest-rated rule (NVIDIA's own ranking)."""
    ours = {}
    for f in model["findings"]:
        if f["kernel_id"] is not None and f["severity"] != "info":
            ours.setdefault(f["kernel_id"], f)
    theirs: dict = {}
    for rule in model.get("nvidia_rules", []):
        if rule["type"] not in ("optimization", "warning"):
            continue
        theirs.setdefault(rule["kernel_id"], []).append(rule)
    rows = []
    for kernel in model["kernels"]:
        rules = sorted(theirs.get(kernel["id"], []), key=lambda r: -(r["estimated_speedup_pct"] or 0))
        if not rules and kernel["id"] not in ours:
            continue
        rows.append({"kernel": kernel, "ours": ours.get(kernel["id"]), "theirs": rules[:3]})
    return rows


def render(model: dict) -> str:
    return environment().get_template("report.html.j2").render(**view(model))
