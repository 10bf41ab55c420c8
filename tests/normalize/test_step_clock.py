"""Steps on the GPU's clock (normalize.steps.project_on_gpu) on real H200 runs: synchronous, host-runs-ahead,
queue-draining and graphed loops (graph-level and node-level traces), each against SQL over the export."""

import statistics

import pytest

from tests.conftest import REAL, covered_ns, program_findings, sql, sql_gpu_step_periods

LOOPS = [
    "matmul_sync_nsys.sqlite.xz",          # .item() + 2 ms of host work every step: host and GPU take turns
    "matmul_async_nsys.sqlite.xz",         # no sync: the host runs ahead until the queue is full
    "nightly1_nsys.sqlite.xz",             # .item() every tenth step drains the queue
    "attn_naive_nsys.sqlite.xz",           # 17.5 ms GPU steps, host ranges of 5 to 121 ms
    "matmul_graph_nsys.sqlite.xz",         # one CUDA graph a step, graph-level trace
    "matmul_graph_node_nsys.sqlite.xz",    # the same, node-level trace
    "graphs_graphtrace_nsys.sqlite.xz",    # a tiny graphed MLP step, graph-level trace
    "graphs_after_nsys.sqlite.xz",         # the same, node-level trace
    "graphs_eager_nsys.sqlite.xz",         # launch-bound eager loop
]


@pytest.mark.parametrize("name", LOOPS)
def test_median_step_is_the_gpu_period(analyzed, name):
    steps = analyzed(REAL / name)["timeline"]["steps"]
    periods = sql_gpu_step_periods(REAL / name)
    assert steps["clock"] == "gpu"
    assert steps["median_ns"] == pytest.approx(statistics.median(periods), rel=0.03)


def test_the_host_range_is_kept_beside_it(analyzed):
    """The graphed loop's host range is the g.replay() call: 44 µs against a 4.15 ms GPU step."""
    steps = analyzed(REAL / "matmul_graph_nsys.sqlite.xz")["timeline"]["steps"]
    host = [d for (d,) in sql(REAL / "matmul_graph_nsys.sqlite.xz",
                              "SELECT end - start FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")]
    assert steps["host_median_ns"] == pytest.approx(statistics.median(host[steps["first_step"]:]), rel=0.01)
    assert steps["host_median_ns"] < 0.05 * steps["median_ns"]
    assert steps["host_relation"] == "ahead" and "runs ahead" in steps["host_relation_text"]


def test_a_queue_draining_step_is_named_not_counted(analyzed):
    """nightly1: every tenth host range waits in cudaStreamSynchronize for the queued steps (37 ms against
    0.7 ms); on the GPU's clock those steps are ordinary, the outlier is named with its wait."""
    steps = analyzed(REAL / "nightly1_nsys.sqlite.xz")["timeline"]["steps"]
    assert steps["max_ns"] < 1.2 * steps["median_ns"]
    top = steps["host_outliers"][0]
    assert top["host_ns"] > 20 * steps["host_median_ns"] and top["wait"] == "cudaStreamSynchronize"
    assert top["wait_ns"] > 0.9 * top["host_ns"]


def test_steps_in_turn_with_the_host(analyzed):
    steps = analyzed(REAL / "matmul_sync_nsys.sqlite.xz")["timeline"]["steps"]
    assert steps["host_relation"] == "in step"
    assert steps["host_median_ns"] == pytest.approx(steps["median_ns"], rel=0.05)


@pytest.mark.parametrize("name", ["matmul_graph_nsys.sqlite.xz", "graphs_graphtrace_nsys.sqlite.xz"])
def test_graph_executions_are_gpu_work(analyzed, name):
    """A graph-level trace has no kernel rows for the graphs' nodes: the budget counts the graph executions
    as GPU busy time (within 5 points of SQL over the window), no launch, idle, host or sync cause speaks
    at medium or above, and the report says the kernels inside the graphs are not in the export."""
    model = analyzed(REAL / name)
    timeline = model["timeline"]
    start, end = timeline["window"]["start_ns"], timeline["window"]["end_ns"]
    busy = sql(REAL / name, f"""
        WITH w AS (SELECT MAX(start, {start}) AS s, MIN(end, {end}) AS e FROM (
            SELECT start, end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL
            UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY) WHERE end > {start} AND start < {end})
        SELECT SUM(e - s) FROM w""")[0][0]
    computed = sum(p["ns"] for p in timeline["budget"] if p["part"] in ("gpu_compute", "gpu_copy"))
    assert computed / (end - start) == pytest.approx(min(1.0, busy / (end - start)), abs=0.05)
    for finding in program_findings(model):
        if finding["check"] in ("launch-overhead", "gpu-idle", "host-compute", "host-sync"):
            assert finding["severity"] in ("low", "info"), finding["title"]
    assert any("cuda-graph-trace=node" in note for note in timeline["notes"])
    assert any(k["name"].startswith("CUDA graph ") for k in model["kernels"])


