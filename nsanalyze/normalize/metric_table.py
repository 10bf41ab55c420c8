"""The concept table: how each normalized concept is obtained from raw ncu metrics.

The table (metrics.csv beside this file) is data: each row gives one way to compute a concept,
as a formula over raw metric names in braces and concepts of earlier rows, optionally limited
to a range of compute capabilities. Rows for one concept are tried in order; the first whose
inputs all exist wins. A concept no row can compute is None (missing), never zero.
"""

from __future__ import annotations

import ast
import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from nsanalyze.numbers import finite_float

TABLE_PATH = Path(__file__).with_name("metrics.csv")
_RAW = re.compile(r"\{([^{}]+)\}")
_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div,
                  ast.USub, ast.UAdd, ast.Constant, ast.Name, ast.Load)


@dataclass(frozen=True)
class Rule:
    """One row of the table."""

    concept: str
    unit: str
    min_cc: tuple[int, int] | None
    max_cc: tuple[int, int] | None
    source: str
    description: str
    raw_metrics: tuple[str, ...]
    concepts: tuple[str, ...]
    code: object

    def applies_to(self, cc: tuple[int, int] | None) -> bool:
        if cc is None:
            return self.min_cc is None and self.max_cc is None
        return (self.min_cc is None or cc >= self.min_cc) and (self.max_cc is None or cc <= self.max_cc)


def _parse_cc(text: str) -> tuple[int, int] | None:
    if not text:
        return None
    major, minor = text.split(".")
    return int(major), int(minor)


def _compile(source: str, known_concepts: set[str], where: str):
    raw = tuple(dict.fromkeys(_RAW.findall(source)))
    expression = _RAW.sub(lambda m: f"_raw{raw.index(m.group(1))}", source)
    tree = ast.parse(expression, mode="eval")
    names = []
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"{where}: only arithmetic is allowed in formulas, found {type(node).__name__}")
        if isinstance(node, ast.Name) and not node.id.startswith("_raw"):
            if node.id not in known_concepts:
                raise ValueError(f"{where}: concept {node.id!r} is used before a row defines it")
            names.append(node.id)
    return raw, tuple(dict.fromkeys(names)), compile(tree, where, "eval")


@lru_cache(maxsize=1)
def raw_metric_names() -> frozenset[str]:
    """Every raw ncu metric some row of the table reads: what a reader needs to keep."""
    return frozenset(name for rule in load_rules() for name in rule.raw_metrics)


def raw_metrics_for(concepts) -> tuple[str, ...]:
    """The raw ncu metrics that give these concepts, through the concepts they are made of: for each, its first row
    without a CC range (else its first row). What `ncu --metrics` collects where a --set of the user's ncu version
    lacks them (sm__cycles_active.max is in no section of ncu 2022.2's or 2023.3's full set)."""
    rules: dict[str, Rule] = {}
    for rule in load_rules():   # the first row of each concept, unless a later one holds on every CC
        if rule.concept not in rules or (rule.applies_to(None) and not rules[rule.concept].applies_to(None)):
            rules[rule.concept] = rule
    found: dict[str, None] = {}
    seen: set[str] = set()

    def add(concept: str) -> None:
        if concept in seen or concept not in rules:
            return
        seen.add(concept)
        found.update(dict.fromkeys(rules[concept].raw_metrics))
        for inner in rules[concept].concepts:
            add(inner)
    for concept in concepts:
        add(concept)
    return tuple(found)


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    rules = []
    known: set[str] = set()
    with open(TABLE_PATH, newline="") as handle:
        lines = (line for line in handle if not line.startswith("#"))
        for number, row in enumerate(csv.DictReader(lines), start=1):
            raw, concepts, code = _compile(row["source"], known, f"metrics.csv row {number} ({row['concept']})")
            rules.append(Rule(row["concept"], row["unit"], _parse_cc(row["min_cc"]), _parse_cc(row["max_cc"]),
                              row["source"], row["description"], raw, concepts, code))
            known.add(row["concept"])
    return tuple(rules)


def concept_units() -> dict[str, str]:
    units: dict[str, str] = {}
    for rule in load_rules():
        units.setdefault(rule.concept, rule.unit)
    return units


def concept_descriptions() -> dict[str, str]:
    descriptions: dict[str, str] = {}
    for rule in load_rules():
        if rule.description and rule.concept not in descriptions:
            descriptions[rule.concept] = rule.description
    return descriptions


def _finite(value) -> float | None:
    return finite_float(value)


@dataclass
class Evaluation:
    values: dict[str, float | None]   # every concept; None where missing
    sources: dict[str, str]           # the formula that produced each present concept
    undefined: set[str]               # inputs present but the result undefined (0/0, inf)


# A share of a peak or of the requests (unit "%") above this is not a measurement: ncu's shares "of peak sustained
# active" divide by the cycles a unit was active, which a launch of 1.7-3.3 us leaves too few of to mean anything
# (L1 at 122-310% in the fixtures' shortest kernels, a PyTorch elementwise launch of 2 us at 198%), and its sector
# hit rates run to 101-129% where a kernel's sectors are counted at two points. A point of rounding is allowed.
PCT_CEILING = 101.0


def evaluate(raw: dict[str, float], cc: tuple[int, int] | None) -> Evaluation:
    """Computes every concept for one launch from its raw metrics."""
    values: dict[str, float | None] = {}
    used: dict[str, str] = {}
    undefined: set[str] = set()
    for rule in load_rules():
        values.setdefault(rule.concept, None)
        if values[rule.concept] is not None or not rule.applies_to(cc):
            continue
        if any(name not in raw for name in rule.raw_metrics):
            continue
        if any(values.get(name) is None for name in rule.concepts):
            continue
        scope = {f"_raw{i}": raw[name] for i, name in enumerate(rule.raw_metrics)}
        scope.update((name, values[name]) for name in rule.concepts)
        try:
            result = _finite(eval(rule.code, {"__builtins__": {}}, scope))  # noqa: S307 - arithmetic only, checked in _compile
        except (ZeroDivisionError, OverflowError, ValueError):
            result = None
        if result is not None and rule.unit == "%" and result > PCT_CEILING:
            result = None   # no unit runs past its peak, no cache hits more than it is asked: not a measurement
        if result is None:
            undefined.add(rule.concept)
        else:
            values[rule.concept] = result
            used[rule.concept] = rule.source
            undefined.discard(rule.concept)
    return Evaluation(values, used, undefined)


def computable(raw: dict[str, float], cc: tuple[int, int] | None) -> set[str]:
    """Concepts that at least one row could compute from these raw metrics alone (for tests and docs)."""
    possible: set[str] = set()
    for rule in load_rules():
        if rule.applies_to(cc) and all(n in raw for n in rule.raw_metrics) and all(c in possible for c in rule.concepts):
            possible.add(rule.concept)
    return possible
