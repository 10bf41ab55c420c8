"""`nsanalyze whatif` on real H200 loops: the replay's predictions against the physics of each loop and
against the twin run the change was recorded as, each figure checked with SQL over the exports."""

import json
import os
import re
import statistics
import subprocess
import sys
from functools import lru_cache

import pytest
from click.testing import CliRunner

from nsanalyze.analyze import Options
from nsanalyze.cli import cli
from nsanalyze.whatif import WhatIf, whatif
from tests.conftest import (REAL, STEPS_SQL, sql, sql_gpu_step_firsts, sql_gpu_step_periods, sql_saved_per_step,
                            trace_gpu_step_periods)

GEMM = "regex:gemm|nvjet=2"   # cuBLAS/CUTLASS matrix products by name (short or demangled)


@lru_cache(maxsize=None)
def predict(name: str, speedups=(), remove=(), graph=False, outliers=False, pinned=False, fuse=()) -> dict:
    return whatif([str(REAL / name)], Options(), WhatIf(speedups, remove, graph, outliers, pinned, fuse))[0]


def like(name: str) -> str:
    """The step range's name in SQL's LIKE (fixtures/real/README.md)."""
    return "train_step" if name.startswith("gpt_") else "token %" if name.startswith("token_") else "step %"


def sql_kernel_ns_per_step(name: str, pattern: str) -> float:
    """Time of the kernels whose short or demangled name matches, per step, over the steps past the first
    third (warm-up), by SQL (the regex applied to the names SQL returns)."""
    firsts = sql_gpu_step_firsts(REAL / name, like(name))
    skip = len(firsts) // 3
    rows = sql(REAL / name, f"""SELECT s.value, d.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                 JOIN StringIds s ON s.id = k.shortName JOIN StringIds d ON d.id = k.demangledName
                                 WHERE k.start >= {firsts[skip]} AND k.start < {firsts[-1]} GROUP BY 1, 2""")
    regex = re.compile(pattern)
    return sum(ns for short, demangled, ns in rows if regex.search(short) or regex.search(demangled)) / \
        (len(firsts) - 1 - skip)


