"""`clock-throttling` on the real H200 dev suite (labels in shared/profiles/README.md)."""



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
