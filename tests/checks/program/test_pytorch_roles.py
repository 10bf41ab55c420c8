"""Large PyTorch roles that a known change removes get a program finding (issue 35): the foreach optimizer
(unfused-optimizer) and number-format casts (dtype-casts), with their evidence and savings no larger than the
role's time, measured from the kernels' DRAM bytes where the report has them and said to be unmeasured where not.

gpt_bf16_full (fixtures/real: one GPT training step under bf16 autocast, AdamW's default foreach step, ncu --set
full on an H200): the optimizer's kernels hold 29% of the profiled kernel time and the casts 19%."""

import pytest

from nsanalyze.normalize.work import role_of
from tests.conftest import REAL, shared
from tests.isolated import apart

GPT_BF16 = REAL / "gpt_bf16_full.ncu-rep.xz"
ALLOC_CACHED = REAL / "alloc_cached_nsys.sqlite.xz"


def _raw_by_role(path):
    """Once a run for all its tests (three read the 176 MB report's launches, 3.3 s each, alone)."""
    return shared("raw_by_role", apart, _raw_by_role_here, path)


def _raw_by_role_here(path):
    """Per role: (time, DRAM bytes, the best bytes/ns of one launch, distinct names), from each launch's raw metrics."""
    from nsanalyze.normalize.kernels import metrics_to_read
    from nsanalyze.read import read_profile

    out, stretch, stretches = {}, [], []
    for launch in read_profile(path, metrics_to_read).launches:
        m = launch.metrics
        role = role_of(launch.name, launch.demangled)
        ns, moved = m["gpu__time_duration.sum"], m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
        entry = out.setdefault(role, {"ns": 0.0, "bytes": 0.0, "best": 0.0, "names": set()})
        entry["ns"] += ns
        entry["bytes"] += moved
        entry["best"] = max(entry["best"], moved / ns)
        entry["names"].add(launch.demangled)
        if role.startswith("matmul"):   # the launches between two GEMMs, in the order ncu profiled them (one stream)
            stretches.append(stretch)
            stretch = []
        else:
            stretch.append((role, ns))
    # the casts between the GEMMs around a softmax (attention's scores: fp32 softmax under autocast)
    out["cast"]["around_softmax_ns"] = sum(ns for s in stretches[1:] if any(r == "attention_unfused" for r, _ in s)
                                           for r, ns in s if r == "cast")
    return out


def _finding(model, check):
    return next(f for f in model["findings"] if f["check"] == check)


def test_the_foreach_optimizer_is_named_with_its_bytes(analyzed):
    """AdamW's foreach step: 7 distinct element-wise kernels over the parameters, 606 us of 2.11 ms, 1.82 GB through
    DRAM. At the best rate one of them reached (3.77 TB/s) those bytes take 482 us: a fused step at that rate saves
    at least the 124 us left, never more than the optimizer's time. It ranks first: the most time to win."""
    raw = _raw_by_role(GPT_BF16)["optimizer"]
    model = analyzed(GPT_BF16)
    finding = _finding(model, "unfused-optimizer")
    evidence = finding["evidence"]
    assert evidence["optimizer_ns"]["value"] == pytest.approx(raw["ns"], rel=1e-6)
    assert evidence["distinct_kernels"]["value"] == len(raw["names"]) >= 3
    assert evidence["dram_bytes"]["value"] == pytest.approx(raw["bytes"], rel=0.03)   # a kernel's launches x its first's
    rate = evidence["best_dram_rate_gbps"]["value"]
    assert rate <= raw["best"] * 1.0001
    streamed = evidence["dram_bytes"]["value"] / rate
    assert finding["estimated_savings_ns"] == pytest.approx(raw["ns"] - streamed, rel=1e-3)
    assert 0 < finding["estimated_savings_ns"] < raw["ns"]
    total = sum(k["total_ns"] for k in model["kernels"])
    assert 0.25 < raw["ns"] / total < 0.33
    # second to the attention written out (the GPT's masked_fill and softmax, gpt_train.py), above every kernel finding
    assert [f["check"] for f in model["findings"][:2]] == ["attention-unfused", "unfused-optimizer"]
    assert "fused=True" in finding["title"] and "fused=True" in finding["advice"]


def test_kernel_findings_on_kernels_a_program_change_replaces_are_within_it(analyzed):
    """fused=True replaces the foreach step's kernels, and fused attention the written-out softmax: a launch-shape or
    latency finding on one of those kernels is work lost once the change is made. Each is counted within the program
    finding and listed at info (a user read: nine of seventeen main-table rows were the foreach kernels' shapes); the
    kernel findings on other roles (the GEMMs' clock, nll_loss's one block) keep their severity."""
    model = analyzed(GPT_BF16)
    names = {k["id"]: (k["name"], k.get("demangled")) for k in model["kernels"]}
    replaced = {"optimizer": "unfused-optimizer", "attention_unfused": "attention-unfused"}
    on_kernels = [f for f in model["findings"] if f["kernel_id"] is not None]
    by_role = {f["rank"]: role_of(*names[f["kernel_id"]]) for f in on_kernels}
    inside = [f for f in on_kernels if by_role[f["rank"]] in replaced]
    assert len(inside) >= 10 and {by_role[f["rank"]] for f in inside} == {"optimizer"}   # no softmax kernel finding
    for finding in inside:
        outer = replaced[by_role[finding["rank"]]]
        assert finding["severity"] == "info"
        assert finding["evidence"]["within"] == finding["evidence"]["replaced_by"] == outer
        assert finding["title"].endswith(f"; part of {outer}'s saving, not added to it")
    others = [f for f in on_kernels if by_role[f["rank"]] not in replaced]
    assert sum(f["severity"] != "info" for f in others) >= 4 and not any("replaced_by" in f["evidence"] for f in others)
    optimizer = _finding(model, "unfused-optimizer")
    assert sum(f["estimated_savings_ns"] for f in inside if f["evidence"]["within"] == "unfused-optimizer") \
        < optimizer["estimated_savings_ns"]


