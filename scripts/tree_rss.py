"""Run a command and report the largest SUM of resident memory of its whole process tree, sampled every
0.2 s from /proc (GNU time's "Maximum resident set size" is one process's: workers are not added up).
Both sums: of VmRSS (pages shared between processes, as forked ones share, counted in each) and of Pss
(shared pages divided among their sharers: what the tree takes from the machine).

    python scripts/tree_rss.py make test
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(parent, []).append(int(name))
    return tree


def _resident_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmRSS")), 0)
    except OSError:
        return 0


def _proportional_kib(pid: int) -> int:
    """Pss: the process's resident pages, those shared with others counted by their share."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            return next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
    except OSError:
        return 0


def tree_rss_kib(root: int) -> tuple[int, int, int]:
    """(sum of VmRSS over root and all its descendants, sum of their Pss, number of processes)."""
    tree, total, shared, count, todo = _children(), 0, 0, 0, [root]
    while todo:
        pid = todo.pop()
        total += _resident_kib(pid)
        shared += _proportional_kib(pid)
        count += 1
        todo.extend(tree.get(pid, []))
    return total, shared, count


def main() -> int:
    started = time.monotonic()
    child = subprocess.Popen(sys.argv[1:])
    peak, peak_count, peak_pss = 0, 0, 0
    while child.poll() is None:
        total, shared, count = tree_rss_kib(child.pid)
        if total > peak:
            peak, peak_count = total, count
        peak_pss = max(peak_pss, shared)
        time.sleep(0.2)
    print(f"tree_rss: peak sum of resident memory {peak / 1024 / 1024:.2f} GiB ({peak} KiB, {peak_count} "
          f"processes), peak sum of Pss {peak_pss / 1024 / 1024:.2f} GiB, wall {time.monotonic() - started:.0f} s, "
          f"exit {child.returncode}", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
