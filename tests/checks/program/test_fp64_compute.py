"""`fp64-compute` on blind71's float64 MLP (fixtures/real/record_blind71.sh: NumPy float64 data, the model made
`.double()`), against SQL, and silent on its float32 twin and on the float32 exports."""

import pytest

from tests.conftest import REAL, program_findings, sql

BASE, FIX = REAL / "blind71_fp64_base1_nsys.sqlite.xz", REAL / "blind71_fp64_fix1_nsys.sqlite.xz"
FP64_SQL = """SELECT s.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
              ON s.id = k.demangledName WHERE k.start >= {start} AND k.start < {end} GROUP BY s.value"""


def test_a_program_in_float64_is_told_and_priced_within_its_kernels(analyzed):
    """The window's float64 kernels by SQL (cuBLAS's f64 GEMMs, CUTLASS's d884gemm, PyTorch's kernels on double)
    hold all but a sliver of the kernel time; the finding's time is theirs, and its saving (memory-bound kernels at
    half their time; the GEMMs at the H100's FP32 rate over its FP64 tensor-core rate, 1) stays within it. The fix
    saved 4.21 ms a step (the log's GPU periods); the estimate is under it (docs/checks.md: the GEMMs' 1.2x is not
    in the rates)."""
    from nsanalyze.normalize.precision import fp64

    model = analyzed(BASE)
    window = model["timeline"]["window"]
    rows = sql(BASE, FP64_SQL.format(start=window["start_ns"], end=window["end_ns"]))
    total, double = sum(ns for _, ns in rows), sum(ns for name, ns in rows if fp64(name))
    assert double > 0.99 * total
    finding = next(f for f in program_findings(model) if f["check"] == "fp64-compute")
    assert finding["evidence"]["fp64_ns"]["value"] == pytest.approx(double, rel=1e-3)
    assert finding["evidence"]["gemm_fp32_over_fp64"]["value"] == 1.0
    steps = model["timeline"]["steps"]["count"]
    gemm, other = finding["evidence"]["fp64_gemm_ns"]["value"], double - finding["evidence"]["fp64_gemm_ns"]["value"]
    assert finding["evidence"]["check_savings_ns"]["value"] == pytest.approx(other / 2, rel=1e-3)
    assert 0 < finding["estimated_savings_ns"] <= other / 2 + 1 and gemm > 0.7 * double
    assert 1.5e6 < finding["estimated_savings_ns"] / steps < 4.21e6


def test_unaligned_gemm_does_not_read_float64_gemms_as_narrow_loads(analyzed):
    """CUTLASS's `tensorop_d884gemm_..._align1` loads one 8-byte element at a time; read as a tf32 kernel of
    4-byte loads, it made unaligned-gemm the first finding (pad a dimension that was already a multiple of 64)."""
    checks = {f["check"] for f in program_findings(analyzed(BASE))}
    assert "unaligned-gemm" not in checks and "fp64-compute" in checks


@pytest.mark.parametrize("name", ["blind71_fp64_fix1_nsys.sqlite.xz", "xfmr_fp32_nsys.sqlite.xz",
                                  "blind61_determ_base1_nsys.sqlite.xz"])
def test_float32_programs_are_not_told(analyzed, name):
    """The float32 twin, an fp32 transformer and a TF32 one whose fused Adam keeps its step count in double (a
    sliver): no finding. PyTorch's float batch norm takes `double` arguments, which are no element type."""
    assert "fp64-compute" not in {f["check"] for f in analyzed(REAL / name)["findings"]}


def test_a_float64_matrix_vector_product_is_priced_by_its_bytes(analyzed):
    """power_iteration (a T4, whose FP64 rate is 1/32 of FP32) spends its kernel time in cuBLAS's float64 gemv,
    which reads each matrix element once: bound by memory, it is priced at half its time, as the other memory-bound
    kernels, not at the 32x of a GEMM (the finding promised 24 ms of a 26 ms step)."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "brycelelbach__nsightful__tests__power_iteration__baseline.sqlite.xz")
    finding = next(f for f in program_findings(model) if f["check"] == "fp64-compute")
    assert "gemv" in finding["evidence"]["kernels"][0]["name"] and finding["evidence"]["fp64_gemm_ns"]["value"] == 0
    fp64_ns = finding["evidence"]["fp64_ns"]["value"]
    assert finding["evidence"]["check_savings_ns"]["value"] == pytest.approx(fp64_ns / 2, rel=1e-5)   # (6 figures)
    # the replay of the steps with those kernels 2x faster, within 2% of the estimate; never past their time
    assert finding["estimated_savings_ns"] == pytest.approx(fp64_ns / 2, rel=0.02)
    assert finding["estimated_savings_ns"] < fp64_ns
    # no matrix product is priced at the FP64 rate: the note and evidence quote none (a user read found "matrix
    # products at the FP32 rate over the FP64 rate (32x on the T4)" beside `fp64_gemm_ns` 0)
    assert "gemm_fp32_over_fp64" not in finding["evidence"]
    assert any(n.startswith("saving: the float64 kernels at half their time") for n in finding["notes"])
    # a T4's tensor cores take float16, not TF32 or bfloat16: the advice's tensor-core line says so (a user read
    # found "TF32 ... or autocast to bfloat16" on it)
    line = next(line for line in finding["advice"].splitlines() if "tensor cores" in line)
    assert "float16" in line and "T4: compute capability 7.5" in line and "set_float32_matmul_precision" not in line
    # its kernels are CuPy's and cuBLAS's, none PyTorch's (SQL: no at::native kernel): the line names no PyTorch
    # switch (it read `torch.autocast` with a `GradScaler`, a user read); blind71_fp64 (PyTorch) keeps them
    path = PUBLIC / "brycelelbach__nsightful__tests__power_iteration__baseline.sqlite.xz"
    (torch,), = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                             WHERE s.value LIKE '%at::native%'""")
    assert torch == 0 and "torch." not in line and "GradScaler" not in line
    pytorch = next(f for f in program_findings(analyzed(REAL / "blind71_fp64_base1_nsys.sqlite.xz"))
                   if f["check"] == "fp64-compute")
    assert "torch.set_float32_matmul_precision" in pytorch["advice"]


def test_fused_adams_scalar_doubles_are_no_float64_math(analyzed):
    """PyTorch's fused Adam kernel names its learning rate and betas as `double` template arguments beside its float
    math (`FusedAdamMathFunctor<float, ...>, const float *, double, double, ...`, by SQL on blind_embtables, a quarter of
    whose kernel time it holds): float32 math, no float64 finding."""
    from nsanalyze.normalize.precision import fp64

    path = REAL / "blind_embtables_base_nsys.sqlite.xz"
    names = [n for (n,) in sql(path, "SELECT value FROM StringIds WHERE value LIKE '%FusedAdamMathFunctor<float%'")]
    assert names and all(", double, double" in n and not fp64(n) for n in names)
    assert "fp64-compute" not in {f["check"] for f in analyzed(path)["findings"]}
