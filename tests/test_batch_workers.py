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


def test_a_stopped_batch_stops_the_workers_its_pool_had_not_listed(tmp_path):
    """A worker the fork server forked as the batch's SIGTERM came was in no table of the pool: it was not stopped,
    ended only after the batch (killed with the fork server, no cleanup), and its partial copy stayed in the cache (a
    fresh clone's suite, test_batch_workers_die_with_it[SIGTERM]). The batch's grandchildren outside its list (the
    fork server's children) are stopped too. Here, in a process of its own (this one's children are the test pool's),
    a child forks two that sleep: the unlisted one is found and ended, the listed one left alone."""
    script = tmp_path / "scene.py"
    script.write_text(
        "import json, os, subprocess, sys, time\n"
        "from nsanalyze.batch import _stop_unlisted_workers\n"
        "from nsanalyze.read.files import process_alive\n"
        f"ready = {str(tmp_path / 'pids')!r}\n"
        "parent = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys, time; '\n"
        "    'kids = [subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(60)\"]) for _ in range(2)]; '\n"
        "    f'open({ready!r}, \"w\").write(\" \".join(str(k.pid) for k in kids)); time.sleep(60)'])\n"
        "deadline = time.monotonic() + 30\n"
        "while not (os.path.exists(ready) and open(ready).read()) and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "listed, unlisted = (int(p) for p in open(ready).read().split())\n"
        "stopped = _stop_unlisted_workers({listed})\n"
        "print(json.dumps({'stopped': sorted(stopped), 'unlisted': unlisted, 'listed': listed,\n"
        "                  'unlisted_alive': process_alive(unlisted), 'listed_alive': process_alive(listed)}))\n"
        "for pid in (listed, unlisted, parent.pid):\n"
        "    try:\n"
        "        os.kill(pid, 9)\n"
        "    except OSError:\n"
        "        pass\n")
    import json

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["stopped"] == [seen["unlisted"]]
    assert not seen["unlisted_alive"] and seen["listed_alive"]
