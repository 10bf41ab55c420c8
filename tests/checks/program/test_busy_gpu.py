"""What the busy GPU does: each waste check fires on its real case and not on its fixed twin.

Cases and twins are real H200 recordings (fixtures/real/README.md): attention written out vs
scaled_dot_product_attention, ResNet-50 in NCHW vs channels_last, an elementwise MLP eager vs
torch.compile, a spin kernel with GPU metrics, healthy bf16 GEMM loops and a graph-level trace."""

import pytest

from nsanalyze.normalize.work import GLUE
from tests.conftest import REAL, program_findings, sql

BUSY_CHECKS = {"attention-unfused", "layout-conversion", "unfused-elementwise", "gpu-util-illusion"}
TWINS = ["attn_sdpa", "cnn_cl", "mlp_compile", "matmul_async", "matmul_sync", "matmul_graph", "graphs_graphtrace"]
ROLES_OF = {"attention-unfused": ("attention_unfused",), "layout-conversion": ("layout", "normalization", "reduction"),
            "unfused-elementwise": GLUE, "low-tensor-activity": ("matmul_simt",)}


def _model(analyzed, run):
    return analyzed(REAL / f"{run}_nsys.sqlite.xz")


def _finding(model, check):
    return next((f for f in program_findings(model) if f["check"] == check), None)


def _role_ns(model, roles) -> float:
    return sum(w["ns"] for w in model["timeline"]["work"] if w["role"] in roles)


def test_attention_written_out_comes_first_at_high(analyzed):
    model = _model(analyzed, "attn_naive")
    first = program_findings(model)[0]
    window = model["timeline"]["span_ns"]
    assert first["check"] == "attention-unfused" and first["severity"] == "high"
    assert "scaled_dot_product_attention" in first["title"] + first["advice"]
    assert 0.5 * window <= first["estimated_savings_ns"] <= window


def test_the_attention_title_gives_its_share_of_one_whole(analyzed):
    """An expert's read: "take 78% of GPU kernel time (242.1 ms of the 333.6 ms window)": 242.1 of 333.6 is 73%, the
    window's share (its evidence), beside a share of kernel time. The figures in brackets are those of the share:
    the scores' kernels over the GPU kernel time, the work split's total."""
    import re

    model = _model(analyzed, "attn_naive")
    finding = _finding(model, "attention-unfused")
    share, part, whole = re.search(r"take (\d+)% of GPU kernel time \(([\d.]+) ms of ([\d.]+) ms\)", finding["title"]).groups()
    assert int(share) == round(100 * float(part) / float(whole))
    assert float(whole) * 1e6 == pytest.approx(sum(w["ns"] for w in model["timeline"]["work"]), rel=1e-3)
    assert "window" not in finding["title"]
    # its evidence's share is of the window's wall time (73%): a note tells the two apart (a user's read of the join)
    window = finding["evidence"]["attention_unfused_share"]["value"]
    assert round(100 * window) != int(share)
    assert f"attention_unfused_share is of the window's wall time ({window:.0%} of " in " ".join(finding["notes"])


def test_a_library_kernels_clock_gets_no_advice_on_its_call(analyzed):
    """attn_naive_full's cuBLASLt GEMM ran below its clock on some launches: a finding about the GPU's clock, for
    which a library's lever (change the call: shapes, precision, fusion) is no advice; a code-level one keeps it."""
    model = analyzed(REAL / "attn_naive_full.ncu-rep.xz")
    library = {k["id"]: k["library"] for k in model["kernels"]}
    clock = [f for f in model["findings"] if f["check"] == "clock-throttling" and library.get(f["kernel_id"])]
    assert clock and not [f for f in clock if f["advice"].startswith(f"**{library[f['kernel_id']]} kernel**")]
    others = [f for f in model["findings"] if f["kernel_id"] is not None and library.get(f["kernel_id"])
              and f["check"] != "clock-throttling"]
    assert others and all(f["advice"].startswith(f"**{library[f['kernel_id']]} kernel**") for f in others)


