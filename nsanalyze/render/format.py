"""Number formatting shared by the human-readable renderers."""

from __future__ import annotations


def duration(ns) -> str:
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def percent(share) -> str:
    return "-" if share is None else f"{100 * float(share):.0f}%"


def quantity(value, unit: str = "") -> str:
    if value is None:
        return "-"
    value = float(value)
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}".strip()
    return f"{value:.3g} {unit}".strip()


def shorten(text: str | None, limit: int = 60) -> str:
    if text is None:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"

