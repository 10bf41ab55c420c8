"""`-k/--kernel NAME|regex:PATTERN`, as ncu's `-k`: only the kernels it names are analysed.

NAME is a kernel's function name as Nsight shows it (`sgemm_tiled`, `ampere_sgemm_128x64_nn`), or its
full demangled signature; `regex:PATTERN` is a Python regular expression searched in either (as ncu's
`-k regex:`). The filter is a parameter of the analysis (`Options.kernel`), applied where each input is read:

- ncu reports keep only the matching launches (and unmeasured launches that match);
- nsys exports and Kineto traces keep every kernel in the timeline: those filtered out are still GPU work
  in the budget (never idle time, so no idle cause is read off them) and one opaque part of the role split
  ("other kernels (filtered out)"); the kernel list and the roles the checks judge are the matching ones.

A filter that leaves no kernel is bad input: one line naming the profile and a few of its kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsanalyze.errors import InputError
from nsanalyze.patterns import UserPattern


@dataclass(frozen=True)
class KernelFilter:
    spec: str
    pattern: UserPattern | None  # None: an exact name

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
            return KernelFilter(spec, UserPattern(spec[len("regex:"):], "--kernel"))
        except ValueError as exc:
            raise InputError("--kernel", f"{spec!r} is {exc}") from None
    return KernelFilter(spec, None)


def _none_left(path: str, kernel_filter: KernelFilter, names) -> InputError:
    shown = sorted({n for n in names if n})
    listed = ", ".join(shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")
    return InputError(path, f"no kernel matches -k {kernel_filter.spec} (kernels: {listed or 'none'})")


def filter_ncu(profile, kernel_filter: KernelFilter | None):
    """An ncu report with only the matching launches (the same object, narrowed in place)."""
    if kernel_filter is None or profile.kind != "ncu":
        return profile
    kept = [launch for launch in profile.launches if kernel_filter.matches(launch.name, launch.demangled)]
    if not kept:
        raise _none_left(profile.path, kernel_filter, [launch.name for launch in profile.launches])
    profile.launches = kept
    profile.unmeasured = [launch for launch in profile.unmeasured if kernel_filter.matches(launch.name, launch.demangled)]
    return profile


def narrow_timeline(timeline, kernel_filter: KernelFilter, path: str) -> None:
    """An nsys export's (or a Kineto trace's) timeline judged on the matching kernels only. The kernels
    filtered out still ran: the budget keeps them as GPU work (they are no idle time, and no cause is read off
    them) and the role split names them `filtered_out` ("other kernels (filtered out)"); the kernel list and the
    roles the busy-GPU checks judge are the matching kernels'."""
    from nsanalyze.normalize.model import RoleTime, records
    from nsanalyze.normalize.work import WorkAnalysis

    table = timeline.kernel_table
    rows = table.rows if table is not None else []
    kept = [row for row in rows if kernel_filter.matches(row.get("name"), row.get("demangled"))]
    if not kept:
        raise _none_left(path, kernel_filter, [row.get("name") for row in rows])
    kept_keys = {(row.get("name"), row.get("demangled")) for row in kept}
    out_ns = float(sum(row["duration_ns"] or 0 for row in rows if (row.get("name"), row.get("demangled")) not in kept_keys))
    table.rows = kept
    timeline.kernel_summary = kept
    analysis = timeline.work_analysis
    if analysis is not None:
        by_kernel = [k for k in analysis.by_kernel if kernel_filter.matches(k.name, k.demangled)]
        role_ns: dict[str, float] = {}
        for entry in by_kernel:
            role_ns[entry.role] = role_ns.get(entry.role, 0.0) + entry.ns
        if out_ns:
            role_ns["filtered_out"] = out_ns
        total = analysis.kernel_ns or sum(role_ns.values())
        work = sorted(({"role": role, "ns": int(ns), "share": ns / total if total else 0.0}
                       for role, ns in role_ns.items() if ns > 0), key=lambda w: -w["ns"])
        timeline.work_analysis = WorkAnalysis(
            work=work, kernel_ns=analysis.kernel_ns, by_kernel=by_kernel,
            scores_glue=[g for g in analysis.scores_glue if kernel_filter.matches(g.get("name"))],
            scores_gemm_ns=analysis.scores_gemm_ns if any(k.role in ("matmul_tensor", "matmul_simt")
                                                          for k in by_kernel) else 0)
        # the chains of element-wise kernels run through the filtered-out kernels: not judged under -k
        timeline.work = records(RoleTime, work)
    count = len(rows) - len(kept)
    timeline.notes.append(
        f"-k {kernel_filter.spec}: {len(kept)} kernel{'s' if len(kept) != 1 else ''} judged; {count} other "
        f"kernel{'s' if count != 1 else ''} ({out_ns / 1e6:.2f} ms in the window) filtered out: still GPU work in "
        "the budget, not judged" if count else f"-k {kernel_filter.spec}: every kernel of the window matches")
    timeline.summary = timeline.summary.with_(kernel_filter={"spec": kernel_filter.spec, "kernels": len(kept),
                                                             "filtered_out_kernels": count, "filtered_out_ns": out_ns})


def filter_kernel_rows(table, kernel_filter: KernelFilter | None, path: str):
    """A kernel table (`metrics` of an nsys export) with the matching kernels' rows only."""
    if kernel_filter is None:
        return table
    kept = [row for row in table.rows if kernel_filter.matches(row.get("name"), row.get("demangled"))]
    if not kept:
        raise _none_left(path, kernel_filter, [row.get("name") for row in table.rows])
    table.rows = kept
    return table
