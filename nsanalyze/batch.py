"""`nsanalyze batch`: analyze folders of nightly profiles into a history database.

Each profile is analyzed in a worker process (local processes, or a Dask cluster with
`--scheduler`), and the parent writes its rows - run metadata, kernels, findings, NVTX ranges -
in one transaction. A profile already stored (same content hash) is skipped, so re-running, or
running two batches on one database at once, adds nothing twice; a batch killed mid-way leaves
whole profiles only, and re-running completes it.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import socket
import sqlite3
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import sqlite_utils

from nsanalyze import __version__
from nsanalyze.errors import INTERRUPTED, InputError
from nsanalyze.read.files import process_alive, remove_orphan_copies

PROFILE_SUFFIXES = (".ncu-rep", ".sqlite", ".pt.trace.json")  # the last: torch.profiler's trace handler's names
DATE_IN_PATH = re.compile(r"(?<!\d)(20\d\d)([-_]?)(\d\d)\2(\d\d)(?!\d)")   # not inside a longer number


@dataclass
class Outcome:
    path: str
    status: str        # "stored", "skipped" (already in the database), "failed"
    detail: str = ""


def _file_keys(paths) -> set[tuple[int, int]]:
    keys = set()
    for path in paths:
        try:
            info = os.stat(path)
            keys.add((info.st_dev, info.st_ino))
        except OSError:
            pass
    return keys


SNIFF_BYTES = 64 << 10   # a Kineto trace names its traceEvents, schemaVersion or deviceProperties early
KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')


def _head_of(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first bytes of what a file holds, through its .xz or .gz compression (judged by signature)."""
    with open(path, "rb") as handle:
        head = handle.read(size)
    import gzip
    import lzma

    opener = lzma.open if head.startswith(b"\xfd7zXZ\x00") else gzip.open if head.startswith(b"\x1f\x8b") else None
    if opener is None:
        return head
    try:
        with opener(path, "rb") as handle:
            return handle.read(size)
    except (OSError, EOFError, lzma.LZMAError):   # a corrupt archive: judged by its name (the analysis says why)
        return b""


def profile_by_content(path: Path) -> bool:
    """What `report` reads, told by content as its reader tells it (read/files.py): an SQLite database
    (an nsys export), an Nsight Compute report (`NVR\\0`), a JSON object naming a Kineto trace's keys;
    compressed or not, whatever the file's name (`kineto_step.json`, `run.db`)."""
    try:
        head = _head_of(path)
    except OSError:
        return _profile_name(path)   # unreadable: reported as failed where its name says profile
    if head.startswith((b"SQLite format 3\x00", b"NVR\x00")):
        return True
    body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return body.startswith((b"{", b"[")) and any(key in body for key in KINETO_KEYS)


def find_profiles(paths: list[str], exclude=()) -> list[Path]:
    """Every profile under the given files and folders, in a stable order: a file given by name is taken as
    `report` takes it; in folders, files recognised by content (or named as profiles: a corrupt one is then
    reported, not passed over). `exclude`: files to pass over (batch's own history database and its -wal,
    -shm and -journal files, when they lie there)."""
    excluded = _file_keys(exclude)
    found = []
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise InputError(given, "no such file or folder")
        candidates = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in candidates:
            if excluded and _file_keys([path]) & excluded:
                continue
            if path is root or _profile_name(path) or profile_by_content(path):
                found.append(path)
    return found


def _profile_name(path: Path) -> bool:
    name = path.name.lower()
    for suffix in (".xz", ".gz"):
        name = name.removesuffix(suffix)
    return name.endswith(PROFILE_SUFFIXES)


def special_files(paths: list[str]) -> list[tuple[Path, str]]:
    """Entries under the folders named like profiles that are not regular files: a dangling link, a
    link loop, a device, a FIFO, a socket. Each is reported (a line), never opened."""
    import stat

    found = []
    for given in paths:
        root = Path(given)
        if root.exists() and not root.is_dir() and not root.is_file():   # a device or FIFO given by name
            found.append((root, "not a regular file (a device, FIFO or socket): skipped"))
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if not _profile_name(path) or path.is_file():
                continue
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                found.append((path, "a link that leads nowhere (dangling or a loop)" if path.is_symlink()
                              else f"cannot read it ({exc.strerror or exc})"))
                continue
            if not stat.S_ISDIR(mode):
                found.append((path, "not a regular file (a device, FIFO or socket): skipped"))
    return found


