"""Issue 35's kernel cases recorded on the H200 (fixtures/kernels35: textbook.cu under ncu --set full and the
default basic set): the launch floor measured on an empty kernel, the padded transpose as the measured twin of
the conflicted one, the L1-bound strided loads named from the basic set's speed-of-light breakdown alone."""

import pytest

from tests.checks.kernel.test_launch_floor import _raw_overheads
from tests.conftest import FIXTURES

FULL = FIXTURES / "kernels35" / "textbook_full.ncu-rep.xz"
BASIC = FIXTURES / "kernels35" / "textbook_basic.ncu-rep.xz"


def _first(model, kernel):
    return next(f for f in model["findings"] if f["kernel_name"] == kernel)


def _duration(model, kernel):
    return next(k["duration_ns"] for k in model["kernels"] if k["name"] == kernel)


def test_the_launch_floor_is_the_empty_kernels(analyzed):
    """An empty kernel's launch has no SM at work for 1.3 of its 1.6 us: the report's floor, from the counters."""
    floor = analyzed(FULL)["profiles"][0]["launch_floor"]
    assert floor["measured"] and floor["ns"] == pytest.approx(min(_raw_overheads(FULL)), rel=1e-6)
    assert "empty" in floor["reason"] and 1000 < floor["ns"] < _duration(analyzed(FULL), "empty")


def test_the_padded_transpose_is_the_conflicted_ones_measured_twin(analyzed):
    """transposeSmem (32-way conflicts on its column reads) and transposeSmemPad differ only by the padding: the
    bank-conflicts estimate is their measured difference, and the report says so."""
    model = analyzed(FULL)
    finding = next(f for f in model["findings"] if f["kernel_name"] == "transposeSmem" and f["check"] == "bank-conflicts")
    slow, fast = _duration(model, "transposeSmem"), _duration(model, "transposeSmemPad")
    assert finding["estimated_savings_ns"] == pytest.approx(slow - fast, rel=0.02)
    assert any("transposeSmemPad" in note and "measured" in note for note in finding["notes"])
    assert not [f for f in model["findings"] if f["kernel_name"] == "transposeSmemPad" and f["check"] == "bank-conflicts"]


def test_l1_bound_loads_lead_the_basic_set_report(analyzed):
    """stridedL1 (86% of the time) reads 4 of every 32 bytes through L1: with the basic set's counters only, the
    first finding names the L1-bound signature (L1 near its peak while DRAM idles) and the sections to collect;
    the full set measures the 8x sector excess."""
    basic, full = analyzed(BASIC), analyzed(FULL)
    first = basic["findings"][0]
    assert (first["kernel_name"], first["check"]) == ("stridedL1", "uncoalesced-global")
    assert "L1" in first["title"] and "DRAM idles" in first["title"]
    measured = full["findings"][0]
    assert (measured["kernel_name"], measured["check"]) == ("stridedL1", "uncoalesced-global")
    assert "8.0x" in measured["title"]


def test_the_closest_variant_is_the_twin(analyzed):
    """setRowReadCol has two variants of its shape and instruction count: setRowReadRow (a stem shared) and
    setRowReadColPad (its name whole, plus the fix): the padded one is its twin, 1.70 against 2.21 us."""
    model = analyzed(FULL)
    finding = next(f for f in model["findings"] if f["kernel_name"] == "setRowReadCol" and f["check"] == "bank-conflicts")
    assert finding["evidence"]["twin_duration_ns"]["kernel"] == "setRowReadColPad"
    assert finding["evidence"]["twin_duration_ns"]["value"] == _duration(model, "setRowReadColPad")


# textbook.cu's kernels and the first finding an expert gives each (none: nothing above info to say, or no row)
LESSONS = {
    "warmup": "small-grid",             # 2 warps on 132 SMs; warp-uniform branch: no divergence, no ILP lesson
    "setRowReadRow": "small-grid",      # conflict-free: only the one-block grid is true
    "setColReadCol": "bank-conflicts",  # 32x the ideal wavefronts, stores and loads
    "setRowReadCol": "bank-conflicts",  # 16.5x, its padded twin 0.51 us faster
    "setRowReadColPad": "small-grid",
    "empty": "small-grid",
    "transposeSmem": "bank-conflicts",
    "transposeSmemPad": None,
    "streamFewBlocks": "low-occupancy",   # 132 blocks of 256 threads, 12% occupancy: the grid, then ILP (after it)
    "stridedL1": "uncoalesced-global",
    "siluVec": None,                    # at the DRAM roof, moving the bytes it needs
}


