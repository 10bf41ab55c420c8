"""One rule for numbers read from profiles: NaN and infinities are not measurements.

Profiles carry NaN or infinite values (a broken export, a division by a zero duration); JSON cannot
hold them and a check must not compare against them. Every layer reads values through `finite`.
"""

from __future__ import annotations

import math


def finite(value):
    """NaN and infinities become None, numpy scalars Python numbers; anything else stays as it is."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def finite_float(value) -> float | None:
    """A finite number as float, or None (None, NaN, infinities, text that is not a number)."""
    value = finite(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def ms_text(ns: float) -> str:
    """A duration in prose: `12.7 ms`, `4.46 s` (never `4.46e+03 ms`)."""
    ns = float(ns)
    return f"{ns / 1e9:.3g} s" if abs(ns) >= 1e9 else f"{ns / 1e6:.3g} ms"


def duration_text(ns) -> str:
    """9.52 ms, 812 ns, 2.50 µs: nanoseconds as people read them (humanize's SI prefixes, 3 figures).
    The one rounding of a duration in every report: a title and the header never print one figure twice
    in two roundings (29.68 ms beside 29.7 ms)."""
    import humanize

    if ns is None:
        return "-"
    ns = float(ns)
    if abs(ns) < 1000:
        return f"{ns:.0f} ns"
    return humanize.metric(ns * 1e-9, "s").replace("\u03bc", "\u00b5")
