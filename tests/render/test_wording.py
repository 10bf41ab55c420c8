"""A report reads as one text: counts agree with their nouns, a figure has one rounding wherever it
appears, and no title promises a saving other than the one in its savings column (issue 36, item 9)."""

import re

import pytest

from nsanalyze.analyze import Options, analyze
from nsanalyze.render.format import duration, window_lines
from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, REAL, sql

FIGURE = r"(\d+(?:\.\d+)? (?:ns|µs|ms|s))"


def test_one_chain_a_step_is_singular():
    """The fp32 GPT with chains of 5 counted: 30 chains over 30 steps read `1 chain per step` (of 3 or more, 60
    since the chains after its embedding lookup count)."""
    settings = {"unfused-elementwise.min_ops": 5, "unfused-elementwise.min_share": 0.0}
    model = analyze([str(REAL / "gpt_fp32_nsys.sqlite.xz")], Options(settings))
    finding = next(f for f in model["findings"] if f["check"] == "unfused-elementwise")
    chains, steps = finding["evidence"]["chains"]["value"], model["timeline"]["steps"]["count"]
    assert round(chains / steps) == 1
    assert "(1 chain per step)" in finding["title"] and "chains per step" not in finding["title"]


def test_the_median_step_has_one_rounding_in_the_report(analyzed):
    """ResNet in channels_last: the header's median step and the launch finding's `of a median … step` are one
    figure, printed alike (it was 29.7 ms in the header, 29.68 ms in the title)."""
    from nsanalyze.render.markdown import render

    model = analyzed(REAL / "cnn_cl_nsys.sqlite.xz")
    median = duration(model["timeline"]["steps"]["median_ns"])
    text = render(model)
    in_titles = set(re.findall(r"of a median " + FIGURE + " step", text))
    assert in_titles == {median}
    assert f"median {median}" in text


@pytest.mark.parametrize("name, check, said_twice", [("blind61_anomaly_base1_nsys.sqlite.xz", "launch-overhead", False),
                                                      ("loader_workers_nsys.sqlite.xz", "launch-overhead", True),
                                                      ("item_sync_heavy_host_nsys.sqlite.xz", "host-compute", True)])
def test_a_title_gives_the_steps_share_only_where_it_is_not_the_windows(analyzed, name, check, said_twice):
    """anomaly's launch finding read "44% of the window (29.5 ms of a median 66.6 ms step, 44%)": one figure twice.
    The step's share stays where it prints otherwise than the window's (loader_workers: 24% of the window, 35% of a
    median step, its outlier steps and the time around them; item_sync_heavy_host: 57% of the window, 56% of a median
    step, the header's figure, where a difference under 3 points was left out); the figures are recomputed from the
    report's own numbers."""
    model = analyzed(REAL / name)
    title = next(f for f in model["findings"] if f["check"] == check)["title"]
    window_share, per_step, median = re.search(
        r"(\d+)% of the window \((" + FIGURE[1:-1] + r") of a median (" + FIGURE[1:-1] + r") step", title).groups()
    median_ns = model["timeline"]["steps"]["median_ns"]
    assert duration(median_ns) == median
    unit = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[per_step.split()[1]]
    step_share = float(per_step.split()[0]) * unit / median_ns
    assert (f"{step_share:.0%}" != f"{window_share}%") == said_twice
    assert (f"{per_step} of a median {median} step, {step_share:.0%})" in title) == said_twice
    assert said_twice or f"{per_step} of a median {median} step)" in title


def test_no_title_promises_a_saving_other_than_its_column(analyzed):
    """The dev suite joined: pageable-memcpy's row said `saves 4.46 ms` beside `they save 8.18 ms` (its copy
    time is shared with sync-memcpy); a title now says what the copies would take, and any saving a title
    names is the one in its column."""
    from tests.isolated import analyze_apart

    for model in (analyze_apart([DEV_SUITE_NCU, DEV_SUITE_NSYS]), analyzed(REAL / "transfer_pageable_nsys.sqlite.xz")):
        pageable = next(f for f in model["findings"] if f["check"] == "pageable-memcpy")
        copy_ns = pageable["evidence"]["pageable_copy_ns"]["value"]
        pinned_ns = sum(d["pinned_ns"] for d in pageable["evidence"]["directions"])
        assert f"they would take {duration(copy_ns - sum(d['saving_ns'] for d in pageable['evidence']['directions']))}" \
            in pageable["title"]
        assert pinned_ns <= copy_ns
        for finding in model["findings"]:
            promised = set(re.findall(r"\bsaves? " + FIGURE, finding["title"]))
            assert promised <= {duration(finding["estimated_savings_ns"])}, finding["title"]


