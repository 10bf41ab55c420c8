"""Phases (normalize.phases): top-level NVTX range groups over the whole capture, with their budgets."""

import pytest

from tests.conftest import DEV_INFER_NSYS, REAL, program_findings, sql

NVTX_NAMED = """SELECT {what} FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                WHERE n.eventType = 59 AND COALESCE(n.text, s.value) = '{name}'"""


@pytest.fixture(scope="module")
def bf16_window():
    """dev_infer analysed over its last phase alone (`--nvtx-range bf16_autocast`): the batch-1 request loop and
    the batched phase lie wholly before the window."""
    from nsanalyze.analyze import Options, analyze

    return analyze([str(DEV_INFER_NSYS)], Options(nvtx_range="bf16_autocast"))


def test_a_phase_outside_the_window_is_kept(bf16_window):
    """The request loop outside the window is still a phase, with its own budget that adds up to its time and its
    first cause."""
    timeline = bf16_window["timeline"]
    phases = {p["name"]: p for p in timeline["phases"]}
    per_request = phases["per_request"]
    start, end = sql(DEV_INFER_NSYS, NVTX_NAMED.format(what="n.start, n.end", name="per_request"))[0]
    assert (per_request["start_ns"], per_request["end_ns"], per_request["count"]) == (start, end, 1)
    assert per_request["in_window_ns"] == 0
    assert sum(p["ns"] for p in per_request["budget"]) == pytest.approx(end - start, rel=0.01)
    assert per_request["first_finding"]["check"] == "host-compute"
    assert "bf16_autocast" in phases      # digits inside a word are part of the name


def test_the_header_names_the_phases(bf16_window):
    from nsanalyze.render.format import window_lines

    lines = window_lines(bf16_window["timeline"])
    assert any(line.startswith("Phases: ") and "per_request ×1" in line and "outside the window" in line
               for line in lines)


def test_checkpoints_that_hold_the_run_come_first(analyzed):
    """Epochs of 20 train steps, 5 eval steps and a 1 GB torch.save: the checkpoints take most of the
    window between the first and the last step; the first finding names that phase, its share and cause."""
    model = analyzed(REAL / "phases_nsys.sqlite.xz")
    phases = {p["name"]: p for p in model["timeline"]["phases"]}
    checkpoint = phases["checkpoint"]
    durations = [d for (d,) in sql(REAL / "phases_nsys.sqlite.xz", NVTX_NAMED.format(what="n.end - n.start",
                                                                                     name="checkpoint"))]
    assert checkpoint["count"] == 3 and checkpoint["duration_ns"] == sum(durations)
    first = program_findings(model)[0]
    assert first["check"] == "non-step-phase" and first["severity"] == "high"
    assert "'checkpoint' phase" in first["title"]
    share = checkpoint["in_window_ns"] / model["timeline"]["span_ns"]
    assert f"holds {share:.0%} of the window" in first["title"] and share > 0.5
    assert first["estimated_savings_ns"] <= checkpoint["in_window_ns"]


def test_a_phase_of_several_ranks_says_over_how_many_processes(analyzed):
    """ddp_host_all holds both ranks' step ranges (SQL: 150 in each of 2 processes). Its phases read "step N ×300"
    beside a window of 149 steps (a user read); a phase whose instances come from several processes now says how
    many, its count and time summed over them. The one-process export of phases_nsys says nothing of the kind."""
    from nsanalyze.render.format import window_lines

    path = REAL / "ddp_host_all_nsys.sqlite.xz"
    model = analyzed(path)
    per_process = sql(path, "SELECT globalTid >> 24, COUNT(*) FROM NVTX_EVENTS WHERE text LIKE 'step %' GROUP BY 1")
    steps = next(p for p in model["timeline"]["phases"] if p["is_steps"])
    assert steps["processes"] == len(per_process) == 2 and steps["count"] == sum(n for _, n in per_process) == 300
    assert any("step N ×300 over 2 processes (" in line for line in window_lines(model["timeline"]))
    assert not [p for p in analyzed(REAL / "phases_nsys.sqlite.xz")["timeline"]["phases"] if "processes" in p]


