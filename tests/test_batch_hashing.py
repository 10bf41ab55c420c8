"""`batch` stores figures under the hash of the content they were read from: a profile rewritten in place
after the worker hashed it, with its size, inode and mtime kept, is not stored under the first key."""

import os
import shutil
import sqlite3
from pathlib import Path

from nsanalyze import batch as batch_module
from nsanalyze.read.files import open_local
from tests.conftest import REAL


def _rewrite_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Another export's bytes in the same file: same inode, same size, the same mtime to the nanosecond."""
    info = os.stat(path)
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    with open(path, "r+b") as handle:
        handle.write(data.replace(old, new))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (info.st_ino, info.st_size, info.st_mtime_ns)


def test_a_profile_rewritten_between_hash_and_analysis_is_not_stored(tmp_path, monkeypatch):
    folder = tmp_path / "runs"
    folder.mkdir()
    path = folder / "nightly1_nsys.sqlite"
    shutil.copy(open_local(REAL / "nightly1_nsys.sqlite.xz")[1], path)
    hashed = batch_module.content_hash
    calls = []

    def rewritten_after_the_workers_hash(p):   # the batch hashes, the worker hashes, then the file changes
        digest = hashed(p)
        calls.append(digest)
        if len(calls) == 2:
            _rewrite_in_place(path, b"nvjet_sm90_tst_256x128", b"xvjet_sm90_tst_256x128")
        return digest

    monkeypatch.setattr(batch_module, "content_hash", rewritten_after_the_workers_hash)
    outcomes = batch_module.batch([str(folder)], str(tmp_path / "h.sqlite"), jobs=1)
    assert [o.status for o in outcomes] == ["failed"], outcomes
    assert "changed while it was read" in outcomes[0].detail
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM kernels").fetchone()[0] == 0


def test_an_unchanged_profile_is_stored_under_its_hash(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    path = folder / "nightly1_nsys.sqlite"
    shutil.copy(open_local(REAL / "nightly1_nsys.sqlite.xz")[1], path)
    outcomes = batch_module.batch([str(folder)], str(tmp_path / "h.sqlite"), jobs=1)
    assert [o.status for o in outcomes] == ["stored"]
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        assert db.execute("SELECT content_hash FROM runs").fetchall() == [(batch_module.content_hash(path),)]
        names = {name for (name,) in db.execute("SELECT name FROM kernels")}
    assert any(name.startswith("nvjet_sm90_tst_256x128") for name in names)
