"""autotuning on real twins (fixtures/real/README.md): cuDNN's benchmark mode with a new input shape every step,
against the same program with it off. The prediction is checked against SQL's mean GPU step periods."""

import bisect
import re
import statistics

import pytest

from tests.conftest import REAL, program_findings, sql, sql_saved_per_step

# the audio CNN the check was written from, and a multi-scale resnet18 recorded after it (tune52, not tuned to)
PAIRS = [("blind_cudnnbench_base_nsys.sqlite.xz", "blind_cudnnbench_fix_nsys.sqlite.xz"),
         ("blind_cudnnbench_base2_nsys.sqlite.xz", "blind_cudnnbench_fix2_nsys.sqlite.xz"),
         ("tune52_ms_base1_nsys.sqlite.xz", "tune52_ms_fix1_nsys.sqlite.xz")]   # its second pair: bench/calibration.py
# Triton's autotuner with the varying length in its key (trit52, recorded after): not replayed by whatif here (its
# 10,000 kernels a step make the longest replay of the fixtures)
TRITON = ("trit52_triton_base1_nsys.sqlite.xz", "trit52_triton_fix1_nsys.sqlite.xz")


@pytest.mark.parametrize("base, fix", [*PAIRS, TRITON])
def test_benchmark_mode_with_new_shapes_is_the_first_finding_and_its_price_holds(analyzed, base, fix):
    """The tuning is the first finding of the base, and what it saves a step is within 25% of what turning
    benchmark mode off saved (SQL: 591 and 505 ms a step on the audio CNN, 2,181 and 1,551 ms on resnet18; Triton's
    autotuner keyed on a length that changes every step, 619 ms); the twin has no such finding. Before the check, the audio CNN's first finding was layout-conversion (the trials'
    NCHW kernels) at -93%."""
    model = analyzed(REAL / base)
    first = program_findings(model)[0]
    assert first["check"] == "autotuning"
    predicted = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert predicted == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.25)
    assert predicted < model["timeline"]["steps"]["mean_ns"]
    assert "replayed_savings_ns" in first["evidence"]
    assert "autotuning" not in {f["check"] for f in analyzed(REAL / fix)["findings"]}


@pytest.mark.parametrize("base, _", PAIRS)
def test_the_tuners_syncs_are_not_sold_again(analyzed, base, _):
    """The syncs are all the tuner's (timed_trials.sync_share): host-sync, which priced them before, no longer
    speaks, and no finding beside the tuning promises more than the step it leaves."""
    model = analyzed(REAL / base)
    checks = [f["check"] for f in program_findings(model)]
    assert "host-sync" not in checks
    steps = model["timeline"]["steps"]
    total = sum(f["estimated_savings_ns"] for f in program_findings(model))
    assert total <= steps["mean_ns"] * steps["count"]


@pytest.mark.parametrize("base, fix", PAIRS)
def test_whatif_without_the_trials_saves_what_the_fix_saved(analyzed, base, fix):
    """`whatif --untune` replays every steady step without the tuner's calls, kernels and host time: the mean step
    it saves is within 25% of what turning benchmark mode off saved (SQL), and the twin, which has no trials, is
    unchanged."""
    from nsanalyze.analyze import Options
    from nsanalyze.whatif import WhatIf, whatif

    result = whatif([str(REAL / base)], Options(), WhatIf(untune=True))[0]
    assert result["self_check"]["trusted"]
    assert result["changes"][0]["trials"] > 100 * result["replayed_steps"]
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert saved == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.25)
    twin = whatif([str(REAL / fix)], Options(), WhatIf(untune=True))[0]
    assert twin["changes"][0]["trials"] == 0
    assert twin["predicted_mean_step_ns"] == pytest.approx(twin["base_mean_step_ns"], rel=1e-9)


def _event_records_per_step(path) -> list[int]:
    """Per NVTX step range, the cudaEventRecord calls made in it (SQL)."""
    rows = sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'step %' ORDER BY start")
    records = sorted(s for (s,) in sql(path, """SELECT r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
                                                ON s.id = r.nameId WHERE s.value LIKE 'cudaEventRecord%'"""))
    return [bisect.bisect_left(records, end) - bisect.bisect_left(records, start) for start, end in rows]


def test_a_tuner_done_before_the_window_is_not_named(analyzed):
    """benchmark mode on, one image size: cuDNN tunes in step 0 only (SQL: 650 event records there, none after),
    which the steady window leaves out; the steps are launch-bound."""
    path = REAL / "tune52_fixed_on_nsys.sqlite.xz"
    per_step = _event_records_per_step(path)
    assert per_step[0] > 300 and sum(per_step[1:]) == 0
    model = analyzed(path)
    assert "timed_trials" not in model["timeline"]
    assert program_findings(model)[0]["check"] == "launch-overhead"