def test_the_casts_state_their_time_at_stake_unmeasured(analyzed):
    """bf16 autocast's casts (weights each forward, the logits' .float() and back): 19% of the kernel time by name.
    Those between the GEMMs around a softmax are the attention scores' (the softmax runs in fp32): attention's, which
    fused attention removes. Which of the rest a change removes is not measured: the finding gives their time and
    bytes, saves nothing in the ranking."""
    raw = _raw_by_role(GPT_BF16)["cast"]
    model = analyzed(GPT_BF16)
    finding = _finding(model, "dtype-casts")
    assert raw["around_softmax_ns"] > 0
    assert finding["evidence"]["cast_ns"]["value"] == pytest.approx(raw["ns"] - raw["around_softmax_ns"], rel=1e-6)
    assert finding["evidence"]["dram_bytes"]["value"] < raw["bytes"]
    assert 0.15 < raw["ns"] / sum(k["total_ns"] for k in model["kernels"]) < 0.23
    assert finding["estimated_savings_ns"] == 0.0
    assert any(note.startswith("saving not measured") for note in finding["notes"])


def test_an_export_without_bytes_gives_the_time_at_stake(analyzed):
    """An nsys export has no DRAM bytes: the optimizer's share (35% of the alloc_cached loop's kernel time) is said,
    the saving is not measured and not invented."""
    model = analyzed(ALLOC_CACHED)
    finding = _finding(model, "unfused-optimizer")
    assert finding["estimated_savings_ns"] == 0.0 and "dram_bytes" not in finding["evidence"]
    assert any(note.startswith("saving not measured") for note in finding["notes"])
    assert finding["evidence"]["optimizer_share"]["value"] >= 0.05


def test_a_fused_optimizer_is_not_flagged(analyzed):
    """A fused optimizer (PyTorch's fused=True: FusedAdamMathFunctor) is one pass already and is not flagged; none of
    the foreach step's kernels in gpt_bf16 is taken for a fused one."""
    from nsanalyze.checks.program.unfused_optimizer import FUSED

    assert FUSED.search("multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>")
    assert not any(FUSED.search(name) for name in _raw_by_role(GPT_BF16)["optimizer"]["names"])


def _role_time_here(path, role):
    from nsanalyze.checks.program._roles import role_time
    from nsanalyze.normalize.timeline import build_timeline
    from nsanalyze.read import read_profile

    timeline = build_timeline(read_profile(path))
    found = role_time(timeline, role)
    split = {entry.role: entry.ns for entry in timeline.work}
    return (found.ns, found.launches, found.dram_bytes, found.window_share, found.kernel_share,
            split.get(role), timeline.summary.span_ns, timeline.work_analysis.kernel_ns)


def test_one_role_time_serves_the_role_checks(analyzed):
    """dtype-casts, unfused-optimizer and layout-conversion read a role's kernels through one helper (_roles.py): on
    alloc_cached's foreach AdamW its time is the work split's optimizer time, its shares are of the window and of the
    kernel time, an nsys export has no DRAM bytes, and the finding quotes the same figures."""
    ns, launches, dram_bytes, window_share, kernel_share, split_ns, span_ns, kernel_ns = \
        apart(_role_time_here, ALLOC_CACHED, "optimizer")
    assert ns == pytest.approx(split_ns, abs=launches) and ns > 0   # the split truncates each name's ns
    assert window_share == pytest.approx(ns / span_ns) and kernel_share == pytest.approx(ns / kernel_ns)
    assert dram_bytes is None
    finding = _finding(analyzed(ALLOC_CACHED), "unfused-optimizer")
    assert finding["evidence"]["optimizer_ns"]["value"] == pytest.approx(ns, rel=1e-5)   # evidence keeps 6 digits
    assert finding["evidence"]["launches"]["value"] == launches


def test_casts_summed_over_two_gpus_say_so(analyzed):
    """nsys-ai's 2-GPU run: dtype-casts gave "45.1 ms in 1,657 launches" beside a finding of one GPU; by SQL the casts'
    kernels of both GPUs sum to it, and the title says they are of 2 GPUs."""
    from nsanalyze.render.format import duration
    from tests.conftest import PUBLIC, sql

    path = PUBLIC / "GindaChen__nsys-ai__tests__fixtures__mfu_2gpu_before.sqlite.xz"
    model = analyzed(path)
    finding = _finding(model, "dtype-casts")
    window = model["timeline"]["window"]
    devices = sql(path, f"""SELECT deviceId, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
                           WHERE s.value LIKE '%direct_copy_kernel%' AND s.value LIKE '%Cast%'
                           AND k.start >= {window['start_ns']} AND k.start < {window['end_ns']} GROUP BY deviceId""")
    assert len(devices) == len(model["timeline"]["devices"]) == 2
    assert f"({duration(finding['evidence']['cast_ns']['value'])} over 2 GPUs in " in finding["title"]
