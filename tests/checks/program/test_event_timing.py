"""event-timing on real twins (fixtures/real/README.md): timing code left in a training loop (an event pair around each
layer, synchronized every step), against the same loop untimed. The prediction is checked against SQL's mean GPU
step periods."""

import pytest

from tests.conftest import REAL, program_findings, sql_saved_per_step

# written from trit52's MLP (8 layers timed, each synchronized, host-bound); a GPU-bound ResNet-50 with its 5 stages
# timed (time53, recorded by a helper after the check was written, not tuned to)
WRITTEN_FROM = ("trit52_timed_base_nsys.sqlite.xz", "trit52_timed_fix_nsys.sqlite.xz", 8)
PAIRS = [WRITTEN_FROM, ("time53_resnet256_base_nsys.sqlite.xz", "time53_resnet256_fix_nsys.sqlite.xz", 5)]
TUNERS = ["blind_cudnnbench_base_nsys.sqlite.xz", "trit52_triton_base1_nsys.sqlite.xz"]


@pytest.mark.parametrize("base, fix, _", PAIRS)
def test_timing_code_is_named_and_its_price_holds(analyzed, base, fix, _):
    """What removing the timing saves a step is within 25% of what the untimed twin saved (SQL: 0.72 ms of a 4.47
    ms step on trit52's MLP, where host-sync had priced its syncs at 0.04 ms: the cost is the host's event calls and
    its way to them, not the waits; 5.8 ms of a 60.5 ms step on the GPU-bound ResNet-50, where each wait drains the
    GPU's queue), and the twin has no such finding."""
    model = analyzed(REAL / base)
    finding = next(f for f in program_findings(model) if f["check"] == "event-timing")
    predicted = finding["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert predicted == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.25)
    assert "replayed_savings_ns" in finding["evidence"]
    assert "event-timing" not in {f["check"] for f in analyzed(REAL / fix)["findings"]}


@pytest.mark.parametrize("base, _, __", [WRITTEN_FROM])
def test_the_timings_syncs_are_not_sold_again(analyzed, base, _, __):
    """The syncs are all the timing's (timing_code.sync_share): host-sync, which priced them before, no longer
    speaks, and the findings together promise no more than the window."""
    model = analyzed(REAL / base)
    assert model["timeline"]["timing_code"]["sync_share"] == 1.0
    checks = [f["check"] for f in program_findings(model)]
    assert "host-sync" not in checks
    steps = model["timeline"]["steps"]
    assert sum(f["estimated_savings_ns"] for f in program_findings(model)) <= steps["mean_ns"] * steps["count"]


@pytest.mark.parametrize("base, fix, per_step", PAIRS)
def test_whatif_without_the_timing_saves_what_the_fix_saved(analyzed, base, fix, per_step):
    """`whatif --untime` replays the steady steps without the timing's calls and the host's way to them: within 25%
    of what the untimed twin saved (SQL); on the twin, with no timing, nothing changes."""
    from nsanalyze.analyze import Options
    from nsanalyze.whatif import WhatIf, whatif

    result = whatif([str(REAL / base)], Options(), WhatIf(untime=True))[0]
    assert result["self_check"]["trusted"]
    # 8 (5) a step; trit52's first steady step still grows the allocator between its records (cudaMalloc inside the
    # timing: no clean pair), so it counts 1
    assert result["changes"][0]["timings"] == pytest.approx(per_step * result["replayed_steps"], abs=per_step)
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert saved == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.25)
    twin = whatif([str(REAL / fix)], Options(), WhatIf(untime=True))[0]
    assert twin["changes"][0]["timings"] == 0
    assert twin["predicted_mean_step_ns"] == pytest.approx(twin["base_mean_step_ns"], rel=1e-9)


@pytest.mark.parametrize("name", TUNERS)
def test_a_tuners_trials_are_not_timing_code(analyzed, name):
    """cuDNN's and Triton's trials are warmed up: autotuning's, never event-timing's."""
    checks = {f["check"] for f in analyzed(REAL / name)["findings"]}
    assert "autotuning" in checks and "event-timing" not in checks


