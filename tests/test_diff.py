"""`nsanalyze diff` on the real before/after pair dev_suite -> dev_suite_v2 (shared/profiles/README.md)."""

import json
import lzma

import pytest
from click.testing import CliRunner

from nsanalyze.cli import cli
from nsanalyze.diff import diff, regressions
from tests.isolated import apart
from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, DEV_SUITE_V2_NCU, DEV_SUITE_V2_NSYS, FIXTURES, STEPS_SQL


@pytest.fixture(scope="module")
def ncu_diff():
    from tests.isolated import apart

    return apart(diff, str(DEV_SUITE_NCU), str(DEV_SUITE_V2_NCU))   # ncu_report's memory stays there


def rows(result):
    return {k["name"]: k for k in result["kernels"]}


def test_fixes_and_the_planted_regression(ncu_diff):
    k = rows(ncu_diff)
    assert k["aos_update"]["verdict"] == "improvement" and k["aos_update"]["change"] == pytest.approx(-0.782, abs=0.005)
    assert k["aos_update"]["findings_gone"] == ["uncoalesced-global"]
    assert k["reduce_interleaved"]["verdict"] == "improvement" and "bank-conflicts" in k["reduce_interleaved"]["findings_gone"]
    assert k["register_pressure"]["verdict"] == "improvement"
    assert k["soa_update"]["verdict"] == "regression" and k["soa_update"]["change"] > 10
    assert "uncoalesced-global" in k["soa_update"]["findings_appeared"]       # strides 16 elements


def test_unchanged_code_is_noise(ncu_diff):
    k = rows(ncu_diff)
    for name in ("random_gather", "pointer_chase", "sgemm_tiled", "lane_switch", "histogram_global"):
        assert k[name]["verdict"] == "within noise", name
    assert k["random_gather"]["change"] == pytest.approx(-0.063, abs=0.003)


def test_predictions_checked(ncu_diff):
    by_check = {(p["kernel_name"], p["check"]): p for p in ncu_diff["predictions"]}
    aos = by_check[("aos_update", "uncoalesced-global")]
    assert aos["actual_savings_ns"] == pytest.approx(260928 - 56800, rel=0.01)
    assert 0.5 < aos["predicted_savings_ns"] / aos["actual_savings_ns"] < 1.5


def test_nsys_pair_uses_repeated_launches_for_noise():
    result = apart(diff, str(DEV_SUITE_NSYS), str(DEV_SUITE_V2_NSYS))
    k = rows(result)
    assert k["small_step"]["noise_source"].endswith("over 200 launches")
    assert k["small_step"]["noise"] == 0.02      # 800 ns +- 33 ns over 200 launches: the 2% floor
    assert k["small_step"]["verdict"] == "within noise"
    assert k["soa_update"]["verdict"] == "regression"
    assert {r["name"]: r for r in result["ranges"]}["layout"]["verdict"] == "regression"


def _invoke(args) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stderr


def test_cli_gate_and_outputs(tmp_path):
    from tests.isolated import apart

    gated_code, gated_stderr = apart(_invoke, ["diff", str(DEV_SUITE_NCU), str(DEV_SUITE_V2_NCU), "--fail-on-regression",
                                               "20", "-o", str(tmp_path / "d.json"), "-o", str(tmp_path / "d.html"),
                                               "-o", str(tmp_path / "d.md")])
    assert gated_code == 1 and "soa_update" in gated_stderr
    assert json.loads((tmp_path / "d.json").read_text())["schema"] == "nsanalyze/diff@1"
    assert "regression" in (tmp_path / "d.html").read_text() and "| soa\\_update |" in (tmp_path / "d.md").read_text()
    assert apart(_invoke, ["diff", str(DEV_SUITE_NCU), str(DEV_SUITE_NCU), "--fail-on-regression", "20"])[0] == 0


def test_regressions_respect_the_threshold(ncu_diff):
    assert [r["name"] for r in regressions(ncu_diff, 20)] == ["soa_update"]
    assert regressions(ncu_diff, 5000) == []


