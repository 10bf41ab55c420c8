"""The host's CUDA call figures (normalize.host_calls) against SQL over real exports."""

from nsanalyze.normalize import host_calls
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from tests.conftest import REAL, sql

EXPORT = REAL / "alloc_churn_nsys.sqlite.xz"
LAUNCHES = """SELECT COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
    WHERE s.value LIKE 'cudaLaunchKernel%' AND r.start >= {start} AND r.start < {end}"""
LAUNCHED = """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.start >= {start} AND k.start < {end}
    AND k.correlationId IN (SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                            WHERE s.value LIKE 'cudaLaunch%' OR s.value LIKE 'cuLaunch%')"""


def test_api_calls_and_launches_summed_a_chunk_at_a_time_equal_sql(monkeypatch):
    """The calls by name, summed 50 calls at a time, are one pass's, and the kernel launches' count and time
    in the window are SQL's; so are the launches' figures, 50 kernels at a time."""
    whole = build_timeline(read_profile(EXPORT))
    monkeypatch.setattr(host_calls, "CHUNK", 50)
    chunked = build_timeline(read_profile(EXPORT))
    assert [c.__dict__ if hasattr(c, "__dict__") else c for c in chunked.api_calls] == \
        [c.__dict__ if hasattr(c, "__dict__") else c for c in whole.api_calls]
    launch = next(c for c in whole.api_calls if c.name == "cudaLaunchKernel")
    (count, total), = sql(EXPORT, LAUNCHES.format(start=whole.window.start, end=whole.window.end))
    assert count > 1000 and (launch.calls, launch.total_ns) == (count, total)
    # the launches' figures, kernels taken 50 at a time: one pass's; their count SQL's (kernels starting in
    # the window whose correlation id a launch call has)
    assert chunked.launches.__dict__ == whole.launches.__dict__
    (launched,), = sql(EXPORT, LAUNCHED.format(start=whole.window.start, end=whole.window.end))
    assert whole.launches.launches == launched > 1000 and whole.launches.short_kernels > 0
