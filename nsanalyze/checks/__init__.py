"""The check registry: every module in checks/kernel and checks/program is one check."""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from nsanalyze.checks.base import Finding, KernelView, NotJudged, severity_for

REQUIRED_ATTRIBUTES = ("ID", "NAME", "TITLE", "SECTION", "REQUIRES", "THRESHOLDS", "SPEEDUP_MODEL", "ADVICE", "run")
DOC_HEADINGS = ("What it detects", "Why it is slow", "Example", "Instead", "Known problems", "Options")
DEFAULTS_PATH = Path(__file__).with_name("thresholds.toml")


@lru_cache(maxsize=None)
def _load(group: str) -> tuple[ModuleType, ...]:
    package = importlib.import_module(f"nsanalyze.checks.{group}")
    modules = [importlib.import_module(f"{package.__name__}.{info.name}")
               for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]
    return tuple(sorted(modules, key=lambda m: m.ID))


def kernel_checks() -> tuple[ModuleType, ...]:
    return _load("kernel")


def program_checks() -> tuple[ModuleType, ...]:
    return _load("program")


def all_checks() -> tuple[ModuleType, ...]:
    return kernel_checks() + program_checks()


@lru_cache(maxsize=1)
def global_settings() -> dict:
    with open(DEFAULTS_PATH, "rb") as handle:
        return tomllib.load(handle)


class Limits(dict):
    """A check's thresholds by name, read as attributes (`limits.min_idle_share`); a misspelled name is an
    AttributeError, not a silent default."""

    def __getattr__(self, name: str) -> float:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no threshold named {name!r}") from None


def limits_for(check: ModuleType, overrides: dict[str, float] | None = None) -> Limits:
    """A check's thresholds: its defaults, then `check-id.key=value` overrides from the user."""
    limits = Limits({key: t.default for key, t in check.THRESHOLDS.items()})
    for key, value in (overrides or {}).items():
        check_id, _, name = key.rpartition(".")
        if check_id == check.ID and name in limits:
            limits[name] = float(value)
    return limits


def validate_overrides(overrides: dict[str, float]) -> None:
    known = {f"{c.ID}.{k}" for c in all_checks() for k in c.THRESHOLDS}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown threshold(s) {', '.join(unknown)}; `nsanalyze checks` lists them")


def run_kernel_checks(kernels: list[KernelView], overrides=None) -> tuple[list[Finding], list[NotJudged]]:
    """Runs every kernel check on every kernel; a check whose inputs are missing says so instead."""
    findings: list[Finding] = []
    not_judged: list[NotJudged] = []
    cuts = global_settings()["severity"]
    for check in kernel_checks():
        limits = limits_for(check, overrides)
        applies = getattr(check, "applies", None)  # a check about hardware the GPU lacks has nothing to judge
        for kernel in kernels:
            if applies is not None and not applies(kernel):
                continue
            missing = kernel.missing(check.REQUIRES)
            if missing and set(missing) <= kernel.undefined:
                continue  # e.g. bank conflicts of a kernel that uses no shared memory: nothing to judge
            if missing:
                not_judged.append(NotJudged(check.ID, kernel.name, missing, getattr(check, "COLLECT", "--set full")))
                continue
            finding = check.run(kernel, limits)
            if finding is None:
                continue
            if isinstance(finding, NotJudged):  # the check had no way to judge this kernel: say so
                not_judged.append(NotJudged(check.ID, kernel.name, finding.missing,
                                            finding.collect or getattr(check, "COLLECT", "--set full")))
                continue
            finding.check = check.ID
            finding.kernel_name = kernel.name
            finding.kernel_id = kernel.id
            finding.relieves = getattr(check, "RELIEVES", None)
            finding.severity = severity_for(finding.estimated_speedup, cuts)
            findings.append(finding)
    return findings, not_judged
