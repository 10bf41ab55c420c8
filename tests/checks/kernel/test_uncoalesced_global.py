"""`uncoalesced-global` on the real H200 dev suite (labels in shared/profiles/README.md)."""

import pytest

from tests.checks.kernel.labels import assert_labelled_first, assert_quiet
from tests.conftest import DEV_SUITE_NCU, findings_for

CHECK = "uncoalesced-global"


@pytest.mark.parametrize("kernel", ['aos_update', 'random_gather'])
def test_labelled_kernel_gets_it_first(dev_suite_model, kernel):
    assert_labelled_first(dev_suite_model, kernel, CHECK)


def test_healthy_twin_stays_quiet(dev_suite_model):
    assert_quiet(dev_suite_model, "soa_update", CHECK)


def test_excess_share_matches_source_counters(dev_suite_table):
    row = dev_suite_table.frame.set_index("name").loc["aos_update"]
    # one float used of each 32-byte struct: 7 of 8 sectors wasted
    assert row["global_sectors_excess_share"] == pytest.approx(0.875, abs=1e-3)
    assert row["sectors_per_request_global_load"] == pytest.approx(32.0)


def test_points_at_the_strided_load(dev_suite_model):
    finding = findings_for(dev_suite_model, "aos_update")[0]
    assert finding["source"][0]["file"].endswith("dev_suite.cu")
    assert finding["source"][0]["line"] == 16


def _vector_kernel(analyzed):
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_fp32_full.ncu-rep.xz")
    return next(k for k in model["kernels"] if k["name"] == "vectorized_elementwise_kernel"
                and k["metrics"].get("sectors_per_request_global_load") == 16)


@pytest.mark.parametrize("without", [(), ("global_sectors_excess_share",),
                                     ("global_sectors_excess_share", "global_load_bytes_per_sector",
                                      "global_store_bytes_per_sector")])
def test_wide_accesses_are_not_waste(analyzed, without):
    """PyTorch's float4 element-wise kernel moves 16 sectors per warp request and uses all 32 bytes of
    each: coalesced, where the report has source counters or bytes per sector. With neither, 16 sectors a request is
    float4 or 4-byte words at four times their sectors, which no counter left tells apart: not judged, never a
    finding and never clean."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView, NotJudged
    from nsanalyze.checks.kernel import uncoalesced_global

    kernel = _vector_kernel(analyzed)
    assert kernel["metrics"]["global_load_bytes_per_sector"] == 32
    values = {k: v for k, v in kernel["metrics"].items() if k not in without}
    result = uncoalesced_global.run(KernelView({**values, "name": kernel["name"]}), limits_for(uncoalesced_global))
    if "global_load_bytes_per_sector" in without:
        assert isinstance(result, NotJudged) and "s touch 16.0 sectors a request: waste, or" in result.collect
    else:
        assert result is None


def test_loads_and_stores_are_named(dev_suite_model):
    title = findings_for(dev_suite_model, "random_gather")[0]["title"]
    assert "loads use 7 of 32 bytes" in title and "stores use 32 of 32" in title


FASTED = "bwcurless__FaSTED__profiles__"


def test_a_direction_without_ldg_is_not_quoted(analyzed):
    """MmaPtxShared loads its tiles with cp.async only: no LDG, so the SASS bytes per sector of loads reads 0 (0/0) over
    1.34e9 L1 load sectors. The source counters' 50% excess stands; '0 of 32 bytes' is neither said nor counted."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / (FASTED + "Shared_Memory_Alignment_Specifiers__Pipeline_Depth_1_16B_Align.ncu-rep.xz"))
    kernel = next(k for k in model["kernels"] if k["name"] == "MmaPtxShared")
    assert kernel["metrics"]["global_load_bytes_per_sector"] == 0 and kernel["metrics"]["global_load_sectors"] > 0
    finding = next(f for f in findings_for(model, "MmaPtxShared") if f["check"] == CHECK)
    assert finding["evidence"]["global_sectors_excess_share"]["value"] == pytest.approx(0.5, abs=1e-3)
    assert "bytes per sector" not in finding["title"] and "global_load_bytes_per_sector" not in finding["evidence"]
    assert finding["notes"][0].startswith("measured from source counters")


