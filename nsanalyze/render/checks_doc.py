"""`nsanalyze checks`: every check documented from its own module (docstring and declaration).

The documents that list checks are generated from the registry: docs/checks.md (`checks --markdown`) and
the table of check ids in docs/contract.md. `python -m nsanalyze.render.checks_doc` rewrites both
(scripts/new_check.py runs it); tests/test_contract.py fails while either is stale.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from nsanalyze.checks import all_checks

IDS_BEGIN = "<!-- check ids: generated from the registry by `python -m nsanalyze.render.checks_doc` -->"
IDS_END = "<!-- end of check ids -->"


def checks_summary() -> str:
    lines = []
    for check in all_checks():
        lines.append(f"{check.id}  [{check.kind}]  {check.title}")
        lines.append(f"    reads: {', '.join(check.requires + check.optional)}")
        for key, threshold in check.thresholds.items():
            lines.append(f"    {check.id}.{key} = {threshold.default:g}  ({threshold.why})")
        lines.append(f"    speedup model: {check.speedup_model}")
        lines.append("")
    lines.append("Full documentation with examples: nsanalyze checks --markdown")
    return "\n".join(lines)


def check_markdown(check) -> str:
    doc = check.doc.strip()
    title, _, body = doc.partition("\n")
    thresholds = "\n".join(f"| `{check.id}.{k}` | {t.default:g} | {t.why} |" for k, t in check.thresholds.items())
    return (f"<a id=\"{check.id}\"></a>\n\n## `{check.id}`: {check.title}\n\n{title}\n{body.replace('## ', '### ')}\n\n"
            f"**Reads:** {', '.join(f'`{c}`' for c in check.requires)}"
            + (f"; optionally {', '.join(f'`{c}`' for c in check.optional)}" if check.optional else "")
            + f"\n\n**Estimated speedup:** {check.speedup_model}\n\n"
            f"| threshold | default | why |\n|---|---|---|\n{thresholds}\n\n### Advice\n\n{check.advice}\n")


def checks_markdown() -> str:
    return "# nsanalyze checks\n\n" + "\n".join(check_markdown(c) for c in all_checks())


def check_ids_markdown() -> str:
    """The table of check ids users rely on (--skip, --set ID.key, a finding's `check`), for docs/contract.md."""
    rows = "\n".join(f"| `{c.id}` | {c.kind} | {c.section} | {c.title} |" for c in all_checks())
    return f"{IDS_BEGIN}\n| id | kind | report section | title |\n|---|---|---|---|\n{rows}\n{IDS_END}"


def with_check_ids(contract: str) -> str:
    """docs/contract.md's text with its table of check ids regenerated."""
    pattern = re.compile(re.escape(IDS_BEGIN) + ".*?" + re.escape(IDS_END), flags=re.S)
    if not pattern.search(contract):
        raise ValueError(f"docs/contract.md has no generated check-id table ({IDS_BEGIN})")
    return pattern.sub(lambda _: check_ids_markdown(), contract)


def write_docs(docs: Path) -> list[Path]:
    """Rewrites the generated documents under `docs`; returns those that changed."""
    changed = []
    for path, text in ((docs / "checks.md", checks_markdown() + "\n"),
                       (docs / "contract.md", with_check_ids((docs / "contract.md").read_text()))):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs"
    for path in write_docs(root):
        print(f"wrote {path}")
