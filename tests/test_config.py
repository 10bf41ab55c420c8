"""[tool.nsanalyze] in the nearest pyproject.toml: fail-on, thresholds, window, skip; flags win."""

import json

import pytest

from nsanalyze.cli import main
from nsanalyze.config import find_pyproject, load_settings
from tests.conftest import DEV_SUITE_NCU
from tests.isolated import main_apart

SETTINGS = """
[project]
name = "app"

[tool.nsanalyze]
fail-on = "medium"
skip = ["tail-effect"]
window = "capture"

[tool.nsanalyze.thresholds]
"bank-conflicts.min_conflict_share" = 0.9
"""


def run(args) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return exc.code
    return 0


def report(args) -> int:
    """`nsanalyze report ARGS` run from this working directory in a process of its own: an ncu report read
    in the test process would stay in its memory (tests/isolated.py)."""
    return main_apart(["report", *args])[0]


def checks_in(path) -> set[str]:
    return {f["check"] for f in json.loads(path.read_text())["findings"]}


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(SETTINGS)
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")  # no [tool.nsanalyze]: passed by
    monkeypatch.chdir(tmp_path / "src" / "deep")
    return tmp_path


def test_found_from_the_working_directory_up(project):
    assert find_pyproject() == project / "pyproject.toml"
    settings = load_settings()
    assert settings.fail_on == "medium" and settings.window == "capture" and settings.skip == ("tail-effect",)
    assert settings.thresholds == {"bank-conflicts.min_conflict_share": 0.9}


def test_report_uses_the_settings_and_flags_win(project, tmp_path_factory, capsys):
    out = tmp_path_factory.mktemp("out")
    plain = report([str(DEV_SUITE_NCU), "-o", str(out / "cli.json"), "--set",
                    "bank-conflicts.min_conflict_share=0.1", "--fail-on", "high"])
    assert plain == 1  # the dev suite has high findings
    assert "bank-conflicts" in checks_in(out / "cli.json")  # --set wins over pyproject's 0.9
    assert "tail-effect" not in checks_in(out / "cli.json")  # skipped by pyproject.toml
    configured = report([str(DEV_SUITE_NCU), "-o", str(out / "cfg.json")])
    assert configured == 1  # fail-on = "medium" from pyproject.toml
    model = json.loads((out / "cfg.json").read_text())
    assert "bank-conflicts" not in checks_in(out / "cfg.json") and model["skipped_checks"] == ["tail-effect"]
    assert [f["rank"] for f in model["findings"]] == list(range(1, len(model["findings"]) + 1))


def test_without_settings_everything_is_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert find_pyproject() is None or "nsanalyze" not in str(find_pyproject())
    assert report([str(DEV_SUITE_NCU), "-o", str(tmp_path / "r.json")]) == 0
    assert {"tail-effect", "bank-conflicts"} <= checks_in(tmp_path / "r.json")


def test_checks_shows_the_effective_values(project, capsys):
    assert run(["checks", "--set", "bank-conflicts.min_conflict_share=0.3"]) == 0
    assert "bank-conflicts.min_conflict_share = 0.3  [--set; default 0.1]" in capsys.readouterr().out
    assert run(["checks"]) == 0
    out = capsys.readouterr().out
    assert f"settings: {project / 'pyproject.toml'} [tool.nsanalyze]; fail-on = medium; window = capture" in out
    assert "bank-conflicts.min_conflict_share = 0.9  [pyproject.toml; default 0.1]" in out
    assert "(skipped: pyproject.toml)" in out


@pytest.mark.parametrize("text,reason", [
    ("[tool.nsanalyze]\nfail-on = 'severe'\n", "fail-on = 'severe': expected one of high, medium, low, info"),
    ("[tool.nsanalyze]\nwindows = 'capture'\n", "unknown key(s) windows"),
    ("[tool.nsanalyze]\nskip = ['no-such-check']\n", "unknown check(s) to skip: no-such-check"),
    ("[tool.nsanalyze.thresholds]\n'bank-conflicts.nope' = 1\n", "unknown threshold(s) bank-conflicts.nope"),
    ("[tool.nsanalyze.thresholds]\n'bank-conflicts.min_conflict_share' = 'high'\n", "expected a number"),
    ("[tool.nsanalyze\n", "not valid TOML"),
])
def test_bad_settings_one_line_exit_2(tmp_path, monkeypatch, capsys, text, reason):
    (tmp_path / "pyproject.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert run(["report", str(DEV_SUITE_NCU)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nsanalyze: {tmp_path / 'pyproject.toml'}: ") and reason in err and err.count("\n") == 1
