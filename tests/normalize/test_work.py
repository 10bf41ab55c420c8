"""The work split (timeline.work) on real runs, against SQL over the kernel names in each window.

The SQL oracles are written independently of kernel_roles.csv: plain LIKE patterns on the library names
(cuBLAS/CUTLASS GEMMs, cuDNN's layout kernels, PyTorch's softmax) over the window's kernels."""

import pytest

from nsanalyze.normalize.work import ROLES, role_of
from tests.conftest import PUBLIC, REAL, REAL_NSYS, SECOND_RUNS, sql, sql_saved_per_step

RUNS = ["attn_naive", "attn_sdpa", "cnn_nchw", "cnn_cl", "mlp_eager", "mlp_compile", "spin_gpumetrics",
        "gpt_fp32", "matmul_async", "matmul_sync", "graphs_graphtrace", "opt_loop_annot"]
NAME = "COALESCE(d.value, s.value)"
GEMM = f"({NAME} LIKE '%gemm%' OR {NAME} LIKE 'nvjet%' OR {NAME} LIKE '%xmma%' OR {NAME} LIKE '%cutlass%')"
SIMT_GEMM = f"({NAME} LIKE '%simt%' OR {NAME} LIKE '%sgemm%' OR {NAME} LIKE '%ffma%' OR {NAME} LIKE '%gemv%')"
LAYOUT = f"({NAME} LIKE '%nchwToNhwc%' OR {NAME} LIKE '%nhwcToNchw%')"
SOFTMAX = f"({NAME} LIKE '%softmax%' AND {NAME} NOT LIKE '%LogSoftMax%')"
FUSED_ATTENTION = f"({NAME} LIKE '%flash%' OR {NAME} LIKE '%sdpa%' OR {NAME} LIKE '%fmha%')"


def _window_kernels(path, model) -> str:
    window = model["timeline"]["window"]
    return (f"FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds d ON d.id = k.demangledName "
            f"LEFT JOIN StringIds s ON s.id = k.shortName "
            f"WHERE k.start >= {window['start_ns'] or -(2**62)} AND k.start < {window['end_ns'] or 2**62}")


def _sql_share(path, model, condition: str) -> float:
    where = _window_kernels(path, model)
    part, total = sql(path, f"SELECT SUM(CASE WHEN {condition} THEN k.end - k.start ELSE 0 END), "
                            f"SUM(k.end - k.start) {where}")[0]
    return (part or 0) / total


def _share(model, *roles) -> float:
    return sum(w["share"] for w in model["timeline"]["work"] if w["role"] in roles)


@pytest.mark.parametrize("run", RUNS)
def test_work_adds_up_to_the_kernel_time(analyzed, run):
    model = analyzed(REAL / f"{run}_nsys.sqlite.xz")
    work = model["timeline"]["work"]
    assert work and {w["role"] for w in work} <= set(ROLES)
    assert sum(w["share"] for w in work) == pytest.approx(1.0)
    assert sum(w["ns"] for w in work) == pytest.approx(sum(k["duration_ns"] for k in model["kernels"]), rel=1e-6)


@pytest.mark.parametrize("run", [r for r in RUNS if r != "graphs_graphtrace"])
def test_matrix_products_agree_with_sql(analyzed, run):
    path = REAL / f"{run}_nsys.sqlite.xz"
    model = analyzed(path)
    assert _share(model, "matmul_tensor", "matmul_simt") == pytest.approx(_sql_share(path, model, GEMM), abs=0.05)
    assert _share(model, "matmul_simt") == pytest.approx(_sql_share(path, model, SIMT_GEMM), abs=0.05)
    assert _share(model, "attention_fused") == pytest.approx(_sql_share(path, model, FUSED_ATTENTION), abs=0.05)


def test_fp32_gpt_gemms_run_on_the_cuda_cores(analyzed):
    path = REAL / "gpt_fp32_nsys.sqlite.xz"
    model = analyzed(path)
    simt = _sql_share(path, model, SIMT_GEMM)
    assert simt > 0.5 and _share(model, "matmul_simt") == pytest.approx(simt, abs=0.05)
    assert _share(model, "matmul_tensor") < 0.05


