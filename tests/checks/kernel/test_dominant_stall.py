"""A latency-bound finding, and every kernel's first finding, names the kernel's dominant warp stall and the fix it
implies (checks/stalls.py, the reasons' meanings and fixes in warp_stalls.csv), from ncu's stall breakdown.

FaSTED's shared-memory study (fixtures/public, A100, one report per variant of the MmaPtxShared kernel): the
synchronous variant waits on its global loads (long scoreboard, 19.4 of 24.8 cycles an instruction) at 12.5%
occupancy; its pipelined variants (cp.async, 1 and 2 stages) run 15.3 and 14.8 ms against its 44.2 ms."""

import pytest

from nsanalyze.rank import next_limiter
from tests.conftest import PUBLIC
from tests.isolated import apart

STUDY = "bwcurless__FaSTED__profiles__Shared_Mem_Conflicts_Sync_Vs_Async__{}.ncu-rep.xz"
SYNC, DEPTH_1, DEPTH_2 = (PUBLIC / STUDY.format(v) for v in ("Synchronous", "PIpeline_Depth_1", "Pipeline_Depth_2"))
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"


def _raw_stalls(path):
    return apart(_raw_stalls_here, path)


def _raw_stalls_here(path):
    """The first launch's warp latency and its stall reasons, from the report's raw metrics (not normalized)."""
    from nsanalyze.checks.stalls import stall_table
    from nsanalyze.normalize.kernels import metrics_to_read
    from nsanalyze.read import read_profile

    metrics = read_profile(path, metrics_to_read).launches[0].metrics
    return metrics.get(LATENCY), {reason: metrics.get(STALL.format(reason)) for reason in stall_table()}


def test_the_synchronous_variant_names_its_long_scoreboard_stall_and_pipelining(analyzed):
    """Its first finding (low-occupancy: 12.5%, capped by registers) says what the few warps wait on: global loads,
    78% of the warp latency; the fix it leads with is to pipeline them (cp.async, more stages), what the study's
    next variant did."""
    latency, stalls = _raw_stalls(SYNC)
    reason = max((v or 0.0, r) for r, v in stalls.items())[1]
    assert reason == "long_scoreboard"
    first = analyzed(SYNC)["findings"][0]
    assert first["check"] in ("low-occupancy", "low-ilp")
    stall = first["evidence"]["dominant_stall"]
    assert stall["value"] == "long_scoreboard"
    assert stall["share"] == pytest.approx(stalls["long_scoreboard"] / latency, abs=1e-4)
    assert 0.7 < stall["share"] < 0.85
    assert "long scoreboard" in first["title"]
    assert first["advice"].startswith("**Dominant stall: long scoreboard**") and "cp.async" in first["advice"]
    assert "stages" in first["advice"]


def test_the_estimate_is_bounded_where_the_twin_is_another_report(analyzed):
    """The pipelined variants are other reports (not a same-report twin: no measured estimate is claimed); the
    estimate stays under the next limiter's bound and under what pipelining measured in the study's next report."""
    sync = analyzed(SYNC)
    first = sync["findings"][0]
    assert "twin_duration_ns" not in first["evidence"]
    kernel = sync["kernels"][0]
    unit, busy = next_limiter(first["check"], kernel["metrics"])
    assert first["estimated_speedup"] <= 1 - busy / 100 + 1e-9
    pipelined = analyzed(DEPTH_1)["kernels"][0]["duration_ns"]
    assert first["estimated_savings_ns"] <= kernel["duration_ns"] - pipelined
    for path in (DEPTH_1, DEPTH_2):  # the two pipelined variants: each finding under its next limiter
        model = analyzed(path)
        metrics = model["kernels"][0]["metrics"]
        for finding in model["findings"]:
            assert "twin_duration_ns" not in finding["evidence"]
            limiter = next_limiter(finding["check"], metrics)
            if limiter:
                assert finding["estimated_speedup"] <= 1 - limiter[1] / 100 + 1e-9, (path.name, finding["check"])


def test_every_kernels_first_finding_names_its_dominant_stall(analyzed):
    """Depth_1's first finding (bank conflicts) is no latency finding: a note and the evidence name the stall that
    holds the most of its warp latency (wait, 33%), and the fix; reasons under 30% are not named (NVIDIA's rule)."""
    latency, stalls = _raw_stalls(DEPTH_1)
    reason, cycles = max(((r, v or 0.0) for r, v in stalls.items()), key=lambda pair: pair[1])
    first = analyzed(DEPTH_1)["findings"][0]
    stall = first["evidence"]["dominant_stall"]
    assert (stall["value"], stall["share"]) == (reason, pytest.approx(cycles / latency, abs=1e-4))
    assert any(note.startswith("the kernel's warps stall most on") and stall["fix"] in note for note in first["notes"])
    named = {f["kernel_id"] for f in analyzed(DEPTH_2)["findings"] if "dominant_stall" in f["evidence"]}
    latency, stalls = _raw_stalls(DEPTH_2)
    assert bool(named) == (max(v or 0.0 for v in stalls.values()) / latency >= 0.3)


def test_the_stalls_fix_is_left_out_where_it_is_no_change_to_make(dev_suite_model):
    """A user read of the dev suite (H200) found the stall's generic fix contradicting the finding it was noted on:
    histogram_global, first found atomic-contention, waits on its contended atomics and was told to double-buffer
    global-to-shared copies; one_block_too_many, whose schedulers issue on 99% of cycles, was told to put independent
    instructions between dependent ones. The note names the stall and why its fix is not the change; a kernel of
    the user's whose schedulers have room keeps the fix."""
    from tests.conftest import findings_for

    def first_note(kernel):
        finding = findings_for(dev_suite_model, kernel)[0]
        return finding, next(n for n in finding["notes"] if n.startswith("the kernel's warps stall most on"))

    histogram, note = first_note("histogram_global")
    assert histogram["check"] == "atomic-contention"
    assert "that implies" not in note and "contended atomics" in note
    tail, note = first_note("one_block_too_many")
    issue = next(k for k in dev_suite_model["kernels"] if k["name"] == "one_block_too_many")["metrics"][
        "issue_active_pct"]
    assert issue >= 90 and "that implies" not in note and f"issue on {issue:.0f}% of cycles" in note
    aos, note = first_note("aos_update")   # strided loads, the schedulers with room: pipelining and coalescing apply
    assert aos["check"] == "uncoalesced-global" and "that implies: issue the loads earlier" in note
