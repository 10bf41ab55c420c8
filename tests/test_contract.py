"""docs/contract.md documents every key the JSON report emits, and docs/checks.md is current."""

import re
from pathlib import Path

from click.testing import CliRunner

from nsanalyze.cli import cli

DOCS = Path(__file__).resolve().parents[1] / "docs"


def documented() -> set[str]:
    return set(re.findall(r"`([a-z_]+)(?:\[\])?`", (DOCS / "contract.md").read_text()))


def test_every_emitted_key_is_documented(tmp_path):
    from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, DEV_SUITE_NSYS
    from tests.isolated import analyze_apart

    names = documented()
    model = analyze_apart([DEV_SUITE_NCU, DEV_INFER_NSYS])      # apart: the ncu report's memory ends with it
    unjudged = analyze_apart([DEV_SUITE_NSYS])["not_judged"]
    keys = set(model) | set(model["profiles"][0]) | set(model["findings"][0]) | set(model["kernels"][0]) \
        | set(model["kernels"][0]["roofline"]) | set(unjudged[0]) | set(model["nvidia_rules"][0]) \
        | set(model["timeline"]) | set(model["timeline"]["devices"][0]) | set(model["timeline"]["ranges"][0]) \
        | set(model["gpu_metrics"])
    assert keys - names == set()


def test_checks_doc_is_current():
    assert CliRunner().invoke(cli, ["checks", "--markdown"]).stdout == (DOCS / "checks.md").read_text()


def test_contract_check_ids_are_the_registry():
    """docs/contract.md's table of check ids is generated from the registry (`python -m
    nsanalyze.render.checks_doc`): a renamed or added check shows there, and nowhere by hand."""
    from nsanalyze.checks import all_checks
    from nsanalyze.render.checks_doc import IDS_BEGIN, IDS_END, with_check_ids

    contract = (DOCS / "contract.md").read_text()
    assert with_check_ids(contract) == contract
    table = contract.split(IDS_BEGIN)[1].split(IDS_END)[0]
    assert re.findall(r"^\| `([a-z0-9-]+)` \| (kernel|program) \|", table, flags=re.M) == \
        [(c.id, c.kind) for c in all_checks()]
