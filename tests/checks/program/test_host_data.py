"""host-data on real twins: the data a step moves between host and GPU, the host's work on it, and what keeping it
on the GPU saves, against SQL over the exports and against what each fix measured (the twins' mean GPU periods)."""

import pytest

from nsanalyze.analyze import Options
from nsanalyze.whatif import WhatIf, whatif
from tests.conftest import REAL, program_findings, sql, sql_saved_per_step

# (base, fix): each fix keeps the data on the GPU or makes it there. replaybuf: a DQN's replay buffer in NumPy, each
# batch gathered on the host and uploaded; tokenize: text tokenized in Python each step, then three blocking uploads;
# segeval: each batch's logits read back whole for NumPy's argmax; cpusample: each token's logits read back for
# top-p sampling in NumPy, the token uploaded; cpuemb: embedding tables on the CPU, rows uploaded and gradients read
# back; own67: a batch built in NumPy each step (the fix builds them before the loop)
PAIRS = [("blind74_replaybuf_base1", "blind74_replaybuf_fix1"), ("blind74_replaybuf_base2", "blind74_replaybuf_fix2"),
         ("blind75_tokenize_base1", "blind75_tokenize_fix1"), ("blind72_segeval_base1", "blind72_segeval_fix1"),
         ("blind75_cpusample_base1", "blind75_cpusample_fix1"), ("blind71_cpuemb_base1", "blind71_cpuemb_fix1"),
         ("own67_churn1", "own67_prebuilt1")]


def _path(name: str):
    return REAL / f"{name}_nsys.sqlite.xz"


@pytest.mark.parametrize("base, fix", PAIRS, ids=[b for b, _ in PAIRS])
def test_the_data_kept_on_the_gpu_is_first_and_prices_what_the_fix_saved(analyzed, base, fix):
    """Each of these programs' fixes removes the host's work on the data with its copies and their waits, which
    host-compute, pageable-memcpy and host-sync each priced in part (replaybuf's first finding was a graph of the
    step at 3.5 ms a step against 7.9 saved; tokenize's pinned copies 1.1-2.0 against 2.7-2.9). host-data replays
    the change they share, first, within 20% of what the fix saved."""
    model = analyzed(_path(base))
    first = program_findings(model)[0]
    assert first["check"] == "host-data"
    saved = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    assert saved == pytest.approx(sql_saved_per_step(analyzed, _path(base).name, _path(fix).name), rel=0.2)


def test_the_steps_data_is_counted_as_sql_counts_the_copies(analyzed):
    """The model's section against SQL: replaybuf uploads 5 copies a step (the frames twice at 512 x 4 x 84 x 84
    bytes, actions, dones and rewards) and reads nothing back; segeval reads one 84 MiB copy of logits a step back
    and uploads nothing (its images are made on the GPU)."""
    for name, copy_kind in (("blind74_replaybuf_base1", "Host-to-Device"),
                              ("blind72_segeval_base1", "Device-to-Host")):
        model = analyzed(_path(name))
        window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
        rows = dict(((kind, (n, size)) for kind, n, size in sql(_path(name), f"""SELECT e.label, COUNT(*), SUM(m.bytes)
            FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind
            WHERE m.start >= {window['start_ns']} AND m.start < {window['end_ns']} GROUP BY 1""")))
        data = model["timeline"]["host_data"]
        count, size = rows[copy_kind]
        if copy_kind == "Host-to-Device":
            assert data["uploads_per_step"] == pytest.approx(count / steps, abs=0.05) == 5
            assert data["upload_bytes_per_step"] == pytest.approx(size / steps, rel=0.01)
            assert size / steps > 2 * 512 * 4 * 84 * 84 and data["reads_per_step"] == 0
            assert data["work_before_uploads_ns_per_step"] > 0.3 * data["ns_per_step"]
        else:
            assert data["reads_per_step"] == pytest.approx(count / steps, abs=0.05) == 1
            assert size / count == 84 * 2 ** 20 and data["uploads_per_step"] == 0
            assert data["work_after_reads_ns_per_step"] > 0.3 * data["ns_per_step"]


@pytest.mark.parametrize("name", ["blind67_fields_base1", "blind57_landcover_base1", "blind69_graph_base1"])
def test_copies_without_the_hosts_work_on_them_are_left_to_the_copy_checks(analyzed, name):
    """fields (40 small pageable columns, each a blocking copy), landcover (two large uploads a step in line with
    the kernels) and a GCN's graph uploaded each step: the host does little to the data before each upload (under
    30% of what removing the copies takes away), their fixes change the copies (pinned, overlapped, moved once):
    host-data stays silent and the copy checks speak."""
    model = analyzed(_path(name))
    data = model["timeline"]["host_data"]
    assert data["uploads_per_step"] >= 2
    assert data["work_before_uploads_ns_per_step"] + data["work_after_reads_ns_per_step"] < 0.3 * data["ns_per_step"]
    checks = [f["check"] for f in program_findings(model)]
    assert "host-data" not in checks and {"pageable-memcpy", "transfer-bound"} & set(checks)


