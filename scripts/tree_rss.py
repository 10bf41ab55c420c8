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


def _adopt_orphans() -> None:
    """This process becomes the child subreaper of the run (Linux): a process whose parent ends before it (the
    multiprocessing fork server of a pytest-xdist worker, its forked analyses) is adopted here rather than by
    init, so it stays in the tree summed above, and its CPU time, once reaped here, in this process's children's
    (what GNU time reports): adopted by init, it counted nowhere."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap_adopted(wait_s: float = 60.0) -> int:
    """Waits for the processes adopted during the run (each ends with its pipes, once the run's processes have),
    at most wait_s seconds: how many are left."""
    ends = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid == 0:
            if time.monotonic() > ends:
                return len(_children().get(os.getpid(), []))
            time.sleep(0.1)


def main() -> int:
    import resource

    started = time.monotonic()
    _adopt_orphans()
    child = subprocess.Popen(sys.argv[1:])
    peak, peak_count, peak_pss = 0, 0, 0
    while child.poll() is None:
        total, shared, count = tree_rss_kib(os.getpid())
        total, shared, count = total - _resident_kib(os.getpid()), shared - _proportional_kib(os.getpid()), count - 1
        if total > peak:
            peak, peak_count = total, count
        peak_pss = max(peak_pss, shared)
        for pid in _children().get(os.getpid(), []):   # adopted ones that ended (not the run's own process)
            if pid != child.pid:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        time.sleep(0.2)
    left = _reap_adopted()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"tree_rss: peak sum of resident memory {peak / 1024 / 1024:.2f} GiB ({peak} KiB, {peak_count} "
          f"processes), peak sum of Pss {peak_pss / 1024 / 1024:.2f} GiB, wall {time.monotonic() - started:.0f} s, "
          f"CPU of every process of the run {cpu.ru_utime + cpu.ru_stime:.0f} s (user {cpu.ru_utime:.0f} s, "
          f"system {cpu.ru_stime:.0f} s{f'; {left} still running, not counted' if left else ''}), "
          f"exit {child.returncode}", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
