"""Every finding above info gets its card in the HTML report, for every fixture report: sections come
from each check's SECTION, so a new check cannot be dropped (the multi-GPU checks once were)."""

import re

import pytest

from nsanalyze.checks import all_checks
from nsanalyze.render.html import SECTIONS, render
from nsanalyze.render.html import _section_of as section_of
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, REAL

REPORTS = [DEV_SUITE_NCU, DEV_INFER_NSYS, REAL / "ddp_gpu_all_nsys.sqlite.xz", REAL / "ddp_host_all_nsys.sqlite.xz",
           REAL / "gpt_fp32_full.ncu-rep.xz", REAL / "loader_inline_nsys.sqlite.xz"]


def test_every_check_declares_a_section_the_report_has():
    assert {check.section for check in all_checks()} <= set(SECTIONS)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.name[:40])
def test_a_card_for_every_finding(path, analyzed):
    model = analyzed(path)
    html = render(model)
    cards = set(map(int, re.findall(r'<article class="finding" id="f(\d+)"', html)))
    shown = {f["rank"] for f in model["findings"] if f["severity"] != "info"}
    assert shown and shown <= cards


@pytest.mark.parametrize("path", [DEV_SUITE_NCU, REAL / "ddp_host_all_nsys.sqlite.xz"], ids=lambda p: p.name[:40])
def test_cards_come_in_rank_order(path, analyzed):
    """The cards read as the summary table does (they came by section: #4 after #12 on the dev suite), and
    each diagnosis section links to its own findings' cards."""
    model = analyzed(path)
    html = render(model)
    cards = [int(rank) for rank in re.findall(r'<article class="finding" id="f(\d+)"', html)]
    assert cards == sorted(cards) and len(cards) == len(set(cards)) >= 2
    links = set(map(int, re.findall(r'<a href="#f(\d+)">#\d+ ', html)))
    outside_kernel = {f["rank"] for f in model["findings"] if f["severity"] != "info" and section_of(f) != "kernel"}
    assert outside_kernel and outside_kernel <= links
