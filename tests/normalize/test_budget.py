"""The time budget on every real nsys export: parts that add up to the window, against SQL."""

import pytest

from nsanalyze.normalize.budget import PARTS
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NSYS, FIRST_RUNS, PUBLIC_NSYS, REAL, covered_ns, sql

ALL_NSYS = [DEV_SUITE_NSYS, DEV_INFER_NSYS, *PUBLIC_NSYS, *FIRST_RUNS]   # (conftest: why not the second and fixed runs)


@pytest.mark.parametrize("path", ALL_NSYS, ids=lambda p: p.name[:48])
def test_budget_adds_up_and_savings_fit_the_window(path, analyzed):
    model = analyzed(path)
    timeline = model["timeline"]
    window_ns = timeline["span_ns"]
    if not timeline["budget"]:                      # no GPU activity in the export
        assert timeline["kernels"] == 0
        return
    assert [p["part"] for p in timeline["budget"]] == list(PARTS)
    assert sum(p["ns"] for p in timeline["budget"]) == pytest.approx(window_ns, rel=0.02)
    for device in timeline["devices"]:
        if device.get("budget"):
            assert sum(p["ns"] for p in device["budget"]) == pytest.approx(device["window_ns"], rel=0.02)
    program = [f for f in model["findings"] if f["kernel_id"] is None]
    # a finding whose change is part of another's is counted within that one's savings (docs/contract.md), no more
    by_check = {f["check"]: f for f in program}
    within = [f for f in program if f["evidence"].get("within") in by_check]
    for part in within:
        assert part["estimated_savings_ns"] <= by_check[part["evidence"]["within"]]["estimated_savings_ns"] + 1
    assert sum(f["estimated_savings_ns"] for f in program if f not in within) <= window_ns * 1.0001
    devices = {d["device_id"]: d for d in timeline["devices"]}
    for finding in program:
        part = finding.get("budget_part")
        if part:   # a finding about one GPU saves at most that GPU's part, else the window's (GPUs averaged)
            device = finding.get("budget_device")
            budget = devices[device]["budget"] if device in devices else timeline["budget"]
            part_ns = {p["part"]: p["ns"] for p in budget}
            claimed = finding["evidence"].get("claimed_parts")
            if claimed:   # a wider cause spanning parts: at most what it claims, each claim within its part
                assert all(c["ns"] <= part_ns[c["part"]] + 1 for c in claimed)
                assert finding["estimated_savings_ns"] <= sum(c["ns"] for c in claimed) + len(claimed)
            else:
                assert finding["estimated_savings_ns"] <= part_ns[part] + 1


def test_busy_parts_are_the_union_of_gpu_work(analyzed):
    """gpu_compute + gpu_communication + gpu_copy equals the union of kernel and copy intervals (SQL rows,
    merged by a plain loop) clipped to the window."""
    path = REAL / "graphs_after_nsys.sqlite.xz"
    timeline = analyzed(path)["timeline"]
    start, end = timeline["window"]["start_ns"], timeline["window"]["end_ns"]
    rows = sql(path, f"""SELECT 0, MAX(start, {start}), MIN(end, {end}) FROM (
                           SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                           SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
                           SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET)
                         WHERE end > {start} AND start < {end} ORDER BY 2, 3""")
    busy = covered_ns((start, end) for _, start, end in rows)
    parts = {p["part"]: p["ns"] for p in timeline["budget"]}
    assert parts["gpu_compute"] + parts["gpu_communication"] + parts["gpu_copy"] == pytest.approx(busy, abs=2)


def test_graphs_keep_the_gpu_busy_and_eager_waits_on_launches(analyzed):
    eager = {p["part"]: p["share"] for p in analyzed(REAL / "graphs_eager_nsys.sqlite.xz")["timeline"]["budget"]}
    after = {p["part"]: p["share"] for p in analyzed(REAL / "graphs_after_nsys.sqlite.xz")["timeline"]["budget"]}
    assert max(eager, key=eager.get) == "idle_launch" and eager["idle_launch"] > 0.8     # measured 0.87
    assert after["gpu_compute"] + after["gpu_copy"] >= 0.6                               # measured 0.89
    assert after["idle_launch"] < 0.05


def test_median_step_budget_adds_up_to_the_median_step(analyzed):
    steps = analyzed(REAL / "loader_inline_nsys.sqlite.xz")["timeline"]["steps"]
    assert sum(p["ns"] for p in steps["budget"]) == pytest.approx(steps["median_ns"], rel=0.01)
    host = next(p for p in steps["budget"] if p["part"] == "idle_host")
    assert host["share"] > 0.8                     # the batch is prepared in the loop: measured 0.94


def test_sub_window_totals_equal_the_segments_inside_them():
    """A budget's time per part over many sub-windows (the steps: one pass over the segments for all
    parts) equals each sub-window's overlap with each segment, summed by a plain loop."""
    import numpy as np

    from nsanalyze.normalize.activity import read_activity
    from nsanalyze.normalize.budget import build_budgets
    from nsanalyze.read import read_profile

    activity = read_activity(read_profile(REAL / "loader_inline_nsys.sqlite.xz"), (-(2**62), 2**62))
    (budget,) = build_budgets(activity, {}, set())
    labelled = budget.labelled
    rng = np.random.default_rng(7)
    first, last = int(labelled.starts[0]), int(labelled.ends[-1])
    starts = np.concatenate((rng.integers(first - 1000, last, 40), [first, first - 5, last, int(labelled.starts[3])]))
    ends = starts + np.concatenate((rng.integers(0, (last - first) // 4, 40), [last - first, 3, 10, 0]))
    totals = labelled.totals_many(starts, ends)
    segments = list(zip(labelled.starts.tolist(), labelled.ends.tolist(), labelled.labels.tolist()))
    for row, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        expected = [0] * len(PARTS)
        for segment_start, segment_end, label in segments:
            expected[label] += max(0, min(e, segment_end) - max(s, segment_start))
        assert totals[row].tolist() == expected


def test_longest_gaps_are_the_first_of_a_full_sort():
    """The longest idle gaps, found by a partition, are the head of a stable sort of all of them."""
    import numpy as np

    from nsanalyze.normalize.activity import largest, read_activity
    from nsanalyze.read import read_profile

    kernels = read_activity(read_profile(REAL / "graphs_eager_nsys.sqlite.xz"), (-(2**62), 2**62)).kernels
    order = np.argsort(kernels.start, kind="stable")
    gaps = np.maximum(kernels.start[order][1:] - kernels.end[order][:-1], 0)
    gaps = np.concatenate((gaps, gaps[:500]))   # ties: the repeated gaps come after their first
    for count in (0, 1, 10, 257):
        assert np.array_equal(largest(gaps, count), np.argsort(-gaps, kind="stable")[:count])
