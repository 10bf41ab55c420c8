"""Settings from `[tool.nsanalyze]` in pyproject.toml, found as ruff finds its own: the nearest
pyproject.toml with a `[tool.nsanalyze]` table, from the working directory up. Command-line flags win.

    [tool.nsanalyze]
    fail-on = "high"              # as --fail-on
    window = "capture"            # as --window (steady | capture)
    skip = ["tail-effect"]        # checks that never run (as --skip)

    [tool.nsanalyze.thresholds]   # as --set CHECK.KEY=VALUE
    "bank-conflicts.min_conflict_share" = 0.2
"""

from __future__ import annotations

import math

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from nsanalyze.errors import InputError

SEVERITIES = ("high", "medium", "low", "info")
WINDOWS = ("steady", "capture")
KEYS = ("fail-on", "window", "skip", "thresholds")


@dataclass
class Settings:
    source: Path | None = None
    fail_on: str | None = None
    window: str | None = None
    skip: tuple[str, ...] = ()
    thresholds: dict[str, float] = field(default_factory=dict)


def find_pyproject(start: Path | None = None) -> Path | None:
    """The nearest pyproject.toml with a [tool.nsanalyze] table, from `start` (the working directory) up."""
    try:
        folder = (start or Path.cwd()).resolve()
    except OSError:   # the working directory was deleted: no project around it to read settings from
        return None
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file() and "nsanalyze" in _tool(path):
            return path
    return None


def _tool(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f"not valid TOML ({exc})") from None
    except UnicodeDecodeError:   # TOML is UTF-8: a file of other bytes was an internal error (exit 3)
        raise InputError(str(path), "not valid TOML (not UTF-8 text)") from None
    except OSError as exc:
        raise InputError(str(path), f"cannot be read ({exc.strerror})") from None
    tool = data.get("tool", {})
    return tool if isinstance(tool, dict) else {}


def load_settings(start: Path | None = None) -> Settings:
    path = find_pyproject(start)
    if path is None:
        return Settings()
    table = _tool(path)["nsanalyze"]
    where = f"{path}"
    if not isinstance(table, dict):
        raise InputError(where, "[tool.nsanalyze] must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise InputError(where, f"[tool.nsanalyze] has unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    settings = Settings(source=path)
    fail_on = table.get("fail-on")
    if fail_on is not None:
        if fail_on not in SEVERITIES:
            raise InputError(where, f"[tool.nsanalyze] fail-on = {fail_on!r}: expected one of {', '.join(SEVERITIES)}")
        settings.fail_on = fail_on
    window = table.get("window")
    if window is not None:
        if window not in WINDOWS:
            raise InputError(where, f"[tool.nsanalyze] window = {window!r}: expected one of {', '.join(WINDOWS)}")
        settings.window = window
    skip = table.get("skip", [])
    if isinstance(skip, str):
        skip = [skip]
    if not isinstance(skip, list) or not all(isinstance(s, str) for s in skip):
        raise InputError(where, "[tool.nsanalyze] skip must be a list of check ids")
    settings.skip = tuple(skip)
    check_skip(settings.skip, where)
    thresholds = table.get("thresholds", {})
    if not isinstance(thresholds, dict):
        raise InputError(where, "[tool.nsanalyze.thresholds] must be a table of \"CHECK.KEY\" = number")
    for key, value in thresholds.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(where, f"[tool.nsanalyze.thresholds] {key!r} = {value!r}: "
                                    "expected a number (finite: not nan or inf)")
        settings.thresholds[key] = float(value)
    from nsanalyze.checks import validate_overrides

    try:
        validate_overrides(settings.thresholds)
    except ValueError as exc:
        raise InputError(where, f"[tool.nsanalyze.thresholds]: {exc}") from None
    return settings


def check_skip(skip, where: str) -> None:
    from nsanalyze.checks import all_checks

    known = {c.id for c in all_checks()}
    unknown = sorted(set(skip) - known)
    if unknown:
        raise InputError(where, f"unknown check(s) to skip: {', '.join(unknown)}; `nsanalyze checks` lists them")


def apply_skip(model: dict, skip) -> dict:
    """The report says which checks were skipped (analyze's Options.skip: they never ran)."""
    if skip:
        model["skipped_checks"] = sorted(set(skip))
    return model


def effective_summary(settings: Settings, cli_thresholds: dict[str, float] | None = None, cli_skip=()) -> str:
    """`nsanalyze checks`: every check with the thresholds in effect here, each overridden one with
    where its value comes from and the default, and the checks skipped."""
    from nsanalyze.checks import all_checks

    thresholds = {**settings.thresholds, **(cli_thresholds or {})}
    skip = set(settings.skip) | set(cli_skip)
    origin = str(settings.source) if settings.source else None
    lines = []
    if origin:
        lines.append(f"settings: {origin} [tool.nsanalyze]"
                     + (f"; fail-on = {settings.fail_on}" if settings.fail_on else "")
                     + (f"; window = {settings.window}" if settings.window else ""))
        lines.append("")
    for check in all_checks():
        scope = check.kind
        skipped = "  (skipped: " + ("--skip" if check.id in cli_skip else "pyproject.toml") + ")" \
            if check.id in skip else ""
        lines.append(f"{check.id}  [{scope}]  {check.title}{skipped}")
        lines.append(f"    reads: {', '.join(check.requires + check.optional)}")
        for key, threshold in check.thresholds.items():
            name = f"{check.id}.{key}"
            if name in thresholds:
                source = "--set" if name in (cli_thresholds or {}) else "pyproject.toml"
                lines.append(f"    {name} = {thresholds[name]:g}  [{source}; default {threshold.default:g}]  "
                             f"({threshold.why})")
            else:
                lines.append(f"    {name} = {threshold.default:g}  ({threshold.why})")
        lines.append(f"    speedup model: {check.speedup_model}")
        lines.append("")
    lines.append("Full documentation with examples: nsanalyze checks --markdown")
    return "\n".join(lines)
