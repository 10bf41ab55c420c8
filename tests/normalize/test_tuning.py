"""Timed trials (normalize.tuning) against SQL over real exports: cuDNN's benchmark mode with a new input length each
step (blind_cudnnbench_base: every trial is one cudaEventSynchronize right after a cudaEventRecord), its twin with
benchmark mode off, and a loop that records an event every iteration and syncs once (power_iteration): no trials."""

import statistics

import numpy as np
import pytest

from tests.conftest import PUBLIC, REAL, sql

BENCH_ON, BENCH_OFF = REAL / "blind_cudnnbench_base_nsys.sqlite.xz", REAL / "blind_cudnnbench_fix_nsys.sqlite.xz"


def _event_syncs_per_step(path) -> list[int]:
    """Per NVTX step range, the cudaEventSynchronize calls made in it (SQL)."""
    rows = sql(path, """SELECT n.start, n.end FROM NVTX_EVENTS n WHERE n.eventType = 59 AND n.text LIKE 'step %'
                        ORDER BY n.start""")
    syncs = [s for (s,) in sql(path, """SELECT r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
                                        ON s.id = r.nameId WHERE s.value LIKE 'cudaEventSynchronize%'""")]
    return [sum(start <= t < end for t in syncs) for start, end in rows]


def test_each_of_cudnns_trials_is_one_event_sync(analyzed):
    """The trials a step are the event syncs a step (SQL: 200 in most steps, 110-170 in some), in every step of the
    replayed block; the stretches hold nearly all of each step (its first trial 3-5 ms after the step's start)."""
    trials = analyzed(BENCH_ON)["timeline"]["timed_trials"]
    per_step = _event_syncs_per_step(BENCH_ON)
    steady = per_step[1:]
    assert trials["steps_with_trials"] == trials["steps"] >= 5
    assert trials["trials_per_step"] == statistics.median(steady) == 200
    steps = analyzed(BENCH_ON)["timeline"]["steps"]
    assert 0.9 * steps["median_ns"] < trials["stretch_ns_per_step"] < steps["mean_ns"]
    assert trials["sync_share"] > 0.95   # the tuner's syncs are the program's syncs


def test_no_trials_without_benchmark_mode(analyzed):
    assert sum(_event_syncs_per_step(BENCH_OFF)) == 0
    assert "timed_trials" not in analyzed(BENCH_OFF)["timeline"]


def test_events_recorded_every_iteration_are_no_trials(analyzed):
    """power_iteration records an event after every iteration (10 a step, SQL) and syncs at the step's end: the
    host waits once for ten iterations, timing none of them alone."""
    path = PUBLIC / "brycelelbach__nsightful__tests__power_iteration__baseline.sqlite.xz"
    (records,) = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                              WHERE s.value LIKE 'cudaEventRecord%'""")[0]
    assert records > 400
    model = analyzed(path)
    assert "timed_trials" not in model["timeline"]
    assert "autotuning" not in {f["check"] for f in model["findings"]}


TIMED, UNTIMED = REAL / "trit52_timed_base_nsys.sqlite.xz", REAL / "trit52_timed_fix_nsys.sqlite.xz"
# The timing's calls by SQL, on the launching thread in call order: the event calls (records, syncs, creation,
# elapsed_time's queries, destruction) and the capture check PyTorch makes right before a record
TIMING_CALLS_SQL = """WITH calls AS (SELECT r.start, s.value AS name,
                                            LEAD(s.value) OVER (PARTITION BY r.globalTid ORDER BY r.start) AS next
                                     FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId)
