"""Peak memory against input size (issue 38), each point GNU time's maximum RSS of one command, plotted to
docs/memory_vs_size.svg with the bytes of memory per input byte. Not a test.

- nsys: `nsanalyze report` of the 299k-kernel bench export and its replicas (bench/run.py's `scaled`: activity
  copied by SQL inside the database, shifted in time).
- Kineto: `nsanalyze report` of the GPT step's real trace replicated to about 50 MB - 1 GB (bench/run.py's
  `kineto_trace`), each run with an empty cache (the trace converted, not read from the cache), and the floor,
  `json.load` of the same trace (bench/json_floor.py), dashed.

    NSANALYZE_BENCH_DATA=/tmp/data python bench/memory_plot.py      # measure all: nsys x1-x100, Kineto 50 MB-1 GB
    python bench/memory_plot.py --nsys-from bench/memory_points.json  # nsys points as recorded, Kineto measured
    python bench/memory_plot.py --from bench/memory_points.json       # re-plot recorded points only
    NSANALYZE_PLOT_SCALES=1,5 NSANALYZE_PLOT_KINETO_MB=50,100 ...     # fewer points (empty: none of that kind)

Replicas above x20 or 250 MB are run once (NSANALYZE_PLOT_LARGE_RUNS), the others NSANALYZE_BENCH_RUNS times
(medians). One command runs at a time. The points, with the commit and the load average before and after each,
are written to NSANALYZE_PLOT_POINTS (bench/memory_points.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (bench/run.py: unpack, scaled, kineto_trace, measure)


def _sizes(name: str, default: str) -> list[int]:
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


SCALES = _sizes("NSANALYZE_PLOT_SCALES", "1,5,20,100")
KINETO_MB = _sizes("NSANALYZE_PLOT_KINETO_MB", "50,100,250,500,1000")
LARGE_RUNS = int(os.environ.get("NSANALYZE_PLOT_LARGE_RUNS", "1"))
POINTS = Path(os.environ.get("NSANALYZE_PLOT_POINTS", run.ROOT / "bench" / "memory_points.json"))
SVG = run.ROOT / "docs" / "memory_vs_size.svg"
TARGET_MB = 1500
STYLES = {  # series: line style, colour, offset of its points' labels (to the left: ending there)
    "nsys_before": ("o--", "tab:blue", (-6, -1)),
    "nsys": ("s-", "tab:orange", (4, -10)),
    "kineto": ("^-", "tab:green", (5, -9)),
    "json_load": ("v--", "tab:green", (-6, 5)),
}


def commit() -> str:
    """The commit measured, `+dirty` where nsanalyze/ differs from it."""
    git = ["git", "-C", str(run.ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "nsanalyze"], capture_output=True, text=True).stdout
    return head + ("+dirty" if dirty.strip() else "")


def timed(command: list[str], runs: int, fresh_cache: bool = False) -> dict:
    """run.measure's medians of `runs` runs, with the 1-minute load average before and after."""
    kept, run.RUNS = run.RUNS, runs
    before = os.getloadavg()[0]
    try:
        wall, peak = run.measure(command, fresh_cache=fresh_cache)
    finally:
        run.RUNS = kept
    return {"peak_mb": round(peak, 1), "wall_s": round(wall, 2), "runs": runs,
            "load": [round(before, 2), round(os.getloadavg()[0], 2)]}