def test_precision_switch_is_followed_by_nvtx_range(analyzed):
    """fp32 -> bf16 autocast: nearly every GEMM is another cuBLAS kernel, the range is the same (the session's
    analyses of the two --set full reports compared, not read again: 43 s)."""
    from nsanalyze.diff import compare
    from tests.conftest import REAL

    result = compare(analyzed(REAL / "gpt_fp32_full.ncu-rep.xz"), analyzed(REAL / "gpt_bf16_full.ncu-rep.xz"))
    step = next(r for r in result["ranges"] if r["name"] == "train_step")
    assert step["verdict"] == "improvement" and step["after_ns"] < 0.5 * step["before_ns"]   # 5.67 -> 2.11 ms
    assert set(step["kernels_before"]) != set(step["kernels_after"])


def test_profiles_of_different_kinds_are_refused(tmp_path):
    from tests.read.test_bad_input import assert_clean_error, run_cli

    result = run_cli("diff", DEV_SUITE_NCU, DEV_SUITE_NSYS, cache=tmp_path / "cache")
    assert_clean_error(result, DEV_SUITE_NSYS, "one kind")
    assert not any((tmp_path / "cache").iterdir())   # told from their first bytes, neither decompressed
    forced = run_cli("diff", DEV_SUITE_NCU, DEV_SUITE_NSYS, "--force")
    assert forced.returncode == 0


def test_cuda_graph_pair_is_compared_per_step():
    """graphs_eager -> graphs_after: the median steps on the GPU's clock (checked against SQL), the verdict,
    the cause that went away and its prediction. The host's ranges of the graphed loop (152 µs) are not its
    step: the GPU runs a step every 369 µs."""
    import statistics

    from tests.conftest import REAL, sql_gpu_step_periods

    before, after = REAL / "graphs_eager_nsys.sqlite.xz", REAL / "graphs_after_nsys.sqlite.xz"
    result = apart(diff, str(before), str(after))
    steps = result["steps"]
    for path, median in ((before, steps["before_median_ns"]), (after, steps["after_median_ns"])):
        assert median == pytest.approx(statistics.median(sql_gpu_step_periods(path)), rel=0.03)
    assert steps["verdict"] == "improvement" and -0.9 < steps["change"] < -0.85
    assert "launch-overhead" in result["program"]["findings_gone"]
    assert result["summary"].startswith("step N 3.49 ms → 369 µs") and "launch-overhead is gone" in result["summary"]
    prediction = next(p for p in result["predictions"] if p["check"] == "launch-overhead")
    assert prediction["kernel_name"] is None
    assert prediction["predicted_savings_ns"] == pytest.approx(prediction["actual_savings_ns"], rel=0.3)
    assert prediction["actual_savings_ns"] == pytest.approx(steps["before_mean_ns"] - steps["after_mean_ns"])
    assert prediction["actual_median_savings_ns"] == pytest.approx(steps["before_median_ns"] - steps["after_median_ns"])
    assert not [r for r in regressions(result, 10) if r in result["ranges"] or r is result["steps"]]


def test_a_shorter_capture_of_the_same_loop_is_no_regression(tmp_path):
    """The first 200 steps of graphs_eager (a copy cut after `step 199`) against all 400: per step, per
    range instance and per kernel per step, nothing regressed."""
    import shutil
    import sqlite3

    from nsanalyze.read.files import open_local
    from tests.conftest import REAL

    full = REAL / "graphs_eager_nsys.sqlite.xz"
    _, local = open_local(full)
    cut = tmp_path / "graphs_eager_200.sqlite"
    shutil.copy(local, cut)
    with sqlite3.connect(cut) as con:
        (end,) = con.execute("SELECT end FROM NVTX_EVENTS WHERE text = 'step 199'").fetchone()
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                      "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER", "NVTX_EVENTS", "OSRT_API"):
            if table in tables:
                con.execute(f"DELETE FROM {table} WHERE start > ?", (end,))
    result = apart(diff, str(cut), str(full))
    assert result["steps"]["before_count"] < 200 <= result["steps"]["after_count"]
    assert abs(result["steps"]["change"]) < 0.05          # the loop drifts a little over 400 steps
    assert regressions(result, 10) == []
    runner = CliRunner().invoke(cli, ["diff", str(cut), str(full), "--fail-on-regression", "10", "-o", str(tmp_path / "d.md")])
    assert runner.exit_code == 0, runner.output


