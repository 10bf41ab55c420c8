"""Markdown for pull-request comments: structure, escaping, and GitHub's 65,536-character limit."""

import copy
import re

from nsanalyze.render.markdown import LIMIT, render


def test_structure(joined_model):
    text = render(joined_model)
    assert text.startswith("## nsanalyze report")
    assert "| # | severity | check |" in text and "<details><summary>" in text
    # 10 findings, those at info and the checks not judged
    assert text.count("<details>") == text.count("</details>") == 12
    assert text.count("<details><summary>Not judged for lack of metrics") == 1
    assert "`missing-tensor-cores`" in text


def test_stays_under_the_comment_limit_with_a_count(joined_model):
    model = copy.deepcopy(joined_model)
    finding = next(f for f in model["findings"] if f["severity"] == "high")
    model["findings"] = [dict(finding, rank=i + 1, kernel_name=f"kernel_{i}_" + "x" * 200) for i in range(2000)]
    text = render(model)
    assert len(text) <= 65_536 and len(text) <= LIMIT
    assert "more finding(s) left out of this comment" in text


def test_program_text_is_escaped(hostile_model):
    text = render(hostile_model)
    assert "<img" not in text and "<script>" not in text
    assert "&lt;img src=x onerror=alert\\(1\\)&gt;" in text


def test_the_findings_at_info_are_listed_as_in_the_json(joined_model):
    """The comment ranks what is worth a change and folds the rest in one block, a line each: every info finding of
    the JSON is there by rank and check, and none above info is."""
    text = render(joined_model)
    block = text.split("<details><summary>Also found, at info")[1].split("</details>")[0]
    info = [f for f in joined_model["findings"] if f["severity"] == "info"]
    assert info and f"{len(info)} finding" in block.split("</summary>")[0]
    listed = re.findall(r"^- (\d+)\. `([a-z0-9-]+)` on ", block, flags=re.M)
    assert listed == [(str(f["rank"]), f["check"]) for f in info]


def test_an_info_line_says_what_the_finding_saves_before_its_title(analyzed):
    """blind57_lm: unfused-normalization's line told of 7.32 ms a step of extra passes, and its saving (none: its
    replayed steps are host-paced, and activation-recompute counts the part first) was past the line's cut (a user
    read). Each info line says what it saves before its title: the JSON's figure, or why there is none."""
    from nsanalyze.render.format import savings_text
    from tests.conftest import REAL

    model = analyzed(REAL / "blind57_lm_base1_nsys.sqlite.xz")
    block = render(model).split("<details><summary>Also found, at info")[1].split("</details>")[0]
    said = dict(re.findall(r"^- \d+\. `([a-z0-9-]+)` on [^,]+, ([^:]+):", block, flags=re.M))
    info = {f["check"]: f for f in model["findings"] if f["severity"] == "info"}
    assert set(said) == set(info)
    assert info["unfused-normalization"]["estimated_savings_ns"] == 0
    assert said["unfused-normalization"] == "saves nothing on the replayed steps"
    assert said["dtype-casts"] == "saving not measured" and said["start-up"] == "outside the window"
    for check, finding in info.items():
        if finding["estimated_savings_ns"]:
            assert said[check] == f"saves {savings_text(finding, model)}"


def test_a_program_findings_saving_is_also_told_a_step(analyzed):
    """own67_fixed1's titles speak of steps ("1.12 ms less copy time in each 9.00 ms step"), and its saves column held
    the window's total (242 ms over 79 steps) beside them: a user read them as two answers. Each program finding's
    cell now also gives its saving a step: its total over the window's steps."""
    from nsanalyze.render.format import duration
    from tests.conftest import REAL

    model = analyzed(REAL / "own67_fixed1_nsys.sqlite.xz")
    count = model["timeline"]["steps"]["count"]
    rows = [line for line in render(model).splitlines() if line.startswith("| ") and "`" in line]
    program = [f for f in model["findings"] if f["kernel_name"] is None and f["severity"] != "info"]
    assert program and count == 79
    for finding in program:
        row = next(r for r in rows if r.startswith(f"| {finding['rank']} |"))
        each = duration(finding["estimated_savings_ns"] / count)
        assert f"| {duration(finding['estimated_savings_ns'])} ({each} a step) |" in row
    assert "| 242 ms (3.06 ms a step) |" in rows[0]


