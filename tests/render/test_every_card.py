"""Every finding above info gets its card in the HTML report, for every fixture report: sections come
from each check's SECTION, so a new check cannot be dropped (the multi-GPU checks once were)."""

import re

import pytest

from nsanalyze.checks import all_checks
from nsanalyze.render.html import SECTIONS, render
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