def own_files(db_path: str) -> list[str]:
    """The history database and the files SQLite keeps beside it."""
    return [db_path, *(f"{db_path}{suffix}" for suffix in ("-wal", "-shm", "-journal"))]


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_date(path: Path) -> str:
    """The night a profile belongs to: a date in its path (nightly/2026-11-02/...), else its mtime."""
    from datetime import date

    for match in DATE_IN_PATH.finditer(str(path)):   # a calendar date only: build_2099123456 is none
        try:
            return date(int(match.group(1)), int(match.group(3)), int(match.group(4))).isoformat()
        except ValueError:
            continue
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).strftime("%Y-%m-%d")


def _ranges_per_instance(ranges: list[dict]) -> list[dict]:
    """NVTX ranges by normalized name, wall and GPU time per instance (nsanalyze.figures: as diff reads them)."""
    from nsanalyze.figures import ranges_per_instance

    return [{"name": name, "instances": e["instances"], "wall_ns": e["host_ns"], "kernel_ns": e["gpu_ns"]}
            for name, e in ranges_per_instance(ranges).items()]


def analyze_for_history(path: str) -> dict:
    """Worker: analyzes one profile and returns the rows to store (plain data, picklable), or
    {"error": reason}: one bad profile is reported failed, never the end of the batch."""
    try:
        before = _identity(path)
        file_hash = content_hash(Path(path))   # what is read here, not what the batch hashed a moment before
        rows = _history_rows(path)
        rows["content"] = _decompressed_hash(path)
        # the hash again once analysed: a file rewritten in place with its size and mtime kept (or within
        # the clock's step) shows no other identity, and its figures would go under the first content's key
        if _identity(path) != before or content_hash(Path(path)) != file_hash:
            return {"error": "it changed while it was read (replaced, or still being written): run batch again"}
        rows["file_hash"] = file_hash
        return rows
    except OSError as exc:
        return {"error": f"cannot read it ({exc.strerror or exc})"}
    except InputError as exc:
        return {"error": exc.reason}
    except MemoryError:
        return {"error": "out of memory while analyzing it"}
    except Exception as exc:  # noqa: BLE001 - a bug or an unforeseen value: this profile fails, not the batch
        return {"error": f"internal error ({exc.__class__.__name__}: {exc})"}


def _identity(path: str) -> tuple[int, int, int]:
    info = os.stat(path)
    return info.st_ino, info.st_size, info.st_mtime_ns


def _decompressed_hash(path: str) -> str | None:
    """The hash of what a compressed profile holds (its copy in the cache, made by the analysis): a
    `.xz` and a `.gz` of one export are one run. None for a file read as it is (its own hash is that)."""
    from nsanalyze.read.files import open_local

    local = open_local(path)[1]
    return None if Path(local) == Path(path) else content_hash(Path(local))


def _history_rows(path: str) -> dict:
    from nsanalyze.analyze import analyze
    from nsanalyze.figures import median_noise, steps_in_window

    model = analyze([path])
    profile = model["profiles"][0]
    timeline = model.get("timeline") or {}
    steps = timeline.get("steps")
    # nsys kernel times are totals over the window: per steady step, a nightly run with more
    # iterations is not slower (ncu durations are per launch already)
    per_step = steps_in_window(timeline) if profile["kind"] in ("nsys", "kineto") else 1.0
    kernels = [{"name": k["name"], "demangled": k["demangled"], "launches": k["launches"],
                "duration_ns": (k["duration_ns"] or 0) / per_step if k["duration_ns"] is not None else None,
                "time_share": k["time_share"], "bound": k["bound"],
                "grid_size": (k.get("metrics") or {}).get("grid_size"),
                "block_size": (k.get("metrics") or {}).get("block_size"),
                "metrics": json.dumps(k.get("metrics") or {}, allow_nan=False)} for k in model["kernels"]]
    findings = [{"rank": f["rank"], "check_id": f["check"], "severity": f["severity"], "kernel_name": f["kernel_name"],
                 "title": f["title"], "estimated_speedup": f["estimated_speedup"],
                 "estimated_savings_ns": f["estimated_savings_ns"]} for f in model["findings"]]
    ranges = _ranges_per_instance(timeline.get("ranges", []))
    if steps:  # the steady step's median wall time, the figure a nightly dashboard follows
        ranges.append({"name": f"median step: {steps['name']}", "instances": steps["count"],
                       "wall_ns": steps.get("host_median_ns", steps["median_ns"]), "kernel_ns": steps["median_ns"],
                       "noise": median_noise(steps)})
    return {"kind": profile["kind"], "gpu": profile["gpu"], "kernels": kernels, "findings": findings,
            "ranges": ranges}


