"""An optimizer written as a Python loop (AdamW foreach=False: about 8 element-wise launches a parameter tensor)
costs its launches, not its kernels' GPU time. unfused-optimizer speaks on it where the optimizer's launches are
known (PyTorch's Optimizer.step# ranges: opt_loop_annot, nsys --pytorch=autograd-nvtx), prices it by the replay of
the fused change (the launch paths gone, the kernels kept), and is counted within launch-overhead, whose change
(each step one graph launch) holds it. Without the annotation (opt_loop) no name tells the optimizer's kernels
from the model's: not judged. Each figure against SQL over the exports (fixtures/real/README.md)."""

import bisect
import csv
import functools
import statistics
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from tests.conftest import REAL, program_findings, sql, sql_gpu_step_periods

ANNOT, LOOP = REAL / "opt_loop_annot_nsys.sqlite.xz", REAL / "opt_loop_nsys.sqlite.xz"
FUSED, FOREACH = REAL / "opt_fused_nsys.sqlite.xz", REAL / "alloc_cached_nsys.sqlite.xz"
HOST_ACTIVITY = Path(__file__).parents[3] / "nsanalyze" / "normalize" / "host_activity.csv"

OPTIMIZER_RANGES = """SELECT n.start, n.end, n.globalTid / 16777216 AS pid FROM NVTX_EVENTS n LEFT JOIN StringIds t
    ON t.id = n.textId WHERE n.eventType = 59 AND COALESCE(n.text, t.value) LIKE 'Optimizer.step#%' ORDER BY n.start"""


def _finding(model, check):
    return next(f for f in model["findings"] if f["check"] == check)


def sql_optimizer_launches(path, window) -> tuple[int, int]:
    """(kernel time, kernels) launched by calls of the range's process inside an Optimizer.step# range, in the window."""
    return sql(path, f"""WITH o AS MATERIALIZED ({OPTIMIZER_RANGES})
        SELECT SUM(k.end - k.start), COUNT(*) FROM o JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= o.start
            AND r.start < o.end AND r.globalTid / 16777216 = o.pid
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
        WHERE k.start >= {window['start_ns']} AND k.start < {window['end_ns']}""")[0]


