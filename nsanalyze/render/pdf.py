"""PDF: the HTML report through WeasyPrint, with the template's print CSS (page numbers, no split findings)."""

from __future__ import annotations

import logging

from nsanalyze.render.html import render as render_html


def render(model: dict) -> bytes:
    from weasyprint import HTML

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    return HTML(string=render_html(model), base_url=None).write_pdf()
