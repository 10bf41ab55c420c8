"""The normalized kernel table: one row per kernel launch (ncu) or per kernel name (nsys).

Columns are concepts from metrics.csv, named with their unit (`duration_ns`, `dram_bytes`,
`achieved_occupancy_pct`). A concept the profile lacks is NaN, never 0.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import math

from nsanalyze.normalize.activity import medians_by
from nsanalyze.normalize.metric_table import concept_units, evaluate, load_rules
from nsanalyze.read.ncu import NcuReport
from nsanalyze.read.nsys import NsysExport

NSYS_COLUMNS = ["id", "name", "demangled", "launches", "duration_ns", "mean_ns", "median_ns", "min_ns", "max_ns",
                "stddev_ns", "time_share", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                "registers_per_thread", "shared_mem_per_block_bytes", "devices", "device_name", "compute_capability"]
IDENTITY_COLUMNS = ["id", "name", "demangled", "launches", "nvtx_range", "device_name", "compute_capability"]


@dataclass
class KernelTable:
    """Normalized kernels of one profile, with where each came from. Rows are plain dicts (the
    pipeline needs nothing more); `frame` builds a pandas DataFrame on demand, for `metrics` and
    for analysis in notebooks, so that reports do not pay for importing pandas."""

    profile: str
    kind: str
    rows: list[dict]
    columns: list[str]
    units: dict[str, str]
    sources: list[dict[str, str]] = field(default_factory=list)  # per ncu launch: concept -> formula used
    undefined: list[set[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def frame(self):
        import pandas as pd

        frame = pd.DataFrame(self.rows, columns=self.columns)
        numeric = [c for c in self.columns if c not in IDENTITY_COLUMNS]
        frame[numeric] = frame[numeric].astype("float64")
        return frame


def _cc_tuple(cc: str | None) -> tuple[int, int] | None:
    if not cc:
        return None
    major, minor = cc.split(".")
    return int(major), int(minor)


TENSOR_PEAKS_PATH = Path(__file__).with_name("tensor_peaks.csv")
TENSOR_CONCEPTS = ("tf32_peak_flops_per_s", "bf16_peak_flops_per_s")


@lru_cache(maxsize=1)
def _tensor_ratios() -> list[dict]:
    with open(TENSOR_PEAKS_PATH, newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def tensor_peaks(cc: tuple[int, int] | None, fp32_peak: float | None) -> dict[str, float | None]:
    """Tensor-core roofs: the FP32 roof at the measured clock times the datasheet ratio for this CC."""
    peaks = {concept: None for concept in TENSOR_CONCEPTS}
    if cc is None or fp32_peak is None:
        return peaks
    for row in _tensor_ratios():
        if _cc_tuple(row["min_cc"]) <= cc <= _cc_tuple(row["max_cc"]):
            for concept, column in zip(TENSOR_CONCEPTS, ("tf32_over_fp32", "bf16_over_fp32")):
                peaks[concept] = fp32_peak * float(row[column]) if row[column] else None
    return peaks


def normalize_ncu(report: NcuReport) -> KernelTable:
    rows, sources, undefined = [], [], []
    concepts = list(dict.fromkeys(rule.concept for rule in load_rules())) + list(TENSOR_CONCEPTS)
    for launch in report.launches:
        major = launch.metrics.get("device__attribute_compute_capability_major")
        minor = launch.metrics.get("device__attribute_compute_capability_minor")
        cc = (int(major), int(minor)) if major is not None and minor is not None else None
        evaluation = evaluate(launch.metrics, cc)
        row = {
            "id": launch.index,
            "name": launch.name,
            "demangled": launch.demangled,
            "launches": 1,
            "nvtx_range": "/".join(launch.nvtx) or None,
            "device_name": launch.strings.get("device__attribute_display_name"),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        }
        row.update(evaluation.values)
        row.update(tensor_peaks(cc, evaluation.values.get("fp32_peak_flops_per_s")))
        rows.append(row)
        sources.append(evaluation.sources)
        undefined.append(evaluation.undefined)
    units = concept_units() | {concept: "FLOP/s" for concept in TENSOR_CONCEPTS}
    return KernelTable(report.path, "ncu", rows, IDENTITY_COLUMNS + concepts, units, sources, undefined)


# nsys: per kernel name, the figures `nsys stats -r cuda_gpu_kern_sum` gives, computed in SQLite.
# Medians come from the window's arrays (normalize.activity.medians_by): SQLite's window functions
# took longer than everything else together.
NSYS_KERNEL_SUMMARY_SQL = """
WITH summary AS (
    SELECT demangled_id, MIN(short_name_id) AS short_name_id, COUNT(*) AS launches,
           SUM(duration_ns) AS duration_ns, AVG(duration_ns) AS mean_ns,
           MIN(duration_ns) AS min_ns, MAX(duration_ns) AS max_ns,
           AVG(duration_ns * 1.0 * duration_ns) AS mean_square,
           MIN(grid_x) AS grid_x, MIN(grid_y) AS grid_y, MIN(grid_z) AS grid_z,
           MIN(block_x) AS block_x, MIN(block_y) AS block_y, MIN(block_z) AS block_z,
           MAX(registers_per_thread) AS registers_per_thread, MAX(shared_mem_bytes) AS shared_mem_per_block_bytes,
           COUNT(DISTINCT device_id) AS devices
    FROM kernels WHERE start >= :window_start AND start < :window_end
    GROUP BY demangled_id
)
SELECT s.*, d.value AS demangled, sn.value AS name
FROM summary s
LEFT JOIN StringIds d ON d.id = s.demangled_id
LEFT JOIN StringIds sn ON sn.id = s.short_name_id
ORDER BY s.duration_ns DESC
"""


def normalize_nsys_kernels(export: NsysExport, window: tuple[int, int] | None = None,
                           medians: dict | None = None) -> KernelTable:
    """One row per distinct demangled kernel name, as `nsys stats -r cuda_gpu_kern_sum` groups them.
    `medians` (demangled id -> ns) when the caller holds the window's kernels already."""
    start, end = window or (-(2**62), 2**62)
    params = {"window_start": start, "window_end": end}
    rows = export.query(NSYS_KERNEL_SUMMARY_SQL, params)
    if medians is None:
        columns = export.int_columns("""SELECT CASE WHEN typeof(demangled_id) = 'integer' THEN demangled_id ELSE -1 END
                                        AS demangled_id, duration_ns FROM kernels
                                        WHERE start >= :window_start AND start < :window_end""", params)
        medians = medians_by(columns["demangled_id"], columns["duration_ns"])
    records = [dict(r) for r in rows]
    for record in records:
        key = record["demangled_id"] if isinstance(record["demangled_id"], int) else -1
        record["median_ns"] = medians.get(key)
    total = sum(r["duration_ns"] for r in records)
    for position, record in enumerate(records):
        n, mean = record["launches"], record["mean_ns"]
        variance = (record.pop("mean_square") - mean * mean) * n / (n - 1) if n > 1 else 0.0
        record["stddev_ns"] = math.sqrt(max(variance, 0.0))
        record["time_share"] = record["duration_ns"] / total if total else None
        record["id"] = position
        record["device_name"] = export.device_name
        record["compute_capability"] = export.compute_capability
        del record["demangled_id"], record["short_name_id"]
    units = {"duration_ns": "ns", "mean_ns": "ns", "median_ns": "ns", "min_ns": "ns", "max_ns": "ns",
             "stddev_ns": "ns", "time_share": "ratio", "registers_per_thread": "registers",
             "shared_mem_per_block_bytes": "byte"}
    return KernelTable(export.path, "nsys", records, NSYS_COLUMNS, units)
