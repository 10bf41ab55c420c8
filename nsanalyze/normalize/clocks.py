"""How an ncu report was clocked: at ncu's default locked base clock, or free-running.

The report does not store ncu's `--clock-control` option, but the clocks show it. At the default
(`base`) every kernel runs at one fixed SM clock, the GPU's base clock; under `--clock-control none`
kernels run near the boost clock, and real throttling varies between kernels. A locked report says
nothing about throttling, so clock-throttling is not judged on it.

Only evidence decides: a clock near the maximum is free-running, unless several kernels share it to the
MHz (steady: unthrottled, locked or not); a clock at the model's datasheet base clock (device names
matched as whole model names: a laptop part is not its desktop namesake) is locked, and one clearly
below it (more than LOCK_SLACK, measured on kernels long enough) is a lock the GPU did not hold:
evidence of power or thermal slowdown, judged against the locked clock; one clock seen once, or one clock shared by every launch, below the maximum is probably
locked (a throttled GPU does not hold one clock to the MHz); only clocks that vary below the maximum
are free-running and judged.
"""

from __future__ import annotations

import csv
import re
import statistics
from functools import lru_cache
from pathlib import Path

CLOCKS_PATH = Path(__file__).with_name("gpu_clocks.csv")
BASE_TOLERANCE = 0.12     # measured clocks of short kernels read a few percent off the locked clock
LOCKED_SPREAD = 0.05      # kernels at one locked clock agree within a few percent (measured: 3% on an H200)
MIN_KERNEL_NS = 20_000    # shorter kernels measure their clock too coarsely to compare
BELOW_BOOST = 0.90        # a clock this close to the boost clock is free-running whatever the rest says
# Under ncu's lock the clock most kernel time ran at stays within 1.3% of the base clock in every locked report
# measured (H200: 1492 against 1490 MHz, single kernels 1452-1498; V100 1288-1294 against 1290; RTX 3070 1520
# against 1500); further below, the GPU did not hold the lock (an MX450 3.4% and 4.8% below: both slowdown).
LOCK_SLACK = 0.02


