"""Memory and time of `nsanalyze report` stage by stage (issue 38's measurements): the timeline's stages are
wrapped, the process's RSS sampled every 20 ms, and each stage's RSS at entry, at exit and its peak inside is
printed to stderr as it ends (nested stages indented). The sampler's thread and the wrappers cost a little
time, no memory to speak of.

    python bench/stage_memory.py EXPORT.sqlite -o out.json
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import time

STAGES = {
    "nsanalyze.normalize.timeline": ("build_timeline", "find_steps", "read_activity", "project_on_gpu", "choose_window",
                                     "window_activity", "build_budgets", "_timeline_after_budgets", "_kernels_and_work",
                                     "_steps_section", "_host_activity", "_os_calls", "median_step_block", "_left_out",
                                     "_host_stretches", "find_phases", "read_samples", "_step_copy_bytes"),
    "nsanalyze.normalize.devices": ("devices", "streams", "gaps", "gap_histogram"),
    "nsanalyze.normalize.host_calls": ("ranges", "syncs", "launches", "copies", "api_calls"),
    "nsanalyze.normalize.host_activity": ("attribute", "group_calls", "paint"),
}


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    def __init__(self):
        self.peak, self.depth, self.t0 = 0.0, 0, time.perf_counter()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.02)

    def wrap(self, module: str, name: str) -> None:
        owner = importlib.import_module(module)
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def stage(*args, **kwargs):
            before, outer = rss_mb(), self.peak
            self.peak, started = before, time.perf_counter()
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                print(f"{'  ' * self.depth}{module.rsplit('.', 1)[-1]}.{name}: in {before:,.0f} out {rss_mb():,.0f} "
                      f"peak {self.peak:,.0f} MB, {time.perf_counter() - started:.2f} s "
                      f"(at {time.perf_counter() - self.t0:.1f} s)", file=sys.stderr, flush=True)
                self.peak = max(self.peak, outer)
        setattr(owner, name, stage)


def main() -> None:
    sampler = Sampler()
    for module, names in STAGES.items():
        for name in names:
            sampler.wrap(module, name)
    from nsanalyze.cli import main as cli

    try:
        cli(["report", *sys.argv[1:]])
    finally:
        print(f"peak {sampler.peak:,.0f} MB, {time.perf_counter() - sampler.t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
