"""One format dispatch: every document nsanalyze writes goes through a registry of renderers.

A renderer has a name, the file extensions that choose it and `render(document) -> bytes`, as
coverage.py's reporters have one protocol. `RENDERERS[kind]` holds the formats of each kind of document
(`report`, `diff`, `trend`, `whatif`); `renderer_for(target, kind)` picks one from an output path (`-`
is JSON on stdout) or refuses the path in one line naming the formats that kind has. Adding a format
means one entry here and a module with its render function; the CLI asks nothing else. Each module is
imported only when its format is written (WeasyPrint, for the PDF, takes a second to import).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nsanalyze.errors import InputError


class Renderer(Protocol):
    name: str
    extensions: tuple[str, ...]

    def render(self, document: Any) -> bytes: ...


@dataclass(frozen=True)
class ModuleRenderer:
    """A renderer whose render function lives in a module, imported on first use."""

    name: str
    extensions: tuple[str, ...]
    module: str
    function: str = "render"

    @property
    def extension(self) -> str:
        return self.extensions[0]

    def render(self, document: Any) -> bytes:
        output = getattr(importlib.import_module(self.module), self.function)(document)
        return output if isinstance(output, bytes) else output.encode("utf-8")


def _formats(*renderers: ModuleRenderer) -> dict[str, ModuleRenderer]:
    return {r.name: r for r in renderers}


RENDERERS: dict[str, dict[str, ModuleRenderer]] = {
    "report": _formats(ModuleRenderer("json", (".json",), "nsanalyze.render.json_report"),
                       ModuleRenderer("markdown", (".md",), "nsanalyze.render.markdown"),
                       ModuleRenderer("html", (".html", ".htm"), "nsanalyze.render.html"),
                       ModuleRenderer("pdf", (".pdf",), "nsanalyze.render.pdf"),
                       ModuleRenderer("sarif", (".sarif",), "nsanalyze.render.sarif")),
    "diff": _formats(ModuleRenderer("json", (".json",), "nsanalyze.render.diff_report", "render_json"),
                     ModuleRenderer("markdown", (".md",), "nsanalyze.render.diff_report", "render_markdown"),
                     ModuleRenderer("html", (".html", ".htm"), "nsanalyze.render.diff_report", "render_html")),
    "trend": _formats(ModuleRenderer("json", (".json",), "nsanalyze.render.trend_report", "render_json"),
                      ModuleRenderer("markdown", (".md",), "nsanalyze.render.trend_report", "render_markdown"),
                      ModuleRenderer("html", (".html", ".htm"), "nsanalyze.render.trend_report", "render_html")),
    "whatif": _formats(ModuleRenderer("json", (".json",), "nsanalyze.render.whatif_report", "render_json")),
}


def _listed(extensions: list[str]) -> str:
    return extensions[0] if len(extensions) == 1 else ", ".join(extensions[:-1]) + " or " + extensions[-1]


def renderer_for(target: str, kind: str = "report") -> ModuleRenderer:
    """The renderer an output path asks for (`-`: JSON on stdout); an extension this kind of document has
    no renderer for is refused, naming the ones it has."""
    formats = RENDERERS[kind]
    if target == "-":
        return formats["json"]
    suffix = Path(target).suffix.lower()
    for renderer in formats.values():
        if suffix in renderer.extensions:
            return renderer
    known = [r.extension for r in formats.values()]
    if kind == "report":
        raise InputError(target, f"unknown report format {suffix or '(no extension)'}; use one of "
                                 + ", ".join(sorted(e for r in formats.values() for e in r.extensions)))
    raise InputError(target, f"{kind} reports are {_listed(known)}" + (", or - for stdout" if known == [".json"] else ""))


def render(document: Any, name: str, kind: str = "report") -> bytes:
    """`document` in the format `name` of its kind (json, markdown, html, pdf, sarif)."""
    return RENDERERS[kind][name].render(document)