def test_nchw_cnn_layout_kernels_within_two_points(analyzed):
    for run, expect_layout in (("cnn_nchw", True), ("cnn_cl", False)):
        path = REAL / f"{run}_nsys.sqlite.xz"
        model = analyzed(path)
        layout = _sql_share(path, model, LAYOUT)
        assert (layout > 0.05) is expect_layout
        assert _share(model, "layout") == pytest.approx(layout, abs=0.02)


def test_naive_attention_scores_path_agrees_with_sql(analyzed):
    """SQL's scores path: the softmax launches and the elementwise launches at least as large (threads) as
    the smallest softmax launch: those over the T x T scores."""
    for run in ("attn_naive", "attn_sdpa"):
        path = REAL / f"{run}_nsys.sqlite.xz"
        model = analyzed(path)
        where = _window_kernels(path, model)
        threads = "(k.gridX * k.gridY * k.gridZ * k.blockX * k.blockY * k.blockZ)"
        smallest = sql(path, f"SELECT MIN({threads}) {where} AND {SOFTMAX}")[0][0]
        scores = SOFTMAX if smallest is None else (
            f"({SOFTMAX} OR ({NAME} LIKE '%elementwise%' AND {threads} >= {smallest}))")
        expected = _sql_share(path, model, scores)
        assert _share(model, "attention_unfused") == pytest.approx(expected, abs=0.05)
    assert _share(analyzed(REAL / "attn_naive_nsys.sqlite.xz"), "attention_unfused") > 0.5
    assert _share(analyzed(REAL / "attn_sdpa_nsys.sqlite.xz"), "attention_unfused") == 0


