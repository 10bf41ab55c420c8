"""The check registry: every module in checks/kernel and checks/program is one check, declared once as
`CHECK = Check(...)` (checks/base.py) beside its `run`. The declarations are validated when the registry
loads them: a check that would silently misbehave (a duplicate id, a REQUIRES entry nothing provides, a
metadata global left outside the declaration) stops the program instead.

Skipped checks (`--skip`) are left out of the registry while a report is made (`skipping`): they never
run, and nothing that reads other checks (claims, overlaps) sees them.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
import tomllib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from nsanalyze.checks.base import KINDS, Check, Finding, KernelView, NotJudged

DOC_HEADINGS = ("What it detects", "Why it is slow", "Example", "Instead", "Known problems", "Options")
DEFAULTS_PATH = Path(__file__).with_name("thresholds.toml")
# Module constants a check's run() may read beside its declaration (the declaration refers to them).
MODULE_CONSTANTS = frozenset({"ID", "ADVICE", "BUDGET_PART", "CHECK"})
# Metadata that the declaration holds, as the module globals that once held it: one left in a module is an error.
DECLARED = frozenset(f.name.upper() for f in dataclasses.fields(Check)) - MODULE_CONSTANTS
FUNCTIONS = ("run", "applies")   # functions the registry takes from a check's module

_skipped: ContextVar[frozenset[str]] = ContextVar("skipped_checks", default=frozenset())


class CheckDeclarationError(ValueError):
    """A check's module declares something the registry cannot use: fix the module."""


def _module_problems(module: ModuleType) -> list[str]:
    """Globals and functions that look like metadata or a registry function but are not the declaration:
    `RELEIVES = "memory"` beside CHECK, or `def aplies(kernel)` for `applies`, would otherwise be ignored."""
    problems = []
    for name, value in vars(module).items():
        if name.isupper() and name not in MODULE_CONSTANTS:
            close = difflib.get_close_matches(name, DECLARED, n=1, cutoff=0.8)
            if close:
                field = close[0].lower()
                problems.append(f"module global {name} looks like the declaration's field `{field}`: "
                                f"declare it as CHECK = Check(..., {field}=...)")
        elif callable(value) and getattr(value, "__module__", None) == module.__name__ and name not in FUNCTIONS \
                and not name.startswith("_"):
            close = difflib.get_close_matches(name, FUNCTIONS, n=1, cutoff=0.8)
            if close:
                problems.append(f"function {name}() looks like `{close[0]}` misspelled")
    return problems


def _registered(module: ModuleType, kind: str) -> Check:
    """The module's declaration, with what the registry takes from the module: its kind, run, applies, doc."""
    declared = getattr(module, "CHECK", None)
    where = module.__name__
    if not isinstance(declared, Check):
        raise CheckDeclarationError(f"{where}: no CHECK = Check(...) declaration")
    problems = _module_problems(module)
    if not callable(getattr(module, "run", None)):
        problems.append("no run() function")
    for constant in ("ID", "BUDGET_PART", "ADVICE"):   # what run() reads must be what the registry declares
        field = constant.lower() if constant != "ID" else "id"
        if constant in vars(module) and vars(module)[constant] != getattr(declared, field):
            problems.append(f"{constant} {vars(module)[constant]!r:.60} is not the declaration's {field}")
    if kind == "program" and getattr(module, "applies", None) is not None:
        problems.append("applies() is read for kernel checks only")
    if problems:
        raise CheckDeclarationError(f"{where} ({declared.id}): " + "; ".join(problems))
    return dataclasses.replace(declared, kind=kind, run=module.run, applies=getattr(module, "applies", None),
                               doc=module.__doc__ or "")


@lru_cache(maxsize=None)
def known_requirements(kind: str) -> frozenset[str]:
    """What a check of this kind may require or read: a kernel check, the normalized kernel concepts
    (normalize/metrics.csv and the concepts derived in normalize/kernels.py); a program check, the
    attributes of the timeline it is given (program.run_program_checks reads them by name)."""
    if kind == "kernel":
        from nsanalyze.normalize.kernels import DERIVED_UNITS, TENSOR_CONCEPTS
        from nsanalyze.normalize.metric_table import concept_units

        return frozenset(concept_units()) | frozenset(TENSOR_CONCEPTS) | frozenset(DERIVED_UNITS)
    from nsanalyze.normalize.timeline import Timeline

    return frozenset(f.name for f in dataclasses.fields(Timeline))


def validate(checks: Iterable[Check]) -> None:
    """What no single declaration can tell: ids unique across kernel and program checks, requirements
    that exist, `after` naming checks of the same kind, budget parts of the time budget."""
    from nsanalyze.normalize.budget import PARTS

    checks = list(checks)
    seen: dict[str, Check] = {}
    for check in checks:
        if check.id in seen:
            raise CheckDeclarationError(f"check id {check.id!r} is declared twice ({seen[check.id].kind} and "
                                        f"{check.kind} checks): ids are unique across both kinds")
        seen[check.id] = check
    for check in checks:
        problems = []
        unknown = sorted((set(check.requires) | set(check.optional)) - known_requirements(check.kind))
        if unknown:
            problems.append(f"requires or reads {', '.join(unknown)}, which no {check.kind} check is given")
        strangers = [c for c in check.after if c not in seen or seen[c].kind != check.kind]
        if strangers:
            problems.append(f"after names {', '.join(strangers)}, not {check.kind} checks")
        if check.budget_part is not None and (check.kind != "program" or check.budget_part not in PARTS):
            problems.append(f"budget_part {check.budget_part!r} is none of the program budget's {', '.join(PARTS)}")
        if problems:
            raise CheckDeclarationError(f"check {check.id!r}: " + "; ".join(problems))


