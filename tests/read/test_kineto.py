"""PyTorch profiler (Kineto) traces as a third input, on real traces of our own programs
(fixtures/real/*_kineto.json.gz, recorded beside nsys exports of the same programs)."""

from __future__ import annotations

import bisect
import gzip
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REAL, program_findings

ATTN = REAL / "attn_naive_kineto.json.gz"
MLP = REAL / "mlp_eager_kineto.json.gz"
# round four (record_round4.sh): the launch-bound MLP of graphs_train.py eager, the same with record_shapes,
# its step as one CUDA graph replay, and the fp32 GPT of gpt_train.py (CUDA-core GEMMs)
EAGER = REAL / "graphs_eager_kineto.json.gz"
EAGER_SHAPES = REAL / "graphs_eager_shapes_kineto.json.gz"
GRAPHED = REAL / "graphs_after_kineto.json.gz"
GPT_FP32 = REAL / "gpt_fp32_kineto.json.gz"
EAGER_NSYS = REAL / "graphs_eager_nsys.sqlite.xz"
PAIRS = [(ATTN, REAL / "attn_naive_nsys.sqlite.xz", "attention-unfused"),
         (MLP, REAL / "mlp_eager_nsys.sqlite.xz", "unfused-elementwise"),
         (EAGER, EAGER_NSYS, "launch-overhead"),
         (EAGER_SHAPES, EAGER_NSYS, "launch-overhead")]
TRACES = [ATTN, MLP, EAGER, EAGER_SHAPES, GRAPHED, GPT_FP32]
TRACE_IDS = ["attn", "mlp", "eager", "eager_shapes", "graphed", "gpt_fp32"]