def test_identical_runs_pass_and_a_planted_slowdown_fails():
    """Three runs of one nightly benchmark (H200): two of unchanged code (GPU periods 4.19 and 4.15 ms) and
    one with an extra matrix product a step (+5%). The step band comes from the runs' own steps."""
    from tests.conftest import REAL

    runs = [str(REAL / f"{name}_nsys.sqlite.xz") for name in ("nightly1", "nightly2", "nightly3_slow")]
    same = apart(diff, runs[0], runs[1])
    assert same["steps"]["verdict"] == "within noise" and regressions(same, 3) == []
    slower = apart(diff, runs[0], runs[2])
    assert slower["steps"]["verdict"] == "regression" and 0.04 < slower["steps"]["change"] < 0.07
    assert slower["steps"] in regressions(slower, 3)
    for args, code in (((runs[0], runs[1]), 0), ((runs[0], runs[2]), 1)):
        result = CliRunner().invoke(cli, ["diff", *args, "--fail-on-regression", "3"])
        assert result.exit_code == code, result.output


def test_a_sync_bubble_fix_is_predicted_on_the_gpu_clock():
    """matmul_sync (a .item() and 2 ms of host work every step) -> matmul_async (no sync): the base's first
    finding predicted the per-step saving within 30% of the actual, which is the GPU-clock step difference."""
    import statistics

    from tests.conftest import REAL, sql_gpu_step_periods

    base, new = REAL / "matmul_sync_nsys.sqlite.xz", REAL / "matmul_async_nsys.sqlite.xz"
    result = apart(diff, str(base), str(new))
    first = result["predictions"][0]
    assert first["check"] == "host-sync" and first["kernel_name"] is None
    assert first["predicted_savings_ns"] == pytest.approx(first["actual_savings_ns"], rel=0.3)
    sql_difference = statistics.median(sql_gpu_step_periods(base)) - statistics.median(sql_gpu_step_periods(new))
    assert first["actual_median_savings_ns"] == pytest.approx(sql_difference, rel=0.05)
    assert first["actual_savings_ns"] == pytest.approx(_sql_mean_step(base) - _sql_mean_step(new), rel=0.001)
    assert "host-sync predicted" in result["summary"]


def test_a_prediction_says_whether_its_finding_is_gone_from_the_new_profile(analyzed):
    """ResNet-18 inference one image at a time -> one batched forward (a blind twin): the step saved 228 ms, the
    change as a whole; layout-conversion's 26.9 ms prediction stood beside it as if checked, though the batched run
    still converts layouts (its own report's finding). Each program prediction says whether its finding is gone or
    still there, with its savings a step in the new profile, and says so in every format."""
    from nsanalyze.render.diff_report import render_diff
    from tests.conftest import REAL

    base, new = REAL / "blind_persample_base_nsys.sqlite.xz", REAL / "blind_persample_fix_nsys.sqlite.xz"
    result = apart(diff, str(base), str(new))
    after = {f["check"]: f for f in analyzed(str(new))["findings"] if f["kernel_id"] is None and f["severity"] != "info"}
    by_check = {p["check"]: p for p in result["predictions"] if p["kernel_name"] is None}
    assert {"launch-overhead", "layout-conversion"} <= set(by_check)
    for check, prediction in by_check.items():
        assert prediction["in_new"] == ("still there" if check in after else "gone")
        if check in after:
            assert prediction["in_new_savings_ns"] == pytest.approx(
                after[check]["estimated_savings_ns"] / result["steps"]["after_count"], rel=0.2)
    assert by_check["layout-conversion"]["in_new"] == "still there"
    markdown = render_diff(result, "markdown")
    assert "| in the new profile |" in markdown and "still there, 1.54 ms a step |" in markdown
    # launch counts a step in full (the layout conversions: 2,048 a step, 32 an image), not 2.05e+03
    conversions = next(k for k in result["kernels"] if k["name"] == "nchwToNhwcKernel" and k["launches_before"] > 1000)
    assert conversions["launches_before"] == 2048 and " ×2,048 " in markdown and "e+03" not in markdown


