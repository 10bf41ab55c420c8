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
    # the gradients' passes: the fills before each compute_grad_weight and the sum of the output table's two
    # gradients (CUDAFunctor_add), nearly all of the step's fill and add time (the rest, a few µs, is other work)
    passes = kernel_ns_per_step(path, model, "%FillFunctor%") + kernel_ns_per_step(path, model, "%CUDAFunctor_add%")
    assert 0.95 * passes <= facts["gradient_pass_ns_per_step"]["value"] <= passes
    assert facts["gradient_passes_per_step"]["value"] == 8
    # priced by the replay of the change: within a tenth of what the fix saved
    saved = sql_saved_per_step(analyzed, BASE, FIX)
    per_step = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert per_step == pytest.approx(saved, rel=0.10)
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
