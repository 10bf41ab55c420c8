"""A loop in the program over items (an EMA over 152 parameter tensors, AdamW foreach=False over 128, a 32-layer
MLP of one width) launches one short motif of kernels many times in a row every step. launch-loop finds the run
in the launch order (normalize/launch_loops.py), prices it by the replay of `whatif --fuse loop` (the loop's
launch paths gone, its GPU time kept), counts it within launch-overhead (a graph of the step holds it), and
leaves the optimizer's own loop to unfused-optimizer where PyTorch's annotations name it. Each figure against
SQL over the exports."""

import pytest

from tests.checks.program.test_optimizer_loop import OPTIMIZER_RANGES
from tests.conftest import REAL, covered_ns, program_findings, sql

EMA_BASE, EMA_FIX = REAL / "blind_emaloop_base_nsys.sqlite.xz", REAL / "blind_emaloop_fix_nsys.sqlite.xz"
CLIP_BASE, CLIP_FIX = REAL / "blind_gradclip_base_nsys.sqlite.xz", REAL / "blind_gradclip_fix_nsys.sqlite.xz"
ANNOT, LOOP = REAL / "opt_loop_annot_nsys.sqlite.xz", REAL / "opt_loop_nsys.sqlite.xz"


def _finding(model, check):
    return next((f for f in program_findings(model) if f["check"] == check), None)


def sql_longest_repeat(path, step: str, period: int) -> int:
    """The most times in a row that one motif of `period` kernels is launched in the step range `step`, by a
    plain scan of SQL's launches in call order (kernels by demangled name)."""
    ((start, end),) = sql(path, f"SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 AND text = '{step}'")
    names = [n for (n,) in sql(path, f"""SELECT k.demangledName FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
        WHERE r.start >= {start} AND r.start < {end} ORDER BY r.start""")]
    return _longest_run(names, period)[0]


def _longest_run(names: list, period: int) -> tuple[int, int]:
    """(repeats, first index) of the longest run of one motif of `period` names repeated in a row."""
    best = (0, 0)
    for first in range(len(names) - period):
        repeats = 1
        while names[first + repeats * period:first + (repeats + 1) * period] == names[first:first + period]:
            repeats += 1
        best = max(best, (repeats, -first))
    return best[0], -best[1]


def sql_loop_host_span(path, step: str, period: int) -> float:
    """The host time of the step's longest loop of a `period`-kernel motif, by SQL's calls in order: from the end of
    the last call before its first launch that is no cuKernelGet* helper to the end of its last launch."""
    ((start, end),) = sql(path, f"SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59 AND text = '{step}'")
    calls = sql(path, f"""SELECT r.start, r.end, s.value, k.demangledName FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId LEFT JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
        WHERE r.start >= {start} AND r.start < {end} ORDER BY r.start""")
    launches = [i for i, c in enumerate(calls) if c[3] is not None]
    repeats, first = _longest_run([calls[i][3] for i in launches], period)
    opening = launches[first]
    before = max(i for i in range(opening) if not calls[i][2].startswith("cuKernelGet"))
    return calls[launches[first + repeats * period - 1]][1] - calls[before][1]


def test_the_ema_loop_is_found_as_two_kernels_152_times(analyzed):
    """The EMA as `p_ema.mul_(d).add_(p, alpha=1 - d)` over ViT-B/16's 152 parameter tensors: the motif of two
    kernels repeated 152 times in a row, as SQL's launches of a steady step show; its launch paths take more host
    time than its kernels take GPU time, and less than the median step."""
    found = _finding(analyzed(EMA_BASE), "launch-loop")
    loop = found["evidence"]["loops"][0]
    assert (loop["period"], loop["repeats"]) == (2, sql_longest_repeat(EMA_BASE, "step 30", 2)) == (2, 152)
    assert loop["launches_per_step"] == 304 and loop["runs_per_step"] == 1
    assert [m.split("[")[1] for m in loop["motif"]] == ["AUnaryFunctor, MulFunctor]", "CUDAFunctor_add]"]
    paths = found["evidence"]["launch_path_ns_per_step"]["value"]
    steps = analyzed(EMA_BASE)["timeline"]["steps"]
    assert found["evidence"]["loop_kernel_ns_per_step"]["value"] < paths < steps["median_ns"]


def test_the_foreach_twin_has_no_loop(analyzed):
    """The fix, one torch._foreach_lerp_ over the lists: no motif of two kernels repeats 16 times in a row in SQL's
    launches, and no launch-loop finding."""
    assert sql_longest_repeat(EMA_FIX, "step 30", 2) < 16
    assert _finding(analyzed(EMA_FIX), "launch-loop") is None


