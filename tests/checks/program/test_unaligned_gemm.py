"""unaligned-gemm on real exports: the fuse56 BERT-like encoder (fixtures/real/README.md, Fuse56) runs its MLM
head's GEMMs over a 30,522-wide vocabulary, not a multiple of 8, as CUTLASS's sm80 `..._align2` kernels on the H200;
the GPT-like decoder's vocabulary is 50,304 and its GEMMs are cuBLAS's Hopper kernels. The saving is priced by the
slowdown measured for such kernels narrow against padded (normalize/narrow_gemm_rates.csv, tests/normalize/
test_gemm_loads.py)."""

import pytest

from nsanalyze.normalize.gemm_loads import load_bytes, slowdown
from tests.conftest import REAL, program_findings, sql

ID = "unaligned-gemm"
NARROW_SQL = """SELECT s.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = k.demangledName
    WHERE r.start >= {start} AND r.start < {end} AND s.value LIKE '%tensorop%align%' GROUP BY s.value"""


def _finding(model):
    return next((f for f in model["findings"] if f["check"] == ID), None)


@pytest.mark.parametrize("run, kernels", [("base1", 3), ("fix1", 1)])
def test_the_berts_vocabulary_gemms_are_named_with_their_time(analyzed, run, kernels):
    """Eager, three GEMMs a step over the vocabulary load 2 bf16 elements (4 bytes) at a time: their time a step is
    SQL's over the same steps (9.3 ms); compiled, one is left (3.1 ms). The saving is their time less what they take
    at the 4-byte loads' measured slowdown on the H200 (3.01x), priced by the replay (the same within 1%); shared with
    findings on the same GPU time, never more."""
    name = f"fuse56_bert_{run}_nsys.sqlite.xz"
    model = analyzed(REAL / name)
    finding = _finding(model)
    steps = model["timeline"]["steps"]
    ranges = sql(REAL / name, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")
    ranges = ranges[steps["first_step"]:steps["first_step"] + steps["count"]]
    rows = sql(REAL / name, NARROW_SQL.format(start=ranges[0][0], end=ranges[-1][1]))
    narrow = [(n, ns) for n, ns in rows if load_bytes(n) < 16]
    assert len(narrow) == kernels and all("align2" in n and "bf16" in n for n, _ in narrow)
    per_step = finding["evidence"]["narrow_gemm_ns"]["value"] / steps["count"]
    assert per_step == pytest.approx(sum(ns for _, ns in narrow) / len(ranges), rel=0.03)
    assert per_step > 3e6 and finding["evidence"]["load_bytes"]["value"] == 4
    own = finding["evidence"]["narrow_gemm_ns"]["value"] * (1 - 1 / slowdown("GH100", 4)["median"])
    assert "multiple of 8 elements" in finding["title"] and 0.5 * own < finding["estimated_savings_ns"] <= own * 1.01
    assert finding["evidence"]["check_savings_ns"]["value"] == pytest.approx(own, rel=0.01)
    assert finding["evidence"]["replayed_savings_ns"]["value"] == pytest.approx(own, rel=0.01)
    assert "4-byte loads 3.01x" in finding["notes"][0]
    assert "nn.Linear(768, 30522)" in finding["advice"]


@pytest.mark.parametrize("name", ["fuse56_gpt_base1", "fp32", "blind_embtables_base"])
def test_full_width_or_cuda_core_gemms_are_not_named(analyzed, name):
    """The GPT's padded vocabulary (cuBLAS's nvjet kernels: no load width in their names); the fp32 MLP's GEMMs, on
    the CUDA cores (CUTLASS's `simt_sgemm_..._align1`: not tensor-core kernels, low-tensor-activity's); an embedding
    loop whose align1 bf16 tensor-core GEMMs take under 3% of the window."""
    assert _finding(analyzed(REAL / f"{name}_nsys.sqlite.xz")) is None


def test_load_widths_read_off_real_kernel_names():
    """The names as the exports hold them: elements a load times the element's bytes (bf16 2, tf32 and fp32 4)."""
    names = {n for (n,) in sql(REAL / "fuse56_bert_base1_nsys.sqlite.xz", "SELECT value FROM StringIds WHERE value "
                                                                            "LIKE '%tensorop%align%'")}
    names |= {n for (n,) in sql(REAL / "augment_w0_nsys.sqlite.xz", "SELECT value FROM StringIds WHERE value LIKE "
                                                                      "'%tensor16x8x8%align%'")}
    widths = {load_bytes(n) for n in names}
    assert 4 in widths and 16 in widths and None not in widths


def test_on_a_chip_not_measured_the_saving_is_not_guessed(tmp_path):
    """The compiled BERT's export with its GPU renamed an A100 (SQL UPDATE): the table has no narrow-against-padded
    measurement for its chip (GA100), so the one narrow-load GEMM left (3.1 ms a step) saves nothing in the ranking,
    its note says why, and the summary line that says nothing is above info names it rather than read as a clean
    bill."""
    import json
    import shutil
    import sqlite3

    from nsanalyze.read.files import open_local
    from nsanalyze.render.format import health_line
    from tests.test_reliability import assert_handled, run_cli

    path = tmp_path / "bert_on_a100.sqlite"
    shutil.copy(open_local(REAL / "fuse56_bert_fix2_nsys.sqlite.xz")[1], path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE TARGET_INFO_GPU SET name = 'NVIDIA A100-SXM4-80GB'")
    model = json.loads(assert_handled(run_cli("report", path, "-o", "-")).stdout)
    finding = _finding(model)
    assert finding["estimated_savings_ns"] == 0 and finding["severity"] == "info"
    assert "not measured on this GPU's chip (GA100)" in finding["notes"][0] and "time at stake" in finding["notes"][0]
    assert not [f for f in model["findings"] if f["severity"] != "info"]
    line = health_line(model)
    assert line.startswith("No findings above info") and "Found, with its saving not measured: Tensor-core GEMMs" in line
    assert "(unaligned-gemm, info)" in line


@pytest.mark.parametrize("i", [1])  # the second pair: bench/calibration.py's table (the suite's time)
def test_a_vocabulary_of_50257_is_named_and_its_time_bounds_what_padding_saved(analyzed, i):
    """copy56 vocab (fixtures/real/README.md, Copy56): the GPT's training step with `vocab_size=50257` against 50304,
    nothing else changed. The base's head GEMMs run as narrow-load kernels (align1, bf16: 2 bytes), 30.7 ms a step;
    padding saved 25.0-26.0 ms a step (SQL): the finding's time at stake holds what the fix saved (the padded GEMMs
    still take their share). Priced by the 2-byte loads' slowdown measured on the H200 (5.62x), it is the first
    finding and within 25% of what the fix saved (before round 58 it saved nothing and unfused-normalization led,
    -68%). The padded run has no such finding."""
    from tests.conftest import sql_saved_per_step

    base, fix = f"copy56_vocab_base{i}_nsys.sqlite.xz", f"copy56_vocab_fix{i}_nsys.sqlite.xz"
    model = analyzed(REAL / base)
    finding = _finding(model)
    at_stake = finding["evidence"]["narrow_gemm_ns"]["value"] / model["timeline"]["steps"]["count"]
    saved = sql_saved_per_step(analyzed, base, fix)
    assert finding["evidence"]["load_bytes"]["value"] == 2 and "multiple of 8" in finding["title"]
    # the example shows the odd dimension's one element a load, not the 4-byte case (a user read)
    assert "nn.Linear(768, 50257)" in finding["advice"] and "30522" not in finding["advice"]
    assert saved > 20e6 and saved <= at_stake < 1.5 * saved
    assert model["findings"][0]["check"] == ID
    assert finding["estimated_savings_ns"] / model["timeline"]["steps"]["count"] == pytest.approx(saved, rel=0.25)
    assert _finding(analyzed(REAL / fix)) is None


def test_the_titles_share_is_in_the_evidence_beside_the_windows(analyzed):
    """fuse56_bert: the title gives the narrow GEMMs' share of GPU kernel time (18%), the evidence only their share of
    the window (17%), the one the threshold reads: one share with two values (a user read). Both are in the evidence,
    each named, and each is the model's own ratio."""
    import re

    model = analyzed(REAL / "fuse56_bert_base1_nsys.sqlite.xz")
    finding = next(f for f in program_findings(model) if f["check"] == "unaligned-gemm")
    ns = sum(k["duration_ns"] for k in finding["evidence"]["kernels"])
    kernel_share = finding["evidence"]["narrow_gemm_kernel_share"]["value"]
    assert kernel_share == pytest.approx(ns / model["timeline"]["kernel_ns"], rel=1e-3)
    assert finding["evidence"]["narrow_gemm_share"]["value"] == pytest.approx(ns / model["timeline"]["span_ns"], rel=1e-3)
    assert re.search(r"\((\d+)% of GPU kernel time\)", finding["title"]).group(1) == f"{100 * kernel_share:.0f}"
