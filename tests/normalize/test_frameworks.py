"""The Python GPU frameworks a profile's kernels carry the marks of, and the PyTorch examples left out where none is
PyTorch's (real public and fixture exports)."""

from nsanalyze.normalize.frameworks import frameworks
from tests.conftest import PUBLIC, REAL, program_findings, sql

FENCE = "`" * 3


def _names(path) -> list[str]:
    return [name for (name,) in sql(path, """SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
                                             ON s.id IN (k.shortName, k.demangledName) GROUP BY s.value""")]


def test_each_framework_is_told_by_its_own_marks():
    """nvtx-examples' CuPy (cupy_subtract__...), cuDF (Thrust kernels instantiated with cudf:: comparators) and Numba
    (cudapy::__main__::matmul) programs, and a PyTorch loop (at::native kernels) beside cuBLAS; a word in a name is
    no mark (`my_cupy_kernel`, `attention_kernel`)."""
    assert frameworks(_names(PUBLIC / "quasiben__nvtx-examples__cupy.sqlite.xz")) == ("CuPy",)
    assert frameworks(_names(PUBLIC / "quasiben__nvtx-examples__cudf.sqlite.xz")) == ("cuDF",)
    assert frameworks(_names(PUBLIC / "quasiben__nvtx-examples__numba-jit.sqlite.xz")) == ("Numba",)
    assert frameworks(_names(PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz")) == ("CuPy",)
    assert frameworks(_names(REAL / "gpt_fp32_nsys.sqlite.xz")) == ("PyTorch",)
    assert frameworks(["my_cupy_kernel", "attention_kernel(float*)", "sgemm_tiled", None]) == ()


def test_pytorch_examples_are_left_out_where_the_kernels_are_another_frameworks(analyzed):
    """workflow (CuPy): launch-overhead's example was `torch.cuda.CUDAGraph` code; it is left out and said so, while
    allocator-churn's CuPy example stays. The PyTorch loop keeps its examples."""
    findings = {f["check"]: f for f in program_findings(analyzed(PUBLIC / "quasiben__nvtx-examples__workflow.sqlite.xz"))}
    launch = findings["launch-overhead"]["advice"]
    assert FENCE not in launch and "torch.cuda.CUDAGraph" not in launch
    assert launch.endswith("(The example, PyTorch code, is left out: this program's kernels are CuPy's, none "
                           "PyTorch's.)")
    assert FENCE + "python" in findings["allocator-churn"]["advice"] and "cupy." in findings["allocator-churn"]["advice"]
    pytorch = program_findings(analyzed(REAL / "graphs_eager_nsys.sqlite.xz"))
    assert any(FENCE + "python" in f["advice"] and "torch" in f["advice"] for f in pytorch)
    assert not any("is left out" in f["advice"] for f in pytorch)
