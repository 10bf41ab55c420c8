"""The device-capability table (normalize/device_caps.csv): facts per GPU model with NVIDIA's sources, and the
rules that read it (issue 35: no tensor-core advice on a GPU without tensor cores)."""

import copy

import pytest

from nsanalyze.normalize.device_caps import _rows, device_caps, has_tensor_cores
from tests.conftest import DEV_SUITE_NCU, FIXTURES, PUBLIC, REAL
from tests.isolated import apart


def test_every_row_cites_nvidia_and_is_complete():
    for row in _rows():
        assert "NVIDIA" in row["source"] or "GeForce" in row["source"], row["pattern"]
        assert row["tensor_cores"] in ("yes", "no") and row["architecture"] and row["chip"]
        assert (row["tensor_cores"] == "yes") == bool(row["tensor_precisions"]), row["pattern"]
        assert 0 < float(row["fp64_ratio"]) <= 0.5


def test_every_fixture_gpu_has_a_row():
    """Every GPU named in fixtures/public/INVENTORY.tsv and the H200 of the real fixtures."""
    names = {line.split("\t")[2] for line in (PUBLIC / "INVENTORY.tsv").read_text().splitlines()[1:]}
    names = {n for n in names if n and not n.startswith("2x")} | {"NVIDIA H200"}
    assert names and all(device_caps(name) is not None for name in names), \
        [n for n in names if device_caps(n) is None]


@pytest.mark.parametrize("name, chip, tensor, sms", [
    ("NVIDIA GeForce GTX 1660 SUPER", "TU116", False, 22),     # CC 7.5, no tensor cores
    ("NVIDIA GeForce GTX 1650", "TU117", False, 14),
    ("NVIDIA GeForce MX450", "TU117", False, 14),               # the COALDA reports' laptop GPU
    ("NVIDIA GeForce RTX 2080 Ti", "TU102", True, 68),          # CC 7.5 with tensor cores
    ("Tesla T4", "TU104", True, 40),
    ("Tesla V100-SXM2-32GB", "GV100", True, 80),
    ("NVIDIA A100-PCIE-40GB", "GA100", True, 108),
    ("NVIDIA GeForce RTX 3070", "GA104", True, 46),
    ("NVIDIA A40", "GA102", True, 84),
    ("NVIDIA RTX A6000", "GA102", True, 84),
    ("NVIDIA GeForce RTX 4090", "AD102", True, 128),
    ("NVIDIA GeForce RTX 4050 Laptop GPU", "AD107", True, 20),
    ("NVIDIA L4", "AD104", True, 58),
    ("NVIDIA L40", "AD102", True, 142),
    ("NVIDIA H100 80GB HBM3", "GH100", True, 132),
    ("NVIDIA H200", "GH100", True, 132),
    ("NVIDIA B200", "GB100", True, 148),
    ("NVIDIA GeForce RTX 5090", "GB202", True, 170),
])
def test_rows_per_family(name, chip, tensor, sms):
    caps = device_caps(name)
    assert (caps["chip"], caps["tensor_cores"], caps["sm_count"]) == (chip, tensor, sms)


def test_precisions_and_fp64_rates_follow_the_whitepapers():
    assert device_caps("Tesla V100-SXM2-32GB")["tensor_precisions"] == ("fp16",)           # no TF32/BF16 on Volta
    assert "tf32" not in device_caps("Tesla T4")["tensor_precisions"]
    assert {"bf16", "tf32"} <= set(device_caps("NVIDIA A100-PCIE-40GB")["tensor_precisions"])
    assert "fp8" in device_caps("NVIDIA L4")["tensor_precisions"] and "fp8" not in device_caps("NVIDIA A10")["tensor_precisions"]
    assert "fp4" in device_caps("NVIDIA B200")["tensor_precisions"] and "fp4" not in device_caps("NVIDIA H200")["tensor_precisions"]
    assert device_caps("NVIDIA H200")["fp64_ratio"] == 0.5 and device_caps("NVIDIA GeForce RTX 4090")["fp64_ratio"] == 1 / 64
    assert has_tensor_cores("NVIDIA GH200 480GB") is True and has_tensor_cores("Some Future GPU") is None
    assert device_caps("NVIDIA A10")["chip"] == "GA102" and device_caps("NVIDIA A100 80GB PCIe")["chip"] == "GA100"


