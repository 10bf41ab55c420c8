"""What a GPU model's SMs can do (tensor cores and their precisions, the FP64 rate), from device_caps.csv.

A fact of the chip, read from NVIDIA's whitepapers and specifications, never inferred from compute
capability: a GTX 1660 SUPER is CC 7.5 like an RTX 2080, and has no tensor cores. Device names match as
in gpu_clocks.csv (whole model names; a laptop or Ti part is another model).
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

from nsanalyze.normalize.clocks import _matches

CAPS_PATH = Path(__file__).with_name("device_caps.csv")


@lru_cache(maxsize=1)
def _rows() -> list[dict]:
    with open(CAPS_PATH, newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


@lru_cache(maxsize=256)
def device_caps(device_name: str | None) -> dict | None:
    """{model, chip, architecture, compute_capability, sm_count, tensor_cores, tensor_precisions,
    fp64_ratio, source} of the first matching row; None for a GPU the table does not know."""
    name = device_name or ""
    for row in _rows():
        if _matches(row["pattern"], name):
            return {"model": row["pattern"], "chip": row["chip"], "architecture": row["architecture"],
                    "compute_capability": row["compute_capability"],
                    "sm_count": int(row["sm_count"]) if row["sm_count"] else None,
                    "tensor_cores": row["tensor_cores"] == "yes",
                    "tensor_precisions": tuple(p for p in row["tensor_precisions"].split("|") if p),
                    "fp64_ratio": float(row["fp64_ratio"]) if row["fp64_ratio"] else None,
                    "source": row["source"]}
    return None


def has_tensor_cores(device_name: str | None) -> bool | None:
    """True or False from the table; None when the GPU is not in it (then nothing is assumed)."""
    caps = device_caps(device_name)
    return None if caps is None else caps["tensor_cores"]


def sm_count(device_name: str | None) -> int | None:
    """The GPU's SM count from the table; None for a GPU it does not know."""
    caps = device_caps(device_name)
    return caps["sm_count"] if caps else None


def compute_capability(caps: dict) -> tuple[int, int]:
    """(major, minor) of a device_caps row's compute capability."""
    major, minor = (int(part) for part in caps["compute_capability"].split("."))
    return major, minor