def test_the_loop_is_counted_within_a_graph_of_the_step(analyzed):
    """launch-overhead's change (each step one graph launch) removes the loop's launches too: the loop's
    finding is counted within it, and its savings are at most launch-overhead's."""
    model = analyzed(EMA_BASE)
    loop, graph = _finding(model, "launch-loop"), _finding(model, "launch-overhead")
    assert loop["evidence"]["within"] == "launch-overhead"
    assert loop["estimated_savings_ns"] < graph["estimated_savings_ns"]
    assert "launch-loop's smaller change saves" in graph["title"]


def test_the_optimizer_loop_named_by_its_ranges_is_left_to_unfused_optimizer(analyzed):
    """AdamW foreach=False: 8 kernels for each of 128 tensors. Under PyTorch's annotations (opt_loop_annot) its
    launches are the optimizer's (unfused-optimizer's finding), and launch-loop's loops hold none of the
    kernels launched in an Optimizer.step# range; without them (opt_loop, the same program) launch-loop finds the
    loop, 1,024 launches a step, as many as SQL counts in each Optimizer.step# range of the annotated twin."""
    per_range = sql(ANNOT, f"""WITH o AS MATERIALIZED ({OPTIMIZER_RANGES}) SELECT COUNT(*) FROM o
        JOIN launched l ON l.call_start >= o.start AND l.call_start < o.end GROUP BY o.start""",
                    launched=("CUPTI_ACTIVITY_KIND_KERNEL",))
    assert {n for (n,) in per_range[1:]} == {1024}
    annotated = analyzed(ANNOT)
    assert _finding(annotated, "unfused-optimizer") is not None
    loops = (_finding(annotated, "launch-loop") or {"evidence": {"loops": []}})["evidence"]["loops"]
    assert all((loop["period"], loop["repeats"]) != (8, 128) for loop in loops)
    plain = _finding(analyzed(LOOP), "launch-loop")
    first = plain["evidence"]["loops"][0]
    assert (first["period"], first["repeats"], first["launches_per_step"]) == (8, 128, 1024)
    # its kernels name Adam's update (PyTorch's functors): the finding says what the loop is and what to use
    assert {"lerp", "addcmul", "sqrt", "addcdiv"} <= {w for m in first["motif"] for w in
                                                      ("lerp", "addcmul", "sqrt", "addcdiv") if w in m}
    assert "Adam's update" in plain["title"] and "fused=True" in plain["title"]
    # the finding prices the loop it names (fused AdamW's change), not the model's layer loops beside it (32 and 31
    # items: another change), which its title counts apart: at most the Adam loop's own launch paths a step
    steps = analyzed(LOOP)["timeline"]["steps"]["count"]
    assert plain["estimated_savings_ns"] / steps <= first["launch_path_ns_per_step"] * 1.01
    assert "1 other loop beside it" in plain["title"]
    assert sorted(loop["repeats"] for loop in plain["evidence"]["loops"][1:]) == [31, 32]
    assert "Adam's update" not in _finding(analyzed(EMA_BASE), "launch-loop")["title"]


def test_clipping_by_hand_is_two_loops_over_the_149_gradients(analyzed):
    """Round 50's blind twin: gradient clipping written per parameter (a norm each, then a mul_ each) over a small
    GPT's 149 gradients. PyTorch zeroes a norm's scratch with a memset for some tensor sizes and not others, so
    the memsets fall irregularly between the norms: the loops are found in the kernels' order, 149 kernels in a
    row each, as SQL's kernels of a steady step show, and the memsets among them are the loops' launches too.
    The fix, clip_grad_norm_(foreach=True), has no loop."""
    found = _finding(analyzed(CLIP_BASE), "launch-loop")
    loops = found["evidence"]["loops"]
    assert sql_longest_repeat(CLIP_BASE, "step 100", 1) == 149
    assert sorted((loop["period"], loop["repeats"]) for loop in loops) == [(1, 149), (1, 149)]
    assert found["evidence"]["launches_per_step"]["value"] == 298
    assert sql_longest_repeat(CLIP_FIX, "step 100", 1) < 16
    assert _finding(analyzed(CLIP_FIX), "launch-loop") is None


