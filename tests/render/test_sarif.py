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
    # paths relative to the working directory (the tests run in the checkout: fixtures/dev_suite.cu)
    assert all(" file=fixtures/dev_suite.cu," in l for l in lines)


def test_no_made_up_links(dev_suite_model):
    """Links come from the package's declared [project.urls]; none declared, none invented."""
    import json as _json

    from nsanalyze.render.sarif import project_urls, render

    driver = _json.loads(render(dev_suite_model))["runs"][0]["tool"]["driver"]
    assert "example.invalid" not in _json.dumps(driver)
    assert ("informationUri" in driver) == ("Homepage" in project_urls())