def nsys_points(out: Path) -> list[dict]:
    source = run.unpack("train_nsys.sqlite.xz")
    rows = []
    for factor in SCALES:
        path = source if factor == 1 else run.scaled(source, factor)
        point = timed([str(run.BIN / "nsanalyze"), "report", str(path), "-o", str(out)],
                      run.RUNS if factor <= 20 else LARGE_RUNS)
        rows.append({"name": f"x{factor}", "size_mb": round(path.stat().st_size / 1e6, 1), **point})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def kineto_points(out: Path) -> tuple[list[dict], list[dict]]:
    ours, floor = [], []
    for mb in KINETO_MB:
        trace = run.kineto_trace(mb * 1e6)
        runs = run.RUNS if mb <= 250 else LARGE_RUNS
        size = {"name": f"{mb} MB", "size_mb": round(trace.stat().st_size / 1e6, 1)}
        ours.append({**size, **timed([str(run.BIN / "nsanalyze"), "report", str(trace), "-o", str(out)], runs,
                                     fresh_cache=True)})
        print(json.dumps(ours[-1]), flush=True)
        floor.append({**size, **timed([str(run.BIN / "python"), str(run.ROOT / "bench" / "json_floor.py"),
                                       str(trace)], runs)})
        print(json.dumps(floor[-1]), flush=True)
    return ours, floor


def measured(recorded: dict | None) -> dict:
    """Every series: the nsys ones from `recorded` where given (else measured now), the Kineto ones measured."""
    out = Path(tempfile.mkdtemp()) / "out.json"
    now = commit()
    series = {}
    if recorded is not None:
        series.update({k: v for k, v in recorded.items() if k.startswith("nsys")})
    elif SCALES:
        series["nsys"] = {"label": f"nsys report ({now})", "points": nsys_points(out)}
    if KINETO_MB:
        ours, floor = kineto_points(out)
        series["kineto"] = {"label": f"Kineto: nsanalyze report, empty cache ({now})", "points": ours}
        series["json_load"] = {"label": "Kineto: json.load of the trace (the floor)", "points": floor}
    return series


def dumps(series: dict) -> str:
    """The series as JSON, a point a line."""
    parts = []
    for key, value in series.items():
        head = json.dumps({k: v for k, v in value.items() if k != "points"})[:-1]
        points = ",\n".join("   " + json.dumps(p) for p in value["points"])
        parts.append(f' {json.dumps(key)}: {head}, "points": [\n{points}\n ]}}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def plot(series: dict, path: Path = SVG) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.2, 4.8))
    for key, (style, colour, offset) in STYLES.items():
        if key not in series:
            continue
        points = series[key]["points"]
        axes.plot([p["size_mb"] for p in points], [p["peak_mb"] for p in points], style, color=colour,
                  label=series[key]["label"])
        for p in points:   # (peak in MiB, as GNU time's KiB / 1024; input in MB)
            per_byte = p["peak_mb"] * 1.048576 / p["size_mb"]
            name = f"{p['name']}: " if key.startswith("nsys") else ""
            axes.annotate(f"{name}{p['peak_mb']:,.0f} MiB ({per_byte:.1f} B/B)", (p["size_mb"], p["peak_mb"]),
                          textcoords="offset points", xytext=offset, fontsize=6.5, color=colour,
                          ha="right" if offset[0] < 0 else "left")
    axes.axhline(TARGET_MB, color="grey", linewidth=0.8, linestyle=":")
    axes.annotate("issue 38's target: 1.5 GB", (5000, TARGET_MB), textcoords="offset points", xytext=(0, -9), fontsize=7)
    axes.set_xscale("log")
    axes.set_xlim(12, 20000)   # room for the points' labels
    axes.set_yscale("log")
    axes.set_xlabel("input size (MB)")
    axes.set_ylabel("peak RSS (MiB, GNU time)")
    axes.set_title("Peak memory against input size: the 299k-kernel nsys export replicated,\n"
                   "the GPT step's Kineto trace replicated", fontsize=9)
    axes.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, metadata={"Date": None})
    plt.close(figure)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--from"]:   # re-plot recorded points
        plot(json.loads(Path(sys.argv[2]).read_text()))
    else:
        recorded = json.loads(Path(sys.argv[2]).read_text()) if sys.argv[1:2] == ["--nsys-from"] else None
        points = measured(recorded)
        POINTS.write_text(dumps(points))
        plot(points)
