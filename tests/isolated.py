"""Analyses of real profiles run apart from the test process, so its memory stays bounded.

NVIDIA's `ncu_report` keeps what it loads for every launch it touches (its native memory, about five
times the report's size: 930 MB for fixtures/real/gpt_fp32_full.ncu-rep) until the process ends, even
once the report and every handle on it are gone; reading it a second time costs as much again. One
test process that analyzed each fixture report as often as the tests asked grew to 15 GB. Here each
analysis runs in a process of its own, forked from a server that has the analysis imported already
(milliseconds a start), and only the report model (a few hundred KB) comes back.
"""

from __future__ import annotations

import atexit
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

_POOL: ProcessPoolExecutor | None = None


def _pool() -> ProcessPoolExecutor:
    global _POOL
    if _POOL is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["nsanalyze._forkserver_guard", "nsanalyze.analyze", "tests.isolated"])
        # one process per analysis: what ncu_report keeps ends with it
        _POOL = ProcessPoolExecutor(max_workers=1, mp_context=context, max_tasks_per_child=1)
    return _POOL


def close_pool() -> None:
    """The pool's threads and queues ended (after each test file): a test that signals its own process
    (Ctrl-C) meets the interpreter's main thread alone. The fork server stays for the next pool."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
        _POOL = None


atexit.register(close_pool)


def _call(function, args, kwargs):
    import os

    try:
        return function(*args, **kwargs)
    finally:
        log = os.environ.get("NSANALYZE_TEST_PEAKS")   # where each process's peak memory is noted (README)
        if log:
            import resource

            with open(log, "a") as handle:
                usage = resource.getrusage(resource.RUSAGE_SELF)
                handle.write(f"{usage.ru_maxrss}\t{usage.ru_utime + usage.ru_stime:.2f}\t{function.__qualname__}\t{args}\n")


def apart(function, *args, **kwargs):
    """function(*args, **kwargs) in a process of its own (a module-level function; pickled arguments
    and result): the same result, the same exceptions."""
    give_back_free_memory()
    return _pool().submit(_call, function, args, kwargs).result()


def give_back_free_memory() -> None:
    """The test process's freed heap returned to the system while the other process works (glibc keeps
    it otherwise), so the two together stay as small as what each holds."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):   # not glibc
        pass


def analyze_apart(paths, options=None) -> dict:
    """analyze(paths, options) in a process of its own: the same model, the same exceptions."""
    from nsanalyze.analyze import analyze

    return apart(analyze, [str(p) for p in paths], options)