HISTORY_TABLES = {"runs", "kernels", "findings", "ranges"}
# The columns batch writes, by table (`seen`, added later, may be missing from an older database: it is made then)
HISTORY_COLUMNS = {
    "runs": {"content_hash": str, "path": str, "folder": str, "date": str, "label": str, "git_revision": str,
             "kind": str, "gpu": str, "analyzed_at": str, "nsanalyze_version": str},
    "kernels": {"content_hash": str, "name": str, "demangled": str, "launches": int, "duration_ns": float,
                "time_share": float, "bound": str, "grid_size": float, "block_size": float, "metrics": str},
    "findings": {"content_hash": str, "rank": int, "check_id": str, "severity": str, "kernel_name": str, "title": str,
                 "estimated_speedup": float, "estimated_savings_ns": float},
    "ranges": {"content_hash": str, "name": str, "instances": int, "wall_ns": float, "kernel_ns": float,
               "noise": float},
    "seen": {"file_hash": str, "content_hash": str, "path": str},
}
SCHEDULER_TIMEOUT_S = 10
DASK_PORT = 8786   # a scheduler's port where the address names none (Dask's default)
WORKER_STOP_S = 5   # how long a stopped batch waits for a worker to unwind before it kills it


def _check_history(db_path: str) -> None:
    """Refuse to write into a file that is not a history database (an nsys export, an .ncu-rep, a
    corrupt file): batch would switch it to WAL and add tables. New or empty files are fine."""
    import stat

    path = Path(db_path)
    if not path.exists():
        return
    if path.is_dir():
        raise InputError(db_path, "is a directory, not a history database")
    if not stat.S_ISREG(path.stat().st_mode):   # /dev/null, a FIFO: SQLite fails inside its first transaction
        raise InputError(db_path, "not a regular file (a device, FIFO or socket): give --db a file")
    if path.stat().st_size == 0:
        return
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as probe:
            tables = {r[0] for r in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = {t: {r[0] for r in probe.execute("SELECT name FROM pragma_table_info(?)", (t,))}
                       for t in HISTORY_COLUMNS if t in tables}
    except sqlite3.DatabaseError as exc:
        raise InputError(db_path, f"not a history database ({exc})") from None
    if tables and not HISTORY_TABLES <= tables:
        raise InputError(db_path, "not a history database (an SQLite file with other tables: an nsys export?); "
                                  "give --db a new file or one nsanalyze batch wrote")
    for table, have in columns.items():   # a table of another shape: the first write would fail (exit 3)
        lacking = [c for c in HISTORY_COLUMNS[table] if c not in have]
        if lacking:
            raise InputError(db_path, f"not a history database nsanalyze batch wrote (its {table} table lacks "
                                      f"{', '.join(lacking)}); give --db a new file or one nsanalyze batch wrote")


def open_history(db_path: str) -> sqlite_utils.Database:
    _check_history(db_path)
    try:
        connection = sqlite3.connect(db_path, timeout=120, isolation_level=None)
    except sqlite3.Error as exc:
        raise InputError(db_path, f"cannot open the history database ({exc})") from None
    for attempt in range(600):  # switching to WAL needs a moment alone; a second batch may be starting too
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError:
            time.sleep(0.1)
    db = sqlite_utils.Database(connection)
    connection.execute("BEGIN IMMEDIATE")   # two batches starting at once: one creates, the other waits
    try:
        if "runs" not in db.table_names():
            db["runs"].create(HISTORY_COLUMNS["runs"], pk="content_hash", if_not_exists=True)
            for table in ("kernels", "findings", "ranges"):
                db[table].create(HISTORY_COLUMNS[table], if_not_exists=True)
            for table in ("kernels", "findings", "ranges"):
                db[table].create_index(["content_hash"], if_not_exists=True)
        if "seen" not in db.table_names():   # every file a run was seen as (copies, .xz and .gz of one export)
            db["seen"].create(HISTORY_COLUMNS["seen"], pk=("file_hash", "path"), if_not_exists=True)
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return db


def store(db: sqlite_utils.Database, content: str, path: Path, rows: dict, label: str | None,
          git_revision: str | None) -> bool:
    """Writes one profile's rows in one transaction; False when its content is stored already (by another
    batch, or as another file: a copy, the `.xz` of a `.gz`), then only the path it was seen under is added.
    `content`: the file's hash; rows["content"], when given, the hash of what it decompresses to."""
    file_hash = rows.get("file_hash") or content
    content = rows.get("content") or file_hash
    path = Path(os.path.abspath(path))   # absolute: a batch run from another folder knows the file again
    db.conn.execute("BEGIN IMMEDIATE")   # one writer at a time; the hash check and the inserts are one unit
    try:
        db.execute("INSERT OR IGNORE INTO seen (file_hash, content_hash, path) VALUES (?, ?, ?)",
                   [file_hash, content, str(path)])
        if db.execute("SELECT 1 FROM runs WHERE content_hash = ?", [content]).fetchone():
            db.conn.execute("COMMIT")
            return False
        db["runs"].insert({"content_hash": content, "path": str(path), "folder": str(path.parent),
                           "date": run_date(path), "label": label, "git_revision": git_revision,
                           "kind": rows["kind"], "gpu": rows["gpu"],
                           "analyzed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "nsanalyze_version": __version__})
        for table in ("kernels", "findings", "ranges"):
            if rows[table]:
                db[table].insert_all([{"content_hash": content, **row} for row in rows[table]], alter=True)
        db.conn.execute("COMMIT")
        return True
    except BaseException as exc:
        if db.conn.in_transaction:   # SQLite rolls back by itself on some errors (a full disk)
            try:
                db.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        if isinstance(exc, sqlite3.OperationalError) and ("full" in str(exc) or "I/O" in str(exc)):
            raise InputError(_database_file(db), f"cannot store {path.name} ({exc}): what was stored before "
                                                 "is intact") from None
        raise


def _database_file(db: sqlite_utils.Database) -> str:
    try:
        return db.execute("PRAGMA database_list").fetchone()[2] or "the history database"
    except sqlite3.Error:
        return "the history database"


def batch(paths: list[str], db_path: str, jobs: int | None = None, label: str | None = None,
          git_revision: str | None = None, scheduler: str | None = None, progress=None) -> list[Outcome]:
    """Analyzes every new profile under `paths` into `db_path`. `progress(outcome)` is called per profile."""
    db = open_history(db_path)
    known = {row[0] for row in db.execute("SELECT content_hash FROM runs UNION SELECT file_hash FROM seen")}
    todo, outcomes, seen_again = [], [], []
    for path, reason in special_files(paths):
        outcomes.append(Outcome(str(path), "failed", reason))
        if progress:
            progress(outcomes[-1])
    for path in find_profiles(paths, exclude=own_files(db_path)):
        try:
            content = content_hash(path)
        except OSError as exc:   # a link into /proc, a device, a file gone: this one fails, the rest go on
            outcomes.append(Outcome(str(path), "failed", f"cannot read it ({exc.strerror or exc})"))
            if progress:
                progress(outcomes[-1])
            continue
        if content in known:
            outcomes.append(Outcome(str(path), "skipped", "already stored"))
            seen_again.append((content, os.path.abspath(path)))
            if progress:
                progress(outcomes[-1])
            continue
        known.add(content)
        todo.append((path, content))

    if seen_again:   # a stored file under a new path: the path is kept with its run
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            for file_hash, seen_path in seen_again:
                db.execute("""INSERT OR IGNORE INTO seen (file_hash, content_hash, path) SELECT ?, COALESCE(
                              (SELECT content_hash FROM seen WHERE file_hash = ? LIMIT 1), ?), ?""",
                           [file_hash, file_hash, file_hash, seen_path])
            db.conn.execute("COMMIT")
        except BaseException:
            if db.conn.in_transaction:
                db.conn.execute("ROLLBACK")
            raise

    def record(path: Path, content: str, rows: dict) -> None:
        if INTERRUPTED.is_set():   # a Ctrl-C the analysis swallowed: nothing more is stored
            raise KeyboardInterrupt
        if "error" in rows:
            outcome = Outcome(str(path), "failed", rows["error"])
        elif store(db, content, path, rows, label, git_revision):
            outcome = Outcome(str(path), "stored")
        else:
            outcome = Outcome(str(path), "skipped", "its content is stored already (a copy, or another "
                                                    "compression of it, or another batch stored it meanwhile)")
        outcomes.append(outcome)
        if progress:
            progress(outcome)

    if scheduler:
        address = re.fullmatch(r"(tcp|tls|inproc|ucx)://([^\s/:]+)(?::(\d+))?/?", scheduler)
        if not address:
            raise InputError("--scheduler", f"{scheduler!r} is not a scheduler address (tcp://host:8786)")

        def unanswered(exc: BaseException) -> InputError:
            waited = "" if isinstance(exc, ConnectionRefusedError) else f" within {SCHEDULER_TIMEOUT_S} s"
            return InputError("--scheduler", f"no Dask scheduler answered at {scheduler}{waited} "
                                             f"({exc.__class__.__name__})")
        if address[1] in ("tcp", "tls"):   # a port nothing listens on refuses at once: no need to wait out Dask's
            try:                            # retries for the whole timeout
                socket.create_connection((address[2], int(address[3] or DASK_PORT)), SCHEDULER_TIMEOUT_S).close()
            except OSError as exc:
                raise unanswered(exc) from None
        from distributed import as_completed as dask_completed

        client = _dask_client(scheduler, unanswered)
        with client:
            futures = {client.submit(analyze_for_history, str(p), pure=False): (p, c) for p, c in todo}
            for future in dask_completed(futures):
                record(*futures[future], future.result())
    elif (jobs or 1) <= 1:
        for path, content in todo:
            record(path, content, analyze_for_history(str(path)))
    else:
        # forkserver, not fork: a parent with threads (a notebook, a test runner) can deadlock forked
        # workers; the server imports the analysis once, so each worker starts in milliseconds.
        try:
            os.getcwd()
        except OSError:   # a deleted working directory: multiprocessing needs one (the paths here are absolute)
            os.chdir(os.path.dirname(db_path) if os.path.isabs(db_path) else os.sep)
        # multiprocessing's resource tracker (a process of its own, started with the pool) warns on stderr about
        # the semaphores of workers stopped on an error, which it then cleans up: the batch's one line says why
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"),
                                                              "ignore::UserWarning:multiprocessing.resource_tracker"]))
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["nsanalyze._forkserver_guard", "nsanalyze.analyze", "nsanalyze.batch"])
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_die_with_parent)
        safe_path = _safe_import_path()
        try:
            futures = {pool.submit(_analyze_in_worker, str(p)): (p, c) for p, c in todo}
            for future in as_completed(futures):
                try:
                    rows = future.result()
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception as exc:  # noqa: BLE001 - its worker died (killed, out of memory): this profile failed
                    rows = {"error": f"its worker ended ({exc.__class__.__name__}: {exc})"}
                record(*futures[future], rows)
        except BaseException:  # Ctrl-C, SIGTERM (raised as SystemExit by the CLI), an error: stop the workers now
            workers = list((getattr(pool, "_processes", None) or {}).values())   # shutdown() forgets them
            pool.shutdown(wait=False, cancel_futures=True)
            for process in workers:
                process.terminate()
            for process in workers:   # one stuck in C code past its SIGTERM still ends with the batch
                process.join(timeout=WORKER_STOP_S)
                if process.is_alive():
                    process.kill()
                    process.join(timeout=WORKER_STOP_S)
            stopped = {p.pid for p in workers} | _stop_unlisted_workers({p.pid for p in workers})
            remove_orphan_copies(stopped)   # what a worker stopped mid-copy left in the cache
            raise
        else:
            pool.shutdown(wait=True)
        finally:
            safe_path.close()
    db.conn.close()
    return outcomes


