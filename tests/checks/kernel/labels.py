"""The labels of dev_suite.cu (shared/profiles/README.md): kernel -> expected top check."""

LABELLED = {
    "aos_update": {"uncoalesced-global"},
    "random_gather": {"uncoalesced-global"},
    "reduce_interleaved": {"bank-conflicts"},
    "sgemm_tiled": {"missing-tensor-cores"},
    "lane_switch": {"warp-divergence"},
    "pointer_chase": {"low-ilp", "low-occupancy"},
    "histogram_global": {"atomic-contention"},
    "register_pressure": {"local-memory-spill"},
    "one_block_too_many": {"tail-effect"},
}

# healthy twin -> the class of finding it must not carry above `low`
HEALTHY_TWINS = {
    "soa_update": None,               # none above info at all
    "reduce_sequential": "bank-conflicts",
    "bf16_gemm_wmma": "missing-tensor-cores",
}


def assert_labelled_first(model: dict, kernel: str, check: str) -> None:
    """The kernel's first finding above info is its label, and `check` fired at medium or high with evidence."""
    from tests.conftest import findings_for

    findings = [f for f in findings_for(model, kernel) if f["severity"] != "info"]
    assert findings[0]["check"] in LABELLED[kernel]
    mine = next(f for f in findings if f["check"] == check)
    assert mine["severity"] in ("medium", "high") and mine["estimated_savings_ns"] > 0
    assert all("value" in e for e in mine["evidence"].values() if isinstance(e, dict))


def assert_quiet(model: dict, kernel: str, check: str) -> None:
    """A healthy twin carries no finding of its twin's class above `low`."""
    from tests.conftest import findings_for

    assert all(f["severity"] in ("low", "info") for f in findings_for(model, kernel) if f["check"] == check)
