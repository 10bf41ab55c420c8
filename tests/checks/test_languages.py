"""Advice for a kernel written in another language than CUDA C++ says so first (checks/languages.py): NCAR's
miniWeather is OpenACC Fortran, its advice's examples CUDA C++; the dev suite's kernels are CUDA C++."""

from nsanalyze.checks.languages import language_of, language_note
from tests.conftest import DEV_SUITE_NCU, PUBLIC

BASELINE = PUBLIC / "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_Baseline.ncu-rep.xz"


def test_a_fortran_kernels_findings_say_their_examples_are_cuda(analyzed):
    findings = analyzed(BASELINE)["findings"]
    with_source = {f["kernel_name"] for f in findings if f["source"]}
    assert with_source
    for finding in findings:
        said = finding["advice"].startswith("This kernel was compiled from Fortran (`miniWeather_mpi_openacc.F90`")
        # every finding of a kernel whose findings show Fortran lines, its low-occupancy without lines of its own too
        assert said == (finding["kernel_name"] in with_source), finding["check"]


def test_cuda_kernels_advice_is_as_written(analyzed):
    findings = analyzed(DEV_SUITE_NCU)["findings"]
    assert [f for f in findings if f["source"]]
    assert not [f for f in findings if f["advice"].startswith("This kernel was compiled from")]


def test_a_kernel_of_mixed_languages_or_none_known_is_left_unsaid():
    files = ["/src/miniWeather_mpi_openacc.F90"]
    assert language_of(files)[0].name == "Fortran"
    assert language_of(files + ["/src/helpers.cu"]) is None        # a Fortran kernel calling a CUDA C++ function
    assert language_of(["kernel.py", "kernel.PY"])[0].name == "Python"
    assert language_of(["main.F90", "kernel.py"]) is None          # two other languages: which one is unknown
    assert language_of(["???", None, ""]) is None
    assert "(```a``b.f90```: " in language_note(["/x/a``b.f90"])   # a name from the profile stays one code span