def test_launch_counts_beside_times_and_per_launch_when_they_differ(tmp_path):
    """The dev suite's export cut to 2 of small_step's 200 launches, against the whole export: the totals
    differ 100-fold, the launches do not; the row shows both counts and compares one launch with one (SQL)."""
    import shutil
    import sqlite3

    from nsanalyze.read.files import open_local
    from nsanalyze.render.diff_report import render_diff
    from nsanalyze.render.terminal import print_diff
    from rich.console import Console
    from tests.conftest import DEV_SUITE_NSYS

    _, local = open_local(DEV_SUITE_NSYS)
    cut = tmp_path / "two_launches.sqlite"
    shutil.copy(local, cut)
    small = "SELECT k.rowid, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName " \
            "WHERE s.value = 'small_step' ORDER BY k.start"
    with sqlite3.connect(cut) as con:
        rows = con.execute(small).fetchall()
        con.executemany("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?", [(r,) for r, _ in rows[2:]])
    all_ns = [ns for _, ns in rows]
    result = apart(diff, str(cut), str(DEV_SUITE_NSYS))
    row = next(k for k in result["kernels"] if k["name"] == "small_step")
    assert (row["launches_before"], row["launches_after"]) == (2, 200) and row["compared"] == "per launch"
    assert row["before_per_launch_ns"] == sum(all_ns[:2]) / 2 and row["after_per_launch_ns"] == sum(all_ns) / 200
    assert row["change"] == pytest.approx(row["after_per_launch_ns"] / row["before_per_launch_ns"] - 1)
    assert abs(row["change"]) < 0.5 and row not in regressions(result, 10)   # the total grew 100-fold
    # no steps in this export: the budget is of each window, not of a median step
    assert {b["of"] for b in result["budget"]} == {"window"}
    console = Console(record=True, width=160)
    print_diff(result, console)
    text = console.export_text()
    assert "Time budget (of each window)" in text and "median step" not in text
    assert "×2 " in text and "×200 " in text and " each)" in text and "/launch" in text
    markdown = render_diff(result, "markdown")
    assert "| time budget (of each window) |" in markdown and "×200" in markdown


def test_every_changed_budget_part_shows_its_time(tmp_path):
    """Pageable copies against pinned ones (real H200 runs): the copy time of a median step, 30.2 ms -> 4.84 ms,
    is on the terminal and in the Markdown beside its share, not only in the JSON."""
    from nsanalyze.render.diff_report import render_diff
    from nsanalyze.render.terminal import print_diff
    from rich.console import Console
    from tests.conftest import REAL

    result = apart(diff, str(REAL / "transfer_pageable_nsys.sqlite.xz"), str(REAL / "transfer_pinned_nsys.sqlite.xz"))
    copies = next(b for b in result["budget"] if b["part"] == "gpu_copy")
    assert copies["of"] == "median step"
    assert (round(copies["before_ns"] / 1e5), round(copies["after_ns"] / 1e4)) == (302, 484)
    console = Console(record=True, width=160)
    print_diff(result, console)
    text = console.export_text()
    assert "30.2 ms (99%)" in text and "4.84 ms (100%)" in text
    assert "| copies | 30.2 ms (99%) | 4.84 ms (100%) |" in render_diff(result, "markdown")


def test_kernels_of_one_name_at_two_shapes_are_told_apart():
    """The fp32 GPT's ncu report runs one cuBLAS GEMM at grids of 768 and 2048 blocks: two rows, each named
    with its launch shape on the terminal and in the Markdown."""
    from rich.console import Console

    from nsanalyze.render.diff_report import render_diff
    from nsanalyze.render.terminal import print_diff
    from tests.conftest import REAL

    report = str(REAL / "gpt_fp32_full.ncu-rep.xz")
    result = apart(diff, report, report)
    gemm = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
    shapes = sorted(k["shape"] for k in result["kernels"] if k["name"] == gemm)
    assert shapes == ["grid 2048 x block 128", "grid 768 x block 128"]
    assert all(k["verdict"] == "within noise" and k["change"] == 0 for k in result["kernels"] if k["name"] == gemm)
    console = Console(record=True, width=400)
    print_diff(result, console, limit=100)
    text = console.export_text()
    assert f"{gemm[:30]}" in text and "… [grid 768 x block 128]" in text and "… [grid 2048 x block 128]" in text
    assert "grid 768 x block 128" in render_diff(result, "markdown")