def test_a_saving_the_check_could_not_estimate_is_not_nothing(analyzed):
    """FaSTED's final comparison: block-size on a kernel of 1-thread blocks (2 launches, 7.08 ms by ncu) and
    clock-throttling could not estimate their savings (the report lacks the issue-slot and compute shares); their
    info lines read "saves nothing", which a user read took for a measured zero. They now read "saving not
    estimated", and the JSON keeps 0 with the note that says why."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Final_128_128_Comparison__48x48_Warp_MaxReg_128_Pipeline_"
                              "of_1_Pmsampling.ncu-rep.xz")
    block = render(model).split("<details><summary>Also found, at info")[1].split("</details>")[0]
    said = dict(re.findall(r"^- \d+\. `([a-z0-9-]+)` on [^,]+, ([^:]+):", block, flags=re.M))
    for check in ("block-size", "clock-throttling"):
        finding = next(f for f in model["findings"] if f["check"] == check)
        assert finding["estimated_savings_ns"] == 0
        assert any(n.startswith("no savings estimated") for n in finding["notes"])
        assert said[check] == "saving not estimated"


def test_a_threshold_a_finding_did_not_cross_says_so(analyzed):
    """blind79_offload's host-data speaks on the state moved to the host and back, not on the host's work on it:
    its evidence read "`work_share`: 1% (threshold >= 30%)", a failed gate to a user. An entry whose value lies on the
    other side of its threshold says "not crossed"; one that crossed says nothing more."""
    from tests.conftest import REAL

    model = analyzed(REAL / "blind79_offload_base1_nsys.sqlite.xz")
    data = next(f for f in model["findings"] if f["check"] == "host-data")
    work, window = data["evidence"]["work_share"], data["evidence"]["window_share"]
    assert work["value"] < work["threshold"] and work["compare"] == ">="
    assert window["value"] >= window["threshold"]
    text = render(model)
    assert "- `work_share`: 1% (threshold &gt;= 30%, not crossed)" in text
    line = next(line for line in text.splitlines() if line.startswith("- `window_share`:"))
    assert "threshold" in line and "not crossed" not in line


def test_findings_whose_saving_was_not_measured_are_not_called_small(analyzed):
    """alloc_churn's Kineto trace: unfused-optimizer (the optimizer's kernels, a third of the GPU's kernel time) is at
    info because its saving was not measured, and the block it sits in read "below what is worth a change now" (a
    user read). Where an info line's saving is not measured or not estimated, the block says "or not priced"."""
    from tests.conftest import REAL

    model = analyzed(REAL / "alloc_churn_kineto.json.gz")
    unpriced = [f for f in model["findings"] if f["severity"] == "info"
                and any(n.startswith("saving not measured") for n in f["notes"])]
    assert unpriced
    text = render(model)
    assert "Also found, at info (below what is worth a change now, or not priced)" in text
    assert ", saving not measured: " in text


def test_a_way_to_collect_that_is_prose_is_not_code(analyzed):
    """mfu_2gpu_before (a user read): "collect with `an NVTX range around each step (...)`", a sentence in a code span.
    Commands and options stay code; what is said in words is text."""
    from tests.conftest import PUBLIC

    text = render(analyzed(PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_before.sqlite.xz"))
    lines = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("- `") and "collect with" in line}
    assert lines["launch-loop"].split("collect with ")[1].startswith("an NVTX range around each step \\(")
    assert lines["gpu-util-illusion"].endswith("collect with `nsys profile --gpu-metrics-devices=all`")