def test_launches_inside_the_optimizer_range_are_the_optimizers(analyzed):
    """AdamW(foreach=False) launches 8 generic element-wise kernels a parameter, no name tells them from the
    model's; under nsys --pytorch=autograd-nvtx (opt_loop_annot) each step's `Optimizer.step#AdamW.step` range
    holds their launch calls (range_roles.csv). The optimizer's time is SQL's kernels launched by calls of the
    range's process that start inside such a range, in the window (1.51 ms a step); the same loop without the
    annotation (opt_loop) has none."""
    path = REAL / "opt_loop_annot_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    ns, launches = sql(path, f"""WITH o AS MATERIALIZED (SELECT n.start, n.end, n.globalTid / 16777216 AS pid
            FROM NVTX_EVENTS n LEFT JOIN StringIds t ON t.id = n.textId
            WHERE n.eventType = 59 AND COALESCE(n.text, t.value) LIKE 'Optimizer.step#%')
        SELECT SUM(k.end - k.start), COUNT(*) FROM o JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= o.start
            AND r.start < o.end AND r.globalTid / 16777216 = o.pid
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
        WHERE k.start >= {window['start_ns']} AND k.start < {window['end_ns']}""")[0]
    steps = model["timeline"]["steps"]["count"]
    assert launches == 1024 * steps
    work = {w["role"]: w["ns"] for w in model["timeline"]["work"]}
    assert work["optimizer"] == pytest.approx(ns, rel=1e-6)
    assert "optimizer" not in {w["role"] for w in analyzed(REAL / "opt_loop_nsys.sqlite.xz")["timeline"]["work"]}


def test_graph_level_trace_is_all_graph(analyzed):
    model = analyzed(REAL / "graphs_graphtrace_nsys.sqlite.xz")
    assert [w["role"] for w in model["timeline"]["work"]] == ["graph"]


def test_two_gpus_get_a_split_each(analyzed):
    model = analyzed(PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_before.sqlite.xz")
    devices = [d for d in model["timeline"]["devices"] if d.get("work")]
    assert len(devices) == 2
    for device in devices:
        assert sum(w["share"] for w in device["work"]) == pytest.approx(1.0)
        assert {"attention_fused", "communication"} <= {w["role"] for w in device["work"]}


@pytest.mark.parametrize("path", sorted(PUBLIC.glob("*.sqlite.xz"))
                         + [p for p in REAL_NSYS if p.name.endswith("_nsys.sqlite.xz") and p not in SECOND_RUNS])
def test_library_kernels_get_a_role(path):
    """Every GEMM, convolution, NCCL, softmax or PyTorch elementwise kernel name in the fixtures gets a role (a twin
    set's second runs launch its first runs' kernels: conftest.SECOND_RUNS; its fixed runs, other kernels, stay)."""
    tables = {r[0] for r in sql(path, "SELECT name FROM sqlite_master")}
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        pytest.skip("no kernels")
    names = sql(path, "SELECT DISTINCT s.value, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                      "LEFT JOIN StringIds s ON s.id = k.shortName LEFT JOIN StringIds d ON d.id = k.demangledName")
    for short, demangled in names:
        role = role_of(short, demangled)
        text = (demangled or short or "").lower()
        if any(word in text for word in ("gemm", "nvjet", "fprop", "dgrad", "wgrad")) and "reduce" not in text:
            assert role.startswith("matmul") or role == "attention_fused", (text, role)
        if "nccl" in text:
            assert role == "communication", text
        if "at::native" in text and "elementwise_kernel" in text:
            assert role != "other", text


def test_a_read_to_the_host_ends_a_chain_of_elementwise_kernels(analyzed):
    """blind61_anomaly: anomaly mode checks every gradient with isnan().any() and reads the answer back (SQL: one-byte
    copies to the host, 336 a step, each between the reduction that makes it and the next gradient's check). Read
    as chains, 2,914 of 26 kernels were sold to torch.compile (unfused-elementwise, 213 ms); a fused kernel cannot
    reach across a read the host waits for, so no chain spans one, and the finding is gone. Its twin with anomaly
    mode off launches none of those checks; mlp_eager's chains, which hold no read, still speak."""
    path = REAL / "blind61_anomaly_base1_nsys.sqlite.xz"
    model = analyzed(path)
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    [(reads,)] = sql(path, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 2 AND bytes = 1
                               AND start >= {window['start_ns']} AND start < {window['end_ns']}""")
    assert reads / steps == pytest.approx(336, abs=1)
    assert "unfused-elementwise" not in {f["check"] for f in model["findings"]}
    assert "unfused-elementwise" in {f["check"] for f in analyzed(REAL / "mlp_eager_nsys.sqlite.xz")["findings"]}


def test_embedding_lookups_are_gathers_not_other(analyzed):
    """blind_embtables' header read "GPU kernel time by role: other 51%": by SQL, embedding_backward_feature_kernel
    (48 launches a step) is half the kernel time, the loop its findings are about. Embedding lookups and their
    backward are the role `gather`, within two points of SQL's share, and nothing of that program is `other`."""
    path = REAL / "blind_embtables_base_nsys.sqlite.xz"
    model = analyzed(path)
    lookups = _sql_share(path, model, "s.value LIKE 'embedding_%' OR s.value LIKE 'indexSelect%'")
    assert lookups > 0.4
    assert _share(model, "gather") == pytest.approx(lookups, abs=0.02)
    assert _share(model, "other") < 0.02
    assert role_of("rotary_embedding_kernel") != "gather"   # RoPE is elementwise work, whatever its name says


@pytest.mark.parametrize("run", [1, 2])
def test_a_chain_that_runs_into_a_gather_is_bounded(analyzed, run):
    """blind72_vqvae (chosen blind): a VQ-VAE finds each latent's nearest code by a broadcast, `((z[:, None] -
    E[None]) ** 2).sum(-1)`, whose subtraction, square and sum each pass over an 8 GiB intermediate (SQL: 12 kernels
    of over 1 ms a step), from a GEMM to the gather of the chosen codes (PyTorch's `vectorized_gather_kernel`, which
    no role named: no bound, so no chain, and the report had no finding above info). A gather bounds a chain as a
    matrix product does: unfused-elementwise is first, its chains hold the broadcast's kernels, and it prices what
    the fix (the distances as one GEMM) saved within 25% (the twins' mean GPU periods by SQL)."""
    assert role_of("void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, "
                   "long, long, bool)") == "gather"
    base, fix = f"blind72_vqvae_base{run}_nsys.sqlite.xz", f"blind72_vqvae_fix{run}_nsys.sqlite.xz"
    model = analyzed(REAL / base)
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    (long_ns,), = sql(REAL / base, f"""SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL
        WHERE end - start > 1000000 AND start >= {window['start_ns']} AND start < {window['end_ns']}""")
    first = next(f for f in model["findings"] if f["severity"] != "info")
    assert first["check"] == "unfused-elementwise"
    assert long_ns <= first["evidence"]["chain_ns"]["value"] <= 1.1 * long_ns
    assert first["estimated_savings_ns"] / steps == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.25)
    assert "unfused-elementwise" not in {f["check"] for f in analyzed(REAL / fix)["findings"]}
