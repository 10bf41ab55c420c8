"""GitHub-flavoured Markdown for pull-request comments, under GitHub's 65,536-character limit."""

from __future__ import annotations

import re

from nsanalyze.render.format import (collect_text, distinct_names, duration, evidence_value, gpu_label, health_line,
                                     is_command, threshold_text,
                                     next_limit_line,
                                     kernel_list_work_line, ncu_coverage_line, not_judged_groups, savings_text, scope_names, set_aside_note,
                                     several_gpus_line, shorten, show_invisible, visible, window_lines)

LIMIT = 65_000          # GitHub allows 65,536 characters per comment; keep a margin
DETAILED = 10           # findings with their advice folded in <details>
NAME_LIMIT = 300        # a GPU, path or kernel name shown in a line or a cell (the JSON keeps it whole)
LINE_LIMIT = 2_000      # a header line (window, steps, phases) before escaping
NOT_JUDGED_CHARS = 4_000   # the not-judged block's lines, past which the rest are counted
NOT_JUDGED_NAMED = 8    # concepts named in a not-judged check's line (all are in the JSON)
INFO_CHARS = 3_000      # the info block's lines, past which the rest are counted


def escape(text) -> str:
    """Text from the profiled program (kernel names, NVTX) must not become Markdown or HTML."""
    if text is None:
        return ""
    text = visible(str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " "))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for char in "\\`*_{}[]()#+-!|~":
        text = text.replace(char, "\\" + char)
    # @mentions and bare links would notify people and link out from a PR comment: break them.
    text = text.replace("@", "&#64;")
    return re.sub(r"(?i)\b(https?|ftp|www)(:|\.)", lambda m: m.group(1) + "&#8203;" + m.group(2), text)


def bounded(lines: list[str], what: str = "line") -> str:
    """Lines of a comment (diff, trend) kept under LIMIT: whole lines in order until the next would pass
    it, then a line saying how many were left out. Linear in the lines; a line too long on its own ends
    the comment there (names are shortened to NAME_LIMIT before, so only a header can be)."""
    kept, size = [], 0
    for index, line in enumerate(lines):
        if size + len(line) + 1 > LIMIT - 200:
            left = len(lines) - index
            kept += ["", f"_{left} more {what}(s) left out of this comment; see the HTML or JSON report._"]
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept) + "\n"


def name(text) -> str:
    """A kernel, range, GPU or path in a line or cell: escaped, and shortened to NAME_LIMIT characters."""
    return escape(shorten(None if text is None else str(text), NAME_LIMIT))


def _one_line(text) -> str:
    return visible(str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " "))


def code(text, in_table: bool = False) -> str:
    """A code span: no backslash escapes inside (GitHub would show them), fenced by more backticks than
    the text holds in a row; `|` escaped only in a table cell, where GFM needs it even in code."""
    if text is None:
        return ""
    text = _one_line(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.strip()) else ""
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(text) -> str:
    """Text inside an HTML block such as <summary>: Markdown is not read there, so HTML escapes only."""
    if text is None:
        return ""
    text = _one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    text = text.replace("@", "&#64;")
    return re.sub(r"(?i)\b(https?|ftp|www)(:|\.)", lambda m: m.group(1) + "&#8203;" + m.group(2), text)


def inert_advice(advice) -> str:
    """A finding's advice, Markdown the checks write with names from the profile in code spans. Advice
    holds no link, image or HTML of its own: should a name still bring one (a check that forgot its code
    span), the whole advice is shown as escaped text, so no comment carries a link the profile chose."""
    from markdown_it import MarkdownIt

    text = show_invisible(advice)
    live = {"link_open", "image", "html_inline", "html_block"}
    tokens = MarkdownIt("commonmark").parse(text)
    if not any(t.type in live or any(c.type in live for c in t.children or ()) for t in tokens):
        return text
    return "\n".join(escape(line) for line in text.splitlines())


def _table(findings: list[dict], model: dict | None = None, made: dict | None = None,
           scopes: list[str] | None = None) -> list[str]:
    """The findings' table; `made` keeps rows already written (by finding and shown name) for a caller
    that writes the table again with fewer rows, `scopes` the findings' scope names (scope_names) made once."""
    lines = ["| # | severity | check | kernel / scope | saves | finding |", "|---|---|---|---|---|---|"]
    names = distinct_names(scope_names(model or {}, findings) if scopes is None else scopes, NAME_LIMIT)
    made = {} if made is None else made
    for f, name in zip(findings, names):
        line = made.get((id(f), name))
        if line is None:
            line = made[id(f), name] = (f"| {f['rank']} | {f['severity']} | `{f['check']}` | "
                                        f"{escape(name)} | "
                                        f"{savings_text(f, model)} | {escape(f['title'])} |")
        lines.append(line)
    return lines