def test_real_report_rows_carry_the_tables_answer(analyzed):
    mx450 = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__rgb_correct.ncu-rep.xz")
    assert mx450["kernels"][0]["metrics"]["tensor_cores"] == 0
    assert "missing-tensor-cores" not in {n["check"] for n in mx450["not_judged"]}   # nothing to collect for it
    assert analyzed(DEV_SUITE_NCU)["kernels"][0]["metrics"]["tensor_cores"] == 1


def _renamed(path, device: str):
    """A real report read into memory with its device name rewritten: the GPU as the table would see it."""
    from nsanalyze.normalize.kernels import metrics_to_read
    from nsanalyze.read import read_profile

    report = copy.deepcopy(read_profile(path, metrics_to_read))
    for launch in report.launches:
        launch.strings["device__attribute_display_name"] = device
    return report


def test_no_tensor_core_advice_on_a_gtx_1660(analyzed):
    """The real H200 dev suite, whose hand-written FP32 GEMM (sgemm_tiled) gets missing-tensor-cores first, read
    as if from a GTX 1660 SUPER (no real GEMM report from a chip without tensor cores is here): the same
    kernel's instruction mix, no tensor-core advice, and the check is not listed as unjudged either."""
    assert any(f["check"] == "missing-tensor-cores" and f["kernel_name"] == "sgemm_tiled"
               for f in analyzed(DEV_SUITE_NCU)["findings"])
    found, unjudged = apart(_kernel_checks_as_if_on, DEV_SUITE_NCU, "NVIDIA GeForce GTX 1660 SUPER")
    assert "missing-tensor-cores" not in found
    assert "missing-tensor-cores" not in unjudged


def _kernel_checks_as_if_on(path, device: str) -> tuple[set[str], set[str]]:
    """The checks that find something in a report read as if from `device`, and those left unjudged (run
    apart: the report read stays in that process's memory)."""
    from nsanalyze.analyze import Options, analyze_ncu

    _, findings, not_judged, _, _ = analyze_ncu(_renamed(path, device), Options())
    return {f.check for f in findings}, {n.check for n in not_judged}


def test_the_rule_reads_the_table_not_the_compute_capability(dev_suite_table):
    """sgemm_tiled's own row (CC 9.0) with the table's answer swapped: the check speaks only where tensor cores exist."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import missing_tensor_cores

    row = next(r for r in dev_suite_table.rows if r["name"] == "sgemm_tiled")
    limits = limits_for(missing_tensor_cores)
    assert missing_tensor_cores.run(KernelView(row), limits) is not None
    assert missing_tensor_cores.run(KernelView({**row, "tensor_cores": 0.0}), limits) is None
    assert missing_tensor_cores.applies(KernelView({**row, "tensor_cores": 0.0})) is False


def test_program_tensor_check_on_a_gpu_without_tensor_cores(analyzed):
    """The H200 basic-set GPT report gets low-tensor-activity from cuBLAS's FFMA GEMM names; the same kernels on a
    GTX 1660 SUPER get none."""
    path = REAL / "gpt_basic_clock_base.ncu-rep.xz"
    assert "low-tensor-activity" in {f["check"] for f in analyzed(path)["findings"]}
    assert "low-tensor-activity" not in apart(_kernel_list_checks_as_if_on, path, "NVIDIA GeForce GTX 1660 SUPER")


def _kernel_list_checks_as_if_on(path, device: str) -> set[str]:
    """The kernel-list (program) checks that find something in a report read as if from `device` (run apart)."""
    from nsanalyze.analyze import Options, _kernel_list_work, analyze_ncu

    kernels, kernel_findings, _, _, facts = analyze_ncu(_renamed(path, device), Options())
    for kernel in kernels:
        kernel["profile"] = str(path)
    time = {k["id"]: k["total_ns"] for k in kernels}
    findings, _ = _kernel_list_work(kernels, time, Options(), kernel_findings, facts["launch_floor"]["ns"], [device])
    return {f.check for f in findings}
