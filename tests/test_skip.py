"""`--skip X` never runs X: the report is the one of a build without X (X left out of the registry), on
real profiles, for checks that combine with others: claims of wider causes (non-step-phase, slow-steps,
allocator-churn), overlaps of one budget part or one kernel (1 - prod(1 - s_i)), findings counted after
others (transfer-bound after pageable-memcpy and sync-memcpy, small-grid after a kernel's code problems),
the straggler's host time (rank-imbalance), and low-tensor-activity, which yields to missing-tensor-cores.
Skipping once only dropped X's findings after ranking: host-sync kept the 0.55 scaling non-step-phase caused.

Each report is made in a process of its own (tests/isolated.py); the build without X is the registry
without X in that process."""

from functools import lru_cache

import pytest

from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, REAL
from tests.isolated import apart

CASES = [
    (REAL / "phases_nsys.sqlite.xz", "non-step-phase"),     # claims idle_sync time from host-sync and host-wait
    (REAL / "loader_workers_nsys.sqlite.xz", "host-wait"),  # claims the queue waits from host-compute
    (REAL / "phases_nsys.sqlite.xz", "pageable-memcpy"),    # transfer-bound counts after it (gpu_copy)
    (REAL / "blind58_multitask_base1_nsys.sqlite.xz", "repeated-backward"),   # overlaps unfused-normalization
    (REAL / "histlog_every10_nsys.sqlite.xz", "slow-steps"),     # claims the slow steps' excess
    (REAL / "alloc_churn_nsys.sqlite.xz", "allocator-churn"),    # claims the allocator's idle time
    (REAL / "ddp_gpu_all_nsys.sqlite.xz", "rank-imbalance"),     # the straggler's host time; fits the window
    (DEV_SUITE_NSYS, "sync-memcpy"),                             # transfer-bound counts after it
    (DEV_SUITE_NCU, "small-grid"),            # overlaps tail-effect on one kernel
    (DEV_SUITE_NCU, "low-ilp"),               # overlaps low-occupancy and uncoalesced-global on one kernel
    (DEV_SUITE_NCU, "missing-tensor-cores"),  # low-tensor-activity speaks for the GEMMs without it
]


def report(path, skip=(), unregistered=()) -> dict:
    """The report model, in a process of its own: with `skip` skipped, or built without `unregistered`."""
    from nsanalyze import checks
    from nsanalyze.analyze import Options, analyze

    if unregistered:
        every = checks.registry()
        checks.registry = lambda: tuple(c for c in every if c.id not in unregistered)
    return analyze([str(path)], Options(skip=frozenset(skip)))


@lru_cache(maxsize=None)
def _apart(path, skip=(), unregistered=()) -> dict:
    """report(...) in a process of its own, made once in this file for the same arguments: the issue's two
    cases (test_a_skipped_check_shapes_no_other) skip what two of CASES skip, on the same profiles."""
    return apart(report, path, skip=skip, unregistered=unregistered)


def _savings(model: dict) -> dict[str, float]:
    return {f["check"]: f["estimated_savings_ns"] for f in model["findings"] if f["kernel_id"] is None}


@pytest.mark.parametrize("path, check", CASES, ids=lambda v: getattr(v, "name", v)[:24])
def test_skip_is_a_build_without_the_check(path, check):
    skipped = _apart(path, skip=(check,))
    assert check not in {f["check"] for f in skipped["findings"]} | {n["check"] for n in skipped["not_judged"]}
    assert skipped == _apart(path, unregistered=(check,))


def test_a_skipped_check_shapes_no_other(analyzed):
    """The issue's two cases, with the figures the reports give: the checkpoints' idle time that
    non-step-phase claims (all of the window's idle time after syncs: no host-sync finding is left) and
    unfused-normalization counted after repeated-backward on gpu_compute (574 ms of its 1,227 ms; since round 72
    gpt_fp32's attention-unfused and low-tensor-activity, on kernels of other roles, add up and share nothing);
    skipped, they no longer do: the checkpoints' file writes are then host-wait's (1687 ms, the file-io class's idle
    time), and unfused-normalization keeps its own figure."""
    phases = REAL / "phases_nsys.sqlite.xz"
    full, skipped = analyzed(phases), _apart(phases, skip=("non-step-phase",))   # analyzed: the default report
    assert "host-sync" not in _savings(full) and "host-wait" not in _savings(full)
    assert round(_savings(skipped)["host-wait"] / 1e6) == 1687
    multitask = REAL / "blind58_multitask_base1_nsys.sqlite.xz"
    full, skipped = analyzed(multitask), _apart(multitask, skip=("repeated-backward",))
    assert round(_savings(full)["unfused-normalization"] / 1e6) == 574
    assert round(_savings(skipped)["unfused-normalization"] / 1e6) == 1227