def test_a_loop_of_kernels_with_names_of_70_kb_stays_a_readable_finding(tmp_path):
    """Kernel names are the profile author's text: the EMA export with each kernel's names made 70,000 characters
    long (SQL UPDATE) still gives the finding, its labels cut at LABEL_CHARS, its note a few KB."""
    import json
    import shutil
    import sqlite3

    from nsanalyze.normalize.launch_loops import LABEL_CHARS
    from nsanalyze.read.files import open_local
    from tests.test_reliability import assert_handled, run_cli

    path = tmp_path / "long_names.sqlite"
    shutil.copy(open_local(EMA_BASE)[1], path)
    with sqlite3.connect(path) as con:
        con.execute("""UPDATE StringIds SET value = value || printf('%.*c', 70000, 'x') WHERE id IN
                       (SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT demangledName
                        FROM CUPTI_ACTIVITY_KIND_KERNEL)""")
    result = assert_handled(run_cli("report", path, "-o", "-"))
    found = next(f for f in json.loads(result.stdout)["findings"] if f["check"] == "launch-loop")
    assert found["evidence"]["loops"][0]["repeats"] == 152
    assert all(len(name) <= LABEL_CHARS for loop in found["evidence"]["loops"] for name in loop["motif"])
    assert len(found["notes"][0]) < 2 * LABEL_CHARS + 400


@pytest.mark.parametrize("i", [1])  # the second pair: bench/calibration.py's table (the suite's time)
def test_a_recurrent_cell_stepped_in_python_is_a_loop_forward_and_backward(analyzed, i):
    """Round 58: blind58's two LSTMCell layers stepped over 100 frames in Python. The forward launches 6 kernels a
    frame, the backward 21 (longer than a loop over items' body, MAX_PERIOD): both runs are found, as long as SQL's
    longest runs of those motifs in a steady step, and their launch paths are most of the step. Priced by the
    replay of the loop fused, the finding is within 25% of what the cuDNN nn.LSTM twin saved (mean steps of the two
    reports); before, only the forward was found and priced at 31-42% of it. Its kernels hold PyTorch's fused cell
    (`lstm_cell_forward`), so the title names the layer over the sequence as the change. The twin has no loop."""
    base, fix = REAL / f"blind58_lstm_base{i}_nsys.sqlite.xz", REAL / f"blind58_lstm_fix{i}_nsys.sqlite.xz"
    model, twin = analyzed(base), analyzed(fix)
    found = _finding(model, "launch-loop")
    runs = sorted((loop["period"], loop["repeats"]) for loop in found["evidence"]["loops"])
    assert runs == [(6, sql_longest_repeat(base, "step 40", 6)), (21, sql_longest_repeat(base, "step 40", 21))]
    assert runs == [(6, 99), (21, 98)]
    assert "recurrent cell's (lstm_cell)" in found["title"] and "nn.LSTM" in found["title"]
    steps = model["timeline"]["steps"]
    assert found["evidence"]["launch_path_ns_per_step"]["value"] > 0.9 * steps["median_ns"]
    saved = steps["mean_ns"] - twin["timeline"]["steps"]["mean_ns"]
    assert found["estimated_savings_ns"] / steps["count"] == pytest.approx(saved, rel=0.25)
    assert _finding(twin, "launch-loop") is None
    # the loop's launch paths are nearly all the step's: launch-overhead's graph saves no more, and its title does
    # not call the loop's change the smaller saving of it
    graph = _finding(model, "launch-overhead")
    alike = found["estimated_savings_ns"] >= 0.99 * graph["estimated_savings_ns"]
    assert ("launch-loop's smaller change saves as much" in graph["title"]) == alike
    assert ("of it" not in graph["title"].split("launch-loop's smaller change")[1]) == alike
    # saving as much, the smaller change the kernels name ranks first (a user read: the graph capture led at the
    # same saving), its row says it is within the wider change's saving, and its example is the cell's, not an EMA's
    from nsanalyze.render.format import savings_text
    programs = [f for f in model["findings"] if f["kernel_id"] is None]
    assert (programs.index(found) < programs.index(graph)) == alike
    assert savings_text(found, model).endswith(", within launch-overhead's")
    assert "nn.LSTM(n_in, n_hidden)" in found["advice"] and "_foreach_lerp_" not in found["advice"].split("```")[1]


def test_a_loop_over_embedding_tables_is_shown_one_stacked_table(analyzed):
    """blind_embtables looks up 48 tables one by one (by SQL, 48 embedding backward kernels a step): the loop's
    example stacks the tables into one lookup, not the EMA over parameters it once showed. A loop whose kernels
    say nothing more (the EMA itself) keeps the tensor-list example and ranks after the graph of the step."""
    path = REAL / "blind_embtables_base_nsys.sqlite.xz"
    found = _finding(analyzed(path), "launch-loop")
    (backward,), = sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                             "WHERE s.value LIKE 'embedding_backward%'")
    (steps,), = sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text LIKE 'step %'")
    assert backward / steps == pytest.approx(48, rel=0.05)
    example = found["advice"].split("```python")[1]
    assert "stacked(ids + offsets)" in example and "_foreach_lerp_" not in example
    ema = analyzed(EMA_BASE)
    ema_loop = _finding(ema, "launch-loop")
    assert "_foreach_lerp_" in ema_loop["advice"].split("```python")[1]
    programs = [f["check"] for f in ema["findings"] if f["kernel_id"] is None]
    assert programs.index("launch-overhead") < programs.index("launch-loop")