def _stop_unlisted_workers(listed: set[int]) -> set[int]:
    """The pool's workers the stopped batch did not list (one forked by the fork server as the signal came, not yet
    in the pool's table), stopped as the listed ones were: SIGTERM, then SIGKILL past WORKER_STOP_S. Otherwise such
    a worker ended only with the fork server, after the batch (SIGKILL, from the kernel: no cleanup) and after its
    look at the cache, and its partial copy stayed (a fresh clone's suite, 2026-12-05, under load). The workers are
    the batch's grandchildren: the fork server's children (Linux /proc; elsewhere none are found)."""
    import signal

    def parents() -> dict[int, int]:
        found = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        found[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        return found
    table = parents()
    children = {pid for pid, parent in table.items() if parent == os.getpid()}
    unlisted = {pid for pid, parent in table.items() if parent in children} - listed
    for pid in unlisted:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + WORKER_STOP_S
    while time.monotonic() < deadline and any(process_alive(pid) for pid in unlisted):
        time.sleep(0.05)
    for pid in unlisted:
        if process_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return unlisted


class _safe_import_path:
    """While the pool runs, PYTHONSAFEPATH=1 (Python 3.11+) in the environment the fork server starts
    with: the server is `python -c ...`, which would otherwise put the working directory first on its
    sys.path, so a folder named `nsanalyze` there (the folder holding a clone) would be imported as the
    package instead of the installed one. The workers are forked from that server and get the CLI's own
    sys.path. The variable is put back as it was once the pool is done."""

    def __init__(self):
        self.before = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"

    def close(self) -> None:
        if self.before is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = self.before


def _dask_client(scheduler: str, unanswered) -> "distributed.Client":
    """A Dask client of the scheduler, or unanswered(error) where none answers. Dask's own timeout does not end
    every wait: on a port that takes the connection and never speaks its protocol, Client() waited for minutes
    (a silent listener, over 120 s with timeout=1), so the connection is made on a thread of its own, given
    twice the timeout, and left behind (a daemon) where it has not ended."""
    from distributed import Client

    made: dict = {}

    def connect() -> None:
        try:
            made["client"] = Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)
        except BaseException as exc:   # handed to the caller's thread
            made["error"] = exc
    thread = threading.Thread(target=connect, name="nsanalyze-dask-connect", daemon=True)
    thread.start()
    thread.join(2 * SCHEDULER_TIMEOUT_S)
    if thread.is_alive():
        raise unanswered(TimeoutError())
    if isinstance(made.get("error"), (OSError, TimeoutError)):
        raise unanswered(made["error"]) from None
    if "error" in made:
        raise made["error"]
    return made["client"]


def _analyze_in_worker(path: str) -> dict:
    """One profile in a pool worker. A SIGTERM (raised as SystemExit by `_worker_terminated`) ends the
    worker once the analysis has unwound: the pool's own loop would catch it as the task's result and
    take the next profile from its queue, so a stopped batch kept analysing for as long as that took."""
    try:
        return analyze_for_history(path)
    except (SystemExit, KeyboardInterrupt):
        os._exit(143)


def _worker_terminated(signum, frame):
    """SIGTERM in a worker (the batch stopping it on Ctrl-C or SIGTERM) unwinds, so the partial copy it
    was decompressing is removed (read/files.py); a second SIGTERM ends it at once."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise SystemExit(143)


def _die_with_parent() -> None:
    """Pool workers end when the process that forked them ends, even by SIGKILL (Linux prctl)."""
    import signal

    signal.signal(signal.SIGTERM, _worker_terminated)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the fork server is already gone
        os._exit(0)


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
