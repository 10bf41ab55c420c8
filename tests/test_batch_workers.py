"""`batch`'s worker processes import the installed nsanalyze, never a folder named `nsanalyze` in the
working directory (the folder holding a clone, or any package of that name)."""

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS

CLI = Path(sys.executable).parent / "nsanalyze"


@pytest.mark.parametrize("trap", ["a clone's folder", "a package that fails on import"])
def test_batch_beside_a_folder_named_nsanalyze(tmp_path, trap):
    folder = tmp_path / "nsanalyze"
    (folder / "hold").mkdir(parents=True)
    for profile in (DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS):
        (folder / "hold" / profile.name).write_bytes(profile.read_bytes())
    if trap != "a clone's folder":
        (folder / "__init__.py").write_text("raise ImportError('the working directory was imported')\n")
    result = subprocess.run([str(CLI), "batch", "nsanalyze/hold", "--db", "h.sqlite", "--jobs", "2"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "2 stored, 0 already there, 0 failed" in result.stderr
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
