"""An ncu report joined with its nsys export: what share of the window the ncu kernels are, and the kernel findings
whose cause a program finding states over the same kernels (program.join_kernel_times, rank.within_program_causes)."""

import pytest

from tests.conftest import DEV_SUITE_NCU, DEV_SUITE_NSYS, REAL, sql
from tests.isolated import analyze_apart, shared

GPT_NCU, GPT_NSYS = REAL / "gpt_fp32_full.ncu-rep.xz", REAL / "gpt_fp32_nsys.sqlite.xz"


@pytest.fixture(scope="module")
def gpt():
    """gpt_fp32's `ncu --set full` of 63 launches of one step, joined with the nsys export of 30 steps."""
    return shared("analyze", analyze_apart, [GPT_NCU, GPT_NSYS])


def test_the_report_says_how_much_of_the_window_ncu_measured(gpt):
    """The ncu report profiled 26 of the window's 53 kernel names; the cutlass SGEMM the nsys export launches 270 times
    in the window was not among them. The coverage is the window's kernel time of the measured names, and every
    format's header says it (the Markdown here)."""
    from nsanalyze.render.markdown import render

    coverage = gpt["ncu_coverage"]
    window = gpt["timeline"]["window"]
    [(kernel_ns, names)] = sql(GPT_NSYS, "SELECT SUM(end - start), COUNT(DISTINCT demangledName) FROM "
                                         f"CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= {int(window['start_ns'])} "
                                         f"AND end <= {int(window['end_ns'])}")
    assert coverage["window_kernel_ns"] == pytest.approx(kernel_ns, rel=0.001)
    assert coverage["names_in_window"] == names == 53 and coverage["names_measured"] == 26
    measured = sum(k["nsys"]["total_ns"] for k in gpt["kernels"] if k.get("nsys"))
    assert coverage["kernel_time_share"] == pytest.approx(measured / kernel_ns, rel=0.01) == pytest.approx(0.58, abs=0.01)
    assert "Nsight Compute measured the kernels of 58% of the window's GPU kernel time \\(26 of its 53 kernel " \
           "names\\)" in render(gpt)


def test_each_kernel_names_its_part_of_the_nsys_launches_once(gpt):
    """The nsys launches of a kernel name are split over its ncu entries as its time is: every entry of a name
    profiled several times stated all of the name's launches, so a sum over the kernels counted them again and again.
    The entries' launches add up to SQL's count of the name's launches in the window."""
    window = gpt["timeline"]["window"]
    by_name: dict[str, list[dict]] = {}
    for kernel in gpt["kernels"]:
        if kernel.get("nsys"):
            by_name.setdefault(kernel["demangled"], []).append(kernel)
    repeated = {name: ks for name, ks in by_name.items() if len(ks) > 1}
    assert repeated
    for name, kernels in repeated.items():
        [(launches,)] = sql(GPT_NSYS, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON "
                                      f"s.id = k.demangledName WHERE s.value = ? AND k.start >= {int(window['start_ns'])} "
                                      f"AND k.end <= {int(window['end_ns'])}".replace("?", "'" + name.replace("'", "''") + "'"))
        assert sum(k["nsys"]["launches"] for k in kernels) == launches


def test_a_report_whose_ncu_kernels_are_the_window_says_nothing_of_it():
    model = shared("analyze", analyze_apart, [DEV_SUITE_NCU, DEV_SUITE_NSYS])
    assert model["ncu_coverage"]["kernel_time_share"] >= 0.95
    from nsanalyze.render.format import ncu_coverage_line
    assert ncu_coverage_line(model) is None


def test_tensor_core_findings_on_fp32_gemms_are_part_of_the_programs(gpt):
    """low-tensor-activity prices TF32 over every FP32 GEMM of the window; the kernel findings of missing-tensor-cores on
    the measured cuBLAS and CUTLASS SGEMMs are parts of that change: each says so, none is added to it."""
    program = next(f for f in gpt["findings"] if f["check"] == "low-tensor-activity")
    parts = [f for f in gpt["findings"] if f["check"] == "missing-tensor-cores"]
    assert program["severity"] == "high" and len(parts) >= 5
    assert all(f["evidence"]["within"] == "low-tensor-activity" for f in parts)
    assert all(f["title"].endswith("; part of low-tensor-activity's saving, not added to it") for f in parts)
    assert sum(f["estimated_savings_ns"] for f in parts) < program["estimated_savings_ns"]


def test_savings_on_kernels_of_other_roles_add_up(gpt):
    """low-tensor-activity (the FP32 GEMMs as TF32) and attention-unfused (the softmax and its mask written out) draw
    on the same GPU compute time, from kernels of other roles: one change takes no time from the other's kernels, so
    their savings add up within the part. The product 1 - prod(1 - s_i) had scaled both, and, counted in order, would
    have left the attention a third of its replay's figure. Each keeps its replay's figure; the note says the sum."""
    from nsanalyze.numbers import duration_text

    found = [f for f in gpt["findings"] if f["check"] in ("low-tensor-activity", "attention-unfused")]
    assert len(found) == 2
    for finding in found:
        assert finding["estimated_savings_ns"] == pytest.approx(finding["evidence"]["replayed_savings_ns"]["value"],
                                                                rel=0.01)
    total = duration_text(sum(f["estimated_savings_ns"] for f in found))
    assert all(any(n.startswith("draws on the same gpu_compute time as ") and n.endswith(f"together they save {total}, "
                                                                                          "the sum") for n in f["notes"])
               for f in found)


def test_figures_in_prose_read_as_durations(gpt):
    """The GEMM that ran as two entries said '7.887e+04 us in all': every note and title reads its times as durations,
    never in scientific notation."""
    import re

    texts = [t for f in gpt["findings"] for t in [f["title"], *f["notes"]]]
    assert any("entries (launch shapes" in t for t in texts)
    assert not [t for t in texts if re.search(r"\d\.?\d*e[+-]\d", t)]
