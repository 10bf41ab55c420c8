"""The whole dev suite at once: every labelled kernel's first finding is its label, twins stay quiet,
and our first cause beats NVIDIA's top-ranked rule where NVIDIA's is the generic one."""

from tests.checks.kernel.labels import HEALTHY_TWINS, LABELLED
from tests.conftest import findings_for


def test_every_label_ranks_first(dev_suite_model):
    for kernel, accepted in LABELLED.items():
        top = [f for f in findings_for(dev_suite_model, kernel) if f["severity"] != "info"][0]
        assert top["check"] in accepted, (kernel, top["check"])
        assert top["severity"] in ("medium", "high"), kernel


def test_healthy_twins(dev_suite_model):
    assert not [f for f in findings_for(dev_suite_model, "soa_update") if f["severity"] != "info"]
    for twin, forbidden in HEALTHY_TWINS.items():
        if forbidden:
            assert all(f["severity"] in ("low", "info") for f in findings_for(dev_suite_model, twin)
                       if f["check"] == forbidden)


def test_nvidia_rules_kept_as_second_opinion(dev_suite_model):
    rules = [r for r in dev_suite_model["nvidia_rules"] if r["kernel_name"] == "sgemm_tiled"]
    assert rules, "NVIDIA's stored rule results are read"
    assert not any("tensor" in (r["message"] or "").lower() and "use" in (r["message"] or "").lower()
                   for r in rules if r["type"] == "optimization"), "no NVIDIA rule tells sgemm_tiled to use tensor cores"
    assert findings_for(dev_suite_model, "sgemm_tiled")[0]["check"] == "missing-tensor-cores"


def test_ranked_by_savings(dev_suite_model):
    ranked = [f for f in dev_suite_model["findings"] if f["severity"] != "info"]
    assert [f["rank"] for f in ranked] == list(range(1, len(ranked) + 1))
    savings = [f["estimated_savings_ns"] for f in ranked]
    assert savings == sorted(savings, reverse=True)
