"""`dense-embedding-grad` on blind70's word2vec twins (fixtures/real/record_blind70.sh, blind70_train.py: skip-gram
over two 2,000,000 x 300 fp32 tables, dense gradients in the base, `sparse=True` in the fix), checked against SQL;
silent on the fix and on a BERT whose one table is a few percent of its update."""

import pytest

from tests.conftest import REAL, program_findings, sql, sql_saved_per_step

BASE, FIX = "blind70_word2vec_base1_nsys.sqlite.xz", "blind70_word2vec_fix1_nsys.sqlite.xz"


def kernel_ns_per_step(path, model, like: str) -> float:
    """The kernels whose demangled names match `like`, a step, over the report's steady steps (launch calls in them)."""
    steps = model["timeline"]["steps"]
    ranges = sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")
    ranges = ranges[steps["first_step"]:steps["first_step"] + steps["count"]]
    (ns,), = sql(path, f"""SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
        JOIN StringIds s ON s.id = k.demangledName
        WHERE r.start >= {ranges[0][0]} AND r.start < {ranges[-1][1]} AND s.value LIKE '{like}'""")
    return ns / len(ranges)


def test_the_tables_whole_update_is_found_and_priced_against_sql(analyzed):
    path = REAL / BASE
    model = analyzed(path)
    first = program_findings(model)[0]
    assert first["check"] == "dense-embedding-grad"
    facts = first["evidence"]
    # the optimizer: SGD's foreach add over both tables (multi_tensor_apply_kernel)
    assert facts["optimizer_ns_per_step"]["value"] == pytest.approx(
        kernel_ns_per_step(path, model, "%multi_tensor_apply_kernel%"), rel=0.02)
    # the gradients' zero fills: the fills before each compute_grad_weight, nearly all of the step's fill time (the
    # rest, a few µs, fills something else)
    fills = kernel_ns_per_step(path, model, "%FillFunctor%")
    assert 0.95 * fills <= facts["gradient_fill_ns_per_step"]["value"] <= fills
    assert facts["gradient_fills_per_step"]["value"] == 6
    # priced below what the fix saved (the tables' gradient sums it does not count also went), within a quarter
    saved = sql_saved_per_step(analyzed, BASE, FIX)
    per_step = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert 0.75 * saved < per_step < saved
    assert "sparse=True" in first["advice"]


@pytest.mark.parametrize("name", [FIX, "blind70_reviews_base1_nsys.sqlite.xz"])
def test_silent_where_the_update_is_the_rows_or_a_small_part(analyzed, name):
    """The fix has no dense embedding backward (SQL: no compute_grad_weight); the BERT's table-sized update is a few
    percent of its kernel time."""
    path = REAL / name
    (dense,), = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                             WHERE s.value = 'compute_grad_weight'""")
    assert (dense == 0) == (name == FIX)
    assert "dense-embedding-grad" not in {f["check"] for f in analyzed(path)["findings"]}
