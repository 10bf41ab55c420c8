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
