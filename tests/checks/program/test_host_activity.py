"""Host activity by class (normalize.host_activity) and the findings it prices, on real twin runs
(fixtures/real/record_round5.sh, H200, PyTorch 2.11): each anti-pattern against its fix.

The savings a finding promises are checked against what the fix saved: the mean step period on the GPU's
clock of the twin runs, by SQL (tests.conftest.sql_gpu_step_periods), within 30%."""

import re

import numpy as np
import pytest

from nsanalyze.normalize.host_activity import classify
from tests.conftest import (REAL, STEPS_SQL, WORK_TABLES, program_findings, sql, sql_gpu_step_periods,
                            sql_saved_per_step, union_intervals)

CHURN, CACHED = REAL / "alloc_churn_nsys.sqlite.xz", REAL / "alloc_cached_nsys.sqlite.xz"
HISTLOG, HISTLOG_OFF = REAL / "histlog_every10_nsys.sqlite.xz", REAL / "histlog_off_nsys.sqlite.xz"
NESTED, NESTED_OFF = REAL / "nested_phases_nsys.sqlite.xz", REAL / "nested_phases_nockpt_nsys.sqlite.xz"

CALLS_IN = """SELECT COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
              WHERE (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%') AND r.start >= {start} AND r.end <= {end}"""


RUN_SQL = "WITH " + STEPS_SQL + """
SELECT steps.start, MIN(l.start), MAX(l.end) FROM steps JOIN launched l ON l.call_start >= steps.start
AND l.call_start < steps.end GROUP BY steps.start ORDER BY steps.start"""


def run_rows(path, like: str) -> list[tuple]:
    """(host start, first GPU work start, last GPU work end) per step range, by SQL over the GPU work tables
    the export has (kernels, copies, memsets)."""
    return sql(path, RUN_SQL.format(like=like), launched=WORK_TABLES[:3])


def mean_step(path, like: str) -> float:
    """The run's mean step on the GPU's clock by SQL, after the first (warm-up) step: from the first GPU
    work of the second step to the end of the last step's GPU work, over the steps."""
    rows = run_rows(path, like)[1:]
    return (rows[-1][2] - rows[0][1]) / len(rows)


def mean_step_saved(base, fixed, like: str = "step %") -> float:
    """What the fix saved a step: the difference of the twins' mean steps."""
    return mean_step(base, like) - mean_step(fixed, like)


def test_the_table_classes_calls_by_name_and_names_the_unknown_as_itself():
    assert classify("cudaFree_v2") == classify("cuMemFree_v2") == "allocator"
    assert classify("cudaMallocHost_v3020") == classify("cudaFreeHost") == "pinned-alloc"
    assert classify("cudaLaunchKernel_v7000") == classify("cuLaunchKernelEx") == "launch"
    assert classify("cudaMemcpyAsync_ptsz_v7000") == "copy-async"
    assert classify("cudaStreamSynchronize_v3020") == "sync"
    assert classify("writev", "os") == "file-io" and classify("sem_timedwait", "os") == "lock-wait"
    assert classify("cudaSomethingNew_v13000") == "cudaSomethingNew"   # never folded into launch


def test_allocator_churn_comes_first_and_predicts_what_keeping_the_cache_saved(analyzed):
    """empty_cache() after every step: the launch-bound reading of before is gone; the finding names the
    allocator, counts its calls in the window as SQL does, and its saving a step is what the twin without
    the call saved, within 30%."""
    model = analyzed(CHURN)
    first = program_findings(model)[0]
    assert first["check"] == "allocator-churn"
    window = model["timeline"]["window"]
    calls, _ = sql(CHURN, CALLS_IN.format(start=window["start_ns"], end=window["end_ns"]))[0]
    allocator = next(c for c in model["timeline"]["host_activity"]["classes"] if c["class"] == "allocator")
    assert allocator["calls"] == pytest.approx(calls, abs=max(2, 0.02 * calls))   # calls at the window's edges
    assert first["evidence"]["steps_with_calls"]["value"] == model["timeline"]["steps"]["count"]
    per_step = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    saved = mean_step_saved(CHURN, CACHED)
    assert saved > 5e6
    assert per_step == pytest.approx(saved, rel=0.30)
    launch = [f for f in program_findings(model) if f["check"] == "launch-overhead"]
    assert not launch or launch[0]["estimated_savings_ns"] < first["estimated_savings_ns"] / 2