def test_source_counters_win_when_the_measures_disagree(analyzed):
    """Conventional_Layout's FindPairsKernel: 99% of its load requests are cp.async (16 sectors a request, coalesced:
    the source counters' ideal equals the actual 4.01e10 sectors); its LDG instructions average 4 of 32 bytes per
    sector, which NVIDIA's rule applies to all sectors (52.7%). Said, with no savings: not a 'wasted' finding."""
    from tests.conftest import PUBLIC

    model = analyzed(PUBLIC / (FASTED + "CTA_Layouts__Conventional_Layout.ncu-rep.xz"))
    finding = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "FindPairsKernel")
    assert finding["evidence"]["global_sectors_excess_share"]["value"] == 0
    assert finding["evidence"]["global_load_bytes_per_sector"]["value"] == 4
    assert finding["evidence"]["global_sectors"]["value"] == finding["evidence"]["global_sectors_ideal"]["value"]
    assert finding["severity"] == "info" and finding["estimated_speedup"] == 0
    assert "wasted by uncoalesced" not in finding["title"] and "coalesced by the source counters" in finding["title"]


def test_a_tma_gemms_few_ldgs_are_no_disagreement_worth_telling(analyzed):
    """cuBLAS's nvjet GEMMs on the H200 move their tiles with TMA: the LSU's global sectors (25344 for the 192x192
    tile) are a sliver of their DRAM bytes, so that their LDGs use 16 of 32 bytes per sector is not told."""
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_bf16_full.ncu-rep.xz")
    gemms = [k for k in model["kernels"] if k["name"].startswith("nvjet_sm90_tst")
             and k["metrics"].get("global_load_bytes_per_sector") == 16 and k["metrics"].get("global_sectors_excess_share") == 0]
    assert gemms
    for kernel in gemms:
        sectors = kernel["metrics"]["global_load_sectors"] + kernel["metrics"].get("global_store_sectors", 0)
        assert sectors * 32 < 0.1 * kernel["metrics"]["dram_bytes"]
    ids = {k["id"] for k in gemms}
    assert not [f for f in model["findings"] if f["check"] == CHECK and f["kernel_id"] in ids]


ACCESS_CONCEPTS = ("global_sectors", "global_sectors_ideal", "global_sectors_excess_share", "global_load_bytes_per_sector",
                   "global_store_bytes_per_sector", "global_load_sectors", "global_store_sectors",
                   "sectors_per_request_global_load", "sectors_per_request_global_store", "l1_hit_rate_pct")


def test_basic_set_signature_speaks_with_the_sections_to_collect(ncu_rows):
    """Issue 35: a dominant kernel at L1 99%, SM 12%, DRAM 0.5% in a basic-set report was left silent. The fp16 suite's
    hgemm_wmma (H200) has that signature: L1 99.6%, DRAM 0.7%, SM 17% (its WMMA fragments load from global memory, L1
    serving split sectors). Its row without the access counters, as ncu's basic set leaves it: the check says L1 is
    the limit while DRAM idles, names the sections to collect, and estimates half of L1's time (said in a note)."""
    from nsanalyze.checks import limits_for
    from nsanalyze.checks.base import KernelView
    from nsanalyze.checks.kernel import uncoalesced_global
    from tests.conftest import FIXTURES

    rows = ncu_rows(FIXTURES / "fp16" / "fp16_suite_full.ncu-rep.xz")
    row = next(r for r in rows if r["name"] == "hgemm_wmma")
    basic = {k: v for k, v in row.items() if k not in ACCESS_CONCEPTS}
    limits = limits_for(uncoalesced_global)
    finding = uncoalesced_global.run(KernelView(basic), limits)
    assert finding is not None and finding.title.startswith("L1 at 100% of its peak while DRAM idles (0.7%)")
    assert finding.estimated_speedup == pytest.approx(row["l1_throughput_pct"] / 100 * 0.5)
    assert any("--section MemoryWorkloadAnalysis_Tables --section SourceCounters" in n for n in finding.notes)
    # a GEMM whose SM pipes are busy too (sgemm-like), and a one-block launch, are not that signature
    assert uncoalesced_global.run(KernelView({**basic, "sm_throughput_pct": 76.0}), limits).__class__.__name__ == "NotJudged"
    assert uncoalesced_global.run(KernelView({**basic, "grid_size": 1}), limits).__class__.__name__ == "NotJudged"