def sql_launch_paths(path) -> list[tuple[int, int, float]]:
    """Per Optimizer.step# range: (start, end, the host time of its kernel launches' paths), by SQL: each launching
    call's stretch from the end of the process's previous CUDA call that is no helper (the host-activity table's
    `query` class: cuKernelGetName before each of PyTorch's launches) to its own end."""
    ranges = sql(path, OPTIMIZER_RANGES)
    pid = ranges[0][2]
    calls = sql(path, f"""SELECT r.start, r.end, s.value, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE r.globalTid / 16777216 = {pid} ORDER BY r.start""")
    kernels = {cid for (cid,) in sql(path, "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    with open(HOST_ACTIVITY, newline="") as handle:
        helpers = [row[1] for row in csv.reader(handle) if len(row) > 2 and row[0] == "cuda" and row[2] == "query"]
    starts, paths, previous = [r[0] for r in ranges], [0.0] * len(ranges), None
    for start, end, name, cid in calls:
        launches = cid in kernels
        if launches:
            i = bisect.bisect_right(starts, start) - 1
            if i >= 0 and start < ranges[i][1] and previous is not None:
                paths[i] += end - previous
        if launches or not any(fnmatchcase(name, p) for p in helpers):
            previous = end
    return [(r[0], r[1], p) for r, p in zip(ranges, paths)]


def test_a_python_loop_optimizer_is_priced_by_fusing_its_launches(analyzed):
    """opt_loop_annot: 1,024 optimizer launches a step (SQL: every kernel launched inside the Optimizer.step# ranges
    of the window), 1.51 ms of GPU time a step, and their launch paths 16-27 ms of host time a step (SQL): the
    check speaks of a loop, draws on idle_launch and is priced by the replay of the fused change, capped by those
    paths. What it predicts a step is within 25% of what fused AdamW saved (opt_fused, by SQL's mean GPU periods)."""
    model = analyzed(ANNOT)
    steps = model["timeline"]["steps"]
    finding = _finding(model, "unfused-optimizer")
    evidence = finding["evidence"]
    ns, launches = sql_optimizer_launches(ANNOT, model["timeline"]["window"])
    assert launches == 1024 * steps["count"] == evidence["launches"]["value"]
    assert evidence["launches_per_step"]["value"] == 1024 >= evidence["launches_per_step"]["threshold"]
    assert evidence["optimizer_ns"]["value"] == pytest.approx(ns, rel=1e-5)
    assert evidence["optimizer_kernel_ns_per_step"]["value"] == pytest.approx(ns / steps["count"], rel=0.03)
    # the replayed block is 7 consecutive steps around the median: SQL's paths of 7 consecutive steps agree
    window = model["timeline"]["window"]
    paths = [p for start, end, p in sql_launch_paths(ANNOT) if start >= window["start_ns"] and end <= window["end_ns"]]
    per_step = evidence["launch_path_ns_per_step"]["value"]
    blocks = [statistics.mean(paths[i:i + 7]) for i in range(len(paths) - 6)]
    assert min(abs(b - per_step) for b in blocks) <= 0.02 * per_step
    assert per_step / steps["median_ns"] == pytest.approx(evidence["launch_path_share"]["value"], rel=1e-3)
    assert finding["budget_part"] == "idle_launch"
    assert "replayed_savings_ns" in evidence
    assert finding["estimated_savings_ns"] <= per_step * steps["count"] * 1.0001   # never more than the paths
    idle_launch = next(p["ns"] for p in model["timeline"]["budget"] if p["part"] == "idle_launch")
    assert finding["estimated_savings_ns"] <= idle_launch
    predicted = finding["estimated_savings_ns"] / steps["count"]
    fused = analyzed(FUSED)
    saved = statistics.mean(sql_gpu_step_periods(ANNOT)[steps["first_step"]:]) - \
        statistics.mean(sql_gpu_step_periods(FUSED)[fused["timeline"]["steps"]["first_step"]:])
    assert predicted == pytest.approx(saved, rel=0.25)
    assert "fused=True" in finding["title"] and "fused=True" in finding["advice"]


def test_the_fused_optimizer_is_counted_within_one_graph_launch_a_step(analyzed):
    """Both changes are real: one graph launch a step (launch-overhead) and the optimizer's launches fused
    (unfused-optimizer); the second is part of the first. Ranked by their savings (the graph saves more: 36.9
    against 19.5 ms a step), the part is counted within the whole: not shared with it as an overlap (its
    savings stay the replay's), left out of the window's fit, and each finding names the other. (launch-loop's
    loops over the model's 32 layers, 20.0 ms, are another part of the graph's saving, ranked between them.)"""
    model = analyzed(ANNOT)
    ranked = program_findings(model)
    checks = [f["check"] for f in ranked]
    assert checks[0] == "launch-overhead" and "unfused-optimizer" in checks
    graph, fused = ranked[0], ranked[checks.index("unfused-optimizer")]
    assert graph["estimated_savings_ns"] > fused["estimated_savings_ns"] > 0
    assert fused["evidence"]["within"] == "launch-overhead"
    assert fused["estimated_savings_ns"] == pytest.approx(fused["evidence"]["replayed_savings_ns"]["value"], rel=1e-5)
    assert graph["estimated_savings_ns"] == pytest.approx(graph["evidence"]["idle_launch_ns"]["value"], rel=1e-5)
    assert any(n.startswith("counted within launch-overhead") for n in fused["notes"])
    assert any(n.startswith("unfused-optimizer's change is part of this one") for n in graph["notes"])
    counted = sum(f["estimated_savings_ns"] for f in model["findings"] if "within" not in f["evidence"])
    assert counted <= model["timeline"]["span_ns"]
    assert not any("scaled by" in n for f in model["findings"] for n in f["notes"])


def test_a_loop_not_told_apart_is_not_judged(analyzed):
    """opt_loop: the same loop without the annotation. Its optimizer kernels are generic element-wise ones (SQL: no
    kernel name of a foreach or fused optimizer) in a training step (SQL: autograd's backward kernels): the check
    says it could not judge, with the option that marks the optimizer's launches, and no finding guesses."""
    names = [d for (d,) in sql(LOOP, """SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                        JOIN StringIds s ON s.id = k.demangledName""")]
    assert any("Backward" in n for n in names)
    assert not any(w in n for n in names for w in ("multi_tensor_apply", "_foreach_", "Adam"))
    model = analyzed(LOOP)
    assert "unfused-optimizer" not in {f["check"] for f in model["findings"]}
    entry = next(n for n in model["not_judged"] if n["check"] == "unfused-optimizer")
    assert entry["missing"] == ["optimizer_kernels"] and "--pytorch=autograd-nvtx" in entry["collect"]


def test_foreach_and_fused_optimizers_are_no_loop(analyzed):
    """alloc_cached's foreach AdamW launches 82 kernels a step (SQL: multi_tensor_apply_kernel), under the loop's
    100: its finding stays the passes' (GPU time, budget part gpu_compute); opt_fused's fused kernels get neither a
    finding nor a not-judged entry (the optimizer is known by name)."""
    steps = analyzed(FOREACH)["timeline"]["steps"]
    (launches,) = sql(FOREACH, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        WHERE s.value LIKE '%multi_tensor_apply%' AND k.start >= {analyzed(FOREACH)['timeline']['window']['start_ns']}
        AND k.start < {analyzed(FOREACH)['timeline']['window']['end_ns']}""")[0]
    assert launches / steps["count"] < 100
    finding = _finding(analyzed(FOREACH), "unfused-optimizer")
    assert "launches_per_step" not in finding["evidence"] and finding["budget_part"] == "gpu_compute"
    fused = analyzed(FUSED)
    assert "unfused-optimizer" not in {f["check"] for f in fused["findings"]}
    assert "unfused-optimizer" not in {n["check"] for n in fused["not_judged"]}


def test_which_change_holds_which():
    """pricing.contains: a step as one graph launch drops every launch path and keeps every kernel, so it holds a
    role's launches fused; no other change holds another (a speedup, a class removed), nor a change itself."""
    from nsanalyze.normalize.pricing import contains

    assert contains({"graph": True}, {"fuse": ("optimizer",)})
    assert not contains({"fuse": ("optimizer",)}, {"graph": True})
    assert not contains({"graph": True}, {"speedup": ("optimizer",)})
    assert not contains({"graph": True}, {"graph": True})
    assert not contains({"graph": True}, {"fuse": ("optimizer",), "remove": ("sync",)})
    assert not contains(None, {"fuse": ("optimizer",)})


def _loop_findings_here(path, overrides: tuple) -> list:
    """The check's finding under each set of overrides, on one timeline (built once: 13 s each)."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.program import unfused_optimizer
    from nsanalyze.normalize.timeline import build_timeline
    from nsanalyze.read import read_profile

    timeline = build_timeline(read_profile(path))
    found = [unfused_optimizer.run(timeline, limits_for(unfused_optimizer.CHECK, dict(o))) for o in overrides]
    return [None if f is None else (type(f).__name__, f.evidence.get("launches_per_step")) for f in found]


THRESHOLD_CASES = [
    ({}, True),
    ({"unfused-optimizer.min_launches_per_step": 1025}, False),   # SQL: 1,024 launches a step
    ({"unfused-optimizer.min_launch_share": 0.6}, False),         # the paths: 48% of the median step
]


@functools.lru_cache(maxsize=1)
def _loop_findings() -> list:
    from tests.isolated import apart

    return apart(_loop_findings_here, ANNOT, tuple(tuple(o.items()) for o, _ in THRESHOLD_CASES))


@pytest.mark.parametrize("case", range(len(THRESHOLD_CASES)), ids=["defaults", "launches", "share"])
def test_the_loop_is_told_by_its_thresholds(case):
    """The loop is told by its launches a step and its launch paths' share of the step (--set overrides them);
    past either, the optimizer's 3.6% of the window is under the passes' min_share: no finding."""
    speaks = THRESHOLD_CASES[case][1]
    found = _loop_findings()[case]
    assert (found is not None) == speaks
    if speaks:
        assert found[0] == "Finding" and found[1]["value"] == 1024


def test_parts_of_one_change_that_add_up_past_it_say_they_share_it(analyzed):
    """opt_loop_annot: launch-overhead (each step one graph launch) holds two smaller changes of disjoint kernels, the
    layers' loop launched fused (launch-loop) and the optimizer's (unfused-optimizer), each priced alone. Their figures
    add up past launch-overhead's, and its title read "saves X of it" for both (a user read): the second is said to
    save that alone, the two sharing the wait, together no more than the finding's own."""
    model = analyzed(REAL / "opt_loop_annot_nsys.sqlite.xz")
    by_check = {f["check"]: f for f in program_findings(model)}
    outer = by_check["launch-overhead"]
    inner = [by_check[c] for c in ("launch-loop", "unfused-optimizer")]
    assert all(f["evidence"]["within"] == "launch-overhead" for f in inner)
    assert sum(f["estimated_savings_ns"] for f in inner) > outer["estimated_savings_ns"]
    assert outer["title"].count(" of it") == 1 and outer["title"].count("alone (the changes share this wait") == 1
