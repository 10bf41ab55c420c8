"""The language a kernel was compiled from, by its source lines' file names, and what that changes in the advice.

Kernel checks write their advice and examples in CUDA C++. A kernel whose source lines lie in Fortran (OpenACC, CUDA
Fortran), Python (Triton, Numba) or Julia files was written in that language: its finding says so before the advice,
so that `fma(a, b, c)` or `-fmad=false` read as what to do, not as code to paste. What each language's note says is
data: source_languages.csv."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath, PureWindowsPath

from nsanalyze.text import code_span

TABLE = Path(__file__).with_name("source_languages.csv")


@dataclass(frozen=True)
class Language:
    name: str
    suffixes: frozenset[str]
    note: str          # with {file}: the first source file of that language


@lru_cache(maxsize=1)
def languages() -> tuple[Language, ...]:
    with TABLE.open(newline="", encoding="utf-8") as handle:
        return tuple(Language(row["language"], frozenset(row["suffixes"].split()), row["note"])
                     for row in csv.DictReader(handle))


def _suffix(file: str) -> str:
    path = PureWindowsPath(file) if "\\" in file and "/" not in file else PurePosixPath(file)
    return path.suffix.lower()


def language_of(files) -> tuple[Language, str] | None:
    """The language of a kernel's source files where all those with a known suffix agree on one other than CUDA C++
    (a Fortran kernel calling a C device function stays unsaid), with its first file; else None."""
    found: dict[str, tuple[Language, str]] = {}
    for file in files:
        if not file:
            continue
        suffix = _suffix(str(file))
        for language in languages():
            if suffix in language.suffixes:
                found.setdefault(language.name, (language, str(file)))
                break
        else:
            if suffix in (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hpp"):
                return None
    return next(iter(found.values())) if len(found) == 1 else None


def language_note(files) -> str | None:
    """The sentence a finding's advice starts with where its kernel was written in another language, else None."""
    known = language_of(files)
    if known is None:
        return None
    language, file = known   # a name from the profile: in a code span, as all advice holds them
    return "This kernel was " + language.note.format(file=code_span(PurePosixPath(file).name))
