"""Every report says what is missing, not only the reports without findings (an expert review: 27 of 30 Markdown
reports with findings and not-judged checks never named them, evidence that was not measured rendered blank, and
the nearest roof was named only where every check could judge)."""

import copy
import re

import pytest

from nsanalyze.render import html, markdown
from nsanalyze.render.format import health_line
from tests.conftest import FIXTURES, PUBLIC, REAL

UNROLL = PUBLIC / "Alaric617R__COALDA__examples__rgb__profile__report__uncoalesced_chart_unroll.ncu-rep.xz"


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
    console = Console(record=True, width=200, force_terminal=False)
    print_summary(model, console)
    out = console.export_text()
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[2J" in out
