"""PDF: the HTML report through WeasyPrint, laid out for paper.

The HTML is the on-screen report; for print it gets its own stylesheet (PRINT_CSS: tables of fixed
layout that wrap long kernel names inside the margins instead of running off the page, a smaller
type, finding cards that may break across pages rather than leave half pages empty), and a model
shaped for reading on paper: "Not judged" is one row per check (the kernels it covers, counted and
named) instead of one row per kernel and check, and NVIDIA's second opinion keeps each kernel's two
rules of largest estimated speedup, their messages cut to two lines (the HTML holds them all).
"""

from __future__ import annotations

import copy
import logging

from nsanalyze.render.format import not_judged_groups
from nsanalyze.render.html import render as render_html

PRINT_CSS = """<style>
@page { size: A4; margin: 12mm 11mm 14mm 11mm; }
body { font-size: 8.6pt; line-height: 1.32; max-width: none; padding: 0; }
h1 { font-size: 15pt; } h2 { font-size: 12pt; margin-top: 1.1em; } h3, h4 { font-size: 10pt; }
table { table-layout: fixed; width: 100%; max-width: 100%; font-size: 7.8pt; }
th, td { overflow-wrap: anywhere; word-break: break-word; padding: .15em .3em; }
th { font-size: 7pt; overflow-wrap: normal; word-break: normal; hyphens: auto; }
td.num { white-space: normal; overflow-wrap: normal; word-break: keep-all; }
table.kernels th:first-child, table.kernels td:first-child { width: 24%; }
table.not-judged th:nth-child(1), table.not-judged td:nth-child(1) { width: 18%; }
table.not-judged th:nth-child(2), table.not-judged td:nth-child(2) { width: 34%; }
table.findings th:nth-child(1), table.findings td:nth-child(1) { width: 4%; }
table.findings th:nth-child(2), table.findings td:nth-child(2) { width: 9%; }
table.findings th:nth-child(3), table.findings td:nth-child(3) { width: 15%; }
table.findings th:nth-child(4), table.findings td:nth-child(4) { width: 17%; }
table.findings th:nth-child(5), table.findings td:nth-child(5) { width: 9%; }
table.nvidia th:nth-child(1), table.nvidia td:nth-child(1) { width: 18%; }
table.nvidia th:nth-child(2), table.nvidia td:nth-child(2) { width: 20%; }
table.evidence td:nth-child(1) { width: 40%; } table.evidence td:nth-child(2) { width: 22%; }
table.waits th:nth-child(1), table.waits td:nth-child(1), table.gaps th:nth-child(1), table.gaps td:nth-child(1) { width: 8%; }
table.waits th:nth-child(2), table.waits td:nth-child(2), table.gaps th:nth-child(2), table.gaps td:nth-child(2) { width: 11%; }
table.kernels th, table.kernels td { hyphens: none; }
code, pre { font-size: 7.2pt; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; padding: .35em .5em; margin: .3em 0; }
.finding { break-inside: auto; page-break-inside: auto; padding: .2em .6em; margin: .6em 0; }
.finding h4, .finding .title { break-after: avoid; }
tr, pre { break-inside: avoid; page-break-inside: avoid; }
figure { margin: .5em 0; break-inside: avoid; } figure svg { max-width: 100%; max-height: 95mm; height: auto; }
</style>"""
RULE_MESSAGE_CHARS = 140
RULES_PER_KERNEL = 2
NAMED_KERNELS = 6


def not_judged_by_check(entries: list[dict]) -> list[dict]:
    """One entry per check: the kernels it could not judge (counted, the first few named), the
    concepts missing for any of them, and the options that would collect them."""
    rows = []
    for row in not_judged_groups(entries):
        kernels = row["kernels"]
        named = ", ".join(kernels[:NAMED_KERNELS]) + (f" and {len(kernels) - NAMED_KERNELS} more"
                                                      if len(kernels) > NAMED_KERNELS else "")
        label = named if len(kernels) == 1 else f"{len(kernels)} kernels: {named}"
        rows.append({"check": row["check"], "kernel_name": label, "missing": row["missing"],
                     "collect": " or ".join(row["collect"]), "kernels": len(kernels)})
    return rows


def print_model(model: dict) -> dict:
    """The report model as the PDF shows it (the caller's model is left as it is)."""
    shaped = copy.copy(model)
    shaped["not_judged"] = not_judged_by_check(model.get("not_judged") or [])
    rules, per_kernel = [], {}
    ranked = sorted(model.get("nvidia_rules") or [], key=lambda r: -(r.get("estimated_speedup_pct") or 0))
    for rule in ranked:
        per_kernel[rule.get("kernel_id")] = per_kernel.get(rule.get("kernel_id"), 0) + 1
        if per_kernel[rule.get("kernel_id")] > RULES_PER_KERNEL:
            continue
        message = rule.get("message") or ""
        if len(message) > RULE_MESSAGE_CHARS:
            message = message[:RULE_MESSAGE_CHARS].rsplit(" ", 1)[0] + " …"
        rules.append({**rule, "message": message})
    shaped["nvidia_rules"] = rules
    return shaped


def not_judged_section(rows: list[dict]) -> str:
    """The "Not judged" section for paper: one row per check, every kernel it covers counted and the
    first few named in full."""
    from markupsafe import escape

    body = "".join(
        f"<tr><td><code>{escape(r['check'])}</code></td><td>{escape(r['kernel_name'])}</td>"
        f"<td>{escape(', '.join(r['missing']))}</td><td><code>{escape(r['collect'])}</code></td></tr>" for r in rows)
    return ('<section id="not-judged"><h2>Not judged</h2><p>Checks that could not judge some kernels for lack of '
            'metrics, one row per check, with the profiler options that collect them.</p>'
            '<table class="not-judged"><thead><tr><th>check</th><th>kernels</th><th>missing</th><th>collect with</th>'
            f"</tr></thead><tbody>{body}</tbody></table></section>")


def print_html(model: dict) -> str:
    import re

    shaped = print_model(model)
    html = render_html(shaped)
    if shaped["not_judged"]:
        html = re.sub(r'<section id="not-judged">.*?</section>', lambda _: not_judged_section(shaped["not_judged"]),
                      html, count=1, flags=re.DOTALL)
    head_end = html.find("</head>")
    return html[:head_end] + PRINT_CSS + html[head_end:] if head_end >= 0 else PRINT_CSS + html


def render(model: dict) -> bytes:
    """Fontconfig, under WeasyPrint, writes its complaints to file descriptor 2 itself ("Fontconfig
    error: Cannot load default config file", "No writable cache directories" where HOME or
    XDG_CACHE_HOME cannot be written): fd 2 goes to a temporary file while it runs, as for NVIDIA's
    reader, so stderr keeps nsanalyze's own lines."""
    from nsanalyze.native_stderr import NativeStderr

    html = print_html(model)
    with NativeStderr():
        from weasyprint import HTML

        logging.getLogger("weasyprint").setLevel(logging.ERROR)
        logging.getLogger("fontTools").setLevel(logging.ERROR)
        return HTML(string=html, base_url=None).write_pdf()