def test_idle_time_under_allocator_calls_is_not_called_launches(analyzed):
    """The header's budget named the GPU's idle time under back-to-back CUDA calls `idle on launches`, also where
    the calls were cudaMalloc/cudaFree every step (alloc_churn: 4313 of them, more host time than all launches by
    SQL), which sends the reader to CUDA graphs. It is named after the calls that held it; an eager loop whose
    calls are launches keeps the old words."""
    churn = analyzed(REAL / "alloc_churn_nsys.sqlite.xz")
    [(allocator_ns, launch_ns)] = sql(
        REAL / "alloc_churn_nsys.sqlite.xz",
        "SELECT SUM(CASE WHEN s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cudaFree%' THEN r.end - r.start END), "
        "SUM(CASE WHEN s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%' THEN r.end - r.start END) "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId")
    assert allocator_ns > 3 * launch_ns
    budget_line = next(line for line in window_lines(churn["timeline"]) if line.startswith("Time budget"))
    assert "idle on CUDA calls (mostly allocator)" in budget_line and "idle on launches" not in budget_line

    eager = analyzed(REAL / "graphs_eager_nsys.sqlite.xz")
    budget_line = next(line for line in window_lines(eager["timeline"]) if line.startswith("Time budget"))
    assert "idle on launches" in budget_line


def test_no_finding_says_what_is_known_and_what_to_collect(analyzed):
    """An expert read of the public reports: 'nothing here holds the program back' was said of a kernel at 80% of
    DRAM with 12.5% occupancy (FaSTED's Conventional_Layout: one kernel holds the time, its warps barely waiting on it),
    and 'the profile lacks their metrics' never said what to collect. The line now says that no threshold is crossed,
    how near its roof the longest kernel runs (the report's own roofline), and the collection the not-judged checks
    name. The rasterized twin: its kernel at 61% of the tensor pipe, compute-bound, and no finding above info."""
    from nsanalyze.render.format import health_line
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "bwcurless__FaSTED__profiles__CTA_Layouts__Rasterized_Layout_10x10.ncu-rep.xz")
    assert not [f for f in model["findings"] if f["severity"] != "info"] and not model["not_judged"]
    kernel = max(model["kernels"], key=lambda k: k["total_ns"])
    assert kernel["total_ns"] / sum(k["total_ns"] for k in model["kernels"]) > 0.995
    share = max(kernel["roofline"]["memory_share"], kernel["roofline"]["compute_share"])
    line = health_line(model)
    assert "nothing here holds" not in line and "no check's threshold is crossed" in line
    assert f"the longest kernel, 100% of the time, runs at {share:.0%} of its compute (tensor pipe) roof, " \
        "compute-bound" in line
    divided = analyzed(PUBLIC / "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_DivToMult.ncu-rep.xz")
    from nsanalyze.render.format import collect_text

    # the options each not-judged check names, their reasons left to the report; the metrics by name kept
    assert collect_text(divided) == ("--clock-control none and --set full or --metrics "
                                     "sm__cycles_active.avg,sm__cycles_active.max")
    assert f"lacks their metrics; collect {collect_text(divided)}. The longest kernel" in health_line(divided)
    # rgb_original's seven checks need --set full; five could also take metrics by name, bank-conflicts and
    # uncoalesced-global only the set's source counters: the set once, no list of names that would not do for all
    rgb = analyzed(PUBLIC / "Alaric617R__COALDA__examples__rgb__rgb_original.ncu-rep.xz")
    collects = {n["collect"] for n in rgb["not_judged"]}
    assert any(", or --metrics " in c for c in collects) and any(", or --metrics " not in c for c in collects)
    assert collect_text(rgb) == "--set full"


