"""JSON: the report model as it is (schema nsanalyze/report@1)."""

import json


def render(model: dict) -> str:
    return json.dumps(model, indent=2, allow_nan=False) + "\n"
