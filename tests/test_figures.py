"""One per-step figure per range: `diff` and the history database (`batch`, `trend`) read the same
number (nsanalyze.figures), and it is the GPU time the range's calls launched, by SQL."""

import pytest

from tests.conftest import REAL, sql

PAGEABLE = REAL / "transfer_pageable_nsys.sqlite.xz"

# GPU time (kernels and copies; this export has no memsets) launched by runtime calls made inside each `step N` range, per range
GPU_PER_STEP = """
WITH steps AS (SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
               WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %'),
     work AS (SELECT end - start AS ns, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
              SELECT end - start, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY)
SELECT steps.start, SUM(w.ns) FROM steps
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= steps.start AND r.start < steps.end
JOIN work w ON w.correlationId = r.correlationId GROUP BY steps.start ORDER BY steps.start"""


def test_diff_and_history_read_one_figure_per_range(tmp_path):
    """transfer_pageable's steps are copies: diff read 29,979 us a step and the history 2.9 us (kernels
    only). Both now read the range's GPU time per instance, and it matches SQL for the whole capture."""
    from nsanalyze.batch import _history_rows
    from nsanalyze.diff import diff

    stored = {r["name"]: r for r in _history_rows(str(PAGEABLE))["ranges"]}
    compared = {r["name"]: r for r in diff(str(PAGEABLE), str(PAGEABLE))["ranges"]}
    assert compared and set(compared) <= set(stored)
    for name, row in compared.items():
        assert row["before_ns"] == pytest.approx(stored[name]["kernel_ns"])
    per_step = [ns for _, ns in sql(PAGEABLE, GPU_PER_STEP)][1:]   # the report's window leaves the first step out
    assert stored["step N"]["instances"] == len(per_step)
    assert stored["step N"]["kernel_ns"] == pytest.approx(sum(per_step) / len(per_step), rel=0.01)
    assert stored["step N"]["kernel_ns"] > 20e6    # 256 MB from pageable memory a step: tens of ms, not us
