"""SARIF 2.1.0 validated against the published JSON schema; GitHub annotations for the same findings."""

import json
from pathlib import Path

import jsonschema

from nsanalyze.render.sarif import github_annotations, render

SCHEMA = Path(__file__).resolve().parents[1] / ".schemas" / "sarif-2.1.0-rtm.5.json"


def test_valid_against_the_published_schema(joined_model):
    sarif = json.loads(render(joined_model))
    schema = json.loads(SCHEMA.read_text())      # fetched by `make test` (npm: @microsoft/jest-sarif)
    jsonschema.Draft4Validator(schema).validate(sarif)
    results = sarif["runs"][0]["results"]
    lines = {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results}
    assert ("uncoalesced-global", 16) in lines and ("bank-conflicts", 35) in lines


def test_github_annotations(joined_model):
    lines = github_annotations(joined_model)
    assert any(l.startswith(("::error file=", "::warning file=")) and ",line=16,title=uncoalesced-global::aos_update" in l
               for l in lines)
    # paths relative to the working directory (the tests run in the checkout: fixtures/dev_suite.cu); the findings
    # no line places, one file-less warning each
    assert all(" file=fixtures/dev_suite.cu," in l or l.startswith("::warning title=") for l in lines)


def test_no_made_up_links(dev_suite_model):
    """Links come from the package's declared [project.urls]; none declared, none invented."""
    import json as _json

    from nsanalyze.render.sarif import project_urls, render

    driver = _json.loads(render(dev_suite_model))["runs"][0]["tool"]["driver"]
    assert "example.invalid" not in _json.dumps(driver)
    assert ("informationUri" in driver) == ("Homepage" in project_urls())


def test_program_findings_are_results_on_the_profile(analyzed):
    """An nsys-only profile's program findings are SARIF results too: the profile as the artifact, the steps
    as a logical location; valid against the schema, never an empty upload while the report has findings."""
    from tests.conftest import REAL, sql

    path = REAL / "gpt_fp32_nsys.sqlite.xz"
    model = analyzed(path)
    sarif = json.loads(render(model))
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(sarif)
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == [f["check"] for f in model["findings"]]
    high = next(r for r in results if r["ruleId"] == "low-tensor-activity")
    assert high["level"] == "error"
    location = high["locations"][0]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "fixtures/real/gpt_fp32_nsys.sqlite.xz"
    # the steps as the report names them: 30 train_step ranges in the export, all steady (no warm-up)
    (count,) = sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                         "WHERE n.eventType = 59 AND COALESCE(n.text, s.value) = 'train_step'")[0]
    assert count == 30
    assert location["logicalLocations"][0] == {"name": "train_step steps 0-29", "kind": "nvtx range",
                                               "fullyQualifiedName": "gpt_fp32_nsys.sqlite.xz::train_step steps 0-29"}
    assert "saves 543 ms" in high["message"]["text"]
    # a stable fingerprint: the same finding of the next run is the same alert
    again = json.loads(render(model))["runs"][0]["results"][0]["partialFingerprints"]
    assert again == results[0]["partialFingerprints"]


def test_kineto_program_findings_are_results(analyzed):
    from tests.conftest import REAL

    model = analyzed(REAL / "gpt_fp32_kineto.json.gz")
    results = json.loads(render(model))["runs"][0]["results"]
    # errors are high findings: 5% of the trace's window or more (one severity scale; attention-unfused saves 5.7%)
    assert {r["ruleId"] for r in results if r["level"] == "error"} == {"low-tensor-activity", "attention-unfused"}
    # steps named as the trace numbers them (its ProfilerStep#5 to #10)
    assert results[0]["locations"][0]["logicalLocations"][0]["name"] == "ProfilerStep#N steps 5-10"
    assert all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("gpt_fp32_kineto.json.gz")
               for r in results)