@pytest.mark.parametrize("base, _, __", [WRITTEN_FROM])
def test_a_graph_is_advised_after_the_timing(analyzed, base, _, __):
    """launch-overhead prices one graph launch a step, which cannot capture a step that waits: its advice starts
    from the timing code that holds the waits (SQL: 8 event syncs a step, all the step's syncs), not from data
    moved piece by piece."""
    model = analyzed(REAL / base)
    launch = next(f for f in program_findings(model) if f["check"] == "launch-overhead")
    first_line = launch["advice"].split("\n\n")[0]
    assert "its own timing code (8 CUDA event pairs a step" in first_line and "event-timing" in first_line
    assert "piece by piece" not in launch["advice"]


def test_a_silent_timing_check_is_not_named_in_the_graph_advice(analyzed):
    """time53_resnet (ResNet-50 at batch 64, host-bound): 5 event pairs a step, each synchronized (SQL: 5
    cudaEventSynchronize a step), hold the steps' waits, but event-timing's replay stays under its threshold and it
    is silent: launch-overhead's advice tells of the timing code without pointing at a finding that is not there."""
    model = analyzed(REAL / "time53_resnet_base_nsys.sqlite.xz")
    assert "event-timing" not in {f["check"] for f in model["findings"]}
    launch = next(f for f in program_findings(model) if f["check"] == "launch-overhead")
    first_line = launch["advice"].split("\n\n")[0]
    assert "its own timing code (5 CUDA event pairs a step, each synchronized)" in first_line
    assert "event-timing" not in launch["advice"]


def test_timing_that_costs_nothing_measurable_is_not_named(analyzed):
    """A host-bound GPT with its 3 phases timed and synchronized every step (time53, blind): the untimed twin saved
    nothing measurable (SQL: -0.5 ms a step of 22 ms; the call's two bases lie 4 ms apart). The timing is found (3
    pairs a step) but its replay saves under the check's 3% of the window, so it is not named."""
    model = analyzed(REAL / "time53_gpt_base_nsys.sqlite.xz")
    assert model["timeline"]["timing_code"]["timings_per_step"] == 3
    assert "event-timing" not in {f["check"] for f in model["findings"]}
    saved = sql_saved_per_step(analyzed, "time53_gpt_base_nsys.sqlite.xz", "time53_gpt_fix_nsys.sqlite.xz")
    assert saved < 0.03 * model["timeline"]["steps"]["mean_ns"]


@pytest.mark.parametrize("base, words", [("trit52_timed_base_nsys.sqlite.xz", "CUDA calls a step and the host's time"),
                                         ("time53_resnet256_base_nsys.sqlite.xz", "empties the GPU's queue")])
def test_the_title_says_where_the_time_goes(analyzed, base, words):
    """Host-bound, the saving is the host's work on the timing (its calls and their way: most of it outside the
    waits); GPU-bound, the waits hold more than the whole saving (work that runs anyway) and what goes is the GPU's
    idle time after each one."""
    model = analyzed(REAL / base)
    finding = next(f for f in program_findings(model) if f["check"] == "event-timing")
    per_step = finding["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    waits = finding["evidence"]["timing_sync_ns_per_step"]["value"]
    host = finding["evidence"]["timing_host_ns_per_step"]["value"]
    assert words in finding["title"]
    assert (host - waits >= 0.5 * per_step) == ("host's time" in words)


# torch.profiler (Kineto) traces of time53's and sync53's ResNet-50 at batch 256 (fixtures/real/README.md, Kin54:
# recorded by a helper after the replay was extended to traces, not tuned to), 8 profiler steps each
KINETO_TIMED = ["kin54_time53_base1_kineto.json.gz", "kin54_time53_base2_kineto.json.gz"]


def trace_calls_per_step(name: str, call: str) -> tuple[float, float]:
    """(calls a step, their host time a step in ns) of one runtime call in a Kineto trace, by plain JSON: the calls
    that start inside a `ProfilerStep#N` host range, over those ranges."""
    import gzip
    import json

    with gzip.open(REAL / name) as trace:
        events = json.load(trace)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    calls = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("name") == call
             and any(start <= e["ts"] < end for start, end in steps)]
    return len(calls) / len(steps), sum(e["dur"] for e in calls) * 1000 / len(steps)


