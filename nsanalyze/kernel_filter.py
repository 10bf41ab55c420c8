"""`-k/--kernel NAME|regex:PATTERN`, as ncu's `-k`: only the kernels it names are analysed.

NAME is a kernel's function name as Nsight shows it (`sgemm_tiled`, `ampere_sgemm_128x64_nn`), or its
full demangled signature; `regex:PATTERN` is a Python regular expression searched in either (as ncu's
`-k regex:`). The filter is applied when a profile is read, before any check:

- ncu reports keep only the matching launches (and unmeasured launches that match);
- nsys exports see only the matching kernels: the `kernels` view is laid again over the matching rows
  (the names are matched once per distinct name, the rows selected in SQLite), so the timeline, the
  budget and the program checks read the profile as if only those kernels ran on the GPU.

A filter that leaves no kernel is bad input: one line naming the profile and a few of its kernels.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from nsanalyze.errors import InputError


@dataclass(frozen=True)
class KernelFilter:
    spec: str
    pattern: re.Pattern | None  # None: an exact name

    def matches(self, *names: str | None) -> bool:
        names = [n for n in names if n]
        if self.pattern is not None:
            return any(self.pattern.search(n) for n in names)
        return self.spec in names


def parse(spec: str | None) -> KernelFilter | None:
    if not spec:
        return None
    if spec.startswith("regex:"):
        try:
            return KernelFilter(spec, re.compile(spec[len("regex:"):]))
        except re.error as exc:
            raise InputError("--kernel", f"{spec!r} is not a regular expression ({exc})") from None
    return KernelFilter(spec, None)


def _none_left(path: str, kernel_filter: KernelFilter, names) -> InputError:
    shown = sorted({n for n in names if n})
    listed = ", ".join(shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")
    return InputError(path, f"no kernel matches -k {kernel_filter.spec} (kernels: {listed or 'none'})")


def filter_profile(profile, kernel_filter: KernelFilter | None):
    """The profile with only the matching kernels (the same object, narrowed in place)."""
    if kernel_filter is None:
        return profile
    if profile.kind == "ncu":
        kept = [launch for launch in profile.launches if kernel_filter.matches(launch.name, launch.demangled)]
        if not kept:
            raise _none_left(profile.path, kernel_filter, [launch.name for launch in profile.launches])
        profile.launches = kept
        profile.unmeasured = [launch for launch in profile.unmeasured
                              if kernel_filter.matches(launch.name, launch.demangled)]
        return profile
    _filter_nsys(profile, kernel_filter)
    return profile


def _filter_nsys(export, kernel_filter: KernelFilter) -> None:
    connection = export.connection
    ids = [r[0] for r in connection.execute(
        "SELECT short_name_id FROM kernels UNION SELECT demangled_id FROM kernels")]
    names = export.strings([i for i in ids if isinstance(i, int)])
    wanted = sorted(i for i, name in names.items() if name is not None and kernel_filter.matches(name))
    if not wanted:
        short = [names.get(r[0]) for r in connection.execute("SELECT DISTINCT short_name_id FROM kernels")]
        raise _none_left(export.path, kernel_filter, short)
    listed = ",".join(map(str, wanted))
    body = connection.execute("SELECT sql FROM sqlite_temp_master WHERE type = 'view' AND name = 'kernels'").fetchone()[0]
    connection.execute(body.replace("VIEW kernels AS", "TEMP VIEW kernels_unfiltered AS", 1)
                       if body.startswith("CREATE VIEW") else body.replace(" kernels ", " kernels_unfiltered ", 1))
    connection.execute("DROP VIEW temp.kernels")
    connection.execute(f"CREATE TEMP VIEW kernels AS SELECT * FROM kernels_unfiltered "
                       f"WHERE short_name_id IN ({listed}) OR demangled_id IN ({listed})")
    if export.arrow is not None:  # the Arrow reader replays the views: give it the new ones
        export.arrow.view_sql = [sql.replace("CREATE VIEW", "CREATE TEMP VIEW", 1) for (sql,) in connection.execute(
            "SELECT sql FROM sqlite_temp_master WHERE type = 'view' AND sql IS NOT NULL ORDER BY rowid")]
    _recount_first_gpu(export)


def _recount_first_gpu(export) -> None:
    """Where GPU work begins, with only the kept kernels (copies and memsets still count)."""
    first = export.connection.execute("SELECT MIN(start) FROM (SELECT MIN(start) AS start FROM kernels "
                                      "UNION ALL SELECT MIN(start) FROM copies)").fetchone()[0]
    if first is not None:
        export.first_gpu_ns = int(first)


@contextlib.contextmanager
def only_kernels(spec: str | None):
    """While inside, every profile the analysis reads (report, diff, metrics) is narrowed to the kernels
    `spec` names. The readers are wrapped where the pipeline looks them up; nothing else changes."""
    kernel_filter = parse(spec)
    if kernel_filter is None:
        yield None
        return
    import nsanalyze.analyze as analyze_module
    import nsanalyze.metrics_export as metrics_module

    patched = []
    for module in (analyze_module, metrics_module):
        original = module.read_profile

        def narrowed(path, *args, _original=original, **kwargs):
            return filter_profile(_original(path, *args, **kwargs), kernel_filter)

        module.read_profile = narrowed
        patched.append((module, original))
    try:
        yield kernel_filter
    finally:
        for module, original in patched:
            module.read_profile = original
