"""Shared fixtures: real profiles from fixtures/, analyzed once per session."""

from __future__ import annotations

import functools
import os
import statistics
from pathlib import Path

import pytest

from tests.isolated import analyze_apart, close_pool, give_back_free_memory, shared

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
PUBLIC = FIXTURES / "public"
DEV_SUITE_NCU = FIXTURES / "dev_suite_full.ncu-rep.xz"
DEV_SUITE_V2_NCU = FIXTURES / "dev_suite_v2_full.ncu-rep.xz"
DEV_SUITE_NSYS = FIXTURES / "dev_suite_nsys.sqlite.xz"
DEV_SUITE_V2_NSYS = FIXTURES / "dev_suite_v2_nsys.sqlite.xz"
DEV_INFER_NSYS = FIXTURES / "dev_infer_nsys.sqlite.xz"
ORACLE = FIXTURES / "oracle"

PUBLIC_NCU = sorted(PUBLIC.glob("*.ncu-rep.xz"))
PUBLIC_NSYS = sorted(PUBLIC.glob("*.sqlite.xz"))


def cache_limit_gib(folder: Path) -> float:
    """A quarter of the free space where the session's cache lies, within 1.5 and 5 GiB."""
    import shutil

    return min(5.0, max(1.5, shutil.disk_usage(folder).free / 4 / 2**30))


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory):
    """Decompressed profiles go to one cache for the whole session (not the user's ~/.cache); under
    pytest-xdist, one for all the workers (their temporary folders share a parent), one lock file that
    lets a single analysis process run at a time (tests/isolated.py: why), and one folder where the
    session's analyses, made by the first worker that needs one, are read by the others (isolated.shared)."""
    # The session's cache stays within a quarter of the disk's free space, between 1.5 and 5 GiB: the fixtures
    # decompress to 4.2 GiB (3.7 GiB until round 75's blind sets; at a 4 GiB cap they then evicted each other, and
    # a fresh clone's pytest took 7 min 49 s against 6 min 18 s a commit before). With it unbounded and every test's tmp_path kept (before tmp_path_retention_policy in
    # pyproject.toml), the suite's temporary folder grew to 7.2 GB (3.5 GB of cache) and the CI run of 2026-12-05
    # filled its machine's disk. At 1.5 GiB on a disk with room, the test files' sweeps over every export (the
    # budget's, the reports') evicted each other's copies: 698 decompressions of the 280 fixtures, 111 s of a
    # run's 820 s of CPU against 41 s for each once.
    os.environ.setdefault("NSANALYZE_CACHE_MAX_GB", f"{cache_limit_gib(tmp_path_factory.getbasetemp()):.2f}")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        common = tmp_path_factory.getbasetemp().parent
        (common / "nsanalyze-cache").mkdir(exist_ok=True)
        os.environ.setdefault("NSANALYZE_CACHE", str(common / "nsanalyze-cache"))
        os.environ.setdefault("NSANALYZE_TEST_APART_LOCK", str(common / "apart.lock"))
        (common / "results").mkdir(exist_ok=True)
        os.environ.setdefault("NSANALYZE_TEST_SHARED", str(common / "results"))
    else:
        os.environ.setdefault("NSANALYZE_CACHE", str(tmp_path_factory.mktemp("nsanalyze-cache")))


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_as_in_a_terminal():
    """A pytest-xdist worker starts with SIGINT ignored (Ctrl-C goes to the controller), and nsanalyze keeps
    SIGINT ignored where it finds it so (nohup, &): the Ctrl-C tests then saw exit 0. Workers take Python's
    default handler, as the serial run has it."""
    import signal

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session", autouse=True)
def _each_ncu_report_read_once():
    """An Nsight Compute report read in the test process is read once per session and each reader gets
    its own copy: NVIDIA's ncu_report keeps what every read loads until the process ends (tests/isolated.py
    says how much), so the tenth test to read a report would otherwise hold ten copies of it. The copies
    are deep (-k narrows a report in place); the live source counters are shared, as copy.deepcopy does."""
    import copy

    import nsanalyze.read as read

    original, kept = read.read_ncu, {}

    def read_once(path, display_path=None, metrics=None):
        info = os.stat(path)
        key = (os.path.realpath(path), info.st_ino, info.st_size, info.st_mtime_ns,
               None if metrics is None else frozenset(metrics))
        if key not in kept:
            kept[key] = original(path, display_path=display_path, metrics=metrics)
        report = copy.deepcopy(kept[key])
        report.path = str(display_path or path)
        return report

    read.read_ncu = read_once
    yield
    read.read_ncu = original
    kept.clear()


@pytest.fixture(scope="session")
def dev_suite_report():
    from nsanalyze.read import read_profile

    return read_profile(DEV_SUITE_NCU)


@pytest.fixture(scope="session")
def dev_suite_model():
    return shared("analyze", analyze_apart, [DEV_SUITE_NCU])


@pytest.fixture(scope="session")
def dev_suite_table(dev_suite_report):
    from nsanalyze.normalize import normalize_ncu

    return normalize_ncu(dev_suite_report)


