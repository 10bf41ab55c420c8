"""Renders `nsanalyze report X -o x.json` for every nsys export and Kineto trace in fixtures/ and the bench exports with
the code of a given source tree, so that two trees' reports can be compared byte for byte:

    python bench/equal_reports.py /tmp/base /tmp/before     # the frozen tree (git worktree add /tmp/base HEAD)
    python bench/equal_reports.py . /tmp/after
    diff -r /tmp/before /tmp/after
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("NSANALYZE_BENCH_DATA", ROOT / "bench" / ".data"))
BENCH = ("train_nsys.sqlite", "graphs_graphtrace_nsys_x16.sqlite", "spin_gpumetrics_nsys.sqlite",
         "spin_gpumetrics_nsys_x4.sqlite", "ddp_gpu_all_nsys_x4.sqlite", "ddp_gpu_all_nsys_x16.sqlite")


def exports() -> list[Path]:
    found = sorted({*ROOT.glob("fixtures/real/*.sqlite.xz"), *ROOT.glob("fixtures/public/*.sqlite*"),
                    *ROOT.glob("fixtures/*.sqlite.xz"), *ROOT.glob("fixtures/real/*_kineto.json.gz")})
    return found + [DATA / name for name in BENCH if (DATA / name).exists()]


def main() -> None:
    tree, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree))

    def render(path: Path) -> str:
        target = out / (path.name.split(".")[0] + ("_" + path.parent.name if path.parent != DATA else "_bench") + ".json")
        run = subprocess.run([sys.executable, "-P", "-m", "nsanalyze", "report", str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                              "-o", str(target)], cwd=ROOT, env=env, capture_output=True, text=True)
        (target.with_suffix(".rc")).write_text(f"{run.returncode}\n{run.stderr[-2000:]}")
        return f"{path.name}: {run.returncode}"

    with ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as pool:
        for line in pool.map(render, exports()):
            print(line, flush=True)


if __name__ == "__main__":
    main()
