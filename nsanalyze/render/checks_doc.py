"""`nsanalyze checks`: every check documented from its own module (docstring and metadata)."""

from __future__ import annotations

from nsanalyze.checks import all_checks, kernel_checks


def checks_summary() -> str:
    lines = []
    for check in all_checks():
        scope = "kernel" if check in kernel_checks() else "program"
        lines.append(f"{check.ID}  [{scope}]  {check.TITLE}")
        lines.append(f"    reads: {', '.join(check.REQUIRES + tuple(getattr(check, 'OPTIONAL', ())))}")
        for key, threshold in check.THRESHOLDS.items():
            lines.append(f"    {check.ID}.{key} = {threshold.default:g}  ({threshold.why})")
        lines.append(f"    speedup model: {check.SPEEDUP_MODEL}")
        lines.append("")
    lines.append("Full documentation with examples: nsanalyze checks --markdown")
    return "\n".join(lines)


def check_markdown(check) -> str:
    doc = (check.__doc__ or "").strip()
    title, _, body = doc.partition("\n")
    thresholds = "\n".join(f"| `{check.ID}.{k}` | {t.default:g} | {t.why} |" for k, t in check.THRESHOLDS.items())
    return (f"<a id=\"{check.ID}\"></a>\n\n## `{check.ID}`: {check.TITLE}\n\n{title}\n{body.replace('## ', '### ')}\n\n"
            f"**Reads:** {', '.join(f'`{c}`' for c in check.REQUIRES)}"
            + (f"; optionally {', '.join(f'`{c}`' for c in getattr(check, 'OPTIONAL', ()))}" if getattr(check, 'OPTIONAL', ()) else "")
            + f"\n\n**Estimated speedup:** {check.SPEEDUP_MODEL}\n\n"
            f"| threshold | default | why |\n|---|---|---|\n{thresholds}\n\n### Advice\n\n{check.ADVICE}\n")


def checks_markdown() -> str:
    return "# nsanalyze checks\n\n" + "\n".join(check_markdown(c) for c in all_checks())
