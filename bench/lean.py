"""`make bench` (part): what an install of nsanalyze costs. The packages the wheel pulls in (its
required dependencies, transitively, without extras) and their installed size, measured from the
environment's own metadata; and the start-up of the `report` command (interpreter start and imports,
median of several runs), with whether Dask is imported on the way (it must not be: it is an extra).
Prints a short table. Not a test: figures depend on the machine."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

RUNS = 5


def _name(requirement: str) -> str | None:
    """The distribution a requirement names, or None when it only applies with an extra."""
    if "extra ==" in requirement.replace('"', "").replace("'", ""):
        return None
    return re.split(r"[\s;<>=!~\[(]", requirement.strip(), maxsplit=1)[0]


def closure(root: str = "nsanalyze") -> dict[str, metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        todo += [n for n in (_name(r) for r in dist.requires or []) if n]
    return seen


def installed_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        try:
            total += Path(dist.locate_file(file)).stat().st_size
        except OSError:
            pass
    return total


def startup_s() -> tuple[float, bool]:
    code = ("import sys; from nsanalyze.cli import main\n"
            "try: main(['report', '--help'])\nexcept SystemExit: pass\n"
            "print('DASK' if any(m.split('.')[0] in ('distributed', 'dask') for m in sys.modules) else 'lean', "
            "file=sys.stderr)")
    times, dask = [], False
    for _ in range(RUNS):
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - start)
        dask = dask or "DASK" in result.stderr
    return statistics.median(times), dask


def main() -> None:
    dists = closure()
    sizes = {key: installed_bytes(d) for key, d in dists.items()}
    heaviest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    seconds, dask = startup_s()
    print(f"install: {len(dists)} distributions, {sum(sizes.values()) / 1e6:.0f} MB installed "
          f"(heaviest: {', '.join(f'{k} {v / 1e6:.0f} MB' for k, v in heaviest)})")
    print(f"`nsanalyze report` start-up (interpreter + imports, median of {RUNS}): {seconds:.2f} s; "
          f"Dask imported: {'yes' if dask else 'no'}")
    from importlib.util import find_spec

    print(f"Dask (the [dask] extra) present in this environment: {'yes' if find_spec('distributed') else 'no'}")


if __name__ == "__main__":
    main()