@pytest.mark.parametrize("run", [1])  # the second pair: bench/calibration.py's table (the suite's time)
def test_state_copied_out_each_step_is_first_and_prices_what_keeping_it_on_the_gpu_saved(analyzed, run):
    """blind77_hostsnap (round 77, read before any change): a GPT keeps a CPU copy of its weights after every step
    (`{k: v.detach().cpu() ...}`): SQL, 101 copies to the host a step, 35 of them of 64 KiB or more, 278.7 MB, nothing
    uploaded, and little host work after them. The fix keeps the copy on the GPU. Read blind, pageable-memcpy came
    first, pricing pinned copies (-28% and -49% against what the fix saved); host-data now speaks for state copied
    out (ten times the bytes uploaded or more), and its replay without the reads is within 25% of what the fix
    saved."""
    base, fix = f"blind77_hostsnap_base{run}", f"blind77_hostsnap_fix{run}"
    model = analyzed(_path(base))
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    rows = dict((kind, (n, size, big)) for kind, n, size, big in sql(_path(base), f"""SELECT e.label, COUNT(*),
        SUM(m.bytes), SUM(m.bytes >= 65536) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e
        ON e.id = m.copyKind WHERE m.start >= {window['start_ns']} AND m.start < {window['end_ns']} GROUP BY 1"""))
    count, size, big = rows["Device-to-Host"]
    assert count / steps == pytest.approx(101, abs=0.05) and big / steps == pytest.approx(35, abs=0.05)
    assert size / steps == pytest.approx(278.7e6, rel=0.001) and "Host-to-Device" not in rows
    data = model["timeline"]["host_data"]
    assert data["read_bytes_per_step"] == pytest.approx(278.4e6, rel=0.001) and data["upload_bytes_per_step"] == 0
    first = program_findings(model)[0]
    assert first["check"] == "host-data" and first["title"].startswith("The steps copy state to the host")
    assert "`torch._foreach_copy_(buffers, tensors)`" in first["advice"].split("\n\n")[0]
    # the example is state's, not a batch gathered on the host (nothing is uploaded: a user read)
    assert "torch._foreach_copy_(list(snapshot.values())" in first["advice"] and "buffer_obs" not in first["advice"]
    saved = first["estimated_savings_ns"] / steps
    assert saved == pytest.approx(sql_saved_per_step(analyzed, _path(base).name, _path(fix).name), rel=0.25)


def test_outputs_the_host_works_on_are_not_state_copied_out(analyzed):
    """graph51_hostmetrics: two reads of 64 KiB a step and nothing uploaded, but the host then computes metrics on
    them in NumPy for longer than the copies take: outputs it works on, not state; its first finding stays
    host-compute's."""
    model = analyzed(_path("graph51_hostmetrics_graph1"))
    data = model["timeline"]["host_data"]
    assert data["reads_per_step"] == 2 and data["upload_bytes_per_step"] == 0
    assert data["work_after_reads_ns_per_step"] > data["copy_ns_per_step"]
    assert program_findings(model)[0]["check"] == "host-compute"
    assert "host-data" not in [f["check"] for f in program_findings(model)]


def test_the_smaller_changes_are_counted_within_it(analyzed):
    """tokenize: every pageable copy is one of the step's uploads and every sync one of their waits (SQL: each
    cudaStreamSynchronize right after a cudaMemcpyAsync), so pinning the copies (pageable-memcpy) and removing the
    syncs (host-sync) are parts of keeping the data on the GPU: both speak with what they save alone, counted within
    host-data's saving, never added to it."""
    path = _path("blind75_tokenize_base2")
    (syncs, after_copies), = sql(path, """WITH c AS (SELECT r.globalTid tid, r.start, s.value name,
        ROW_NUMBER() OVER (PARTITION BY r.globalTid ORDER BY r.start) n
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId)
        SELECT COUNT(*), SUM(a.name LIKE 'cudaMemcpyAsync%') FROM c b JOIN c a ON a.tid = b.tid AND a.n = b.n - 1
        WHERE b.name LIKE 'cudaStreamSynchronize%'""")
    assert syncs == after_copies > 0
    findings = {f["check"]: f for f in program_findings(analyzed(path))}
    for inner in ("pageable-memcpy", "host-sync"):
        assert findings[inner]["evidence"]["within"] == "host-data"
        assert 0 < findings[inner]["estimated_savings_ns"] <= findings["host-data"]["estimated_savings_ns"]
    # pinned copies alone take no less time here: the replay's saving is the uploads' waits, which pinned memory drops
    # only with non_blocking=True; the savings note says so (a user read: "no less time" beside 2.01 ms a step)
    pinned = findings["pageable-memcpy"]
    assert "pinned, they would take no less time" in pinned["title"]
    assert any(n.startswith("savings: the replay of the steps with pageable copies at the pinned rate, with "
                            "non_blocking=True (their calls return once queued; the uploads' waits gone, ")
               for n in pinned["notes"])


