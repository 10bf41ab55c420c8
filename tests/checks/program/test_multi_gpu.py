"""Multi-GPU exports (nsys 2026.2, two GPUs, NCCL): per-device figures checked against direct SQL,
exposed communication, imbalance, and per-rank exports merged on a common clock."""

import re
import shutil
import sqlite3

import pytest

from nsanalyze.analyze import analyze
from nsanalyze.checks import limits_for
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from nsanalyze.read.files import open_local
from nsanalyze.render.format import window_lines
from tests.conftest import PUBLIC, REAL, sql, union_intervals

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
    devices = {d.device_id: d for d in before_timeline.devices}
    assert {k: d.kernel_ns for k, d in devices.items()} == expected
    assert {k: d.communication_ns for k, d in devices.items()} == nccl == {0: 17172652, 1: 8229100}


def test_exposed_communication_on_one_stream(before_timeline):
    # every kernel of a device runs on one stream here, so nothing overlaps the NCCL kernels
    streams = direct(BEFORE, "SELECT deviceId, COUNT(DISTINCT streamId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1")
    assert all(count == 1 for _, count in streams)
    for device in before_timeline.devices:
        assert device.exposed_communication_ns == device.communication_ns


def test_report_names_the_exposed_device(analyzed):
    model = analyzed(BEFORE)
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    # all 17.17 ms of device 0's NCCL time is exposed (one stream), but device 1 spends only 8.23 ms in its
    # collectives: the other 8.94 ms is device 0 waiting for it, which overlap cannot hide. The finding saves the
    # transfers, device 1's exposed communication, under the headline budget's exposed-communication part
    nccl = dict(direct(BEFORE, """SELECT k.deviceId, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                                 JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' GROUP BY 1"""))
    assert finding["device_id"] == 0 and finding["evidence"]["exposed_communication_ns"]["value"] == nccl[0]
    parts = {d["device_id"]: _part(d["budget"], "gpu_communication") for d in model["timeline"]["devices"]}
    assert finding["estimated_savings_ns"] == pytest.approx(parts[1], abs=1) and parts[1] <= nccl[1]
    assert finding["evidence"]["waiting_for_straggler_ns"]["value"] == pytest.approx(parts[0] - parts[1], rel=1e-5)
    assert finding["estimated_savings_ns"] <= _part(model["timeline"]["budget"], "gpu_communication")
    assert "rank-imbalance" not in {f["check"] for f in model["findings"]}   # 8.9 ms of waiting: 3% of the window


def _part(budget, name):
    return next(p["ns"] for p in budget if p["part"] == name)


def _within_their_parts(model):
    """A finding never saves more than its part: the budget part of its GPU, else the budget it was judged on
    (the export's; with per-rank exports, a rank's finding comes from that rank's GPUs)."""
    devices = {d["device_id"]: d for d in model["timeline"]["devices"]}
    merged = "merged" in model["timeline"]
    for finding in model["findings"]:
        if finding["kernel_id"] is not None or not finding.get("budget_part"):
            continue
        part = finding["budget_part"]
        if finding.get("budget_device") in devices:
            limit = _part(devices[finding["budget_device"]]["budget"], part)
        elif merged:
            own = [d for d in devices.values() if d["rank"] == finding["gpu"]["rank"]
                   and finding.get("budget_device") in (None, d["device"])]
            limit = sum(_part(d["budget"], part) for d in own) / len(own)
        else:
            limit = _part(model["timeline"]["budget"], part)
        assert finding["estimated_savings_ns"] <= limit + 1, finding["check"]


def _exposed_by_sql(path, window):
    """Per GPU, the NCCL kernels' time inside the window with no other kernel running on that GPU: the union of
    the NCCL intervals less the union of the compute intervals, from the export's kernel rows."""
    rows = direct(path, """SELECT k.deviceId, k.start, k.end, s.value LIKE 'nccl%' FROM CUPTI_ACTIVITY_KIND_KERNEL k
                           JOIN StringIds s ON s.id = k.shortName""")

    exposed = {}
    for device in {r[0] for r in rows}:
        clip = [(max(s, window[0]), min(e, window[1]), c) for d, s, e, c in rows
                if d == device and e > window[0] and s < window[1]]
        comm = union_intervals([(s, e) for s, e, c in clip if c])
        compute = union_intervals([(s, e) for s, e, c in clip if not c])
        total = 0
        for start, end in comm:
            cursor = start
            for c_start, c_end in compute:
                if c_end <= cursor or c_start >= end:
                    continue
                total += max(0, c_start - cursor)
                cursor = max(cursor, c_end)
            total += max(0, end - cursor)
        exposed[device] = total
    return exposed


