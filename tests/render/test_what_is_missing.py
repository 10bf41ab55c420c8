"""Every report says what is missing, not only the reports without findings (an expert review: 27 of 30 Markdown
reports with findings and not-judged checks never named them, evidence that was not measured rendered blank, and
the nearest roof was named only where every check could judge)."""

import copy
import re

import pytest

from nsanalyze.render import html, markdown
from nsanalyze.render.format import collect_text, duration, health_line, shorten
from tests.conftest import FIXTURES, PUBLIC, REAL

UNROLL = PUBLIC / "Alaric617R__COALDA__examples__rgb__profile__report__uncoalesced_chart_unroll.ncu-rep.xz"


@pytest.mark.parametrize("path", [UNROLL, REAL / "xfmr_fp32_nsys.sqlite.xz"], ids=lambda p: p.name[:40])
def test_markdown_names_the_not_judged_checks_beside_findings(analyzed, path):
    """COALDA's unrolled demo is found small-grid, and its chart-only report holds no warp-state or shared-memory
    counters: the comment must say which checks could not look, what each lacks and what collects it (each check
    once, from the model's not-judged entries); so must an nsys export without GPU metrics beside its
    low-tensor-activity."""
    model = analyzed(path)
    assert [f for f in model["findings"] if f["severity"] != "info"] and model["not_judged"]
    text = markdown.render(model)
    block = text[text.index("<details><summary>Not judged for lack of metrics"):]
    checks = sorted({n["check"] for n in model["not_judged"]})
    assert f"{len(checks)} check{'s' if len(checks) != 1 else ''} ({', '.join(checks)})" in block
    for entry in model["not_judged"]:
        line = next(line for line in block.splitlines() if line.startswith(f"- `{entry['check']}` ("))
        assert all(f"`{concept}`" in line for concept in entry["missing"][:8])
        assert f"collect with `{shorten(entry['collect'], 300)}`" in line
    assert len(block) < 3_000 and text.count("<details>") == text.count("</details>")


def test_the_not_judged_block_keeps_a_comment_under_the_limit(analyzed):
    """The block is reserved before the findings: 2,000 findings still leave a comment under GitHub's limit that
    counts the findings left out and ends with the block."""
    model = copy.deepcopy(analyzed(UNROLL))
    finding = next(f for f in model["findings"] if f["severity"] != "info")
    model["findings"] = [dict(finding, rank=i + 1, kernel_name=f"kernel_{i}_" + "x" * 200) for i in range(2000)]
    text = markdown.render(model)
    assert len(text) <= markdown.LIMIT and "more finding(s) left out of this comment" in text
    checks = len({n["check"] for n in model["not_judged"]})
    assert text.index("more finding(s) left out") < text.index(
        f"<details><summary>Not judged for lack of metrics: {checks} checks")
    assert text.endswith("</details>\n")


def test_not_judged_names_stay_inert(analyzed):
    model = copy.deepcopy(analyzed(UNROLL))
    evil = "<img src=x onerror=alert(1)>`[x](http://e)`"
    model["not_judged"] = [dict(n, check=evil, kernel_name=evil, missing=[evil], collect=evil)
                           for n in model["not_judged"]]
    text = markdown.render(model)
    block = text[text.index("<details><summary>Not judged"):]
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(block)
    inline = [c for t in tokens for c in t.children or ()]
    assert not [t for t in tokens + inline if t.type in ("link_open", "image", "html_inline")]
    assert all("<img" not in t.content for t in tokens if t.type == "html_block")   # the summary: escaped
    assert "&lt;img" in block and any(t.type == "code_inline" and "<img" in t.content for t in inline)


@pytest.mark.parametrize("path, check, key", [
    (UNROLL, "small-grid", "achieved_occupancy_pct"),
    (REAL / "xfmr_fp32_nsys.sqlite.xz", "low-tensor-activity", "gr_active_pct"),
    (FIXTURES / "fpmix" / "fp_mix_full.ncu-rep.xz", "costly-fp-math", "fp64_rate_ratio"),
])
def test_evidence_not_measured_says_so(analyzed, path, check, key):
    """An evidence value the profile does not hold is null in the JSON and 'not measured' in Markdown and HTML,
    not a blank after the name."""
    model = analyzed(path)
    assert [f for f in model["findings"] if f["check"] == check and key in f["evidence"]
            and f["evidence"][key]["value"] is None]
    text = markdown.render(model)
    assert f"- `{key}`: not measured" in text
    assert not re.search(r"^- `[a-z0-9_]+`: $", text, re.M)
    page = html.render(model)
    assert re.search(rf"<td><code>{key}</code></td><td class=\"num\">not measured</td>", page)


