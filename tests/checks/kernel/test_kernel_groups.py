"""Launches grouped into kernels, savings that fit each kernel's time, partial reports (real ncu reports)."""

import re

import pytest

from nsanalyze.render.format import duration
from tests.conftest import DEV_SUITE_NCU, REAL
from tests.isolated import apart


def test_launches_group_by_kernel_shape_and_range(analyzed):
    model = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    launches = sum(k["launches"] for k in model["kernels"])
    assert len(model["kernels"]) < launches                   # repeated library kernels share an entry
    ids = sorted(i for k in model["kernels"] for i in k["launch_ids"])
    assert ids == list(range(launches))                      # every launch in exactly one kernel
    for kernel in model["kernels"]:
        m = kernel["metrics"]
        assert m["min_ns"] <= kernel["duration_ns"] <= m["max_ns"]
        assert kernel["total_ns"] == pytest.approx(kernel["duration_ns"] * kernel["launches"], rel=1e-9)


def test_a_finding_over_several_entries_shows_the_time_it_comes_from(analyzed):
    """An expert review: gpt_fp32_full's first finding saved 1.21 ms on a row of a 1.05 ms kernel; it speaks for two
    launch shapes of that kernel (1.84 ms together), which its row did not say. Every row of a merged finding shows
    the entries' time beside its savings (Markdown here; HTML and the terminal write the same savings_text)."""
    from nsanalyze.render import markdown
    from nsanalyze.render.format import savings_text

    model = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    merged = [f for f in model["findings"] if len(f.get("kernel_ids") or []) > 1]
    assert merged
    times = {k["id"]: k["total_ns"] for k in model["kernels"]}
    text = markdown.render(model)
    for finding in merged:
        assert finding["kernel_time_ns"] == pytest.approx(sum(times[i] for i in finding["kernel_ids"]), rel=1e-9)
        shown = savings_text(finding)
        assert shown.endswith(f" of {len(finding['kernel_ids'])} entries' {duration(finding['kernel_time_ns'])}")
        assert f"| {shown} |" in text or f"| {finding['rank']} | " not in text   # (a row left out of the comment)
    first = model["findings"][0]
    assert f"| {savings_text(first)} |" in text
    assert first["estimated_savings_ns"] > times[first["kernel_id"]] and len(first["kernel_ids"]) == 2


def test_a_kernels_findings_never_promise_more_than_its_time(analyzed):
    """Per kernel (all its launch shapes and NVTX ranges: one demangled signature, compiled alike): the
    findings save less than its time less its launch floor (the report's measured floor, at most 2 us
    a launch), and one finding speaks for all the shapes that show it."""
    for path in (REAL / "gpt_fp32_full.ncu-rep.xz", DEV_SUITE_NCU, REAL / "attn_naive_full.ncu-rep.xz"):
        model = analyzed(path)
        identity = {k["id"]: (k["demangled"] or k["name"], k["metrics"].get("registers_per_thread"))
                    for k in model["kernels"]}   # a kernel: its shapes of one signature, compiled alike
        floor = model["profiles"][0]["launch_floor"]["ns"]
        assert 0 < floor <= 2000
        by_kernel, rows = {}, set()
        for finding in model["findings"]:
            if finding["kernel_id"] is not None:
                by_kernel.setdefault(identity[finding["kernel_id"]], []).append(finding)
                assert (finding["check"], identity[finding["kernel_id"]]) not in rows   # one row per (check, kernel)
                rows.add((finding["check"], identity[finding["kernel_id"]]))
                assert 0 <= finding["estimated_speedup"] <= 1
                assert finding["estimated_savings_ns"] <= finding["kernel_time_ns"] * 1.0001
                assert finding["kernel_id"] in finding["kernel_ids"]
        for name, findings in by_kernel.items():
            shapes = [k for k in model["kernels"] if identity[k["id"]] == name]
            bound = sum(max(0.0, k["total_ns"] - floor * k["launches"]) for k in shapes)
            assert sum(f["estimated_savings_ns"] for f in findings) <= bound * 1.0001 + 1


def test_overlapping_findings_say_so(dev_suite_model):
    pointer_chase = [f for f in dev_suite_model["findings"] if f["kernel_name"] == "pointer_chase"
                     and f["severity"] != "info"]
    assert len(pointer_chase) >= 2
    assert all(any(n.startswith("overlaps with") for n in f["notes"]) for f in pointer_chase)


def test_launch_without_metrics_is_left_out_with_a_note():
    """A launch ncu could not profile keeps its name but no metrics. Made from the real dev suite by
    clearing one launch's metrics in memory: the report is analysed without it, and says which. (Read
    and analysed in processes of their own: an ncu report read here would stay in the test process.)"""
    indices, unmeasured, names = apart(_without_the_third_launchs_metrics)
    assert len(indices) == 11 and indices == list(range(11))
    assert unmeasured == [{"index": 2, "name": "random_gather"}]
    assert "random_gather" not in names and len(names) == 11
    refused = apart(_without_the_first_launchs_name_either)
    assert refused is not None and re.search("truncated or damaged", refused)


def _dev_suite_set_aside():
    """The dev suite read with launch 2's metrics cleared, its unmeasured launches set aside."""
    import copy

    from nsanalyze.read import read_profile
    from nsanalyze.read.ncu import set_aside_unmeasured

    report = copy.deepcopy(read_profile(DEV_SUITE_NCU))
    report.launches[2].metrics = {}
    report.launches, report.unmeasured = set_aside_unmeasured(report.launches, report.path)
    return report


