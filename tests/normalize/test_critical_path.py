"""The dependency graph of real H200 loops (normalize.critical_path): the replay without change reproduces the
measured steps, and the critical path of a median step adds up to the step, GPU work and host time each
against SQL over the export: synchronous, host-runs-ahead and graphed loops (node-level kernels included)."""

import statistics

import numpy as np
import pytest

from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize.steps import find_steps
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from tests.conftest import REAL, WORK_TABLES, sql, sql_gpu_step_firsts, sql_gpu_step_periods, \
    trace_gpu_step_periods


@pytest.fixture(scope="module")
def timelines():
    cache = {}

    def get(name):
        if name not in cache:
            export = read_profile(REAL / name)
            cache[name] = (export, build_timeline(export))
        return cache[name]
    return get


def gpu_busy_per_step(path) -> float:
    """Kernel, memset and memcpy time between the first and the last step's first GPU work, per step, by SQL
    (the loops run on one stream: work never overlaps)."""
    tables = {name for (name,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    firsts = sql_gpu_step_firsts(path, "step %", WORK_TABLES[:3])   # kernels, copies, memsets
    start, end = firsts[len(firsts) // 3], firsts[-1]   # past warm-up
    query = "SELECT COALESCE(SUM(end - start), 0) FROM {} WHERE start >= {} AND start < {}"
    busy = sum(sql(path, query.format(t, start, end))[0][0] for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)
    return busy / (len(firsts) - 1 - len(firsts) // 3)


def parts(path_rows, prefix) -> float:
    return sum(p["ns"] for p in path_rows if p["part"].startswith(prefix))


LOOPS = ["matmul_sync_nsys.sqlite.xz", "matmul_async_nsys.sqlite.xz", "matmul_graph_nsys.sqlite.xz",
         "matmul_graph_node_nsys.sqlite.xz", "graphs_eager_nsys.sqlite.xz", "alloc_churn_nsys.sqlite.xz",
         "transfer_pageable_nsys.sqlite.xz", "gpt_fp32_nsys.sqlite.xz"]


def like(name: str) -> str:
    return "train_step" if name.startswith("gpt_") else "step %"


@pytest.mark.parametrize("name", LOOPS)
def test_the_critical_path_adds_up_to_the_median_step(timelines, name):
    _, timeline = timelines(name)
    path = timeline.critical_path
    assert path is not None
    median = statistics.median(sql_gpu_step_periods(REAL / name, like(name)))
    assert sum(p["ns"] for p in path) == pytest.approx(median, rel=0.02)
    assert sum(p["share"] for p in path) == pytest.approx(1.0, abs=0.02)


# Kineto traces (torch.profiler) of the launch-bound MLP, its graphed twin, the allocator churn and the GPU-bound
# fp32 GPT: the same graph, built from the trace's runtime calls and GPU work (read.kineto)
TRACES = ["graphs_eager_kineto.json.gz", "graphs_after_kineto.json.gz", "alloc_churn_kineto.json.gz",
          "gpt_fp32_kineto.json.gz"]


@pytest.mark.parametrize("name", TRACES)
def test_a_kineto_traces_critical_path_adds_up_to_its_median_step(timelines, name):
    """Against the trace's own events: the median GPU period between profiler steps (trace_gpu_step_periods)."""
    path = timelines(name)[1].critical_path
    assert path is not None
    median = statistics.median(trace_gpu_step_periods(REAL / name))
    assert sum(p["ns"] for p in path) == pytest.approx(median, rel=0.02)
    assert sum(p["share"] for p in path) == pytest.approx(1.0, abs=0.02)
    if name.startswith("graphs_eager"):   # launch-bound: the host holds the step
        assert parts(path, "host:") > 0.9 * median
    if name.startswith(("graphs_after", "gpt_")):   # one graph launch a step; the GPT's GPU-bound step
        assert parts(path, "gpu:") > 0.95 * median


@pytest.mark.parametrize("name", LOOPS)
def test_the_replay_without_change_reproduces_the_steps(timelines, name):
    _, timeline = timelines(name)
    export = read_profile(REAL / name)   # opened again: an export's SQLite time limit runs from its opening
    steps = find_steps(export)
    block = cp.step_block(export, timeline.activity, timeline.activity.launching_threads, steps.host_starts,
                          steps.host_ends, timeline.step_indices, timeline.step_starts, steps.global_tid >> 24)
    periods = np.array(sql_gpu_step_periods(REAL / name, like(name)))
    steady = periods[int(timeline.step_indices[0]):][:len(block.measured)]
    assert block.measured.sum() == pytest.approx(steady.sum(), rel=0.01)   # the steps the replay is checked on
    assert block.trusted and block.self_check_error < cp.SELF_CHECK_TOLERANCE
    assert block.replayed.sum() == pytest.approx(steady.sum(), rel=cp.SELF_CHECK_TOLERANCE)


# The training thread's time a step in OS waits on a queue or lock (the loader's semaphore, a condition), by SQL
LOCK_WAITS_SQL = """SELECT SUM(MIN(o.end, {end}) - MAX(o.start, {start})) FROM OSRT_API o JOIN StringIds n ON n.id = o.nameId
    WHERE o.globalTid = {tid} AND o.end > {start} AND o.start < {end}
    AND (n.value LIKE 'sem_%wait' OR n.value LIKE 'pthread_cond_%wait')"""


def test_the_host_waiting_on_a_queue_is_a_wait_on_the_path(timelines):
    """blind68_loader (one DataLoader worker): the training thread waits on the loader's queue in sem_clockwait
    most of each step while the autograd thread sits in pthread_cond_wait. The path called that host compute; it
    is now host-activity class lock-wait, as host-wait's finding says, and no more than the training thread's own
    waits of a step by SQL (the path counts only where every launching thread waited). anomaly, whose host
    computes (stack traces, checks), keeps its host's own code (dispatch and compute)."""
    name = "blind68_loader_base1_nsys.sqlite.xz"
    path = timelines(name)[1].critical_path
    step = statistics.median(sql_gpu_step_periods(REAL / name))
    assert sum(p["ns"] for p in path) == pytest.approx(step, rel=0.02)
    ((tid,),) = sql(REAL / name, "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
                                 "ORDER BY COUNT(*) DESC LIMIT 1")
    ranges = sql(REAL / name, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")
    waits = statistics.median(sql(REAL / name, LOCK_WAITS_SQL.format(start=s, end=e, tid=tid))[0][0] or 0
                              for s, e in ranges[len(ranges) // 4:])
    waited = parts(path, "host:lock-wait")
    assert 0.75 * waits <= waited <= waits and waited > 0.7 * step   # measured: 113.4 of 128.7 ms, a 143.6 ms step
    assert parts(path, "host:compute") < waited / 3
    computing = timelines("blind61_anomaly_base1_nsys.sqlite.xz")[1].critical_path
    own = parts(computing, "host:compute") + parts(computing, "host:dispatch")   # the host's own code
    assert own > 0.6 * sum(p["ns"] for p in computing)
    assert parts(computing, "host:lock-wait") < 0.02 * sum(p["ns"] for p in computing)


def test_a_synchronous_step_is_its_gpu_work_then_its_host_work(timelines):
    """matmul_sync: the products, `.item()`, 2 ms of host work, in turn: all the GPU work and the host's
    time between are on the path."""
    name = "matmul_sync_nsys.sqlite.xz"
    path = timelines(name)[1].critical_path
    busy = gpu_busy_per_step(REAL / name)
    median = statistics.median(sql_gpu_step_periods(REAL / name))
    assert parts(path, "gpu:") == pytest.approx(busy, rel=0.05)
    assert parts(path, "host:") == pytest.approx(median - busy, rel=0.08)
    assert parts(path, "host:compute") >= 2_000_000   # the loop's 2 ms of host work a step


@pytest.mark.parametrize("name", ["matmul_async_nsys.sqlite.xz", "matmul_graph_node_nsys.sqlite.xz"])
def test_a_gpu_bound_step_is_its_gpu_work(timelines, name):
    """The host runs ahead (eagerly or through one graph launch a step): the path is the GPU's work."""
    path = timelines(name)[1].critical_path
    assert parts(path, "gpu:") / sum(p["ns"] for p in path) > 0.98
    assert parts(path, "gpu:") == pytest.approx(gpu_busy_per_step(REAL / name), rel=0.03)


def test_graph_node_kernels_are_on_the_path(timelines):
    """Node-level trace: the graph's kernels carry the correlation id of their cudaGraphLaunch; the path
    names their roles, not a whole graph."""
    name = "matmul_graph_node_nsys.sqlite.xz"
    launched = sql(REAL / name, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                                   ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = r.nameId
                                   WHERE s.value LIKE 'cudaGraphLaunch%'""")[0][0]
    assert launched > 3000
    names = [p["part"] for p in timelines(name)[1].critical_path]
    assert "gpu:graph" not in names and "gpu:matmul_tensor" == names[0]
    graph_level = [p["part"] for p in timelines("matmul_graph_nsys.sqlite.xz")[1].critical_path]
    assert graph_level[0] == "gpu:graph"


def test_the_launch_queue_depth_is_read_from_blocked_launches(timelines):
    """matmul_async fills CUDA's launch queue: its launches block until a slot frees; the depth read is about
    a thousand operations, as the calls that blocked show (ops queued but not ended when each returned)."""
    name = "matmul_async_nsys.sqlite.xz"
    _, timeline = timelines(name)
    export = read_profile(REAL / name)   # opened again: an export's SQLite time limit runs from its opening
    steps = find_steps(export)
    block = cp.step_block(export, timeline.activity, timeline.activity.launching_threads, steps.host_starts,
                          steps.host_ends, timeline.step_indices, timeline.step_starts, steps.global_tid >> 24)
    assert 900 <= block.graph.queue_depth <= 1100
    long_launches = sql(REAL / name, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
                                        ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%'
                                        AND r.end - r.start > 100000""")[0][0]
    assert long_launches > 500


def test_no_steps_no_path(dev_infer_timeline):
    assert dev_infer_timeline.critical_path is None or isinstance(dev_infer_timeline.critical_path, list)


def test_speedup_option_parsing():
    text, regex, factor = cp.parse_speedup("regex:gemm|nvjet=2.5")
    assert regex.pattern == "gemm|nvjet" and factor == 2.5
    for bad in ("gemm=2", "regex:gemm", "regex:gemm=0", "regex:gemm=-1", "regex:gemm=nan", "regex:(=2",
                "regex:gemm=1e-300", "regex:gemm=9e-7"):   # 1e-300: the replayed times overflowed (a nan saving)
        with pytest.raises(ValueError):
            cp.parse_speedup(bad)
    assert cp.parse_speedup("regex:gemm=1e-6")[2] == 1e-6 and cp.parse_speedup("regex:gemm=1e300")[2] == 1e300


def test_the_replayed_steps_label_the_optimizers_launches(timelines):
    """The replayed block's kernels take the work split's roles, the annotated range's included: under nsys
    --pytorch=autograd-nvtx (opt_loop_annot) the 1,024 launches a steady step inside `Optimizer.step#AdamW.step`
    (SQL: tests/normalize/test_work.py) are gpu:optimizer, so a change to the optimizer's kernels reaches
    them; the loop without the annotation has none."""
    block = timelines("opt_loop_annot_nsys.sqlite.xz")[1].step_block
    steps = len(block.graph.step_first_op)
    assert steps >= 3 and block.graph.o_label.count("gpu:optimizer") == 1024 * steps
    plain = timelines("opt_loop_nsys.sqlite.xz")[1].step_block
    assert "gpu:optimizer" not in plain.graph.o_label


@pytest.mark.parametrize("name", ["fuse55_resnet_base1_nsys.sqlite.xz", "alloc_churn_nsys.sqlite.xz",
                                  "sync53_resnet256_base_nsys.sqlite.xz"])
def test_a_call_waits_only_for_work_that_ended_before_it_returned(timelines, name):
    """Every call the replay makes wait for an operation (a sync's last queued work, a full queue's freed slot)
    returned after that operation ended, as measured. The eager ResNet-50's launches fill the queue but not at
    every call: a slot counted 1,021 launches back had not always freed when a call returned, and such false edges
    bound the replay's host to the measured GPU: with its kernels 100x faster it saved 0% of a 97%-GPU step."""
    export, timeline = timelines(name)
    graph = timeline.step_block.graph
    waiting = np.flatnonzero(graph.c_target >= 0)
    assert len(waiting)
    assert (graph.o_end[graph.c_target[waiting]] <= graph.c_end[waiting]).all()


def test_faster_kernels_save_down_to_the_hosts_floor_on_a_host_runs_ahead_loop(timelines):
    """The eager ResNet-50 (fuse55) runs ahead of a GPU busy 97% of its 54.7 ms step; its host makes a step's
    calls in about 35 ms when not held by the queue. Kernels 100x faster: the step falls to the host's floor,
    more than a quarter shorter, never below the host's own calls' time (SQL: the launches' time a step that did
    not wait for a slot, under 0.1 ms each)."""
    import re

    name = "fuse55_resnet_base1_nsys.sqlite.xz"
    _, timeline = timelines(name)
    block = timeline.step_block
    saved = cp.saving_per_step(block, cp.Change(speedups=[("all", re.compile("."), 100.0)]))
    step = timeline.steps.median_ns
    (calls, call_ns), = sql(REAL / name, """SELECT COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%' AND r.end - r.start < 100000""")
    steps = len(sql(REAL / name, "SELECT 1 FROM NVTX_EVENTS WHERE text LIKE 'step %'"))
    assert 0.25 * step < saved < step - call_ns / steps


def test_each_change_is_priced_by_a_replay_of_its_own(timelines):
    """time53's ResNet-50 at batch 256 times five stages a step with event pairs, each synchronized, and builds no
    GPU code in its steps: without its timing code the step is shorter, without code builds it is the same. The
    block keeps each change's priced replay; the second change must not be read from the first's (the key held
    neither `untimed` nor `unbuilt`: the report had priced the timing code, and no builds read as its 6.9 ms)."""
    _, timeline = timelines("time53_resnet256_base_nsys.sqlite.xz")
    block = timeline.step_block
    assert block.graph.timing is not None and block.graph.timing.any and not cp.code_builds(block.graph).any()
    step = float(block.measured.mean())
    untimed = cp.saving_per_step(block, cp.Change(untimed=True))
    unbuilt = cp.saving_per_step(block, cp.Change(unbuilt=True))
    assert untimed > 0.05 * step and abs(unbuilt) < 0.001 * step


def test_a_call_that_waited_for_the_gpu_to_drain_is_found_by_its_data(timelines):
    """blind56 kvcat: after each new cuDNN attention kernel is loaded (its KV length changes every token),
    cuKernelSetAttribute, a query no table marks as waiting, returns only once the GPU has run dry: 13-15 ms calls
    behind the KV cache's concatenations. The graph binds them to the operation that ended last before each
    returned (SQL: the last GPU operation's end lies inside the call, in its last tenth), so the replay without the
    copy kernels returns them early: it saves near what the fixed run saved (SQL's mean GPU periods, base less fix),
    where holding them as host time saved under half of it. The fixed run's calls, with nothing queued, wait for
    nothing."""
    base, fix = "blind56_kvcat_base1_nsys.sqlite.xz", "blind56_kvcat_fix1_nsys.sqlite.xz"
    graph = timelines(base)[1].step_block.graph
    drained = [i for i in np.flatnonzero(graph.c_target >= 0) if graph.c_class[i] == "query"]
    assert len(drained) >= 3
    for i in drained:
        start, end = int(graph.c_start[i]), int(graph.c_end[i])
        (last_end,), = sql(REAL / base, f"""SELECT MAX(end) FROM (SELECT end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
                                            SELECT end FROM CUPTI_ACTIVITY_KIND_MEMCPY) WHERE end <= {end}""")
        assert graph.o_end[graph.c_target[i]] == last_end
        assert start < last_end and end - last_end <= 0.1 * (end - start)
    block = timelines(base)[1].step_block
    saved = cp.saving_per_step(block, cp.Change(roles=((("copy",), float("inf")),)))
    measured = [statistics.mean(sql_gpu_step_periods(REAL / name)[15:-1]) for name in (base, fix)]
    actual = measured[0] - measured[1]
    assert actual > 15e6 and abs(saved - actual) <= 0.25 * actual
    fixed = timelines(fix)[1].step_block.graph
    assert not [i for i in np.flatnonzero(fixed.c_target >= 0) if fixed.c_class[i] == "query"]


def test_a_poll_loop_is_one_wait_for_the_work_it_polls(timelines):
    """blind77_pollwait (round 77, read before any change): after each step's launches the host spins on
    `while not done.query(): time.sleep(0)`. SQL: cudaEventQuery answers "not ready" (600) about 309 times a step,
    then "ready" once, just after the step's last operation ended. The graph counts each run as one wait for that
    operation, its queries and the host's time between them the wait's: the replay without the syncs saves within 15%
    of what the twin without the poll saved (SQL's mean GPU periods), where holding the polls as host time saved
    nothing. PyTorch's caching allocator's not-ready queries (blind57_landcover_fix1: each run ends in a launch, not
    a ready answer) make no poll loop."""
    base, fix = "blind77_pollwait_base1_nsys.sqlite.xz", "blind77_pollwait_fix1_nsys.sqlite.xz"
    timeline = timelines(base)[1]
    graph = timeline.step_block.graph
    ends = np.flatnonzero(graph.c_poll_end)
    assert len(ends) == len(graph.step_first_op)   # one a step
    for i in ends:
        (last_end,), = sql(REAL / base, f"""SELECT MAX(end) FROM (SELECT end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
            SELECT end FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT end FROM CUPTI_ACTIVITY_KIND_MEMSET)
            WHERE end <= {graph.c_end[i]}""")
        assert graph.o_end[graph.c_target[i]] == last_end and graph.c_end[i] - last_end < 200_000
    (not_ready, ready), = sql(REAL / base, f"""SELECT SUM(r.returnValue = 600), SUM(r.returnValue = 0)
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaEventQuery%'
        AND r.start >= {graph.c_start[0]} AND r.start <= {graph.c_end[-1]}""")
    # each run's first query keeps the host's time before it; the others' is the wait's
    assert ready == len(ends) and not_ready == int((graph.c_in_poll & ~graph.c_poll_end).sum()) + len(ends)
    assert 300 < not_ready / len(ends) < 320
    assert timeline.step_waits.polls_per_step == 1 and timeline.step_waits.poll_call == "cudaEventQuery"
    saved = cp.saving_per_step(timeline.pricing_block, cp.Change(remove=("sync",)))
    first = timelines(base)[1].steps.first_step, timelines(fix)[1].steps.first_step
    actual = statistics.mean(sql_gpu_step_periods(REAL / base)[first[0]:]) \
        - statistics.mean(sql_gpu_step_periods(REAL / fix)[first[1]:])
    assert actual > 5e6 and abs(saved - actual) <= 0.15 * actual
    allocator = timelines("blind57_landcover_fix1_nsys.sqlite.xz")[1].step_block.graph
    (queried,), = sql(REAL / "blind57_landcover_fix1_nsys.sqlite.xz", f"""SELECT COUNT(*) FROM
        CUPTI_ACTIVITY_KIND_RUNTIME WHERE returnValue = 600 AND start >= {allocator.c_start[0]}
        AND start <= {allocator.c_end[-1]}""")
    assert queried > 1000 and not allocator.c_poll_end.any() and not allocator.c_in_poll.any()


def test_pinned_copies_take_at_least_a_pinned_copys_time(timelines):
    """ResNet-18 inference one image at a time reads each image's result back (blind_persample_base: 64 copies of
    4 KB a step from pageable memory, 1.6 us each on the GPU, counted by SQL). Pinned, such a copy takes no less:
    setup and latency, not bandwidth (pageable-memcpy's own estimate says so). The replay set each at its bytes
    over the pinned rate (0.08 us), a saving pageable-memcpy's finding then claimed."""
    _, timeline = timelines("blind_persample_base_nsys.sqlite.xz")
    block = timeline.step_block
    graph = block.graph
    pageable = cp.pageable_copies(graph)
    (copies, small), = sql(REAL / "blind_persample_base_nsys.sqlite.xz",
                           "SELECT COUNT(*), SUM(bytes <= 4096) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE srcKind = 0 "
                           "OR dstKind = 0")
    assert small >= 0.95 * copies and pageable.sum() >= 64
    measured = (graph.o_end - graph.o_start)[pageable].astype(float)
    rates = {kind: 50.0 for kind in graph.copy_kinds}   # 50 GB/s, PCIe 5.0's practical pinned rate (bytes/ns)
    pinned = cp.replay(graph, cp.Change(pinned_rate=rates))
    replayed = (pinned.oe - pinned.os)[pageable]
    assert measured.max() < 10_000   # under 10 us each, what a pinned copy takes at least
    assert np.allclose(replayed, measured)


def test_the_dispatch_before_each_launch_is_its_own_part(timelines):
    """blind69_augment launches 1,797 kernels a step from a Python loop over a batch's images: the budget calls 81%
    of the step the GPU's wait on launches. The path called the host's code before each launch host compute; the
    part of it within the launch path (the framework's dispatch, critical_path.path_gap) is host:dispatch, and with
    the launch calls it holds about what the budget gives the launches. matmul_sync's 2 ms of host work a step,
    beyond any launch path, stays host compute."""
    name = "blind69_augment_base1_nsys.sqlite.xz"
    timeline = timelines(name)[1]
    path = timeline.critical_path
    step = sum(p["ns"] for p in path)
    assert step == pytest.approx(statistics.median(sql_gpu_step_periods(REAL / name)), rel=0.02)
    launch_wait = next(p.share for p in timeline.steps.budget if p.part == "idle_launch")
    launching = (parts(path, "host:dispatch") + parts(path, "host:launch")) / step
    assert launching > 0.9 and launching == pytest.approx(launch_wait, abs=0.15)   # measured: 0.95 against 0.81
    assert parts(path, "host:compute") < 0.1 * step
    assert parts(timelines("matmul_sync_nsys.sqlite.xz")[1].critical_path, "host:compute") >= 2_000_000


def test_findings_are_priced_on_the_window_where_the_median_steps_are_not_its(timelines):
    """copy56_catlog_base1 grows a store of logits by torch.cat each batch: its allocator calls take 0.3 ms a step at
    first and up to 137 ms in late steps (SQL below). The 7 steps around the median step, with one such spike, have a
    mean period a quarter below the window's mean step, and priced the calls' removal at 8.54 ms a step where the fix
    saved 19.28. Those steps are no sample of the window: findings are priced on the window's steps, whose replay
    reproduces them, and the calls' removal saves most of their host time a step. alloc_churn's steps (empty_cache()
    each step, every step alike) keep the block around the median step."""
    name = "copy56_catlog_base1_nsys.sqlite.xz"
    export, timeline = timelines(name)
    median_block, block = timeline.step_block, timeline.pricing_block
    mean_ns = timeline.steps.mean_ns
    assert abs(median_block.measured.mean() / mean_ns - 1) > cp.REPRESENTATIVE
    assert len(block.measured) == timeline.steps.count and block.with_last and block.trusted   # every step
    assert block.measured[:-1].mean() == pytest.approx(statistics.mean(sql_gpu_step_periods(REAL / name)[
        timeline.steps.first_step:]), rel=0.01)
    window = timeline.window
    (host_ns,), = sql(REAL / name, f"""SELECT SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%')
        AND r.start >= {window.start} AND r.start < {window.end}""")
    saved = cp.saving_per_step(block, cp.Change(remove=frozenset({"allocator"})))
    per_step = host_ns / timeline.steps.count
    assert 0.85 * per_step <= saved <= per_step
    assert cp.saving_per_step(median_block, cp.Change(remove=frozenset({"allocator"}))) < 0.6 * per_step
    _, regular = timelines("alloc_churn_nsys.sqlite.xz")
    assert regular.pricing_block is regular.step_block


def test_a_checked_value_is_made_by_its_kernels_and_the_memset_between_them(timelines, analyzed):
    """blind61_anomaly_base1: anomaly mode checks every gradient with `isnan(grad).any().item()`, an elementwise
    kernel, a memset (the reduction's output zeroed, in most), a reduction and a one-byte read, 336 a step, which its fix
    (anomaly mode off) does not launch. The checks the replay takes away (value_checks) are those operations: as many
    a step as the base launches more kernels, memsets and one-byte reads than its fix (SQL, each run's window), and
    at most 15% more: the walk back from a read also takes the gradient's own last kernel where that is elementwise
    or a reduction (a bias gradient's sum: 76 a step here), which the fix keeps. The walk stopped at the memset,
    leaving the isnan kernels and their launches in place (host-sync's replay saved 15.7 ms a step of the 49 the fix
    saved; now 33.5)."""
    def per_step(name):
        model = analyzed(REAL / name)
        window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
        inside = f"start >= {window['start_ns']} AND start < {window['end_ns']}"
        [(kernels,)] = sql(REAL / name, f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {inside}")
        [(memsets,)] = sql(REAL / name, f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE {inside}")
        [(reads,)] = sql(REAL / name, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2
                                          AND bytes = 1 AND {inside}""")
        return (kernels + memsets + reads) / steps, memsets / steps
    (base, base_memsets), (fixed, fixed_memsets) = (per_step(f"blind61_anomaly_{run}1_nsys.sqlite.xz")
                                                    for run in ("base", "fix"))
    extra = base - fixed
    graph = timelines("blind61_anomaly_base1_nsys.sqlite.xz")[1].pricing_block.graph
    ops, _ = cp.value_checks(graph)
    assert extra > 3 * 336
    assert extra <= (ops & (graph.o_call >= 0)).sum() / len(graph.step_first_op) <= 1.15 * extra
    assert sum(graph.o_label[i] == "gpu:memset" for i in np.flatnonzero(ops)) / len(graph.step_first_op) == \
        pytest.approx(base_memsets - fixed_memsets, rel=0.1)


def test_a_host_a_step_ahead_replays_its_own_steps(timelines):
    """kin54_sync53_fix1 (a PyTorch profiler trace): the host runs a step ahead of the GPU, every launch queued behind
    earlier work, some on another stream. An operation whose own stream was idle still waited in the device's queue:
    its start less its call's start (55 ms here) is that wait, and read as the launch latency it put every
    operation of the replay that waits on its launch a step late (the replay 6.1% over the measured steps, untrusted).
    The latency is read only off launches made with no earlier operation queued or running: none here."""
    export, timeline = timelines("kin54_sync53_fix1_kineto.json.gz")
    block = timeline.pricing_block or timeline.step_block
    graph = block.graph
    call_start = graph.c_start[np.maximum(graph.o_call, 0)]
    launched = graph.o_call >= 0
    waited = (graph.o_start - call_start)[launched]
    assert np.median(waited) > 40e6   # the measured starts: a step behind their calls
    assert graph.o_latency.max() < 1e6
    assert block.trusted and block.self_check_error < cp.SELF_CHECK_TOLERANCE
