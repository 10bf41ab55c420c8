"""Golden files: every report format of two small real profiles (and every diff format of one real fix
pair), byte for byte, through the one format
dispatch (render.formats).

The profiles: the dev suite's ncu report (kernel findings with source lines: SARIF regions, the roofline)
and the dev_infer nsys export (program findings, the budget and utilization charts). The JSON report is
the analysis's output and is compared with a fresh analysis (one per profile, shared by the session);
the other formats are rendered from the stored JSON, so a change of the analysis fails the JSON golden
alone, and a change of a renderer fails its own format alone. The PDF's golden is the HTML WeasyPrint
lays out (print CSS and the paper model applied): the PDF's bytes carry its creation date and its line
breaks depend on the fonts installed; tests/render/test_pdf*.py check the laid-out PDF.

Regenerate after an intended change, then read the diff before committing it:

    NSANALYZE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/render/test_golden.py
    git diff --stat tests/golden/
"""

import difflib
import json
import os

import pytest

from nsanalyze.render.formats import RENDERERS, render
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, ROOT

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("NSANALYZE_UPDATE_GOLDEN") == "1"
PROFILES = {"dev_suite_ncu": DEV_SUITE_NCU, "dev_infer_nsys": DEV_INFER_NSYS}
FILES = {"json": "report.json", "markdown": "report.md", "html": "report.html", "sarif": "report.sarif",
         "pdf": "report.pdf.html"}


def _relative(model: dict) -> dict:
    """The model with the checkout's absolute prefix taken off its paths: the same golden in any clone."""
    return json.loads(json.dumps(model).replace(json.dumps(str(ROOT) + "/")[1:-1], ""))


def _compare(name: str, produced: bytes) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(produced)
        return
    assert path.exists(), f"{path} is missing: NSANALYZE_UPDATE_GOLDEN=1 writes it (module docstring)"
    expected = path.read_bytes()
    if produced != expected:
        lines = difflib.unified_diff(expected.decode(errors="replace").splitlines(),
                                     produced.decode(errors="replace").splitlines(), "golden", "now", lineterm="", n=1)
        pytest.fail(f"{name} differs from its golden (NSANALYZE_UPDATE_GOLDEN=1 regenerates it):\n"
                    + "\n".join(list(lines)[:60]))


@pytest.fixture(scope="module")
def models(analyzed):
    return {key: _relative(analyzed(path)) for key, path in PROFILES.items()}


def test_every_report_format_has_a_golden():
    assert set(RENDERERS["report"]) == set(FILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_json_report_is_its_golden(models, profile):
    _compare(f"{profile}/{FILES['json']}", render(models[profile], "json"))


@pytest.mark.parametrize("fmt", [f for f in FILES if f != "json"])
@pytest.mark.parametrize("profile", PROFILES)
def test_format_is_its_golden(models, profile, fmt, monkeypatch):
    monkeypatch.chdir(ROOT)   # SARIF places findings relative to the working directory: the checkout
    stored = GOLDEN / profile / FILES["json"]
    model = models[profile] if UPDATE or not stored.exists() else json.loads(stored.read_text())
    if fmt == "pdf":
        from nsanalyze.render.pdf import print_html

        produced = print_html(model).encode()
    else:
        produced = render(model, fmt)
    _compare(f"{profile}/{FILES[fmt]}", produced)


DIFF_PAIR = ("graphs_eager_nsys.sqlite.xz", "graphs_after_nsys.sqlite.xz")   # eager steps -> one CUDA graph a step
DIFF_FILES = {"json": "diff.json", "markdown": "diff.md", "html": "diff.html"}


@pytest.fixture(scope="module")
def diff_result():
    from nsanalyze.diff import diff
    from tests.conftest import REAL
    from tests.isolated import apart

    return _relative(apart(diff, *(str(REAL / name) for name in DIFF_PAIR)))


def test_every_diff_format_has_a_golden():
    assert set(RENDERERS["diff"]) == set(DIFF_FILES)


@pytest.mark.parametrize("fmt", DIFF_FILES)
def test_diff_format_is_its_golden(diff_result, fmt):
    """A real fix pair through diff's renderers: the JSON from a fresh diff, the others from the stored JSON."""
    stored = GOLDEN / "graphs_diff" / DIFF_FILES["json"]
    result = diff_result if fmt == "json" or UPDATE or not stored.exists() else json.loads(stored.read_text())
    _compare(f"graphs_diff/{DIFF_FILES[fmt]}", render(result, fmt, "diff"))
