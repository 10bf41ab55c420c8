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
                                 [np.concatenate(island).tolist() for island in c.idle_islands]) for c in activity.classes]


@pytest.mark.parametrize("name", ["alloc_churn_nsys.sqlite.xz", "histlog_every10_nsys.sqlite.xz"])
def test_slices_paint_what_the_whole_window_paints(name):
    path = REAL / name
    assert sql(path, "SELECT COUNT(*) FROM OSRT_API")[0][0] > 0   # OS calls traced: their classes painted too
    whole, sliced = _painted(path, 1 << 40), _painted(path, 1000)
    assert whole[0]["classes"] and whole == sliced