def test_every_textbook_kernel_leads_with_its_lesson(analyzed):
    """The one-block shared-memory demos lead with their bank conflicts, not with the grid (true, but not what the
    demo is for: small-grid counts after the conflicts and only over the cycles the SM ran) nor with latency (their
    warps wait on the conflicted shared loads; with one block on 132 SMs low-ilp and low-occupancy leave the grid to
    small-grid). The conflict-free demos and warmup, 2 warps on 132 SMs, lead with the grid."""
    model = analyzed(FULL)
    for kernel, lesson in LESSONS.items():
        findings = [f for f in model["findings"] if f["kernel_name"] == kernel]
        if lesson is None:
            assert all(f["severity"] == "info" and f["check"] != "bank-conflicts" for f in findings), kernel
            continue
        assert findings, kernel
        assert findings[0]["check"] in ({lesson} if isinstance(lesson, str) else lesson), (kernel, findings[0]["check"])
    row = next(f for f in model["findings"] if f["kernel_name"] == "setRowReadCol" and f["check"] == "bank-conflicts")
    assert row["estimated_savings_ns"] == pytest.approx(_duration(model, "setRowReadCol")
                                                        - _duration(model, "setRowReadColPad"), rel=0.01)
    grid = next(f for f in model["findings"] if f["kernel_name"] == "setRowReadCol" and f["check"] == "small-grid")
    assert grid["evidence"]["sm_running_share"]["value"] < 0.4   # 1600 of 4431 cycles: the rest is the launch


def test_a_grid_under_one_wave_is_fixed_before_the_warps_own_latency(analyzed):
    """streamFewBlocks, a grid-stride copy of 132 blocks of 256 threads (0.125 waves, 12% of the warp slots against a
    launch that allows all of them), led with low-ilp's dependent chains and a pointer-chase example, a user read: the
    grid leaves the slots empty, so more blocks is the first change and low-ilp counts after it, of the time left."""
    model = analyzed(FULL)
    found = {f["check"]: f for f in model["findings"] if f["kernel_name"] == "streamFewBlocks"}
    occupancy, ilp = found["low-occupancy"], found["low-ilp"]
    assert occupancy["evidence"]["waves_per_sm"]["value"] < 1
    assert occupancy["evidence"]["achieved_occupancy_pct"]["value"] * 2 \
        <= occupancy["evidence"]["theoretical_occupancy_pct"]["value"]
    assert occupancy["rank"] < ilp["rank"] and occupancy["estimated_savings_ns"] > ilp["estimated_savings_ns"]
    assert any(n.startswith("counted after low-occupancy: of the ") for n in ilp["notes"])


def test_no_saving_exceeds_the_time_the_sms_ran(analyzed):
    """setColReadCol's one SM ran 2493 of its 5521 cycles (1.2 of 2.66 us); the rest is the launch, which no fix of its
    code removes: the bank conflicts save at most that 1.2 us (they claimed the report floor's 51%, 1.35 us)."""
    model = analyzed(FULL)
    for kernel in model["kernels"]:
        metrics = kernel["metrics"]
        running = kernel["duration_ns"] * metrics["sm_active_cycles_max"] / metrics["sm_cycles_elapsed"]
        saved = sum(f["estimated_savings_ns"] for f in model["findings"] if f["kernel_id"] == kernel["id"])
        assert saved <= running * kernel["launches"] * 1.0001, kernel["name"]
    conflicts = next(f for f in model["findings"] if f["kernel_name"] == "setColReadCol" and f["check"] == "bank-conflicts")
    assert 1000 < conflicts["estimated_savings_ns"] < 1210


def test_conflicts_lead_even_where_the_floor_leaves_nothing_to_save(ncu_rows):
    """Issue 35: a fixed 2.0 us floor, longer than a 1.7 us demo, zeroed every saving and its conflicts (88-94% of the
    wavefronts) ranked below small-grid. The demos' own checks ranked with each kernel's floor at its whole time: on the
    tie, the finding the others count after (the conflicts, the kernel's own problem) leads, savings zero."""
    from nsanalyze.checks import run_kernel_checks
    from nsanalyze.checks.base import KernelView
    from nsanalyze.rank import rank

    rows = [r for r in ncu_rows(FULL) if r["name"] in ("setColReadCol", "setRowReadCol")]
    assert all(r["bank_conflict_share"] > 0.5 for r in rows)
    findings, _ = run_kernel_checks([KernelView(r) for r in rows])
    time = {r["id"]: r["duration_ns"] for r in rows}
    assert {f.check for f in findings} >= {"bank-conflicts", "small-grid"}
    ranked = rank(findings, time, kernel_launches={i: 1 for i in time}, kernel_floor_ns=dict(time))
    for row in rows:
        mine = [f for f in ranked if f.kernel_id == row["id"]]
        assert all(f.estimated_savings_ns == 0.0 for f in mine), row["name"]
        assert mine[0].check == "bank-conflicts", (row["name"], [f.check for f in mine])
