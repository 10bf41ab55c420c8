"""Program checks on real nsys exports, against the labels and `nsys analyze`'s own findings."""

import re

import pytest

from nsanalyze.analyze import Options, analyze
from nsanalyze.program import run_program_checks
from tests.conftest import DEV_INFER_NSYS, ORACLE, PUBLIC_NSYS, REAL, sql


def _oracle_rows(name: str, section: str) -> list[tuple[int, int]]:
    """(duration, start) rows of one `nsys analyze` section."""
    text = (ORACLE / name).read_text()
    block = text.split(f"({section})")[1].split("Processing [")[0]
    return [(int(d.replace(",", "")), int(s.replace(",", "")))
            for d, s in re.findall(r"^\s+([\d,]+)\s+([\d,]+)\s+\w", block, flags=re.M)]


def test_pageable_copies_are_those_nsys_analyze_reports(dev_infer_timeline):
    oracle = _oracle_rows("dev_infer_nsys_analyze.txt", "cuda_memcpy_async")
    ours = [(c.duration_ns, c.start) for c in dev_infer_timeline.copies.pageable.async_top]
    assert len(oracle) == 50            # nsys analyze prints its top 50
    assert sorted(d for d, _ in ours) == sorted(d for d, _ in oracle)
    cut = min(d for d, _ in oracle)     # copies tied at the cut may be listed in another order
    assert {row for row in oracle if row[0] > cut} <= set(ours)
    assert dev_infer_timeline.copies.pageable.copies == 607   # 306 host-to-device + 301 device-to-host


def test_sync_copy_is_the_one_nsys_analyze_reports(dev_suite_timeline):
    oracle = _oracle_rows("dev_suite_nsys_analyze.txt", "cuda_memcpy_sync")
    ours = [(c.duration_ns, c.start) for c in dev_suite_timeline.copies.sync.top]
    assert ours == oracle == [(9519775, 593303497)]


def test_small_step_launch_overhead(dev_suite_timeline):
    """The dev suite's label: the 200 small_step launches (~2 us kernels) make the GPU wait on launches
    (4% of this capture, dominated by large copies and kernels); a third of that wait is one kernel's first
    launch loading its module, start-up that no graph removes: the saving is the rest, an info finding."""
    findings, _ = run_program_checks(dev_suite_timeline)
    launch = next(f for f in findings if f.check == "launch-overhead")
    assert launch.evidence["short_kernels"]["value"] >= 200
    assert any(k["name"] == "small_step" and k["launches"] == 200 for k in launch.evidence["kernels"])
    assert 0.03 <= launch.evidence["idle_launch_share"]["value"] < 0.05
    # aos_update's one launch (0.58 ms: its module loads) is start-up, not saved: 0.42 ms are, 1.8% of the window
    module_load = next(k["mean_launch_ns"] for k in launch.evidence["kernels"] if k["launches"] == 1)
    assert module_load > 100_000 and "load their module" in launch.title
    assert launch.estimated_savings_ns == pytest.approx(launch.evidence["idle_launch_ns"]["value"] - module_load, rel=1e-6)
    assert launch.severity == "info"


def test_per_request_range_waits_on_the_host():
    model = analyze([str(DEV_INFER_NSYS)], Options(nvtx_range="per_request"))
    checks = {f["check"]: f for f in model["findings"]}
    assert model["timeline"]["gpu_busy_share"] < 0.1          # batch 1, one round trip per request
    assert checks["host-compute"]["severity"] == "high"       # 28 ms stretches without a CUDA call
    assert checks["launch-overhead"]["severity"] in ("high", "medium")
    assert "host-sync" in checks and "pageable-memcpy" in checks
    assert model["timeline"]["window"]["description"].startswith("NVTX range 'per_request'")


def test_bf16_range_shows_tensor_activity_that_fp32_lacks(dev_infer_timeline):
    ranges = {r["name"]: r for r in dev_infer_timeline.gpu_metrics["ranges"]}
    assert ranges["bf16_autocast"]["tensor_active_pct"]["mean"] > 100 * ranges["batched"]["tensor_active_pct"]["mean"]