def load(packages: dict[str, str]) -> tuple[Check, ...]:
    """The checks of these packages ({kind: package}), each kind by id, validated: every module not
    starting with `_` is one check."""
    checks = []
    for kind, name in packages.items():
        package = importlib.import_module(name)
        modules = [importlib.import_module(f"{package.__name__}.{info.name}")
                   for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]
        checks += sorted((_registered(m, kind) for m in modules), key=lambda c: c.id)
    validate(checks)
    return tuple(checks)


@lru_cache(maxsize=None)
def registry() -> tuple[Check, ...]:
    """Every check, kernel checks first; loaded and validated once, on first use."""
    return load({kind: f"nsanalyze.checks.{kind}" for kind in KINDS})


@contextmanager
def skipping(ids: Iterable[str]) -> Iterator[None]:
    """While a report is made: the registry without these checks, as if they were never written."""
    token = _skipped.set(frozenset(ids))
    try:
        yield
    finally:
        _skipped.reset(token)


def runs(check_id: str) -> bool:
    """Whether the check runs in this report: registered and not skipped. Code that reads another check's
    outcome (checks/program/_claims.py) asks this, so a skipped check shapes nothing."""
    return check_id not in _skipped.get() and any(c.id == check_id for c in registry())


def all_checks() -> tuple[Check, ...]:
    """Every registered check, skipped or not (documentation, validation of --skip and --set)."""
    return registry()


def kernel_checks() -> tuple[Check, ...]:
    """The kernel checks that run: all but the skipped ones."""
    return tuple(c for c in registry() if c.kind == "kernel" and c.id not in _skipped.get())


def program_checks() -> tuple[Check, ...]:
    """The program checks that run: all but the skipped ones."""
    return tuple(c for c in registry() if c.kind == "program" and c.id not in _skipped.get())


def check_by_id(check_id: str) -> Check | None:
    return next((c for c in registry() if c.id == check_id), None)


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


def limits_for(check: Check | ModuleType, overrides: dict[str, float] | None = None) -> Limits:
    """A check's thresholds (of its Check, or of the module declaring it): its defaults, then
    `check-id.key=value` overrides from the user."""
    check = getattr(check, "CHECK", check)
    limits = Limits({key: t.default for key, t in check.thresholds.items()})
    for key, value in (overrides or {}).items():
        check_id, _, name = key.rpartition(".")
        if check_id == check.id and name in limits:
            limits[name] = float(value)
    return limits


def validate_overrides(overrides: dict[str, float]) -> None:
    known = {f"{c.id}.{k}" for c in all_checks() for k in c.thresholds}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown threshold(s) {', '.join(unknown)}; `nsanalyze checks` lists them")
    bounds = {f"{c.id}.{k}": t.at_least for c in all_checks() for k, t in c.thresholds.items()}
    low = sorted(key for key, value in overrides.items() if not value >= bounds[key])   # NaN is no value either
    if low:
        raise ValueError("; ".join(f"{key} must be at least {bounds[key]:g}" for key in low))


def _collect(options: str, missing) -> str:
    """How to collect what a kernel lacks: the check's ncu options (a --set, sections), or the raw metrics by name,
    which a --set of an older ncu may not hold (tail-effect's sm__cycles_active.max: no section of ncu 2022.2's or
    2023.3's full set; "collect with --set full" on a full-set report sent the user round in a circle)."""
    from nsanalyze.normalize.metric_table import raw_metrics_for

    names = raw_metrics_for(missing)
    if not names or not all("__" in name for name in names):   # ncu's metrics (unit__counter) only: a per-source-line
        return options                                         # counter comes with its section, not by name
    metrics = f"--metrics {','.join(names)}"
    return f"{options}, or {metrics}" if options else metrics


def run_kernel_checks(kernels: list[KernelView], overrides=None) -> tuple[list[Finding], list[NotJudged]]:
    """Runs every kernel check on every kernel; a check whose inputs are missing says so instead. The findings
    are raw: rank.py settles their savings and severity."""
    findings: list[Finding] = []
    not_judged: list[NotJudged] = []
    for check in kernel_checks():
        limits = limits_for(check, overrides)
        for kernel in kernels:
            if check.applies is not None and not check.applies(kernel):
                continue  # a check about hardware the GPU lacks has nothing to judge
            missing = kernel.missing(check.requires)
            if missing and set(missing) <= kernel.undefined:
                continue  # e.g. bank conflicts of a kernel that uses no shared memory: nothing to judge
            if missing:
                not_judged.append(NotJudged(check.id, kernel.name, missing, _collect(check.collect, missing)))
                continue
            finding = check.run(kernel, limits)
            if finding is None:
                continue
            if isinstance(finding, NotJudged):  # the check had no way to judge this kernel: say so
                not_judged.append(NotJudged(check.id, kernel.name, finding.missing,
                                            _collect(finding.collect or check.collect, finding.missing)))
                continue
            finding.check = check.id
            finding.kernel_name = kernel.name
            finding.kernel_id = kernel.id
            finding.relieves = finding.relieves or check.relieves   # a finding may narrow it (base.Finding)
            findings.append(finding)
    return findings, not_judged


# Every declaration is validated when the checks package is imported, not on first use: a misspelled field or
# metadata global, a duplicate id or a REQUIRES entry nothing provides stops `import nsanalyze.checks` itself.
registry()
