"""Bad input: exit status 2 and one line naming the file and the reason, never a traceback."""

import lzma
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS


def run_cli(*args, cache=None):
    """`nsanalyze ARGS` in a fresh interpreter; cache: its own folder for decompressed copies (made empty)."""
    env = dict(os.environ)
    if cache is not None:
        os.makedirs(cache, exist_ok=True)
        env["NSANALYZE_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "nsanalyze", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def assert_clean_error(result, path, reason_word):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and reason_word in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_empty_file(tmp_path):
    path = tmp_path / "empty.ncu-rep"
    path.write_bytes(b"")
    assert_clean_error(run_cli("report", path), path, "empty")


@pytest.mark.parametrize("name", ["noise.ncu-rep", "noise.sqlite"])
def test_random_bytes(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(os.urandom(4096))
    result = run_cli("report", path)
    assert_clean_error(result, path, "not")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9])
def test_truncated_ncu_report(tmp_path, fraction):
    data = lzma.decompress(DEV_SUITE_NCU.read_bytes())
    path = tmp_path / f"cut{fraction}.ncu-rep"
    path.write_bytes(data[: int(len(data) * fraction)])
    result = run_cli("report", path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert str(path) in result.stderr


def test_truncated_xz(tmp_path):
    data = DEV_SUITE_NSYS.read_bytes()
    path = tmp_path / "cut.sqlite.xz"
    path.write_bytes(data[: len(data) // 2])
    assert_clean_error(run_cli("report", path), path, "truncated")


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t(x)")
    assert_clean_error(run_cli("report", path), path, "not an Nsight Systems export")


def test_directory(tmp_path):
    assert_clean_error(run_cli("report", tmp_path), tmp_path, "directory")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.ncu-rep"
    assert_clean_error(run_cli("report", path), path, "no such file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without permission bits")
def test_unreadable(tmp_path):
    path = tmp_path / "secret.ncu-rep"
    path.write_bytes(b"x")
    path.chmod(0)
    assert_clean_error(run_cli("report", path), path, "permission")


def test_nsys_rep_asks_for_export(tmp_path):
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"not really")
    assert_clean_error(run_cli("report", path), path, "nsys export --type sqlite")


def test_unknown_output_format(tmp_path):
    result = run_cli("report", DEV_SUITE_NSYS, "-o", tmp_path / "r.docx")
    assert result.returncode == 2 and "format" in result.stderr and "Traceback" not in result.stderr


def test_unknown_threshold():
    result = run_cli("report", DEV_SUITE_NSYS, "--set", "bank-conflicts.nonsense=1")
    assert result.returncode == 2 and "unknown threshold" in result.stderr
