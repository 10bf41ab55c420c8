"""host-compute on real exports: whether the host thread that launches the GPU's work computes or is blocked.

The longest idle_host stretches' OS runtime calls split by thread come from SQL over the export here (the
oracle): the threads of the GPU's process whose CUDA calls launched its kernels, the time all of them sat inside
OS calls (`blocked_ns`), and the calls of the one that sat in them least (`thread_os_calls`). Other threads
(CUDA's, NCCL's, a pool's idle workers) are in `poll` or `pthread_cond_timedwait` all along: not the GPU's wait."""

import copy
import functools

import pytest
from humanize import naturalsize

from nsanalyze.normalize.model import HostStretch, records
from nsanalyze.checks import limits_for, skipping
from nsanalyze.checks.base import budget_part
from nsanalyze.normalize.budget import PARTS
from nsanalyze.checks.program import host_compute, host_data, host_wait
from nsanalyze.checks.program._claims import claims_by_cause, unclaimed_part
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from tests.conftest import PUBLIC, REAL, covered_ns, program_findings, sql, sql_saved_per_step

CUDF = PUBLIC / "quasiben__nvtx-examples__cudf.sqlite.xz"
POWER = PUBLIC / "brycelelbach__nsightful__tests__power_iteration__baseline.sqlite.xz"


def _all_inside(per_thread, start, end):
    """Time in [start, end) in which every thread is inside one of its calls."""
    points = sorted({start, end} | {t for calls in per_thread for call in calls for t in call if start < t < end})
    total = 0
    for left, right in zip(points, points[1:]):
        if all(any(s <= left and e >= right for s, e in calls) for calls in per_thread):
            total += right - left
    return total


def with_thread_calls(path, timeline):
    """The timeline with its host stretches' OS calls split by thread, from SQL."""
    timeline = copy.copy(timeline)
    stretches = [s.to_json() for s in timeline.host_stretches]
    for stretch in stretches:
        start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
        threads = [r[0] for r in sql(path, f"""
            SELECT DISTINCT r.globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                                             AND k.globalPid / 16777216 = r.globalTid / 16777216
            WHERE r.globalTid / 16777216 IN (SELECT DISTINCT globalPid / 16777216 FROM CUPTI_ACTIVITY_KIND_KERNEL
                                             WHERE deviceId = {stretch['device_id']})""")]
        stretch["host_threads"] = len(threads)
        rows = sql(path, f"""SELECT o.globalTid, MAX(o.start, {start}), MIN(o.end, {end}), s.value FROM OSRT_API o
                             JOIN StringIds s ON s.id = o.nameId
                             WHERE o.start < {end} AND o.end > {start}
                               AND o.globalTid IN ({','.join(map(str, threads))})""")
        spans = {t: [(s, e) for tid, s, e, _ in rows if tid == t] for t in threads}
        stretch["blocked_ns"] = _all_inside(list(spans.values()), start, end)
        least = min(threads, key=lambda t: sum(e - s for s, e in spans[t]))
        calls = {}
        for tid, s, e, name in rows:
            if tid == least:
                entry = calls.setdefault(name, {"name": name, "calls": 0, "overlap_ns": 0})
                entry["calls"] += 1
                entry["overlap_ns"] += e - s
        stretch["thread_os_calls"] = sorted(calls.values(), key=lambda c: -c["overlap_ns"])
    timeline.host_stretches = records(HostStretch, stretches)
    return timeline


@pytest.fixture(scope="module")
def timelines():
    return {path.name: build_timeline(read_profile(path)) for path in
            (REAL / "loader_workers_nsys.sqlite.xz", REAL / "loader_inline_nsys.sqlite.xz", CUDF, POWER,
             REAL / "ddp_host_all_nsys.sqlite.xz")}


def run(timeline):
    """host-compute's finding with host-data skipped: these tests read how it tells the host's own code (blocked or
    computing, where it lies) on stretches that host-data, where it speaks, counts as the host's work on the data."""
    with skipping([host_data.ID]):
        return host_compute.run(timeline, limits_for(host_compute))


alone = run   # (for the tests whose parameter is named `run`)


@functools.lru_cache(maxsize=None)
def timeline_of(name: str):
    """The timeline of a fixtures/real export, built once for this module."""
    return build_timeline(read_profile(REAL / name))


def test_loader_workers_main_thread_waits_on_the_queue(timelines):
    """DataLoader with workers too slow for the GPU: the main thread waits in sem_clockwait on the loader's queue
    (by SQL, over 90% of the longest stretches). That time is a wait, host-wait's: it prices the lock-wait class's
    idle time, host-compute what is left of idle_host (under its 5%), and together they hold the idle time once,
    with what launch-overhead claims beside its part (the GPU's work under the host's other time once the
    launches are one graph: checks/program/_claims)."""
    path = REAL / "loader_workers_nsys.sqlite.xz"
    timeline = with_thread_calls(path, timelines[path.name])
    with skipping([host_data.ID]):   # (the main thread's 0.3 ms a step before each upload, host-data's, left out)
        _waits_are_host_waits(timeline)


def _waits_are_host_waits(timeline):
    measured = sum(s.blocked_ns for s in timeline.host_stretches) / sum(s.duration_ns for s in timeline.host_stretches)
    assert measured > 0.9
    wait = host_wait.run(timeline, limits_for(host_wait))
    assert wait.evidence["classes"][0]["class"] == "lock-wait"
    assert "sem_clockwait" in [c["name"] for c in wait.evidence["classes"][0]["top_calls"]]
    assert "waits, not computing" in wait.title and "num_workers" in wait.advice and "queue" in wait.advice
    idle_host = budget_part(timeline, "idle_host")[0]
    assert wait.estimated_savings_ns >= 0.9 * idle_host
    assert run(timeline) is None
    idle = [part for part in PARTS if part.startswith("idle_")]   # the waits span parts: each is left once
    beside = claims_by_cause(timeline).get("launch-overhead", {})
    assert set(beside) <= {"idle_host"}
    assert sum(unclaimed_part(timeline, part)[0] for part in idle) + wait.estimated_savings_ns + \
        sum(beside.values()) == pytest.approx(sum(budget_part(timeline, part)[0] for part in idle), rel=0.001)


