"""Before/after on one export, runs of the two trees interleaved with the floor (the shared machine's
load hits all three alike: compare the ratios):

    python bench/interleaved.py /tmp/base . bench/.data/train_nsys.sqlite 5
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = "SELECT demangledName, COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName"


def timed(command: list[str], env: dict | None = None) -> tuple[float, float]:
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report.name, *command], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        return wall, int(report.read().strip().splitlines()[-1]) / 1024


def main() -> None:
    old, new, export, runs = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), sys.argv[3], int(sys.argv[4])
    out = Path(tempfile.mkdtemp()) / "out.json"
    results = {"before": [], "after": [], "floor": []}
    for _ in range(runs):
        for label, tree in (("before", old), ("after", new)):
            env = dict(os.environ, PYTHONPATH=str(tree))
            results[label].append(timed([sys.executable, "-P", "-m", "nsanalyze", "report", export, "-o", str(out)], env))
        results["floor"].append(timed(["sqlite3", export, FLOOR]))
    floor = statistics.median(w for w, _ in results["floor"])
    for label, values in results.items():
        wall, peak = statistics.median(w for w, _ in values), statistics.median(m for _, m in values)
        print(f"{label}: {wall:.2f} s, {peak:.0f} MB" + (f" ({wall / floor:.1f}x)" if label != "floor" else ""))


if __name__ == "__main__":
    main()