@pytest.mark.parametrize("name, unit, metric", [
    ("bwcurless__FaSTED__profiles__Ptx_Mma_Full_TC_Usage__mmaPtxTestFullTCUsage", "compute (tensor pipe)",
     "tensor_pipe_pct"),
    ("Alaric617R__COALDA__examples__rgb__rgb_correct", "memory", "dram_throughput_pct"),
])
def test_nearest_roof_with_checks_that_could_not_judge(analyzed, name, unit, metric):
    """mmaPtxTestFullTCUsage runs its tensor pipe at 98.9% and rgb_correct its DRAM at 83.5%, each with checks that
    could not judge: the no-finding line still says how near its roof the longest kernel runs (the report's one
    kernel here, its own metric the oracle)."""
    model = analyzed(PUBLIC / f"{name}.ncu-rep.xz")
    assert not [f for f in model["findings"] if f["severity"] != "info"] and model["not_judged"]
    (kernel,) = model["kernels"]
    line = health_line(model)
    assert "could not" in line
    assert (f"The longest kernel, 100% of the time, runs at {kernel['metrics'][metric] / 100:.0%} of its {unit} roof, "
            f"{'compute' if 'compute' in unit else 'memory'}-bound.") in line


def test_small_grid_advice_is_framework_neutral(analyzed):
    """COALDA is a CUDA C program: small-grid's advice fuses kernels into one and names torch.compile as PyTorch's
    way, not as the way."""
    model = analyzed(UNROLL)
    advice = next(f for f in model["findings"] if f["check"] == "small-grid")["advice"]
    assert "fuse them into one kernel" in advice
    assert "(`torch.compile`)" not in advice
    assert all("PyTorch" in sentence for sentence in re.split(r"\.\s", advice) if "torch" in sentence)


def test_terminal_clock_reason_is_visible(analyzed):
    """The clock line quotes its reason through visible(), as every other profile text on the terminal."""
    from rich.console import Console

    from nsanalyze.render.terminal import print_summary

    model = copy.deepcopy(analyzed(UNROLL))
    assert model["profiles"][0]["clock_control"]["mode"] == "locked"
    model["profiles"][0]["clock_control"]["reason"] = "locked\x1b[2J\u202eclock"
    console = Console(record=True, width=300, force_terminal=False)
    print_summary(model, console)
    out = console.export_text()
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[2J" in out
    assert "Not judged for lack of metrics:" in out and "collect --clock-control none and --set full" in out


def test_a_metric_no_section_of_the_reports_ncu_holds_is_named_for_ncu_metrics(analyzed):
    """FaSTED's memCpyAsync reproducer was profiled with ncu 2022.2's full set (source counters, warp states,
    occupancy and memory tables all there); sm__cycles_active.max is in none of its sections (ncu_report: only
    .avg). tail-effect told the user to collect --set full, which gives nothing new: it now names the metrics too,
    which `ncu --metrics` collects in any version. Checks that need per-source-line counters name their sections
    alone (bank-conflicts on COALDA's default-set report)."""
    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__memCpyAsync_Minimum_Reproducible__Pipeline_Depth_1.ncu-rep.xz")
    [entry] = [n for n in model["not_judged"] if n["check"] == "tail-effect"]
    [kernel] = [k for k in model["kernels"] if k["name"] == entry["kernel_name"]]
    assert "sm_active_cycles_avg" in kernel["metrics"] and "sm_active_cycles_max" not in kernel["metrics"]
    assert {"achieved_occupancy_pct", "issue_active_pct", "bank_conflict_share"} <= set(kernel["metrics"])   # full set
    assert entry["collect"].endswith(", or --metrics sm__cycles_active.avg,sm__cycles_active.max")
    assert "or --metrics sm__cycles_active.avg,sm__cycles_active.max`" in markdown.render(model)
    # and the summary line (the terminal's, the comment's <summary>) says it too: "collect --set full" alone led nowhere
    assert collect_text(model) == "--set full or --metrics sm__cycles_active.avg,sm__cycles_active.max"
    unroll = analyzed(UNROLL)
    [bank] = [n for n in unroll["not_judged"] if n["check"] == "bank-conflicts"]
    assert "--metrics" not in bank["collect"]


def test_a_verdict_at_info_says_the_time_at_stake(analyzed):
    """nsys-ai's 2-GPU capture copies 97% of its window (by SQL, 25.5 GB host-to-device a GPU against 22 ms of
    kernels): transfer-bound is its verdict, at info because only overlap with the compute is priced, and the
    report's first line read as "below what is worth a change". It now says the copies' time is at stake."""
    from tests.conftest import sql

    path = PUBLIC / "GindaChen__nsys-ai__tests__fixtures__h100_2gpu_1s.sqlite.xz"
    model = analyzed(path)
    verdict = next(f for f in model["findings"] if f["check"] == "transfer-bound")
    window = model["timeline"]["window"]
    (copies_ns,), = sql(path, "SELECT SUM(MIN(end, {e}) - MAX(start, {s})) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE end > {s} "
                              "AND start < {e}".format(s=window["start_ns"], e=window["end_ns"]))
    copy_ns = verdict["evidence"]["copy_ns"]["value"]
    assert verdict["severity"] == "info" and verdict["estimated_savings_ns"] < 0.05 * copy_ns
    # the budget's copy time is the copies' union per GPU, averaged over the 2 GPUs: half their summed time, or less
    assert 0.9 * copies_ns / 2 <= copy_ns <= copies_ns / 2 * 1.001
    line = health_line(model)
    assert line.startswith(verdict["title"])
    assert f"the copies' {duration(copy_ns)}, {verdict['evidence']['copy_share']['value']:.0%} of the window, are the time " \
           "at stake." in line
