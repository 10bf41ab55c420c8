"""`nsanalyze trend`: per-kernel and per-range time across the runs of a history database.

A run is marked a regression when its time exceeds the median of the previous runs (up to
BASELINE_RUNS of them) by more than the noise band: twice the relative median absolute deviation
of those runs, at least MIN_NOISE, or DEFAULT_NOISE while fewer than three runs came before.
The trend also measures the estimated-speedup models: for each finding present in one run and
gone in the next, the savings it predicted beside the time actually saved.

Like is compared with like: a series is one kernel (or NVTX range) of one program on one GPU, so an
A10G run never becomes the baseline of an A100 run, nor one program's run another's. The program is the
run's label (`batch --label`) where it has one, else its identity read off the run itself: its kind of
profile, its steps' name and its main kernels (runs/_programs). Runs are in date order; runs of one date by the time
their file was last written (when it is still there), then by path.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
import math
import statistics
from collections import defaultdict

from nsanalyze import __version__
from nsanalyze.errors import InputError
from nsanalyze.render.format import set_aside_note

TREND_SCHEMA = "nsanalyze/trend@1"
BASELINE_RUNS = 5
MIN_NOISE = 0.05
# The median step's band never drops below this, however steady the runs: clocks and placement differ
# between runs of unchanged code by about a percent (two nightly runs on an H200: 1.0%).
STEP_MIN_NOISE = 0.02
DEFAULT_NOISE = 0.10


def _noise(previous: list[float]) -> float:
    if len(previous) < 3:
        return DEFAULT_NOISE
    median = statistics.median(previous)
    mad = statistics.median(abs(v - median) for v in previous)
    return max(MIN_NOISE, 2 * mad / median) if median else DEFAULT_NOISE


def _mark(points: list[dict]) -> list[dict]:
    """Each point against the median of the runs before it. Where the runs measured their own noise (the
    median step: from its steps' spread), the band is theirs combined, at least STEP_MIN_NOISE, and the
    runs' spread once three came before; elsewhere the runs' spread or DEFAULT_NOISE."""
    for i, point in enumerate(points):
        window = [p for p in points[max(0, i - BASELINE_RUNS):i] if p["duration_ns"]]
        previous = [p["duration_ns"] for p in window]
        if not previous or not point["duration_ns"]:
            point.update(baseline_ns=None, noise=None, change=None, regression=False)
            continue
        baseline = statistics.median(previous)
        own = [p.get("own_noise") for p in window]
        if point.get("own_noise") is not None and all(n is not None for n in own):
            spread = _noise(previous) if len(previous) >= 3 else 0.0
            noise = max(STEP_MIN_NOISE, math.hypot(point["own_noise"], statistics.median(own)), spread)
        else:
            noise = _noise(previous)
        change = point["duration_ns"] / baseline - 1
        point.update(baseline_ns=baseline, noise=noise, change=change, regression=change > noise)
    return points


# A history database is an input like a profile: a time that is no number (text, ±inf), a negative one,
# or a row of no stored run is set aside and counted (the result's notes), never used.
MEASURED = "(typeof({0}) IN ('integer', 'real') AND {0} >= 0)"


def _finite(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0 else None


def trend(db_path: str) -> dict:
    try:
        return _trend(db_path)
    except sqlite3.DatabaseError as exc:
        raise InputError(db_path, f"not a readable nsanalyze history database ({exc})") from None


def _trend(db_path: str) -> dict:
    try:
        con = sqlite3.connect(f"{Path(db_path).resolve().as_uri()}?mode=ro", uri=True)
        gpu_column = "gpu" if any(r[1] == "gpu" for r in con.execute("PRAGMA table_info(runs)")) else "NULL"
        runs = con.execute(f"SELECT content_hash, date, path, kind, label, {gpu_column} FROM runs "
                           "ORDER BY date, path").fetchall()
    except sqlite3.Error as exc:
        raise InputError(db_path, f"not an nsanalyze history database ({exc})") from None
    set_aside: dict[str, int] = defaultdict(int)
    runs = [_checked_run(row, set_aside) for row in runs]
    runs.sort(key=lambda row: (row[1] or "", _written_at(row[2]), row[2] or ""))
    order = {row[0]: i for i, row in enumerate(runs)}
    info = {row[0]: {"date": row[1], "path": row[2], "kind": row[3], "label": row[4], "gpu": row[5]} for row in runs}
    for content, program in _programs(con, runs).items():
        info[content]["program"] = program

    kernels: dict[tuple, list] = defaultdict(list)
    for content, name, duration, launches, bad in con.execute(
            f"SELECT content_hash, name, SUM(CASE WHEN {MEASURED.format('duration_ns')} THEN duration_ns END), "
            f"SUM(CASE WHEN {MEASURED.format('launches')} THEN launches END), "
            f"SUM(NOT {MEASURED.format('duration_ns')}) FROM kernels GROUP BY content_hash, name"):
        set_aside["kernels.duration_ns"] += bad or 0
        if content not in info:   # a row of no stored run
            set_aside["kernels.content_hash"] += 1
            continue
        if duration is not None and _finite(duration) is None:   # an infinite time
            set_aside["kernels.duration_ns"] += 1
            duration = None
        kind = info[content]["kind"]
        kernels[(kind, info[content]["program"], info[content]["gpu"], name)].append({"run": order[content], **info[content], "duration_ns": duration,
                                      "launches": launches})
    ranges: dict[str, list] = defaultdict(list)
    noise_column = "noise" if any(r[1] == "noise" for r in con.execute("PRAGMA table_info(ranges)")) else "NULL"
    for content, name, kernel_ns, own_noise in con.execute(
            f"SELECT content_hash, name, kernel_ns, {noise_column} FROM ranges"):
        if content not in info:
            set_aside["ranges.content_hash"] += 1
            continue
        for column, value in (("kernel_ns", kernel_ns), ("noise", own_noise)):
            if value is not None and _finite(value) is None:
                set_aside[f"ranges.{column}"] += 1
        kernel_ns, own_noise = _finite(kernel_ns), _finite(own_noise)
        ranges[(info[content]["program"], info[content]["gpu"], name)].append(
            {"run": order[content], **info[content], "duration_ns": kernel_ns, "own_noise": own_noise})

    series = []
    for (kind, program, gpu, name), points in kernels.items():
        points = _mark(sorted(points, key=lambda p: p["run"]))
        series.append({"kind": kind, "name": name, "program": program, "gpu": gpu, "points": points,
                       "regressions": sum(p["regression"] for p in points)})
    range_series = [{"name": name, "program": program, "gpu": gpu,
                     "points": _mark(sorted(points, key=lambda p: p["run"]))}
                    for (program, gpu, name), points in ranges.items()]
    for entry in range_series:
        entry["regressions"] = sum(p["regression"] for p in entry["points"])

    accuracy = _prediction_accuracy(con, runs, set_aside, {c: i["program"] for c, i in info.items()})
    con.close()
    series.sort(key=lambda s: -max(p["duration_ns"] or 0 for p in s["points"]))
    range_series.sort(key=lambda s: -max(p["duration_ns"] or 0 for p in s["points"]))
    counts = {where: n for where, n in set_aside.items() if n}
    notes = [set_aside_note(counts)] if counts else []
    programs: dict[str, int] = {}
    for content, *_ in runs:
        programs[info[content]["program"]] = programs.get(info[content]["program"], 0) + 1
    return {"schema": TREND_SCHEMA, "version": __version__, "runs": [info[r[0]] for r in runs],
            "programs": [{"name": name, "runs": count} for name, count in programs.items()],
            "kernels": series, "ranges": range_series, "prediction_accuracy": accuracy,
            **({"set_aside_values": counts, "notes": notes} if counts else {})}


def _checked_run(row: tuple, set_aside: dict) -> tuple:
    """A stored run with a date that is a calendar date (YYYY-MM-DD) or None (counted): a NULL date
    was an internal error in the HTML's charts, a number sorted against text."""
    from datetime import date

    content, day, path, *rest = row
    if day is not None:
        try:
            if not isinstance(day, str) or len(day) != 10:
                raise ValueError
            date.fromisoformat(day)
        except ValueError:
            set_aside["runs.date"] += 1
            day = None
    path = path if isinstance(path, str) else None
    return (content, day, path, *rest)


def _written_at(path: str | None) -> float:
    """When a run's file was last written, to order runs of one date; 0 when it is gone."""
    try:
        return Path(path).stat().st_mtime if path else 0.0
    except OSError:
        return 0.0


MAIN_KERNELS = 5         # a program's main kernels: its longest, by time in the run
SAME_PROGRAM_SHARE = 0.5  # two runs are one program when half the main kernels of the one with fewer are shared
STEP_PREFIX = "median step: "


def _programs(con, runs: list[tuple]) -> dict[str, str]:
    """Each run's program: its label where batch was given one; else the runs of one kind of profile with
    one steps' name (or none) whose main kernels mostly agree with the program's latest run (an edit that
    changes one kernel stays the same program; an unrelated program shares no main kernel)."""
    kernel_ns: dict[str, dict[str, float]] = defaultdict(dict)
    for content, name, duration in con.execute(
            f"SELECT content_hash, name, SUM(CASE WHEN {MEASURED.format('duration_ns')} THEN duration_ns END) "
            "FROM kernels GROUP BY content_hash, name"):
        if isinstance(name, str) and _finite(duration) is not None:
            kernel_ns[content][name] = duration
    steps = {}
    for content, name in con.execute("SELECT content_hash, name FROM ranges WHERE name LIKE ?", (STEP_PREFIX + "%",)):
        if isinstance(name, str):
            steps[content] = name[len(STEP_PREFIX):]
    programs, clusters, names = {}, [], set()
    for content, _, path, kind, label, _ in runs:
        if label:
            programs[content] = str(label)
            continue
        ordered = sorted(kernel_ns.get(content, {}).items(), key=lambda item: (-item[1], item[0]))
        main = {name for name, _ in ordered[:MAIN_KERNELS]}
        key = (kind, steps.get(content))
        home = next((c for c in reversed(clusters) if c["key"] == key and (
            (not main and not c["main"]) or (main and c["main"] and len(main & c["main"]) >=
                                             SAME_PROGRAM_SHARE * min(len(main), len(c["main"]))))), None)
        if home is None:   # named after its first run's file: what a reader recognises
            stem = Path(path).name if isinstance(path, str) else "a run"
            for suffix in (".xz", ".gz"):
                stem = stem.removesuffix(suffix)
            name = f"program of {stem}"
            base, n = name, 2
            while name in names:
                name, n = f"{base} #{n}", n + 1
            names.add(name)
            home = {"key": key, "name": name}
            clusters.append(home)
        home["main"] = main   # the program's latest run: a program drifts as it is edited
        programs[content] = home["name"]
    return programs


def _prediction_accuracy(con, runs, set_aside, programs: dict) -> list[dict]:
    """Per check: findings of a kernel that went away in the next run holding that kernel (same profile
    kind), the savings they predicted beside the time the kernel actually saved."""
    order = {row[0]: i for i, row in enumerate(runs)}
    kind = {row[0]: (row[3], programs.get(row[0]), row[5]) for row in runs}  # kind, program, GPU: like with like
    findings = defaultdict(set)
    predicted = {}
    for content, check, kernel, savings in con.execute(
            "SELECT content_hash, check_id, kernel_name, estimated_savings_ns FROM findings "
            "WHERE kernel_name IS NOT NULL AND severity != 'info'"):
        if content not in order or _finite(savings) is None:
            set_aside["findings.estimated_savings_ns" if content in order else "findings.content_hash"] += 1
            continue
        findings[(content, kernel)].add(check)
        predicted[(content, kernel, check)] = predicted.get((content, kernel, check), 0.0) + savings
    runs_of_kernel = defaultdict(list)
    for content, name, duration in con.execute(
            f"SELECT content_hash, name, SUM(CASE WHEN {MEASURED.format('duration_ns')} THEN duration_ns END) "
            "FROM kernels GROUP BY content_hash, name"):
        if content not in kind or _finite(duration) is None:   # counted with the kernels' times above
            continue
        runs_of_kernel[(kind[content], name)].append((order[content], content, duration))
    per_check = defaultdict(lambda: {"cases": 0, "predicted_ns": 0.0, "actual_ns": 0.0, "details": []})
    for (_, name), sequence in runs_of_kernel.items():
        sequence.sort()
        for (_, before, time_before), (_, after, time_after) in zip(sequence, sequence[1:]):
            for check in findings[(before, name)] - findings[(after, name)]:
                entry = per_check[check]
                entry["cases"] += 1
                entry["predicted_ns"] += predicted[(before, name, check)]
                entry["actual_ns"] += time_before - time_after
                entry["details"].append({"kernel_name": name, "predicted_ns": predicted[(before, name, check)],
                                         "actual_ns": time_before - time_after})
    return [{"check": check, **entry,
             "actual_over_predicted": entry["actual_ns"] / entry["predicted_ns"] if entry["predicted_ns"] else None}
            for check, entry in sorted(per_check.items())]


def regressions_in_last_run(result: dict) -> list[dict]:
    return [{"name": s["name"], **s["points"][-1]} for s in result["kernels"] + result["ranges"]
            if s["points"] and s["points"][-1].get("regression")]
