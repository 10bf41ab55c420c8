"""Markdown for pull-request comments: structure, escaping, and GitHub's 65,536-character limit."""

import copy

from nsanalyze.render.markdown import LIMIT, render


def test_structure(joined_model):
    text = render(joined_model)
    assert text.startswith("## nsanalyze report")
    assert "| # | severity | check |" in text and "<details><summary>" in text
    assert text.count("<details>") == text.count("</details>") == 11   # 10 findings and the checks not judged
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
