"""SARIF 2.1.0 for GitHub code scanning, and GitHub workflow annotations: findings with source lines."""

from __future__ import annotations

import json
import re

from nsanalyze import __version__
from nsanalyze.render.format import visible
from nsanalyze.render.locations import Locator, placed_locations

LEVEL = {"high": "error", "medium": "warning", "low": "note", "info": "note"}
_path_map: list[tuple[str, str]] = []


def set_paths(path_map=()) -> None:
    """`--path-map OLD=NEW` pairs for the locations of the reports written next (the CLI sets them)."""
    _path_map[:] = list(path_map)


def _located(model: dict):
    """(finding, relative path, line, note): locations relative to the working directory, CUDA and system
    headers attributed to the user's calling line or left out (render/locations.py)."""
    from pathlib import Path

    try:
        root = Path.cwd()
    except OSError:   # the working directory was deleted: no checkout to place findings on
        return
    for finding, path, line, note in placed_locations(model, Locator(root=root, path_map=list(_path_map))):
        path = inside(path)
        if path is not None:
            yield finding, path, line, note


def inside(path: str) -> str | None:
    """A location's path as one relative to the repository, or None when it leads outside it (`../`,
    an absolute or drive path): CI would place it on a file that is not the one the profile names."""
    import posixpath

    path = str(path).replace("\\", "/")
    if not path or path.startswith("/") or re.match(r"^[A-Za-z]:", path) or "\x00" in path:
        return None
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../") or normal == ".":
        return None
    return normal


def uri(path: str) -> str:
    """A relative URI reference (RFC 3986): every character but unreserved ones and `/` percent-encoded,
    so spaces, `#`, `?`, `%` and line breaks in a path stay part of the path."""
    from urllib.parse import quote

    return quote(path, safe="/")


def _message(finding: dict, note: str | None) -> str:
    text = f"{finding['kernel_name'] or 'program'}: {finding['title']}"
    return visible(text + (f" ({note})" if note else ""))


def _profile_uri(path: str) -> str:
    """The profile as SARIF's artifact: relative to the working directory where it lies inside it, else an
    absolute file URI (CI shows it as a file outside the checkout)."""
    import os
    from pathlib import Path

    try:
        absolute = Path(os.path.abspath(path))
        relative = inside(absolute.relative_to(Path.cwd()).as_posix())
    except ValueError:
        relative = None
    except FileNotFoundError:   # the working directory is gone: no checkout to be relative to
        absolute, relative = Path(path), None
    return uri(relative) if relative else absolute.as_uri()


def _profile_result(model: dict, finding: dict, index: dict) -> dict:
    """A finding without a source line (a program finding of an nsys export or Kineto trace, a kernel
    finding of a report without source counters): its location is the profile it was read from, with the
    kernel, the NVTX range or the steps it judges as a logical location. Line 1 stands for the whole file
    (GitHub code scanning needs a line); the fingerprint is the check, the scope and the profile's name, so
    a rerun on the next commit is the same alert."""
    import hashlib
    from pathlib import PurePath

    from nsanalyze.render.format import duration
    from nsanalyze.render.scope import finding_scope

    scope = finding_scope(model, finding)
    profile = str(scope["profile"] or "profile")
    name = visible(scope["name"])
    text = visible(f"{finding['kernel_name'] or 'program'}: {finding['title']} ({name}; saves "
                   f"{duration(finding.get('estimated_savings_ns'))}, {finding['estimated_speedup']:.0%} of the "
                   f"{'kernel' if scope['kind'] == 'function' else 'window'})")
    key = "\x00".join((finding["check"], scope["key"], PurePath(profile).name))
    return {
        "ruleId": finding["check"], "ruleIndex": index.get(finding["check"], 0), "level": LEVEL[finding["severity"]],
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _profile_uri(profile)},
                                            "region": {"startLine": 1}},
                       "logicalLocations": [{"name": name, "kind": scope["kind"],
                                             "fullyQualifiedName": visible(f"{PurePath(profile).name}::{scope['name']}")}]}],
        "partialFingerprints": {"nsanalyzeFinding/v1": hashlib.sha256(key.encode()).hexdigest()[:32]},
    }


def project_urls() -> dict[str, str]:
    """The URLs the installed package declares ([project.urls] in pyproject.toml): `Homepage`,
    `Documentation`. None declared: SARIF carries none rather than a made-up one."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        entries = metadata("nsanalyze").get_all("Project-URL") or []
    except PackageNotFoundError:
        return {}
    return {label.strip(): url.strip() for label, _, url in (e.partition(",") for e in entries)}


def render(model: dict) -> str:
    from nsanalyze.checks import all_checks

    urls = project_urls()
    docs = urls.get("Documentation")  # docs/checks.md: each check's section is its id
    rules = [{"id": c.id, "name": c.name, "shortDescription": {"text": c.title},
              "help": {"text": c.speedup_model, "markdown": c.advice},
              **({"helpUri": f"{docs}#{c.id}"} if docs else {})} for c in all_checks()]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    located = list(_located(model))
    results = [{
        "ruleId": f["check"], "ruleIndex": index.get(f["check"], 0), "level": LEVEL[f["severity"]],
        "message": {"text": f"{_message(f, note)} (estimated {f['estimated_speedup']:.0%} of the kernel)"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(path)},
                                            "region": {"startLine": line}}}],
    } for f, path, line, note in located]
    placed = {id(f) for f, *_ in located}
    results += [_profile_result(model, f, index) for f in model["findings"] if id(f) not in placed]
    sarif = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
             "runs": [{"tool": {"driver": {"name": "nsanalyze", "version": __version__, "rules": rules,
                                           **({"informationUri": urls["Homepage"]} if "Homepage" in urls else {})}},
                       "results": results}]}
    return json.dumps(sarif, indent=2)


def _escape_property(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").replace(":", "%3A").replace(",", "%2C")


def _escape_data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_annotations(model: dict) -> list[str]:
    """One `::warning file=PATH,line=N,title=CHECK::MESSAGE` workflow command per finding that CI can
    place (its first location; the finding's other lines in that file named in the message), then one
    `::warning title=CHECK::MESSAGE` per finding above info that it cannot place, escaped
    per GitHub's rules: `%`, CR and LF in the message, and `:` and `,` too in the properties. A warning
    whatever the severity (given in the message): `::error` made a run's located findings read as
    failures of the step, and `::notice` hid them from the checks' summary."""
    first: dict[int, list] = {}
    for f, path, line, note in _located(model):
        entry = first.setdefault(id(f), [f, path, line, note, []])
        if path == entry[1] and line != entry[2]:
            entry[4].append(line)
    lines = []
    for f, path, line, note, more in first.values():
        also = f"; also line{'s' if len(more) > 1 else ''} {', '.join(map(str, more))}" if more else ""
        message = f"{_message(f, note)} [{f['severity']}]{also}"
        lines.append(f"::warning file={_escape_property(visible(path))},line={line},"
                     f"title={_escape_property(visible(f['check']))}::{_escape_data(message)}")
    # findings above info that no source line places (a program finding, a kernel without line info): one
    # annotation of the run each, so that the first finding is never the one CI leaves out
    for f in model["findings"]:
        if id(f) not in first and f["severity"] != "info":
            lines.append(f"::warning title={_escape_property(visible(f['check']))}::"
                         f"{_escape_data(_message(f, None) + ' [' + f['severity'] + ']')}")
    return lines
