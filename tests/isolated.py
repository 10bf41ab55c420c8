"""Analyses of real profiles run apart from the test process, so its memory stays bounded.

NVIDIA's `ncu_report` keeps what it loads for every launch it touches (its native memory, about five
times the report's size: 930 MB for fixtures/real/gpt_fp32_full.ncu-rep) until the process ends, even
once the report and every handle on it are gone; reading it a second time costs as much again. One
test process that analyzed each fixture report as often as the tests asked grew to 15 GB. Here each
analysis runs in a process of its own, forked from a server that has the analysis imported already
(milliseconds a start), and only the report model (a few hundred KB) comes back.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

_POOL: ProcessPoolExecutor | None = None


def _start_where_it_still_is(prepare):
    """multiprocessing's preparation of a new process, which starts it in its parent's working directory of the
    moment it was asked for. The pool starts the next process as a task ends (max_tasks_per_child=1): for a test
    working in its tmp_path (monkeypatch.chdir), in that folder, which pytest removes as the test passes
    (tmp_path_retention_policy), often before the process started: it died in os.chdir and broke the pool for
    every test after it (51 failures in a fresh clone's run). Where that folder is gone, the process starts in the
    directory the parent started in; a task names the folder it works in itself (_main_here's cwd)."""
    def prepared(data):
        fallback = {**data, "dir": data.get("orig_dir") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        if "dir" in data and not os.path.isdir(data["dir"]):
            data = fallback
        try:
            return prepare(data)
        except FileNotFoundError:   # removed between the test and the chdir (a round-70 run: 51 failures again)
            if data is fallback or "dir" not in data:
                raise
            return prepare(fallback)   # (prepare's steps before its chdir set names and paths: the same again)
    return prepared


# (here in the tests' own module: the fork server imports it (set_forkserver_preload), so the processes it forks
# have it too)
from multiprocessing import spawn as _spawn  # noqa: E402

if not getattr(_spawn.prepare, "_starts_where_it_still_is", False):
    _spawn.prepare = _start_where_it_still_is(_spawn.prepare)
    _spawn.prepare._starts_where_it_still_is = True


def _pool() -> ProcessPoolExecutor:
    global _POOL
    if _POOL is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["nsanalyze._forkserver_guard", "nsanalyze.analyze", "nsanalyze.cli",
                                        "nsanalyze.render.html", "nsanalyze.render.markdown",
                                        "nsanalyze.render.terminal", "tests.isolated"])
        # one process per analysis: what ncu_report keeps ends with it
        _POOL = ProcessPoolExecutor(max_workers=1, mp_context=context, max_tasks_per_child=1)
    return _POOL


def close_pool() -> None:
    """The pool's threads and queues ended (after each test file): a test that signals its own process
    (Ctrl-C) meets the interpreter's main thread alone. The fork server stays for the next pool."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
        _POOL = None


atexit.register(close_pool)


def _call(function, args, kwargs):
    _die_with_the_fork_server()
    try:
        return function(*args, **kwargs)
    finally:
        log = os.environ.get("NSANALYZE_TEST_PEAKS")   # where each process's peak memory is noted (README)
        if log:
            import resource

            with open(log, "a") as handle:
                usage = resource.getrusage(resource.RUSAGE_SELF)
                handle.write(f"{usage.ru_maxrss}\t{usage.ru_utime + usage.ru_stime:.2f}\t{function.__qualname__}\t{args}\n")


def _die_with_the_fork_server() -> None:
    """An analysis process ends with the fork server it was forked from, as the server ends with the test
    process (nsanalyze._forkserver_guard): a test run killed mid-analysis left a 1.4 GB orphan behind."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


def apart(function, *args, timeout=None, **kwargs):
    """function(*args, **kwargs) in a process of its own (a module-level function; pickled arguments
    and result): the same result, the same exceptions. Past `timeout` seconds the process is killed and
    TimeoutError raised."""
    give_back_free_memory()
    with memory_gate(args):
        future = _pool().submit(_call, function, args, kwargs)
        try:
            return future.result(timeout)
        except TimeoutError:
            _kill_pool()
            raise


def _kill_pool() -> None:
    """The pool's processes killed (one that overran its time) and the pool closed."""
    if _POOL is not None:
        for process in list(getattr(_POOL, "_processes", {}).values()):
            process.kill()
    close_pool()


# An Nsight Compute report this large or larger (decompressed) takes 0.6-1.7 GB to analyze: measured peaks
# (2026-12-03) of the fixtures' largest, gpt_fp32_full 177 MB 1.45 GB, gpt_bf16_full 176 MB 1.43 GB, train_basic
# 110 MB 0.58 GB, attn_naive_full 103 MB 0.92 GB; the basic-set gpt_basic_clock_base (93 MB: many launches, few
# metrics) takes 0.25 GB and the others, 11-19 MB, under 0.6 GB. Sized by the decompressed bytes: the .xz sizes
# do not order them (gpt_basic 3.9 MB, attn_naive 2.7 MB).
HEAVY_NCU_BYTES = 100_000_000


def _heavy(value) -> bool:
    """Whether an argument names (or holds, in a list) an Nsight Compute report of HEAVY_NCU_BYTES or more."""
    if isinstance(value, (list, tuple)):
        return any(_heavy(v) for v in value)
    if not isinstance(value, (str, os.PathLike)) or ".ncu-rep" not in os.fspath(value):
        return False
    try:
        size = _xz_size(value) if os.fspath(value).endswith(".xz") else os.stat(value).st_size
    except (OSError, IndexError, ValueError):
        size = None
    return size is not None and size >= HEAVY_NCU_BYTES   # (none: a damaged file, whose analysis ends early)


def _xz_size(path) -> int | None:
    """The decompressed size of an .xz file, from its index (the xz file format, sections 2.1.2 and 4), without
    decompressing it: the sum of the index records' uncompressed sizes. None where the footer is not xz's."""
    with open(path, "rb") as handle:
        handle.seek(-12, os.SEEK_END)
        footer = handle.read(12)
        if footer[10:12] != b"YZ":
            return None
        index_size = (int.from_bytes(footer[4:8], "little") + 1) * 4   # the footer's backward size
        handle.seek(-12 - index_size, os.SEEK_END)
        index = handle.read(index_size)
    if index[:1] != b"\x00":
        return None
    position = 1

    def number() -> int:   # the format's variable-length integers: 7 bits a byte, low bits first
        nonlocal position
        value = shift = 0
        while True:
            byte = index[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    total = 0
    for _ in range(number()):
        number()            # the record's unpadded (compressed) size
        total += number()   # its uncompressed size
    return total


def _workers(args) -> int:
    """The worker processes a command line asks for (`--jobs N`), 1 if it asks for none."""
    words = [str(a) for a in args]
    if "--jobs" in words[:-1]:
        value = words[words.index("--jobs") + 1]
        return int(value) if value.isdigit() else 1
    return 1


@contextlib.contextmanager
def memory_gate(args, exclusive=None):
    """Under pytest-xdist, what one process may run beside the other workers' (a lock on a file that
    conftest.py names): the analysis of a heavy ncu report (args name one: _heavy), or a command line with
    worker processes of its own (`--jobs 2`), runs alone, holding the
    lock exclusively; any other analysis or command shares it, so the workers' light ones overlap. Two
    heavy ones side by side beside two workers would pass the suite's 3 GB; the light ones are most of the
    suite's analyses. exclusive=True: the caller runs something heavy of its own (several processes at once)."""
    path = os.environ.get("NSANALYZE_TEST_APART_LOCK")
    if not path:
        yield
        return
    with open(path, "a") as handle:
        alone = (_heavy(list(args)) or _workers(list(args)) > 1) if exclusive is None else exclusive
        asked = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        _note_wait("gate-exclusive" if alone else "gate-shared", time.monotonic() - asked, args)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _note_wait(lock: str, seconds: float, args) -> None:
    """With NSANALYZE_TEST_PEAKS set (README), how long a lock kept this process waiting, over 0.1 s."""
    log = os.environ.get("NSANALYZE_TEST_PEAKS")
    if log and seconds > 0.1:
        with open(log, "a") as handle:
            handle.write(f"{seconds:.2f}\twait\t{lock}\t{str(args)[:200]}\n")


def shared(name, compute, *args):
    """compute(*args), computed once for all the pytest-xdist workers of a run: the first worker to ask
    pickles the result to the workers' shared folder (conftest.py names it), the others read it there; a
    worker that asks while another computes waits for it. Without workers, compute(*args). Keyed by `name`,
    the arguments, and each profile argument's file identity (path, size, modification time): for results
    of the default set-up (the session's analyses), never for a test that changes the environment."""
    import hashlib
    import pickle
    from pathlib import Path

    folder = os.environ.get("NSANALYZE_TEST_SHARED")
    if not folder:
        return compute(*args)

    def identity(value):
        if isinstance(value, (str, Path)) and os.path.isfile(value):
            info = os.stat(value)
            return (os.path.realpath(value), info.st_size, info.st_mtime_ns)
        if isinstance(value, (list, tuple)):
            return tuple(identity(v) for v in value)
        if callable(value):
            return f"{value.__module__}.{value.__qualname__}"
        return repr(value)

    key = hashlib.sha256(repr((name, identity(compute), identity(args))).encode()).hexdigest()[:32]
    result = Path(folder) / f"{key}.pickle"
    with open(Path(folder) / f"{key}.lock", "a") as lock:
        asked = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        _note_wait("shared", time.monotonic() - asked, (name, *args))
        try:
            if result.exists():
                with open(result, "rb") as handle:
                    return pickle.load(handle)
            value = compute(*args)
            partial = result.with_suffix(f".{os.getpid()}.part")
            with open(partial, "wb") as handle:
                pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
            partial.rename(result)
            return value
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _main_here(args, cwd, env=None):
    """nsanalyze's main(args) run from the folder cwd (with the environment env, where given), its stdout and
    stderr captured at the file descriptors (the native library's lines included): (exit status, stdout,
    stderr)."""
    import sys
    import tempfile

    from nsanalyze.cli import main

    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    os.chdir(cwd)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read()


def main_apart(args, cwd=None, env=None, timeout=None) -> tuple[int, str, str]:
    """The command line `nsanalyze ARGS` run in a process of its own, from the folder cwd (the test's working
    directory by default), as main() would run in the test: (exit status, stdout, stderr)."""
    return apart(_main_here, [str(a) for a in args], str(cwd or os.getcwd()), env, timeout=timeout)


def run_nsanalyze(*args, timeout=180):
    """`nsanalyze ARGS` as `python -m nsanalyze ARGS` would run it from here, with this process's
    environment (subprocess.CompletedProcess; subprocess.TimeoutExpired past `timeout`), forked from the
    server that has nsanalyze imported (milliseconds, where a new interpreter takes 0.7 s to import it).
    Tests of what only a new interpreter shows (its locale, signals, the import itself) start one."""
    import subprocess

    args = [str(a) for a in args]
    try:
        code, out, err = main_apart(args, env=dict(os.environ), timeout=timeout)
    except TimeoutError:
        raise subprocess.TimeoutExpired(["nsanalyze", *args], timeout) from None
    return subprocess.CompletedProcess(["nsanalyze", *args], code, out, err)


def give_back_free_memory() -> None:
    """The test process's freed heap returned to the system while the other process works (glibc keeps
    it otherwise), so the two together stay as small as what each holds."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):   # not glibc
        pass


def analyze_apart(paths, options=None) -> dict:
    """analyze(paths, options) in a process of its own: the same model, the same exceptions."""
    from nsanalyze.analyze import analyze

    return apart(analyze, [str(p) for p in paths], options)


def ncu_facts_here(path) -> dict:
    """One read of every metric of an ncu report, for the public-report sweeps of two test files (for
    apart): each launch's duration; per launch, the computable concepts the table left empty; the
    concepts present in every launch."""
    from nsanalyze.normalize import normalize_ncu
    from nsanalyze.normalize.metric_table import computable
    from nsanalyze.read import read_profile

    report = read_profile(path)
    table = normalize_ncu(report)
    frame = table.frame   # (made anew at each use: once per column was 90% of a sweep's time)
    absent_per_launch = []
    for launch, row, undefined in zip(report.launches, frame.to_dict("records"), table.undefined):
        major = launch.metrics.get("device__attribute_compute_capability_major")
        minor = launch.metrics.get("device__attribute_compute_capability_minor")
        possible = computable(launch.metrics, (int(major), int(minor)))
        absent_per_launch.append((launch.name, {c for c in possible - undefined if row[c] != row[c]}))   # NaN
    present = {c for c in frame.columns if frame[c].notna().all()}
    return {"durations": [launch.metrics.get("gpu__time_duration.sum", 0) for launch in report.launches],
            "absent_per_launch": absent_per_launch, "present": present}


def ncu_rows_here(path) -> list[dict]:
    """The normalized rows of an ncu report read with the metrics the analysis reads (for apart)."""
    from nsanalyze.normalize import normalize_ncu
    from nsanalyze.normalize.kernels import metrics_to_read
    from nsanalyze.read import read_profile

    return normalize_ncu(read_profile(path, metrics_to_read)).rows
