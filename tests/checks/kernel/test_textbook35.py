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