def test_whatif_keeps_the_data_on_the_gpu_as_the_fix_did(analyzed):
    """`whatif --data-on-gpu` on replaybuf: its 5 uploads a step gone with the host's work before each, the mean step
    replayed within 20% of the fixed twin's."""
    base, fix = _path("blind74_replaybuf_base1"), _path("blind74_replaybuf_fix1")
    result = whatif([str(base)], Options(), WhatIf(data_on_gpu=True))[0]
    change, = result["changes"]
    assert change["change"] == "data-on-gpu" and change["reads"] == 0
    assert change["uploads"] == 5 * result["replayed_steps"]
    saved = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
    assert saved == pytest.approx(sql_saved_per_step(analyzed, base.name, fix.name), rel=0.2)


def test_state_moved_to_the_host_and_back_each_step_is_first(analyzed):
    """blind79_offload (round 78, read before any change): a service alternating requests between two models moves
    the idle one to the CPU and the next one back for each request. SQL: the copies of 64 KiB or more in the window
    move about the same bytes each way a step. Read blind, pageable-memcpy came first, pricing pinned copies at 34.0
    ms a step where keeping both models resident saved 51.7 (the window's means); host-data stayed silent, the host
    doing little with the bytes. A round trip of about the same bytes is now state parked on the host: host-data is
    first, its lead says so, and its saving is within 15% of the fix's (the slow steps at the window's start claim
    part of the copies' time). Its copies hold nearly all the pageable copy time (the rest: reads of a few bytes), so
    pinning them (pageable-memcpy) is counted within its change: the GPU's wait under their calls is host-data's
    (it saved 38.3 ms a step, said "saves only", while pageable-memcpy held that wait)."""
    base, fix = "blind79_offload_base1", "blind79_offload_fix1"
    model = analyzed(_path(base))
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    rows = dict(sql(_path(base), f"""SELECT e.label, SUM(m.bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
        JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind WHERE m.start >= {window['start_ns']}
        AND m.start < {window['end_ns']} AND m.bytes >= 65536 GROUP BY 1"""))
    up, down = rows["Host-to-Device"] / steps, rows["Device-to-Host"] / steps
    assert up > 150e6 and down > 150e6 and max(up, down) < 1.01 * min(up, down)
    data = model["timeline"]["host_data"]
    assert data["read_bytes_per_step"] == pytest.approx(down, rel=0.01)
    (pageable_ns, large_ns), = sql(_path(base), f"""SELECT SUM(m.end - m.start),
        SUM(CASE WHEN m.bytes >= 65536 THEN m.end - m.start ELSE 0 END) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
        JOIN ENUM_CUDA_MEM_KIND k ON k.id IN (m.srcKind, m.dstKind) WHERE k.label = 'Pageable'
        AND m.start >= {window['start_ns']} AND m.start < {window['end_ns']}""")
    assert large_ns > 0.95 * pageable_ns
    findings = program_findings(model)
    first = findings[0]
    assert first["check"] == "host-data" and first["title"].startswith("The steps move state to the host and back")
    assert "state parked on the host" in first["advice"].split("\n\n")[0]
    saved = first["estimated_savings_ns"] / steps
    assert saved == pytest.approx(sql_saved_per_step(analyzed, _path(base).name, _path(fix).name), rel=0.15)
    pinning, = [f for f in findings if f["check"] == "pageable-memcpy"]
    assert pinning["evidence"]["within"] == "host-data"
    assert f"a step saves {saved / 1e6:.1f} ms of its" in first["title"] and "saves only" not in first["title"]


def test_reads_written_to_files_each_step_are_one_finding_with_the_writes(analyzed):
    """blind79_fsynclog (round 78): a LoRA fine-tuning loop saves its adapters (48 tensors read back, 7.1 MB) and its
    metrics with fsync after every step; the fix writes them every 100 steps. host-data leads with the files written
    after the reads (fsync among the launching thread's file I/O) and holds them: its change takes the writes with
    the reads (it priced 14.0 ms a step and host-wait the writes' 8.5 apart, for one cause whose fix saved 22.1), so
    host-wait leaves the writes to it, and host-data alone prices what the fix saved within 15%."""
    base, fix = "blind79_fsynclog_base1", "blind79_fsynclog_fix1"
    model = analyzed(_path(base))
    steps = model["timeline"]["steps"]["count"]
    findings = {f["check"]: f for f in program_findings(model)}
    data = findings["host-data"]
    lead = data["advice"].split("\n\n")[0]
    assert lead.startswith("Each step reads back") and "fsync" in lead and "every N steps" in lead
    assert "its files written every N steps" in data["title"] and program_findings(model)[0] is data
    assert "host-wait" not in findings                    # its only wait class, the files, is host-data's
    saved = data["estimated_savings_ns"] / steps
    assert saved == pytest.approx(sql_saved_per_step(analyzed, _path(base).name, _path(fix).name), rel=0.15)
    assert data["evidence"]["file_io_idle_ns_per_step"]["value"] == pytest.approx(8.47e6, rel=0.01)


