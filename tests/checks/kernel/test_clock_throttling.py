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


LOCKED_PUBLIC = [  # taken at ncu's default --clock-control base: V100 at 1290 MHz, RTX 3070 at ~1500
    "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_Baseline.ncu-rep.xz",
    "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_DivToMult.ncu-rep.xz",
    "NVIDIA__nsight-training__cuda__nsight_compute__sample_reports__manual_nvtx.ncu-rep.xz",
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
    # ncu did not lock these clocks: the advice sends the user to the GPU's slowdown reasons, not to re-profile
    # with --clock-control none, which changes nothing (an expert's read of gpt_bf16_full, free too)
    for finding in (f for f in model["findings"] if f["check"] == CHECK):
        assert "--clock-control none" not in finding["advice"] and "SW Power Cap" in finding["advice"]


def test_device_names_match_whole_models():
    from nsanalyze.normalize.clocks import model_clocks

    assert model_clocks("NVIDIA GeForce RTX 3080 Laptop GPU") is None       # not the desktop RTX 3080
    assert model_clocks("NVIDIA GeForce RTX 3080")["base_hz"] == 1440e6
    assert model_clocks("NVIDIA GeForce RTX 3080 Ti")["base_hz"] == 1365e6
    assert model_clocks("NVIDIA L40")["base_hz"] == 735e6                    # not the L4
    assert model_clocks("NVIDIA GeForce GTX 1660 SUPER")["base_hz"] == 1530e6
    assert model_clocks("NVIDIA GH200 480GB") is None


def _rows(clocks_mhz, device="NVIDIA GH200 480GB", maximum_mhz=1980, duration_ns=100_000):
    return [{"sm_frequency_hz": c * 1e6, "max_sm_frequency_hz": maximum_mhz * 1e6, "device_name": device,
             "duration_ns": duration_ns} for c in clocks_mhz]


def test_one_clock_is_not_free_running():
    from nsanalyze.normalize.clocks import clock_control

    one = clock_control(_rows([1485]))                          # one launch on a GPU not in the table, 75%
    assert one["mode"] == "locked" and "probably" in one["reason"]
    shared = clock_control(_rows([1184.99, 1184.99], device="NVIDIA GeForce RTX 3080 Laptop GPU", maximum_mhz=1710))
    assert shared["mode"] == "locked" and "free" not in shared["reason"]
    gtx = clock_control(_rows([1534], device="NVIDIA GeForce GTX 1660 SUPER", maximum_mhz=1785))
    assert gtx["mode"] == "locked" and "base clock" in gtx["reason"]
    varying = clock_control(_rows([1100, 1300, 1500]))
    assert varying["mode"] == "free" and "from 1100 to 1500 MHz" in varying["reason"]


def test_clock_from_cycles_when_the_rate_is_missing(analyzed):
    """ncu 2023.3's default set on an RTX 4050 Laptop GPU keeps only smsp__cycles_elapsed.sum: the clock is
    cycles over the duration, and one kernel's clock is no evidence of throttling (this one, under 20 us, is too
    short to read one)."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__profile__report__origin.ncu-rep.xz")
    clock = model["profiles"][0]["clock_control"]
    assert clock["mode"] == "unknown" and clock["too_short"] and 1.0e9 < clock["clock_hz"] < 1.3e9
    assert model["kernels"][0]["metrics"]["sm_frequency_hz"] == pytest.approx(clock["clock_hz"])
    assert CHECK not in {f["check"] for f in model["findings"]}
    assert CHECK in {n["check"] for n in model["not_judged"]}


def test_one_clock_near_the_maximum_claims_no_clock_control():
    from nsanalyze.normalize.clocks import clock_control

    one = clock_control(_rows([1975]))
    assert one["mode"] == "unknown" and "free" not in one["reason"]


FASTED = "bwcurless__FaSTED__profiles__"


def test_no_compute_share_means_no_savings_claimed(analyzed):
    """The Pmsampling report holds no SpeedOfLight section: FindPairsKernel ran at 1087 of 1410 MHz, but how much
    of its time the clock bounds is not measured. It used to save 1 - 0.7709 of 292 ms (the share taken as 1);
    now it says the clock, saves nothing and names the section that measures the share."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / (FASTED + "Final_128_128_Comparison__48x48_Warp_MaxReg_128_Pipeline_of_1_Pmsampling.ncu-rep.xz"))
    finding = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "FindPairsKernel")
    assert finding["evidence"]["sm_clock_ratio"]["value"] == pytest.approx(0.7709, abs=1e-4)
    assert finding["evidence"]["sm_throughput_pct"]["value"] is None
    assert finding["severity"] == "info" and finding["estimated_speedup"] == 0 and finding["estimated_savings_ns"] == 0
    assert any("--section SpeedOfLight" in n for n in finding["notes"])


