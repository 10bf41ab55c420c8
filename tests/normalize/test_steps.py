"""Steps and the steady window, on real PyTorch loops (fixtures/real)."""

import sqlite3
import statistics

import pytest

from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NSYS, REAL, sql


def _nvtx_durations(path, pattern: str) -> list[int]:
    return [d for (d,) in sql(path, f"""SELECT n.end - n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                                        WHERE COALESCE(n.text, s.value) LIKE '{pattern}' ORDER BY n.start""")]


def test_eager_loop_steps_are_its_nvtx_steps(analyzed):
    path = REAL / "graphs_eager_nsys.sqlite.xz"
    timeline = analyzed(path)["timeline"]
    steps, window = timeline["steps"], timeline["window"]
    durations = _nvtx_durations(path, "step %")
    assert len(durations) == 400
    assert steps["name"] == "step N" and steps["count"] + steps["warmup"] == 400
    assert 1 <= steps["warmup"] <= 5          # step 0 takes 279 ms, step 1 5.0 ms, then ~3.5 ms
    assert steps["median_ns"] == pytest.approx(statistics.median(durations), rel=0.05)
    assert window["kind"] == "steady" and window["start_ns"] == steps["start_ns"]
    assert "start-up" in window["description"] and "steps 2-399" in window["description"]


def test_generation_tokens_are_steps(analyzed):
    steps = analyzed(REAL / "token_gen_nsys.sqlite.xz")["timeline"]["steps"]
    assert steps["name"] == "token N" and steps["count"] + steps["warmup"] == 200


def test_a_range_without_numbers_repeats_as_steps(analyzed):
    path = REAL / "gpt_fp32_nsys.sqlite.xz"
    steps = analyzed(path)["timeline"]["steps"]
    assert steps["name"] == "train_step" and steps["count"] + steps["warmup"] == 30
    assert steps["median_ns"] == pytest.approx(statistics.median(_nvtx_durations(path, "train_step")), rel=0.05)


def test_no_step_like_range_analyses_the_capture(analyzed):
    timeline = analyzed(DEV_SUITE_NSYS)["timeline"]
    assert timeline["steps"] is None and timeline["window"]["kind"] == "capture"
    assert timeline["window"]["start_ns"] is not None and timeline["window"]["end_ns"] is not None


def test_capture_window_on_request():
    from nsanalyze.analyze import Options, analyze

    model = analyze([str(REAL / "graphs_eager_nsys.sqlite.xz")], Options(window="capture"))
    assert model["timeline"]["window"]["kind"] == "capture"
    assert model["timeline"]["span_ns"] > 4e9            # the 4 s of start-up are back in the window


@pytest.mark.parametrize("name, first, ranged", [("graphs_eager_nsys.sqlite.xz", "launch-overhead", None),
                                                 ("token_gen_nsys.sqlite.xz", "launch-overhead", None),
                                                 ("item_sync_nsys.sqlite.xz", "host-sync", None),
                                                 ("loader_inline_nsys.sqlite.xz", "host-compute", "host-data")])
def test_without_nvtx_the_loop_is_read_off_its_launches(tmp_path, name, first, ranged):
    """The same real runs with their NVTX ranges deleted: the window starts at the most launched
    kernel's first launch after the start-up calls, the first finding stays that of the run with its
    ranges, and the run's host-side cause is found (item_sync: its fp32 GEMMs' tensor-core finding
    saves more than the sync bubble, and both are there). loader_inline's decoding before each upload is
    host-data's with its step ranges (`ranged`), which replays the steps; without steps to replay, host-compute
    speaks of the same time."""
    import shutil
    import sqlite3

    from nsanalyze.analyze import analyze
    from nsanalyze.read.files import open_local

    path = tmp_path / name.removesuffix(".xz")
    shutil.copy(open_local(REAL / name)[1], path)
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM NVTX_EVENTS")
    model = analyze([str(path)])
    window = model["timeline"]["window"]
    assert window["kind"] == "steady" and "most launched kernel" in window["description"]
    program = [f for f in model["findings"] if f["kernel_id"] is None and f["severity"] != "info"]
    with_ranges = [f for f in analyze([str(REAL / name)])["findings"] if f["kernel_id"] is None and f["severity"] != "info"]
    assert program[0]["check"] == with_ranges[0]["check"] if ranged is None else \
        (program[0]["check"], with_ranges[0]["check"]) == (first, ranged)
    assert first in [f["check"] for f in program[:2]]


