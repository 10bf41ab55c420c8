"""Multi-GPU exports (nsys 2026.2, two GPUs, NCCL): per-device figures checked against direct SQL,
exposed communication, imbalance, and per-rank exports merged on a common clock."""

import shutil
import sqlite3

import pytest

from nsanalyze.analyze import analyze
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from nsanalyze.read.files import open_local
from tests.conftest import PUBLIC

BEFORE = PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_before.sqlite.xz"
AFTER = PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_after.sqlite.xz"


@pytest.fixture(scope="module")
def before_timeline():
    return build_timeline(read_profile(BEFORE), mode="capture")  # compared with SQL over the whole export


def direct(path, sql):
    _, local = open_local(path)
    with sqlite3.connect(local) as con:
        return con.execute(sql).fetchall()


def test_per_device_kernel_and_nccl_time_equal_sql(before_timeline):
    expected = dict(direct(BEFORE, "SELECT deviceId, SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"))
    nccl = dict(direct(BEFORE, """SELECT k.deviceId, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                 JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' GROUP BY 1"""))
    devices = {d["device_id"]: d for d in before_timeline.devices}
    assert {k: d["kernel_ns"] for k, d in devices.items()} == expected
    assert {k: d["communication_ns"] for k, d in devices.items()} == nccl == {0: 17172652, 1: 8229100}


def test_exposed_communication_on_one_stream(before_timeline):
    # every kernel of a device runs on one stream here, so nothing overlaps the NCCL kernels
    streams = direct(BEFORE, "SELECT deviceId, COUNT(DISTINCT streamId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1")
    assert all(count == 1 for _, count in streams)
    for device in before_timeline.devices:
        assert device["exposed_communication_ns"] == device["communication_ns"]


def test_report_names_the_exposed_device():
    model = analyze([str(BEFORE)])
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    # all 17.17 ms of device 0's NCCL time is exposed; its savings are its budget's exposed communication
    assert finding["device_id"] == 0 and finding["evidence"]["exposed_communication_ns"]["value"] == 17172652
    device = next(d for d in model["timeline"]["devices"] if d["device_id"] == 0)
    exposed = next(p["ns"] for p in device["budget"] if p["part"] == "gpu_communication")
    assert finding["estimated_savings_ns"] == pytest.approx(exposed, abs=1) and exposed <= 17172652
    assert "rank-imbalance" not in {f["check"] for f in model["findings"]}   # 253.7 vs 256.1 ms of compute: 0.9%


def test_after_run_moves_the_waiting_to_the_other_gpu():
    model = analyze([str(AFTER)])
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert finding["device_id"] == 1


def test_imbalance_fires_when_lowered(before_timeline):
    from nsanalyze.checks.program import rank_imbalance

    finding = rank_imbalance.run(before_timeline, {"min_imbalance_share": 0.005})
    assert finding.device_id == 1                      # 256.1 ms of compute against 253.7 ms
    # the budget's compute is the union of compute kernels in time: within 1% of the kernel sums' difference
    assert finding.evidence["extra_compute_ns"]["value"] == pytest.approx(256095624 - 253703274, rel=0.01)


def test_per_rank_exports_merge(tmp_path):
    """The two ranks of the real export split into one export per GPU, as `nsys profile -o rank%q{RANK}` writes."""
    _, local = open_local(BEFORE)
    paths = []
    for rank in (0, 1):
        path = tmp_path / f"rank{rank}.sqlite"
        shutil.copy(local, path)
        with sqlite3.connect(path) as con:
            for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
                con.execute(f"DELETE FROM {table} WHERE deviceId != ?", (rank,))
        paths.append(str(path))
    model = analyze(paths)
    merged = model["timeline"]["merged"]
    assert merged["clock_alignment"].startswith("aligned") and [r["clock_offset_ns"] for r in merged["ranks"]] == [0, 0]
    assert [d["device_id"] for d in model["timeline"]["devices"]] == ["0:0", "1:1"]
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert finding["device_id"] == "0:0"
    # a rank without a session start cannot be aligned, and the report says so
    with sqlite3.connect(paths[1]) as con:
        con.execute("DELETE FROM TARGET_INFO_SESSION_START_TIME")
    assert analyze(paths)["timeline"]["merged"]["clock_alignment"].startswith("not aligned")


def test_before_after_pair_through_diff():
    from nsanalyze.diff import diff

    result = diff(str(BEFORE), str(AFTER))
    rows = {k["name"]: k for k in result["kernels"]}
    flash = rows["flash_fwd_kernel"]
    sums = [dict(direct(p, """SELECT s.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                              JOIN StringIds s ON s.id = k.shortName GROUP BY k.shortName"""))["flash_fwd_kernel"]
            for p in (BEFORE, AFTER)]
    assert (flash["before_ns"], flash["after_ns"]) == tuple(sums)
    assert flash["verdict"] in ("within noise", "improvement", "regression")


PER_RANK = {"host": ("ddp_host_rank0_nsys.sqlite.xz", "ddp_host_rank1_nsys.sqlite.xz"),
            "gpu": ("ddp_gpu_rank0_nsys.sqlite.xz", "ddp_gpu_rank1_nsys.sqlite.xz")}


@pytest.mark.parametrize("side", ["host", "gpu"])
def test_straggler_named_from_per_rank_exports(side):
    """Two-rank DDP on two H200s, one nsys export per rank (fixtures/real/README.md): rank 1 is slow on
    the host (sleeps 4 ms a step) or on the GPU (extra matrix products)."""
    from tests.conftest import REAL

    model = analyze([str(REAL / name) for name in PER_RANK[side]])
    program = [f for f in model["findings"] if f["kernel_id"] is None]
    checks = [f["check"] for f in program]
    assert len(checks) == len(set(checks))                                  # one finding per cause
    above = {f["check"]: f for f in program if f["severity"] != "info"}
    straggler = above["rank-imbalance"]
    assert straggler["severity"] in ("high", "medium") and straggler["gpu"] == {"rank": 1, "device": 1}
    assert straggler["evidence"]["straggler_side"] == ("host" if side == "host" else "GPU")
    waiting = above["exposed-communication"]
    assert waiting["severity"] in ("high", "medium") and waiting["gpu"]["rank"] == 0
    assert "straggler" in waiting["title"]
    assert sum(f["estimated_savings_ns"] for f in program) <= model["timeline"]["span_ns"] * 1.0001
    for device in model["timeline"]["devices"]:
        assert isinstance(device["rank"], int) and isinstance(device["device"], int)
        assert device["device_id"] == f"{device['rank']}:{device['device']}"
