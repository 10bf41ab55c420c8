"""Sampled GPU metrics (nsys `--gpu-metrics-devices`): summaries over the window and per NVTX range.

The samples of the metrics used here are read once into arrays (timestamp, value per metric, sorted by
time); every summary (the window, each top-level range, the time series, the clock while busy) is a
`searchsorted` slice of them. One SQL scan per range made a 150-range export with 2.7M samples take
19 s (ranges x samples); the read is linear in the samples. Samples that are not integers (NULL, text)
and values no measurement gives (a percentage above 100, a clock of zero or less) are set aside and
counted (`set_aside_samples`, and in the timeline's notes), never used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.read.nsys import IntQuery, NsysExport

GPU_METRIC_NAMES = {  # contract key -> nsys metric name prefix (names carry their unit in brackets)
    "gr_active_pct": "GR Active",
    "sm_active_pct": "SMs Active",
    "sm_issue_pct": "SM Issue",
    "tensor_active_pct": "Tensor Active",
    "dram_read_pct": "DRAM Read Bandwidth",
    "dram_write_pct": "DRAM Write Bandwidth",
    "pcie_rx_pct": "PCIe RX Throughput",
    "pcie_tx_pct": "PCIe TX Throughput",
    "gpc_clock_mhz": "GPC Clock Frequency",
}
SERIES_METRICS = ("gr_active_pct", "sm_issue_pct", "tensor_active_pct")
NOT_AN_INTEGER = -(2**62)
BUSY_GR_ACTIVE_PCT = 50  # samples at or above this GR Active count as "busy" for the clock


@dataclass
class Samples:
    """Per metric key: (timestamps ascending, values in the metric's unit)."""

    series: dict[str, tuple[np.ndarray, np.ndarray]]
    set_aside: int
    first: int
    last: int

    def slice(self, key: str, start: int, end: int) -> np.ndarray:
        times, values = self.series[key]
        return values[np.searchsorted(times, start, side="left"):np.searchsorted(times, end, side="left")]


def read_samples(export: NsysExport) -> Samples | None:
    """The samples of the metrics in GPU_METRIC_NAMES, one scan of GPU_METRICS."""
    if not export.has_gpu_metrics:
        return None
    ids: dict[str, int] = {}
    for metric_id, name in export.query("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS"):
        for key, prefix in GPU_METRIC_NAMES.items():
            if isinstance(name, str) and name.startswith(prefix + " [") and key not in ids \
                    and isinstance(metric_id, int):
                ids[key] = metric_id
    if not ids:
        return None
    query = IntQuery({"timestamp": ("timestamp", NOT_AN_INTEGER), "metric": ("metricId", NOT_AN_INTEGER),
                      "value": ("value", NOT_AN_INTEGER)},
                     f"FROM GPU_METRICS WHERE metricId IN ({','.join(str(i) for i in ids.values())})",
                     narrow=frozenset({"metric"}))   # (int32 where the ids fit: tens of millions of samples)
    (columns,) = export.read_columns([query])  # a view in GPU_METRICS' place: no Arrow reader (its time limit)
    times, metric, values = columns.pop("timestamp"), columns.pop("metric"), columns.pop("value")
    valid = (times != NOT_AN_INTEGER) & (values != NOT_AN_INTEGER) & (values >= 0)
    set_aside = int(len(times) - np.count_nonzero(valid))
    if set_aside:   # (all valid, the usual case: no second copy of the columns beside the first)
        times, metric, values = times[valid], metric[valid], values[valid]
    del valid
    if not len(times):
        return None
    series = {}
    for key, metric_id in ids.items():
        mine = metric == metric_id
        if key.endswith("_pct"):  # a percentage above 100 is no measurement
            impossible = mine & (values > 100)
        else:                     # nor a clock of 0 (a clock of 0 MHz read as "0% of its maximum")
            impossible = mine & (values <= 0)
        set_aside += int(np.count_nonzero(impossible))
        mine &= ~impossible
        order = np.argsort(times[mine], kind="stable")
        scaled = values[mine][order].astype(np.float64)
        if key.endswith("_mhz") and len(scaled) and scaled.max() > 100_000:
            scaled *= 1e-6  # nsys 2025 stores "GPC Clock Frequency [MHz]" samples in Hz
        series[key] = (times[mine][order], scaled)
    return Samples(series, set_aside, int(times.min()), int(times.max()))


def _summary(values: np.ndarray) -> dict | None:
    """Mean, p50, p95 as the value at which the cumulative count first reaches q of the samples."""
    if not len(values):
        return None
    ordered = np.sort(values)
    n = len(ordered)
    pick = lambda q: float(ordered[max(0, int(np.ceil(q * n)) - 1)])  # noqa: E731
    return {"mean": float(ordered.mean()), "p50": pick(0.5), "p95": pick(0.95), "samples": n}


def summarize(samples: Samples, start: int, end: int) -> dict:
    return {key: _summary(samples.slice(key, start, end)) for key in samples.series}


def gpu_metrics(samples: Samples | None, start: int, end: int, ranges: list[dict], points: int = 400) -> dict | None:
    """Each metric over [start, end), per top-level NVTX range, and a time series of GR Active, SM issue
    and tensor activity in about `points` buckets."""
    if samples is None:
        return None
    overall = summarize(samples, start, end)
    per_range = [{"name": r["name"], **summarize(samples, max(start, r["first_start"]), min(end, r["last_end"]))}
                 for r in ranges if r.get("depth") == 0]
    first, last = max(samples.first, start), min(samples.last, end)
    bucket = max(1, (last - first) // points + 1)
    series: dict[str, list] = {}
    for key in SERIES_METRICS:
        if key not in samples.series:
            continue
        times, values = samples.series[key]
        lo, hi = np.searchsorted(times, first, side="left"), np.searchsorted(times, last + 1, side="left")
        index = (times[lo:hi] - first) // bucket
        counts = np.bincount(index)
        sums = np.bincount(index, weights=values[lo:hi])
        series[key] = [[first + int(b) * bucket, float(sums[b] / counts[b])] for b in np.flatnonzero(counts)]
    out = {**overall, "ranges": per_range, "series": series, "series_bucket_ns": bucket}
    if samples.set_aside:
        out["set_aside_samples"] = samples.set_aside
    return out


def busy_clock(samples: Samples | None, start: int, end: int, device_clock_hz: float | None) -> dict | None:
    """Median GPC clock over the samples taken while the GPU was busy (GR Active >= BUSY_GR_ACTIVE_PCT)."""
    if samples is None or "gpc_clock_mhz" not in samples.series or "gr_active_pct" not in samples.series:
        return None
    clock_t, clock_v = samples.series["gpc_clock_mhz"]
    active_t, active_v = samples.series["gr_active_pct"]
    in_window = (clock_t >= start) & (clock_t < end)
    clock_t, clock_v = clock_t[in_window], clock_v[in_window]
    at = np.minimum(np.searchsorted(active_t, clock_t), max(len(active_t) - 1, 0))
    busy = (len(active_t) > 0) & (active_t[at] == clock_t) & (active_v[at] >= BUSY_GR_ACTIVE_PCT) \
        if len(active_t) else np.zeros(len(clock_t), bool)
    if not np.any(busy):
        return None
    summary = _summary(clock_v[busy])
    maximum = device_clock_hz / 1e6 if device_clock_hz else float(clock_v[busy].max())
    return {"median_mhz": summary["p50"], "max_mhz": maximum, "samples": summary["samples"]}