def test_attention_stays_first_with_the_ncu_report_joined(analyzed):
    from tests.isolated import analyze_apart

    model = analyze_apart([REAL / "attn_naive_full.ncu-rep.xz", REAL / "attn_naive_nsys.sqlite.xz"])
    first = model["findings"][0]
    assert first["check"] == "attention-unfused" and first["severity"] == "high"
    library = {k["id"]: k["library"] for k in model["kernels"]}
    code_level = [f for f in model["findings"] if f["kernel_id"] is not None and library.get(f["kernel_id"])
                  in ("PyTorch", "cuDNN", "cuBLAS", "cuBLASLt") and f["check"] in ("uncoalesced-global", "low-ilp")]
    assert code_level and all(f["severity"] == "info" for f in code_level)


def test_nchw_cnn_names_channels_last(analyzed):
    model = _model(analyzed, "cnn_nchw")
    finding = _finding(model, "layout-conversion")
    assert finding and "channels_last" in finding["title"] + finding["advice"]
    assert finding["severity"] != "info"
    # the title's share is of GPU kernel time, and the evidence holds it beside the window's share the threshold reads
    evidence = finding["evidence"]
    assert f"take {evidence['layout_kernel_share']['value']:.0%} of GPU kernel time" in finding["title"]
    assert evidence["layout_share"]["value"] == pytest.approx(
        evidence["layout_kernel_share"]["value"] * sum(w["ns"] for w in model["timeline"]["work"])
        / model["timeline"]["span_ns"], rel=1e-4)
    # the host holds this step: priced by the replay, below the conversions' own time (tests/test_pricing.py)
    assert 0 < finding["estimated_savings_ns"] < finding["evidence"]["check_savings_ns"]["value"]


def _gpu_ns_per_step(path) -> float:
    """SQL: kernel time of the work launched inside the steady steps (NVTX `step N` after the first), per step."""
    starts_ends = sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")[1:]
    first, last = starts_ends[0][0], starts_ends[-1][1]
    kernel_ns = sql(path, f"""SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
        WHERE r.start >= {first} AND r.start < {last}""")[0][0]
    return kernel_ns / len(starts_ends)


def test_elementwise_written_out_names_torch_compile(analyzed):
    finding = _finding(_model(analyzed, "mlp_eager"), "unfused-elementwise")
    assert finding and finding["severity"] in ("high", "medium")
    assert "torch.compile" in finding["title"] + finding["advice"]


@pytest.mark.parametrize("case, twin, check", [("mlp_eager", "mlp_compile", "unfused-elementwise"),
                                               ("attn_naive", "attn_sdpa", "attention-unfused")])