def idle_causes(model: dict) -> list[dict]:
    """The program findings on the GPU's idle time (the checks of section `busy`), in rank order. The ResNet-50 at
    batch 256 also runs its BatchNorm apart from its ReLU and add, which unfused-normalization prices above the
    timing (fixtures/real Fuse55: torch.compile saved 16.7 ms a step of such a program), so these traces' first
    finding overall is that one."""
    from nsanalyze.checks import check_by_id

    return [f for f in program_findings(model) if check_by_id(f["check"]).section == "busy"]


@pytest.mark.parametrize("name", KINETO_TIMED)
def test_timing_code_in_a_kineto_trace_is_named_and_holds_the_syncs(analyzed, name):
    """The trace's five timed stages a step are the timing code (PyTorch's launch checks call cudaGetErrorString
    between the stem's records: a query helper, as nsys never shows it), its syncs are the trace's
    cudaEventSynchronize calls (their time a step within 10%), and host-sync does not sell them again."""
    model = analyzed(REAL / name)
    timing = model["timeline"]["timing_code"]
    syncs, sync_ns = trace_calls_per_step(name, "cudaEventSynchronize")
    assert syncs == 5 and timing["timings_per_step"] == syncs
    assert timing["sync_share"] >= 0.95
    assert timing["sync_ns_per_step"] == pytest.approx(sync_ns, rel=0.10)
    checks = [f["check"] for f in program_findings(model)]
    assert idle_causes(model)[0]["check"] == "event-timing" and "host-sync" not in checks
    finding = idle_causes(model)[0]
    assert finding["estimated_savings_ns"] <= finding["evidence"]["replayed_savings_ns"]["value"] * 1.001


def test_the_other_timing_idiom_in_a_kineto_trace_is_host_syncs(analyzed):
    """sync53 under torch.profiler: host timers between torch.cuda.synchronize() calls (10 a step in the trace) are
    host-sync's, the first cause of the GPU's idle time; no event pairs, so no timing code; the untimed twin has neither."""
    base, fix = "kin54_sync53_base1_kineto.json.gz", "kin54_sync53_fix1_kineto.json.gz"
    assert trace_calls_per_step(base, "cudaDeviceSynchronize")[0] == 10
    model = analyzed(REAL / base)
    assert model["timeline"].get("timing_code") is None
    assert idle_causes(model)[0]["check"] == "host-sync"
    assert not {"host-sync", "event-timing"} & {f["check"] for f in program_findings(analyzed(REAL / fix))}


def test_a_step_that_calls_torch_cuda_synchronize_is_told_to_drop_it_first(analyzed):
    """sync53's GPT (host timers between torch.cuda.synchronize() calls, nsys): launch-overhead's advice starts from
    the device syncs the step makes (SQL: cudaDeviceSynchronize in every step range), not from copies moved piece by
    piece, which the step does not make."""
    from tests.conftest import sql

    name = "sync53_gpt_base_nsys.sqlite.xz"
    # the syncs first (a few thousand), then each range's: a join of every range with every runtime call took 60 s
    per_range = sql(REAL / name, """WITH syncs AS MATERIALIZED (SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME
        WHERE nameId IN (SELECT id FROM StringIds WHERE value LIKE 'cudaDeviceSynchronize%'))
        SELECT COUNT(y.start) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
        LEFT JOIN syncs y ON y.start >= n.start AND y.start < n.end
        WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %' GROUP BY n.start""")
    assert min(count for (count,) in per_range) >= 3
    launch = next(f for f in analyzed(REAL / name)["findings"] if f["check"] == "launch-overhead")
    assert launch["advice"].startswith("Each step calls `cudaDeviceSynchronize`")
    assert "piece by piece" not in launch["advice"]