@pytest.mark.parametrize("path", [REAL / "loader_inline_nsys.sqlite.xz", CUDF, POWER], ids=lambda p: p.name[:30])
def test_computing_host_thread_is_not_called_blocked(timelines, path):
    """Decoding in the loop (loader_inline), cuDF and the power iteration: the launching thread makes hardly any OS
    call in its longest stretches, though other threads of the process sit in poll or pthread_cond_timedwait all
    along (the stretches' os_calls, every thread's, show them)."""
    timeline = with_thread_calls(path, timelines[path.name])
    finding = run(timeline)
    assert finding.evidence["blocked_share"]["value"] < 0.05
    assert "runs its own code" in finding.title and "blocked" not in finding.title
    assert host_compute.ADVICE_HEAD in finding.advice   # the computing host's advice, not a blocked one's
    longest = timeline.host_stretches[0]
    own = sum(c.overlap_ns for c in longest.thread_os_calls)
    assert own < 0.05 * longest.duration_ns
    if path == CUDF:   # 212.5 ms: other threads in pthread_cond_timedwait, sem_timedwait and poll all of it
        others = {c.name: c.overlap_ns for c in timelines[path.name].host_stretches[0].os_calls}
        assert others["pthread_cond_timedwait"] == longest.duration_ns


def test_sleeping_straggler_is_named(timelines):
    """ddp_host_all: rank 1's main thread sleeps 4 ms a step (time.sleep -> clock_nanosleep) while its autograd
    thread waits on a condition: the wait is the sleep's (the table lists lock-wait after the other waits)."""
    path = REAL / "ddp_host_all_nsys.sqlite.xz"
    timeline = with_thread_calls(path, timelines[path.name])
    finding = host_wait.run(timeline, limits_for(host_wait))
    assert finding.evidence["classes"][0]["class"] == "sleep"
    assert finding.evidence["classes"][0]["top_calls"][0]["name"] == "clock_nanosleep"
    assert "sleeping in clock_nanosleep" in finding.title and "time.sleep" in finding.advice


@pytest.mark.parametrize("name", ["loader_workers_nsys.sqlite.xz", "loader_inline_nsys.sqlite.xz", CUDF.name,
                                  "ddp_host_all_nsys.sqlite.xz"], ids=lambda n: n[:30])
def test_the_timeline_splits_the_calls_by_thread(timelines, name):
    """The timeline's own host stretches carry the launching threads' calls, as SQL over the export gives them."""
    path = CUDF if name == CUDF.name else REAL / name
    mine = timelines[name].host_stretches
    oracle = with_thread_calls(path, timelines[name]).host_stretches
    assert mine and all(s.blocked_ns is not None and s.host_threads >= 1 for s in mine)
    for got, want in zip(mine, oracle):
        assert got.blocked_ns == want.blocked_ns and got.host_threads == want.host_threads
        assert [c.name for c in got.thread_os_calls] == [c.name for c in want.thread_os_calls][:3]


def test_launching_threads_are_matched_within_their_process(timelines):
    """ddp_host_all: each rank launches from its main and autograd threads; its event-querying helper
    thread shares correlation ids only with the other rank's kernels and is not a launching thread."""
    stretches = timelines["ddp_host_all_nsys.sqlite.xz"].host_stretches
    assert stretches and all(s.host_threads == 2 for s in stretches)


def test_straggler_cause_names_the_sleep(timelines):
    """rank-imbalance names the straggler's cause from its own host stretches when they are split by thread."""
    from nsanalyze.checks.program import rank_imbalance

    path = REAL / "ddp_host_all_nsys.sqlite.xz"
    finding = rank_imbalance.run(with_thread_calls(path, timelines[path.name]), limits_for(rank_imbalance))
    assert finding.device_id == 1 and "clock_nanosleep (sleeping)" in finding.title
    assert all(s["device_id"] == 1 for s in finding.evidence["straggler_host_stretches"])


def test_kineto_host_time_carries_the_profiler_caveat(analyzed):
    """The same launch-bound loop under torch.profiler (5.6 CPU ops recorded a launch) and under nsys:
    the profiler's own work lands in the gaps host-compute reads, so its finding on the trace says the
    saving is an upper bound, with the ops per launch as evidence; under nsys it does not."""
    trace = next(f for f in analyzed(REAL / "graphs_eager_kineto.json.gz")["findings"] if f["check"] == "host-compute")
    assert trace["evidence"]["cpu_ops_per_launch"]["value"] >= 4
    assert any("upper bound" in note and "profiler" in note for note in trace["notes"])
    nsys = [f for f in analyzed(REAL / "graphs_eager_nsys.sqlite.xz")["findings"] if f["check"] == "host-compute"]
    assert all("cpu_ops_per_launch" not in f["evidence"] for f in nsys)


# The waits on the step ranges' thread inside each step's host part [its range's start, the next one's), by SQL
HOST_STEP_WAITS_SQL = """
WITH steps AS (SELECT n.start, n.globalTid, LEAD(n.start) OVER (ORDER BY n.start) AS next,
                      COALESCE(n.text, s.value) AS name
                      FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
               WHERE COALESCE(n.text, s.value) LIKE 'step %' AND n.end > n.start)
SELECT steps.name, COALESCE(SUM(MIN(o.end, steps.next) - MAX(o.start, steps.start)), 0)
FROM steps LEFT JOIN OSRT_API o ON o.globalTid = steps.globalTid AND o.start < steps.next AND o.end > steps.start
     AND o.nameId IN (SELECT id FROM StringIds WHERE value IN ('pthread_cond_wait', 'pthread_cond_timedwait',
                                                                'sem_wait', 'sem_clockwait', 'sem_timedwait'))
WHERE steps.next IS NOT NULL GROUP BY steps.start ORDER BY steps.start"""


@pytest.mark.parametrize("name", ["loader_workers_nsys.sqlite.xz", "shard_prefetched_nsys.sqlite.xz"])
def test_waits_held_by_a_few_steps_name_the_steps_whose_code_waited(analyzed, name):
    """loader_workers: the loader's workers fall behind now and then; shard_prefetched joins its decoding thread
    at the top of every 10th step. A few steps hold most of the queue waits, and host-wait names them by the step
    range the waiting code ran in: by SQL, the steps whose host part holds the longest waits of the steps' thread.
    (On the GPU's clock a wait at the top of step 30 lies in step 29's period: it named 29 and 49 before.)"""
    import re

    path = REAL / name
    model = analyzed(path)
    finding = next(f for f in model["findings"] if f["check"] == "host-wait")
    found = re.search(r"in (\d+) of (\d+) steps \(([\d, ]+)", finding["title"])
    assert found, finding["title"]
    count, steps = int(found.group(1)), int(found.group(2))
    named = [int(i) for i in found.group(3).split(", ") if i]
    assert count <= 0.25 * steps and len(named) == min(count, 8)
    window = model["timeline"]["steps"]
    waits = {int(step.split()[-1]): ns for step, ns in sql(path, HOST_STEP_WAITS_SQL)}
    waits = {i: ns for i, ns in waits.items() if window["first_step"] <= i <= window["last_step"]}
    longest = sorted(waits, key=lambda i: -waits[i])
    assert set(named) <= set(longest[:2 * count])
    if name.startswith("shard"):   # its two joins (`if i % 10 == 0: worker.join()`, the steps 10 and 20 before)
        assert named == sorted(longest[:2]) == [30, 50]