@pytest.mark.parametrize("name", ["kv57_base1", "copy56_catlog_base1"])
def test_a_decoder_layer_stack_is_no_loop(analyzed, name):
    """A host-bound decoder's layer stack repeats one block of 13 (kv57: 16 layers) or 20 kernels (catlog: 24) in a
    row: a body as long as the LSTM's backward, but fewer repeats than LONG_REPEATS. Graphing the step is
    launch-overhead's change; no launch-loop finding takes the layers for a loop over items."""
    assert _finding(analyzed(REAL / f"{name}_nsys.sqlite.xz"), "launch-loop") is None


def test_a_stack_of_layers_is_told_as_layers_not_items(analyzed):
    """blind77_pollwait_base1 (a user read): a 24-layer encoder whose layer launches 12 kernels (SQL: its GEMMs,
    attention and layer norms, 24 times in a row each step) read as "a loop over items ... foreach or batched ops",
    with an EMA for example; the layers depend on each other. A motif that holds a matrix product and a
    normalization or an attention is a layer: the title, the note and the advice say layers, torch.compile and a
    CUDA graph, and the EMA loop (two element-wise kernels) keeps the items' advice."""
    path = REAL / "blind77_pollwait_base1_nsys.sqlite.xz"
    found = _finding(analyzed(path), "launch-loop")
    loop = found["evidence"]["loops"][0]
    assert (loop["period"], loop["repeats"]) == (12, 24)
    (norms,), = sql(path, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                             WHERE s.value LIKE '%layer_norm%'""")
    assert norms > 0 and any("layer_norm" in m for m in loop["motif"]) and any("nvjet" in m for m in loop["motif"])
    assert "a network layer's (matrix products, attention, normalization)" in found["title"]
    assert "foreach" not in found["title"] and found["advice"].startswith("Launch the stack of layers")
    assert "_foreach_" not in found["advice"] and "a loop over layers in the program's source" in found["notes"][0]
    ema = _finding(analyzed(EMA_BASE), "launch-loop")
    assert "foreach or batched ops over items" in ema["title"] and "loop over items" in ema["notes"][0]


def test_a_launch_wait_that_lies_between_the_calls_says_so(analyzed):
    """word2vec's fixed run (blind70): the GPU waits on the host 32% of its steady window, and most of that wait lies
    between the CUDA calls (Python and autograd from one operator to the next), not in cudaLaunchKernel. The title and
    the advice say so; the share inside the calls is checked against SQL: the GPU's idle time (no kernel or copy) that
    a runtime call of the process covers, against the finding's launch wait."""
    path = REAL / "blind70_word2vec_fix1_nsys.sqlite.xz"
    model = analyzed(path)
    finding = _finding(model, "launch-overhead")
    between = finding["evidence"]["idle_launch_between_calls_share"]["value"]
    assert 0.5 <= between < 1 and f"{between:.0%} of this wait lies between the CUDA calls" in finding["title"]
    assert finding["advice"].startswith(f"{between:.0%} of this wait lies between the CUDA calls, not in them")
    window = model["timeline"]["window"]
    start, end = window["start_ns"], window["end_ns"]

    def clipped(rows):
        return [(max(a, start), min(b, end)) for a, b in rows]
    busy = clipped(sql(path, """SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
        SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY"""))   # (this export has no memsets)
    calls = clipped(sql(path, f"""SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE end > {start} AND start < {end}"""))
    idle_in_calls = covered_ns(calls + busy) - covered_ns(busy)   # the calls' time with no GPU work under it
    launch_wait = next(p["ns"] for p in model["timeline"]["budget"] if p["part"] == "idle_launch")
    # the calls' idle time that the budget gives another part (a wait's, work already queued, a long call's) is not the
    # launch wait's: host activity's CUDA classes say how much of it there is (1.3 ms)
    elsewhere = sum(ns for c in model["timeline"]["host_activity"]["classes"] if c["source"] == "cuda"
                    for part, ns in c["idle_by_part"].items() if part != "idle_launch")
    assert (1 - between) * launch_wait + elsewhere == pytest.approx(idle_in_calls, rel=0.01)
    assert 0.7 <= between <= 0.85   # SQL: 29 of the 139 ms launch wait in calls