def _without_the_third_launchs_metrics():
    """(the measured launches' indices, the facts' unmeasured launches, the analysed kernels' names)."""
    from nsanalyze.analyze import Options, analyze_ncu

    report = _dev_suite_set_aside()
    indices = [l.index for l in report.launches]
    kernels, _, _, _, facts = analyze_ncu(report, Options())
    return indices, facts["unmeasured_launches"], [k["name"] for k in kernels]


def _without_the_first_launchs_name_either():
    """Set aside again after the first launch lost its name and metrics too (after the analysis, as before):
    the InputError's message (it does not cross processes itself), or None if none was raised."""
    from nsanalyze.analyze import Options, analyze_ncu
    from nsanalyze.errors import InputError
    from nsanalyze.read.ncu import set_aside_unmeasured

    report = _dev_suite_set_aside()
    analyze_ncu(report, Options())
    report.launches[0].name = None
    report.launches[0].metrics = {}
    try:
        set_aside_unmeasured(report.launches, report.path)
    except InputError as exc:
        return str(exc)
    return None


def test_template_instances_under_one_short_name_stay_apart(analyzed):
    """Issue 35: CUTLASS instances under one short name (`Kernel2`, tn and nn layouts, 74 and 76 registers a thread in
    this H200 training step) are two kernels: each finding covers one instance's entries, its evidence and savings
    that instance's, never more than its time. Instances compiled alike still read as one row."""
    from tests.conftest import FIXTURES

    model = analyzed(FIXTURES / "bench" / "train_basic.ncu-rep.xz")
    kernels = {k["id"]: k for k in model["kernels"]}
    instances = {(k["demangled"], k["metrics"]["registers_per_thread"]) for k in kernels.values() if k["name"] == "Kernel2"}
    assert {r for _, r in instances} == {74.0, 76.0}
    findings = [f for f in model["findings"] if (f["kernel_name"] or "").startswith("Kernel2[")]   # each instance named apart
    assert {f["check"] for f in findings} and len(findings) == 2 * len({f["check"] for f in findings})
    for finding in findings:
        assert len({kernels[i]["demangled"] for i in finding["kernel_ids"]}) == 1
        assert finding["estimated_savings_ns"] <= sum(kernels[i]["total_ns"] for i in finding["kernel_ids"])


def test_template_instances_stay_apart_and_severity_agrees_with_the_notes(analyzed):
    """Review of 2 Dec: gpt_bf16_full's small-grid on multi_tensor_apply_kernel merged four template instances (the
    Adam step's Lerp, multiplies, Sqrt and divides functors, 32-34 registers) as one kernel, and read medium under
    its speaker's note "capped at info: the kernel runs near its memory roof". A finding now covers one function
    (one demangled signature: its launch shapes and NVTX ranges), and a row is as severe as the entry that speaks."""
    model = analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")
    kernels = {k["id"]: k for k in model["kernels"]}
    instances = {k["demangled"] for k in kernels.values() if k["name"] == "multi_tensor_apply_kernel"}
    assert len(instances) >= 4                               # the optimizer's functors: other kernels, one short name
    for finding in model["findings"]:
        if finding["kernel_id"] is None:
            continue
        assert len({kernels[i]["demangled"] for i in finding["kernel_ids"]}) == 1, finding["kernel_name"]
        if any(n.startswith("capped at info") for n in finding["notes"]):
            assert finding["severity"] == "info", (finding["check"], finding["kernel_name"])
    near = [f for f in model["findings"] if f["check"] == "small-grid" and (f["kernel_name"] or "").startswith("multi_tensor_apply_kernel")
            and kernels[f["kernel_id"]]["roofline"].get("near_roof") == "memory"]
    assert near and all(f["severity"] == "info" for f in near)
    assert all(kernels[f["kernel_id"]]["roofline"]["dram_roof_share"] >= 0.6 for f in near)   # 64% DRAM in this report
    # rows of other instances read apart: the short name with the signature's own words (the functor)
    shown = {f["kernel_name"]: kernels[f["kernel_id"]]["demangled"] for f in model["findings"]
             if f["check"] == "small-grid" and (f["kernel_name"] or "").startswith("multi_tensor_apply_kernel[")}
    assert len(shown) == len(set(shown.values())) >= 4
    assert any("LerpFunctor" in name for name in shown) and any(name.endswith("Sqrt]") for name in shown)


def test_an_instance_is_named_by_the_words_only_it_holds(analyzed):
    """attn_naive_full's vectorized_elementwise_kernel instances: the bfloat16 copy read
    `[lambda, float, instance]`, its signature's last own words, which the bitwise_not instance holds too (lambda,
    instance) and the multiply's (float). Its label is the word no other instance holds: the copy's functor."""
    model = analyzed(REAL / "attn_naive_full.ncu-rep.xz")
    kernels = {k["id"]: k for k in model["kernels"]}
    names = {f["kernel_name"] for f in model["findings"] if f["kernel_id"] is not None
             and "bfloat16_copy_kernel_cuda" in kernels[f["kernel_id"]]["demangled"]
             and kernels[f["kernel_id"]]["name"] == "vectorized_elementwise_kernel"}
    assert names == {"vectorized_elementwise_kernel[bfloat16_copy_kernel_cuda]"}