def findings_for(model: dict, kernel: str) -> list[dict]:
    """Findings of one kernel, in rank order."""
    return [f for f in model["findings"] if f["kernel_name"] == kernel]


@pytest.fixture(scope="session")
def dev_infer_timeline():
    from nsanalyze.normalize.timeline import build_timeline
    from nsanalyze.read import read_profile

    return build_timeline(read_profile(DEV_INFER_NSYS), mode="capture")  # compared with nsys analyze over it all


@pytest.fixture(scope="session")
def dev_suite_timeline():
    from nsanalyze.normalize.timeline import build_timeline
    from nsanalyze.read import read_profile

    return build_timeline(read_profile(DEV_SUITE_NSYS))


REAL = FIXTURES / "real"
REAL_NSYS = sorted(REAL.glob("*.sqlite.xz"))
# A twin set's second recording (`..._base2_`, `..._fix2_`) runs the program of its first again, and its fixed run is
# the same program less its mistake: the budget sweep reads a set's first base, the kernel-role sweep its first runs
# (a fix may launch other kernels), since the suite's time is bounded (round 77's second and fixed runs took 111 s of
# the budget sweep's test time); calibration (bench/calibration.py) and the twin tests that name them read the others.
SECOND_RUNS = {p for p in REAL_NSYS if "2_nsys" in p.name and p.with_name(p.name.replace("2_nsys", "1_nsys")).exists()}
FIXED_RUNS = {p for p in REAL_NSYS if "_fix" in p.name and p.with_name(p.name.replace("_fix", "_base", 1)).exists()}
FIRST_RUNS = [p for p in REAL_NSYS if p not in SECOND_RUNS and p not in FIXED_RUNS]


@pytest.fixture(scope="session")
def analyzed():
    """analyze() of one profile with default options, computed once per session in a process of its
    own (tests/isolated.py: why); the models (a few hundred KB each) are kept."""
    from functools import lru_cache

    return lru_cache(maxsize=None)(lambda path: shared("analyze", analyze_apart, [path]))


@pytest.fixture(scope="session")
def ncu_rows():
    """The normalized rows of an ncu report (read with the metrics the analysis reads), made once per
    session in a process of its own (tests/isolated.py: why); the rows are kept."""
    from functools import lru_cache

    from tests.isolated import apart, ncu_rows_here

    return lru_cache(maxsize=None)(lambda path: shared("ncu_rows", apart, ncu_rows_here, path))


@pytest.fixture(scope="session")
def ncu_facts():
    """One read of every metric of an ncu report (durations, concepts left empty or present: see
    tests/isolated.ncu_facts_here), made once per run in a process of its own and shared by the sweeps."""
    from functools import lru_cache

    from tests.isolated import apart, ncu_facts_here

    return lru_cache(maxsize=None)(lambda path: shared("ncu_facts", apart, ncu_facts_here, path))


def program_findings(model: dict) -> list[dict]:
    """The program findings (no kernel) above info, in rank order."""
    return [f for f in model["findings"] if f["kernel_id"] is None and f["severity"] != "info"]