def test_excess_that_stops_in_l2_of_a_latency_bound_kernel_costs_no_time(analyzed, ncu_rows):
    """FaSTED's A100 pipeline at depth 4: half its L2 sectors are excess, but DRAM moves half the bytes the accesses
    need (L2 hits) and the kernel waits on latency (52% of its nearest roof, 0.22 ready warps a scheduler; no warp
    ever waits on a global load: long scoreboard 0). Depth 3, the same kernel without the excess (its own report),
    runs the same 23.8 ms. uncoalesced-global led this report with 5.2 ms; it now saves nothing and says why, and
    the first finding is another."""
    from tests.conftest import PUBLIC

    folder = "bwcurless__FaSTED__profiles__Shared_Mem_Conflicts_Sync_Vs_Async__Pipeline_Depth_"
    row = ncu_rows(PUBLIC / f"{folder}4.ncu-rep.xz")[0]
    twin = ncu_rows(PUBLIC / f"{folder}3.ncu-rep.xz")[0]
    assert row["global_sectors_excess_share"] > 0.4 and twin["global_sectors_excess_share"] < 0.05
    assert row["dram_bytes"] <= row["global_sectors_ideal"] * 32 and row["eligible_warps_per_scheduler"] < 1
    assert abs(twin["duration_ns"] / row["duration_ns"] - 1) < 0.01
    model = analyzed(PUBLIC / f"{folder}4.ncu-rep.xz")
    finding = next(f for f in model["findings"] if f["check"] == CHECK)
    assert finding["estimated_savings_ns"] == 0 and finding["severity"] == "info"
    assert any(n.startswith("no time estimated: DRAM moves 0.51x the bytes the accesses need") for n in finding["notes"])
    assert model["findings"][0]["check"] != CHECK
    # an excess that reaches DRAM keeps its time: the dev suite's aos_update (DRAM 8x the need)
    aos = next(f for f in analyzed(DEV_SUITE_NCU)["findings"] if f["check"] == CHECK and f["kernel_name"] == "aos_update")
    assert aos["estimated_savings_ns"] > 0


def test_a_memory_chart_alone_judges_coalescing_by_l2_sectors_a_request(analyzed):
    """COALDA's chart reports (RTX 4050, the memory chart alone): L1's own sector counters are not in them, so the
    check was not judged, on a kernel whose stores touch 32 sectors a request (ncu: 196,544 L2 sectors written from
    L1 over 6,144 store requests; loads 159,382 over 6,144) and whose coalesced twin runs 47.7 -> 14.4 us. L2's
    sectors from L1 over L1's requests measure it (a lower bound for loads, which L1 hits keep from L2): the worse
    direction, stores, against the 16 sectors a request of an unknown width; at info, since the chart has no
    speed-of-light share to price it. The coalesced twin (4 sectors a request) gets no finding."""
    from tests.conftest import PUBLIC

    name = "Alaric617R__COALDA__examples__rgb__profile__report__{}_chart_unroll.ncu-rep.xz"
    model = analyzed(PUBLIC / name.format("uncoalesced"))
    finding = next(f for f in model["findings"] if f["check"] == "uncoalesced-global")
    assert finding["evidence"]["sectors_per_request_global_store"]["value"] == pytest.approx(196544 / 6144, rel=1e-3)
    assert finding["evidence"]["sectors_per_request_global_load"]["value"] == pytest.approx(159382 / 6144, rel=1e-3)
    assert finding["evidence"]["global_sectors_excess_share"]["value"] == pytest.approx(1 - 16 / (196544 / 6144),
                                                                                        rel=1e-3)
    assert finding["severity"] == "info" and any("store sectors per request" in n and "L2 sectors over L1 requests"
                                                 in n for n in finding["notes"])
    assert "uncoalesced-global" not in {g["check"] for g in model.get("not_judged", [])}
    twin = analyzed(PUBLIC / name.format("coalesced"))
    assert "uncoalesced-global" not in {f["check"] for f in twin["findings"]}