def test_a_regression_under_the_same_check_says_why(dev_suite_model):
    """The dev suite's model against itself with aos_update twice as slow and its uncoalesced-global finding
    saving twice as much (what a worse access pattern does): the regression names the finding that grew."""
    import copy

    from nsanalyze.diff import _kernel_rows
    from nsanalyze.render.diff_report import render_diff

    slower = copy.deepcopy(dev_suite_model)
    kernel = next(k for k in slower["kernels"] if k["name"] == "aos_update")
    kernel["duration_ns"] *= 2
    finding = next(f for f in slower["findings"] if f["kernel_name"] == "aos_update" and f["check"] == "uncoalesced-global")
    before_ns = finding["estimated_savings_ns"]
    finding["estimated_savings_ns"] *= 2
    row = next(r for r in _kernel_rows(dev_suite_model, slower) if r["name"] == "aos_update")
    assert row["verdict"] == "regression" and row["findings_appeared"] == []
    assert row["findings_worse"] == [{"check": "uncoalesced-global", "savings_before_ns": before_ns,
                                      "savings_after_ns": 2 * before_ns}]
    same = next(r for r in _kernel_rows(dev_suite_model, dev_suite_model) if r["name"] == "aos_update")
    assert same["findings_worse"] == []
    result = {"base": dev_suite_model["profiles"], "new": slower["profiles"], "kernels": [row], "ranges": [],
              "predictions": []}
    from nsanalyze.render.format import duration

    why = f"uncoalesced\\-global {duration(before_ns)} → {duration(2 * before_ns)}"
    assert why in render_diff(result, "markdown").split("| aos\\_update |")[1].splitlines()[0]


# The oracle for the mean steady step on the GPU's clock: from the first GPU work launched inside the first
# steady `step N` (the first is warm-up) to the end of the last step's GPU work, over the steady steps.
STEP_WORK_SQL = "WITH " + STEPS_SQL.format(like="step %") + """
SELECT MIN(l.start), MAX(l.end) FROM steps JOIN launched l ON l.call_start >= steps.start AND l.call_start < steps.end
GROUP BY steps.start ORDER BY steps.start"""


def _sql_mean_step(path, warmup: int = 1) -> float:
    from tests.conftest import WORK_TABLES, sql

    steady = sql(path, STEP_WORK_SQL, launched=WORK_TABLES[:3])[warmup:]
    return (steady[-1][1] - steady[0][0]) / len(steady)


def test_removing_periodic_spikes_is_measured_as_what_the_run_saved():
    """histlog_every10 -> histlog_off: every 10th step logged weight histograms (about 4 s each). The median
    step did not move (12.7 -> 12.8 ms, within noise); the run's cost did: the mean step 446 -> 12.9 ms (SQL).
    slow-steps' prediction is checked against the mean, with the median's change beside it, and both the
    terminal and the Markdown say it."""
    from io import StringIO

    from rich.console import Console

    from nsanalyze.render.diff_report import render_diff
    from nsanalyze.render.format import duration
    from nsanalyze.render.terminal import print_diff
    from tests.conftest import REAL

    base, new = REAL / "histlog_every10_nsys.sqlite.xz", REAL / "histlog_off_nsys.sqlite.xz"
    result = apart(diff, str(base), str(new))
    steps = result["steps"]
    assert steps["before_mean_ns"] == pytest.approx(_sql_mean_step(base), rel=1e-6)
    assert steps["after_mean_ns"] == pytest.approx(_sql_mean_step(new), rel=1e-6)
    assert steps["verdict"] == "within noise" and steps["mean_change"] < -0.9
    prediction = next(p for p in result["predictions"] if p["check"] == "slow-steps")
    assert prediction["per"] == "mean step"
    assert prediction["actual_savings_ns"] == pytest.approx(_sql_mean_step(base) - _sql_mean_step(new), rel=1e-6)
    assert abs(prediction["actual_median_savings_ns"]) < 0.02 * steps["before_median_ns"]   # the median saw nothing
    assert prediction["predicted_savings_ns"] == pytest.approx(prediction["actual_savings_ns"], rel=0.25)
    assert f"the mean step {duration(steps['before_mean_ns'])} → {duration(steps['after_mean_ns'])}" in result["summary"]
    markdown = render_diff(result, "markdown")
    assert f"| {duration(prediction['predicted_savings_ns'])} | {duration(prediction['actual_savings_ns'])} | " \
           f"{duration(prediction['actual_median_savings_ns'])} |" in markdown
    console = Console(width=200, record=True, file=StringIO())
    print_diff(result, console)
    text = console.export_text()
    assert "per mean step" in text and duration(prediction["actual_savings_ns"]) in text


