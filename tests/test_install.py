"""A lean install: Dask is an extra (`pip install 'nsanalyze[dask]'`); without it `batch --scheduler`
says so in one line, exit 2, and everything else works."""

import sys
import tomllib

import pytest

from nsanalyze.cli import main
from tests.conftest import DEV_SUITE_NSYS, ROOT


def test_dask_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("distributed") for d in project["dependencies"])
    assert any(d.startswith("distributed") for d in project["optional-dependencies"]["dask"])


def test_scheduler_without_dask_is_one_line_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(SystemExit) as exit_info:
        main(["batch", str(DEV_SUITE_NSYS), "--db", str(tmp_path / "h.sqlite"), "--scheduler", "tcp://host:8786"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == "nsanalyze: --scheduler: needs Dask, an optional part: pip install 'nsanalyze[dask]'\n"
    assert not (tmp_path / "h.sqlite").exists()


def test_report_does_not_import_dask(tmp_path):
    import subprocess

    code = ("import sys; from nsanalyze.cli import main\n"
            "try: main(['report', sys.argv[1], '-o', sys.argv[2]])\n"
            "except SystemExit as e: assert not e.code, e.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('distributed', 'dask')))")
    out = subprocess.run([sys.executable, "-c", code, str(DEV_SUITE_NSYS), str(tmp_path / "r.json")],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    assert (tmp_path / "r.json").stat().st_size > 1000
