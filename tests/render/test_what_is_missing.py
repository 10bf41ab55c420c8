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
