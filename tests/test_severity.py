"""One severity scale for every finding (issue 39, review W11): its savings as a share of the report's time (the
window of an nsys export, the profiled kernels' time of an ncu report), read from one table, the [severity] of
nsanalyze/checks/thresholds.toml. Kernel findings were cut at 5% / 0.2% of the report's time while program findings
of an nsys export were cut at 30% / 10% / 3% of the window: the same saving read `medium` in one report and
`high` in the other. The table is read here from the file, not through rank.py."""

import tomllib

import pytest

from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, DEV_SUITE_NSYS, REAL, ROOT
from tests.isolated import analyze_apart

with open(ROOT / "nsanalyze" / "checks" / "thresholds.toml", "rb") as handle:
    CUTS = tomllib.load(handle)["severity"]


def _table(savings_ns: float, total_ns: float) -> str:
    share = savings_ns / total_ns
    for name, minimum in (("high", CUTS["min_high_ns"]), ("medium", CUTS["min_medium_ns"]), ("low", 0)):
        if share >= CUTS[name] and savings_ns >= minimum and savings_ns > 0:
            return name
    return "info"


def _report_time(model: dict) -> float:
    """The time severities are shares of: the nsys window where the report has one, else the kernels' time."""
    span = (model.get("timeline") or {}).get("span_ns")
    return span or sum(k.get("total_ns") or (k["duration_ns"] or 0.0) * k["launches"] for k in model["kernels"])


def _check_one_scale(model: dict) -> dict[str, set[str]]:
    total = _report_time(model)
    seen: dict[str, set[str]] = {"kernel": set(), "program": set()}
    for finding in model["findings"]:
        kind = "kernel" if finding["kernel_id"] is not None else "program"
        expected = _table(finding["estimated_savings_ns"], total)
        if finding["severity"] == "info" and expected != "info":
            # info below the table: under the minimum share of the time it comes from, or capped, and said so
            minimum = CUTS["kernel_min_share" if kind == "kernel" else "program_min_share"]
            # a program finding's share of the window from its savings: the report's estimated_speedup is rounded
            # (dev_infer's low-tensor-activity: 9.309 ms of 310.3 ms, 2.99998%, reads 0.03)
            share = finding["estimated_speedup"] if kind == "kernel" else finding["estimated_savings_ns"] / total
            assert share < minimum or any("capped at info" in n for n in finding["notes"]), finding
        elif not any(n.startswith("shown as ") for n in finding["notes"]):
            assert finding["severity"] == expected, (finding["check"], finding["estimated_savings_ns"], total)
        seen[kind].add(finding["severity"])
    return seen


@pytest.mark.parametrize("path", [DEV_INFER_NSYS, DEV_SUITE_NSYS, REAL / "ddp_gpu_all_nsys.sqlite.xz"],
                         ids=lambda p: p.name)
def test_program_findings_of_an_nsys_export_are_on_the_one_scale(path, analyzed):
    seen = _check_one_scale(analyzed(path))
    assert seen["program"] - {"info"}   # the exports hold program findings above info


def test_kernel_findings_of_an_ncu_report_are_on_the_one_scale(analyzed):
    seen = _check_one_scale(analyzed(DEV_SUITE_NCU))
    assert {"high", "medium"} <= seen["kernel"]


def test_a_joined_report_is_on_the_one_scale():
    """ncu kernel findings weighted by the nsys export's time beside its program findings: one table."""
    seen = _check_one_scale(analyze_apart([DEV_SUITE_NCU, DEV_SUITE_NSYS]))
    assert seen["kernel"] - {"info"} and seen["program"] - {"info"}


def test_the_table_is_the_only_severity_scale():
    """rank.py reads its cuts from the table, and no other module sets a severity from a share."""
    import re

    settings = (ROOT / "nsanalyze" / "checks" / "thresholds.toml").read_text()
    assert len(re.findall(r"^\[\w*severity\w*\]", settings, flags=re.M)) == 1
    setters = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "nsanalyze").rglob("*.py")
                     if re.search(r"\.severity\s*=(?!=)", p.read_text()))
    assert setters == ["nsanalyze/rank.py"]