def _details(f: dict) -> str:
    evidence = "\n".join(f"- `{k}`: {escape(evidence_value(v))}" + (f" ({escape(threshold_text(v))})"
                                                                    if "threshold" in v else "")
                         for k, v in f["evidence"].items() if isinstance(v, dict))
    source = "\n".join("- " + code(f"{s['file']}:{s['line']}") for s in f.get("source") or [])
    notes = "\n".join(f"- {escape(shorten(note, LINE_LIMIT))}" for note in f.get("notes") or [])
    return (f"<details><summary>{f['rank']}. <code>{html_text(f['check'])}</code> on "
            f"{html_text(shorten(f['kernel_name'] or 'the program', NAME_LIMIT))}: {html_text(f['title'])}</summary>\n\n{evidence}\n\n" + (f"Source:\n{source}\n\n" if source else "")
            + (f"Notes:\n{notes}\n\n" if notes else "")
            + f"{inert_advice(f['advice'])}\n\n</details>")


def _first(items: list[str], limit: int = NOT_JUDGED_NAMED) -> list[str]:
    return items[:limit] + ([f"and {len(items) - limit} more"] if len(items) > limit else [])


def _not_judged(model: dict) -> str:
    """The checks that could not judge, folded in one <details>: its summary names them and what to collect, its
    lines what each lacks and the options that collect it. In every report that has them, beside findings too: a
    report that found small-grid must still say that uncoalesced-global could not look (the HTML and JSON hold
    one row per kernel and check)."""
    groups = not_judged_groups(model.get("not_judged") or [])
    if not groups:
        return ""
    checks = [g["check"] for g in groups]
    collect = collect_text(model)
    summary = (f"Not judged for lack of metrics: {len(checks)} check{'s' if len(checks) != 1 else ''} "
               f"({', '.join(checks)})" + (f"; collect {collect}" if collect else ""))
    lines, size = [], 0
    for index, g in enumerate(groups):
        if size > NOT_JUDGED_CHARS:
            lines.append(f"- and {len(groups) - index} more checks: see the HTML or JSON report")
            break
        kernels = [k for k in g["kernels"] if k != "program"]
        scope = ", ".join((["the program"] if len(kernels) < len(g["kernels"]) else [])
                          + ([f"{len(kernels)} kernel{'s' if len(kernels) != 1 else ''}"] if kernels else []))
        lacks = ", ".join(code(c) if not c.startswith("and ") else c for c in _first(g["missing"]))
        wanted = " or ".join(code(shorten(c, 300)) if is_command(c) else escape(shorten(c, 300))
                             for c in g["collect"][:2])
        lines.append(f"- {code(g['check'])} ({scope}): lacks {lacks or 'its metrics'}"
                     + (f"; collect with {wanted}" if wanted else ""))
        size += len(lines[-1]) + 1
    return (f"<details><summary>{html_text(summary)}</summary>\n\n" + "\n".join(lines) + "\n\n</details>")


def _info_saving(finding: dict, model: dict) -> str:
    """What an info finding saves, before its title, which a line cuts: blind57_lm's unfused-normalization told of
    7.32 ms a step of extra passes, and its saving, none on the replayed steps, was past the cut (a user read)."""
    notes = finding.get("notes") or []
    if any(n.startswith("saving not measured") for n in notes):
        return "saving not measured"
    # (a check that could not estimate its saving saves an unknown amount, not nothing: final128's 1-thread blocks,
    # 7 ms of kernel time, read "saves nothing" in a user read)
    if not finding.get("estimated_savings_ns") and any(n.startswith(("no savings estimated", "no time estimated"))
                                                       for n in notes):
        return "saving not estimated"
    if any("outside the window" in n for n in notes):
        return "outside the window"
    after = _after_first_text(finding, model)
    if not finding.get("estimated_savings_ns"):
        return ("saves nothing on the replayed steps" if any(n.startswith("savings: the replay") for n in notes)
                else "saves nothing") + after
    return f"saves {savings_text(finding, model)}{after}"


def _after_first_text(finding: dict, model: dict) -> str:
    """What the finding saves once the first finding's change is made (rank._after_first), where it says: an info
    finding the host holds back now may be the next change worth making."""
    value = (finding.get("evidence") or {}).get("savings_after_first_ns")
    if not isinstance(value, dict) or not value.get("value") or not isinstance(value.get("after"), str):
        return ""
    first = value["after"]
    steps = (model.get("timeline") or {}).get("steps") or {}
    count = steps.get("count") if isinstance(steps, dict) else None
    figure = f"{duration(value['value'] / count)} a step" if count else duration(value["value"])
    return f", {figure} once {first}'s change is made"