def test_ncu_sides_are_analyzed_apart_and_their_errors_still_name_the_file(tmp_path):
    """Two ncu reports are analyzed each in a process of its own (NVIDIA's reader keeps what it read until
    its process ends: the two GPT steps' reports held 2.54 GiB in one process, 1.45 GiB summed apart). A
    side's error crosses back as the same one line, exit 2."""
    import pickle
    import subprocess
    import sys

    from nsanalyze.errors import InputError

    error = pickle.loads(pickle.dumps(InputError("a.ncu-rep", "not a usable report")))
    assert (error.path, error.reason, str(error)) == ("a.ncu-rep", "not a usable report", "a.ncu-rep: not a usable report")
    good = FIXTURES / "kernels35" / "textbook_basic.ncu-rep.xz"
    broken = tmp_path / "broken.ncu-rep"
    broken.write_bytes(lzma.decompress(good.read_bytes())[:5000])
    done = subprocess.run([sys.executable, "-m", "nsanalyze", "diff", str(good), str(broken)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and str(broken) in done.stderr
    assert "Traceback" not in done.stderr


def test_kernels_that_share_a_short_name_are_never_matched_by_it():
    """The fuse56 BERT, eager against torch.compile: PyTorch's `vectorized_elementwise_kernel` is the short name of
    dozens of template instances on each side, and compile fused most of them away. Matched by that name, one
    compiled fill kernel (426 us a step) answered five eager kernels, each a "regression" of up to +22,851%. A kernel
    of the new profile answers at most one of the base's; a short name matches only where it is one kernel's on each
    side; and no row pairs two different signatures under a shared name. A kernel of one signature launched fewer
    times, each launch doing more (the casts compile left), is judged by its time a step, not by one launch."""
    from collections import Counter

    from tests.conftest import REAL

    result = apart(diff, str(REAL / "fuse56_bert_base1_nsys.sqlite.xz"), str(REAL / "fuse56_bert_fix1_nsys.sqlite.xz"))
    base = apart(__import__("nsanalyze.analyze", fromlist=["analyze"]).analyze,
                 [str(REAL / "fuse56_bert_base1_nsys.sqlite.xz")])
    shared = {name for name, n in Counter(k["name"] for k in base["kernels"]).items() if n > 1}
    assert "vectorized_elementwise_kernel" in shared
    matched = [k for k in result["kernels"] if k["before_ns"] is not None and k["after_ns"] is not None]
    assert matched and not [k for k in matched if k["name"] in shared and k["verdict"] == "regression"]
    # the casts compile left: fewer launches of more work each, slower per launch, less time a step
    # (the change shown is the time a step's, as the verdict: one launch's +1000% beside "improvement" contradicted it)
    cast = next(k for k in matched if "bfloat16_copy" in (k["demangled"] or "") and k.get("before_per_launch_ns"))
    assert cast["after_per_launch_ns"] > 10 * cast["before_per_launch_ns"] and cast["compared"] == "per step"
    assert cast["change"] == pytest.approx(cast["after_ns"] / cast["before_ns"] - 1) and cast["change"] < -0.5
    assert cast["verdict"] == "improvement"
    assert not [k for k in matched if k["verdict"] == "improvement" and k["change"] > 0]
    assert not [k for k in regressions(result, 10) if k in result["kernels"] and k["after_ns"] < k["before_ns"]]
    gone = [k for k in result["kernels"] if k["name"] == "vectorized_elementwise_kernel" and k["after_ns"] is None]
    assert len(gone) > 5   # fused away: unmatched, not regressions of the one left


def test_the_summary_checks_the_prediction_of_the_finding_the_change_took_away():
    """ViT's EMA as a Python loop over its parameters -> one `torch._foreach_lerp_` (a blind twin): the change took
    launch-loop away, and launch-overhead (a CUDA graph of the whole step) is still there. The summary set the
    graph's prediction against the loop's fix, which read as a prediction 4.7x too high; it now sets the one of the
    finding that is gone beside the step time saved, and names a finding still there as such."""
    from nsanalyze.render.format import duration
    from tests.conftest import REAL

    base, new = REAL / "blind_emaloop_base_nsys.sqlite.xz", REAL / "blind_emaloop_fix_nsys.sqlite.xz"
    result = apart(diff, str(base), str(new))
    program = {p["check"]: p for p in result["predictions"] if p["kernel_name"] is None}
    assert program["launch-loop"]["in_new"] == "gone" and program["launch-overhead"]["in_new"] == "still there"
    assert next(iter(program)) == "launch-overhead"   # the base's first finding
    loop = program["launch-loop"]
    assert f"launch-loop predicted {duration(loop['predicted_savings_ns'])} a mean step" in result["summary"]
    assert "launch-overhead predicted" not in result["summary"]
    assert loop["predicted_savings_ns"] == pytest.approx(loop["actual_savings_ns"], rel=0.25)


def test_a_kernel_whose_clock_moved_is_judged_beside_its_clocks_change(analyzed):
    """NCAR's miniWeather, MW_Baseline -> MW_DivToMult (ncu, one launch each): the change rewrote
    compute_tendencies_x_279 (-44%); set_halo_values_x_396, untouched, ran at 784 MHz before and 709 MHz after (11 us,
    too short to hold a clock) and read +12.4%, a regression. A kernel's time follows its SM clock: the band is
    widened by the clocks' ratio, and the row says so."""
    from tests.conftest import PUBLIC

    base = PUBLIC / "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_Baseline.ncu-rep.xz"
    new = PUBLIC / "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_DivToMult.ncu-rep.xz"
    result = apart(diff, str(base), str(new))
    rows = {k["name"]: k for k in result["kernels"]}
    clocks = [{k["name"]: k["metrics"]["sm_frequency_hz"] for k in analyzed(p)["kernels"]} for p in (base, new)]
    halo = rows["set_halo_values_x_396_gpu"]
    ratio = clocks[0]["set_halo_values_x_396_gpu"] / clocks[1]["set_halo_values_x_396_gpu"]
    assert ratio > 1.05 and halo["change"] > 0.10
    assert halo["noise"] == pytest.approx(0.10 + ratio - 1) and halo["verdict"] == "within noise"
    assert "widened by the SM clock's change (784 -> 710 MHz)" in halo["noise_source"]
    assert rows["compute_tendencies_x_279_gpu"]["verdict"] == "improvement"
    assert not regressions(result, 5)


def test_a_finding_fallen_to_info_is_changed_not_gone():
    """ResNet-50 with each of 5 stages timed by synchronized event pairs, Kineto traces before and after the timing
    went (kin54_time53 pair 1): unfused-normalization, the base's first finding, is still in the new profile at 8.2 ms
    (under the info line). It read "gone", and the summary set its 12.1 ms prediction against the timing fix's saving.
    It is a change (high -> info); gone is event-timing, whose prediction the summary checks."""
    from nsanalyze.analyze import analyze
    from tests.conftest import REAL

    base, new = REAL / "kin54_time53_base1_kineto.json.gz", REAL / "kin54_time53_fix1_kineto.json.gz"
    result = apart(diff, str(base), str(new))
    after = {f["check"]: f for f in apart(analyze, [str(new)])["findings"] if f["kernel_id"] is None}
    assert after["unfused-normalization"]["severity"] == "info"
    assert "unfused-normalization" not in result["program"]["findings_gone"]
    changed = {c["check"]: c for c in result["program"]["findings_changed"]}
    assert (changed["unfused-normalization"]["severity_before"], changed["unfused-normalization"]["severity_after"]) \
        == ("high", "info")
    assert "event-timing" in result["program"]["findings_gone"] and "event-timing" not in after
    assert "; event-timing predicted" in result["summary"]
    program = {p["check"]: p for p in result["predictions"] if p["kernel_name"] is None}
    assert program["unfused-normalization"]["in_new"] == "still there"


def test_a_step_that_got_slower_is_said_so_in_the_summary():
    """time53's GPT, its 5 timed stages' event pairs removed (nsys): the mean step came out 524 us longer (noise of
    a host-bound loop), and the summary read "the new profile saved -524 us"."""
    from nsanalyze.render.format import duration
    from tests.conftest import REAL

    result = apart(diff, str(REAL / "time53_gpt_base_nsys.sqlite.xz"), str(REAL / "time53_gpt_fix_nsys.sqlite.xz"))
    first = next(p for p in result["predictions"] if p["kernel_name"] is None and p["in_new"] == "gone")
    assert first["actual_savings_ns"] < 0
    assert f"the new profile was {duration(-first['actual_savings_ns'])} slower" in result["summary"]
    assert "saved -" not in result["summary"]


def test_a_saving_that_is_the_clocks_says_so_in_cycles(analyzed):
    """FaSTED's CTA layouts: the rasterized blocks cut FindPairsKernel's DRAM reads by 90%, and its time by 46.2 ms
    of 513; its SM clock rose from 1195 to 1303 MHz (9%) and its SM cycles fell under 1% (ncu's sm__cycles_elapsed).
    The prediction table credited the 46.2 ms to l2-reuse (a user read). The row and a prediction give the change in
    SM cycles at the base's clock beside the time's (the cycles counted on each side give it within 5%), and two ncu
    reports' predictions table has no program columns. (l2-reuse no longer speaks on that kernel: the prediction is
    read with its memory-wait threshold at 0.)"""
    from nsanalyze.analyze import Options
    from nsanalyze.render.diff_report import render_markdown
    from tests.conftest import PUBLIC

    base = PUBLIC / "bwcurless__FaSTED__profiles__CTA_Layouts__Conventional_Layout.ncu-rep.xz"
    new = PUBLIC / "bwcurless__FaSTED__profiles__CTA_Layouts__Rasterized_Layout_10x10.ncu-rep.xz"
    result = apart(diff, str(base), str(new), Options(thresholds={"l2-reuse.min_memory_wait_share": 0.0}))
    row = next(k for k in result["kernels"] if k["name"] == "FindPairsKernel")
    cycles = [next(k for k in analyzed(side)["kernels"] if k["name"] == "FindPairsKernel")["metrics"]
              for side in (base, new)]
    saved = (cycles[0]["sm_cycles_elapsed"] - cycles[1]["sm_cycles_elapsed"]) / cycles[0]["sm_frequency_hz"] * 1e9
    assert row["change"] < -0.08 and 0 < saved < 0.01 * row["before_ns"] and row["clocks"] == "1195 -> 1303 MHz"
    assert -row["change_in_cycles"] * row["before_ns"] == pytest.approx(saved, rel=0.05)
    prediction = next(p for p in row["predictions"] if p["check"] == "l2-reuse")
    assert prediction["actual_savings_ns"] > 40e6
    assert prediction["actual_savings_in_cycles_ns"] == pytest.approx(saved, rel=0.05)
    text = render_markdown(result)
    assert "| -9.0% (-0.8% in SM cycles at 1195 -> 1303 MHz) | within noise |" in text
    assert "; 4.22 ms in SM cycles (the SM clock moved 1195 -> 1303 MHz) |" in text
    assert "median step saved" not in text and "Predictions checked (kernel findings of the base that are gone)" in text
