"""Program findings name the cause read off the time budget, on real PyTorch runs (fixtures/real).

Each fixture is a real recording of a program written to show one cause (fixtures/real/README.md);
the test asserts the first program finding and the budget figures that make it so."""

import re

import pytest

from tests.conftest import PUBLIC, REAL, program_findings, sql, sql_gpu_step_firsts

HOST_CAUSES = {"launch-overhead", "host-compute", "host-sync", "gpu-idle"}


def _first(analyzed, name):
    findings = program_findings(analyzed(REAL / name))
    assert findings, f"{name}: no program finding"
    return findings[0]


def _share(model, part):
    return next(p["share"] for p in model["timeline"]["budget"] if p["part"] == part)


def test_eager_loop_is_launch_bound(analyzed):
    first = _first(analyzed, "graphs_eager_nsys.sqlite.xz")
    assert first["check"] == "launch-overhead" and first["severity"] in ("high", "medium")
    assert "of a median 3." in first["title"]      # per-step figure: ~3.0 ms of a median ~3.5 ms step


def test_graph_replay_fixes_it(analyzed):
    model = analyzed(REAL / "graphs_after_nsys.sqlite.xz")
    assert model["timeline"]["gpu_busy_share"] >= 0.6
    assert not [f for f in program_findings(model) if f["check"] == "launch-overhead" and f["severity"] != "low"]


def test_batch_one_generation_is_launch_bound(analyzed):
    first = _first(analyzed, "token_gen_nsys.sqlite.xz")
    assert first["check"] == "launch-overhead" and first["severity"] == "high"


# Every kernel's start, short name and launch shape, by SQL
KERNEL_SHAPES_SQL = """SELECT start, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread,
                              staticSharedMemory + dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"""


def test_a_graph_waits_for_static_shapes_where_the_steps_change_them(analyzed):
    """token_gen grows its KV cache by torch.cat each token: by SQL, consecutive tokens' kernels differ in launch
    shape (the concatenation's, the attention's over a longer cache). A CUDA graph replays the shapes it captured,
    so launch-overhead's advice starts with static shapes (a cache allocated once, inputs padded to a few sizes);
    graphs_eager, whose steps repeat their shapes, gets no such words."""
    import bisect

    path = REAL / "token_gen_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    firsts = [f for f in sql_gpu_step_firsts(path, "token %") if window["start_ns"] <= f < window["end_ns"]]
    steps: list[list] = [[] for _ in firsts]
    for start, *kernel in sql(path, KERNEL_SHAPES_SQL):
        at = bisect.bisect_right(firsts, start) - 1
        if 0 <= at < len(firsts) - 1:   # (the last step's period has no end here)
            steps[at].append(tuple(kernel))
    signatures = [sorted(k) for k in steps[:-1]]
    pairs = list(zip(signatures, signatures[1:]))[:63]
    assert sum(a != b for a, b in pairs) >= 0.5 * len(pairs) > 0
    first = _first(analyzed, "token_gen_nsys.sqlite.xz")
    assert first["check"] == "launch-overhead" and "change launch shape from one step to the next" in first["advice"]
    assert first["evidence"]["shape_changes"]["value"] >= 0.5
    eager = _first(analyzed, "graphs_eager_nsys.sqlite.xz")
    assert "shape_changes" not in eager["evidence"] and "launch shape" not in eager["advice"]


