"""`clock-throttling` on the real H200 dev suite and on reports taken at locked clocks."""

import pytest



CHECK = "clock-throttling"

def test_dev_suite_ran_at_full_clock(dev_suite_model):
    # recorded with --clock-control none on an unthrottled H200: nothing to report
    assert "clock-throttling" not in {f["check"] for f in dev_suite_model["findings"]}


def test_fires_below_the_threshold(dev_suite_table):
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import clock_throttling

    row = dev_suite_table.frame.set_index("name").loc["bf16_gemm_wmma"].to_dict()
    ratio = row["sm_clock_ratio"]           # 0.90 in this report
    limits = {"max_clock_ratio": ratio + 0.01}
    finding = clock_throttling.run(KernelView({**row, "name": "bf16_gemm_wmma"}), limits)
    assert finding is not None and finding.estimated_speedup > 0
    assert clock_throttling.run(KernelView(row), {"max_clock_ratio": ratio - 0.01}) is None


LOCKED_PUBLIC = [  # taken at ncu's default --clock-control base: V100 at 1290 MHz, RTX 3070 at ~1500, MX450 at ~1395
    "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_Baseline.ncu-rep.xz",
    "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_DivToMult.ncu-rep.xz",
    "NVIDIA__nsight-training__cuda__nsight_compute__sample_reports__CuVectorAddDrv.ncu-rep.xz",
    "NVIDIA__nsight-training__cuda__nsight_compute__sample_reports__manual_nvtx.ncu-rep.xz",
    "Alaric617R__COALDA__examples__rgb__rgb_original.ncu-rep.xz",
]


@pytest.mark.parametrize("name", LOCKED_PUBLIC, ids=lambda n: n[:40])
def test_locked_clock_reports_get_no_throttling_finding(name, analyzed):
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / name)
    assert model["profiles"][0]["clock_control"]["mode"] == "locked"
    assert CHECK not in {f["check"] for f in model["findings"]}
    entry = next(n for n in model["not_judged"] if n["check"] == CHECK)
    assert entry["collect"].startswith("--clock-control none")


def test_h200_locked_and_free_reports_of_one_program(analyzed):
    """The same fp32 GPT step with ncu's default clock control (1490 MHz on all 37 longer kernels) and
    with --clock-control none (near the 1980 MHz maximum)."""
    from tests.conftest import REAL

    locked = analyzed(REAL / "gpt_basic_clock_base.ncu-rep.xz")["profiles"][0]["clock_control"]
    free = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")["profiles"][0]["clock_control"]
    assert locked["mode"] == "locked" and 1.40e9 < locked["clock_hz"] < 1.55e9 and locked["max_hz"] == 1.98e9
    assert free["mode"] == "free" and free["clock_hz"] > 0.9 * free["max_hz"]


def test_free_running_a100_still_judged(analyzed):
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__Final_128_128_Comparison__48x48_Warp_MaxReg_128_Pipeline_of_1_Pmsampling.ncu-rep.xz")
    assert model["profiles"][0]["clock_control"]["mode"] == "free"
    assert CHECK in {f["check"] for f in model["findings"]}          # kernels at 1087 of 1410 MHz