def _info(findings: list[dict], model: dict) -> str:
    """The findings at info, folded in one <details> a line each: the comment ranks only what is worth a change,
    but says what else the HTML and JSON report hold (a profile's content must not depend on the format)."""
    if not findings:
        return ""
    lines, size = [], 0
    names = distinct_names(scope_names(model, findings), NAME_LIMIT)
    for index, (f, scope) in enumerate(zip(findings, names)):
        if size > INFO_CHARS:
            lines.append(f"- and {len(findings) - index} more: see the HTML or JSON report")
            break
        lines.append(f"- {f['rank']}. {code(f['check'])} on {escape(scope)}, {escape(_info_saving(f, model))}: "
                     f"{escape(shorten(f['title'], 300))}")
        size += len(lines[-1]) + 1
    count = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}"
    # (a finding whose saving was not measured is not known to be small: alloc_churn's Kineto trace listed its
    # optimizer, 35% of the GPU's kernel time, as below what is worth a change, a user read)
    unpriced = any(_info_saving(f, model) in ("saving not measured", "saving not estimated") for f in findings)
    replaced = any(f["evidence"].get("replaced_by") for f in findings)   # rank._replaced_by: a program change's
    why = "below what is worth a change now" + (", or not priced" if unpriced else "") \
        + (", or on kernels a program finding's change replaces" if replaced else "")
    return (f"<details><summary>Also found, at info ({why}): {count}</summary>\n\n"
            + "\n".join(lines) + "\n\n</details>")


def _rows_that_fit(head: list[str], findings: list[dict], model: dict, budget: int = LIMIT - 200) -> int:
    """The most rows, first ones first and fewer than all, whose table (without details) fits under LIMIT - 200
    beside the header; 0 when none does. Where no two scope names read alike once cut to NAME_LIMIT, each row
    reads the same in every shorter table (distinct_names changes only names that read alike), so one table
    and its running length answer (a table of 2,000 findings written again for each row dropped took 10 s).
    Otherwise rows are dropped one at a time, each table written anew."""
    scopes = scope_names(model, findings)
    if len({shorten(s, NAME_LIMIT) for s in scopes}) == len(scopes):
        lines = _table(findings, model, scopes=scopes)
        size = sum(len(line) + 1 for line in head + [""] + lines[:2])   # and the blank line that ends the text
        kept = 0
        for line in lines[2:-1]:   # at most all rows but the last
            if size + len(line) + 1 > budget:
                break
            size += len(line) + 1
            kept += 1
        return kept
    made: dict = {}
    kept = len(findings)
    while kept:
        kept -= 1
        if len("\n".join(head + [""] + _table(findings[:kept], model, made, scopes[:kept]) + [""])) <= budget:
            break
    return kept


def render(model: dict) -> str:
    head = ["## nsanalyze report", ""]
    for p in model["profiles"]:
        head.append(f"- {p['kind']}: {code(shorten(str(p['path']), NAME_LIMIT))} "
                    f"({escape(shorten(gpu_label(p), NAME_LIMIT + 20))})")
        clock = p.get("clock_control") or {}
        if clock.get("mode") == "locked":   # as on the terminal: why clock-throttling was not judged
            head.append(f"- Clock control: {escape(shorten(clock['reason'], LINE_LIMIT))}; clock\\-throttling "
                        "not judged; `ncu --clock-control none` measures it")
        elif clock.get("too_short"):
            head.append(f"- Clock: {escape(shorten(clock['reason'], LINE_LIMIT))}; clock\\-throttling not judged")
        if p.get("set_aside_values") and p["kind"] == "ncu":
            head.append(f"- {escape(shorten(set_aside_note(p['set_aside_values']), LINE_LIMIT))}")
    if several_gpus_line(model):
        head.append(f"- {escape(several_gpus_line(model))}")
    if ncu_coverage_line(model):
        head.append(f"- {escape(ncu_coverage_line(model))}")
    timeline = model.get("timeline")
    if timeline:
        head += [f"- {escape(shorten(line, LINE_LIMIT))}" for line in window_lines(timeline)]
    elif model.get("work"):
        head.append(f"- {escape(kernel_list_work_line(model))}")
    if model.get("gpu_metrics", {}).get("headline"):
        head.append(f"- {model['gpu_metrics']['headline']}")
    findings = [f for f in model["findings"] if f["severity"] != "info"]
    after = next_limit_line(model) if findings else None
    body = [""] + (_table(findings, model) if findings else [escape(health_line(model))]) + \
        (["", escape(after)] if after else []) + [""]
    not_judged = _not_judged(model)
    info = _info([f for f in model["findings"] if f["severity"] == "info"], model)
    # the info and not-judged blocks (bounded, a line a finding or check) always end the comment
    budget = LIMIT - 200 - len(not_judged) - len(info)
    text = "\n".join(head + body)
    shown = 0
    for f in findings[:DETAILED]:
        block = "\n" + _details(f) + "\n"
        if len(text) + len(block) > budget:
            break
        text += block
        shown += 1
    left = len(findings) - shown
    if len(text) > budget and findings:   # a table too long on its own: rows dropped from the end
        kept = _rows_that_fit(head, findings, model, budget)
        left += len(findings) - kept
        text = "\n".join(head + [""] + _table(findings[:kept], model, scopes=scope_names(model, findings[:kept])) + [""])
    if len(text) > budget:   # the header alone too long (many profiles): cut at a line, always ends
        text = text[: text.rfind("\n", 0, budget - 200) + 1] + "\n_The header was cut to fit a comment._\n"
    if left > 0:
        text += f"\n_{left} more finding(s) left out of this comment; see the HTML or JSON report._\n"
    for block in (info, not_judged):
        if block:
            text += "\n" + block + "\n"
    return text