def test_a_node_level_trace_needs_no_note(analyzed):
    timeline = analyzed(REAL / "matmul_graph_node_nsys.sqlite.xz")["timeline"]
    assert timeline["notes"] == []


def _range_work_sql(path, text: str) -> tuple[int, int, int]:  # text: a plain range name, no quotes
    """First start and last end of the GPU work whose launch call began inside the named NVTX range, and
    the kernel time of that work, by SQL over the export."""
    return sql(path, """
        WITH r AS (SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                   WHERE n.eventType = 59 AND COALESCE(n.text, s.value) = '""" + text + """')
        SELECT MIN(k.start), MAX(k.end), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME c ON c.correlationId = k.correlationId
        JOIN r ON c.start >= r.start AND c.start < r.end""")[0]


def test_a_named_range_is_the_gpu_work_it_launched():
    """`--nvtx-range 'step 5'` on the loop whose host runs ahead: the host range is when step 5 was
    enqueued (~88 ms before the GPU ran it), the window is the GPU work it launched, so the kernel time
    fits in the window and the budget is that of the step (3.65 ms of bf16 products)."""
    from nsanalyze.analyze import Options, analyze

    path = REAL / "matmul_async_nsys.sqlite.xz"
    timeline = analyze([str(path)], Options(nvtx_range="step 5"))["timeline"]
    first, last, kernel_ns = _range_work_sql(path, "step 5")
    assert "on the GPU's clock" in timeline["window"]["description"]
    assert timeline["span_ns"] == pytest.approx(last - first, rel=0.01)
    assert timeline["kernel_ns"] == pytest.approx(kernel_ns, rel=0.01)
    assert timeline["kernel_ns"] <= timeline["span_ns"]
    assert timeline["steps"] is None            # one step: the window is the step, no 'steps' of the capture
    compute = next(p for p in timeline["budget"] if p["part"] == "gpu_compute")
    assert compute["share"] > 0.9


def _busy_by_sql(path, start: int, end: int) -> int:
    """ns of [start, end) in which any kernel, copy or memset runs: the union, by SQL rows."""
    rows = sql(path, " UNION ALL ".join(f"SELECT MAX(start, {start}), MIN(end, {end}) FROM {t} WHERE end > {start} "
                                        f"AND start < {end}" for t in ("CUPTI_ACTIVITY_KIND_KERNEL",
                                                                       "CUPTI_ACTIVITY_KIND_MEMCPY",
                                                                       "CUPTI_ACTIVITY_KIND_MEMSET")))
    return covered_ns(rows)


@pytest.mark.parametrize("name, bound", [("histlog_every10_nsys.sqlite.xz", False), ("histlog_off_nsys.sqlite.xz", True)])
def test_the_gpu_is_the_bound_only_when_busy_over_the_steps_whole_time(analyzed, name, bound):
    """Both loops run ahead in a median step (the GPU starts a step 16-26 ms after the host began it). With a
    histogram logged every 10th step, those steps hold 85% of the time and the GPU idles through them: it is
    busy 16% of the steps' whole time (by SQL), so the report does not call the GPU the bound; without the
    logging it is busy over 90% and does."""
    steps = analyzed(REAL / name)["timeline"]["steps"]
    busy = _busy_by_sql(REAL / name, steps["start_ns"], steps["end_ns"]) / (steps["end_ns"] - steps["start_ns"])
    assert steps["host_relation"] == "ahead"
    assert steps["gpu_busy_time_share"] == pytest.approx(busy, abs=0.01)
    assert ("the GPU is the bound" in steps["host_relation_text"]) is bound
    assert ("not the bound" in steps["host_relation_text"]) is not bound


