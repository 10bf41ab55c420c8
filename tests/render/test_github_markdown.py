"""Markdown as GitHub renders it (a CommonMark parser with GFM tables): code spans and <summary> lines
show the text as it is, no backslash escapes; `diff` and `trend` print tables to the terminal."""

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

from markdown_it import MarkdownIt

from nsanalyze.render.markdown import code, html_text, render
from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_V2_NCU, FIXTURES

CLI = Path(sys.executable).parent / "nsanalyze"


def shown(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_code_spans_and_summaries_show_the_text_itself(joined_model):
    text = render(joined_model)
    page = shown(text)
    codes = [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", page)]
    assert str(DEV_SUITE_NCU) in codes
    assert any(c.endswith("dev_suite.cu:88") for c in codes)  # a source line, as written
    assert not [c for c in codes if "\\" in c]
    summaries = re.findall(r"<summary>(.*?)</summary>", page)
    # 10 findings, the ones at info, then the not-judged
    assert len(summaries) == 12 and not [s for s in summaries if "\\" in s]
    assert summaries[-2].startswith("Also found, at info") and summaries[-1].startswith("Not judged for lack of metrics: ")
    assert any("(133 blocks on 132 SMs, 0.50 waves)" in html.unescape(s) for s in summaries)


def test_code_and_html_text_helpers():
    assert code("a_b-c.ncu-rep") == "`a_b-c.ncu-rep`"
    assert code("x`y") == "``x`y``" and shown(code("x`y")).strip() == "<p><code>x`y</code></p>"
    assert code("a|b", in_table=True) == "`a\\|b`"
    assert html_text("void f<int>(T*) @me") == "void f&lt;int&gt;(T*) &#64;me"


def run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_diff_without_output_is_a_terminal_table():
    result = run("diff", DEV_SUITE_NCU, DEV_SUITE_V2_NCU)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "base: " + str(DEV_SUITE_NCU) in out and "┃ kernel" in out
    assert re.search(r"│ soa_update +│ 56\.8 µs │ 684 µs +│ \+1104\.5% +│ regression", out)
    assert "\\_" not in out and "&#64;" not in out and "|---|" not in out


def test_trend_without_output_is_a_terminal_table(tmp_path):
    for night, name in (("2026-11-01", "nightly1_nsys.sqlite.xz"), ("2026-11-02", "nightly2_nsys.sqlite.xz"),
                        ("2026-11-03", "nightly3_slow_nsys.sqlite.xz")):
        (tmp_path / "runs" / night).mkdir(parents=True)
        shutil.copy(FIXTURES / "real" / name, tmp_path / "runs" / night / name)
    assert run("batch", tmp_path / "runs", "--db", tmp_path / "h.sqlite", "--jobs", "1").returncode == 0
    result = run("trend", "--db", tmp_path / "h.sqlite")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "3 runs from 2026-11-01 to 2026-11-03" in out and "┃ series" in out
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT" in out
    assert "\\_" not in out and "&#64;" not in out and "|---|" not in out
