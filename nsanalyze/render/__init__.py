"""Renderers: each turns the report model (a dict, the JSON contract) into one format.

`write_report(model, target)` picks the renderer from the file extension and writes through a
temporary file renamed into place, so an interrupted run never leaves half a report.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from nsanalyze.errors import InputError

FORMATS = {".json": "json", ".md": "markdown", ".html": "html", ".htm": "html", ".pdf": "pdf", ".sarif": "sarif"}


def render_bytes(model: dict, fmt: str) -> bytes:
    if fmt == "json":
        from nsanalyze.render.json_report import render
    elif fmt == "markdown":
        from nsanalyze.render.markdown import render
    elif fmt == "html":
        from nsanalyze.render.html import render
    elif fmt == "pdf":
        from nsanalyze.render.pdf import render
    elif fmt == "sarif":
        from nsanalyze.render.sarif import render
    else:  # pragma: no cover - guarded by format_for
        raise ValueError(fmt)
    output = render(model)
    return output if isinstance(output, bytes) else output.encode("utf-8")


def format_for(target: str) -> str:
    if target == "-":
        return "json"
    suffix = Path(target).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(target, f"unknown report format {suffix or '(no extension)'}; use one of "
                                  + ", ".join(sorted(FORMATS)))
    return FORMATS[suffix]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_report(model: dict, target: str) -> None:
    write_bytes(render_bytes(model, format_for(target)), target)


def write_bytes(data: bytes, target: str) -> None:
    """Writes to stdout (`-`) or to a temporary file renamed into place: never half a report."""
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
