"""Host activity painted a slice of the window at a time (normalize.host_activity._idle_pieces) against the
window painted at once, on real exports with OS runtime calls traced: the same classes, idle time by part,
per-step figures and idle islands."""

import numpy as np
import pytest

from nsanalyze.normalize import host_activity
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from tests.conftest import REAL, sql


def _painted(path, slice_segments: int):
    kept = host_activity.PAINT_SLICE_SEGMENTS
    host_activity.PAINT_SLICE_SEGMENTS = slice_segments
    try:
        activity = build_timeline(read_profile(path)).host_activity
    finally:
        host_activity.PAINT_SLICE_SEGMENTS = kept
    return activity.to_json(), [(c.name, c.step_idle_ns.tolist(), c.step_host_ns.tolist(),
                                 {gpu: _joined(island) for gpu, island in c.idle_islands.items()}) for c in activity.classes]


def _joined(parts) -> list[int]:
    """A GPU's idle islands of a class (parts, one per paint slice) as one list: their starts, then their ends."""
    empty = np.zeros(0, np.int64)
    return np.concatenate([np.concatenate([s for s, _ in parts] or [empty]),
                           np.concatenate([e for _, e in parts] or [empty])]).tolist()


@pytest.mark.parametrize("name", ["alloc_churn_nsys.sqlite.xz", "histlog_every10_nsys.sqlite.xz"])
def test_slices_paint_what_the_whole_window_paints(name):
    path = REAL / name
    assert sql(path, "SELECT COUNT(*) FROM OSRT_API")[0][0] > 0   # OS calls traced: their classes painted too
    whole, sliced = _painted(path, 1 << 40), _painted(path, 1000)
    assert whole[0]["classes"] and whole == sliced


def _counted(path, chunk: int):
    from nsanalyze.normalize import budget

    kept = host_activity.COUNT_CHUNK, budget.CHUNK
    host_activity.COUNT_CHUNK = budget.CHUNK = chunk
    try:
        timeline = build_timeline(read_profile(path))
    finally:
        host_activity.COUNT_CHUNK, budget.CHUNK = kept
    activity = timeline.host_activity
    return timeline.window, activity.to_json(), [(c.name, c.step_calls.tolist(), c.step_host_ns.tolist())
                                                 for c in activity.classes]


CALLS_BY_NAME = """SELECT s.value, COUNT(*), SUM(MIN(c.end, {end}) - MAX(c.start, {start}))
    FROM CUPTI_ACTIVITY_KIND_RUNTIME c
    JOIN StringIds s ON s.id = c.nameId WHERE c.end > {start} AND c.start < {end} GROUP BY s.value"""
OS_CALLS_BY_NAME = CALLS_BY_NAME.replace("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API")


def test_class_counts_a_chunk_at_a_time_equal_sql():
    """The classes' calls counted a few hundred at a time (host_activity._class_counts, budget totals) give
    what one pass gives, and each CUDA class's calls by name are SQL's calls that reach into the window
    (one process, no driver calls traced: every runtime call is the GPU's)."""
    path = REAL / "alloc_churn_nsys.sqlite.xz"
    assert sql(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_DRIVER'")[0][0] == 0
    window, whole, per_step = _counted(path, 1 << 20)
    assert (window, whole, per_step) == _counted(path, 300)
    expected: dict = {}
    for name, count, ns in sql(path, CALLS_BY_NAME.format(start=window.start, end=window.end)):
        calls, total = expected.get(host_activity.base_name(name), (0, 0))
        expected[host_activity.base_name(name)] = (calls + count, total + ns)
    cuda = [c for c in whole["classes"] if c["source"] == "cuda"]
    assert sum(c["calls"] for c in cuda) == sum(count for count, _ in expected.values())
    assert len(cuda) > 3 and all(entry["top_calls"] for entry in cuda)
    for entry in cuda:
        for top in entry["top_calls"]:
            assert (top["calls"], top["ns"]) == expected[top["name"]]


def test_os_calls_count_their_time_inside_the_window():
    """An OS call's time is what lies inside the window: blind61_anomaly's autograd thread waits in
    pthread_cond_wait from before the steady window to its end, which counted 7.1 s of calls in a 6.4 s window;
    each name's calls and time are SQL's, clipped to the window (one process)."""
    path = REAL / "blind61_anomaly_base1_nsys.sqlite.xz"
    timeline = build_timeline(read_profile(path))
    window = timeline.window
    expected = {}
    for name, count, ns in sql(path, OS_CALLS_BY_NAME.format(start=window.start, end=window.end)):
        calls, total = expected.get(host_activity.base_name(name), (0, 0))
        expected[host_activity.base_name(name)] = (calls + count, total + ns)
    waits = next(c for c in timeline.host_activity.classes if c.name == "lock-wait")
    name, calls, ns = max(waits.top_calls, key=lambda call: call[2])
    assert name == "pthread_cond_wait" and (calls, ns) == expected[name]
    threads, = sql(path, "SELECT COUNT(DISTINCT globalTid) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                         f"WHERE s.value = 'pthread_cond_wait' AND o.end > {window.start} AND o.start < {window.end}")
    assert window.end - window.start < ns <= threads[0] * (window.end - window.start)


def test_idle_measured_a_chunk_at_a_time_equals_the_intervals_clipped():
    """Each class's idle time inside the steady steps (the per-step figures and idle_within, as the non-step
    phase check asks it), measured 7 intervals at a time over the paint's parts (host_activity.Measure),
    equals one pass and equals the idle islands clipped to each step and summed in integers."""
    path = REAL / "alloc_churn_nsys.sqlite.xz"
    kept = host_activity.Measure.CHUNK
    try:
        host_activity.Measure.CHUNK = 7
        small = build_timeline(read_profile(path))
        host_activity.Measure.CHUNK = 1 << 40
        whole = build_timeline(read_profile(path))
    finally:
        host_activity.Measure.CHUNK = kept
    starts, ends = small.step_starts, small.step_ends
    assert len(starts) > 10
    classes = [c for c in small.host_activity.classes if any(len(s) for parts in c.idle_islands.values() for s, _ in parts)]
    assert len(classes) > 3
    for c, w in zip(small.host_activity.classes, whole.host_activity.classes):
        assert c.name == w.name and c.step_idle_ns.tolist() == w.step_idle_ns.tolist()
        assert c.step_host_ns.tolist() == w.step_host_ns.tolist()
    for c in classes:
        (parts,) = c.idle_islands.values()   # one GPU
        s = np.concatenate([p[0] for p in parts])
        e = np.concatenate([p[1] for p in parts])
        clipped = np.maximum(np.minimum(e[None, :], ends[:, None]) - np.maximum(s[None, :], starts[:, None]), 0)
        per_step = clipped.sum(axis=1)   # int64: exact
        assert c.step_idle_ns.tolist() == per_step.astype(float).tolist()
        assert small.host_activity.idle_within(c.name, starts, ends) == float(per_step.sum())
