"""What a host-device copy could run at, and what pinning the pageable ones saves (shared by
pageable-memcpy and transfer-bound; not a check).

The reference rate of a copy direction is the faster of
1. the export's own pinned copies of that direction of 1 MiB or more (bytes over their time): what this
   machine's link reached while it was profiled, and
2. the GPU's PCIe link (LINKS, by device name): what pinned copies reach on it in practice, below the
   link's raw rate (PCIe 3.0/4.0/5.0 x16 signal 15.8/31.5/63 GB/s a direction; NVIDIA's bandwidthTest and
   our own H200 recording, fixtures/real/transfer_pinned_nsys, 55.4 GB/s on PCIe 5.0, reach 80-90% of it);
   own copies slowed by a shared link or small batches do not make the link slower.
For a GPU the table does not know: its own pinned copies when it has some, else the slowest link a
discrete GPU has (PCIe 3.0 x16, 12 GB/s): a saving that holds on any link.
The export does not say which link the GPU sits on (an H100 in a PCIe 4.0 host runs at 4.0 rates); a
lower reference promises less, so the figures are the lower practical rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nsanalyze.normalize.critical_path import PINNED_COPY_FLOOR_NS

# (pattern on the device name, link, GB/s pinned copies reach on it in practice, one direction)
PCIE3 = ("PCIe 3.0 x16", 12.0)
LINKS = (
    (re.compile(r"\b(?:GH|GB)\d{3}\b", re.I), "PCIe 5.0 x16 or faster (NVLink-C2C)", 50.0),
    (re.compile(r"\b(?:H100|H200|H800|H20|B100|B200|B300)\b|RTX (?:PRO )?\d{4,5} Blackwell|RTX 50\d0", re.I),
     "PCIe 5.0 x16", 50.0),
    (re.compile(r"\b(?:A100|A800|A40|A30|A16|A10G?|A2|L40S?|L20|L4)\b|RTX (?:30|40)\d0|RTX A\d{4}|RTX \d{4} Ada",
                re.I), "PCIe 4.0 x16", 25.0),
    (re.compile(r"\b(?:V100|T4|P100|P40|P4)\b|RTX 20\d0|TITAN|Quadro", re.I), *PCIE3),
)
PINNED_SHARE_NEAR_LINK = 0.8  # copies at 80% of the reference run at the link's rate: no rate left to win



def link_of(timeline) -> tuple[str, float, bool]:
    """(link, GB/s, known) for the window's GPU (the first one named)."""
    for device in timeline.devices or ():
        name = device.name or ""
        for pattern, link, rate in LINKS:
            if pattern.search(name):
                return link, rate, True
    return PCIE3[0], PCIE3[1], False


def reference_rate(timeline, copy_kind: str) -> tuple[float, str]:
    """(GB/s, where that figure comes from) that pinned copies of this direction reach: the faster of the
    export's own large pinned copies and the GPU's link figure (own copies slowed by a shared link or
    small batches do not make the link slower); own copies alone when the link is not known."""
    link, rate, known = link_of(timeline)
    for entry in timeline.copies.pinned_large:
        if entry.copy_kind == copy_kind and entry.duration_ns:
            own = entry.bytes / entry.duration_ns
            if own >= rate or not known:
                return own, (f"{own:.1f} GB/s, what this export's own {entry.copies} pinned "
                             f"{copy_kind.lower()} copies of 1 MiB or more reached"
                             + (f" (above the ~{rate:.0f} GB/s of {link})" if known else ""))
    if known:
        return rate, f"~{rate:.0f} GB/s, what pinned copies reach on {link} (the GPU's link; the export does not name it)"
    return rate, (f"~{rate:.0f} GB/s, what pinned copies reach on {link}, the slowest link a discrete GPU has "
                  "(the GPU's own link is not known)")


def pinned_time_ns(copies: int, nbytes: float, rate_gb_s: float) -> float:
    """What the copies take at the reference rate: bytes over it, at least the per-copy floor each."""
    return max(nbytes / rate_gb_s if rate_gb_s else 0.0, copies * PINNED_COPY_FLOOR_NS)


@dataclass
class PageableDirection:
    """The pageable copies of one direction and what pinning them saves."""
    copy_kind: str
    copies: int
    bytes: int
    duration_ns: float
    gb_per_s: float | None
    reference_gb_per_s: float
    reference: str
    pinned_ns: int
    saving_ns: float


def pinned_rates(timeline, graph) -> dict:
    """Per memcpy kind id of a replayed block (critical_path.Graph.copy_kinds), the rate pinned copies reach
    (reference_rate): what the pinned change moves pageable copies to."""
    return {kind: reference_rate(timeline, label)[0] for kind, label in graph.copy_kinds.items()}


def pageable_saving(timeline) -> tuple[float, list[PageableDirection]]:
    """What pinning the window's pageable copies saves: per direction, their time less the time the same
    bytes take at the reference rate (never below zero, never above their own time)."""
    directions = []
    pageable = timeline.copies.pageable
    for entry in pageable.by_direction if pageable is not None else ():
        rate, source = reference_rate(timeline, entry.copy_kind)
        pinned = pinned_time_ns(entry.copies, entry.bytes, rate)
        achieved = entry.bytes / entry.duration_ns if entry.duration_ns else None
        directions.append(PageableDirection(entry.copy_kind, entry.copies, entry.bytes, entry.duration_ns,
                                            round(achieved, 2) if achieved else None, round(rate, 2), source,
                                            round(pinned), max(0.0, entry.duration_ns - pinned)))
    return sum(d.saving_ns for d in directions), directions