def test_timeline_totals_are_sql_sums(dev_suite_timeline):
    summary = dev_suite_timeline.summary
    assert summary.kernel_ns == 9297600 and summary.kernels == 212      # sum of kern_sum oracle totals
    assert summary.memcpy_ns == 9519775
    assert summary.gpu_busy_ns + summary.gpu_idle_ns == summary.span_ns


def test_nvtx_projection(dev_suite_timeline):
    launches = next(r for r in dev_suite_timeline.ranges if r["name"] == "launches")
    assert launches["kernels"] == 200 and launches["kernel_ns"] == 160352     # the 200 small_step launches


@pytest.mark.parametrize("path", PUBLIC_NSYS, ids=lambda p: p.name[:50])
def test_public_exports_analyze(path, analyzed):
    model = analyzed(path)
    assert model["timeline"]["kernels"] == sum(k["launches"] for k in model["kernels"])


@pytest.mark.parametrize("stem", ["dev_suite_nsys", "dev_suite_v2_nsys", "dev_infer_nsys"])
def test_copies_and_ranges_match_nsys_stats(stem):
    """Memory-operation totals (cuda_gpu_mem_time_sum) and NVTX range times (nvtx_sum) equal NVIDIA's."""
    import csv

    from nsanalyze.normalize.timeline import build_timeline
    from nsanalyze.read import read_profile
    from tests.conftest import FIXTURES

    timeline = build_timeline(read_profile(FIXTURES / f"{stem}.sqlite.xz"), mode="capture")  # NVIDIA's figures cover it all
    with open(ORACLE / f"{stem}_cuda_gpu_mem_time_sum.csv", newline="") as handle:
        oracle = {row["Operation"]: row for row in csv.DictReader(handle)}
    by_kind = {}
    for row in timeline.copies.by_kind:
        entry = by_kind.setdefault(row.copy_kind, [0, 0])
        entry[0] += row.copies
        entry[1] += row.duration_ns
    for kind, (count, total) in by_kind.items():
        expected = oracle[f"[CUDA memcpy {kind}]"]
        assert (count, total) == (int(expected["Count"]), int(expected["Total Time (ns)"]))
    if "[CUDA memset]" in oracle:
        assert timeline.summary.memset_ns == int(oracle["[CUDA memset]"]["Total Time (ns)"])
    with open(ORACLE / f"{stem}_nvtx_sum.csv", newline="") as handle:
        ranges = {row["Range"].lstrip(":"): row for row in csv.DictReader(handle)}
    ours = {r["name"]: r for r in timeline.ranges}
    for name, row in ranges.items():
        assert ours[name]["wall_ns"] == int(row["Total Time (ns)"]) and ours[name]["instances"] == int(row["Instances"])


def test_a_graph_level_trace_says_which_checks_it_blinds(analyzed):
    """graphs_graphtrace: the same graphed MLP as graphs_after, traced at graph level, so its kernel rows are
    whole-graph executions (by SQL, the graph trace holds all its GPU work). The checks that read the kernels'
    roles are named as not judged, with the option that records the kernels; on the node-level trace of the
    same program low-tensor-activity judges and speaks."""
    graph_level = analyzed(REAL / "graphs_graphtrace_nsys.sqlite.xz")
    executions = sql(REAL / "graphs_graphtrace_nsys.sqlite.xz", "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0][0]
    assert executions > 100
    blinded = {n["check"]: n for n in graph_level["not_judged"] if "work" in n["missing"]}
    assert {"low-tensor-activity", "unfused-elementwise", "attention-unfused", "layout-conversion"} <= set(blinded)
    assert blinded["low-tensor-activity"]["collect"] == "nsys profile --cuda-graph-trace=node"
    node_level = analyzed(REAL / "graphs_after_nsys.sqlite.xz")
    assert "low-tensor-activity" in {f["check"] for f in node_level["findings"]}