def test_a_graph_waits_for_the_same_launches_where_the_steps_launch_other_counts(analyzed):
    """blind69_augment augments each of a batch's 256 images in a Python loop, flipping each or not at random: by
    SQL, consecutive steps launch other numbers of kernels. A CUDA graph captures one path, and shapes are not the
    issue: launch-overhead's advice starts with the work done over the whole batch, its choices made on the GPU,
    not with a static KV cache. token_gen, whose steps launch as many kernels of growing shapes, keeps the static
    shapes."""
    import bisect

    path = REAL / "blind69_augment_base1_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    firsts = [f for f in sql_gpu_step_firsts(path, "step %") if window["start_ns"] <= f < window["end_ns"]][:65]
    counts = [0] * len(firsts)
    for (start,) in sql(path, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start"):
        at = bisect.bisect_right(firsts, start) - 1
        if 0 <= at < len(firsts) - 1:
            counts[at] += 1
    pairs = list(zip(counts[:-1], counts[1:]))[:63]
    assert sum(a != b for a, b in pairs) >= 0.5 * len(pairs)
    first = _first(analyzed, "blind69_augment_base1_nsys.sqlite.xz")
    assert first["check"] == "launch-overhead"
    assert first["advice"].startswith("The steps launch other numbers of kernels from one step to the next")
    assert "one operation over the whole batch" in first["advice"] and "KV cache" not in first["advice"]
    assert "```" not in first["advice"]   # no graph example under advice that says what must come before a graph
    tokens = _first(analyzed, "token_gen_nsys.sqlite.xz")
    assert "change launch shape from one step to the next" in tokens["advice"]
    assert "other numbers of kernels" not in tokens["advice"]


def test_data_preparation_in_the_loop_is_the_hosts_work_on_the_data(analyzed):
    """loader_inline decodes each batch in the loop, then uploads it: the host's work before the uploads is the
    step's idle time (host-data's, the data built on the host; host-compute prices what it leaves)."""
    model = analyzed(REAL / "loader_inline_nsys.sqlite.xz")
    first = program_findings(model)[0]
    assert first["check"] == "host-data" and first["severity"] == "high"
    assert _share(model, "idle_host") > 0.9                                      # measured 0.95
    assert model["timeline"]["host_stretches"][0]["duration_ns"] > 10e6         # per-batch preparation, no CUDA call
    assert first["evidence"]["work_before_uploads_ns_per_step"]["value"] > 0.8 * model["timeline"]["steps"]["median_ns"]


def test_loader_workers_shorten_the_step(analyzed):
    inline = analyzed(REAL / "loader_inline_nsys.sqlite.xz")["timeline"]["steps"]["median_ns"]
    workers = analyzed(REAL / "loader_workers_nsys.sqlite.xz")["timeline"]["steps"]["median_ns"]
    assert workers < inline / 10                                                 # 75.6 ms -> 4.1 ms


def test_item_then_short_bookkeeping_is_host_sync(analyzed):
    """~7 ms of fp32 GEMMs a step (cuBLAS/CUTLASS CUDA-core kernels, 96% of GPU time), then the sync: the
    host's first cause is the sync; the GEMMs' own cause (TF32/BF16, low-tensor-activity) saves more."""
    model = analyzed(REAL / "item_sync_nsys.sqlite.xz")
    first = next(f for f in program_findings(model) if f["check"] in HOST_CAUSES)
    assert first["check"] == "host-sync" and first["severity"] in ("high", "medium")
    assert [f["check"] for f in program_findings(model)][0] in ("host-sync", "low-tensor-activity")
    assert _share(model, "idle_host") < _share(model, "idle_sync")


def test_item_then_long_host_work_is_host_compute(analyzed):
    """The same loop with bookkeeping longer than the queued GPU work: only the queued part is the sync's."""
    model = analyzed(REAL / "item_sync_heavy_host_nsys.sqlite.xz")
    checks = [f["check"] for f in program_findings(model)]
    assert checks[0] == "host-compute" and "host-sync" in checks
    assert _share(model, "idle_sync") < _share(model, "idle_host")


def test_fp32_gpt_names_the_idle_tensor_cores(analyzed):
    model = analyzed(REAL / "gpt_fp32_nsys.sqlite.xz")
    first = program_findings(model)[0]
    assert first["check"] == "low-tensor-activity"
    metrics = model["gpu_metrics"]
    assert metrics["gr_active_pct"]["mean"] >= 80 and metrics["tensor_active_pct"]["mean"] <= 2
    assert first["evidence"]["matrix_kernel_share"]["value"] > 0.5               # cuBLAS/CUTLASS fp32 GEMMs


def test_gpu_bound_run_gets_no_host_cause_at_high(analyzed):
    model = analyzed(REAL / "gpt_fp32_nsys.sqlite.xz")
    assert not [f for f in program_findings(model) if f["check"] in HOST_CAUSES and f["severity"] == "high"]


def test_gpu_straggler_is_named(analyzed):
    model = analyzed(REAL / "ddp_gpu_all_nsys.sqlite.xz")
    checks = {f["check"]: f for f in program_findings(model)}
    imbalance = checks["rank-imbalance"]
    assert imbalance["device_id"] == 1 and imbalance["evidence"]["straggler_side"] == "GPU"
    assert imbalance["severity"] in ("high", "medium")
    # the rank that waits: its exposed communication is waiting for the straggler (rank-imbalance's), what
    # overlap could hide is the transfers only, a few ms: info
    waiting = next(f for f in model["findings"] if f["check"] == "exposed-communication")
    assert waiting["device_id"] == 0 and waiting["severity"] == "info"
    assert waiting["estimated_savings_ns"] < imbalance["estimated_savings_ns"] / 20


def test_host_straggler_is_named(analyzed):
    model = analyzed(REAL / "ddp_host_all_nsys.sqlite.xz")
    imbalance = program_findings(model)[0]                                      # first: the others' wait
    assert imbalance["check"] == "rank-imbalance"
    assert imbalance["device_id"] == 1 and imbalance["evidence"]["straggler_side"] == "host"
    assert imbalance["severity"] in ("high", "medium")


STEP_WAITS_SQL = """
WITH st AS (SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %')
SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM st) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
WHERE s.value LIKE '%Synchronize%' AND EXISTS (SELECT 1 FROM st WHERE r.start >= st.start AND r.start < st.end)
"""


def test_launch_advice_puts_batching_first_where_each_step_waits_item_by_item(analyzed):
    """ResNet-18 inference one image at a time, a `.cpu()` per image (a blind twin: fixtures/real/blind48_train.py):
    64 waits a step (SQL: cudaStreamSynchronize), which no CUDA graph captures; the advice led with a graph, and
    batching, the fix the user made (5.48 against 233.57 ms a step), came third. A loss read once a step (opt_loop)
    is told to read back every N steps; a loop that never waits (graphs_eager) keeps the graph first."""
    from tests.conftest import sql

    name = "blind_persample_base_nsys.sqlite.xz"
    ((waits,),) = sql(REAL / name, STEP_WAITS_SQL)
    finding = _first(analyzed, name)
    assert finding["check"] == "launch-overhead"
    assert finding["evidence"]["waits_per_step"]["value"] == waits == 64
    assert finding["advice"].startswith("Each step waits for the GPU 64 times") and "batch the inputs" in \
        finding["advice"].split("\n")[0]
    # its waits follow uploads as well as read-backs (the image's upload), and the advice says both
    first_line = finding["advice"].split("\n")[0]
    assert "an upload" in first_line and "build constants on the GPU once" in first_line
    # a mask built on the CPU and copied to the GPU in each of 6 layers (a blind twin: fixtures/real/blind49_train.py):
    # its 6 waits a step are the uploads' own (a blocking `.to()` from pageable memory), which pinning with
    # non_blocking=True removes: pageable-memcpy's since round 67, not launch-overhead's to sell again
    mask = program_findings(analyzed(REAL / "blind_cpumask_base_nsys.sqlite.xz"))
    ((mask_waits,),) = sql(REAL / "blind_cpumask_base_nsys.sqlite.xz", STEP_WAITS_SQL)
    assert round(mask_waits) == 6
    pageable = next(f for f in mask if f["check"] == "pageable-memcpy")
    assert pageable["severity"] == "high" and pageable["evidence"]["blocked_idle_ns"]["value"] > 0
    assert "launch-overhead" not in [f["check"] for f in mask]
    # a batch built before the loop and uploaded with a blocking `.cuda()` each step (round 67's own67_fixed1): the step's
    # one wait is the upload's own (SQL: one pageable host-to-device copy a step), not a `.item()` to read every N steps
    fixed = REAL / "own67_fixed1_nsys.sqlite.xz"
    ((uploads,),) = sql(fixed, "SELECT COUNT(*) * 1.0 / (SELECT COUNT(*) FROM NVTX_EVENTS WHERE text LIKE 'step %') "
                               "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0")
    assert round(uploads) == 1
    upload = next(f for f in program_findings(analyzed(fixed)) if f["check"] == "launch-overhead")
    assert upload["advice"].startswith("Each step waits for the GPU once (`cudaStreamSynchronize`), after 1 upload a "
                                       "step from pageable memory") and "every N steps" not in upload["advice"].split("\n")[0]
    once = next(f for f in program_findings(analyzed(REAL / "opt_loop_nsys.sqlite.xz")) if f["check"] == "launch-overhead")
    assert once["advice"].startswith("Each step waits for the GPU once") and "every N steps" in once["advice"].split("\n")[0]
    # token_gen's one wait a token (SQL) is its loop's own stop test: the advice says to test every N tokens, where
    # it said to read values back every N steps, which a generation loop cannot do with the token it needs (the wait
    # comes after the token's last launch: the lead names the tested value beside the result read back)
    ((token_waits,),) = sql(REAL / "token_gen_nsys.sqlite.xz", STEP_WAITS_SQL.replace("'step %'", "'token %'"))
    assert round(token_waits) == 1
    stop = _first(analyzed, "token_gen_nsys.sqlite.xz")
    assert stop["evidence"]["waits_per_step"]["value"] == 1
    assert "`if token.item() == eos`" in stop["advice"].split("\n")[0] and "test it every N steps" in stop["advice"]
    never = _first(analyzed, "graphs_eager_nsys.sqlite.xz")
    plain = re.sub(r"^\d+% of this wait lies between the CUDA calls, not in them:.*?\n\n", "", never["advice"], flags=re.S)
    assert never["check"] == "launch-overhead" and plain.startswith("Launch fewer, bigger kernels.")
    assert "waits_per_step" not in never["evidence"]


def test_sync_advice_names_where_calls_a_program_does_not_read_come_from(analyzed):
    """host-sync's advice starts from the data: where event and device syncs, which `.item()` and `.cpu()` do not
    make, hold most of the wait (cudnn.benchmark with an input length that changes every step: 8,317 in the
    window, by SQL all but 17 of the capture's are cudaEventSynchronize or cudaDeviceSynchronize), it names
    their sources first; where the reads' stream syncs and copies hold it (`.item()` each step), the general
    advice stands alone. (With autotuning, which names the cause and claims those syncs, host-sync is silent there:
    the report of a build without it, --skip autotuning.)"""
    from nsanalyze.analyze import Options, analyze

    without = analyze([str(REAL / "blind_cudnnbench_base_nsys.sqlite.xz")], Options(skip=frozenset({"autotuning"})))
    bench = next(f for f in program_findings(without) if f["check"] == "host-sync")
    by_call = {c["name"]: c["wait_ns"] for c in bench["evidence"]["by_call"]}
    theirs = by_call["cudaEventSynchronize"] + by_call["cudaDeviceSynchronize"]
    assert theirs >= 0.99 * sum(by_call.values())
    assert bench["advice"].startswith(f"Most of the wait ({theirs / sum(by_call.values()):.0%}) is in "
                                      "`cudaEventSynchronize` and `cudaDeviceSynchronize`")
    assert "torch.backends.cudnn.benchmark" in bench["advice"].split("\n\n")[0]
    reads = next(f for f in program_findings(analyzed(REAL / "matmul_sync_nsys.sqlite.xz")) if f["check"] == "host-sync")
    assert reads["advice"].startswith("Synchronize less")


def test_sync_advice_leaves_the_tuner_out_where_the_replay_found_none(analyzed):
    """sync53's GPT waits in `cudaDeviceSynchronize` (host timers between `torch.cuda.synchronize()` calls: SQL finds
    them in every step range). Its replayed steps were searched for an autotuner's timed trials and hold none, so
    host-sync's advice names the program's own syncs without guessing at cuDNN's autotuning (which stays where the
    trials are: the test above)."""
    model = analyzed(REAL / "sync53_gpt_base_nsys.sqlite.xz")
    assert model["timeline"].get("critical_path") and model["timeline"].get("timed_trials") is None
    sync = next(f for f in model["findings"] if f["check"] == "host-sync")
    first = sync["advice"].split("\n\n")[0]
    assert first.startswith("Most of the wait") and "`cudaDeviceSynchronize`" in first
    assert "torch.cuda.synchronize()" in first and "cudnn" not in first


def test_a_part_shared_with_a_wider_cause_says_who_counts_the_rest(analyzed):
    """blind61_anomaly: the header's budget gives 62% of the window idle on launches, launch-overhead's title 18%;
    host-sync's finding counts the rest (the refills after its 31,585 syncs and the launches of the checks they
    wait on: 45%). launch-overhead's note squares the two with the model's own figures: the part's share,
    host-sync's claim, what is left."""
    import re

    model = analyzed(REAL / "blind61_anomaly_base1_nsys.sqlite.xz")
    by_check = {f["check"]: f for f in program_findings(model)}
    launch, sync = by_check["launch-overhead"], by_check["host-sync"]
    span = model["timeline"]["span_ns"]
    claimed = next(c["ns"] for c in sync["evidence"]["claimed_parts"] if c["part"] == "idle_launch")
    note = next(n for n in launch["notes"] if n.startswith("the budget's idle_launch"))
    part, counted, left = map(int, re.search(r"is (\d+)% of the window .*host-sync's finding counts (\d+)%, .*"
                                             r"this finding the (\d+)% left", note).groups())
    assert part == round(100 * _share(model, "idle_launch")) == 62
    assert counted == round(100 * claimed / span) == 45
    assert left == round(100 * launch["evidence"]["idle_launch_share"]["value"]) == 18


def test_a_part_and_its_rest_that_print_apart_are_squared(analyzed):
    """mfu_2gpu_before (two GPUs, no steps): the header's budget gave 5% of the window idle on launches, the
    launch-overhead title 4%: 13.49 ms against 13.45, a wider cause's 30 us apart across the rounding edge (a user
    read). Where the two print apart, the note squares them however little lies between, in the cause's own time
    where its share would print 0%, and without calling a window's budget a median step's."""
    import re

    model = analyzed(PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_before.sqlite.xz")
    launch = next(f for f in model["findings"] if f["check"] == "launch-overhead")
    span = model["timeline"]["span_ns"]
    whole = _share(model, "idle_launch")
    left = launch["evidence"]["idle_launch_share"]["value"]
    assert f"{whole:.0%}" != f"{left:.0%}" and (whole - left) * span < 0.001 * span
    note = next(n for n in launch["notes"] if n.startswith("the budget's idle_launch"))
    assert re.search(rf"is {whole:.0%} of the window: .*counts [\d.]+ µs, and this finding the {left:.0%} left", note)
    assert "median step" not in note


def test_a_shared_part_note_leaves_out_a_cause_counted_within_another(analyzed):
    """blind79_offload: pinning the copies (pageable-memcpy) is counted within keeping the data on the GPU
    (host-data). The shares a part's note lists add up to the part: launch-overhead's note listed both host-data's
    claim and pageable-memcpy's, the same wait twice (22% + 12% + 5% of a 26% part), and pageable-memcpy's own note
    listed host-data's claim beside the 50% it counts of a 58% part."""
    import re

    model = analyzed(REAL / "blind79_offload_base1_nsys.sqlite.xz")
    by_check = {f["check"]: f for f in program_findings(model)}
    assert by_check["pageable-memcpy"]["evidence"]["within"] == "host-data"
    for check in ("launch-overhead", "pageable-memcpy"):
        note = next(n for n in by_check[check]["notes"] if n.startswith("the budget's "))
        part = int(re.search(r"is (\d+)% of the window", note).group(1))
        shares = [int(s) for s in re.findall(r"counts (\d+)%", note) + re.findall(r"the (\d+)% left", note)]
        assert len(shares) >= 2 and sum(shares) <= part + len(shares)   # (each share rounded)
    assert "host-data" not in next(n for n in by_check["pageable-memcpy"]["notes"] if n.startswith("the budget's "))
    assert "pageable-memcpy" not in next(n for n in by_check["launch-overhead"]["notes"]
                                         if n.startswith("the budget's "))


@pytest.mark.parametrize("run", [1])  # the second pair: bench/calibration.py's table (the suite's time)
def test_waits_that_read_a_data_dependent_size_are_named(analyzed, run):
    """blind74_masksync (chosen blind): a token tagger's loss and metrics select the labelled tokens by boolean masks
    (`logits[active]`, `labels[active]`) and count the tags with `torch.unique`: no `.item()` in the loop, yet each
    step waits 6 times, each on a count read back right after CUB's counting kernel (SQL: reads to the host of at
    most 8 bytes whose stream's last kernel before them is DeviceReduceSingleTileKernel or DeviceReduceByKeyKernel).
    launch-overhead, first on this host-bound loop, named `.item()` and `.cpu()` as the waits; it now names the
    data-dependent sizes and their fixed-shape forms. Its fix (ignore_index, masked sums) has none."""
    from bisect import bisect_right

    path = REAL / f"blind74_masksync_base{run}_nsys.sqlite.xz"
    model = analyzed(path)
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    small = sql(path, f"""SELECT m.start, m.deviceId, m.streamId FROM CUPTI_ACTIVITY_KIND_MEMCPY m
        JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind WHERE e.label = 'Device-to-Host' AND m.bytes <= 8
        AND m.start >= {window['start_ns']} AND m.start < {window['end_ns']}""")
    kernels: dict = {}   # (device, stream) -> (ends ascending, names)
    for end, device, stream, name in sql(path, """SELECT k.end, k.deviceId, k.streamId, s.value
            FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName ORDER BY k.end"""):
        ends, names = kernels.setdefault((device, stream), ([], []))
        ends.append(end)
        names.append(name)
    last = [kernels[d, s][1][bisect_right(kernels[d, s][0], start) - 1] for start, d, s in small]
    reads = sum(name in ("DeviceReduceSingleTileKernel", "DeviceReduceByKeyKernel") for name in last)
    assert reads == model["timeline"]["copies"]["size_reads"] == 6 * steps
    first = program_findings(model)[0]
    assert first["check"] == "launch-overhead"
    assert first["advice"].startswith("Each step waits for the GPU 6 times (`cudaStreamSynchronize`), 6 of them to "
                                      "read back how many elements a data-dependent operation produced")
    assert "ignore_index=-100" in first["advice"].split("\n\n")[0]
    shapes = first["advice"].split("\n\n")[1]   # its kernels' shapes change with those sizes: no KV cache to blame
    assert shapes.startswith("The steps' kernels change launch shape") and "data-dependent results" in shapes \
        and "KV cache" not in shapes
    assert analyzed(REAL / f"blind74_masksync_fix{run}_nsys.sqlite.xz")["timeline"]["copies"]["size_reads"] == 0


@pytest.mark.parametrize("run", [1, 2])
def test_waits_that_are_blocking_uploads_own_are_named(analyzed, run):
    """blind75_tokenize (chosen blind): each batch is tokenized in Python on the main thread, then three pageable
    tensors go up with a blocking `.to('cuda')` each (SQL: 3 pageable copies to the device a step, 3 stream syncs a
    step). Nothing is read back, yet host-sync's advice was `.item()` and `.cpu()`. It now leads with the uploads'
    own waits, after which the host builds the next input while the GPU has nothing queued (the fix, the corpus
    tokenized once on the GPU, saved 2.7 ms a step of 26.2)."""
    path = REAL / f"blind75_tokenize_base{run}_nsys.sqlite.xz"
    model = analyzed(path)
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    (uploads,), = sql(path, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
        JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind JOIN ENUM_CUDA_MEM_KIND k ON k.id = m.srcKind
        WHERE e.label = 'Host-to-Device' AND k.label = 'Pageable' AND m.start >= {window['start_ns']}
        AND m.start < {window['end_ns']}""")
    assert uploads == pytest.approx(3 * steps, abs=3)
    finding = next(f for f in program_findings(model) if f["check"] == "host-sync")
    assert finding["evidence"]["sync_calls"]["value"] == pytest.approx(3 * steps, abs=3)
    assert finding["advice"].startswith("The waits are the uploads' own: 3 copies a step to the GPU from pageable "
                                        "memory")
    # a loop whose waits read a value back keeps the read-back advice (itemlog_every1: a `.item()` each step)
    read_back = next(f for f in analyzed(REAL / "itemlog_every1_nsys.sqlite.xz")["findings"] if f["check"] == "host-sync")
    assert not read_back["advice"].startswith("The waits are the uploads' own") and ".item()" in read_back["advice"]