SELECT COUNT(*) FROM calls WHERE name LIKE 'cudaEvent%'
    OR (name LIKE 'cudaStreamIsCapturing%' AND next LIKE 'cudaEventRecord%')"""


def test_timing_code_is_found_with_its_calls(analyzed):
    """An event pair around each of 8 layers, synced at once, every step (SQL: 8 cudaEventSynchronize a step): 8
    timings a step, nothing warmed up (no tuner), and the timing's calls a step are SQL's event calls with the
    capture checks before each record (88 a step); the twin without the timing has none."""
    timing = analyzed(TIMED)["timeline"]["timing_code"]
    per_step = _event_syncs_per_step(TIMED)
    assert timing["steps_with_timings"] == timing["steps"] >= 5
    assert timing["timings_per_step"] == statistics.median(per_step) == 8
    ((calls,),) = sql(TIMED, TIMING_CALLS_SQL)
    assert timing["calls_per_step"] == pytest.approx(calls / len(per_step), abs=1.0)
    assert timing["sync_share"] == 1.0   # the timing's syncs are the program's syncs
    assert "timing_code" not in analyzed(UNTIMED)["timeline"]


def test_a_tuner_is_no_timing_code(analyzed):
    """cuDNN's trials are warmed up: the tuner's (timed_trials), never the program's timing code."""
    timeline = analyzed(BENCH_ON)["timeline"]
    assert "timed_trials" in timeline and "timing_code" not in timeline


def _warm_ups_by_sets(code, first, sync, names) -> np.ndarray:
    """The warm-ups as normalize.tuning defines them, with each timing's kernel names a set union over its calls
    (the form the reader used before: quadratic where a timing spans thousands of launches, 144 s on trit52)."""
    from nsanalyze.normalize.tuning import BETWEEN, LAUNCH, RECORD, SYNC

    n = len(code)
    warm = np.zeros(n, bool)
    trial_at = dict(zip(first.tolist(), sync.tolist()))
    next_sync = np.flatnonzero(code == SYNC)
    for k in np.flatnonzero((code == SYNC) | (code == RECORD)).tolist():
        j = k + 1
        if code[k] == SYNC:
            while j < n and code[j] == BETWEEN:
                j += 1
            if j not in trial_at:
                continue
            timing = (j, trial_at[j])
        else:
            if k == 0 or code[k - 1] not in (LAUNCH, BETWEEN):
                continue
            at = np.searchsorted(next_sync, k)
            if at >= len(next_sync):
                continue
            timing = (k, int(next_sync[at]))
        timed_names = set().union(*(names[i] for i in range(timing[0], timing[1] + 1))) - {None}
        i = k - 1
        while i >= 0 and code[i] in (LAUNCH, BETWEEN):
            if code[i] == LAUNCH and names[i] and names[i] <= timed_names:
                warm[i] = True
            i -= 1
    return warm


def _warm_ups_both_ways_here(path) -> list[tuple[int, bool]]:
    """Per chain with trials, while the report's timeline is built: the warm-ups found, and whether the set
    union's definition finds the same calls."""
    from nsanalyze.normalize import tuning
    from nsanalyze.normalize.timeline import build_timeline
    from nsanalyze.normalize.tuning import trials
    from nsanalyze.read import read_profile

    seen, fast = [], tuning._warm_ups

    def both(code, first, names):
        sync = trials(code)[1]   # the trials' syncs, which the set definition reads
        got = fast(code, first, names)
        seen.append((int(got.sum()), bool((got == _warm_ups_by_sets(code, first, sync, names)).all())))
        return got
    tuning._warm_ups = both
    try:
        build_timeline(read_profile(path))
    finally:
        tuning._warm_ups = fast
    return seen


@pytest.mark.parametrize("path", [BENCH_ON, TIMED], ids=["cudnn", "timing-code"])
def test_warm_ups_are_those_of_the_set_definition(path):
    """The warm-ups (one union of names per timing, from the end) are the calls the set definition finds, on cuDNN's
    trials and on the program's timing code (whose layers, launched every step, are found before some timings
    again: too few of its trials for a tuner's, MIN_WARMED)."""
    from tests.isolated import apart

    seen = apart(_warm_ups_both_ways_here, path)
    assert seen and all(same for _, same in seen)
    assert sum(count for count, _ in seen) > 0
