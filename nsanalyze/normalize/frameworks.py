"""Which Python GPU frameworks launched a profile's kernels, from the marks their kernels' names carry.

Much of the advice shows its change as PyTorch code; on a program whose kernels are CuPy's, cuDF's or Numba's and
none PyTorch's, that example is another framework's API (rank.examples_for_the_framework). The marks are the
frameworks' own namespaces and naming schemes (`frameworks.csv`), never a word anywhere in a name. A program whose
kernels carry none of them (CUDA C++, Triton alone, libraries called directly) is not known to be any framework's.
"""

from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).with_name("frameworks.csv")
PYTORCH = "PyTorch"


@lru_cache(maxsize=1)
def _marks() -> tuple[tuple[str, re.Pattern], ...]:
    with open(TABLE, newline="") as handle:
        return tuple((row["framework"], re.compile(row["pattern"], re.I)) for row in csv.DictReader(handle))


def mark(framework: str) -> re.Pattern:
    """The framework's kernel marks (frameworks.csv): one source for them (checks.libraries reads PyTorch's)."""
    return next(pattern for name, pattern in _marks() if name == framework)


def frameworks(names) -> tuple[str, ...]:
    """The frameworks whose marks the kernel names (short or demangled; None skipped) carry, in the table's order."""
    seen: set[str] = set()
    marks = _marks()
    for name in {n for n in names if n}:
        seen.update(framework for framework, mark in marks if framework not in seen and mark.search(name))
        if len(seen) == len(marks):
            break
    return tuple(framework for framework, _ in marks if framework in seen)


def of_kernel_table(table) -> tuple[str, ...]:
    """frameworks() of a kernel table's rows (normalize.kernels.KernelTable), their short and demangled names."""
    if table is None:
        return ()
    return frameworks([row.get(key) for row in table.rows for key in ("name", "demangled")])


def other_than_pytorch(found: tuple[str, ...]) -> tuple[str, ...]:
    """The frameworks seen where PyTorch is not among them (its examples are then another API), else ()."""
    return () if PYTORCH in found else found