@lru_cache(maxsize=1)
def _models() -> list[dict]:
    with open(CLOCKS_PATH, newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


# Words after a model name that make it another part with other clocks (RTX 3080 Ti, RTX 3080 Laptop GPU).
VARIANT_WORDS = re.compile(r"(?<![a-z0-9])(ti|super|laptop|mobile|max-q|notebook|nvl)(?![a-z0-9])", re.I)


def _matches(pattern: str, name: str) -> bool:
    """The model name appears as whole words (`L4` is not `L40`, `A10` not `A100`) and nothing after it
    names a variant of the part."""
    found = re.search(r"(?<![a-z0-9])" + re.escape(pattern.lower()) + r"(?![a-z0-9])", name.lower())
    if found is None:
        return False
    rest = name[found.end():]
    return not (VARIANT_WORDS.search(rest) and not VARIANT_WORDS.search(pattern))


def model_clocks(device_name: str | None) -> dict | None:
    """Base and boost clocks (Hz) of a GPU model, from the datasheet table; None when unknown."""
    name = device_name or ""
    for row in _models():
        if _matches(row["pattern"], name):
            return {"base_hz": float(row["base_mhz"]) * 1e6, "boost_hz": float(row["boost_mhz"]) * 1e6,
                    "source": row["source"]}
    return None


def _weighted_median(pairs: list[tuple[float, float]]) -> float:
    """The clock at which half the kernel time ran: the median of (clock, time) weighted by time."""
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    if total <= 0:
        return statistics.median(c for c, _ in pairs)
    running = 0.0
    for clock, weight in pairs:
        running += weight
        if running >= total / 2:
            return clock
    return pairs[-1][0]


def _mhz_range(clocks: list[float]) -> str:
    low, high = min(clocks) / 1e6, max(clocks) / 1e6
    return f"{low:.0f} MHz" if round(low) == round(high) else f"{low:.0f}-{high:.0f} MHz"


def clock_control(rows: list[dict]) -> dict:
    """{mode: locked | below-lock | steady | free | unknown, clock_hz, max_hz, base_hz, reason} from the launches'
    clocks; `too_short` where every kernel ran under MIN_KERNEL_NS (mode unknown: no clock read, none judged)."""
    measured = [(r["sm_frequency_hz"], r.get("duration_ns") or 0) for r in rows if r.get("sm_frequency_hz")]
    maximum = next((r["max_sm_frequency_hz"] for r in rows if r.get("max_sm_frequency_hz")), None)
    device = next((r.get("device_name") for r in rows if r.get("device_name")), None)
    model = model_clocks(device)
    result = {"mode": "unknown", "clock_hz": None, "max_hz": maximum,
              "base_hz": model["base_hz"] if model else None, "reason": "no SM clock measured"}
    if not measured:
        return result
    long_pairs = [(f, d) for f, d in measured if d >= MIN_KERNEL_NS]
    short = [f for f, d in measured if d < MIN_KERNEL_NS]
    if not long_pairs:   # no clock read: one kernel's reading is not called locked here and too short there
        return {**result, "clock_hz": _weighted_median(measured), "too_short": True,
                "reason": f"every kernel ran under {MIN_KERNEL_NS / 1000:.0f} us, too short to read a clock "
                          f"(measured {_mhz_range(short)})"}
    long_enough = [f for f, _ in long_pairs]
    clock = _weighted_median(long_pairs)  # the clock most of the kernel time ran at, not the median kernel's
    result["clock_hz"] = clock
    aside = (f"; {len(short)} kernel{'s' if len(short) != 1 else ''} under {MIN_KERNEL_NS / 1000:.0f} us, too short "
             f"to read a clock, measured {_mhz_range(short)}") if short else ""
    if maximum and clock >= BELOW_BOOST * maximum and len(measured) == 1:
        return {**result, "reason": f"the one kernel measured ran at {clock / 1e6:.0f} MHz, near the "
                                    f"{maximum / 1e6:.0f} MHz maximum (one clock does not show how clocks were "
                                    "controlled)"}
    spread = (max(long_enough) - min(long_enough)) / clock if clock else 0.0
    if maximum and clock >= BELOW_BOOST * maximum and len(long_enough) > 1 and spread <= LOCKED_SPREAD:
        return {**result, "mode": "steady", "reason": f"{len(long_enough)} kernels ran at one clock, {clock / 1e6:.0f} "
                                                      f"MHz, near the {maximum / 1e6:.0f} MHz maximum: not throttled "
                                                      "(one steady clock does not show whether it was locked or "
                                                      f"free-running){aside}"}
    if maximum and clock >= BELOW_BOOST * maximum:
        return {**result, "mode": "free", "reason": f"kernels ran at {clock / 1e6:.0f} MHz, near the "
                                                    f"{maximum / 1e6:.0f} MHz maximum{aside}"}
    if model and clock < (1 - LOCK_SLACK) * model["base_hz"] \
            and clock >= (1 - BASE_TOLERANCE * 3) * model["base_hz"]:
        off = 1 - clock / model["base_hz"]
        return {**result, "mode": "below-lock", "lock_hz": model["base_hz"],
                "reason": f"kernels ran at {clock / 1e6:.0f} MHz" + (f" ({min(long_enough) / 1e6:.0f}-"
                          f"{max(long_enough) / 1e6:.0f} MHz)" if len(long_enough) > 1 else "")
                          + f", {off:.1%} below this GPU's {model['base_hz'] / 1e6:.0f} MHz base clock, the clock ncu "
                          f"locks by default ({model['source']}): the GPU did not hold the lock (power or thermal "
                          f"slowdown), so the clock is evidence{aside}"}
    if model and abs(clock - model["base_hz"]) <= BASE_TOLERANCE * model["base_hz"]:
        off = (clock - model["base_hz"]) / model["base_hz"]
        where = "at" if abs(off) < 0.005 else f"{abs(off):.1%} {'above' if off > 0 else 'below'}"
        return {**result, "mode": "locked", "reason": f"kernels ran at {clock / 1e6:.0f} MHz, {where} "
                                                      f"this GPU's {model['base_hz'] / 1e6:.0f} MHz base clock "
                                                      f"({model['source']}){aside}"}
    below = f", below the {maximum / 1e6:.0f} MHz maximum" if maximum else ""
    if len(long_enough) == 1:
        which = ("the one kernel measured" if len(measured) == 1 else
                 f"the one kernel long enough to measure its clock ({MIN_KERNEL_NS / 1000:.0f} us or more)")
        return {**result, "mode": "locked", "reason": f"{which} ran at {clock / 1e6:.0f} MHz{below}: "
                                                      "probably a locked clock (one clock is no evidence of throttling)" + aside}
    if spread <= LOCKED_SPREAD:
        where = "" if model else " (a GPU not in the clock table)"
        return {**result, "mode": "locked", "reason": f"{len(long_enough)} kernels ran at one clock, "
                                                      f"{clock / 1e6:.0f} MHz{below}{where}: probably a locked clock{aside}"}
    return {**result, "mode": "free", "reason": f"kernels ran at clocks from {min(long_enough) / 1e6:.0f} to "
                                                f"{max(long_enough) / 1e6:.0f} MHz{below} (free-running){aside}"}
