"""The command in awkward surroundings: a reader that closes the pipe, a deleted working directory, an
ASCII locale, a folder the user cannot enter. Each is one clear outcome, never an internal error."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS

CLI = Path(sys.executable).parent / "nsanalyze"


def test_a_closed_pipe_ends_quietly_with_0():
    """`nsanalyze report x | head -1`: the reader closed the pipe before the summary was written."""
    for args in (["report", DEV_SUITE_NSYS], ["report", DEV_SUITE_NSYS, "-o", "-"], ["stats", DEV_SUITE_NSYS]):
        process = subprocess.Popen([str(CLI), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        process.stdout.close()   # as `head` does once it has its line
        stderr = process.stderr.read().decode()
        assert process.wait(timeout=300) == 0 and stderr == "", (args, stderr)


def _in_deleted_folder(tmp_path, *args, **env):
    """The command run from a folder deleted before it starts (as `cd build && rm -rf ../build && ...`)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import os, subprocess, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); " \
             f"sys.exit(subprocess.run(sys.argv[1:]).returncode)"
    return subprocess.run([sys.executable, "-c", script, str(CLI), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


def test_report_with_absolute_paths_from_a_deleted_folder(tmp_path):
    out = tmp_path / "r.json"
    result = _in_deleted_folder(tmp_path, "report", DEV_SUITE_NSYS, "-o", out, "-o", tmp_path / "r.sarif",
                                "--annotations", "github")
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["timeline"]["kernels"] == 212   # the dev suite's 212 kernels
    results = json.loads((tmp_path / "r.sarif").read_text())["runs"][0]["results"]
    # no checkout to place source lines on: the program findings name the profile by its absolute file URI
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"] for r in results for loc in r["locations"]}
    assert results and uris == {DEV_SUITE_NSYS.resolve().as_uri()}


def test_batch_with_two_workers_from_a_deleted_folder(tmp_path):
    result = _in_deleted_folder(tmp_path, "batch", DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS, "--db", tmp_path / "h.sqlite",
                                "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert "2 stored, 0 already there, 0 failed" in result.stderr


def test_a_relative_path_from_a_deleted_folder_says_why(tmp_path):
    result = _in_deleted_folder(tmp_path, "report", "run.sqlite")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "run.sqlite: no such file; the working directory no longer exists" in result.stderr


ASCII = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}


def test_non_ascii_and_undecodable_paths_in_an_ascii_locale(tmp_path):
    """Under LC_ALL=C the path's bytes reach Python as surrogates: the Markdown file is UTF-8 and shows
    the name as it was (`prüf_µ`), a byte that is no UTF-8 as an escape (`\\xff`), never a surrogate."""
    folder = os.fsencode(tmp_path)
    named = {b"pr\xc3\xbcf_\xc2\xb5.sqlite.xz": "prüf_µ.sqlite.xz", b"bad\xff.sqlite.xz": "bad\\xff.sqlite.xz"}
    for raw, shown in named.items():
        path = folder + b"/" + raw
        shutil.copy(DEV_SUITE_NSYS, path)
        out = tmp_path / "r.md"
        result = subprocess.run([os.fsencode(CLI), b"report", path, b"-o", os.fsencode(out), b"-o", b"-"],
                                capture_output=True, timeout=300, env={**os.environ, **ASCII})
        assert result.returncode == 0, result.stderr
        markdown = out.read_bytes().decode("utf-8")   # UTF-8 whatever the locale
        assert f"`{tmp_path}/{shown}`" in markdown
        assert json.loads(result.stdout)["profiles"][0]["path"] == f"{tmp_path}/{shown}"
        terminal = subprocess.run([os.fsencode(CLI), b"report", path], capture_output=True, timeout=300,
                                  env={**os.environ, **ASCII})
        assert terminal.returncode == 0 and terminal.stdout.isascii(), terminal.stderr
        assert b"\\udc" not in terminal.stdout + result.stdout


@pytest.mark.skipif(not shutil.which("setpriv") and os.geteuid() == 0, reason="needs setpriv to drop root")
def test_a_file_in_a_folder_the_user_cannot_enter(tmp_path):
    """Permission denied on the folder (not the file): exit 2 and one line, as an unreadable file."""
    base = Path(tempfile.mkdtemp(prefix="nsanalyze-locked-"))   # outside pytest's own 0700 folders
    try:
        os.chmod(base, 0o755)
        (base / "locked").mkdir()
        shutil.copy(DEV_SUITE_NSYS, base / "locked" / "run.sqlite.xz")
        os.chmod(base / "locked", 0)
        cache = base / "cache"
        cache.mkdir(mode=0o777)
        os.chmod(cache, 0o777)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        for args in (["report", base / "locked" / "run.sqlite.xz"], ["stats", base / "locked" / "run.sqlite.xz"],
                     ["diff", base / "locked" / "run.sqlite.xz", DEV_SUITE_NSYS]):
            result = subprocess.run([*drop, str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300,
                                    env={**os.environ, "NSANALYZE_CACHE": str(cache)})
            assert result.returncode == 2, result.stderr
            assert result.stderr == f"nsanalyze: {base}/locked/run.sqlite.xz: permission denied\n"
    finally:
        os.chmod(base / "locked", stat.S_IRWXU)
        shutil.rmtree(base)