def test_the_cached_twin_has_no_allocator_finding(analyzed):
    model = analyzed(CACHED)
    window = model["timeline"]["window"]
    calls, _ = sql(CACHED, CALLS_IN.format(start=window["start_ns"], end=window["end_ns"]))[0]
    assert calls < 10
    assert "allocator-churn" not in {f["check"] for f in program_findings(model)}


def test_the_kineto_trace_of_the_same_loop_says_the_same(analyzed):
    """The trace's ProfilerStep ranges each hold 112 cudaMalloc and cudaFree events (read from its JSON here). The
    window on the GPU's clock ends with the last step's GPU work, before that step's empty_cache: 616 calls in it,
    which read as a miscount beside six steps (a user read); the title gives the calls a step too."""
    import gzip
    import json

    trace = json.load(gzip.open(REAL / "alloc_churn_kineto.json.gz"))["traceEvents"]
    steps = [e for e in trace if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    calls = [e["ts"] for e in trace if e.get("cat") == "cuda_runtime" and e.get("name") in ("cudaMalloc", "cudaFree")]
    per_step = {sum(s["ts"] <= ts < s["ts"] + s["dur"] for ts in calls) for s in steps}
    first = program_findings(analyzed(REAL / "alloc_churn_kineto.json.gz"))[0]
    assert first["check"] == "allocator-churn"
    assert per_step == {112}
    assert "cudaFree/cudaMalloc calls (a median 112 a step), in 6 of 6 steady steps" in first["title"]
    assert "allocator-churn" not in {f["check"] for f in program_findings(analyzed(REAL / "alloc_cached_kineto.json.gz"))}


def test_every_tenth_step_that_logs_histograms_is_named_and_priced_as_the_run_costs(analyzed):
    """3 of 30 steps take seconds: the finding names them (every 10th), and its saving is the mean step
    the twin without logging saved (by SQL), within 30%; the header's mean step is the SQL mean."""
    model = analyzed(HISTLOG)
    first = program_findings(model)[0]
    assert first["check"] == "slow-steps"
    periods = sql_gpu_step_periods(HISTLOG)
    typical = np.median(periods[1:])
    slow_by_sql = [i for i, p in enumerate(periods) if i > 0 and p > 1.5 * typical]   # step 0 is warm-up
    assert len(slow_by_sql) >= 2
    # SQL has no period for the last step (no next step begins): the model's slow steps begin with SQL's
    assert first["evidence"]["slow_steps"][:len(slow_by_sql)] == slow_by_sql
    assert first["evidence"]["every_nth"] == 10
    steps = model["timeline"]["steps"]
    per_step = first["estimated_savings_ns"] / steps["count"]
    assert per_step == pytest.approx(mean_step_saved(HISTLOG, HISTLOG_OFF), rel=0.30)
    assert steps["mean_ns"] == pytest.approx(mean_step(HISTLOG, "step %"), rel=0.02)
    assert "slow-steps" not in {f["check"] for f in program_findings(analyzed(HISTLOG_OFF))}


NVTX_COUNT = """SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE '{pattern}'"""


def test_a_checkpoint_nested_in_epochs_is_found_and_named(analyzed):
    """`epoch N` ranges hold train steps, eval steps and a checkpoint: the phase tree has them under the
    epochs with SQL's counts; non-step-phase speaks of the checkpoint (the deepest phase that holds the
    time) and saves what the twin without checkpoints saved, within 30%; idle stretches show the path."""
    model = analyzed(NESTED)
    phases = {p["name"]: p for p in model["timeline"]["phases"]}
    epoch = phases["epoch N"]
    children = {c["name"]: c for c in epoch["children"]}
    assert epoch["count"] == sql(NESTED, NVTX_COUNT.format(pattern="epoch %"))[0][0]
    assert children["checkpoint"]["count"] == sql(NESTED, NVTX_COUNT.format(pattern="checkpoint"))[0][0]
    assert children["train_step N"]["count"] == sql(NESTED, NVTX_COUNT.format(pattern="train_step %"))[0][0]
    assert children["checkpoint"]["path"] == "epoch N › checkpoint"
    first = program_findings(model)[0]
    assert first["check"] == "non-step-phase" and first["evidence"]["phase"] == "checkpoint"
    per_step = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert per_step == pytest.approx(mean_step_saved(NESTED, NESTED_OFF, 'train_step %'), rel=0.30)
    assert any("› checkpoint" in (s.get("nvtx_path") or "") for s in model["timeline"]["host_stretches"])
    assert "non-step-phase" not in {f["check"] for f in program_findings(analyzed(NESTED_OFF))}


FIRST_CALL = "SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
MODULE_LOADS = """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                  WHERE (s.value LIKE 'cuLibraryLoad%' OR s.value LIKE 'cuModuleLoad%' OR s.value IN
                         ('cuLibraryGetKernel', 'cuLibraryGetModule', 'cuModuleGetFunction'))
                    AND s.value NOT LIKE 'cuModuleLoadData%'   -- an in-memory image: the class jit
                    AND r.start >= {start} AND r.start < {end}"""   # the table's module-load names


def test_what_the_window_leaves_out_is_measured_and_named(analyzed):
    """The nested-phases run starts 6.1 s before its first steady step (half the run): the report says so,
    from the first CUDA call (SQL) to the window, with the module loads in it counted as SQL counts them."""
    model = analyzed(NESTED)
    left = model["timeline"]["left_out"]
    (first,), = sql(NESTED, FIRST_CALL)
    assert left["start_ns"] == first and left["end_ns"] == model["timeline"]["window"]["start_ns"]
    loads = next(c for c in left["classes"] if c["class"] == "module-load")
    assert loads["calls"] == sql(NESTED, MODULE_LOADS.format(start=left["start_ns"], end=left["end_ns"]))[0][0]
    assert left["capture_share"] > 0.5 and left["warmup_steps"] == 1
    finding = next(f for f in model["findings"] if f["check"] == "start-up")
    assert finding["severity"] == "info" and finding["estimated_savings_ns"] == 0
    assert f"{left['ns'] / 1e9:.2f} s" in finding["title"] and "CUDA module loading" in finding["title"]


SHARDS, SHARDS_PREFETCHED = REAL / "shard_shards_nsys.sqlite.xz", REAL / "shard_prefetched_nsys.sqlite.xz"


def test_a_stall_before_a_steps_first_gpu_work_is_that_steps(analyzed):
    """Every 10th step decodes a new shard on the host (~0.12 s) before it launches any GPU work. On the
    GPU's clock that wait lies in the period of the step before, but it is the later step's: by SQL, the
    steps whose host began them while the GPU, done with the previous step's work, waited longest are 10,
    20, ..., and the finding names those (it named 9, 19, ... before). Its saving is the mean step the twin
    that decodes a shard ahead in a thread saved, within 25%, and the host-range line says where the wait
    counts on the GPU's clock."""
    model = analyzed(SHARDS)
    first = program_findings(model)[0]
    rows = run_rows(SHARDS, "step %")   # (host start, first GPU start, last GPU end) per step
    stalls = [first_gpu - max(host, previous_end) for (host, first_gpu, _), (_, _, previous_end) in zip(rows[1:], rows)]
    typical = float(np.median(stalls))
    stalled = [i + 1 for i, stall in enumerate(stalls) if stall > 10 * max(typical, 1e5)]
    assert stalled == [10, 20, 30, 40, 50]
    assert first["check"] == "slow-steps" and first["evidence"]["slow_steps"] == stalled
    assert first["evidence"]["every_nth"] == 10
    per_step = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert per_step == pytest.approx(mean_step_saved(SHARDS, SHARDS_PREFETCHED), rel=0.25)
    assert "before its first GPU work count in step 9's period" in model["timeline"]["steps"]["host_relation_text"]
    assert "slow-steps" not in {f["check"] for f in program_findings(analyzed(SHARDS_PREFETCHED))}


PINNED_CHURN, PINNED_ONCE = REAL / "pinned_churn_nsys.sqlite.xz", REAL / "pinned_once_nsys.sqlite.xz"


def test_pinning_a_buffer_every_step_is_priced_as_the_twin_that_pins_once_saved(analyzed):
    """pinned_churn.cu stages each step's 64 MB through a buffer it cudaHostAlloc's and cudaFreeHost's every step
    (by SQL, 78 such calls, ~25 ms of host time a step); its twin pins once. pinned-alloc-churn leads, and its
    saving a step is the mean step the twin saved (SQL), within 10%; the twin has no such finding."""
    model = analyzed(PINNED_CHURN)
    first = program_findings(model)[0]
    calls, host_ns = sql(PINNED_CHURN, """SELECT COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                                          JOIN StringIds s ON s.id = r.nameId
                                          WHERE s.value LIKE 'cudaHostAlloc%' OR s.value LIKE 'cudaFreeHost%'""")[0]
    assert first["check"] == "pinned-alloc-churn"
    assert first["evidence"]["pinned_alloc_calls"]["value"] <= calls and first["evidence"]["pinned_alloc_host_ns"]["value"] <= host_ns
    per_step = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert per_step == pytest.approx(mean_step_saved(PINNED_CHURN, PINNED_ONCE), rel=0.10)
    assert "pinned-alloc-churn" not in {f["check"] for f in analyzed(PINNED_ONCE)["findings"]}


def test_a_stretch_is_named_by_the_range_that_holds_nearly_all_of_it(analyzed):
    """power_iteration (public, CuPy on a T4): the longest idle stretch, 26.7 ms, starts 10 us before its step's `IO N`
    range (file output) and ends 0.1 ms after it: only the step range encloses it, but `IO N` holds 99.6% of it
    (SQL) and is its cause, so it ends the stretch's path and the first finding's title (host-data's: the host reads
    the vector back, then writes it out in that range)."""
    from tests.conftest import PUBLIC

    path = PUBLIC / "brycelelbach__nsightful__tests__power_iteration__baseline.sqlite.xz"
    model = analyzed(path)
    longest = model["timeline"]["host_stretches"][0]
    start, end = longest["start_ns"], longest["start_ns"] + longest["duration_ns"]
    (name, inside), = sql(path, f"""SELECT COALESCE(n.text, s.value), MIN(n.end, {end}) - MAX(n.start, {start})
        FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId WHERE n.start < {end} AND n.end > {start}
        AND COALESCE(n.text, s.value) LIKE 'IO %'""")
    assert inside > 0.99 * longest["duration_ns"]
    assert longest["nvtx_path"].endswith(f"› {name}") and longest["nvtx_range"] == name
    assert f"› {name}'" in program_findings(model)[0]["title"]


def test_a_stretch_is_named_by_the_innermost_range_that_holds_nearly_all_of_it(analyzed):
    """own67_churn1 (round 67's twin: a batch built in NumPy inside `make_batch` each step, empty_cache() at the step's
    end): the longest stretch starts 19 us before 'step 28', so no range encloses it; 'step 28' holds nearly all of it
    and so does 'make_batch' inside it (SQL), which says what ran. The path names both, the innermost last (it named
    'step 28' alone), and the fix (batches built before the loop) saved 40.3 ms a step of the 38.3 ms host-data
    prices (the batch's upload, its wait and the host's work before it gone)."""
    path = REAL / "own67_churn1_nsys.sqlite.xz"
    model = analyzed(path)
    longest = model["timeline"]["host_stretches"][0]
    start, end = longest["start_ns"], longest["start_ns"] + longest["duration_ns"]
    held = sql(path, f"""SELECT n.text, n.start, MIN(n.end, {end}) - MAX(n.start, {start}) FROM NVTX_EVENTS n
                         WHERE n.start < {end} AND n.end > {start} ORDER BY n.end - n.start DESC""")
    holding = [(name, first) for name, first, inside in held if inside >= 0.9 * longest["duration_ns"]]
    assert [name for name, _ in holding] == [f"step {holding[0][0].split()[-1]}", "make_batch"]
    assert all(first > start for _, first in holding)   # neither encloses it
    assert longest["nvtx_path"] == " › ".join(name for name, _ in holding) and longest["nvtx_range"] == "make_batch"
    first = program_findings(model)[0]
    assert first["check"] == "host-data" and f"'{longest['nvtx_path']}'" in first["title"]
    saved = sql_saved_per_step(analyzed, "own67_churn1_nsys.sqlite.xz", "own67_prebuilt1_nsys.sqlite.xz")
    assert first["estimated_savings_ns"] / model["timeline"]["steps"]["count"] == pytest.approx(saved, rel=0.10)


def test_without_steps_a_class_claims_the_idle_time_under_its_own_calls(analyzed):
    """nvtx-examples' workflow (CuPy on a Quadro RTX 8000, no step-like ranges): 210 cudaMalloc/cudaFree calls, one
    cudaFree of 30.6 ms while the GPU waits. allocator-churn claimed the window's whole idle time (66.6 ms: host code
    before the call, launches elsewhere) against a budget that put 15% of the window on CUDA calls. It claims the GPU's
    idle time while its calls ran, measured here from SQL: the union of the allocator calls less the GPU's work."""
    from nsanalyze.render.format import budget_labels
    from tests.conftest import PUBLIC

    path = PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    start, end = window["start_ns"], window["end_ns"]
    calls = sql(path, "SELECT r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                      f"WHERE (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%') AND r.end > {start} "
                      f"AND r.start < {end}")
    work = sql(path, " UNION ALL ".join(f"SELECT start, end FROM {t} WHERE end > {start} AND start < {end}"
                                        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                                  "CUPTI_ACTIVITY_KIND_MEMSET")
                                        if sql(path, f"SELECT 1 FROM sqlite_master WHERE name = '{t}'")))

    def union(intervals):   # clipped to the window
        return union_intervals((max(a, start), min(b, end)) for a, b in intervals)

    in_calls, busy = union(calls), union(work)
    overlap = sum(max(0, min(b, d) - max(a, c)) for a, b in in_calls for c, d in busy)
    idle_under_calls = sum(b - a for a, b in in_calls) - overlap
    [finding] = [f for f in program_findings(model) if f["check"] == "allocator-churn"]
    assert finding["estimated_savings_ns"] == pytest.approx(idle_under_calls, rel=0.02)
    idle = sum(p["ns"] for p in model["timeline"]["budget"] if p["part"].startswith("idle_"))
    assert finding["estimated_savings_ns"] < 0.75 * idle
    # the budget names the long allocator calls that hold most of its "host code" part
    assert budget_labels(model["timeline"])["idle_host"] == "idle in long allocator calls"


def test_a_class_no_finding_prices_is_not_said_to_be_counted(analyzed):
    """own67_fixed1: one cudaHostAlloc in the run (SQL) is the pinned-alloc class's time, which launch-overhead leaves
    out; pinned-alloc-churn does not speak on one call, so no finding counts it, and the note said 'their own findings
    count' it. It names it apart, with the causes whose findings are in the report."""
    path = REAL / "own67_fixed1_nsys.sqlite.xz"
    (allocs,), = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                              WHERE s.value LIKE 'cudaHostAlloc%'""")
    model = analyzed(path)
    checks = {f["check"] for f in model["findings"]}
    assert allocs == 1 and "pinned-alloc-churn" not in checks
    (note,) = [n for f in model["findings"] if f["check"] == "launch-overhead" for n in f["notes"]
               if "no time is counted twice" in n]
    counted = re.findall(r"([\w-]+)'s finding counts", note)
    assert re.search(r"pinned-alloc-churn \([^)]+\) under its check's threshold, which no finding prices", note)
    assert counted and "pinned-alloc-churn" not in counted and all(cause in checks for cause in counted)


def test_a_call_that_wakes_a_thread_is_no_wait(analyzed):
    """blind68_loader_base1's training thread waits on its DataLoader's queue; the loader's threads wake it with
    pthread_cond_signal (SQL: 535 calls in the capture), which returns at once. host-wait counted them among the
    lock waits (594 calls in its title, 253 of them signals in the window); they are the class lock-release now,
    and the lock-wait class holds waits only."""
    from nsanalyze.normalize.host_activity import classify

    path = REAL / "blind68_loader_base1_nsys.sqlite.xz"
    [(signals,)] = sql(path, """SELECT COUNT(*) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
                                WHERE s.value = 'pthread_cond_signal'""")
    assert signals > 0
    assert {classify(n, "os") for n in ("pthread_cond_signal", "pthread_cond_broadcast", "pthread_mutex_unlock")} \
        == {"lock-release"}
    wait = next(f for f in analyzed(path)["findings"] if f["check"] == "host-wait")
    locks = next(c for c in wait["evidence"]["classes"] if c["class"] == "lock-wait")
    assert not {"pthread_cond_signal", "pthread_cond_broadcast", "pthread_mutex_unlock"} & \
        {c["name"] for c in locks["top_calls"]}
    assert locks["calls"] < 594 and f"{locks['calls']} calls)" in wait["title"]


def test_allocator_advice_leads_with_the_programs_own_library(analyzed):
    """quasiben's workflow is a CuPy program (SQL: 800 of its 1,002 kernels are CuPy's): allocator-churn's advice
    led with PyTorch's `torch.cuda.empty_cache()` (a user read); it now leads with the pool of the program's library.
    A PyTorch loop (alloc_churn) keeps PyTorch's advice first."""
    from tests.conftest import PUBLIC

    path = PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz"
    (cupy, total), = sql(path, "SELECT SUM(s.value LIKE 'cupy%'), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               "JOIN StringIds s ON s.id = k.shortName")
    assert cupy > 0.5 * total
    advice = next(f for f in analyzed(path)["findings"] if f["check"] == "allocator-churn")["advice"]
    first_item = advice.split("\n- ")[1]
    assert first_item.startswith("Allocate from a pool") and "CuPy's memory pool" in first_item
    assert "empty_cache" not in advice.split("```")[1]
    # ... and its title names a pool, not PyTorch's call (a user read, round 79); its frees are few against the
    # allocations (SQL over the window), so it says the memory is taken again and again, not handed back (round 86)
    model = analyzed(path)
    title = next(f for f in model["findings"] if f["check"] == "allocator-churn")["title"]
    window = model["timeline"]["window"]
    (taken, freed), = sql(path, f"""SELECT SUM(s.value LIKE 'cudaMalloc%'), SUM(s.value LIKE 'cudaFree%')
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
        WHERE r.start < {window['end_ns']} AND r.end > {window['start_ns']}""")
    assert freed <= 0.25 * taken and "torch" not in title
    assert f"memory is taken from the driver again and again ({taken} allocations against {freed} frees: no pool in " \
           "use, or one that grows)" in title
    torch = next(f for f in analyzed(REAL / "alloc_churn_nsys.sqlite.xz")["findings"] if f["check"] == "allocator-churn")
    assert torch["advice"].split("\n- ")[1].startswith("PyTorch: remove `torch.cuda.empty_cache()`")
    assert "`torch.cuda.empty_cache()`, or no pool)" in torch["title"]


def test_the_budget_says_the_host_waits_where_its_thread_was_blocked(analyzed):
    """blind68_loader_base1's header read "idle on host code 76%" beside host-wait's first finding, whose thread sat in
    sem_clockwait on its one DataLoader worker. The part is named after the OS wait that held most of it, here from
    SQL: the launching thread's lock waits (sem_*wait, pthread_cond_*wait) inside the window hold over half of the
    budget's idle_host time. A loop that builds its batches in NumPy (own67_churn1) runs host code, and says so."""
    from nsanalyze.render.format import budget_labels

    path = REAL / "blind68_loader_base1_nsys.sqlite.xz"
    model = analyzed(path)
    timeline = model["timeline"]
    window = timeline["window"]
    (launcher,), = sql(path, "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
                             "ORDER BY COUNT(*) DESC LIMIT 1")
    (waited,), = sql(path, f"""SELECT SUM(MIN(o.end, {window['end_ns']}) - MAX(o.start, {window['start_ns']}))
                              FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
                              WHERE o.globalTid = {launcher} AND o.end > {window['start_ns']}
                              AND o.start < {window['end_ns']}
                              AND (s.value LIKE 'sem%wait' OR s.value LIKE 'pthread_cond%wait')""")
    idle_host = next(p["ns"] for p in timeline["budget"] if p["part"] == "idle_host")
    assert waited > 0.5 * idle_host
    assert budget_labels(timeline)["idle_host"] == "idle while the host waits (on a lock, a queue or another thread)"
    assert program_findings(model)[0]["check"] == "host-wait"
    assert budget_labels(analyzed(REAL / "own67_churn1_nsys.sqlite.xz")["timeline"])["idle_host"] == "idle on host code"


def test_with_two_gpus_each_class_figure_is_a_gpus_mean(analyzed):
    """mfu_2gpu_after (two GPUs, a process each): a class's `calls` and `ns` are a GPU's mean, and its top calls'
    counts were the two GPUs' sum (cudaLaunchKernel 3,205 + cuLaunchKernelEx 360 in a class of 1,782 calls); now
    the mean too, and a class's top calls, where they are all its names, add up to its calls: half SQL's count of
    those calls (3,220 + 360; the window holds nearly all)."""
    from tests.checks.program.test_multi_gpu import AFTER

    classes = analyzed(AFTER)["timeline"]["host_activity"]["classes"]
    launch = next(c for c in classes if c["class"] == "launch")
    [(total,)] = sql(AFTER, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id "
                            "WHERE s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%'")
    tops = sum(t["calls"] for t in launch["top_calls"])
    assert abs(tops - launch["calls"]) <= len(launch["top_calls"])      # (each a whole mean: rounded down)
    assert launch["calls"] == pytest.approx(total / 2, rel=0.01)