NUMBA_JIT = PUBLIC / "quasiben__nvtx-examples__numba-jit.sqlite.xz"


def test_host_time_that_ends_in_loading_gpu_code_is_named_jit(analyzed):
    """Review of round four: numba-jit's window is 99% host time, and the report called it the host's own code with
    DataLoader advice. By SQL on the export: after its last copy the host makes no CUDA call but cuInit for
    145 ms, then links and loads the kernel's module (cuLinkCreate, cuLinkComplete, cuModuleLoadDataEx) and
    launches it: Numba compiled the kernel at its first call. The finding names JIT compilation / module loading
    with that host time and the loads' time, and advises caching and warming up."""
    from nsanalyze.normalize.host_activity import classify

    calls = sql(NUMBA_JIT, """SELECT r.start, r."end", s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                              JOIN StringIds s ON s.id = r.nameId ORDER BY r.start""")
    gpu = sql(NUMBA_JIT, """SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                            SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY""")
    kinds = [classify(name) for _, _, name in calls]
    first_load = kinds.index("jit")
    last_issue = max(i for i in range(first_load) if kinds[i] in ("copy", "launch", "copy-async", "memset"))
    # the host's time between its calls, from its last copy up to the first load, less the GPU's work in it
    gaps = [(calls[i][1], calls[i + 1][0]) for i in range(last_issue, first_load)]
    busy = sum(max(0, min(e, ge) - max(s, gs)) for s, e in gaps for gs, ge in gpu)
    host_ns = sum(e - s for s, e in gaps) - busy
    next_launch = kinds.index("launch", first_load)
    load_ns = sum(e - s for (s, e, _), kind in zip(calls[first_load:next_launch], kinds[first_load:next_launch])
                  if kind == "jit")
    assert host_ns > 0.9 * 146e6 and 0 < load_ns < 1e6   # 145 ms of host code, 0.66 ms of loading

    model = analyzed(NUMBA_JIT)
    finding = next(f for f in model["findings"] if f["check"] == "host-compute")
    assert finding["title"].startswith("JIT compilation / module loading")
    assert finding["evidence"]["jit_host_ns"]["value"] == pytest.approx(host_ns, rel=1e-5)
    assert f"{load_ns / 1e6:.2f} ms" in finding["title"]
    assert {c["name"] for c in finding["evidence"]["jit_calls"]} == \
        {name.split("_v")[0] for (_, _, name), kind in zip(calls[:next_launch], kinds[:next_launch]) if kind == "jit"}
    assert "cache=True" in finding["advice"] and "warm" in finding["advice"]
    assert finding["estimated_savings_ns"] <= finding["evidence"]["idle_host_ns"]["value"]


def test_the_jit_title_counts_every_load_once(analyzed):
    """nvtx-examples' CuPy script: each of its five longest host stretches is followed by a module load of its
    own (a new kernel each), where numba-jit's three stretches before its one kernel share one load. The title
    cited one cuModuleLoadData call (the first stretch's); by SQL, the loads between each stretch and the next
    call that gives the GPU work, each counted once, are the finding's."""
    path = PUBLIC / "quasiben__nvtx-examples__cupy.sqlite.xz"
    model = analyzed(path)
    finding = next(f for f in model["findings"] if f["check"] == "host-compute")
    loading = [s for s in model["timeline"]["host_stretches"] if s.get("jit_calls")]
    spans = {(s["start_ns"] + s["duration_ns"], s["next_work_ns"]) for s in loading}
    loads = sql(path, """SELECT r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                         WHERE s.value LIKE 'cuModuleLoadData%'""")
    after = {(start, end) for start, end in loads for at, until in spans if at <= start < until}
    assert len(loading) == len({until for _, until in spans}) == 5
    [cited] = finding["evidence"]["jit_calls"]
    assert cited["calls"] == len(after) == 5 and cited["total_ns"] == sum(end - start for start, end in after)
    assert f"5 cuModuleLoadData calls: {cited['total_ns'] / 1e6:.2f} ms" in finding["title"]
    numba = next(f for f in analyzed(NUMBA_JIT)["findings"] if f["check"] == "host-compute")
    assert all(c["calls"] == 1 for c in numba["evidence"]["jit_calls"])


STEP_RANGES_SQL = """SELECT n.start, n."end" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                     WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %'"""


