"""`tf32-matmul` on real profiles: float32 programs whose library GEMMs and convolutions take TF32 inputs, against SQL
over their kernels' names; silent where the products already run in bfloat16 or off the tensor cores."""

import pytest

from tests.conftest import REAL, sql, sql_saved_per_step

TF32_NAMES = "(s.value LIKE '%tf32%' OR s.value LIKE '%tensorop\\_s1688%' ESCAPE '\\')"


def finding(model: dict, check: str = "tf32-matmul") -> dict | None:
    return next((f for f in model["findings"] if f["check"] == check), None)


def sql_tf32(path, start: int, end: int) -> tuple[int, int]:
    """(kernel time, distinct names) of the kernels starting in the window whose names say TF32 inputs."""
    ((ns, names),) = sql(path, f"SELECT SUM(k.end - k.start), COUNT(DISTINCT s.value) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               f"JOIN StringIds s ON s.id = COALESCE(k.demangledName, k.shortName) "
                               f"WHERE k.start >= {start} AND k.start < {end} AND {TF32_NAMES}")
    return ns or 0, names


@pytest.mark.parametrize("name", ["blind68_gpt_fix1", "itemlog_every1"])
def test_tf32_products_are_found_and_priced_at_the_bf16_rate(analyzed, name):
    """A GPT trained in float32 with TF32 matrix products (blind68's fixed run: cuBLAS `sm90_xmma_gemm_f32f32_tf32f32`)
    and a CNN whose cuDNN convolutions take TF32 by PyTorch's default (itemlog): the kernels' time is SQL's, the check's
    own estimate 60% of it (H100 and H200, compute capability 9.0: bfloat16 inputs ran them 2.5x as fast on blind88's
    twins, bf16_rates.csv), and the replay of the steps saves no more."""
    path = REAL / f"{name}_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    ns, names = sql_tf32(path, window["start_ns"], window["end_ns"])
    found = finding(model)
    assert found is not None and found["severity"] != "info"
    evidence = found["evidence"]
    assert evidence["tf32_ns"]["value"] == pytest.approx(ns, rel=0.01)
    assert f"{names} library kernels on TF32 inputs" in found["title"]
    assert evidence["bf16_over_tf32"]["value"] == 2.5
    assert evidence["check_savings_ns"]["value"] == pytest.approx(ns * (1 - 1 / 2.5), rel=0.01)
    assert 0 < found["estimated_savings_ns"] <= evidence["check_savings_ns"]["value"] * 1.001
    assert "torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16)" in found["advice"]


def test_the_gpts_float32_attention_is_named_and_not_priced(analyzed):
    """blind68's GPT runs its attention in PyTorch's float32 memory-efficient kernels (`fmha_cutlass*_f32`): autocast
    would run it in bfloat16 too; the note gives their time (SQL), which the saving leaves out."""
    path = REAL / "blind68_gpt_fix1_nsys.sqlite.xz"
    model = analyzed(path)
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    ((ns,),) = sql(path, f"SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                         f"ON s.id = COALESCE(k.demangledName, k.shortName) WHERE k.start >= {window['start_ns']} "
                         f"AND k.start < {window['end_ns']} AND s.value LIKE 'fmha%\\_f32\\_%' ESCAPE '\\'")
    found = finding(model)
    assert found["evidence"]["fp32_attention_ns"]["value"] == pytest.approx(ns, rel=0.01)
    assert any(n.startswith("float32 attention kernels take") for n in found["notes"])
    assert ns / steps > 1e6   # milliseconds a step: worth the note


@pytest.mark.parametrize("name", ["xfmr_bf16", "fp32", "blind68_gpt_base1"])
def test_silent_where_no_product_takes_tf32(analyzed, name):
    """bfloat16 autocast (xfmr_bf16: its GEMMs are cuBLASLt's `nvjet_sm90_tst_...`, which is not TF32) and float32
    products on the CUDA cores (fp32, blind68's base: low-tensor-activity's finding) have no TF32 product by SQL."""
    path = REAL / f"{name}_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    assert sql_tf32(path, window["start_ns"], window["end_ns"])[0] == 0
    assert finding(model) is None


@pytest.mark.parametrize("i", [1, 2])
def test_the_cnns_twin_in_bfloat16_saves_what_the_finding_says(analyzed, i):
    """blind88's CNN (fixtures/real/blind88_train.py, an H100): float32 training whose cuDNN convolutions take TF32 by
    PyTorch's default, and its twin under bfloat16 autocast. The finding is the first, and what it saves a step is
    what the twin saved (SQL's mean GPU periods) within 25%: its products alone, where the twin's elementwise kernels
    halved too (18.5 against 23.7 ms a step)."""
    base, fix = f"blind88_cnn_base{i}_nsys.sqlite.xz", f"blind88_cnn_fix{i}_nsys.sqlite.xz"
    model = analyzed(REAL / base)
    found = finding(model)
    assert [f for f in model["findings"] if f["severity"] != "info"][0] is found
    saved = sql_saved_per_step(analyzed, base, fix)
    assert found["estimated_savings_ns"] / model["timeline"]["steps"]["count"] == pytest.approx(saved, rel=0.25)
    assert finding(analyzed(REAL / fix)) is None   # the twin has no TF32 product left


@pytest.mark.parametrize("name, said", [("blind67_distval_base1", True), ("blind88_cnn_base1", False)])
def test_the_kernels_the_rate_was_not_measured_on_are_said(analyzed, name, said):
    """The rate on compute capability 9.0 was measured on blind88's twins, whose TF32 time ran in cuBLAS's and cuDNN's
    sm90 xmma kernels (bf16_rates.csv). blind67's small-channel CNN runs a third of its TF32 time in sm80 `_wo_smem`
    kernels (SQL): the note says how much lies beyond the measured families; on blind88's own CNN, under 1%, nothing."""
    path = REAL / f"{name}_nsys.sqlite.xz"
    model = analyzed(path)
    window, steps = model["timeline"]["window"], model["timeline"]["steps"]["count"]
    ((ns,),) = sql(path, f"SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                         f"ON s.id = COALESCE(k.demangledName, k.shortName) WHERE k.start >= {window['start_ns']} "
                         f"AND k.start < {window['end_ns']} AND {TF32_NAMES} AND NOT (s.value LIKE 'sm90\\_xmma\\_gemm%' "
                         "ESCAPE '\\' OR s.value LIKE 'sm90\\_xmma\\_fprop%' ESCAPE '\\' OR s.value LIKE "
                         "'sm90\\_xmma\\_dgrad%' ESCAPE '\\' OR s.value LIKE 'sm90\\_xmma\\_wgrad%' ESCAPE '\\')")
    found = finding(model)
    assert found["evidence"]["tf32_unmeasured_ns"]["value"] == pytest.approx(ns or 0, rel=0.01, abs=1e3)
    note = next((n for n in found["notes"] if "kernel families the twins that measured the rate did not run" in n), None)
    share = (ns or 0) / found["evidence"]["tf32_ns"]["value"]
    assert (note is not None) == said == (share >= 0.1)
    if said:
        from nsanalyze.render.format import duration
        assert note.startswith(f"{share:.0%} of these kernels' time ({duration(ns / steps)} a step)")
