"""nsys kernel summaries against NVIDIA's own `nsys stats -r cuda_gpu_kern_sum` (oracle CSVs)."""

import csv

import pytest

from nsanalyze.normalize import normalize_nsys_kernels
from nsanalyze.read import read_profile
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS, ORACLE


@pytest.mark.parametrize("export", [DEV_SUITE_NSYS, DEV_SUITE_V2_NSYS, DEV_INFER_NSYS], ids=lambda p: p.name)
def test_kernel_summary_matches_nsys_stats(export):
    stem = export.name.removesuffix(".sqlite.xz")
    with open(ORACLE / f"{stem}_cuda_gpu_kern_sum.csv", newline="") as handle:
        oracle = {row["Name"]: row for row in csv.DictReader(handle)}
    frame = normalize_nsys_kernels(read_profile(export)).frame.set_index("demangled")
    assert set(frame.index) == set(oracle)
    for name, row in oracle.items():
        ours = frame.loc[name]
        assert ours["launches"] == int(row["Instances"])
        assert ours["duration_ns"] == int(row["Total Time (ns)"])
        assert ours["mean_ns"] == pytest.approx(float(row["Avg (ns)"]), rel=1e-3)
        assert ours["median_ns"] == pytest.approx(float(row["Med (ns)"]), rel=1e-3)
        assert ours["stddev_ns"] == pytest.approx(float(row["StdDev (ns)"]), rel=1e-3, abs=0.1)
        assert ours["time_share"] * 100 == pytest.approx(float(row["Time (%)"]), abs=0.051)
