"""Pieces of the timeline's assembly (normalize.timeline) against SQL over real exports."""

import numpy as np

from nsanalyze.normalize import timeline
from nsanalyze.normalize.activity import read_activity
from nsanalyze.read import read_profile
from tests.conftest import PUBLIC, sql

NUMBA_JIT = PUBLIC / "quasiben__nvtx-examples__numba-jit.sqlite.xz"
CALLS_AFTER = """SELECT start FROM (SELECT start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME {driver})
    WHERE start >= {at} AND (globalTid >> 24) IN ({pids}) ORDER BY start LIMIT {count}"""


def test_first_calls_after_a_stretch_a_chunk_at_a_time_equal_sql(monkeypatch):
    """The first calls of a process from a time on (where the JIT loads after a host stretch are looked for),
    taken 3 calls at a time, are those a stable sort of all of them gives, and SQL's first calls by start."""
    calls = read_activity(read_profile(NUMBA_JIT), (-(2**62), 2**62)).calls
    assert len(calls) > 10
    tables = {name for (name,) in sql(NUMBA_JIT, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    driver = "UNION ALL SELECT start, globalTid FROM CUPTI_ACTIVITY_KIND_DRIVER" if "CUPTI_ACTIVITY_KIND_DRIVER" in tables else ""
    pids = sorted({int(p) for p in calls.pid if p >= 0})
    for at_ns in (int(np.min(calls.start)), int(np.median(calls.start)), int(np.max(calls.start)) + 1):
        mine = np.flatnonzero(np.isin(calls.pid, pids) & (calls.start >= at_ns))
        expected = mine[np.argsort(calls.start[mine], kind="stable")][:5]
        for chunk in (1 << 20, 3):
            monkeypatch.setattr(timeline, "AFTER_CHUNK", chunk)
            assert timeline._first_calls_after(calls, pids, at_ns, 5).tolist() == expected.tolist()
        starts = [s for (s,) in sql(NUMBA_JIT, CALLS_AFTER.format(driver=driver, at=at_ns, pids=",".join(map(str, pids)),
                                                                  count=5))]
        assert calls.start[expected].tolist() == starts
