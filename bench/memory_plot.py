"""Peak memory of `nsanalyze report` against export size (issue 38): the 299k-kernel bench export and its
replicas (bench/run.py's `scaled`: activity copied by SQL inside the database, shifted in time), each run
under GNU time, plotted to docs/memory_vs_size.svg with the bytes of memory per export byte. Not a test.

    NSANALYZE_BENCH_DATA=/tmp/data python bench/memory_plot.py            # x1, x5, x20, x100
    NSANALYZE_PLOT_SCALES=1,5 python bench/memory_plot.py                # fewer points

Replicas above x20 are run once (NSANALYZE_PLOT_LARGE_RUNS), the others NSANALYZE_BENCH_RUNS times (medians)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (bench/run.py: unpack, scaled, measure)

SCALES = [int(x) for x in os.environ.get("NSANALYZE_PLOT_SCALES", "1,5,20,100").split(",")]
LARGE_RUNS = int(os.environ.get("NSANALYZE_PLOT_LARGE_RUNS", "1"))
SVG = run.ROOT / "docs" / "memory_vs_size.svg"
TARGET_MB = 1500


def points() -> list[dict]:
    source = run.unpack("train_nsys.sqlite.xz")
    out = Path(tempfile.mkdtemp()) / "out.json"
    rows = []
    for factor in SCALES:
        path = source if factor == 1 else run.scaled(source, factor)
        runs = run.RUNS if factor <= 20 else LARGE_RUNS
        kept, run.RUNS = run.RUNS, runs
        try:
            wall, peak = run.measure([str(run.BIN / "nsanalyze"), "report", str(path), "-o", str(out)])
        finally:
            run.RUNS = kept
        rows.append({"scale": factor, "export_mb": path.stat().st_size / 1e6, "peak_mb": peak, "wall_s": wall,
                     "runs": runs})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def plot(rows: list[dict], path: Path = SVG, before: list[dict] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for series, label, style, offset in ((before, "before (main 339fd3c)", "o--", (-70, 6)),
                                         (rows, "after (this branch)", "s-", (4, -10))):
        if series:
            axes.plot([r["export_mb"] for r in series], [r["peak_mb"] for r in series], style, label=label)
            for r in series:   # (peak in MiB, as GNU time's KiB / 1024; export in MB)
                per_byte = r["peak_mb"] * 1.048576 / r["export_mb"]
                axes.annotate(f"x{r['scale']}: {r['peak_mb']:,.0f} MiB ({per_byte:.1f} B/B)",
                              (r["export_mb"], r["peak_mb"]), textcoords="offset points", xytext=offset, fontsize=7)
    axes.axhline(TARGET_MB, color="grey", linewidth=0.8, linestyle=":")
    axes.annotate("issue 38's target: 1.5 GB", (1700, TARGET_MB), textcoords="offset points", xytext=(0, 3), fontsize=7)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("export size (MB)")
    axes.set_ylabel("peak RSS of nsanalyze report (MiB)")
    axes.set_title("Peak memory against export size (the 299k-kernel export replicated)", fontsize=9)
    axes.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, metadata={"Date": None})
    plt.close(figure)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--from"]:   # re-plot measured points: --from AFTER.json [BEFORE.json]
        after = json.loads(Path(sys.argv[2]).read_text())
        plot(after, before=json.loads(Path(sys.argv[3]).read_text()) if len(sys.argv) > 3 else None)
    else:
        measured = points()
        print(json.dumps(measured))
        plot(measured)