def test_waits_that_are_the_datas_reads_are_counted_within_it(analyzed):
    """blind79_fsynclog: of the host's waits, the checkpoint's reads back are nearly all (SQL: 48 copies to the host a
    step, each followed by a stream sync; the loss read once a step beside them). host-sync spoke apart, 3.9 ms a step
    with `.item()` advice; removing those waits is part of keeping the data on the GPU, so it is counted within
    host-data's finding and its advice leads with the reads. Each read and its sync are one wait: the title counted
    11,543 host synchronizations (both calls of each pair), 97 a step for 49 reads; it counts SQL's sync calls."""
    model = analyzed(_path("blind79_fsynclog_base1"))
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    (reads,), = sql(_path("blind79_fsynclog_base1"), f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
        JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind WHERE e.label = 'Device-to-Host' AND m.bytes > 8
        AND m.start >= {window['start_ns']} AND m.start < {window['end_ns']}""")   # (not the loss's 4 bytes)
    findings = {f["check"]: f for f in program_findings(model)}
    sync, data = findings["host-sync"], findings["host-data"]
    assert round(reads / steps) == round(data["evidence"]["reads_per_step"]["value"]) == 48
    (syncs,), = sql(_path("blind79_fsynclog_base1"), f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cuda%Synchronize%' AND r.start >= {window['start_ns']}
        AND r.start < {window['end_ns']}""")
    assert syncs > reads and sync["evidence"]["sync_calls"]["value"] == pytest.approx(syncs, abs=2)
    assert sync["title"].startswith(f"{sync['evidence']['sync_calls']['value']:,} host synchronizations")
    assert sync["evidence"]["within"] == "host-data"
    assert 0 < sync["estimated_savings_ns"] < data["estimated_savings_ns"]
    lead = sync["advice"].split("\n\n")[0]
    assert lead.startswith("The waits are the reads back of the data the host handles (host-data): 48 copies a step")
    assert any(n.startswith("counted within host-data: its change (the data kept on the GPU) removes these waits")
               for n in sync["notes"])


def test_a_steps_own_work_at_its_end_is_not_the_next_inputs(analyzed):
    """blind80_gccollect (recorded before any check looked at it): a training loop that calls gc.collect() after each
    step (a data set index of 2.3 million Python objects: about 310 ms a collection), inside the step's range, before
    the next step uploads its 128 KiB batch. Read blind, host-data came first, "2 uploads a step after 268 ms of its
    work on them", as if that work built the input. The gap's part inside the earlier step's range is that step's own
    work: host-compute comes first, with its lead on the step's end, within 10% of what the fix (no gc.collect()) saved."""
    base, fix = "blind80_gccollect_base1", "blind80_gccollect_fix1"
    model = analyzed(_path(base))
    steps = model["timeline"]["steps"]["count"]
    findings = program_findings(model)
    assert "host-data" not in {f["check"] for f in findings}
    first = findings[0]
    assert first["check"] == "host-compute" and first["advice"].startswith("The host's time lies at the end of each step")
    saved = sql_saved_per_step(analyzed, _path(base).name, _path(fix).name)
    assert first["estimated_savings_ns"] / steps == pytest.approx(saved, rel=0.10)


def test_a_replay_cut_to_what_its_change_takes_away_says_so(analyzed):
    """own67_churn1 (a user read): host-data saved 38.25 ms a step, its check's own estimate, beside a replay of 42.88
    (`replayed_savings_ns`), and no note said which figure the saving was. The replay is cut to the time its change
    takes away (the data's copies, calls and the host's work on them), which the note now says, with both figures."""
    model = analyzed(_path("own67_churn1"))
    steps = model["timeline"]["steps"]["count"]
    data = next(f for f in program_findings(model) if f["check"] == "host-data")
    replayed, saved = data["evidence"]["replayed_savings_ns"]["value"] / steps, data["estimated_savings_ns"] / steps
    assert replayed > 1.05 * saved
    note = next(n for n in data["notes"] if n.startswith("savings: the replay of the steps with the data kept"))
    assert f"({replayed / 1e6:.2f} ms a step, capped by the {saved / 1e6:.2f} ms a step the change takes away)" in note