def test_predicted_step_saving_within_30_percent_of_the_twin(analyzed, case, twin, check):
    """The finding's saving per steady step against the GPU work per step the fix removed (SQL on both)."""
    model = _model(analyzed, case)
    predicted = _finding(model, check)["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
    actual = _gpu_ns_per_step(REAL / f"{case}_nsys.sqlite.xz") - _gpu_ns_per_step(REAL / f"{twin}_nsys.sqlite.xz")
    assert actual > 0 and abs(predicted - actual) <= 0.3 * actual


def test_channels_last_saving_between_the_conversions_and_the_twin(analyzed):
    """At most the GPU work per step that channels_last removed: the step is mostly the host's, so the replay
    of the change saves the conversions' launch paths on the host and what the GPU work takes beyond the
    host (tests/test_pricing.py bounds it by the host's floor)."""
    model = _model(analyzed, "cnn_nchw")
    steps = model["timeline"]["steps"]["count"]
    predicted = _finding(model, "layout-conversion")["estimated_savings_ns"] / steps
    actual = _gpu_ns_per_step(REAL / "cnn_nchw_nsys.sqlite.xz") - _gpu_ns_per_step(REAL / "cnn_cl_nsys.sqlite.xz")
    assert 0 < predicted <= min(actual, _role_ns(model, ("layout",)) / steps + actual)


def test_spin_kernel_is_the_gpu_util_illusion(analyzed):
    model = _model(analyzed, "spin_gpumetrics")
    finding = _finding(model, "gpu-util-illusion")
    assert finding and finding["severity"] in ("high", "medium")
    assert "spin_kernel" in finding["title"] and "ncu" in finding["title"] + finding["advice"]
    assert model["gpu_metrics"]["gr_active_pct"]["mean"] > 50 and model["gpu_metrics"]["sm_issue_pct"]["mean"] < 30


def test_cuda_core_gemms_are_one_finding(analyzed):
    """The fp32 GPT: low-tensor-activity from the CUDA-core GEMMs' names, and no second finding for it."""
    model = _model(analyzed, "gpt_fp32")
    checks = [f["check"] for f in program_findings(model)]
    assert checks[0] == "low-tensor-activity" and "gpu-util-illusion" not in checks


@pytest.mark.parametrize("run", ["attn_naive", "cnn_nchw", "mlp_eager", "gpt_fp32", "spin_gpumetrics"])
def test_savings_stay_within_their_roles_and_the_window(analyzed, run):
    model = _model(analyzed, run)
    window = model["timeline"]["span_ns"]
    for finding in program_findings(model):
        assert finding["estimated_savings_ns"] <= window
        if finding["check"] in ROLES_OF:
            assert finding["estimated_savings_ns"] <= _role_ns(model, ROLES_OF[finding["check"]]) * 1.0001


@pytest.mark.parametrize("run", TWINS)
def test_fixed_twins_get_no_busy_gpu_finding(analyzed, run):
    model = _model(analyzed, run)
    assert not [f["check"] for f in program_findings(model) if f["check"] in BUSY_CHECKS | {"low-tensor-activity"}]


def test_an_ncu_report_alone_gets_the_work_checks(analyzed):
    """An ncu report of one naive-attention step, no nsys export: the kernel list's split by role puts attention
    written out first, above the kernel findings. In the order ncu profiled the launches, the mask, scale and casts
    between the two GEMMs around each softmax, on its stream, are attention's too (they were 'elementwise' and
    'casts', 34% of the time, when the softmax alone was counted: 20%): the share agrees with the nsys export of the
    same program's within 10 points (83% against 78%). Its savings are within that time; a report without attention
    kernels (the CUDA suite) gets none."""
    from tests.conftest import FIXTURES

    model = analyzed(REAL / "attn_naive_full.ncu-rep.xz")
    first = model["findings"][0]
    softmax_ns = sum(k["duration_ns"] * k["launches"] for k in model["kernels"] if "softmax" in k["name"].lower())
    attention = next(w for w in model["work"] if w["role"] == "attention_unfused")
    assert first["check"] == "attention-unfused" and first["severity"] in ("high", "medium")
    timeline = analyzed(REAL / "attn_naive_nsys.sqlite.xz")["timeline"]["work"]
    assert attention["share"] == pytest.approx(next(w for w in timeline if w["role"] == "attention_unfused")["share"],
                                               abs=0.1)
    assert attention["ns"] > 3 * softmax_ns
    glue = {k["name"] for k in first["evidence"]["kernels"]}
    assert {"elementwise_kernel", "unrolled_elementwise_kernel", "softmax_warp_forward"} <= glue
    assert first["evidence"]["scores_gemm_ns"]["value"] > 0
    assert 0 < first["estimated_savings_ns"] <= attention["ns"]
    assert sum(w["share"] for w in model["work"]) == pytest.approx(1.0)
    suite = analyzed(FIXTURES / "dev_suite_full.ncu-rep.xz")
    assert not [f for f in suite["findings"] if f["check"] in BUSY_CHECKS]


def test_illusion_advice_says_what_the_launch_shapes_support(analyzed):
    """Issue 33/35: the spin program's GPU is held by a 1-block, 1-thread kernel on the H200's 132 SMs (the export's
    launch shape). The finding says the kernels are too small to fill the GPU, advises more work a launch (batching)
    and what that buys, instead of only 'profile with ncu'."""
    from tests.conftest import sql

    model = _model(analyzed, "spin_gpumetrics")
    finding = _finding(model, "gpu-util-illusion")
    (blocks, threads), = sql(REAL / "spin_gpumetrics_nsys.sqlite.xz", """SELECT DISTINCT k.gridX*k.gridY*k.gridZ,
        k.blockX*k.blockY*k.blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
        WHERE s.value = 'spin_kernel'""")
    assert (blocks, threads) == (1, 1)
    assert "spin_kernel (99%, 1 block of 1 thread)" in finding["title"]
    assert "too small to fill the 132-SM GPU" in finding["title"] and "batching" in finding["title"]
    assert finding["severity"] in ("high", "medium") and "Batch the work" in finding["advice"]
    held = sum(k["duration_ns"] for k in finding["evidence"]["kernels"])
    assert "instead of" in finding["title"] and 0 < finding["estimated_savings_ns"] <= held
