"""JSON: the report model as it is (schema nsanalyze/report@1), with NaN and infinities as null."""

import json

from nsanalyze.numbers import finite


def json_safe(value):
    """Profiles can carry NaN or infinite numbers (a broken export, a zero-duration division); JSON cannot."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def dumps(value) -> str:
    return json.dumps(json_safe(value), indent=2, allow_nan=False) + "\n"


def render(model: dict) -> str:
    return dumps(model)