def test_a_gpu_busy_with_copies_is_not_called_compute_bound(analyzed):
    """transfer_pinned: the host runs ahead and the GPU is busy, but with copies (by SQL, the copies cover
    nearly all of the steps' time and kernels none): the header names the link as the bound, not "the GPU"."""
    path = REAL / "transfer_pinned_nsys.sqlite.xz"
    steps = analyzed(path)["timeline"]["steps"]
    span = steps["end_ns"] - steps["start_ns"]
    copying = sql(path, f"SELECT SUM(MIN(end, {steps['end_ns']}) - MAX(start, {steps['start_ns']})) FROM "
                        f"CUPTI_ACTIVITY_KIND_MEMCPY WHERE end > {steps['start_ns']} AND start < {steps['end_ns']}")[0][0]
    assert copying > 0.9 * span and steps["host_relation"] == "ahead"
    assert "the link is the bound" in steps["host_relation_text"] and "the GPU is the bound" not in steps["host_relation_text"]


def test_a_host_range_that_stands_out_names_a_wait_only_where_it_holds_the_range(analyzed):
    """token_gen's step 103 took 10.2 ms on the host, 0.0122 ms of it in cudaStreamSynchronize: the header no
    longer gives that sync as the reason; nightly1's long host range is 98% a sync, and it still does."""
    token = analyzed(REAL / "token_gen_nsys.sqlite.xz")["timeline"]["steps"]
    top = token["host_outliers"][0]
    assert top["wait_ns"] < 0.5 * top["host_ns"] and "cudaStreamSynchronize" not in token["host_relation_text"]
    nightly = analyzed(REAL / "nightly1_nsys.sqlite.xz")["timeline"]["steps"]
    assert "of it in cudaStreamSynchronize" in nightly["host_relation_text"]


def test_a_host_within_a_step_is_not_said_to_sync(analyzed):
    """A loss read every 10th step (a blind twin, blind_lossbyhand_fix: no sync in the other steps, SQL) keeps the host
    within a step of the GPU, as a sync each step does (matmul_sync); the report said "take turns each step", a sync
    the program does not make. It gives the lead it measured instead."""
    from tests.conftest import sql

    name = "blind_lossbyhand_fix_nsys.sqlite.xz"
    ((syncing_steps, steps_count),) = sql(REAL / name, """
        WITH st AS (SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                    WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %')
        SELECT SUM(EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                           WHERE s.value LIKE '%Synchronize%' AND r.start >= st.start AND r.start < st.end)),
               COUNT(*) FROM st""")
    assert syncing_steps < steps_count / 5
    for fixture in (name, "matmul_sync_nsys.sqlite.xz"):
        steps = analyzed(REAL / fixture)["timeline"]["steps"]
        assert steps["host_relation"] == "in step" and "take turns" not in steps["host_relation_text"]
        assert steps["host_relation_text"].startswith("Host and GPU keep pace: the GPU starts a step's work ")
        assert 0 <= steps["host_lead_ns"] <= steps["median_ns"]


FIRST_LAUNCH_SQL = """WITH st AS (SELECT n.start, n.end FROM NVTX_EVENTS n WHERE n.text LIKE 'step %')
    SELECT (SELECT MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
            WHERE s.value LIKE 'cudaLaunch%' AND r.start >= st.start AND r.start < st.end) - st.start,
           st.end - st.start FROM st ORDER BY st.start"""


def test_a_host_that_waits_before_its_first_launch_is_said_first(analyzed):
    """blind68_loader's host waits on its loader's queue before each step's first launch (by SQL, over half of most
    steps' ranges): "keep pace" alone read as all is well, and the report now says the host comes first. fuse56_gpt's
    GPU also starts a step almost a step after its host began it, but its host launches at once (SQL) and the GPU is
    busy with the step before: the host runs close to a step ahead ("keep pace" there read as a host in step with a
    GPU-bound run, a user read of copy56_vocab)."""
    from tests.conftest import sql

    loader = sql(REAL / "blind68_loader_base1_nsys.sqlite.xz", FIRST_LAUNCH_SQL)
    assert sum(lag > span / 2 for lag, span in loader) > len(loader) / 2
    steps = analyzed(REAL / "blind68_loader_base1_nsys.sqlite.xz")["timeline"]["steps"]
    assert steps["host_relation_text"].startswith("Host and GPU keep pace, the host first: the host's first launch "
                                                  "of a step comes ")
    gpt = sql(REAL / "fuse56_gpt_base1_nsys.sqlite.xz", FIRST_LAUNCH_SQL)
    assert sum(lag < span / 10 for lag, span in gpt) > len(gpt) / 2
    steps = analyzed(REAL / "fuse56_gpt_base1_nsys.sqlite.xz")["timeline"]["steps"]
    assert steps["host_lead_ns"] > 0.9 * steps["median_ns"] and steps["host_relation"] == "in step"
    assert steps["host_relation_text"].startswith("The host runs close to a step ahead: the GPU starts a step's work ")
    assert f"({steps['host_lead_ns'] / steps['median_ns']:.0%} of a median step), busy with the step before" \
        in steps["host_relation_text"]