def test_a_ranks_phase_is_measured_on_its_own_gpu(analyzed):
    """ddp_host_all: each rank's process launches on its own GPU (SQL: kernels of process p on device p's). A phase's
    budget measured each instance on both GPUs, averaged; now each on the GPU of the process that made it. Its busy
    parts then equal the union of that GPU's kernels, copies and memsets inside the process's step ranges, summed
    (SQL, merged by a plain loop)."""
    from tests.conftest import covered_ns

    path = REAL / "ddp_host_all_nsys.sqlite.xz"
    steps = next(p for p in analyzed(path)["timeline"]["phases"] if p["is_steps"])
    device_of = dict(sql(path, "SELECT DISTINCT globalPid >> 24, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert len(set(device_of.values())) == 2
    busy = 0
    for process, device in device_of.items():
        ranges = sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' "
                           f"AND globalTid >> 24 = {process}")
        work = sql(path, f"""SELECT start, end FROM (SELECT start, end, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL
                   UNION ALL SELECT start, end, deviceId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
                   SELECT start, end, deviceId FROM CUPTI_ACTIVITY_KIND_MEMSET)
                   WHERE deviceId = {device} ORDER BY start""")
        for start, end in ranges:
            busy += covered_ns((max(a, start), min(b, end)) for a, b in work if b > start and a < end)
    parts = {p["part"]: p["ns"] for p in steps["budget"]}
    assert parts["gpu_compute"] + parts["gpu_communication"] + parts["gpu_copy"] == pytest.approx(busy, rel=1e-4)


def test_steps_alone_are_no_phases(analyzed):
    assert analyzed(REAL / "matmul_sync_nsys.sqlite.xz")["timeline"]["phases"] == []


def test_ranges_named_after_code_are_no_phases(analyzed):
    """PyTorch's emit_nvtx op ranges (`aten::to, seq = N, op_id = N`) and C++ scopes (`FSDP::...`) in a
    public two-GPU export are code, not phases of the run."""
    from tests.conftest import PUBLIC

    path = PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_after.sqlite.xz"
    names = sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text LIKE '%::%'")
    assert names[0][0] > 0
    assert analyzed(path)["timeline"]["phases"] == []


def test_a_phase_tells_the_gpu_side_of_the_work_it_queued(analyzed):
    """dev_suite's phases are C++ ranges that only queue their work: `launches` takes 1.52 ms on the host and its 200
    kernels span 370 µs on the GPU, done 7.72 ms after the range. Each phase's GPU side against SQL: the first start to
    the last end of the GPU work whose launch call began inside its range, and that end less the range's."""
    from nsanalyze.render.format import phase_text
    from tests.conftest import DEV_SUITE_NSYS, WORK_TABLES

    phases = {p["name"]: p for p in analyzed(DEV_SUITE_NSYS)["timeline"]["phases"]}
    rows = sql(DEV_SUITE_NSYS, """SELECT n.text, MAX(l.end) - MIN(l.start), MAX(l.end) - n.end FROM NVTX_EVENTS n
                                  JOIN launched l ON l.call_start >= n.start AND l.call_start < n.end
                                  WHERE n.text IS NOT NULL GROUP BY n.rowid""", launched=WORK_TABLES)
    assert len(rows) == len(phases) == 5
    for name, gpu_ns, after_ns in rows:
        assert (phases[name]["gpu_ns"], phases[name]["gpu_end_after_ns"]) == (gpu_ns, after_ns)
    assert phase_text(phases["launches"]) == ("launches ×1 (1.52 ms on the host; its GPU work spans 370 µs, done "
                                              "7.72 ms after the range)")


def test_a_phase_whose_gpu_keeps_its_pace_is_told_by_its_host_time(analyzed):
    """nested_phases (a PyTorch loop, synchronous): its epochs' GPU work ends with them, so the line keeps the host
    times alone."""
    from nsanalyze.render.format import phase_text

    epoch = analyzed(REAL / "nested_phases_nsys.sqlite.xz")["timeline"]["phases"][0]
    assert epoch["name"] == "epoch N" and epoch["gpu_ns"] > 0
    assert "GPU" not in phase_text(epoch)


def test_a_phase_before_a_capture_windows_gpu_work_lies_outside_it(analyzed):
    """numba-jit's window is the whole capture, from its first to its last GPU work (147 ms); its copy-to-device
    phase's 265 ms range ends 0.49 ms into it. The phase read as 265 ms inside the window: a capture window's open
    bounds were taken for its extent."""
    from tests.conftest import PUBLIC

    timeline = analyzed(PUBLIC / "quasiben__nvtx-examples__numba-jit.sqlite.xz")["timeline"]
    window = timeline["window"]
    assert window["kind"] == "capture"
    phases = {p["name"]: p for p in timeline["phases"]}
    start, end = phases["copy-to-device"]["instances"][0]
    assert start < window["start_ns"] < end
    assert phases["copy-to-device"]["in_window_ns"] == min(end, window["end_ns"]) - window["start_ns"]
    assert all(p["in_window_ns"] <= window["end_ns"] - window["start_ns"] for p in phases.values())