def test_a_tuner_in_a_few_steps_is_a_slow_steps_cause(analyzed):
    """Sizes bucketed to 16 shapes: the tuner runs in the step that meets each new one (SQL: 9 of the window's 290
    steps record 640-650 events, the rest none). That is no tuning of every step (no autotuning finding): slow-steps names
    those steps, with their timed trials counted as SQL counts them, and its advice starts from the tuner."""
    path = REAL / "tune52_bucket_on_nsys.sqlite.xz"
    model = analyzed(path)
    assert "autotuning" not in {f["check"] for f in model["findings"]}
    slow = next(f for f in program_findings(model) if f["check"] == "slow-steps")
    records = _event_records_per_step(path)
    named = slow["evidence"]["slow_steps"]
    window = range(model["timeline"]["steps"]["first_step"], model["timeline"]["steps"]["last_step"] + 1)
    tuned = [i for i in window if records[i] > 0]
    assert len(tuned) == 9 and set(tuned) <= set(named) and len(named) <= len(tuned) + 2   # (two slow for other reasons)
    assert f"{statistics.median(records[i] for i in named):.0f} event records" in slow["title"]
    assert slow["advice"].startswith("Their extra calls are timed trials")


@pytest.mark.parametrize("base, _", PAIRS[2:])   # tune52_ms: the two whose window holds steps that stand out
def test_slower_tunings_of_a_tuner_in_every_step_are_the_tuners(analyzed, base, _):
    """benchmark mode meeting a new shape every step: the steps that stand out (SQL: GPU periods over the check's
    factor of the median) record as many events as the others, so their excess is slower tuning, not logging or a
    checkpoint: slow-steps no longer speaks beside autotuning (a user read: 2 steps, 2.28 s, with advice on
    histograms and checkpoints, the window then sold whole), and autotuning's saving stays within the window."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.program import slow_steps
    from tests.conftest import sql_gpu_step_periods

    path = REAL / base
    model = analyzed(path)
    steps = model["timeline"]["steps"]
    first = steps["first_step"]
    periods = sql_gpu_step_periods(path)[first:first + steps["count"] - 1]
    records = _event_records_per_step(path)[first:first + len(periods)]
    factor = limits_for(slow_steps).outlier_factor
    slow = [i for i, p in enumerate(periods) if p > factor * statistics.median(periods)]
    others = [records[i] for i in range(len(periods)) if i not in slow]
    assert slow and min(records[i] for i in slow) >= 0.9 * statistics.median(others) >= 300
    checks = {f["check"]: f for f in program_findings(model)}
    assert "slow-steps" not in checks
    assert checks["autotuning"]["estimated_savings_ns"] <= model["timeline"]["span_ns"]


def test_timing_code_is_no_tuner(analyzed):
    """Each of 8 layers timed every step by an event pair, synced at once (SQL: 8 cudaEventSynchronize a step):
    the trials' pattern, but nothing is warmed up first (the program's own work, timed once), so no tuning is
    found and nothing promises to remove the layers' kernels; the timing's own cost (0.72 ms a step by the twin)
    is event-timing's to tell (tests/checks/program/test_event_timing.py)."""
    path = REAL / "trit52_timed_base_nsys.sqlite.xz"
    (syncs,) = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                            WHERE s.value LIKE 'cudaEventSynchronize%'""")[0]
    (steps,) = sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'step %'")[0]
    assert syncs == 8 * steps
    model = analyzed(path)
    assert "timed_trials" not in model["timeline"]
    assert "autotuning" not in {f["check"] for f in model["findings"]}


def test_the_header_says_the_roles_count_the_tuners_candidates(analyzed):
    """The header's kernel time by role counts every kernel, the tuner's candidates with them (cudnnbench: "layout
    changes 46%", mostly the trials' NCHW kernels); it says what share of the replayed steps' GPU time those are, where
    there are some, and nothing of the kind without a tuner."""
    from nsanalyze.render.format import window_lines

    base = analyzed(REAL / "blind_cudnnbench_base_nsys.sqlite.xz")["timeline"]
    line = next(text for text in window_lines(base) if text.startswith("GPU kernel time by role"))
    assert f"({base['timed_trials']['kernel_share']:.0%} of the replayed steps' GPU time is an autotuner's" in line
    assert base["timed_trials"]["kernel_share"] > 0.8
    fixed = analyzed(REAL / "blind_cudnnbench_fix_nsys.sqlite.xz")["timeline"]
    assert not any("autotuner" in text for text in window_lines(fixed))


def test_the_example_pads_the_sizes_that_vary_not_an_audio_length(analyzed):
    """tune52_ms is a ResNet-18 whose images change height and width every step (fixtures/real/README.md, Tune52:
    multiples of 8 in [128, 320]); its example padded the last dimension to whole seconds of 16 kHz audio (a user
    read: "absurd" for images of 128-320 pixels). The example now pads height and width up to multiples of 64."""
    finding = next(f for f in analyzed(REAL / "tune52_ms_base1_nsys.sqlite.xz")["findings"] if f["check"] == "autotuning")
    assert "16000" not in finding["advice"] and "h, w = x.shape[-2:]" in finding["advice"]
    # the block replayed is consecutive steps with the median one among them (read as the steps nearest its length)
    assert re.search(r"every step \(each of the \d+ consecutive steps sampled around the median one\)", finding["title"])
    assert "(0, -(-w // 64) * 64 - w, 0, -(-h // 64) * 64 - h)" in finding["advice"]