def sql_mean_step(name: str) -> float:
    """The mean GPU period of the steps past warm-up (the first third left out), by SQL."""
    periods = sql_gpu_step_periods(REAL / name, like(name))
    return statistics.mean(periods[len(periods) // 3:])


@pytest.mark.parametrize("name", ["gpt_fp32_nsys.sqlite.xz", "matmul_async_nsys.sqlite.xz"])
def test_faster_gemms_on_a_gpu_bound_loop_save_half_their_time(name):
    """GPU-bound loops (fp32 GPT; bf16 products with the host running ahead): GEMMs twice as fast save half
    the GEMM time of a step, within 15%."""
    result = predict(name, (GEMM,))
    assert result["self_check"]["trusted"]
    gemm = sql_kernel_ns_per_step(name, "gemm|nvjet")
    saved = result["base_step_ns"] - result["predicted_step_ns"]
    assert saved == pytest.approx(gemm / 2, rel=0.15)
    assert result["changes"][0]["kernel_ns_per_step"] == pytest.approx(gemm, rel=0.05)


@pytest.mark.parametrize("name", ["graphs_eager_nsys.sqlite.xz", "token_gen_nsys.sqlite.xz"])
def test_faster_kernels_on_a_host_bound_loop_save_almost_nothing(name):
    """Launch-bound loops (an eager MLP; batch-1 decoding): every kernel twice as fast saves under 3% of a
    step, though the kernels are a tenth of it (SQL)."""
    result = predict(name, ("regex:.=2",))
    assert result["self_check"]["trusted"]
    kernels = sql_kernel_ns_per_step(name, ".")
    assert kernels > 0.05 * result["base_step_ns"]
    assert result["base_step_ns"] - result["predicted_step_ns"] < 0.03 * result["base_step_ns"]
    assert result["base_mean_step_ns"] - result["predicted_mean_step_ns"] < 0.03 * result["base_mean_step_ns"]


def test_removing_launches_from_a_graphed_loop_saves_nothing():
    """One cudaGraphLaunch a step and a host far ahead: launches cost the step nothing."""
    result = predict("matmul_graph_nsys.sqlite.xz", (), ("launch", "graph-launch"))
    launches = sql(REAL / "matmul_graph_nsys.sqlite.xz", """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                   JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaGraphLaunch%'""")[0][0]
    assert launches >= 150 and result["changes"][0]["calls"] >= 140
    assert abs(result["base_step_ns"] - result["predicted_step_ns"]) < 0.005 * result["base_step_ns"]
    assert abs(result["base_window_ns"] - result["predicted_window_ns"]) < 0.005 * result["base_window_ns"]


def test_removing_the_allocator_predicts_the_cached_twin():
    """alloc_churn empties the caching allocator every step; its twin does not: without allocator calls the
    replay predicts the twin's mean step within 25% (SQL on both exports)."""
    result = predict("alloc_churn_nsys.sqlite.xz", (), ("allocator",))
    assert result["self_check"]["trusted"]
    assert result["base_mean_step_ns"] == pytest.approx(sql_mean_step("alloc_churn_nsys.sqlite.xz"), rel=0.05)
    assert result["predicted_mean_step_ns"] == pytest.approx(sql_mean_step("alloc_cached_nsys.sqlite.xz"), rel=0.25)


@pytest.mark.parametrize("base, fix", [("blind68_loader_base1_nsys.sqlite.xz", "blind68_loader_fix1_nsys.sqlite.xz"),
                                       ("blind68_loader_base2_nsys.sqlite.xz", "blind68_loader_fix2_nsys.sqlite.xz")])
def test_removing_the_waits_on_the_loader_predicts_the_fed_twin(base, fix):
    """blind68_loader: one DataLoader worker, whose queue the training thread waits on (sem_clockwait: the OS class
    lock-wait) most of each step; its twin has eight. `--remove lock-wait` takes that class's time between the CUDA
    calls out of the replay (where every launching thread sat in it) and predicts the twin's mean step within 10%,
    by SQL's GPU periods past the first third (measured: 33.0 against 33.7 ms)."""
    result = predict(base, (), ("lock-wait",))
    assert result["self_check"]["trusted"]
    assert result["changes"][0]["class"] == "lock-wait" and result["changes"][0]["host_ns_per_step"] > 50e6
    assert result["base_mean_step_ns"] == pytest.approx(sql_mean_step(base), rel=0.05)
    assert result["predicted_mean_step_ns"] == pytest.approx(sql_mean_step(fix), rel=0.10)
    host = sum(p["ns"] for p in result["critical_path_before"] if p["part"] == "host:lock-wait")
    assert host > 0.5 * result["base_step_ns"]
    assert "host:lock-wait" not in [p["part"] for p in result["critical_path"]]   # gone with the change


def test_a_graph_of_steps_that_launch_other_work_each_time_says_so():
    """blind69_augment's steps launch other numbers of kernels each time (a Python loop over a batch's images with
    random flips: by SQL, 1,797 on average a step, varying): `--graph` printed -82% without a word; its caveat now
    says a graph replays the launches it captured. graphs_eager, whose steps repeat their launches, gets none."""
    counts = sql(REAL / "blind69_augment_base1_nsys.sqlite.xz", """SELECT COUNT(DISTINCT c) FROM (
        SELECT n.start, COUNT(k.start) AS c FROM NVTX_EVENTS n JOIN CUPTI_ACTIVITY_KIND_KERNEL k
        ON k.start >= n.start AND k.start < n.end WHERE n.text LIKE 'step %' GROUP BY n.start)""")[0][0]
    assert counts > 10
    result = predict("blind69_augment_base1_nsys.sqlite.xz", graph=True)
    assert any(c.startswith("a CUDA graph replays the launches it captured") and "other numbers of kernels" in c
               for c in result["caveats"])
    assert not any("replays the launches it captured" in c
                   for c in predict("graphs_eager_nsys.sqlite.xz", graph=True)["caveats"])


def test_the_optimizer_launched_fused_predicts_the_fused_twin():
    """opt_loop under PyTorch's annotations (opt_loop_annot, nsys --pytorch=autograd-nvtx): AdamW(foreach=False)
    launches 1,024 kernels a step inside its `Optimizer.step#AdamW.step` range, the optimizer's role
    (range_roles.csv). `--fuse optimizer` (their launch paths gone, their GPU time kept) predicts what fused
    AdamW saved (opt_fused, the same program in round seven) within 25%, by SQL's mean GPU periods past the
    first third."""
    result = predict("opt_loop_annot_nsys.sqlite.xz", fuse=("optimizer",))
    assert result["self_check"]["trusted"]
    assert result["changes"] == [{**result["changes"][0], "change": "fuse", "kernels": 1024 * result["replayed_steps"]}]
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    actual = sql_mean_step("opt_loop_annot_nsys.sqlite.xz") - sql_mean_step("opt_fused_nsys.sqlite.xz")
    assert saved == pytest.approx(actual, rel=0.25)
    assert saved <= result["changes"][0]["launch_path_ns_per_step"] * 1.01   # never more than the paths it drops


def test_a_loop_launched_fused_saves_its_host_time_where_the_host_holds_the_step():
    """An EMA of ViT-B/16's weights as a Python loop (blind_emaloop_base: mul_ and add_ over 152 parameters, 304
    kernels a step in a row). `--fuse loop` drops the loop's launch paths, as SQL measures the loop's host time in
    the steps past the first third (within 10% of their median), and keeps its GPU time: the host holds this step,
    so the step saves most of that host time, never more. (The foreach twin is no oracle here: its host slowed
    over its run, 29 -> 45-60 ms periods, so what it saved ranges 1.0-5.0 ms with the steps compared.)"""
    from tests.checks.program.test_launch_loop import sql_loop_host_span

    name = "blind_emaloop_base_nsys.sqlite.xz"
    result = predict(name, fuse=("loop",))
    assert result["self_check"]["trusted"]
    assert result["changes"][0]["kernels"] == 304 * result["replayed_steps"]
    steps = len(sql_gpu_step_firsts(REAL / name))
    spans = [sql_loop_host_span(REAL / name, f"step {i}", 2) for i in range(steps // 3, steps)]
    paths = result["changes"][0]["launch_path_ns_per_step"]
    assert paths == pytest.approx(statistics.median(spans), rel=0.1)
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert 0.8 * paths <= saved <= paths * 1.01


def test_pinned_copies_predict_the_pinned_twin():
    result = predict("transfer_pageable_nsys.sqlite.xz", pinned=True)
    assert result["changes"][0]["copies"] > 0
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    actual = sql_mean_step("transfer_pageable_nsys.sqlite.xz") - sql_mean_step("transfer_pinned_nsys.sqlite.xz")
    assert saved == pytest.approx(actual, rel=0.25)


@pytest.mark.parametrize("run", [1, 2])
def test_pinned_copies_without_their_waits_predict_a_dict_batchs_twin(run):
    """blind67_fields (recorded blind, round 67): each step moves a dict batch of 40 small pageable columns with a
    blocking `.to("cuda")`, a cudaMemcpyAsync and then a cudaStreamSynchronize (SQL: every copy call's next call on its
    thread, within 14 us); the fix pins the batch and copies with non_blocking=True. The copies' bytes are not the cost
    (pinned, 54 kB copies take about as long); their waits are: the replay kept them, and saved 0.04 ms a step of the
    2.0-2.3 ms the fix saved. The pinned change drops a copy's own wait with it."""
    base, fix = f"blind67_fields_base{run}_nsys.sqlite.xz", f"blind67_fields_fix{run}_nsys.sqlite.xz"
    pairs = sql(REAL / base, """WITH c AS (SELECT r.globalTid tid, r.start, r.end, s.value name, ROW_NUMBER() OVER
        (PARTITION BY r.globalTid ORDER BY r.start) n FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId)
        SELECT b.name, MAX(b.start - a.end) FROM c a JOIN c b ON b.tid = a.tid AND b.n = a.n + 1
        WHERE a.name LIKE 'cudaMemcpyAsync%' GROUP BY 1""")
    assert [name for name, _ in pairs] == ["cudaStreamSynchronize_v3020"] and pairs[0][1] < 20_000
    result = predict(base, pinned=True)
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    actual = sql_mean_step(base) - sql_mean_step(fix)
    assert saved == pytest.approx(actual, rel=0.25) and actual > 1.5e6


def test_one_graph_launch_a_step_predicts_the_graphed_twin():
    result = predict("graphs_eager_nsys.sqlite.xz", graph=True)
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    actual = sql_mean_step("graphs_eager_nsys.sqlite.xz") - sql_mean_step("graphs_after_nsys.sqlite.xz")
    assert saved == pytest.approx(actual, rel=0.25)


def test_one_graph_launch_a_step_says_a_graph_cannot_capture_the_waits():
    """ResNet-18 inference one image at a time reads each image's result back (blind_persample_base: 64
    cudaStreamSynchronize a step, counted by SQL). `--graph` printed -84% without a word, though the report of the
    same file says a CUDA graph cannot capture a step that waits: the caveat is in the JSON and on the line. The
    graphed loop's steps (graphs_eager) do not wait and get none."""
    name = "blind_persample_base_nsys.sqlite.xz"
    result = predict(name, graph=True)
    per_step = sql(REAL / name, f"""WITH {STEPS_SQL.format(like=like(name))}
        SELECT COUNT(r.start) FROM steps LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= steps.start
        AND r.start < steps.end AND r.nameId IN (SELECT id FROM StringIds WHERE value LIKE 'cudaStreamSynchronize%')
        GROUP BY steps.start""")
    assert statistics.median(n for n, in per_step) == 64
    [caveat] = result["caveats"]
    assert caveat.startswith("a CUDA graph cannot capture a step that waits") and "64 times" in caveat
    assert "one graph a stretch between the waits (65 a step)" in caveat   # what the replay does since round 72
    from nsanalyze.render.whatif_report import summary_line
    from nsanalyze.whatif import label

    assert f"({caveat})" in summary_line(result, label(result))
    assert predict("graphs_eager_nsys.sqlite.xz", graph=True)["caveats"] == []
    if result["replayed_steps"] < result["steps"]:
        assert f"the replay covers {result['replayed_steps']} of the window's {result['steps']} steps" in \
            " ".join(result["notes"])


def test_a_change_that_finds_nothing_to_change_says_so():
    """whatif printed +0% without a word where the pattern matched no kernel or no kernel had the role (opt_loop's
    optimizer kernels carry no optimizer role there: the report finds its loop by its launches): a caveat says that
    nothing was changed, on the line and in the JSON."""
    from nsanalyze.render.whatif_report import summary_line
    from nsanalyze.whatif import label

    nothing = predict("opt_loop_nsys.sqlite.xz", speedups=("regex:doesnotexist=2",))
    assert nothing["changes"][0]["kernels"] == 0 and nothing["predicted_step_ns"] == nothing["base_step_ns"]
    assert nothing["caveats"] == ["/doesnotexist/ matches no kernel of the replayed steps: nothing was changed"]
    assert "(/doesnotexist/ matches no kernel" in summary_line(nothing, label(nothing))
    fused = predict("opt_loop_nsys.sqlite.xz", fuse=("optimizer",))
    assert fused["changes"][-1]["kernels"] == 0
    assert fused["caveats"] == ["no kernel of the replayed steps has the role optimizer: nothing was fused"]
    gemm = predict("gpt_fp32_nsys.sqlite.xz", speedups=(GEMM,))
    assert gemm["changes"][0]["kernels"] > 0 and gemm["caveats"] == []


def trace_mean_step(name: str) -> float:
    """A Kineto trace's mean GPU period between its profiler steps (plain JSON: trace_gpu_step_periods)."""
    return statistics.mean(trace_gpu_step_periods(REAL / name))


# Kineto traces of the same programs (fixtures/real/README.md, record_round4.sh, alloc_train.py), replayed as the
# nsys exports are: each against its twin's trace, the changes' figures against the trace's own events
@pytest.mark.parametrize("base, twin, change", [
    ("graphs_eager_kineto.json.gz", "graphs_after_kineto.json.gz", {"graph": True}),
    ("alloc_churn_kineto.json.gz", "alloc_cached_kineto.json.gz", {"remove": ("allocator",)}),
])
def test_a_kineto_trace_replayed_predicts_its_twins_trace(base, twin, change):
    """The unchanged replay reproduces the profiler's steps (self-check); with the change, the mean step saves
    what the twin's trace saved within 25%, and the result says the host times are the profiler's."""
    result = predict(base, **change)
    assert result["self_check"]["trusted"]
    assert result["base_mean_step_ns"] == pytest.approx(trace_mean_step(base), rel=0.05)
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert saved == pytest.approx(trace_mean_step(base) - trace_mean_step(twin), rel=0.25)
    assert any("CPU ops recorded a launch" in note for note in result["notes"])


def test_faster_kernels_on_a_host_bound_kineto_trace_save_almost_nothing():
    """The eager MLP under torch.profiler: its kernels are a tenth of a step (the trace's kernel events), and
    twice as fast they save under 3% of it."""
    import gzip
    import json

    name = "graphs_eager_kineto.json.gz"
    result = predict(name, ("regex:.=2",))
    with gzip.open(REAL / name) as trace:
        kernel_us = sum(e["dur"] for e in json.load(trace)["traceEvents"] if e.get("cat") == "kernel")
    steps = len(trace_gpu_step_periods(REAL / name)) + 1
    assert kernel_us * 1000 / steps > 0.05 * result["base_step_ns"]
    assert result["base_step_ns"] - result["predicted_step_ns"] < 0.03 * result["base_step_ns"]


def test_one_graph_launch_a_step_keeps_the_host_work_beside_the_launches():
    """histlog_every10: every 10th step spends seconds on the host (numpy histograms of the weights) between
    its launches. A CUDA graph takes off the host the launches' own paths, not that work: each step saves
    at most the host time of a step that does not log (SQL: the median step range), the mean step stays."""
    name = "histlog_every10_nsys.sqlite.xz"
    result = predict(name, graph=True)
    assert result["self_check"]["trusted"]
    ranges = [end - start for start, end in sql(REAL / name, """SELECT n.start, n.end FROM NVTX_EVENTS n
        LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %'""")]
    assert max(ranges) > 300 * statistics.median(ranges)   # the logging steps
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert 0 <= saved <= statistics.median(ranges)
    assert result["predicted_mean_step_ns"] > 0.95 * sql_mean_step(name)


def test_outlier_steps_at_the_median_leave_the_median_and_cut_the_mean():
    """histlog_every10: every 10th step logs histograms (about a second); at the median they cost the run
    its median step."""
    result = predict("histlog_every10_nsys.sqlite.xz", outliers=True)
    periods = sql_gpu_step_periods(REAL / "histlog_every10_nsys.sqlite.xz")
    assert result["predicted_step_ns"] == pytest.approx(result["base_step_ns"], rel=0.01)
    assert result["base_mean_step_ns"] > 3 * result["base_step_ns"]
    assert result["predicted_mean_step_ns"] == pytest.approx(statistics.median(periods), rel=0.05)


def test_the_command_writes_json_and_one_line():
    runner = CliRunner()
    result = runner.invoke(cli, ["whatif", str(REAL / "alloc_churn_nsys.sqlite.xz"), "--remove", "allocator",
                                 "-o", "-"], catch_exceptions=False)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert {"base_step_ns", "predicted_step_ns", "base_window_ns", "predicted_window_ns", "critical_path",
            "changes"} <= set(data)
    assert data["changes"] == [{"change": "remove", "class": "allocator", "calls": data["changes"][0]["calls"],
                                "host_ns_per_step": data["changes"][0]["host_ns_per_step"]}]
    assert sum(p["share"] for p in data["critical_path"]) == pytest.approx(1.0, abs=0.02)
    line = runner.invoke(cli, ["whatif", str(REAL / "alloc_churn_nsys.sqlite.xz"), "--remove", "allocator"],
                         catch_exceptions=False).stdout.strip()
    assert re.fullmatch(r"no allocator calls: [\d.]+ ms -> [\d.]+ ms a step \(-\d+%\); the critical path is then "
                        r"\d+% host", line), line


@pytest.mark.parametrize("args, says", [
    (["--speedup", "gemm=2"], "--speedup"),
    (["--speedup", "regex:gemm=0"], "--speedup"),
    (["--remove", "no-such-class"], "--remove"),
    (["--fuse", "no-such-role"], "--fuse"),
    ([], "no change given"),
    (["--remove", "sync", "-o", "out.html"], "out.html"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    done = subprocess.run([sys.executable, "-m", "nsanalyze", "whatif", str(REAL / "matmul_sync_nsys.sqlite.xz"),
                           *args], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr


def test_a_kineto_trace_without_profiler_steps_is_one_line_and_exit_2(tmp_path):
    """The real trace with its ProfilerStep#N events taken out: nothing to replay, said in one line naming the
    file, as for an export without steps."""
    import gzip

    trace = json.load(gzip.open(REAL / "graphs_eager_kineto.json.gz"))
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    path = tmp_path / "nosteps_kineto.json"
    path.write_text(json.dumps(trace))
    done = subprocess.run([sys.executable, "-m", "nsanalyze", "whatif", str(path), "--graph"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert str(path) in done.stderr and "ProfilerStep#N" in done.stderr


def test_an_ncu_report_is_refused(tmp_path):
    """Refused from its first bytes: nothing of the 500 MB report is decompressed into the cache."""
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-m", "nsanalyze", "whatif", str(REAL / "gpt_fp32_full.ncu-rep.xz"),
                           "--remove", "sync"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "NSANALYZE_CACHE": str(cache)})
    assert done.returncode == 2 and "Nsight Systems" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not cache.exists() or not any(cache.iterdir())


def test_a_replay_that_misses_the_steps_says_it_is_not_trusted():
    """kin54_time53_fix2, a PyTorch profiler trace of a host a step ahead of the GPU: the unchanged replay misses the
    measured steps by more than 2% (4.1%), and the prediction says so rather than promise a saving. (The two-rank DDP
    export of this test came within 0.1% once the launch latency was read only off launches into an idle GPU.)"""
    from nsanalyze.render.whatif_report import summary_line

    result = predict("kin54_time53_fix2_kineto.json.gz", ("regex:gemm|nvjet|sm90|sm80=2",))
    check = result["self_check"]
    assert not check["trusted"] and check["error"] > check["tolerance"]
    assert check["error"] == pytest.approx(abs(check["replayed_ns"] - check["measured_ns"]) / check["measured_ns"])
    assert "not trusted" in summary_line(result, "GEMMs 2x faster")


def test_removing_a_host_class_whose_calls_delay_the_copies_saves_their_time():
    """pinned_churn: 25 ms a step in cudaHostAlloc/cudaFreeHost, then the copies. Each step's first copy call
    is long (it follows the allocation), a pattern the replay once read as a launch queue two operations deep,
    which then held the removal at 0%. A queue that full is no launch queue (those read ~1022 on the fixtures'
    host-runs-ahead loops): removed, the calls save what the twin that pins once saved (by SQL), within 5%."""
    base, twin = predict("pinned_churn_nsys.sqlite.xz", remove=("pinned-alloc",)), "pinned_once_nsys.sqlite.xz"
    assert not any("launch queue filled" in note for note in base.get("notes", []))
    saved = base["base_step_ns"] - base["predicted_step_ns"]
    assert saved == pytest.approx(sql_mean_step("pinned_churn_nsys.sqlite.xz") - sql_mean_step(twin), rel=0.05)


def test_no_code_builds_save_their_host_time_where_the_host_holds_the_step():
    """blind56's fixed decoder compiles cuDNN's attention kernel for each new KV length, 35 ms of host time a step
    before each load (SQL in tests/checks/program/test_runtime_compilation.py): without the builds the replayed step
    falls by most of that time, never more; its copy-bound base, whose GPU holds the step, builds the same kernels
    and saves under a tenth of them."""
    def run(name):
        result = whatif([str(REAL / name)], Options(), WhatIf(unbuild=True))[0]
        assert result["self_check"]["trusted"]
        (change,) = result["changes"]
        assert change["change"] == "unbuild" and change["loads"] >= result["replayed_steps"]
        return result["base_mean_step_ns"] - result["predicted_mean_step_ns"], change["host_ns_per_step"]
    saved, built = run("blind56_kvcat_fix1_nsys.sqlite.xz")
    assert 0.8 * built < saved <= 1.01 * built
    saved, built = run("blind56_kvcat_base1_nsys.sqlite.xz")
    assert 0 <= saved < 0.1 * built


def test_fusing_loops_names_each_group_and_one_group_is_the_findings_change(analyzed):
    """opt_loop's steps hold two groups of loops: AdamW foreach=False over 128 tensors (8 kernels each) and the model's
    32-layer stack with its backward. `--fuse loop` fuses both, which are different changes, and says so group by
    group; `--fuse loop:N`, the group launch-loop's finding names in its notes, replays that finding's change alone:
    its saving is the finding's, and its kernels are the Adam loop's 1,024 a step."""
    import re

    name = "opt_loop_nsys.sqlite.xz"
    every = predict(name, fuse=("loop",))
    groups = every["changes"][0]["groups"]
    assert len(groups) == 2 and sum(g["kernels"] for g in groups) == every["changes"][0]["kernels"]
    assert any(note.startswith("--fuse loop fused 2 groups of loops") for note in every["caveats"])
    finding = next(f for f in analyzed(REAL / name)["findings"] if f["check"] == "launch-loop")
    [role] = re.findall(r"nsanalyze whatif PROFILE --fuse (loop:\d+) ", " ".join(finding["notes"]))
    alone = predict(name, fuse=(role,))
    assert alone["changes"][0]["kernels"] == 1024 * alone["replayed_steps"]
    assert "groups" not in alone["changes"][0]
    # the note says whatif replays more steps than the report's block around the median, as it does here
    note = next(n for n in finding["notes"] if n.startswith("replayed alone by"))
    block = int(re.search(r"than these (\d+), so its figure may differ a little", note).group(1))
    assert alone["replayed_steps"] > block
    saved = alone["base_mean_step_ns"] - alone["predicted_mean_step_ns"]
    assert saved == pytest.approx(finding["estimated_savings_ns"] / analyzed(REAL / name)["timeline"]["steps"]["count"],
                                  rel=0.05)
    assert saved < every["base_mean_step_ns"] - every["predicted_mean_step_ns"]


def test_without_the_operator_annotation_predicts_the_unannotated_twin(analyzed):
    """blind82_emitnvtx: a GPT-style LM trained inside emit_nvtx(record_shapes=True), 2,598 operator ranges a step.
    `--unannotate` takes each range's measured host time (the median between an operator's range and the first one
    nested in it) off the host compute it lies in: the replay's saving a step is within 25% of what leaving emit_nvtx
    out saved over the same steady steps (the twins' mean GPU periods, SQL: 7.9 against 7.9 ms on the second pair; the
    first pair's, 10.2 against 13.5, is launch-overhead's test in test_fix_twins), and never more than the ranges' time
    it takes. A loop without such ranges (hostsync_every1) changes nothing and says so;
    one whose ranges carry no shapes (opt_loop_annot) is told its prediction is an upper bound."""
    base, fix = "blind82_emitnvtx_base2_nsys.sqlite.xz", "blind82_emitnvtx_fix2_nsys.sqlite.xz"
    result = whatif([str(REAL / base)], Options(), WhatIf(unannotate=True))[0]
    change = result["changes"][0]
    (ranges,) = sql(REAL / base, """SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
        WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE '%, op_id = %'""")[0]
    assert change["change"] == "unannotate" and 0.9 * ranges < change["ranges"] <= ranges
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert saved == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.25)
    assert saved <= change["host_ns_per_step"] * 1.01 and not result["caveats"]
    plain = whatif([str(REAL / "hostsync_every1_nsys.sqlite.xz")], Options(), WhatIf(unannotate=True))[0]
    assert plain["changes"][0]["ranges"] == 0 and "nothing was changed" in plain["caveats"][0]
    unshaped = whatif([str(REAL / "opt_loop_annot_nsys.sqlite.xz")], Options(), WhatIf(unannotate=True))[0]
    assert "upper bound" in unshaped["caveats"][-1]