def test_host_straggler_one_cause_in_one_export(analyzed):
    """torchrun, 2 ranks in one export: rank 1 sleeps 4 ms a step in host code, rank 0 waits in NCCL. The wait is
    rank-imbalance's saving, first; exposed-communication keeps the transfers only; host-wait (the sleep, the
    straggler's own host time) is the same cause, counted after it."""
    from tests.conftest import REAL

    path = REAL / "ddp_host_all_nsys.sqlite.xz"
    model = analyzed(path)
    window = (model["timeline"]["window"]["start_ns"], model["timeline"]["window"]["end_ns"])
    exposed = _exposed_by_sql(path, window)
    # the straggler by SQL: the GPU of the process with kernels whose threads sleep (clock_nanosleep) the most
    sleeper = direct(path, """SELECT o.globalTid / 16777216 FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId
                              WHERE s.value LIKE '%nanosleep' AND o.globalTid / 16777216 IN
                                  (SELECT DISTINCT globalPid / 16777216 FROM CUPTI_ACTIVITY_KIND_KERNEL)
                              GROUP BY 1 ORDER BY SUM(o.end - o.start) DESC LIMIT 1""")[0][0]
    slow = direct(path, f"SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid / 16777216 = {sleeper}")
    assert len(slow) == 1 and min(exposed, key=exposed.get) == slow[0][0]
    slow, waiting = slow[0][0], next(d for d in exposed if d != slow[0][0])
    program = [f for f in model["findings"] if f["kernel_id"] is None]
    checks = {f["check"]: f for f in program}
    imbalance, comm, host = checks["rank-imbalance"], checks["exposed-communication"], checks["host-wait"]
    assert imbalance["rank"] == 1 and imbalance["device_id"] == slow and imbalance["evidence"]["straggler_side"] == "host"
    assert imbalance["evidence"]["straggler_part"] == "idle_host" and "idle_host" in imbalance["title"]
    assert imbalance["estimated_savings_ns"] == pytest.approx(exposed[waiting] - exposed[slow], rel=1e-6)   # 450.06 ms
    assert comm["device_id"] == waiting and comm["estimated_savings_ns"] == pytest.approx(exposed[slow], rel=1e-6)
    assert comm["evidence"]["waiting_for_straggler_share"]["value"] > 0.9 and comm["severity"] == "info"
    devices = {d["device_id"]: d for d in model["timeline"]["devices"]}
    idle_host = {d: _part(devices[d]["budget"], "idle_host") for d in devices}
    assert host["evidence"]["counted_in"] == "rank-imbalance" and host["rank"] > imbalance["rank"]
    assert host["estimated_savings_ns"] <= idle_host[waiting] + 1e3   # at most what the GPUs share
    assert imbalance["estimated_savings_ns"] + comm["estimated_savings_ns"] <= \
        _part(devices[waiting]["budget"], "gpu_communication") + 1
    _within_their_parts(model)
    assert sum(f["estimated_savings_ns"] for f in program) <= model["timeline"]["span_ns"]
    assert not [f["title"] for f in (imbalance, comm, host) if "(s)" in f["title"]]   # plurals written out


def test_after_run_moves_the_waiting_to_the_other_gpu(analyzed):
    model = analyzed(AFTER)
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert finding["device_id"] == 1


def test_imbalance_fires_when_lowered(before_timeline):
    from nsanalyze.checks.program import rank_imbalance

    finding = rank_imbalance.run(before_timeline, limits_for(rank_imbalance, {"rank-imbalance.min_imbalance_share": 0.005}))
    assert finding.device_id == 1                      # 256.1 ms of compute against 253.7 ms
    # the budget's compute is the union of compute kernels in time: within 1% of the kernel sums' difference
    assert finding.evidence["extra_compute_ns"]["value"] == pytest.approx(256095624 - 253703274, rel=0.01)


