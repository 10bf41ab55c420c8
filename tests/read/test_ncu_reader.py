"""The ncu reader on real reports: every launch, raw values in base units, source lines, NVTX, rules."""

import pytest

from nsanalyze.read import read_profile
from tests.conftest import PUBLIC, PUBLIC_NCU


def test_dev_suite_launches(dev_suite_report):
    names = [l.name for l in dev_suite_report.launches]
    assert len(names) == 12 and names[0] == "aos_update" and names[-1] == "one_block_too_many"
    assert dev_suite_report.device_name == "NVIDIA H200" and dev_suite_report.compute_capability == "9.0"


def test_values_in_base_units(dev_suite_report):
    aos = dev_suite_report.launches[0]
    assert aos.metrics["gpu__time_duration.sum"] == 260928.0          # ns (ncu shows 260.93 us)
    assert dev_suite_report.units["gpu__time_duration.sum"] == "ns"
    assert dev_suite_report.units["dram__bytes_read.sum"] == "byte"
    assert aos.metrics["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1.9845e9, rel=1e-3)   # Hz


def test_source_correlation(dev_suite_report):
    reduce = next(l for l in dev_suite_report.launches if l.name == "reduce_interleaved")
    spots = reduce.source["memory_l1_wavefronts_shared"]
    assert any(s.file.endswith("dev_suite.cu") and s.line == 32 and "STS" in s.sass for s in spots)


def test_nvidia_rules_are_kept(dev_suite_report):
    rules = dev_suite_report.launches[0].nvidia_rules
    assert any(r["rule_identifier"] == "SOLBottleneck" for r in rules)


def test_nvtx_state():
    report = read_profile(PUBLIC / "NVIDIA__nsight-training__cuda__nsight_compute__sample_reports__manual_nvtx.ncu-rep.xz")
    assert [l.nvtx for l in report.launches] == [["run_test", "init_data"], ["run_test", "daxpy"],
                                                 ["run_test", "check_results"]]


@pytest.mark.parametrize("path", PUBLIC_NCU, ids=lambda p: p.name[:60])
def test_every_public_report_loads(path, ncu_facts):
    durations = ncu_facts(path)["durations"]   # read apart, once for this sweep and test_metric_table's
    assert durations and all(d > 0 for d in durations)


def test_reading_only_the_table_metrics_changes_no_concept():
    """The report path keeps only the raw metrics metrics.csv reads: the normalized table is the same
    as from a read of every metric, on a --set full report."""
    from nsanalyze.normalize import normalize_ncu
    from nsanalyze.normalize.kernels import metrics_to_read
    from tests.conftest import REAL
    from tests.isolated import apart

    (everything, everything_rows), (subset, subset_rows) = (   # two reads of a 177 MB report: apart
        apart(_first_launch_and_rows, REAL / "gpt_bf16_full.ncu-rep.xz", metrics) for metrics in (None, metrics_to_read()))
    assert len(subset.metrics) < len(everything.metrics) / 4
    assert subset_rows == everything_rows


def _first_launch_and_rows(path, metrics):
    from nsanalyze.normalize import normalize_ncu

    report = read_profile(path, ncu_metrics=metrics)
    first = report.launches[0]
    first.source = {}   # live handles on the report: they stay in the process that read it
    return first, normalize_ncu(report).rows


def test_source_counters_are_read_when_asked(dev_suite_report):
    """Per-PC values are read on first use, once; a counter the launch lacks reads as absent."""
    reduce = next(l for l in dev_suite_report.launches if l.name == "reduce_interleaved")
    assert "memory_l1_wavefronts_shared" in reduce.source
    first = reduce.source.get("memory_l1_wavefronts_shared")
    assert first is reduce.source.get("memory_l1_wavefronts_shared") and first
    assert sum(s.value for s in first) == reduce.metrics["memory_l1_wavefronts_shared"] == 9928704  # all PCs
    assert reduce.source.get("no_such_counter") is None


def test_launches_of_one_module_share_its_source_map():
    """Launches of one function share one source map, and a function whose PCs a map already built holds
    (one module) reads that map: the hot spots' file, line and SASS of launches that read another launch's
    map are those of their own map, asked of NVIDIA's reader directly, on a report built with -lineinfo
    (one module) and the GPT step (PyTorch's and cuBLAS's modules, no line info)."""
    from tests.conftest import REAL
    from tests.isolated import apart

    textbook = apart(_shared_and_own, REAL.parent / "kernels35" / "textbook_full.ncu-rep.xz", 12)
    assert textbook["maps"] == 1 and textbook["compared"] == textbook["launches"] - 1 > 0   # one module: one map
    assert textbook["files"] == {"textbook.cu"}
    assert textbook["shared"] == textbook["own"]
    gpt = apart(_shared_and_own, REAL / "gpt_fp32_full.ncu-rep.xz", 6)   # (each own map: up to 80 MB kept)
    assert gpt["maps"] == 18 and gpt["launches"] == 63 and gpt["compared"] == 6   # 26 functions in 18 modules
    assert gpt["shared"] == gpt["own"] and gpt["files"] == set()
    # Files and lines alone: modules the rules' markers show without a line table (the GPT step's) are not
    # disassembled; where a launch's markers tell (a SASS line marked), the map answers as they say.
    assert textbook["maps_for_files"] == 1 and gpt["maps_for_files"] == 0
    assert textbook["table_vs_map"] == {(True, True)} and gpt["table_vs_map"] == {(False, False)}


def _shared_and_own(path, most: int) -> dict:
    """Each launch's top 3 spots by inst_executed through the reader's shared maps; then, for up to `most`
    launches that read another launch's map, the same PCs through their own action."""
    from pathlib import Path

    from nsanalyze.read.ncu import line_table

    report = read_profile(path)
    hot = [sorted(launch.source["inst_executed"], key=lambda s: -s.value)[:3] for launch in report.launches]

    def maps() -> int:
        return len({id(launch.source._code.action) for launch in report.launches if launch.source._code.built})

    places = [[(s.file, s.line) for s in spots] for spots in hot]
    maps_for_files = maps()
    shared = [[(*place, s.sass) for place, s in zip(launch_places, spots)] for launch_places, spots in zip(places, hot)]
    tables = [line_table(launch.source._action) for launch in report.launches]
    table_vs_map = {(table, any((w := launch.source._code.action_for(s.pc).source_info(s.pc)) is not None
                                and bool(w.file_name()) for s in spots))
                    for launch, spots, table in zip(report.launches, hot, tables) if table is not None}
    borrowing = [k for k, launch in enumerate(report.launches) if launch.source._code.action is not launch.source._action]
    own = []
    for k in borrowing[:most]:
        action = report.launches[k].source._action   # its own map, built now
        where = [action.source_info(s.pc) for s in hot[k]]
        own.append([(w.file_name() if w else None, w.line() if w else None, action.sass_by_pc(s.pc).strip() or None)
                    for w, s in zip(where, hot[k])])
    files = {Path(f).name for spots in shared for f, _, _ in spots if f}
    return {"maps": maps(), "launches": len(report.launches), "compared": len(own),
            "shared": [shared[k] for k in borrowing[:most]], "own": own, "files": files,
            "maps_for_files": maps_for_files, "table_vs_map": table_vs_map}