WORK_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def union_intervals(intervals) -> list[list[int]]:
    """The union of (start, end) intervals as disjoint [start, end] pieces in order (empty ones dropped): a plain
    loop, independent of numpy, the suite's one oracle for busy time and overlaps."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    return merged


def covered_ns(intervals) -> int:
    """The length of the union of (start, end) intervals: what SQL rows of overlapping calls or GPU work cover."""
    return sum(end - start for start, end in union_intervals(intervals))


def sql(path, query: str, launched: tuple[str, ...] = ()):
    """One query straight on a fixture export (decompressed through the reader's cache): the oracle.

    launched: GPU work tables (of WORK_TABLES; those the export lacks are left out) whose rows, each with
    the runtime call that launched it, the query reads as the table `launched(start, end, correlationId,
    call_start)`, indexed by the call's start: placing GPU work in host ranges over a plain CTE compares
    every range with every launch (24 s on graphs_eager's 400 steps), over the index it takes a second.
    Results are kept for the session, by file identity and query."""
    info = os.stat(path)
    return list(_sql(os.path.realpath(path), info.st_size, info.st_mtime_ns, query, tuple(launched)))


@functools.lru_cache(maxsize=256)
def _sql(path, size, mtime_ns, query, launched):
    import sqlite3

    from nsanalyze.read.files import open_local

    _, local = open_local(path)
    with sqlite3.connect(f"file:{local}?mode=ro", uri=True) as connection:
        if launched:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            work = " UNION ALL ".join(f"SELECT start, end, correlationId FROM {t}" for t in launched if t in tables)
            connection.execute(f"""CREATE TEMP TABLE launched AS SELECT w.start, w.end, w.correlationId,
                                   r.start AS call_start FROM ({work}) w
                                   JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = w.correlationId""")
            connection.execute("CREATE INDEX temp.launched_by_call ON launched(call_start)")
        return tuple(connection.execute(query).fetchall())


# The `step N` ranges of an export: NVTX push/pop ranges (event type 59) whose name is LIKE the pattern,
# materialized so that a join with `launched` reads each range's launches off the index.
STEPS_SQL = """steps AS MATERIALIZED (
    SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
    WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE '{like}')"""

# The oracle for steps on the GPU's clock, in plain SQL: per `step N` range, the first start of the GPU
# work (kernels, copies, memsets, whole-graph executions: sql's `launched`) launched by a runtime call
# made inside it.
GPU_STEP_SQL = "WITH " + STEPS_SQL + """
SELECT steps.start, MIN(l.start) FROM steps JOIN launched l ON l.call_start >= steps.start AND l.call_start < steps.end
GROUP BY steps.start ORDER BY steps.start"""


def sql_gpu_step_firsts(path, like: str = "step %", tables: tuple[str, ...] = WORK_TABLES) -> list[int]:
    """Per step range, the first start of the GPU work launched inside it (GPU_STEP_SQL)."""
    return [first for _, first in sql(path, GPU_STEP_SQL.format(like=like), launched=tables)]


def sql_gpu_step_periods(path, like: str = "step %") -> list[int]:
    """The GPU's period between consecutive steps (first GPU work of step N+1 - that of step N), by SQL."""
    firsts = sql_gpu_step_firsts(path, like)
    return [b - a for a, b in zip(firsts, firsts[1:])]


def sql_kernels_per_step(model: dict, path) -> tuple[float, float]:
    """(kernels, their ns) a step by SQL over the steps a report counts (the `step N` NVTX ranges from its first
    steady step), each kernel counted in the range its launch call began in."""
    steps = model["timeline"]["steps"]
    ranges = sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")
    ranges = ranges[steps["first_step"]:steps["first_step"] + steps["count"]]
    (count, ns), = sql(path, f"""SELECT COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
        WHERE r.start >= {ranges[0][0]} AND r.start < {ranges[-1][1]}""")
    return count / len(ranges), ns / len(ranges)


def sql_saved_per_step(analyzed, base, fix) -> float:
    """What a fix saved a step: the mean of SQL's GPU periods over each run's steady steps (fixtures/real names)."""
    periods = [sql_gpu_step_periods(REAL / name)[analyzed(REAL / name)["timeline"]["steps"]["first_step"]:]
               for name in (base, fix)]
    return statistics.mean(periods[0]) - statistics.mean(periods[1])


@functools.lru_cache(maxsize=None)
def trace_gpu_step_firsts(path) -> tuple[int, ...]:
    """The oracle for a Kineto trace's steps on the GPU's clock, in plain JSON: per `ProfilerStep#N` host range,
    the first start (ns, the trace's clock) of the GPU work (kernels, copies, memsets) launched by a runtime or
    driver call made inside it, matched by correlation id."""
    import gzip
    import json

    with gzip.open(path) as trace:
        events = json.load(trace)["traceEvents"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith("ProfilerStep#"))
    calls = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    firsts = [None] * len(steps)
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        call = calls.get(e.get("args", {}).get("correlation"))
        for i, (start, end) in enumerate(steps):
            if call is not None and start <= call < end and (firsts[i] is None or e["ts"] < firsts[i]):
                firsts[i] = e["ts"]
    return tuple(round(first * 1000) for first in firsts if first is not None)


def trace_gpu_step_periods(path) -> list[int]:
    """The GPU's period between consecutive profiler steps of a Kineto trace (trace_gpu_step_firsts)."""
    firsts = trace_gpu_step_firsts(path)
    return [b - a for a, b in zip(firsts, firsts[1:])]


def _give_back_free_memory() -> None:
    """What a test file freed goes back to the system before the next: glibc keeps freed heap (and Arrow
    its pool) for later allocations, so the process held the high-water mark of every file before it."""
    import gc

    gc.collect()
    import sys

    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    give_back_free_memory()


@pytest.fixture(scope="module", autouse=True)
def _note_memory(request):
    """Freed memory given back after each test file; with NSANALYZE_TEST_PEAKS set, each test file's memory after it ran (README: how the figures
    there were measured): this process's resident and peak memory, in KiB."""
    yield
    close_pool()
    _give_back_free_memory()
    log = os.environ.get("NSANALYZE_TEST_PEAKS")
    if log:
        import resource

        with open("/proc/self/status") as status:
            resident = next((line.split()[1] for line in status if line.startswith("VmRSS")), "?")
        with open(log, "a") as handle:
            handle.write(f"{resident}\t{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\tmodule\t"
                         f"{request.node.nodeid}\n")


# Under pytest-xdist with --dist loadfile (make test), whole test files go to the workers as they free up;
# these files, the longest of the suite (seconds, serial, measured with --durations), go first, longest first,
# so that no worker is left alone at the end with a long file while the other has finished.
LONG_FILES = Path(__file__).with_name("long_files.tsv")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    seconds = {}
    for line in LONG_FILES.read_text().splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("\t")
            seconds[name] = float(value)

    class LongestFirst(LoadFileScheduling):
        def _assign_work_unit(self, node):
            longest = max(self.workqueue, key=lambda scope: seconds.get(scope, 0.0))
            if seconds.get(longest):
                self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
