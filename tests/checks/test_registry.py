"""Every check carries its documentation and metadata beside its logic."""

import re

from nsanalyze.checks import DOC_HEADINGS, REQUIRED_ATTRIBUTES, all_checks, kernel_checks
from nsanalyze.normalize.metric_table import concept_units
from nsanalyze.normalize.kernels import TENSOR_CONCEPTS, DERIVED_UNITS


def test_metadata_and_headings():
    for check in all_checks():
        for attribute in REQUIRED_ATTRIBUTES:
            assert hasattr(check, attribute), (check.__name__, attribute)
        for heading in DOC_HEADINGS:
            assert f"## {heading}" in check.__doc__, (check.ID, heading)
        options = re.findall(r"^- `(\w+)`", check.__doc__.split("## Options")[1], flags=re.M)
        assert set(options) <= set(check.THRESHOLDS), (check.ID, options)
        assert "```" in check.ADVICE, check.ID


def test_kernel_checks_read_known_concepts():
    known = set(concept_units()) | set(TENSOR_CONCEPTS) | set(DERIVED_UNITS)
    for check in kernel_checks():
        assert set(check.REQUIRES) | set(getattr(check, "OPTIONAL", ())) <= known, check.ID


def test_contract_ids():
    ids = {c.ID for c in kernel_checks()}
    assert ids == {"uncoalesced-global", "bank-conflicts", "missing-tensor-cores", "warp-divergence", "low-ilp",
                   "low-occupancy", "local-memory-spill", "atomic-contention", "tail-effect", "clock-throttling",
                   "small-grid", "block-size", "costly-fp-math"}