def test_start_up_left_out_counts_host_work_before_the_gpu(analyzed):
    """cuDF groupby: 2 s of from_arrow on the host before the first kernel, then the loop read off its launches.
    The window's 'left out' is counted from the first CUDA call (SQL), not from the first GPU work (0.01 s)."""
    from nsanalyze.numbers import duration_text
    from tests.conftest import PUBLIC, sql

    path = PUBLIC / "quasiben__nvtx-examples__cudf-groupby.sqlite.xz"
    window = analyzed(path)["timeline"]["window"]
    (first_call,), = sql(path, "SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    (first_kernel,), = sql(path, "SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    left_out = window["start_ns"] - min(first_call, first_kernel)
    assert left_out > 1.5e9 and (window["start_ns"] - first_kernel) / 1e9 < 0.1
    assert f"{duration_text(left_out)} of start-up before it left out" in window["description"]


def test_a_capture_without_cuda_says_what_it_holds(analyzed):
    """nvtx-examples' quickstart: NVTX ranges and no CUDA call or GPU work (SQL: no CUPTI table). The window
    said 'from its first to its last CUDA call' of a capture that has none."""
    from tests.conftest import PUBLIC, sql

    path = PUBLIC / "quasiben__nvtx-examples__quickstart.sqlite.xz"
    assert not sql(path, "SELECT name FROM sqlite_master WHERE name LIKE 'CUPTI%'")
    description = analyzed(path)["timeline"]["window"]["description"]
    assert description == ("the whole capture (no GPU activity and no CUDA call recorded; no repeating step-like NVTX "
                           "range found)")   # one pair of parentheses: it read '(...) (...)'
    assert "CUDA call (" not in description


def test_a_loop_whose_launches_start_late_is_no_steady_state(analyzed):
    """nvtx-examples' workflow: its most launched kernel (cupy_subtract, 198 launches) runs only in the last
    phase, after a long allocation; the window read off it was 13.9 ms of a 107 ms GPU span and left out the
    phases that hold the program's allocator churn. Where the kernel's window covers less than a quarter of
    the GPU span (SQL), the whole capture is analysed, and the churn inside it (SQL: 210 cudaMalloc/cudaFree) leads."""
    from tests.conftest import PUBLIC

    path = PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz"
    model = analyzed(path)
    (first, last), = sql(path, "SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    window = model["timeline"]["window"]
    (allocations,), = sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                                "WHERE (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%') "
                                f"AND r.start >= {window['start_ns']} AND r.start < {window['end_ns']}")
    assert window["kind"] == "capture" and window["start_ns"] <= first and window["end_ns"] >= last
    top = model["findings"][0]
    assert top["check"] == "allocator-churn" and top["severity"] != "info"
    assert f"{allocations} cudaFree/cudaMalloc calls" in top["title"]
    # no steps, so no step counts in its evidence (it read `steps_with_calls: 0`, `steps: 0`)
    assert model["timeline"]["steps"] is None and not {"steps", "steps_with_calls"} & set(top["evidence"])


def test_start_up_ends_before_the_first_half_of_the_loops_launches(analyzed):
    """dev_infer: a loop of 300 batch-1 requests (600 of its most launched kernel's 706 launches, in 83 ms), then a
    batched and a bf16 phase. Start-up ended at the last long start-up call before the middle of the launches' time
    span: the batched phase's 2.1 ms cudaHostAlloc, which made the whole request loop start-up (284 ms left out of a
    148 ms window). Start-up ends before half the launches by count too (the median launch): at the first
    request's module loads (SQL)."""
    from nsanalyze.normalize.steps import STARTUP_CALLS

    path = DEV_INFER_NSYS
    window = analyzed(path)["timeline"]["window"]
    (kernel, launches, first, last), = sql(path, """SELECT shortName, COUNT(*), MIN(start), MAX(start)
        FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY shortName ORDER BY COUNT(*) DESC LIMIT 1""")
    (median,), = sql(path, f"""SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = {kernel}
                               ORDER BY start LIMIT 1 OFFSET {launches // 2}""")
    assert median < first + (last - first) // 2         # the loop's launches come early
    (startup_end,), = sql(path, f"""SELECT MAX(r.end) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
        ON s.id = r.nameId WHERE r.start < {median} AND r.end - r.start >= 1000000
        AND ({" OR ".join(f"s.value LIKE '{name}%'" for name in STARTUP_CALLS)})""")
    (first_after,), = sql(path, f"SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName = {kernel} "
                                f"AND start >= {startup_end}")
    (loop_start, loop_end), = sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE text = 'per_request'")
    assert window["start_ns"] == first_after and loop_start < first_after < loop_end - 50_000_000
    assert "per_request" not in [p["name"] for p in analyzed(path)["timeline"]["phases"] if not p["in_window_ns"]]


def test_instance_numbers_become_n_and_names_keep_their_digits():
    """Loop instances share a name; digits that name a thing stay. The long runs are the hostile shape that
    made the old pattern quadratic: digits after a letter, not at the end."""
    from nsanalyze.normalize.steps import normalize_name
    cases = {"step 12": "step N", "epoch3": "epochN", "iter_7/fwd": "iter_N/fwd", "bf16_autocast": "bf16_autocast",
             "layer3.conv": "layer3.conv", "12": "N", "train step 4 of 10": "train step N of N",
             "layer" + "1" * 70_000 + ".conv": "layer" + "1" * 70_000 + ".conv",
             "step " + "1" * 70_000: "step N", "x" + "9" * 70_000: "xN",
             "é3": "éN", "ステップ٣": "ステップN", "a٣b": "a٣b", "12ab34": "NabN", "S" * 70_000 + "step 12": "S" * 70_000 + "step N",
             # PyTorch's NVTX mode: every range's name apart; a run of other digits then ASCII ones stays one run
             "aten::mm, op_id = 285336, sizes = [[8192, 512]]": "aten::mm, op_id = N, sizes = [[N, N]]",
             "a٣191b": "a٣191b", "1" * 70_000 + "a": "Na"}
    assert {name[:20]: normalize_name(name) for name in cases} == {name[:20]: want for name, want in cases.items()}


def test_steps_are_named_by_the_numbers_their_ranges_carry(analyzed):
    """torch.profiler numbers its steps from the schedule's start: mlp_eager's trace holds ProfilerStep#5 to #10,
    and the report said "steps 0-5" and "step 5 took 61.7 ms", which is the trace's ProfilerStep#10 (#5 is a
    9.8 ms range). The steps are named by their ranges' numbers, read here from the trace's own events."""
    import gzip
    import json

    from tests.conftest import REAL

    path = REAL / "mlp_eager_kineto.json.gz"
    with gzip.open(path, "rt") as trace:
        ranges = {int(e["name"].split("#")[1]): float(e["dur"]) * 1e3 for e in json.load(trace)["traceEvents"]
                  if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")}
    steps = analyzed(path)["timeline"]["steps"]
    longest = max(ranges, key=ranges.get)
    assert (steps["first_step"], steps["last_step"]) == (min(ranges) + steps["warmup"], max(ranges)) == (5, 10)
    [outlier] = steps["host_outliers"]
    assert outlier["step"] == longest == 10 and abs(outlier["host_ns"] - ranges[longest]) < 1_000
    assert f"ProfilerStep#{longest} took" in steps["host_relation_text"]   # the range as the trace names it
    # token_gen's ranges are `token N`: its longest host range is named so, not "step 103" (a user read)
    tokens = analyzed(REAL / "token_gen_nsys.sqlite.xz")["timeline"]["steps"]
    (name, _), = sql(REAL / "token_gen_nsys.sqlite.xz", "SELECT text, end - start FROM NVTX_EVENTS WHERE text LIKE "
                                                        "'token %' ORDER BY end - start DESC LIMIT 1")
    assert f"{name} took" in tokens["host_relation_text"] and tokens["host_outliers"][0]["step"] == int(name.split()[1])
    assert "steps 5-10 of 'ProfilerStep#N'" in analyzed(path)["timeline"]["window"]["description"]


def test_step_numbers_only_where_every_instance_carries_one_and_they_increase():
    from nsanalyze.normalize.steps import step_numbers
    assert step_numbers(["step 1", "step 2", "step 4"]).tolist() == [1, 2, 4]
    assert step_numbers(["ProfilerStep#12", "ProfilerStep#13"]).tolist() == [12, 13]
    assert step_numbers(["step 1", "step", "step 3"]) is None            # one without a number
    assert step_numbers(["step 3", "step 2", "step 4"]) is None          # not in order: numbered from 0
    assert step_numbers(["epoch 1 step 1", "epoch 1 step 2"]) is None    # two numbers in a name
    assert step_numbers(["step 1700000000000", "step 1700000000001"]) is None   # a timestamp, not a step


def test_the_shortest_step_is_a_step_not_the_last_ones_own_work(analyzed):
    """own67_churn1's header read "min 11.8 ms" where every GPU period by SQL is 50 ms or more: the window's last
    step, timed to the end of its own work (no next step starts it), was taken for the shortest. The shortest is
    the shortest period of a step that has a next one, SQL's."""
    from tests.conftest import sql_gpu_step_periods

    path = REAL / "own67_churn1_nsys.sqlite.xz"
    steps = analyzed(path)["timeline"]["steps"]
    periods = sql_gpu_step_periods(path)[steps["first_step"]:steps["last_step"]]
    assert len(periods) == steps["count"] - 1
    assert steps["min_ns"] == pytest.approx(min(periods), rel=0.01) and steps["min_ns"] > 45e6


def test_a_slow_stretch_longer_than_a_warm_up_is_said(analyzed):
    """blind79_offload_base1 (a user read): steps 0-64 of 120 ran 109-186 ms against 43-56 after, the same copies in
    each. The window leaves out half the steps at most as warm-up (60), so it starts inside that stretch, and its
    header said only "60 warm-up steps"; slow-steps then read steps 60-64, the stretch's end, as periodic work. The
    stretch is measured without the cap (SQL's GPU periods against the later half's median), the header says where
    it ends, and slow-steps calls its steps the stretch's end; graphs_eager's two warm-up steps say nothing more."""
    from tests.conftest import program_findings, sql_gpu_step_periods

    path = REAL / "blind79_offload_base1_nsys.sqlite.xz"
    model = analyzed(path)
    steps, window = model["timeline"]["steps"], model["timeline"]["window"]
    periods = sql_gpu_step_periods(path)
    later = statistics.median(periods[len(periods) // 2:])
    slow = next(i for i, p in enumerate(periods) if p <= 1.25 * later)
    assert slow > len(periods) // 2 and steps["warmup"] == steps["first_step"] < slow
    assert steps["slow_lead_last_step"] == slow - 1 == 64
    assert f"steps 0-{slow - 1} all ran over 1.25x the later steps' median" in window["description"]
    outliers = next(f for f in program_findings(model) if f["check"] == "slow-steps")
    assert max(outliers["evidence"]["slow_steps"]) <= slow - 1
    assert f"the end of the run's slow first stretch (to step {slow - 1}" in outliers["title"]
    assert outliers["advice"].startswith(f"These steps end the run's slow first stretch, to step {slow - 1}")
    eager = analyzed(REAL / "graphs_eager_nsys.sqlite.xz")["timeline"]
    assert eager["steps"]["warmup"] >= 1 and eager["steps"].get("slow_lead_last_step") is None
    assert "slow stretch" not in eager["window"]["description"]


def _steps_of(path):
    """find_steps on an export, closed after."""
    from nsanalyze.normalize.steps import find_steps
    from nsanalyze.read.nsys import read_nsys

    export = read_nsys(path)
    try:
        return find_steps(export)
    finally:
        export.close()


def test_pytorchs_operator_ranges_are_never_the_steps(tmp_path):
    """PyTorch's NVTX mode names a range around every operator (`aten::batch_norm, op_id = 40`): a network's layers
    repeat such a name more often than the loop's steps, and `batch` reads as step-like. opt_loop_annot (nsys
    --pytorch=autograd-nvtx) with every operator range renamed so: its steps stay its `step N` ranges, as SQL counts
    them, and stay steps when renamed `decode, seq = N`."""
    import shutil

    from nsanalyze.read.files import open_local

    path = tmp_path / "annot.sqlite"
    shutil.copy(open_local(REAL / "opt_loop_annot_nsys.sqlite.xz")[1], path)
    with sqlite3.connect(path) as con:
        renamed = con.execute("""UPDATE NVTX_EVENTS SET text = 'aten::batch_norm' || substr(text, instr(text, ','))
                                 WHERE text LIKE '%, op_id = %'""").rowcount
        (steps,) = con.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE text LIKE 'step %'").fetchone()
    assert renamed > 100 * steps
    found = _steps_of(path)
    assert found.name == "step N" and len(found.host_starts) == steps
    # a user's own step name with `, seq = ` in it stays a step (only PyTorch's `, op_id = ` marks an operator)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE NVTX_EVENTS SET text = 'decode, seq = ' || substr(text, 6) WHERE text LIKE 'step %'")
    found = _steps_of(path)
    assert found.name == "decode, seq = N" and len(found.host_starts) == steps


@pytest.mark.parametrize("run", [1, 2])
def test_steps_that_change_pace_with_the_same_gpu_work_are_said(analyzed, run):
    """blind74_masksync_base1 slows part way: its steps run near 50 ms, then near 72 ms, with the same kernels a step
    (its host's time in CUDA calls grew; a user read found it by SQL). The header says where the pace changes and both
    medians; SQL's NVTX step durations and kernel time a step agree. Its second recording (base2), the same program,
    keeps one pace: no such line."""
    import re

    path = REAL / f"blind74_masksync_base{run}_nsys.sqlite.xz"
    steps = analyzed(path)["timeline"]["steps"]
    text = steps.get("speed_change_text")
    if run == 2:
        assert text is None
        return
    first, cut, last = (int(x) for x in re.search(r"steps (\d+)-(\d+) ran at .* steps (\d+)-(\d+) at",
                                                   text).group(1, 2, 4))
    m1, m2 = (float(x) for x in re.search(r"a median ([\d.]+) ms a step and steps \d+-\d+ at ([\d.]+) ms", text).groups())
    assert "in the later run it waited longer on the host" in text and m2 >= 1.25 * m1
    ranges = sql(path, """SELECT n.start, n.end, CAST(SUBSTR(COALESCE(n.text, s.value), 6) AS INTEGER) FROM NVTX_EVENTS n
                          LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59
                          AND COALESCE(n.text, s.value) LIKE 'step %' ORDER BY n.start""")
    by_number = {number: (start, end) for start, end, number in ranges}
    before = [by_number[i][1] - by_number[i][0] for i in range(first, cut + 1)]
    after = [by_number[i][1] - by_number[i][0] for i in range(cut + 1, last + 1)]
    assert m1 == pytest.approx(statistics.median(before) / 1e6, rel=0.05)
    assert m2 == pytest.approx(statistics.median(after) / 1e6, rel=0.05)

    def kernel_ns(numbers):   # the kernels launched in these steps' ranges, a step
        (ns,), = sql(path, f"""SELECT SUM(l.end - l.start) FROM launched l WHERE l.call_start >= {by_number[numbers[0]][0]}
                               AND l.call_start < {by_number[numbers[-1]][1]}""", launched=("CUPTI_ACTIVITY_KIND_KERNEL",))
        return ns / len(numbers)
    work = kernel_ns(list(range(first, cut + 1))), kernel_ns(list(range(cut + 1, last + 1)))
    assert work[0] == pytest.approx(work[1], rel=0.05)   # the same GPU work a step in both runs
