"""`nsanalyze whatif`'s output: JSON as is (one object per profile), and one line of summary a profile."""

from __future__ import annotations

from nsanalyze.render.json_report import dumps
from nsanalyze.text import visible


def render_json(results: list[dict]) -> str:
    return dumps(results[0] if len(results) == 1 else results)


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms" if ns >= 1e5 else f"{ns / 1e3:.3g} µs"


def summary_line(result: dict, change_label: str) -> str:
    """"kernels /gemm/ 2x faster: 20.3 -> 12.2 ms a step (-40%); the critical path is then 62% host"."""
    base, predicted = result["base_step_ns"], result["predicted_step_ns"]
    mean_base, mean_predicted = result["base_mean_step_ns"], result["predicted_mean_step_ns"]
    change = (predicted - base) / base if base else 0.0
    line = f"{visible(change_label)}: {ms(base)} -> {ms(predicted)} a step ({change:+.0%})"
    if base and abs((mean_predicted - mean_base) / mean_base - change) > 0.02:   # the run's cost moves otherwise
        line += f", the mean step {ms(mean_base)} -> {ms(mean_predicted)}"
    path = result.get("critical_path") or []
    total = sum(p["ns"] for p in path)
    if total:
        host = sum(p["ns"] for p in path if p["part"].startswith("host:")) / total
        line += f"; the critical path is then {host:.0%} host"
    for caveat in result.get("caveats") or ():   # what the prediction assumes beside the change asked
        line += f" ({caveat})"
    check = result["self_check"]
    if not check["trusted"]:
        line += (f" (not trusted: replayed unchanged, the steps come out {check['error']:.1%} off the measured ones, "
                 f"over the {check['tolerance']:.0%} allowed)")
    return line