def test_the_straggler_is_told_where_it_is_slow(analyzed, before_timeline):
    """GPU 1, the straggler GPU 0 waits 8.9 ms for, computes 2.4 ms longer but idles 6.7 ms more (its host): the
    exposed-communication title said "balancing the GPUs removes that" (a user read: both run the same kernels).
    It now says where the straggler is slow, as rank-imbalance's finding does when it speaks."""
    from nsanalyze.checks.program import rank_imbalance

    lowered = rank_imbalance.run(before_timeline, limits_for(rank_imbalance,
                                                             {"rank-imbalance.min_imbalance_share": 0.005}))
    assert lowered.evidence["straggler_side"] == "host"
    model = analyzed(BEFORE)
    host = {d["device_id"]: sum(_part(d["budget"], k) for k in rank_imbalance.HOST_PARTS)
            for d in model["timeline"]["devices"]}
    extra_host = host[1] - host[0]
    title = next(f for f in model["findings"] if f["check"] == "exposed-communication")["title"]
    assert f"waits for GPU 1, a straggler that reaches the collectives later, slow on the host (its GPU idles " \
           f"{extra_host / 1e6:.1f} ms more than the others', its compute 2.4 ms longer): what holds its host " \
           "removes that, overlap cannot" in title
    assert "balancing" not in title


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
    # a rank without a session start cannot be told a rank of the run (--as-ranks), nor aligned: the report says so
    with sqlite3.connect(paths[1]) as con:
        con.execute("DELETE FROM TARGET_INFO_SESSION_START_TIME")
    from nsanalyze.analyze import Options
    from nsanalyze.errors import InputError

    with pytest.raises(InputError, match="cannot tell whether they are ranks of one run: .*rank1.sqlite gives no capture"):
        analyze(paths)
    merged = analyze(paths, Options(as_ranks=True))["timeline"]["merged"]
    assert merged["clock_alignment"].startswith("not aligned")


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
    # the waiting rank's exposed communication is mostly waiting: rank-imbalance's saving; exposed-communication
    # keeps the straggler's own bare collectives (the transfers), well below it
    waiting = next(f for f in program if f["check"] == "exposed-communication")
    devices = {d["device_id"]: d for d in model["timeline"]["devices"]}
    comm = {k: _part(d["budget"], "gpu_communication") for k, d in devices.items()}
    assert waiting["gpu"]["rank"] == 0 and "straggler" in waiting["title"]
    # both as measured, or both scaled alike when the program's findings together exceed the window (gpu side)
    scale = straggler["estimated_savings_ns"] / (comm["0:0"] - comm["1:1"])
    assert scale == pytest.approx(1, rel=1e-6) or "scaled by" in " ".join(straggler["notes"])
    assert waiting["estimated_savings_ns"] == pytest.approx(comm["1:1"] * scale, rel=1e-6)
    assert straggler["rank"] < waiting["rank"]
    if side == "host":   # rank 1's host time is what rank 0 waits for: counted in rank-imbalance
        host = next(f for f in program if f["check"] == "host-wait")   # the sleep
        assert host["evidence"]["counted_in"] == "rank-imbalance" and host["severity"] == "info"
    _within_their_parts(model)
    assert sum(f["estimated_savings_ns"] for f in program) <= model["timeline"]["span_ns"] * 1.0001
    for device in model["timeline"]["devices"]:
        assert isinstance(device["rank"], int) and isinstance(device["device"], int)
        assert device["device_id"] == f"{device['rank']}:{device['device']}"


def test_own_work_is_priced_by_removal_the_same_kernels_by_balancing():
    """ddp_gpu: rank 1 runs extra matrix products no other rank runs (by SQL, a GEMM kernel only GPU 1 runs
    holds more than its whole extra time): its catching up gives back the least wait, and the finding says
    what spreading the work would save instead (half of it with two GPUs). Rebuilt without the kernel only
    it runs, the straggler's extra lies in the kernels both run, and the saving is what balancing gives."""
    import copy

    from tests.conftest import REAL

    path = REAL / "ddp_gpu_all_nsys.sqlite.xz"
    only = direct(path, """SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.deviceId = 1
                           AND k.shortName NOT IN (SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0)""")[0][0]
    timeline = build_timeline(read_profile(path))
    from nsanalyze.checks.program import rank_imbalance

    limits = limits_for(rank_imbalance)
    finding = rank_imbalance.run(timeline, limits)
    wait = finding.evidence["others_wait_ns"]["value"]
    assert finding.device_id == 1 and only > finding.evidence["extra_compute_ns"]["value"]
    assert finding.evidence["extra_in_own_kernels_share"]["value"] > 0.9
    assert finding.estimated_savings_ns == pytest.approx(wait)
    assert finding.evidence["balanced_savings_ns"]["value"] == pytest.approx(wait / 2, rel=1e-5)
    shared = [r for r in timeline.device_kernels if r.name in {k.name for k in timeline.device_kernels if k.device_id == 0}]
    rebuilt = copy.copy(timeline)
    rebuilt.device_kernels = tuple(shared)
    balanced = rank_imbalance.run(rebuilt, limits)
    assert "extra_in_own_kernels_share" in balanced.evidence
    assert balanced.evidence["extra_in_own_kernels_share"]["value"] == 0.0
    assert balanced.estimated_savings_ns == pytest.approx(wait / 2, rel=1e-5)