def test_measured_compute_share_scales_the_savings(analyzed):
    """The same kernel in the Conventional_Layout report, with SpeedOfLight: 1195 of 1410 MHz, memory-bound."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / (FASTED + "CTA_Layouts__Conventional_Layout.ncu-rep.xz"))
    finding = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "FindPairsKernel")
    ratio, compute = finding["evidence"]["sm_clock_ratio"]["value"], finding["evidence"]["sm_throughput_pct"]["value"]
    assert ratio == pytest.approx(1195 / 1410, abs=2e-3) and compute is not None
    own = (1 - ratio) * compute / 100   # 0.0921
    # (l2-reuse, which it overlapped, no longer speaks on the kernel, whose warps barely wait on memory: it is alone;
    # its rasterized twin ran 9% faster, its SM clock 9% higher, in 0.8% fewer SM cycles: test_l2_reuse)
    assert not any(f["check"] == "l2-reuse" for f in model["findings"])
    assert finding["estimated_speedup"] == pytest.approx(own, abs=1e-3)
    assert finding["severity"] == "info"                                   # near its memory roof


def test_h200_is_in_the_clock_table(analyzed):
    """The H200's row: 1980 MHz maximum (nvidia-smi, the report's device attribute), and as base the clock that ncu's
    default --clock-control base held on it. The locked report now names the base clock, not 'a GPU not in the table'."""
    from nsanalyze.normalize.clocks import model_clocks
    from tests.conftest import REAL

    assert model_clocks("NVIDIA H200") == {**model_clocks("NVIDIA H200"), "base_hz": 1490e6, "boost_hz": 1980e6}
    assert model_clocks("NVIDIA H200 NVL") is None and model_clocks("NVIDIA GH200 480GB") is None
    clock = analyzed(REAL / "gpt_basic_clock_base.ncu-rep.xz")["profiles"][0]["clock_control"]
    assert clock["mode"] == "locked" and clock["base_hz"] == 1490e6 and clock["max_hz"] == 1980e6
    assert "base clock" in clock["reason"] and "not in the clock table" not in clock["reason"]


def test_clock_below_the_lock_is_evidence(analyzed):
    """Issue 35: a clock below the one ncu locks is no lock held, it is slowdown. The MX450 report rgb_correct ran its
    22 us kernel at 1256 MHz, 10% below the 1395 MHz base clock ncu locks: judged against the lock, a finding (not
    'locked, not judged')."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__rgb_correct.ncu-rep.xz")
    clock = model["profiles"][0]["clock_control"]
    assert clock["mode"] == "below-lock" and clock["lock_hz"] == 1395e6 and "10.0% below" in clock["reason"]
    finding = next(f for f in model["findings"] if f["check"] == CHECK)
    assert finding["evidence"]["sm_clock_ratio"]["value"] == pytest.approx(clock["clock_hz"] / 1395e6, abs=1e-4)
    assert "below the base clock ncu locked (1256 of 1395 MHz)" in finding["title"]
    assert CHECK not in {n["check"] for n in model["not_judged"]}
    # the same GPU 3.4% below its lock (rgb_original) did not hold it either, as 4.8% (rgb_optimized) did not:
    # one label for both (a review found 3.4% called locked); the finding speaks from 4% below (max_lock_ratio)
    for name, off, speaks in (("rgb_original", "3.4% below", False), ("rgb_optimized", "4.8% below", True)):
        model = analyzed(PUBLIC / f"Alaric617R__COALDA__examples__rgb__{name}.ncu-rep.xz")
        clock = model["profiles"][0]["clock_control"]
        assert clock["mode"] == "below-lock" and off in clock["reason"]
        assert (CHECK in {f["check"] for f in model["findings"]}) == speaks
        assert CHECK not in {n["check"] for n in model["not_judged"]}


@pytest.mark.parametrize("name", ["CuVectorAddDrv", "CuVectorAddDrv_2"])
def test_kernels_too_short_to_read_a_clock_are_not_judged(name, analyzed):
    """NVIDIA's CuVectorAddDrv samples: one 3 us vectorAdd each (RTX 3070). Kernels under 20 us measure their
    clock too coarsely (another report says so of its short kernels), so no clock is read from them: not 'locked'
    from a 3 us kernel 5.5% below the base clock, and not judged as throttling at 10.4% below."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / f"NVIDIA__nsight-training__cuda__nsight_compute__sample_reports__{name}.ncu-rep.xz")
    assert all(k["duration_ns"] < 20_000 for k in model["kernels"])
    clock = model["profiles"][0]["clock_control"]
    assert clock["mode"] == "unknown" and clock["too_short"]
    assert clock["reason"].startswith("every kernel ran under 20 us, too short to read a clock (measured ")
    entry = next(n for n in model["not_judged"] if n["check"] == CHECK)
    assert "kernels long enough to read a clock" in entry["collect"]
    assert CHECK not in {f["check"] for f in model["findings"]}


def test_one_steady_clock_is_not_called_free_running(analyzed):
    """TedJoin's two A100 kernels both ran at 1404 MHz: one steady clock near the maximum is not evidence of a free
    clock (nor of throttling)."""
    from nsanalyze.normalize.clocks import clock_control
    from tests.conftest import PUBLIC

    clock = analyzed(PUBLIC / (FASTED + "TedJoin__tedjoin_brute_100000_128D_profile.ncu-rep.xz"))["profiles"][0]["clock_control"]
    assert clock["mode"] == "steady" and "free-running)" in clock["reason"] and "not throttled" in clock["reason"]
    assert clock_control(_rows([1975, 1976, 1974]))["mode"] == "steady"
    assert clock_control(_rows([1800, 1975]))["mode"] == "free"          # clocks that vary near the maximum
    below = clock_control(_rows([530, 554], device="Tesla T4", maximum_mhz=1590))   # the T4 against 585 MHz
    assert below["mode"] == "below-lock" and below["lock_hz"] == 585e6
