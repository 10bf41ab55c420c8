"""Regular expressions a user gives (`-k regex:PATTERN`, `whatif --speedup regex:PATTERN=FACTOR`), searched in
kernel names under a time limit.

Python's `re` backtracks without end on some patterns (`(.*)*x$` over a 1,400-character kernel name ran past 90 s,
and nothing could stop it but a kill). The `regex` module, in its `re`-compatible mode, finds many such patterns
fast and takes a timeout for the rest: all the searches of one pattern share SEARCH_BUDGET_S, and past it the run
ends as bad input, one line naming the option and the pattern.
"""

from __future__ import annotations

import math
import os
import time

import regex

from nsanalyze.errors import InputError


def _budget_from_environment(default: float = 10.0) -> float:
    """NSANALYZE_REGEX_TIME_LIMIT_S where it is a number above 0, else `default` (a bad value is no internal error)."""
    try:
        value = float(os.environ.get("NSANALYZE_REGEX_TIME_LIMIT_S", default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


# All the searches of one pattern in a run: a sound pattern over a capture's distinct kernel names (tens of
# thousands) takes well under a second. NSANALYZE_REGEX_TIME_LIMIT_S sets another.
SEARCH_BUDGET_S = _budget_from_environment()


class UserPattern:
    """A compiled user pattern with `re.Pattern`'s `search` and `pattern`, its searches under one time budget."""

    def __init__(self, text: str, option: str, budget_s: float | None = None):
        try:
            self._compiled = regex.compile(text, flags=regex.VERSION0)
        except (regex.error, ValueError, OverflowError, RecursionError) as exc:
            raise ValueError(f"not a regular expression ({exc})") from None
        self.pattern, self.option = text, option
        self.budget_s = SEARCH_BUDGET_S if budget_s is None else budget_s
        self._spent = 0.0

    def search(self, string: str):
        left = self.budget_s - self._spent
        started = time.monotonic()
        try:
            return self._compiled.search(string, timeout=max(left, 0.001))
        except TimeoutError:
            raise InputError(self.option, f"searching kernel names for {self.pattern!r} took over {self.budget_s:g} s "
                                          "(a pattern that backtracks without end?): write it without nested "
                                          "repetition; NSANALYZE_REGEX_TIME_LIMIT_S raises the limit") from None
        finally:
            self._spent += time.monotonic() - started

    def __reduce__(self):   # sent to a worker process with the options: compiled again there, a budget of its own
        return (type(self), (self.pattern, self.option, self.budget_s))
