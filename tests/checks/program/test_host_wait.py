"""host-wait on the interpreter lock (blind78_gilthread, recorded before any check looked at it: a code language
model's training loop whose batches a Python thread of the same process tokenizes; the fix builds them in DataLoader
worker processes)."""

from tests.conftest import REAL, sql

BASE = "blind78_gilthread_base1_nsys.sqlite.xz"

# The launching threads' timed condition waits in the window, by SQL (the threads that launched kernels: the loop's
# and autograd's backward thread)
TIMED = """SELECT o.end - o.start FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
           WHERE s.value = 'pthread_cond_timedwait' AND o.globalTid IN (SELECT DISTINCT globalTid
               FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN (SELECT id FROM StringIds
                                                                 WHERE value LIKE 'cudaLaunchKernel%'))
           AND o.end > {start} AND o.start < {end}"""


def test_timed_waits_at_the_switch_interval_name_the_interpreter_lock(analyzed):
    """Read blind, host-wait named "a lock, a queue or another thread" and advised DataLoader workers for a queue,
    and launch-overhead, first, advised a CUDA graph. The launching threads' timed waits (SQL: about 700 in the
    window) end at one timeout (the 99th percentile of their durations, within 0.95-1.10 of it) a third of the time,
    about 5 ms: CPython's switch interval, the interpreter lock
    handed between threads. host-wait's title and advice now say so, and launch-overhead's advice leads with moving
    the other thread's work to processes."""
    model = analyzed(REAL / BASE)
    window = model["timeline"]["window"]
    waits = sorted(d for (d,) in sql(REAL / BASE, TIMED.format(start=window["start_ns"], end=window["end_ns"])))
    timeout = waits[int(0.99 * (len(waits) - 1))]
    at = sum(0.95 * timeout <= d <= 1.10 * timeout for d in waits)
    assert len(waits) > 500 and 4.9e6 < timeout < 5.5e6 and at > 0.2 * len(waits)
    findings = {f["check"]: f for f in model["findings"]}
    wait = findings["host-wait"]
    assert f"{round(100 * at / len(waits))}% of its timed waits end at" in wait["title"]
    assert "Python's interpreter lock" in wait["title"] and wait["advice"].startswith("The launching thread's lock")
    assert f"{at:,} of them ending at one timeout" in wait["advice"]
    launch = findings["launch-overhead"]
    assert launch["advice"].startswith("The launching thread shares Python's interpreter lock")


def test_queue_waits_and_worker_processes_are_not_the_interpreter_lock(analyzed):
    """The twin whose batches come from worker processes, and loops whose main thread waits on a DataLoader's queue
    (a semaphore: sem_clockwait), hold no timed waits at one timeout on the launching thread: no interpreter lock is
    named."""
    for name in ("blind78_gilthread_fix1_nsys.sqlite.xz", "loader_workers_nsys.sqlite.xz",
                 "blind68_loader_base1_nsys.sqlite.xz"):
        model = analyzed(REAL / name)
        assert not any("interpreter lock" in f["title"] or "interpreter lock" in f["advice"]
                       for f in model["findings"])