def test_host_time_between_the_step_ranges_is_said_to_lie_there(analyzed):
    """augment_w0 (a blind twin: augmentation in the training process, DataLoader num_workers=0): the batch is
    made before each `step N` range opens, so the host's time lies between the ranges. By SQL, each of the
    finding's longest stretches starts in no step range of the export and lies in them under 1% of its length
    (it ends at the next step's first launch, 40-80 us into its range), it is longer than the median step
    range, and the title says where the time lies. Its twin with four workers has no host-compute finding at all."""
    import re

    path = REAL / "augment_w0_nsys.sqlite.xz"
    finding = next(f for f in analyzed(path)["findings"] if f["check"] == "host-compute")
    assert "outside the 'step N' ranges" in finding["title"], finding["title"]
    ranges = sql(path, STEP_RANGES_SQL)
    lengths = sorted(e - s for s, e in ranges)
    stretches = finding["evidence"]["longest_stretches"]
    assert len(stretches) == 5
    for stretch in stretches:
        start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
        assert not any(s <= start < e for s, e in ranges)
        in_steps = sum(max(0, min(e, end) - max(s, start)) for s, e in ranges)
        assert in_steps < 0.01 * stretch["duration_ns"] and stretch["in_steps_ns"] == in_steps
        assert stretch["duration_ns"] > lengths[len(lengths) // 2]
    shortest, longest = (float(x) for x in re.search(r"\(([\d.]+) to ([\d.]+) ms\) lie", finding["title"]).groups())
    assert longest == round(stretches[0]["duration_ns"] / 1e6, 1) and shortest == round(stretches[-1]["duration_ns"] / 1e6, 1)
    fixed = analyzed(REAL / "augment_w4_nsys.sqlite.xz")
    assert not [f for f in fixed["findings"] if f["check"] == "host-compute"]
    # item_sync_heavy_host's bookkeeping runs inside each step's range (before range_pop): its stretches, which
    # end in the next step's range, lie there by SQL, and the title does not send the user between the steps
    path = REAL / "item_sync_heavy_host_nsys.sqlite.xz"
    inside = analyzed(path)
    finding = next(f for f in inside["findings"] if f["check"] == "host-compute")
    ranges = sql(path, STEP_RANGES_SQL)
    for stretch in finding["evidence"]["longest_stretches"]:
        start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
        in_steps = sum(max(0, min(e, end) - max(s, start)) for s, e in ranges)
        assert in_steps > 0.9 * stretch["duration_ns"] and stretch["in_steps_ns"] == in_steps
    assert "outside the" not in finding["title"]


def test_a_stretch_in_a_range_of_its_own_leads_the_advice_to_that_range(timelines, analyzed):
    """The power iteration's longest host stretches lie in its `IO N` ranges inside the `Step N to N` steps: the advice
    starts with the range that holds the longest (26.7 ms in IO 190, of a 40.9 ms step); loader_inline's lie in its
    step ranges themselves, which name no place in the code (each ends in its batch's upload: that leads), and the Kineto trace of the EMA loop's longest, 1.4 ms
    in the optimizer's range, is 2% of its 58 ms step of short stretches; time53_gpt's longest, 2.6 ms, lies in a
    step range (the 4.3 ms in CUB's UniqueByKey range that led it was a cudaLaunchKernel: not the host's own code, see
    test_cuda_calls_inside_a_stretch_are_not_the_hosts_own_code), 12% of its 22 ms step: the advice for time spread
    over the gaps between launches (the next test), no range named."""
    power = run(with_thread_calls(POWER, timelines[POWER.name]))
    assert power.advice.startswith("Start with the code inside the NVTX range `Loop › Step 190 to 200 › IO 190`: 5 of "
                                   "the host's 5 longest stretches without GPU work ran in ranges named `IO N`, the "
                                   "longest (26.7 ms) in this one.")
    inline = REAL / "loader_inline_nsys.sqlite.xz"
    inline_advice = run(with_thread_calls(inline, timelines[inline.name])).advice   # (its batches' uploads lead)
    assert inline_advice.startswith("The host's longest stretches end in copies to the GPU") and \
        inline_advice.endswith(host_compute.ADVICE)
    traced = next(f for f in analyzed(REAL / "kin54_emaloop_base2_kineto.json.gz")["findings"]
                  if f["check"] == host_compute.ID)
    longest = traced["evidence"]["longest_stretches"][0]
    assert longest["nvtx_range"] and "Optimizer.step" in longest["nvtx_path"]
    assert longest["duration_ns"] < 0.1 * analyzed(REAL / "kin54_emaloop_base2_kineto.json.gz")["timeline"]["steps"][
        "median_ns"] and not traced["advice"].startswith("Start with")
    alone = next(f for f in analyzed(REAL / "time53_gpt_base_nsys.sqlite.xz")["findings"] if f["check"] == host_compute.ID)
    ranges = [s["nvtx_range"] for s in alone["evidence"]["longest_stretches"]]
    assert all(r.startswith("step ") for r in ranges)
    assert alone["advice"] == host_compute.SPREAD_ADVICE


def _longest_host_gap(path, window: dict) -> int:
    """The longest time in the window with no GPU work (kernels, copies) and no CUDA call in flight, by SQL: the
    longest stretch of the host's own code."""
    rows = sql(path, " UNION ALL ".join(
        f"SELECT start, end FROM {table} WHERE end > {window['start_ns']} AND start < {window['end_ns']}"
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME"))
        + " ORDER BY start")
    longest, reach = 0, None
    for start, end in rows:
        if reach is not None and start > reach:
            longest = max(longest, start - reach)
        reach = end if reach is None else max(reach, end)
    return longest


@pytest.mark.parametrize("name, spread", [("own67_prebuilt1_nsys.sqlite.xz", True),
                                          ("blind61_anomaly_base1_nsys.sqlite.xz", True),
                                          ("own67_cached1_nsys.sqlite.xz", False),
                                          ("loader_inline_nsys.sqlite.xz", False)])
def test_host_time_spread_over_the_gaps_between_launches_gets_the_advice_to_issue_fewer_operations(analyzed, name,
                                                                                                   spread):
    """own67_prebuilt1 (batches built before the loop; 108 launches a step from Python) and blind61_anomaly (anomaly
    mode's work for every autograd node) were told to move data loading into DataLoader workers: by SQL, no gap
    without GPU work or a CUDA call in their windows reaches a quarter of a median step, so the host's time is the cost of
    issuing each operation, and the advice is CUDA graphs, fewer operations and per-operation modes off.
    own67_cached1 and loader_inline build each batch on the host in the loop, then upload it: a gap of most of a
    step, the host's work on the data (host-data first, its advice on inputs built on the host)."""
    path = REAL / name
    model = analyzed(path)
    gap, step = _longest_host_gap(path, model["timeline"]["window"]), model["timeline"]["steps"]["median_ns"]
    if spread:
        finding = next(f for f in model["findings"] if f["check"] == host_compute.ID)
        assert gap < host_compute.SPREAD_SHARE * step and finding["advice"] == host_compute.SPREAD_ADVICE
    else:
        first = program_findings(model)[0]
        assert gap > 0.5 * step and first["check"] == host_data.ID
        assert "it builds each step's input on the CPU" in first["advice"] and first["advice"].endswith(host_data.ADVICE)


def _class_calls_inside(path, stretch, names) -> int:
    """SQL: the time in the stretch that CUDA calls of these names (any thread of the GPU's processes) cover."""
    start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
    rows = sql(path, f"""SELECT MAX(r.start, {start}), MIN(r.end, {end}) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                         JOIN StringIds s ON s.id = r.nameId
                         WHERE r.start < {end} AND r.end > {start}
                           AND ({' OR '.join(f"s.value LIKE '{n}%'" for n in names)})""")
    return covered_ns(rows)


def test_cuda_calls_inside_a_stretch_are_not_the_hosts_own_code(analyzed):
    """quasiben's workflow: the 34.3 ms stretch that led host-compute ('longest stretch 34.3 ms in range data
    generation') is a 30.6 ms cudaFree, which allocator-churn prices; the host's own code in it is 3.7 ms. The
    stretches are ranked by what such calls leave: the longest is 7.7 ms. time53_gpt's 4.3 ms stretch in CUB's
    UniqueByKey range was a cudaLaunchKernel (a module loaded on its first launch): no longer among the longest."""
    workflow = PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz"
    finding = next(f for f in analyzed(workflow)["findings"] if f["check"] == host_compute.ID)
    stretches = finding["evidence"]["longest_stretches"]
    held = next(s for s in stretches if s.get("cuda_classes"))
    assert held["duration_ns"] == 34277995 and [c["name"] for c in held["cuda_classes"]] == ["allocator"]
    assert held["cuda_classes"][0]["overlap_ns"] == _class_calls_inside(workflow, held, ["cudaFree", "cudaMalloc"])
    assert held["own_ns"] == pytest.approx(3675766, abs=1)
    own = [s.get("own_ns", s["duration_ns"]) for s in stretches]
    assert own == sorted(own, reverse=True) and stretches[0]["duration_ns"] == 7719417
    assert finding["title"].endswith("longest stretch 7.7 ms in range 'data generation'")
    assert any("allocator calls 30.6 ms (cudaFree, cudaMalloc), allocator-churn's time, not this finding's" in n for n in finding["notes"])
    gpt = REAL / "time53_gpt_base_nsys.sqlite.xz"
    cub = {"device_id": 0, "start_ns": 19181672250, "duration_ns": 4304167}
    assert _class_calls_inside(gpt, cub, ["cudaLaunchKernel"]) > 0.99 * cub["duration_ns"]
    listed = next(f for f in analyzed(gpt)["findings"] if f["check"] == host_compute.ID)["evidence"]["longest_stretches"]
    assert cub["start_ns"] not in [s["start_ns"] for s in listed] and listed[0]["duration_ns"] == 2640959


def test_a_long_stretch_in_no_range_is_named_by_its_share(analyzed):
    """quasiben's cudf example: one stretch of 212.5 ms, half the 425 ms window, holds 73% of host-compute's 291 ms,
    and no NVTX range lies around it (SQL: none of the export's ranges encloses it); the title said only '69% of
    the window'. cudf-groupby's longest, 8.2 ms of a 102 ms window, is under a tenth of it; its three longest, in no
    range (SQL) either, hold 63% of its 37 ms of host code: they are named together (the title named no place, a user
    read)."""
    cudf = PUBLIC / "quasiben__nvtx-examples__cudf.sqlite.xz"
    model = analyzed(cudf)
    finding = next(f for f in model["findings"] if f["check"] == host_compute.ID)
    top = finding["evidence"]["longest_stretches"][0]
    start, end = top["start_ns"], top["start_ns"] + top["duration_ns"]
    assert not sql(cudf, f"SELECT 1 FROM NVTX_EVENTS WHERE start <= {start} AND end >= {end} AND end IS NOT NULL")
    assert sql(cudf, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE end IS NOT NULL")[0][0] > 0   # ranges there are
    window = model["timeline"]["window"]["end_ns"] - model["timeline"]["window"]["start_ns"]
    assert round(top["duration_ns"] / window, 2) == 0.5
    assert finding["title"].endswith("; longest stretch 212.5 ms (50% of the window), with no NVTX range around it")
    groupby_path = PUBLIC / "quasiben__nvtx-examples__cudf-groupby.sqlite.xz"
    groupby = next(f for f in analyzed(groupby_path)["findings"] if f["check"] == host_compute.ID)
    few = groupby["evidence"]["longest_stretches"][:3]
    for stretch in few:
        start, end = stretch["start_ns"], stretch["start_ns"] + stretch["duration_ns"]
        assert not sql(groupby_path, f"SELECT 1 FROM NVTX_EVENTS WHERE start <= {start} AND end >= {end} "
                                     "AND end IS NOT NULL")
    idle = groupby["evidence"]["idle_host_ns"]["value"]
    assert 0.5 * idle <= sum(s["duration_ns"] for s in few) and max(s["duration_ns"] for s in few) < 0.1 * 102e6
    assert groupby["title"] == ("The GPU waits while the host runs its own code 36% of the window; its 3 longest "
                                "stretches 8.2, 7.7 and 7.6 ms (63% of it, 23% of the window), with no NVTX range "
                                "around them")
    from tests.conftest import DEV_SUITE_NSYS     # one stretch holds it all: said as such, not as a share twice over
    suite = next(f for f in analyzed(DEV_SUITE_NSYS)["findings"] if f["check"] == host_compute.ID)
    assert suite["evidence"]["longest_stretches"][0]["duration_ns"] >= 0.95 * suite["evidence"]["idle_host_ns"]["value"]
    assert suite["title"].endswith("14% of the window; all of it one stretch of 3.4 ms, with no NVTX range around it")
    # blind_hostmetrics_base: its longest stretch lies 99.5% inside the step ranges, past step 21's end by 6.7 us:
    # no one range encloses it, yet it is inside the steps (it read 'in no NVTX range')
    # (host-data counts those stretches as the host's work on the token metrics it read back: host-compute's own
    # title is read with it skipped)
    hostmetrics = run(timeline_of("blind_hostmetrics_base_nsys.sqlite.xz"))
    longest = hostmetrics.evidence["longest_stretches"][0]
    assert longest["nvtx_range"] is None and longest["in_steps_ns"] >= 0.99 * longest["duration_ns"]
    assert hostmetrics.title.endswith("; longest stretch 1.3 ms (10% of a median step), inside the 'step N' ranges")


def test_module_loads_at_first_launch_are_start_up_not_the_hosts_code(analyzed):
    """dev_infer's window (no steps) runs its request loop's steady part and its bf16 and batched phases for the
    first time: 28 CUDA module loads (cuLibraryLoadData, cuLibraryGetKernel) load their kernels at first launch, and
    the GPU idles 54.7 ms under them, all of it in idle_host. host-compute priced them as 'the host runs its own
    code'; the loads are start-up, paid once a process, which moving host code off the critical path does not save.
    What it prices and leaves out add up to the part, with the one pinned allocation's 2.1 ms, its class's, and the
    uploads' (pageable-memcpy's)."""
    from tests.conftest import DEV_INFER_NSYS

    model = analyzed(DEV_INFER_NSYS)
    finding = next(f for f in model["findings"] if f["check"] == host_compute.ID)
    window = model["timeline"]["window"]
    loads = covered_ns(sql(DEV_INFER_NSYS, f"""
        SELECT MAX(r.start, {window['start_ns']}), MIN(r.end, {window['end_ns']}) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE r.start < {window['end_ns']} AND r.end > {window['start_ns']}
        AND (s.value LIKE 'cuLibraryLoad%' OR s.value LIKE 'cuModuleLoad%' OR s.value IN
             ('cuLibraryGetKernel', 'cuLibraryGetModule', 'cuModuleGetFunction'))"""))
    left_out = finding["evidence"]["module_load_ns"]["value"]
    assert 0.99 * loads <= left_out <= loads
    idle_host = next(p["ns"] for p in model["timeline"]["budget"] if p["part"] == "idle_host")
    pinned = next(c for c in model["timeline"]["host_activity"]["classes"] if c["class"] == "pinned-alloc")
    (pinned_ns,), = sql(DEV_INFER_NSYS, """SELECT SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                                           JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaHostAlloc%'""")
    assert pinned["idle_by_part"]["idle_host"] == pinned_ns    # one call, the GPU idle all along
    # (and 1 us the uploads' calls hold, pageable-memcpy's)
    uploads = sum(p["ns"] for f in model["findings"] if f["check"] == "pageable-memcpy"
                  for p in f["evidence"].get("claimed_parts", ()) if p["part"] == "idle_host")
    first_runs = finding["evidence"]["first_run_ns"]["value"]   # (the next test's)
    assert finding["estimated_savings_ns"] + left_out + first_runs + pinned_ns + uploads == \
        pytest.approx(idle_host, abs=100)
    assert finding["title"].startswith("The GPU waits while the host runs its own code 19% of the window, and 18% "
                                       "under CUDA module loads at kernels' first launch and 31% in set-up before "
                                       "kernels' first runs (start-up, not saved)")


def test_host_time_before_a_kernels_first_run_is_start_up(analyzed):
    """dev_infer: host-compute led with 'longest stretch 47.3 ms in range batched' and 154 ms of savings. By SQL, each
    of its five longest stretches ends where no kernel ran before the first run in the capture of a GEMM (the batched
    phase's first fp32 M=300 forward, and autocast's first bf16 one), whose next run the GPU waited for a few µs:
    set-up for a new shape, paid once. That time is start-up, left out like the module loads; launch-overhead, the
    request loop's batch-1 launches, leads. Nothing is left out so in the whole-capture window of a script that
    runs once (quasiben's workflow), nor in a trace that began mid-run, whose optimizer kernel first runs in its
    second step after the same host code as in every later one (graphs_eager_kineto)."""
    from tests.conftest import DEV_INFER_NSYS

    model = analyzed(DEV_INFER_NSYS)
    finding = next(f for f in model["findings"] if f["check"] == host_compute.ID)
    stretches = finding["evidence"]["longest_stretches"]
    first = [s for s in stretches if s.get("first_kernel")]
    assert len(first) == 5
    for stretch in first:
        end = stretch["start_ns"] + stretch["duration_ns"]
        (name, began, earlier, wait), = sql(DEV_INFER_NSYS, f"""
            WITH next AS (SELECT k.shortName AS id, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.start >= {end}
                          ORDER BY k.start LIMIT 1),
                 again AS (SELECT MIN(k.start) AS start FROM CUPTI_ACTIVITY_KIND_KERNEL k, next
                           WHERE k.shortName = next.id AND k.start > next.start)
            SELECT s.value, next.start, (SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                         WHERE k.shortName = next.id AND k.start < next.start),
                   again.start - (SELECT MAX(k.end) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.end <= again.start)
            FROM next JOIN StringIds s ON s.id = next.id, again""")
        assert earlier == 0 and name == stretch["first_kernel"] and ("gemm" in name or "nvjet" in name)
        assert wait < 0.25 * stretch["duration_ns"]
    own = sum(s.get("own_ns", s["duration_ns"]) for s in first)
    assert finding["evidence"]["first_run_ns"]["value"] == pytest.approx(own, rel=1e-5)   # (evidence: 5 digits)
    assert "longest stretch" not in finding["title"] and "Start with" not in finding["advice"]
    assert program_findings(model)[0]["check"] == "launch-overhead"
    workflow = analyzed(PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz")
    assert workflow["timeline"]["window"]["kind"] != "steady"
    assert all("first_run_ns" not in f["evidence"] for f in workflow["findings"])
    trace = next(f for f in analyzed(REAL / "graphs_eager_kineto.json.gz")["findings"] if f["check"] == host_compute.ID)
    assert "first_run_ns" not in trace["evidence"] and \
        not any(s.get("first_kernel") for s in trace["evidence"]["longest_stretches"])


def test_the_advices_example_follows_the_programs_framework(analyzed, timelines):
    """quasiben's cudf (cuDF on a Quadro RTX 8000: no PyTorch kernel, SQL) was shown PyTorch's DataLoader as the way to
    prepare inputs ahead; it gets a producer thread. loader_inline (PyTorch) keeps the DataLoader."""
    cudf_kernels = sql(CUDF, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                                WHERE s.value LIKE '%at::native%' OR s.value LIKE '%at::%'""")[0][0]
    assert cudf_kernels == 0
    cudf = next(f for f in analyzed(CUDF)["findings"] if f["check"] == host_compute.ID)
    assert "DataLoader(ds" not in cudf["advice"] and "ThreadPoolExecutor" in cudf["advice"]
    torch = run(timelines["loader_inline_nsys.sqlite.xz"])   # (host-data, which speaks there first, skipped)
    assert "DataLoader(ds" in torch.advice and "ThreadPoolExecutor" not in torch.advice


def test_host_work_after_the_steps_reads_leads_the_advice(analyzed):
    """blind_hostmetrics: every step reads its token metrics back (`.tolist()`: a copy to the host and its sync) and
    loops over them in Python. The advice said the host's time was spread over the launches, not one piece of work (a
    user read): most of it follows the reads. By SQL, the time from each cudaStreamSynchronize's end (the copy's wait)
    to the next kernel launch holds over half of the finding's idle time, and the advice now starts there; blind61's
    anomaly mode, whose 336 reads a step are each followed by its per-operation cost (tens of us), keeps the spread
    advice, and so does time53_gpt, whose waits are its timing's event syncs, no values read back."""
    path = REAL / "blind_hostmetrics_base_nsys.sqlite.xz"
    model = analyzed(path)
    finding = run(timeline_of(path.name)).to_json()   # (host-data, which counts that work where it speaks, skipped)
    start, end = model["timeline"]["window"]["start_ns"], model["timeline"]["window"]["end_ns"]
    (gap,), = sql(path, f"""WITH calls AS (SELECT r.start, r.end, s.value AS name FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                               JOIN StringIds s ON s.id = r.nameId WHERE r.start >= {start} AND r.start < {end}),
                           launches AS (SELECT start FROM calls WHERE name LIKE 'cudaLaunchKernel%'
                                        OR name LIKE 'cuLaunchKernel%')
                           SELECT SUM((SELECT MIN(l.start) FROM launches l WHERE l.start >= c.end) - c.end)
                           FROM calls c WHERE c.name LIKE 'cudaStreamSynchronize%'""")
    assert gap > 0.5 * finding["evidence"]["idle_host_ns"]["value"]
    assert finding["advice"].startswith("The host's time follows the steps' reads from the GPU (`cudaMemcpyAsync` to "
                                        "the host, which waits for it)")
    assert "spread over the short gaps" not in finding["advice"]
    anomaly = next(f for f in program_findings(analyzed(REAL / "blind61_anomaly_base1_nsys.sqlite.xz"))
                   if f["check"] == "host-compute")
    assert anomaly["advice"].startswith("Issue fewer operations")
    timed = next(f for f in program_findings(analyzed(REAL / "time53_gpt_base_nsys.sqlite.xz"))
                 if f["check"] == "host-compute")
    assert timed["advice"].startswith("Issue fewer operations")


def test_a_table_kept_on_the_cpu_is_the_work_after_the_reads(analyzed):
    """blind71_cpuemb (chosen blind): a recommender's embedding tables on the CPU, their rows copied up and their
    gradients read back each step (SQL: 2 copies to the host a step) for the CPU's SparseAdam. host-data is the first
    finding, its work after the reads said first; host-compute's advice (host-data skipped) starts with the host's
    work after those reads, naming state kept on the CPU."""
    path = REAL / "blind71_cpuemb_base1_nsys.sqlite.xz"
    model = analyzed(path)
    steps = model["timeline"]["steps"]
    window = model["timeline"]["window"]
    (reads,), = sql(path, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e
                               ON e.id = m.copyKind WHERE e.label = 'Device-to-Host'
                               AND m.start >= {window['start_ns']} AND m.start < {window['end_ns']}""")
    assert reads == pytest.approx(2 * steps["count"], abs=2)
    first = program_findings(model)[0]
    assert first["check"] == "host-data" and "2 reads back of 64 KiB or more a step (16.8 MB) followed by" in first["title"]
    assert first["advice"].startswith("Most of the host's work follows the reads back")
    own = run(timeline_of(path.name))
    assert own.advice.startswith("The host's time follows the steps' reads from the GPU")
    assert "embedding tables or an optimizer on the CPU" in own.advice.split("\n\n")[0]


@pytest.mark.parametrize("run", [1, 2])
def test_irregular_slow_steps_of_the_same_host_work_are_host_computes(analyzed, run):
    """blind71_cpuemb: 18 of 89 steps take about 89 ms against a 32 ms median, at no period, their excess the GPU
    idle on host code, in steps that are idle on host code most of their time: the CPU's embedding work, longer now
    and then. slow-steps counted that excess apart (10.1 ms a step beside host-compute's 21.6 ms), and the fix, the
    tables on the GPU, took both away. The host's work on the tables' rows and gradients counts it now (host-data,
    since round 76; host-compute before), and prices what the fix saved (the twins' mean GPU periods by SQL) within
    20% (+8%, +15%)."""
    base, fix = f"blind71_cpuemb_base{run}_nsys.sqlite.xz", f"blind71_cpuemb_fix{run}_nsys.sqlite.xz"
    model = analyzed(REAL / base)
    checks = [f["check"] for f in program_findings(model)]
    assert checks[0] == "host-data" and "slow-steps" not in checks
    saved = program_findings(model)[0]["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert saved == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.2)


def test_a_loop_without_a_backward_pass_is_not_told_of_data_loaders(analyzed):
    """kv57: a decode loop (no kernel of autograd's backward by name: SQL) was told to build its batches in DataLoader
    workers (a user read). A PyTorch loop with neither an optimizer's nor autograd's backward kernels gets the
    advice for inference and generation; training loops keep the training advice: blind70_reviews (its backward
    kernels; its time at the step's end, so that advice without the input's) and blind71_cpuemb's fix, whose backward kernels carry no such name but whose Adam's foreach do."""
    path = REAL / "kv57_base1_nsys.sqlite.xz"
    (backward,), = sql(path, "SELECT COUNT(*) FROM StringIds WHERE value LIKE '%backward%' COLLATE NOCASE")
    assert backward == 0
    finding = next(f for f in program_findings(analyzed(path)) if f["check"] == "host-compute")
    assert finding["advice"].startswith("Take the host work off the critical path: these steps run no backward pass")
    assert "DataLoader" not in finding["advice"]
    training = next(f for f in program_findings(analyzed(REAL / "blind70_reviews_base1_nsys.sqlite.xz"))
                    if f["check"] == "host-compute")
    # (its time lies at the step's end, gc.collect(): the step-end advice, a training loop's, without the input's)
    assert "no backward pass" not in training["advice"] and "Take the work at the step's end" in training["advice"]
    assert "DataLoader" not in training["advice"]
    unnamed = next(f for f in program_findings(analyzed(REAL / "blind71_cpuemb_fix1_nsys.sqlite.xz"))
                   if f["check"] == "host-compute")
    assert "DataLoader" in unnamed["advice"] and "no backward pass" not in unnamed["advice"]
    graphed = next(f for f in analyzed(REAL / "graph51_hostmetrics_graph1_nsys.sqlite.xz")["findings"]
                   if f["check"] == "host-compute")   # a training step as one graph, its kernels hidden by the trace
    assert "no backward pass" not in graphed["advice"]


@pytest.mark.parametrize("run", [1, 2])
def test_outputs_read_back_whole_lead_before_the_steps_end(analyzed, run):
    """blind72_segeval (chosen blind): an evaluation loop copies each batch's logits to the host for NumPy's argmax
    (SQL: one copy to the host a step, 84 MiB each, its time below). The host's work after it lies at the step's
    end, and the advice led with the step's end "after the optimizer step" of a loop without one; it now starts
    with the reads, their size, to reduce the outputs on the GPU first, and the copies' own time a step, which this
    finding leaves to pageable-memcpy. blind70_reviews (gc.collect() after a scalar read at each step's end) keeps
    the step's end."""
    from nsanalyze.render.format import duration

    path = REAL / f"blind72_segeval_base{run}_nsys.sqlite.xz"
    model = analyzed(path)
    steps, window = model["timeline"]["steps"], model["timeline"]["window"]
    (copies, size, ns), = sql(path, f"""SELECT COUNT(*), SUM(m.bytes), SUM(m.end - m.start)
        FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind
        WHERE e.label = 'Device-to-Host' AND m.start >= {window['start_ns']} AND m.start < {window['end_ns']}""")
    assert copies == pytest.approx(steps["count"], abs=1) and size / copies == 84 * 2 ** 20
    first = program_findings(model)[0]   # the host's work on the logits read back: host-data's
    read_size = naturalsize(size / copies)   # bytes in decimal units, as every figure of the report (88.1 MB)
    assert first["check"] == "host-data" and f"1 read back of 64 KiB or more a step ({read_size}) followed by" in first["title"]
    assert first["advice"].startswith("Most of the host's work follows the reads back")
    own = alone(timeline_of(path.name)).to_json()   # host-compute's own lead, host-data skipped
    lead = own["advice"].split("\n\n")[0]
    assert lead.startswith("The host's time follows the steps' reads from the GPU") and f"{read_size} a copy" in lead
    assert "`out.argmax(1).cpu()`" in lead and f"the copies, {duration(ns / steps['count'])} a step" in lead
    assert "optimizer step" not in own["advice"]
    reviews = program_findings(analyzed(REAL / "blind70_reviews_base1_nsys.sqlite.xz"))[0]
    assert reviews["check"] == "host-compute" and reviews["advice"].startswith("The host's time lies at the end")


def test_a_launch_bound_loop_that_trains_nothing_is_asked_about_autograd_first(analyzed):
    """blind73_lmgen (chosen blind): GPT-2 generation under `model.eval()` without `torch.no_grad()`: the same 2,624
    launches a step as its fix (SQL), 59 us of host time a launch against 43 (the GPU periods over the launches),
    36.5 and 73.0 ms a step saved by turning autograd off. Nothing in an export says autograd was on: launch-overhead,
    first, asks for it before its graph advice in a PyTorch loop with no backward or optimizer kernels; a training
    loop's launch-overhead (graphs_eager) does not."""
    base, fix = (REAL / f"blind73_lmgen_{run}1_nsys.sqlite.xz" for run in ("base", "fix"))
    launches = []
    for path in (base, fix):
        model = analyzed(path)
        window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
        (count,), = sql(path, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL
                                   WHERE start >= {window['start_ns']} AND start < {window['end_ns']}""")
        launches.append(count / steps)
    assert launches[0] == pytest.approx(launches[1], rel=0.01)
    assert sql_saved_per_step(analyzed, base.name, fix.name) > 30e6
    first = program_findings(analyzed(base))[0]
    assert first["check"] == "launch-overhead"
    assert first["advice"].startswith("These steps run no backward pass") and "`torch.inference_mode()`" in \
        first["advice"].split("\n\n")[0]
    # its saving is the graph's, well over what autograd off saved: the paragraph says so (a user read: 124 ms a step
    # shown against the autograd advice, which saved 36.5)
    base_steps = analyzed(base)["timeline"]["steps"]["count"]
    assert first["estimated_savings_ns"] / base_steps > 2 * sql_saved_per_step(analyzed, base.name, fix.name)
    assert "This finding's saving is a CUDA graph's of the step; autograd off saves part of it" in \
        first["advice"].split("\n\n")[0]
    training = next(f for f in analyzed(REAL / "graphs_eager_nsys.sqlite.xz")["findings"]
                    if f["check"] == "launch-overhead")
    assert "no backward pass" not in training["advice"]


@pytest.mark.parametrize("run", [1, 2])
def test_inputs_built_on_the_host_lead_where_the_stretches_end_in_uploads(analyzed, run):
    """blind74_replaybuf (chosen blind): a DQN update whose replay buffer lives in NumPy, each step's batch gathered
    on the host and copied to the GPU from pageable memory (the fix, the buffer on the GPU, saved 7.5-7.8 ms of a
    11.3-11.9 ms step). Each of the longest stretches in which the GPU waits on the host ends in the host's next
    CUDA work, a copy to the GPU of the frames it gathered (SQL: the first copy call after each stretch, and its
    bytes). The advice said the host's time was spread over the launches; it now starts with the inputs the host
    builds. blind70_reviews (gc.collect() at each step's end, then the next batch's upload) keeps the step's end."""
    path = REAL / f"blind74_replaybuf_base{run}_nsys.sqlite.xz"
    model = analyzed(path)
    stretches = model["timeline"]["host_stretches"][:5]
    for stretch in stretches:
        end = stretch["start_ns"] + stretch["duration_ns"]
        (size,), = sql(path, f"""SELECT m.bytes FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN StringIds s ON s.id = r.nameId JOIN CUPTI_ACTIVITY_KIND_MEMCPY m ON m.correlationId = r.correlationId
            JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind
            WHERE r.start >= {end} AND s.value LIKE 'cudaMemcpy%' AND e.label = 'Host-to-Device'
            ORDER BY r.start LIMIT 1""")
        (between,), = sql(path, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
            WHERE r.start >= {end} AND r.start < (SELECT MIN(r2.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r2
                JOIN StringIds s2 ON s2.id = r2.nameId WHERE r2.start >= {end} AND s2.value LIKE 'cudaMemcpy%')
            AND (s.value LIKE 'cudaLaunch%' OR s.value LIKE 'cudaMemset%')""")
        assert between == 0 and stretch["upload_after_bytes"] == size == 512 * 4 * 84 * 84
    first = program_findings(model)[0]   # the inputs built on the host: host-data's first, its lead on the uploads
    assert first["check"] == "host-data" and first["advice"].startswith("Most of the host's work comes before the uploads")
    finding = alone(timeline_of(path.name)).to_json()   # host-compute's own lead, host-data skipped
    assert finding["advice"].startswith("The host's longest stretches end in copies to the GPU (5 of the 5 longest, "
                                        f"{naturalsize(512 * 4 * 84 * 84)} a copy on average)")
    assert "Issue fewer operations" not in finding["advice"]
    reviews = program_findings(analyzed(REAL / "blind70_reviews_base2_nsys.sqlite.xz"))[0]
    assert reviews["check"] == "host-compute" and reviews["advice"].startswith("The host's time lies at the end")
