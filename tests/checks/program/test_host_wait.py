"""host-wait on the interpreter lock (blind78_gilthread, recorded before any check looked at it: a code language
model's training loop whose batches a Python thread of the same process tokenizes; the fix builds them in DataLoader
worker processes), and on a program run each step (blind80_gpumon)."""

import pytest

from tests.conftest import REAL, program_findings, sql, sql_saved_per_step

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
    assert "another thread in pthread_cond_timedwait, " in wait["title"]   # the lock's timed waits named first
    assert f"{at:,} of them ending at one timeout" in wait["advice"]
    launch = findings["launch-overhead"]
    assert launch["advice"].startswith("The launching thread shares Python's interpreter lock")
    # host-compute's stretches blocked in the same lock waits say so, not a DataLoader's queue (a user read)
    compute = findings["host-compute"]
    assert "in pthread_cond_timedwait (Python's interpreter lock, as host-wait's finding says)" in compute["title"]
    assert compute["advice"].startswith("These waits are the interpreter lock's")


def test_queue_waits_and_worker_processes_are_not_the_interpreter_lock(analyzed):
    """The twin whose batches come from worker processes, and loops whose main thread waits on a DataLoader's queue
    (a semaphore: sem_clockwait), hold no timed waits at one timeout on the launching thread: no interpreter lock is
    named."""
    for name in ("blind78_gilthread_fix1_nsys.sqlite.xz", "loader_workers_nsys.sqlite.xz",
                 "blind68_loader_base1_nsys.sqlite.xz"):
        model = analyzed(REAL / name)
        assert not any("interpreter lock" in f["title"] or "interpreter lock" in f["advice"]
                       for f in model["findings"])


# Per process other than the one that launched kernels: its OS calls' first start and last end (SQL)
PROCESSES = """SELECT o.globalTid >> 24, MIN(o.start), MAX(o.end) FROM OSRT_API o GROUP BY 1
               HAVING o.globalTid >> 24 NOT IN (SELECT DISTINCT r.globalTid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL k
                   JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId)"""


@pytest.mark.parametrize("run", ["1", "2"])
def test_a_program_run_each_step_is_named_and_priced(analyzed, run):
    """blind80_gpumon (recorded before any check looked at it): a training loop that runs `nvidia-smi --query-gpu=...`
    through subprocess.run after every step, its output read through pipes (the launching thread in poll: "I/O"); the
    fix queries from a thread every 2 s. Read blind, host-wait came first with a DataLoader's advice. The processes that
    begin and end inside the window (SQL: one a step) now name the program, lead the advice, and the finding prices
    what the fix saved within 15%."""
    base, fix = f"blind80_gpumon_base{run}_nsys.sqlite.xz", f"blind80_gpumon_fix{run}_nsys.sqlite.xz"
    model = analyzed(REAL / base)
    window = model["timeline"]["window"]
    inside = [pid for pid, first, last in sql(REAL / base, PROCESSES)
              if first >= window["start_ns"] and last <= window["end_ns"]]
    steps = model["timeline"]["steps"]["count"]
    first = program_findings(model)[0]
    assert first["check"] == "host-wait" and len(inside) == pytest.approx(steps, abs=2)
    assert f"{len(inside)} processes began and ended in the window, 1.0 a step" in first["title"]
    assert "`nvidia-smi`" in first["title"] and first["advice"].startswith("The loop runs a program and waits for it")
    saved = sql_saved_per_step(analyzed, base, fix)
    assert first["estimated_savings_ns"] / steps == pytest.approx(saved, rel=0.15)
    assert not any("began and ended" in f["title"] for f in program_findings(analyzed(REAL / fix)))