def test_one_rank_alone_is_told_it_waits_for_another(analyzed):
    """The per-rank exports of ddp_gpu, each alone: rank 0's all-reduces take 0.29 ms at their 10th percentile
    and 4.6 ms on average (by SQL), waiting for rank 1, which runs extra products; rank 1's take 0.08 / 0.12 ms.
    Rank 0's report says its collectives wait for another rank and asks for all ranks, and prices no overlap for
    time that is waiting; rank 1's says nothing of the kind."""
    from tests.conftest import REAL

    def spread(path, device):
        durations = sorted(d for (d,) in direct(path, f"""SELECT k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'ncclDevKernel_AllReduce%' AND k.deviceId = {device}"""))
        return sum(durations) / len(durations) / durations[len(durations) // 10]

    waiting, straggler = REAL / "ddp_gpu_rank0_nsys.sqlite.xz", REAL / "ddp_gpu_rank1_nsys.sqlite.xz"
    assert spread(waiting, 0) > 10 and spread(straggler, 1) < 2
    model = analyzed(waiting)
    device = model["timeline"]["devices"][0]
    assert device["communication_wait_ns"] > 0.9 * device["communication_ns"]
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert "for another rank, which this export does not hold" in finding["title"]
    assert finding["estimated_savings_ns"] < 0.01 * device["communication_ns"]
    assert "profile all ranks" in " ".join(window_lines(model["timeline"]))
    other = analyzed(straggler)
    assert other["timeline"]["devices"][0]["communication_wait_ns"] < 0.5 * other["timeline"]["devices"][0]["communication_ns"]
    assert "profile all ranks" not in " ".join(window_lines(other["timeline"]))

    # Both ranks given: the header is rank 0's and says so, and the rank it waits for is in the report.
    merged = analyze([str(waiting), str(straggler)])
    header = window_lines(merged["timeline"])
    assert "profile all ranks" not in " ".join(header)
    assert any(line.startswith("Steps of rank 0 (the first export): ") for line in header)
    assert any(line.startswith("Time budget of a median step of rank 0 (the first export): ") for line in header)


def test_one_rank_alone_says_how_long_it_waited_and_how_to_find_the_late_rank(analyzed):
    """Review of round four: ddp_gpu's rank 0 alone spends most of its window waiting in all-reduces for rank 1,
    and its report said only "No findings above info" with a vague clause in the steps' paragraph. The wait is not a
    saving this export measures (the late rank's cause is in the other export), so the finding stays info; the
    header now says on a line of its own how long the collectives waited with nothing beside them (the finding's
    figure, within the NCCL kernels' time by SQL), that the late rank is not here, and how to profile all ranks;
    the health line no longer reads as if nothing held the program back; the finding leads with the wait."""
    from nsanalyze.numbers import ms_text
    from nsanalyze.render.format import health_line
    from tests.conftest import REAL

    path = REAL / "ddp_gpu_rank0_nsys.sqlite.xz"
    model = analyzed(path)
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert finding["severity"] == "info" and finding["estimated_savings_ns"] < 0.01 * finding["evidence"]["waiting_for_straggler_ns"]["value"]
    waited = finding["evidence"]["waiting_for_straggler_ns"]["value"]
    window = model["timeline"]["devices"][0]["window_ns"]
    (nccl,), = direct(path, f"""SELECT SUM(MIN(k.end, {model['timeline']['window']['end_ns']})
                                    - MAX(k.start, {model['timeline']['window']['start_ns']}))
                               FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                               WHERE s.value LIKE 'nccl%' AND k.end > {model['timeline']['window']['start_ns']}
                                 AND k.start < {model['timeline']['window']['end_ns']}""")
    assert 0.5 * window < waited <= nccl
    line = next(l for l in window_lines(model["timeline"]) if l.startswith("This rank's collectives waited"))
    assert line.startswith(f"This rank's collectives waited {ms_text(waited)} ({waited / window:.0%} of the window)")
    assert "not in this export" in line and "profile all ranks" in line.lower() and "--as-ranks" in line
    assert "time at stake" in health_line(model) and "nothing here holds" not in health_line(model)
    assert finding["title"].startswith(f"GPU 0 waits {waited / 1e6:.1f} ms ({waited / window:.0%} of its time)")


def test_a_roles_share_is_of_every_gpus_time(analyzed):
    """mfu_2gpu_before: two GPUs' cast kernels (45.1 ms summed) over one GPU's 299 ms window read as 15% of the window,
    twice their share of the GPUs' time (a user read). The share a role check compares with its threshold is of both
    GPUs' time in the window, which SQL gives two of."""
    from tests.conftest import sql

    (gpus,), = sql(BEFORE, "SELECT COUNT(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    model = analyzed(BEFORE)
    casts = next(f for f in model["findings"] if f["check"] == "dtype-casts")
    span = model["timeline"]["span_ns"]
    assert gpus == 2
    share = casts["evidence"]["cast_share"]["value"]
    assert share == pytest.approx(casts["evidence"]["cast_ns"]["value"] / (gpus * span), rel=1e-6)
    assert 0.07 < share < 0.08


# PyTorch's operator ranges (`aten::to, op_id = 999599`) that start in a window, by SQL over the export's NVTX ranges
OPERATOR_RANGES = """SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
    WHERE n.eventType = 59 AND (COALESCE(n.text, s.value) LIKE '%, op_id = %' OR COALESCE(n.text, s.value) LIKE
    '%, seq = %') AND n.start >= {} AND n.start < {}"""


def test_operator_annotation_is_said_before_the_host_times_are_read(analyzed):
    """Both nsys-ai exports were recorded in PyTorch's NVTX mode without shapes: a range around every operator (SQL:
    4.7 a launch call in the before run's window), which costs the host little (opt_loop_annot under nsys's
    --pytorch=autograd-nvtx ran no slower than opt_loop unannotated). The report says the host's times are near the
    program's own, and launch-overhead keeps its advice; a loop with only its own `step N` ranges says nothing."""
    for path in (BEFORE, AFTER):
        model = analyzed(path)
        window, launches = model["timeline"]["window"], model["timeline"]["launches"]
        (ranges,), = sql(path, OPERATOR_RANGES.format(window["start_ns"], window["end_ns"]))
        assert ranges > 10_000 and launches["operator_ranges"] == ranges and "operator_ranges_with_shapes" not in launches
        assert ranges >= 4 * launches["launch_calls"]
        note = next(n for n in model["timeline"]["notes"] if n.startswith("PyTorch's NVTX mode annotated every "
                                                                           f"operator: {ranges:,} operator ranges"))
        assert "without the inputs' shapes" in note and "cost the host little" in note
    launch = next(f for f in analyzed(BEFORE)["findings"] if f["check"] == "launch-overhead")
    # (no annotation lead: at most the paragraph on where the launch wait lies before the graph's advice)
    plain = re.sub(r"^\d+% of this wait lies between the CUDA calls, not in them:.*?\n\n", "", launch["advice"], flags=re.S)
    assert "NVTX" not in launch["title"] and plain.startswith("Launch fewer, bigger kernels.")
    quiet = analyzed(REAL / "alloc_churn_nsys.sqlite.xz")
    assert "operator_ranges" not in quiet["timeline"]["launches"]
    assert not any("NVTX mode" in n for n in quiet["timeline"]["notes"])


def test_operator_ranges_with_shapes_lead_the_launch_advice(tmp_path):
    """The before run's operator ranges given the inputs' shapes in their text, as record_shapes=True writes them
    (`aten::to, op_id = 999599, sizes = [[16, 512], []]`): each text is then built on the host, microseconds an
    operator, so the note says the host's times hold that work and launch-overhead leads with it."""
    _, local = open_local(BEFORE)
    path = tmp_path / "shapes.sqlite"
    shutil.copy(local, path)
    with sqlite3.connect(path) as con:
        for table, column in (("StringIds", "value"), ("NVTX_EVENTS", "text")):
            con.execute(f"UPDATE {table} SET {column} = {column} || ', sizes = [[16, 512], []]' "
                        f"WHERE {column} LIKE '%, op_id = %'")
    model = analyze([str(path)])
    launches = model["timeline"]["launches"]
    assert launches["operator_ranges"] == launches["operator_ranges_with_shapes"] > 10_000
    assert any(n.startswith("PyTorch's NVTX mode annotated every operator") and "with the inputs' shapes" in n
               and "host time to win back" in n for n in model["timeline"]["notes"])
    launch = next(f for f in model["findings"] if f["check"] == "launch-overhead")
    assert launch["advice"].startswith("Every operator here runs inside an NVTX range of PyTorch's NVTX mode (4.7 a "
                                    "kernel launch call) whose text holds the inputs' shapes")
    assert "PyTorch's NVTX mode annotates every operator (4.7 ranges a launch call)" in launch["title"]


def test_point_to_point_on_the_compute_stream_gets_its_own_advice(analyzed):
    """nsys-ai's mfu_2gpu_after: by SQL, every NCCL kernel is ncclDevKernel_SendRecv (point to point: pipeline stages),
    on the one stream each GPU runs its compute kernels on. exposed-communication used to advise DDP's buckets; it now
    leads with the shared stream (nothing on it can overlap) and gives the send and receive advice. DDP's all-reduces
    (ddp_gpu_all), on streams of their own by SQL, keep the collectives' advice."""
    rows = sql(AFTER, """SELECT k.deviceId, s.value LIKE 'nccl%', s.value, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k
                         JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 2, 3, 4""")
    nccl = {(device, name) for device, comm, name, _ in rows if comm}
    assert nccl and all("SendRecv" in name for _, name in nccl)
    for device in {d for d, _ in nccl}:
        comm = {stream for d, c, _, stream in rows if d == device and c}
        compute = {stream for d, c, _, stream in rows if d == device and not c}
        assert comm <= compute
    model = analyzed(AFTER)
    # (the window's budget is each part's mean over the two GPUs, and the header says so)
    header = next(line for line in window_lines(model["timeline"]) if line.startswith("Time budget of the window"))
    assert ", the mean of its 2 GPUs)" in header
    per_gpu = [{p["part"]: p["ns"] for p in d["budget"]} for d in model["timeline"]["devices"]]
    window = {p["part"]: p["ns"] for p in model["timeline"]["budget"]}
    assert window["gpu_communication"] == pytest.approx(sum(b["gpu_communication"] for b in per_gpu) / 2, rel=0.01)
    finding = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert "communication kernels run on the stream of its compute kernels" in finding["advice"]
    assert "dist.batch_isend_irecv" in finding["advice"] and "bucket_cap_mb" not in finding["advice"]
    ddp = REAL / "ddp_gpu_all_nsys.sqlite.xz"
    streams = sql(ddp, """SELECT k.deviceId, s.value LIKE 'nccl%', k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k
                          JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 2, 3""")
    assert not {(d, st) for d, c, st in streams if c} & {(d, st) for d, c, st in streams if not c}
    collective = next(f for f in analyzed(ddp)["findings"] if f["check"] == "exposed-communication")
    assert "bucket_cap_mb" in collective["advice"] and "stream of its compute" not in collective["advice"]


def test_a_straggler_wait_below_rank_imbalances_threshold_says_its_share(analyzed):
    """mfu_2gpu_before: GPU 0 waits 8.94 ms in its collectives for GPU 1, 3% of its window, under rank-imbalance's 5%:
    no rank-imbalance finding, and exposed-communication's note, which names the check that prices such a wait, says the
    wait's own share beside that threshold (a user read looked for the finding the note named)."""
    from nsanalyze.checks.program import rank_imbalance

    model = analyzed(BEFORE)
    comm = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    note = next(n for n in comm["notes"] if "which prices that" in n)
    waiting_ms = float(re.search(r"the other ([\d.]+) ms is waiting for the straggler", note).group(1))
    share = int(re.search(r"; this wait is (\d+)% of it\)", note).group(1)) / 100
    window = next(d["window_ns"] for d in model["timeline"]["devices"] if d["device_id"] == 0)
    assert share == pytest.approx(waiting_ms * 1e6 / window, abs=0.005)
    assert share < limits_for(rank_imbalance).min_imbalance_share
    assert "rank-imbalance" not in {f["check"] for f in model["findings"]}