def test_evidence_reads_with_its_unit_and_no_si_prefix_on_a_count(analyzed):
    """An expert's read of the Markdown: small-grid on gpt_fp32_full's nll_loss said `waves_per_sm`: 947 µ (0.000947
    waves), and the dev suite's measured twin `twin_duration_ns`: 456 k (456 us without its unit)."""
    from nsanalyze.render import markdown
    from nsanalyze.render.format import evidence_value

    suite = analyzed(DEV_SUITE_NCU)
    twin = next(f for f in suite["findings"] if "twin_duration_ns" in f["evidence"])["evidence"]["twin_duration_ns"]
    assert twin["unit"] == "ns" and evidence_value(twin) == duration(twin["value"])
    assert f"`twin_duration_ns`: {duration(twin['value'])}" in markdown.render(suite)
    gpt = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    waves = [f["evidence"]["waves_per_sm"] for f in gpt["findings"]
             if (f["evidence"].get("waves_per_sm") or {}).get("value") is not None
             and f["evidence"]["waves_per_sm"]["value"] < 1e-3]
    assert waves
    for entry in waves:
        assert evidence_value(entry) == f"{entry['value']:.3g}" and "µ" not in evidence_value(entry)


def test_an_option_another_extends_is_named_once(analyzed):
    """quickstart (no GPU work recorded): launch-overhead and host-sync ask for `nsys profile -t cuda,nvtx`, launch-loop
    and non-step-phase for it with one NVTX range per step; the line asked for both, the second holding the first."""
    from nsanalyze.render.format import collect_text
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / "quasiben__nvtx-examples__quickstart.sqlite.xz")
    options = {n["collect"].split(" (")[0] for n in model["not_judged"] if n.get("collect")}
    assert {"nsys profile -t cuda,nvtx", "nsys profile -t cuda,nvtx with one NVTX range per step"} <= options
    assert collect_text(model) == ("nsys profile --gpu-metrics-devices=all and nsys profile -t cuda,nvtx with one NVTX "
                                   "range per step")



def test_a_capture_with_nvtx_ranges_is_not_asked_to_trace_nvtx(analyzed):
    """dev_suite was captured with -t cuda,nvtx and has NVTX ranges (phases), none of them a step: launch-loop asks for
    a range around each step, not for the tracing the capture already had."""
    from tests.conftest import DEV_SUITE_NSYS

    model = analyzed(DEV_SUITE_NSYS)
    assert model["timeline"]["ranges"] and model["timeline"]["budget"]
    loop = next(n for n in model["not_judged"] if n["check"] == "launch-loop")
    assert "steps" in loop["missing"]
    assert loop["collect"].startswith("an NVTX range around each step") and "-t cuda,nvtx" not in loop["collect"]


def test_a_value_past_its_threshold_never_reads_as_the_threshold(analyzed):
    """own67_fixed1 and shard_prefetched: host-sync's claimed share and host-wait's wait share crossed their 3% and 5%
    thresholds by less than the rounding, and read '3% (threshold > 3%)', as if not crossed. A value that reads as its
    threshold gets one more digit."""
    from nsanalyze.render.format import evidence_value

    seen = 0
    for name in ("own67_fixed1_nsys.sqlite.xz", "shard_prefetched_nsys.sqlite.xz"):
        for finding in analyzed(REAL / name)["findings"]:
            for entry in finding["evidence"].values():
                if isinstance(entry, dict) and isinstance(entry.get("threshold"), (int, float)) \
                        and entry["value"] != entry["threshold"]:
                    shown = evidence_value(entry)
                    assert shown != evidence_value({**entry, "value": entry["threshold"]}), (name, finding["check"])
                    seen += shown.count(".") > 0
    assert seen >= 2   # the two that read as their thresholds


def test_an_ncu_report_of_the_programs_own_kernels_says_so_not_other_100(analyzed):
    """NCAR's V100 workshop kernels are the program's own: the header read "by role: other 100%". It says they are
    the program's own; a report of PyTorch's kernels keeps its split by role."""
    from nsanalyze.render.format import kernel_list_work_line
    from tests.conftest import PUBLIC

    own = analyzed(PUBLIC / "NCAR__GPU_workshop__10_HandsOnNsight__ncu__MW_Baseline.ncu-rep.xz")
    assert {w["role"] for w in own["work"] if w["share"]} == {"other"}
    line = kernel_list_work_line(own)
    assert line.endswith(": the program's own kernels, none of a known library's or framework's role")
    assert "by role" not in line
    gpt = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    assert ", by role: CUDA-core GEMM/GEMV" in kernel_list_work_line(gpt)