def test_a_host_that_works_after_its_last_launch_is_said_last(analyzed):
    """blind70_reviews_base2 ends every step with gc.collect() (a 241,247-object data set, about 250 ms a
    collection): the host ends a step most of a step after its last launch and the step's GPU work (SQL: the range's
    end less the later of the last call that launched GPU work in it and that work's end, median over the steady
    steps). The header says the host comes last, and host-compute's advice starts at the step's end, not at its input
    (it led with DataLoader workers). blind68_loader, whose host waits before its first launch, stays "the host
    first"; matmul_sync, whose host waits for the GPU at each step's end (`.item()`), is no host that comes last."""
    from statistics import median

    from tests.conftest import sql

    path = REAL / "blind70_reviews_base2_nsys.sqlite.xz"
    model = analyzed(path)
    steps = model["timeline"]["steps"]
    rows = sql(path, """SELECT CAST(substr(n.text, 6) AS INT), n.end - MAX(MAX(l.call_start), MAX(l.end))
                        FROM NVTX_EVENTS n
                        JOIN launched l ON l.call_start >= n.start AND l.call_start < n.end
                        WHERE n.text LIKE 'step %' GROUP BY n.start""",
               launched=("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    tail = median(max(ns, 0) for step, ns in rows if steps["first_step"] <= step <= steps["last_step"])
    assert steps["host_tail_ns"] == pytest.approx(tail, rel=0.01) and tail > 0.5 * steps["median_ns"]
    assert steps["host_relation_text"].startswith("Host and GPU keep pace, the host last: the host ends a step ")
    first = next(f for f in model["findings"] if f["check"] == "host-compute")
    assert first["advice"].startswith("The host's time lies at the end of each step")
    loader = analyzed(REAL / "blind68_loader_base1_nsys.sqlite.xz")["timeline"]["steps"]
    assert loader["host_tail_ns"] < 0.5 * loader["median_ns"] and "the host last" not in loader["host_relation_text"]
    synced = analyzed(REAL / "matmul_sync_nsys.sqlite.xz")["timeline"]["steps"]
    assert synced["host_tail_ns"] < 0.5 * synced["median_ns"] and "the host last" not in synced["host_relation_text"]


def test_a_last_step_cut_by_the_capture_is_no_step(analyzed):
    """power_iteration: the GPU's records stop 2.76 ms into the last of 44 `Step N to N` ranges (SQL: its work a
    fraction of a typical step's). Counted as a step, its period pulled the mean (40.3 ms) below the least period
    (40.2 ms), a user read. It is left out: 43 steps, whose mean is the SQL mean of the periods between the first GPU
    work of consecutive kept steps, within 1%."""
    from tests.conftest import PUBLIC, WORK_TABLES, sql_gpu_step_firsts

    path = PUBLIC / "brycelelbach__nsightful__tests__power_iteration__baseline.sqlite.xz"
    firsts = sql_gpu_step_firsts(path, like="Step %")
    work = [n for _, n in sql(path, """SELECT n.start, COUNT(l.start) FROM NVTX_EVENTS n
                                        LEFT JOIN StringIds s ON s.id = n.textId JOIN launched l
                                        ON l.call_start >= n.start AND l.call_start < n.end
                                        WHERE COALESCE(n.text, s.value) LIKE 'Step %' AND n.eventType = 59
                                        GROUP BY n.start ORDER BY n.start""", launched=WORK_TABLES)]
    assert len(firsts) == len(work) == 44 and work[-1] < 0.5 * statistics.median(work)
    steps = analyzed(path)["timeline"]["steps"]
    assert steps["count"] == 43 and steps["warmup"] == 0 and steps["last_step"] != steps["first_step"]
    periods = [b - a for a, b in zip(firsts[:43], firsts[1:43])]
    assert steps["mean_ns"] == pytest.approx(statistics.mean(periods), rel=0.01)
    assert steps["min_ns"] <= steps["mean_ns"]
