"""Timed trials (normalize.tuning) against SQL over real exports: cuDNN's benchmark mode with a new input length each
step (blind_cudnnbench_base: every trial is one cudaEventSynchronize right after a cudaEventRecord), its twin with
benchmark mode off, and a loop that records an event every iteration and syncs once (power_iteration): no trials."""

import statistics

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
