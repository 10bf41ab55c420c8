"""autotuning on real twins (fixtures/real/README.md): cuDNN's benchmark mode with a new input shape every step,
against the same program with it off. The prediction is checked against SQL's mean GPU step periods."""

import statistics

import pytest

from tests.conftest import REAL, program_findings, sql_gpu_step_periods

PAIRS = [("blind_cudnnbench_base_nsys.sqlite.xz", "blind_cudnnbench_fix_nsys.sqlite.xz"),
         ("blind_cudnnbench_base2_nsys.sqlite.xz", "blind_cudnnbench_fix2_nsys.sqlite.xz")]


def _saved_per_step(analyzed, base, fix) -> float:
    """What the fix saved a step: the mean of SQL's GPU periods over each run's steady steps."""
    periods = [sql_gpu_step_periods(REAL / name)[analyzed(REAL / name)["timeline"]["steps"]["first_step"]:]
               for name in (base, fix)]
    return statistics.mean(periods[0]) - statistics.mean(periods[1])


@pytest.mark.parametrize("base, fix", PAIRS)
def test_benchmark_mode_with_new_shapes_is_the_first_finding_and_its_price_holds(analyzed, base, fix):
    """The tuning is the first finding of the base, and what it saves a step is within 25% of what turning
    benchmark mode off saved (SQL: 581 and 513 ms a step); the twin has no such finding. Before the check, the
    first finding was layout-conversion (the trials' NCHW kernels) at -93%."""
    model = analyzed(REAL / base)
    first = program_findings(model)[0]
    assert first["check"] == "autotuning"
    predicted = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert predicted == pytest.approx(_saved_per_step(analyzed, base, fix), rel=0.25)
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
    assert saved == pytest.approx(_saved_per_step(analyzed, base, fix), rel=0.25)
    twin = whatif([str(REAL / fix)], Options(), WhatIf(untune=True))[0]
    assert twin["changes"][0]["trials"] == 0
    assert twin["predicted_mean_step_ns"] == pytest.approx(twin["base_mean_step_ns"], rel=1e-9)