def test_a_dependent_pointer_chase_is_promised_no_coalescing_time(analyzed, ncu_rows):
    """The dev suite's pointer_chase (H200): one dependent random load after another, 87% of its sectors excess, at
    16% of its nearest roof with no ready warp a scheduler. Its loads' addresses come from the loads before them, so a
    layout that wastes no sector leaves each load's latency as it is: the check saved 94 us (8% of the kernel) and
    now estimates none, says why, and leaves the kernel's time to the latency findings. A memory-bound gather of the
    same suite (random_gather, 70% of its roof) keeps its time."""
    row = ncu_rows(DEV_SUITE_NCU)
    chase = next(r for r in row if r["name"] == "pointer_chase")
    assert chase["global_sectors_excess_share"] > 0.8 and chase["eligible_warps_per_scheduler"] < 0.01
    model = analyzed(DEV_SUITE_NCU)
    finding = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "pointer_chase")
    assert finding["estimated_savings_ns"] == 0 and finding["severity"] == "info"
    assert any(n.startswith("no time estimated: the kernel waits on latency (16% of its nearest roof")
               for n in finding["notes"])
    latency = [f for f in model["findings"] if f["kernel_name"] == "pointer_chase" and f["check"] in ("low-ilp", "low-occupancy")]
    assert latency and all(f["estimated_savings_ns"] > 0 for f in latency)
    gather = next(f for f in model["findings"] if f["check"] == CHECK and f["kernel_name"] == "random_gather")
    assert gather["estimated_savings_ns"] > 0


def test_excess_sectors_on_cp_async_get_the_alignment_advice(analyzed):
    """FaSTED's A100 pipeline whose shared buffers are 16-byte aligned (its twin, 128-byte aligned, runs 15.47 ->
    13.23 ms): 98% of the excess global sectors come from one `LDGSTS.E.BYPASS.128` (cp.async). Structures of arrays
    are no fix for that; aligning each warp's copy to 128-byte lines is."""
    from tests.conftest import PUBLIC

    name = "bwcurless__FaSTED__profiles__Shared_Memory_Alignment_Specifiers__Pipeline_Depth_1_{}_Align.ncu-rep.xz"
    model = analyzed(PUBLIC / name.format("16B"))
    finding = next(f for f in model["findings"] if f["check"] == CHECK)
    assert "98% of the excess on cp.async (LDGSTS)" in finding["title"]
    assert finding["source"][0]["sass"].startswith("LDGSTS") and "__align__(128)" in finding["advice"]
    assert not any(f["check"] == CHECK for f in analyzed(PUBLIC / name.format("128B"))["findings"])
    # an LDG gather keeps the layout advice
    aos = next(f for f in analyzed(DEV_SUITE_NCU)["findings"] if f["check"] == CHECK and f["kernel_name"] == "aos_update")
    assert "structures of arrays" in aos["advice"] and "LDGSTS" not in aos["title"]


def test_the_advice_leads_with_the_side_that_wastes_the_sectors(dev_suite_model):
    """random_gather's loads use 7 of 32 bytes a sector and its stores all 32: a gather, whose advice leads with the
    loads and shows a row gathered by a warp; aos_update wastes both sides (4 of 32 each): a structure read whole,
    the structure-of-arrays example."""
    def finding(kernel):
        return next(f for f in findings_for(dev_suite_model, kernel) if f["check"] == "uncoalesced-global")

    gather, aos = finding("random_gather"), finding("aos_update")
    assert "loads use 7 of 32" in gather["title"] and "stores use 32 of 32" in gather["title"]
    assert gather["advice"].startswith("The loads waste the sectors and the stores do not")
    assert "a warp per picked row" in gather["advice"] and "structure of arrays" not in gather["advice"]
    assert "loads use 4 of 32" in aos["title"] and "stores use 4 of 32" in aos["title"]
    assert aos["advice"].startswith("Lay data out") and "// after: structure of arrays" in aos["advice"]


def test_the_l1_example_follows_the_kernels_pipe(analyzed):
    """Loads that L1 serves twice: the textbook's stridedL1 (each thread walks its own 128-byte row, no tensor core)
    was shown WMMA's load_matrix_sync (a user read); it gets the row read across the warp. fp16's hgemm_wmma, on the
    tensor cores, keeps WMMA's example."""
    from tests.conftest import FIXTURES

    cases = ((FIXTURES / "kernels35" / "textbook_full.ncu-rep.xz", "stridedL1", False),
             (FIXTURES / "fp16" / "fp16_suite_full.ncu-rep.xz", "hgemm_wmma", True))
    for path, kernel, tensor in cases:
        model = analyzed(path)
        finding = next(f for f in findings_for(model, kernel) if f["check"] == "uncoalesced-global")
        pipe = next(k for k in model["kernels"] if k["name"] == kernel)["metrics"].get("tensor_pipe_pct") or 0.0
        assert (pipe >= 1.0) == tensor and "L1 serves the other part" in finding["advice"]
        assert ("wmma::load_matrix_sync" in finding["advice"]) == tensor
        assert ("each thread walks its own row of 32 words" in finding["advice"]) != tensor