def events(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def write_trace(path: Path, trace: dict) -> Path:
    path.write_text(json.dumps(trace))
    return path


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "nsanalyze", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_trace_loads_with_the_traces_kernels(path):
    from nsanalyze.read import read_profile

    export = read_profile(path)
    assert export.kind == "kineto" and export.device_name == "NVIDIA H200" and export.compute_capability == "9.0"
    kernels = [e for e in events(path) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    count, total = export.scalar("SELECT COUNT(*) FROM kernels"), export.scalar("SELECT SUM(duration_ns) FROM kernels")
    assert count == len(kernels)
    assert total == pytest.approx(sum(e["dur"] for e in kernels) * 1000, abs=len(kernels))  # rounding: < 1 ns each
    copies = [e for e in events(path) if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    assert export.scalar("SELECT COUNT(*) FROM copies") == len(copies)
    # kernels are joined to the CUDA call that launched them by correlation id; those without one in the
    # trace were launched before it began (the host runs ahead) and all run before the first joined one
    joined = "FROM kernels k LEFT JOIN api a ON a.correlation_id = k.correlation_id"
    first_joined = export.scalar(f"SELECT MIN(k.start) {joined} WHERE a.correlation_id IS NOT NULL")
    last_unjoined = export.scalar(f"SELECT MAX(k.start) {joined} WHERE a.correlation_id IS NULL")
    assert last_unjoined is None or last_unjoined < first_joined  # None: the launch-bound loops' host never ran ahead
    assert export.rank == 0  # no distributedInfo in these traces
    # no two rows of one stream overlap (Kineto's rounded float microseconds)
    rows = export.query("SELECT device_id, stream_id, start, end FROM kernels ORDER BY device_id, stream_id, start")
    assert not any(a[:2] == b[:2] and a[3] > b[2] for a, b in zip(rows, rows[1:]))


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_steps_are_the_profiler_steps_on_the_traces_own_gpu_projection(path, analyzed):
    """Kineto projects ProfilerStep#N on the GPU itself (`gpu_user_annotation`). Its `dur` misses the
    backward kernels, launched from the autograd thread outside the annotation; its starts are the step
    boundaries on the GPU, so the step's GPU period is start to next start."""
    steps = analyzed(path)["timeline"]["steps"]
    assert steps["name"] == "ProfilerStep#N" and steps["clock"] == "gpu" and steps["count"] == 6
    projected = sorted((e["ts"], e["dur"]) for e in events(path)
                       if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("ProfilerStep#"))
    starts = np.array([ts for ts, _ in projected]) * 1000
    periods = np.diff(starts)
    assert steps["median_ns"] == pytest.approx(float(np.median(periods)), rel=0.05)
    if path in (ATTN, MLP, GRAPHED, GPT_FP32):  # measured: within 0.01%; the eager MLPs within 0.5% (5 periods
        assert steps["median_ns"] == pytest.approx(float(np.median(periods)), rel=0.002)  # of 6 steps' spread)
    assert steps["start_ns"] == pytest.approx(starts[0], abs=1000)
    timeline = analyzed(path)["timeline"]  # a budget that adds up to the window, and a median step's to the step
    assert sum(p["ns"] for p in timeline["budget"]) == pytest.approx(timeline["span_ns"], rel=1e-6)
    assert sum(p["share"] for p in steps["budget"]) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("kineto, nsys, first", PAIRS, ids=["attn", "mlp", "eager", "eager_shapes"])
def test_first_finding_equals_the_nsys_exports(kineto, nsys, first, analyzed):
    from_kineto, from_nsys = program_findings(analyzed(kineto)), program_findings(analyzed(nsys))
    assert from_kineto[0]["check"] == from_nsys[0]["check"] == first
    assert analyzed(kineto)["profiles"][0]["kind"] == "kineto"
    k_steps, n_steps = analyzed(kineto)["timeline"]["steps"], analyzed(nsys)["timeline"]["steps"]
    if first != "launch-overhead":  # the GPU is the bound: the same steady step on either input
        assert k_steps["median_ns"] == pytest.approx(n_steps["median_ns"], rel=0.05)
    else:  # the host is: its speed and each profiler's own cost set the step (3.10-4.59 ms against 3.49 ms
        # under nsys); the loop itself is the same, 73 kernel launches a step on either input
        k_launches, n_launches = analyzed(kineto)["timeline"]["launches"], analyzed(nsys)["timeline"]["launches"]
        assert k_launches["launches"] / k_steps["count"] == n_launches["launches"] / n_steps["count"] == 73


def test_a_graphed_step_is_busy_on_either_input(analyzed):
    """graphs_train.py graph: each step one cudaGraphLaunch whose 73 kernels carry its correlation id. The
    steps are on the GPU's clock (not the host's 89 us ranges), as long as under nsys (node-level and
    graph-level traces), mostly compute, and the first cause is the node-level nsys export's."""
    model = analyzed(GRAPHED)
    steps = model["timeline"]["steps"]
    assert steps["clock"] == "gpu" and "launched no GPU work" not in model["timeline"]["window"]["description"]
    assert steps["host_median_ns"] < steps["median_ns"] / 3  # the host runs ahead: one launch a step
    for nsys in ("graphs_after_nsys.sqlite.xz", "graphs_graphtrace_nsys.sqlite.xz"):
        other = analyzed(REAL / nsys)
        assert steps["median_ns"] == pytest.approx(other["timeline"]["steps"]["median_ns"], rel=0.05)
    first = [f["check"] for f in program_findings(model)][:1]
    assert first == [f["check"] for f in program_findings(analyzed(REAL / "graphs_after_nsys.sqlite.xz"))][:1]
    assert "launch-overhead" not in {f["check"] for f in program_findings(model)}
    budget = {p["part"]: p["share"] for p in model["timeline"]["budget"]}
    nsys_budget = {p["part"]: p["share"] for p in analyzed(REAL / "graphs_after_nsys.sqlite.xz")["timeline"]["budget"]}
    assert max(budget, key=budget.get) == max(nsys_budget, key=nsys_budget.get) == "gpu_compute"
    assert budget["gpu_compute"] == pytest.approx(nsys_budget["gpu_compute"], abs=0.05)  # measured 87% / 86%
    assert sum(p["ns"] for p in model["timeline"]["budget"]) == pytest.approx(model["timeline"]["span_ns"], rel=1e-6)
    # one launch a step, however many kernels it ran
    assert model["timeline"]["launches"]["profiler"]["launches_per_step"] == 1
    evs = events(GRAPHED)
    graph_corr = {e["args"]["correlation"] for e in evs if e.get("name") == "cudaGraphLaunch"}
    per_launch = Counter(e["args"]["correlation"] for e in evs if e.get("cat") == "kernel"
                         and e["args"]["correlation"] in graph_corr)
    assert len(per_launch) == 6 and set(per_launch.values()) == {73}


def test_cuda_core_gemms_first_on_either_input(analyzed):
    """gpt_train.py fp32: the nsys export (GPU metrics) says low-tensor-activity first; the trace has no
    GPU metrics but the same work split (CUDA-core GEMM 81%), judged from the library kernels' names."""
    from_nsys = program_findings(analyzed(REAL / "gpt_fp32_nsys.sqlite.xz"))
    from_kineto = program_findings(analyzed(GPT_FP32))
    assert from_nsys[0]["check"] == from_kineto[0]["check"] == "low-tensor-activity"
    assert "81% of GPU kernel time" in from_nsys[0]["title"] and "81% of GPU kernel time" in from_kineto[0]["title"]
    assert [f["check"] for f in from_kineto] == [f["check"] for f in from_nsys]  # then attention-unfused on both


def test_the_fp32_gpt_has_the_nsys_exports_step_and_work_split(analyzed):
    model, nsys = analyzed(GPT_FP32), analyzed(REAL / "gpt_fp32_nsys.sqlite.xz")
    assert model["timeline"]["steps"]["median_ns"] == pytest.approx(nsys["timeline"]["steps"]["median_ns"], rel=0.01)
    work = {w["role"]: w["share"] for w in model["timeline"]["work"]}
    nsys_work = {w["role"]: w["share"] for w in nsys["timeline"]["work"]}
    assert set(work) == set(nsys_work)
    for role in ("matmul_simt", "attention_unfused"):  # measured 81% and 7% on both
        assert work[role] == pytest.approx(nsys_work[role], abs=0.01)


@pytest.mark.parametrize("path", [EAGER, EAGER_SHAPES, GRAPHED], ids=["eager", "eager_shapes", "graphed"])
def test_an_mlp_has_no_attention(path, analyzed):
    """cross_entropy's log-softmax (softmax_warp_forward<..., 4, true, false>: is_log_softmax spelled
    `true` by the demangler Kineto uses, `(bool)1` by nsys's) is a reduction, not attention: the work
    roles of the trace are those of the nsys export of the same program."""
    roles = {w["role"] for w in analyzed(path)["timeline"]["work"]}
    assert "attention_unfused" not in roles and "attention_fused" not in roles
    nsys = {w["role"] for w in analyzed(EAGER_NSYS)["timeline"]["work"]}
    assert roles == nsys


@pytest.mark.parametrize("compress", [False, True], ids=["json", "json.gz"])
def test_a_truncated_trace_is_bad_input(tmp_path, compress):
    data = gzip.open(ATTN).read()
    path = tmp_path / ("cut.pt.trace.json.gz" if compress else "cut.pt.trace.json")
    path.write_bytes(gzip.compress(data)[: len(gzip.compress(data)) // 2] if compress else data[: len(data) // 2])
    result = run_cli("report", path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert ("truncated" in lines[0]) or ("invalid JSON" in lines[0])


def test_json_that_is_not_a_trace_is_bad_input(tmp_path):
    path = write_trace(tmp_path / "config.json", {"lr": 0.1})
    result = run_cli("report", path)
    assert result.returncode == 2 and "no traceEvents" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_quirks_flows_without_ends_and_a_rank(tmp_path):
    """Flow starts whose ends are missing, a distributedInfo rank, and no baseTimeNanoseconds."""
    from nsanalyze.read import read_profile

    trace = json.load(gzip.open(MLP))
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("ph") != "f"]
    trace["distributedInfo"] = {"backend": "nccl", "rank": 3, "world_size": 4}
    del trace["baseTimeNanoseconds"]
    export = read_profile(write_trace(tmp_path / "rank3.pt.trace.json", trace))
    assert export.rank == 3 and export.session_start_utc_ns is None
    assert export.scalar("SELECT COUNT(*) FROM kernels") == sum(1 for e in trace["traceEvents"] if e.get("cat") == "kernel")


def test_cuda_graph_kernels(tmp_path, analyzed):
    """Kernels of one graph launch share the cudaGraphLaunch's correlation id: one launch, many kernels."""
    trace = json.load(gzip.open(MLP))
    evs = trace["traceEvents"]
    kernels = sorted((e for e in evs if e.get("cat") == "kernel"), key=lambda e: e["ts"])[200:260]
    graph_corr = kernels[0]["args"]["correlation"]
    gone = {k["args"]["correlation"] for k in kernels} - {graph_corr}
    for k in kernels:
        k["args"]["correlation"] = graph_corr
        k["args"]["graph node id"] = k["args"].get("graph node id", 1)
    trace["traceEvents"] = [e for e in evs if not (e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in gone)]
    for e in trace["traceEvents"]:
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == graph_corr:
            e["name"] = "cudaGraphLaunch"
    path = write_trace(tmp_path / "graphed.pt.trace.json", trace)
    model = analyzed(path)
    assert model["timeline"]["kernels"] > 0 and program_findings(model)


def test_launches_by_framework_op_equal_a_count_over_the_trace(analyzed):
    """The launches of Optimizer.step#AdamW.step, counted straight off the JSON: the kernels whose launch
    call lies inside the annotation on its thread."""
    evs = events(ATTN)
    launches = analyzed(ATTN)["timeline"]["launches"]
    by_op = {row["op"]: row for row in launches["by_op"]}
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in evs
             if e.get("cat") == "user_annotation" and e["name"] == "Optimizer.step#AdamW.step"]
    inside = {e["args"]["correlation"] for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and any(t == e["tid"] and s <= e["ts"] <= end for t, s, end in spans)}
    kernels = {e["args"]["correlation"] for e in evs if e.get("cat") == "kernel"}
    assert by_op["Optimizer.step#AdamW.step"]["launches"] == len(inside & kernels) == 48
    assert by_op["Optimizer.step#AdamW.step"]["per_step"] == 8
    profiler = launches["profiler"]
    assert profiler["launches_per_step"] == pytest.approx(103)  # 618 launches over 6 steps
    assert sum(row["launches"] for row in launches["by_op"]) <= profiler["launches"]
    assert not profiler["record_shapes"] and profiler["cpu_ops"] == sum(1 for e in evs if e.get("cat") == "cpu_op")


def test_a_loop_of_ops_is_one_launch_source(analyzed):
    """kin54_emaloop's EMA, `p_ema.mul_(d).add_(p, alpha=1 - d)` over 152 tensors a step: aten::mul_ and aten::add_
    alternate 152 times in a row. Counted by op name they were 152 launches a step each, below aten::linear's 196, and
    launch-overhead named aten::linear (a user read). Counted off the JSON here: the kernels launched under the
    top-level mul_ and add_ ops of the steps' window; the loop is one source of that many launches, its ops' own rows
    left with what runs outside it, and launch-overhead names the loop with foreach advice."""
    path = REAL / "kin54_emaloop_base1_kineto.json.gz"
    model = analyzed(path)
    by_op = model["timeline"]["launches"]["by_op"]
    loop = by_op[0]
    assert loop["loop_ops"] == ["aten::mul_", "aten::add_"] and loop["per_step"] == 304
    steps = model["timeline"]["steps"]["count"]
    evs = events(path)
    kernels = {e["args"]["correlation"] for e in evs if e.get("cat") == "kernel"}
    ops = sorted((e["ts"], e["ts"] + e["dur"], e["tid"], e["name"]) for e in evs
                 if e.get("cat") == "cpu_op" and e["name"] in ("aten::mul_", "aten::add_"))
    starts = [op[0] for op in ops]
    launched = Counter()
    for r in evs:
        if r.get("cat") == "cuda_runtime" and r["args"].get("correlation") in kernels:
            at = bisect.bisect_right(starts, r["ts"]) - 1   # (the ops do not nest in one another here)
            if at >= 0 and ops[at][2] == r["tid"] and r["ts"] <= ops[at][1]:
                launched[ops[at][3]] += 1
    # every mul_ launch is the loop's; add_ runs elsewhere too (the optimizer, the residuals)
    assert launched["aten::mul_"] == 152 * steps and launched["aten::add_"] > 152 * steps
    assert loop["launches"] == 304 * steps
    assert all(row["per_step"] < 304 for row in by_op[1:])
    finding = next(f for f in model["findings"] if f["check"] == "launch-overhead")
    assert "a loop of aten::mul_ and aten::add_ issues 304 of " in finding["title"]
    assert "torch._foreach_lerp_" in finding["advice"]


def test_launch_overhead_names_the_op_and_the_profilers_own_cost():
    """The wiring on a real trace: with the idle threshold at 0 the launch finding speaks and names the op."""
    from nsanalyze.analyze import Options, analyze

    model = analyze([str(ATTN)], Options(thresholds={"launch-overhead.min_idle_share": 0.0}))
    finding = next(f for f in model["findings"] if f["check"] == "launch-overhead")
    assert finding["title"].endswith("aten::linear issues 14 of 103 launches a step")
    assert finding["evidence"]["launches_by_op"][0]["op"] == "aten::linear"
    assert any("profiler's own CPU-side work" in note for note in finding["notes"])  # 7.5 CPU ops a launch


def test_a_folder_of_per_rank_traces_reads_in_rank_order(tmp_path):
    """Two ranks' traces (the real trace, given distributedInfo ranks, names in the other order)."""
    from nsanalyze.analyze import analyze

    trace = json.load(gzip.open(MLP))
    for name, rank in (("a.pt.trace.json", 1), ("b.pt.trace.json", 0)):
        write_trace(tmp_path / name, {**trace, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}})
    (tmp_path / "notes.txt").write_text("not a trace")
    model = analyze([str(tmp_path)])
    ranks = model["timeline"]["merged"]["ranks"]
    assert [(r["rank"], Path(r["profile"]).name) for r in ranks] == [(0, "b.pt.trace.json"), (1, "a.pt.trace.json")]
    assert [p["kind"] for p in model["profiles"]] == ["kineto", "kineto"]
    assert program_findings(model)[0]["check"] == "unfused-elementwise"


def test_kernel_filter_on_a_trace():
    from nsanalyze.analyze import Options, analyze

    model = analyze([str(MLP)], Options(kernel="regex:gemm"))
    assert model["kernels"] and all("gemm" in k["name"] for k in model["kernels"])


def test_hostile_values_in_a_real_trace(tmp_path):
    """Values no profiler writes, put into the real trace: timestamps as text, infinite and huge numbers, an
    id beyond 64 bits, a lone surrogate in a name, events that are not objects. The rest still reads."""
    trace = json.load(gzip.open(MLP))
    evs = trace["traceEvents"]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    kernels[0]["ts"] = "soon"
    kernels[1]["dur"] = 1e300
    kernels[2]["args"]["correlation"] = 10 ** 30
    kernels[3]["name"] = "bad\ud800name"
    kernels[4]["ts"] = -1e200
    kernels[5]["args"]["grid"] = ["x", None, 10 ** 40]
    runtime = next(e for e in evs if e.get("cat") == "cuda_runtime")
    runtime["pid"] = 10 ** 25
    evs += [17, None, "text", [], {"ph": "X"}, {"ph": "X", "ts": 1.0, "cat": "kernel", "args": None, "pid": "GPU"}]
    path = tmp_path / "hostile.pt.trace.json"
    path.write_text(json.dumps(trace))
    result = run_cli("report", path, "-o", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    model = json.loads((tmp_path / "r.json").read_text())
    assert model["profiles"][0]["kind"] == "kineto" and model["timeline"]["kernels"] > 0


def test_optimizer_annotations_are_not_the_steps(tmp_path, analyzed):
    """Two optimizers a step (a GAN, an encoder and a decoder) give Optimizer.step#... twice as many
    instances as ProfilerStep#N: the steps stay ProfilerStep#N."""
    trace = json.load(gzip.open(MLP))
    first = [e for e in trace["traceEvents"]
             if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step")]
    for e in first:
        e["dur"] /= 2
    extra = [{**e, "ts": e["ts"] + e["dur"] + 0.001} for e in first]  # a second AdamW, named alike
    trace["traceEvents"] += extra
    model = analyzed(write_trace(tmp_path / "two_optimizers.pt.trace.json", trace))
    assert model["timeline"]["steps"]["name"] == "ProfilerStep#N"


def launch_bound(trace: dict) -> dict:
    """The real trace with its GPU work made tiny: each kernel, copy and memset runs 1 us, 5 us after its
    launch call ends (or when the one before it on the stream ends). The host's calls, ops and annotations
    stay as recorded: the loop becomes launch-bound, as a small model's is."""
    evs = trace["traceEvents"]
    call_end = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in evs
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and e["args"].get("correlation") in call_end), key=lambda e: call_end[e["args"]["correlation"]])
    free = 0.0
    for e in gpu:
        e["ts"] = max(call_end[e["args"]["correlation"]] + 5.0, free)
        e["dur"] = 1.0
        free = e["ts"] + e["dur"]
    keep = {id(e) for e in gpu}
    trace["traceEvents"] = [e for e in evs if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
                            or id(e) in keep]
    return trace


def test_a_launch_bound_trace_names_the_op_that_launches_most(tmp_path, analyzed):
    trace = launch_bound(json.load(gzip.open(ATTN)))
    model = analyzed(write_trace(tmp_path / "launch_bound.pt.trace.json", trace))
    first = program_findings(model)[0]
    assert first["check"] == "launch-overhead"
    by_op = model["timeline"]["launches"]["by_op"]
    assert first["title"].endswith(f"{by_op[0]['op']} issues {by_op[0]['per_step']:.0f} of "
                                   f"{model['timeline']['launches']['profiler']['launches_per_step']:.0f} launches a step")
    assert first["advice"].startswith(f"`{by_op[0]['op']}` issues ")   # the trace's name in a code span
    budget = {p["part"]: p["ns"] for p in model["timeline"]["budget"]}
    assert sum(budget.values()) == pytest.approx(model["timeline"]["span_ns"], rel=1e-6)  # a budget that adds up
    assert first["estimated_savings_ns"] <= budget["idle_launch"] + 1


def test_a_step_annotation_around_everything_is_not_the_op(tmp_path, analyzed):
    """record_function("train_step") around each step's body: launches go to the ops inside it."""
    trace = json.load(gzip.open(ATTN))
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    trace["traceEvents"] += [{**e, "name": "train_step", "ts": e["ts"] + 0.001, "dur": e["dur"] - 0.002} for e in steps]
    model = analyzed(write_trace(tmp_path / "train_step.pt.trace.json", trace))
    by_op = {row["op"]: row["launches"] for row in model["timeline"]["launches"]["by_op"]}
    assert "train_step" not in by_op and by_op["Optimizer.step#AdamW.step"] == 48 and by_op["aten::linear"] == 84


def _launch_finding(model: dict) -> dict:
    return next(f for f in model["findings"] if f["check"] == "launch-overhead")


def test_the_profilers_own_host_time_is_noted_and_savings_stay_within_the_trace(analyzed):
    """The launch-bound MLP under torch.profiler (with and without record_shapes) and under nsys: the
    trace's note gives its host time a launch, off its own ProfilerStep#N host ranges and launch calls;
    the saving is the window's idle_launch (with the idle_host its replay claims beside it, where it does), within
    the traced steps. Measured: 62.6 us a launch under
    torch.profiler, 42.7 us with record_shapes (a run whose CUDA calls were all faster), 47.8 us under nsys."""
    per_launch = {}
    for path in (EAGER, EAGER_SHAPES):
        model = analyzed(path)
        finding = _launch_finding(model)
        evs = events(path)
        host = np.median([e["dur"] for e in evs if e.get("cat") == "user_annotation"
                          and e["name"].startswith("ProfilerStep#")]) * 1000
        calls = sum(1 for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and e["name"].startswith(("cudaLaunch", "cuLaunch")))
        steps = sum(1 for e in evs if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
        per_launch[path] = finding["evidence"]["host_ns_per_launch"]["value"]
        assert per_launch[path] == pytest.approx(host / (calls / steps), rel=0.01)
        note = next(n for n in finding["notes"] if "profiler's own CPU-side work" in n)
        assert f"{per_launch[path] / 1e3:.1f} us of host time a launch" in note
        assert ("record_shapes=True" in note) == (path == EAGER_SHAPES)
        # the way to confirm it: nsys, or a trace without record_shapes where the trace has them on (the key in its
        # cpu ops' args: "Input Dims")
        shapes = any("Input Dims" in e.get("args", {}) for e in evs if e.get("cat") == "cpu_op")
        assert ("a trace without record_shapes" in note) == shapes == (path == EAGER_SHAPES)
        assert finding["evidence"]["cpu_ops_per_launch"]["value"] == pytest.approx(
            sum(1 for e in evs if e.get("cat") == "cpu_op") / calls, rel=1e-3)  # 5.6 on both
        budget = {p["part"]: p["ns"] for p in model["timeline"]["budget"]}
        assert sum(budget.values()) == pytest.approx(model["timeline"]["span_ns"], rel=1e-6)
        # (its idle_launch, and the idle_host beside it where the replay of its change claims some: claimed_parts)
        claimed = sum(p["ns"] for p in finding["evidence"].get("claimed_parts", ())) or budget["idle_launch"]
        assert finding["estimated_savings_ns"] <= claimed + 1 <= model["timeline"]["span_ns"]
        traced = model["timeline"]["steps"]["count"] * model["timeline"]["steps"]["median_ns"]
        assert model["timeline"]["span_ns"] == pytest.approx(traced, rel=0.1)  # the window is the traced steps
    nsys = analyzed(EAGER_NSYS)
    finding = _launch_finding(nsys)
    assert not any("profiler" in n for n in finding["notes"]) and "host_ns_per_launch" not in finding["evidence"]
    nsys_per_launch = nsys["timeline"]["steps"]["host_median_ns"] / 73
    assert per_launch[EAGER] == pytest.approx(62.6e3, rel=0.01)
    assert per_launch[EAGER_SHAPES] == pytest.approx(42.7e3, rel=0.01)
    assert nsys_per_launch == pytest.approx(47.8e3, rel=0.01)


def test_a_launch_bound_trace_names_the_backward_op_that_launches_most(analyzed):
    """graphs_train.py eager: the Linear layers' backward (on the autograd thread) launches most; its count is
    the kernels whose launch call lies inside that op's events on their thread, counted off the JSON."""
    evs = events(EAGER)
    launches = analyzed(EAGER)["timeline"]["launches"]
    top = launches["by_op"][0]
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in evs if e.get("cat") == "cpu_op" and e["name"] == top["op"]]
    inside = {e["args"]["correlation"] for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and any(t == e["tid"] and s <= e["ts"] <= end for t, s, end in spans)}
    kernels = {e["args"]["correlation"] for e in evs if e.get("cat") == "kernel"}
    assert top["op"] == "autograd::engine::evaluate_function: AddmmBackward0"
    assert top["launches"] == len(inside & kernels) == 162 and top["per_step"] == 27
    assert _launch_finding(analyzed(EAGER))["title"].endswith(f"{top['op']} issues 27 of 73 launches a step")


def test_a_truncated_real_trace_of_a_graph_replay_is_bad_input(tmp_path):
    """Cut inside the event list of the graphed trace (as a killed export leaves it), and cut just
    before its closing brace: one line, exit status 2."""
    data = gzip.open(GRAPHED).read()
    for name, cut in (("mid", data[: len(data) * 2 // 3]), ("end", data.rstrip()[:-1])):
        path = tmp_path / f"{name}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(cut))
        result = run_cli("report", path)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and "truncated" in lines[0], result.stderr


def test_flows_without_ends_and_without_starts_in_the_graphed_trace(tmp_path, analyzed):
    """The ac2g flows are not what joins a graph's kernels to its cudaGraphLaunch (the correlation id is):
    with every flow end, or every flow start, removed, the steps and the first cause are unchanged."""
    whole = analyzed(GRAPHED)
    trace = json.load(gzip.open(GRAPHED))
    for phase in ("f", "s"):
        cut = {**trace, "traceEvents": [e for e in trace["traceEvents"] if e.get("ph") != phase]}
        del cut["deviceProperties"]  # and no deviceProperties, no distributedInfo: rank 0, no GPU name
        model = analyzed(write_trace(tmp_path / f"no_{phase}.pt.trace.json", cut))
        assert model["timeline"]["steps"]["median_ns"] == whole["timeline"]["steps"]["median_ns"]
        assert model["timeline"]["steps"]["clock"] == "gpu"
        assert [f["check"] for f in program_findings(model)][:1] == [f["check"] for f in program_findings(whole)][:1]


@pytest.mark.parametrize("piece", [1, 997, 65536], ids=["1B", "997B", "64KB"])
def test_the_streamed_reader_gives_json_loads_events(monkeypatch, piece):
    """The trace is read a piece at a time (read.kineto._Document): whatever the pieces, every event and
    every other top-level key are those json.load gives, NaN, escapes and numbers cut across pieces
    included. The real graphed trace, whole for pieces of 997 B and 64 KB, its first 300 events for 1 B."""
    from nsanalyze.read import kineto

    data = gzip.open(GRAPHED).read()
    whole = json.loads(data)
    if piece == 1:
        whole["traceEvents"] = whole["traceEvents"][:300] + [{"ph": "X", "ts": float("nan"), "name": "q\"\u00e9\ud800"}]
        data = json.dumps(whole, indent=1).encode()
    monkeypatch.setattr(kineto, "CHUNK", piece)
    seen = []

    class Pieces:   # a stream that hands out at most `piece` bytes a read, as a pipe or a decompressor may
        def __init__(self, data):
            self.data, self.at = data, 0

        def read(self, n):
            self.at += min(n, piece)
            return self.data[self.at - min(n, piece):self.at]

    top = kineto._Document(Pieces(data)).read("traceEvents", seen.append)
    assert json.dumps(seen) == json.dumps(whole["traceEvents"])
    assert top == {**whole, "traceEvents": kineto.STREAMED}


def test_batches_decoded_at_once_give_the_scanners_values():
    """The fast path (msgspec, a piece's whole values at once) gives the values the standard library's scanner gives,
    and leaves to it what msgspec refuses: on the real traces of two twins (kin54, 120k and 70k events) nearly every
    event comes from the fast path; NaN, a number past a double, a lone surrogate escape, an id past 64 bits and
    control characters escaped in a name, put into one of them, come back as json.load reads them, the batches
    around them through the fast path still."""
    from nsanalyze.read import kineto

    for name in ("kin54_emaloop_base1_kineto.json.gz", "kin54_sync53_base1_kineto.json.gz"):
        data = gzip.open(REAL / name).read()
        seen = []
        document = kineto._Document(io.BytesIO(data))
        top = document.read("traceEvents", seen.append)
        whole = json.loads(data)
        assert seen == whole["traceEvents"] and top == {**whole, "traceEvents": kineto.STREAMED}
        assert document.fast_values >= 0.95 * len(seen)
    whole["traceEvents"][20_000]["dur"] = float("nan")
    whole["traceEvents"][40_000]["args"] = {"correlation": 10 ** 30, "bytes": 1e400, "name": "a\ud800\u0001b"}
    text = json.dumps(whole, indent=1)   # the name's lone surrogate and control character as escapes
    text = text.replace("Infinity", "1e400")   # json.dumps writes inf as Infinity; 1e400 is what reads as it
    seen = []
    document = kineto._Document(io.BytesIO(text.encode()))
    document.read("traceEvents", seen.append)
    expected = json.loads(text)["traceEvents"]
    assert json.dumps(seen) == json.dumps(expected)
    assert seen[40_000]["args"]["bytes"] == float("inf") and seen[40_000]["args"]["correlation"] == 10 ** 30
    assert document.fast_values >= 0.8 * len(seen)   # the two batches refused (1 MB of text each): the exact path's


def test_a_compressed_trace_is_read_as_a_stream(tmp_path):
    """A .json.gz trace is decompressed as it is read: the cache holds its conversion, no decompressed
    copy; its report is the one of the same trace uncompressed, and of the trace in UTF-16."""
    cache = tmp_path / "cache"
    plain = tmp_path / "plain.pt.trace.json"
    plain.write_bytes(gzip.open(GRAPHED).read())
    utf16 = tmp_path / "utf16.pt.trace.json"
    utf16.write_bytes(plain.read_text().encode("utf-16"))
    reports = []
    for path in (GRAPHED, plain, utf16):
        result = subprocess.run([sys.executable, "-m", "nsanalyze", "report", str(path), "-o", "-"],
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "NSANALYZE_CACHE": str(cache)})
        assert result.returncode == 0, result.stderr
        reports.append(json.loads(result.stdout.replace(str(path), "TRACE")))
        if path == GRAPHED:
            assert [p.name.endswith(".sqlite") for p in cache.iterdir()] == [True]
    assert reports[0]["timeline"]["kernels"] > 0 and reports[0] == reports[1] == reports[2]


def test_a_gzip_bomb_trace_is_refused_and_leaves_nothing(tmp_path):
    """A .json.gz that expands past the limits while it is streamed: one line, exit 2, no partial file."""
    head = gzip.open(GRAPHED).read()[:100_000]
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    bomb.write_bytes(gzip.compress(head + b" " * (64 << 20)))
    cache = tmp_path / "cache"
    result = subprocess.run([sys.executable, "-m", "nsanalyze", "report", str(bomb)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "NSANALYZE_CACHE": str(cache),
                                              "NSANALYZE_MAX_EXPANSION": "10"})
    assert result.returncode == 2 and "decompression bomb" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and list(cache.iterdir()) == []


@pytest.mark.parametrize("where", ["event", "other key"])
def test_a_trace_nested_too_deeply_is_one_line(tmp_path, where):
    """Arrays nested 100,000 deep inside an event, or in a top-level key beside the events: one line."""
    trace = gzip.open(GRAPHED).read().decode()
    deep = "[" * 100_000 + "]" * 100_000
    cut = trace.index('"traceEvents"')
    text = (trace.replace('"traceEvents": [', '"traceEvents": [' + deep + ",", 1) if where == "event"
            else trace[:cut] + f'"deep": {deep}, ' + trace[cut:])
    path = tmp_path / "deep.pt.trace.json"
    path.write_text(text)
    result = run_cli("report", path)
    assert result.returncode == 2 and "nested too deeply" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_call_newer_than_kinetos_name_table_gets_its_cupti_name():
    """Kineto names the runtime call of CUPTI callback id 486 "INVALID" (its table predates CUDA 12.8); NVIDIA's
    cupti_runtime_cbid.h of CUDA 13.0 names it cudaEventElapsedTime. The timed ResNet-50's trace makes one after
    each timing's two cudaEventQuery (torch.cuda.Event.elapsed_time): every one is read under that name, none
    under "INVALID"."""
    from nsanalyze.read import read_profile

    path = REAL / "kin54_time53_base1_kineto.json.gz"
    unnamed = [e for e in events(path) if e.get("cat") == "cuda_runtime" and e.get("name") == "INVALID"]
    assert unnamed and {e["args"]["cbid"] for e in unnamed} == {486}
    export = read_profile(path)
    names = Counter(name for (name,) in export.query("SELECT name FROM api"))
    assert names["cudaEventElapsedTime"] == len(unnamed) and names["INVALID"] == 0


def test_the_framework_op_and_the_waits_both_lead_the_launch_advice(analyzed):
    """kin54_itemlog's trace waits twice a step (`.item()`) and one autograd op issues most of its launches. The
    waits' paragraph comes first and the op's paragraph after it; the card's graph example, which a step that waits
    cannot use yet, is left out. Dropping that example once replaced the advice and lost the op's paragraph."""
    path = REAL / "kin54_itemlog_base1_kineto.json.gz"
    trace = json.loads(gzip.decompress(path.read_bytes()))
    syncs = sum(1 for e in trace["traceEvents"] if "Synchronize" in str(e.get("name", "")) and e.get("ph") == "X")
    assert syncs > 0
    finding = _launch_finding(analyzed(path))
    advice = finding["advice"]
    assert advice.startswith("Each step waits for the GPU 2 times")
    op = advice.index("` issues ")
    assert 0 < op < advice.index("Launch fewer, bigger kernels.") and "```python" not in advice
