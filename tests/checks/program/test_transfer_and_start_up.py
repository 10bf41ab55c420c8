"""Transfer-bound programs, programs that are one long kernel, and start-up that is not launch overhead
(issue 24, item 9), on real exports."""

import copy

import pytest

from nsanalyze.analyze import Options, analyze
from nsanalyze.checks import limits_for
from nsanalyze.checks.program import launch_overhead, one_long_kernel, transfer_bound
from tests.conftest import PUBLIC, REAL, sql

H100_COPIES = PUBLIC / "GindaChen__nsys-ai__tests__fixtures__h100_2gpu_1s.sqlite.xz"


def test_transfer_bound_program_gets_a_copy_finding_first():
    """Two H100s spend 97% of the window copying 50 GB host-to-device (pinned, ~28 GB/s); the report
    said nothing above info."""
    model = analyze([str(H100_COPIES)])
    top = model["findings"][0]
    assert top["check"] == "transfer-bound" and top["severity"] in ("medium", "high")
    assert top["evidence"]["copy_share"]["value"] > 0.9
    direction = top["evidence"]["directions"][0]
    assert direction["copy_kind"] == "Host-to-Device" and 20 < direction["gb_per_s"] < 40
    assert "pin_memory" in top["advice"] and "GB/s" in top["title"]


def test_compute_bound_program_is_not_transfer_bound(dev_suite_timeline):
    timeline = copy.copy(dev_suite_timeline)
    timeline.budget = [{**p, "share": 0.6} if p["part"] == "gpu_compute" else
                       {**p, "share": 0.35} if p["part"] == "gpu_copy" else p for p in dev_suite_timeline.budget]
    assert transfer_bound.run(timeline, limits_for(transfer_bound)) is None


def test_a_handful_of_launches_is_start_up(dev_suite_timeline):
    """A program of 1-4 launches: the first launch call (module load, 141-157 us) is start-up, not
    launch overhead; 212 launches (the dev suite) still are judged."""
    limits = limits_for(launch_overhead)
    few = copy.copy(dev_suite_timeline)
    few.launches = {**dev_suite_timeline.launches, "launches": 3}
    assert launch_overhead.run(few, limits) is None
    finding = launch_overhead.run(dev_suite_timeline, limits)
    assert finding is not None and any("load their module" in n for n in finding.notes)


@pytest.fixture(scope="module")
def one_kernel(analyzed):
    return analyzed(REAL / "one_kernel_nsys.sqlite.xz")


def test_one_long_kernel_points_to_ncu(one_kernel):
    """one_kernel.py: PyTorch's spin kernel launched once, 2.02 s. The headline says the program is that
    kernel and names the ncu command for it; the window is the kernel (SQL over the export)."""
    (name, duration), = sql(REAL / "one_kernel_nsys.sqlite.xz", """SELECT s.value, k.end - k.start
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName""")
    finding = next(f for f in one_kernel["findings"] if f["check"] == "one-long-kernel")
    assert finding["evidence"]["kernel_ns"]["value"] == duration == one_kernel["timeline"]["kernel_ns"]
    assert finding["evidence"]["kernel_launches"]["value"] == 1
    assert finding["evidence"]["kernel_share"]["value"] > 0.99
    assert f"{duration / 1e9:.2f} s of the" in finding["title"] and name in finding["title"]
    assert "ncu --set full" in finding["advice"] and f"regex:{name}" in finding["advice"]
    assert finding["estimated_savings_ns"] == 0      # unknown until the kernel is profiled: no promise


def test_a_loop_of_launches_is_not_one_long_kernel(dev_suite_timeline):
    assert dev_suite_timeline.summary["kernels"] > 100
    assert one_long_kernel.run(dev_suite_timeline, limits_for(one_long_kernel)) is None


def test_one_time_first_launch_is_not_launch_overhead(one_kernel):
    """The one cudaLaunchKernel of that program takes 332 us (module loading, once): not launch overhead."""
    (call_ns,), = sql(REAL / "one_kernel_nsys.sqlite.xz", """SELECT r.end - r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%'""")
    assert call_ns > 100_000                            # far above an ordinary launch's few microseconds
    assert not [f for f in one_kernel["findings"] if f["check"] == "launch-overhead"]
    captured = analyze([str(REAL / "one_kernel_nsys.sqlite.xz")], Options(window="capture"))
    assert not [f for f in captured["findings"] if f["check"] == "launch-overhead"]


def test_export_without_gpu_tables_reads_its_api_table(tmp_path):
    """dev_infer's export with its GPU activity tables dropped (as WSL2 records: CUDA API rows only): the
    synchronization waits are still reported, with the fact that GPU activity was not recorded."""
    import shutil
    import sqlite3

    from nsanalyze.read.files import open_local
    from tests.conftest import DEV_INFER_NSYS

    _, local = open_local(DEV_INFER_NSYS)
    path = tmp_path / "api_only.sqlite"
    shutil.copy(local, path)
    with sqlite3.connect(path) as connection:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                      "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "GPU_METRICS"):
            connection.execute(f"DROP TABLE IF EXISTS {table}")
    model = analyze([str(path)])
    finding = next(f for f in model["findings"] if f["check"] == "gpu-not-traced")
    assert "not recorded" in finding["title"] and "cudaStreamSynchronize" in finding["title"]
    assert finding["evidence"]["sync_calls"]["value"] == 908
    # the host's time by CUDA call, against SQL over the API table (version suffixes dropped)
    api = {c["name"]: c for c in finding["evidence"]["api_calls"]}
    with sqlite3.connect(path) as connection:
        memcpy = connection.execute("""SELECT COUNT(*), SUM(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaMemcpyAsync%'""").fetchone()
    assert (api["cudaMemcpyAsync"]["calls"], api["cudaMemcpyAsync"]["total_ns"]) == memcpy
    assert "longest calls by total time" in finding["title"]
