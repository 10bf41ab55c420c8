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

import numpy as np

from nsanalyze.normalize.activity import NO_MAX, NO_MIN, Columns, dense_codes, read_kernels
from nsanalyze.normalize.device_caps import device_caps
from nsanalyze.normalize.metric_table import concept_units, evaluate, load_rules
from nsanalyze.read.ncu import NcuReport
from nsanalyze.read.nsys import NsysExport

NSYS_COLUMNS = ["id", "name", "demangled", "launches", "duration_ns", "mean_ns", "median_ns", "min_ns", "max_ns",
                "stddev_ns", "time_share", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                "registers_per_thread", "shared_mem_per_block_bytes", "devices", "device_name", "compute_capability"]
IDENTITY_COLUMNS = ["id", "name", "demangled", "launches", "nvtx_range", "device_name", "compute_capability",
                    "stream_id"]


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

    def launch_shapes(self, names) -> dict[str, tuple[int, int]]:
        """(blocks, threads per block) of each named kernel: the first launch shape of the name in the table."""
        shapes = {}
        for row in self.rows:
            name = row.get("name")
            if name in names and name not in shapes and None not in (row.get("grid_x"), row.get("block_x")):
                blocks = row["grid_x"] * (row.get("grid_y") or 1) * (row.get("grid_z") or 1)
                threads = row["block_x"] * (row.get("block_y") or 1) * (row.get("block_z") or 1)
                shapes[name] = (int(blocks), int(threads))
        return shapes

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


DERIVED_UNITS = {"fp_fma_share": "ratio", "fp16_fma_share": "ratio", "tensor_mma_ops": "operations",
                 "launch_overhead_ns": "ns", "tensor_cores": "flag", "locked_clock_hz": "hz"}
TENSOR_PEAKS_PATH = Path(__file__).with_name("tensor_peaks.csv")
TENSOR_CONCEPTS = ("tf32_peak_flops_per_s", "bf16_peak_flops_per_s", "fp64_tensor_peak_flops_per_s")


@lru_cache(maxsize=1)
def _tensor_ratios() -> list[dict]:
    with open(TENSOR_PEAKS_PATH, newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def tensor_over_fp32(cc: tuple[int, int] | None) -> float | None:
    """How many times the FP32 peak FP32 matrix math reaches on the tensor cores of a CC: TF32's ratio where
    the CC has TF32, else the FP16 path's (Volta, Turing: autocast is the only way); None for an unknown CC."""
    if cc is None:
        return None
    for row in _tensor_ratios():
        if _cc_tuple(row["min_cc"]) <= cc <= _cc_tuple(row["max_cc"]):
            ratio = row["tf32_over_fp32"] or row["bf16_over_fp32"]
            return float(ratio) if ratio else None
    return None


BF16_RATES_PATH = Path(__file__).with_name("bf16_rates.csv")


@lru_cache(maxsize=1)
def _bf16_rates() -> list[dict]:
    with open(BF16_RATES_PATH, newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def bf16_over_tf32_measured(cc: tuple[int, int] | None) -> tuple[float, str, str] | None:
    """(how many times faster a CC's library matrix products ran on bfloat16 inputs than on TF32 ones, measured on
    twins; the GPU they ran on; a regex of the kernel families they measured) from bf16_rates.csv, or None where no
    twin measured the CC."""
    for row in _bf16_rates() if cc is not None else ():
        if _cc_tuple(row["min_cc"]) <= cc <= _cc_tuple(row["max_cc"]):
            return float(row["bf16_over_tf32"]), row["measured_on"], row["kernels"]
    return None


def tensor_peaks(cc: tuple[int, int] | None, fp32_peak: float | None) -> dict[str, float | None]:
    """Tensor-core roofs: the FP32 roof at the measured clock times the datasheet ratio for this CC."""
    peaks = {concept: None for concept in TENSOR_CONCEPTS}
    if cc is None or fp32_peak is None:
        return peaks
    for row in _tensor_ratios():
        if _cc_tuple(row["min_cc"]) <= cc <= _cc_tuple(row["max_cc"]):
            for concept, column in zip(TENSOR_CONCEPTS, ("tf32_over_fp32", "bf16_over_fp32", "fp64_over_fp32")):
                peaks[concept] = fp32_peak * float(row[column]) if row[column] else None
    return peaks


CLOCK_CYCLE_METRICS = frozenset({"sm__cycles_elapsed.sum", "smsp__cycles_elapsed.sum", "sm__cycles_elapsed.avg",
                                 "smsp__cycles_elapsed.avg", "device__attribute_multiprocessor_count"})
FP_OPS = {op: (f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum",
              f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed")
          for op in ("fadd", "fmul", "ffma", "hadd", "hmul", "hfma")}
# Operations that ran on the tensor paths (the hierarchical tensor roofline's counters, ncu 2023+). On GPUs
# whose FP16 pipe shares the tensor pipe (V100, A100, H100), the tensor pipe's busy cycles include plain
# HFMA2; these count MMA operations only.
TENSOR_OPS_METRICS = tuple(f"sm__ops_path_tensor_src_{kind}.sum" for kind in (
    "fp16", "bf16_dst_fp32", "tf32_dst_fp32", "fp64", "int8", "int4", "int1", "fp8", "fp8_sparsity_off",
    "fp8_sparsity_on", "fp16_sparsity_off", "fp16_sparsity_on", "bf16_dst_fp32_sparsity_off",
    "tf32_dst_fp32_sparsity_off"))
# The stream a launch ran on: with the report's launch order, what tells attention's score kernels (work.py)
STREAM_METRIC = "launch__stream_id"
EXTRA_RAW_METRICS = frozenset({name for pair in FP_OPS.values() for name in pair} | set(TENSOR_OPS_METRICS)
                              | {STREAM_METRIC})


def metrics_to_read() -> frozenset[str]:
    """Every raw ncu metric the normalized table reads (metrics.csv's rows, the clock cycles, the FP and
    tensor op counts): what a reader keeps of a launch's thousands. One list for every command."""
    from nsanalyze.normalize.metric_table import raw_metric_names

    return raw_metric_names() | CLOCK_CYCLE_METRICS | EXTRA_RAW_METRICS
SMSP_PER_SM = 4  # every SM from Volta to Blackwell has four sub-partitions (schedulers)


def _finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def clock_from_cycles(metrics: dict, values: dict) -> float | None:
    """The SM clock as elapsed cycles over the duration, when the report holds no clock rate (ncu's
    default set of some versions keeps only `smsp__cycles_elapsed.sum`): 146,244 cycles in 61.3 us
    are 2.385 GHz."""
    duration = _finite(values.get("duration_ns"))
    sms = _finite(values.get("sm_count")) or _finite(metrics.get("device__attribute_multiprocessor_count"))
    if not duration:
        return None
    per_sm = [_finite(values.get("sm_cycles_elapsed")), _finite(metrics.get("sm__cycles_elapsed.avg")),
              _finite(values.get("smsp_cycles_elapsed")), _finite(metrics.get("smsp__cycles_elapsed.avg"))]
    if sms:
        sm_sum, smsp_sum = _finite(metrics.get("sm__cycles_elapsed.sum")), _finite(metrics.get("smsp__cycles_elapsed.sum"))
        per_sm += [sm_sum / sms if sm_sum else None, smsp_sum / (sms * SMSP_PER_SM) if smsp_sum else None]
    cycles = next((c for c in per_sm if c), None)
    return cycles / (duration * 1e-9) if cycles else None


def fp_instruction_mix(metrics: dict) -> dict[str, float]:
    """FMA share of the floating-point thread instructions (FFMA, HFMA/HFMA2 over all adds, muls and FMAs,
    FP32 and FP16): a matrix product's inner loop is nearly all FMA; element-wise and normalization kernels
    are not. Either the plain sums or the per-cycle rates (same ratio)."""
    for which in (0, 1):
        counts = {op: metrics.get(names[which]) for op, names in FP_OPS.items()}
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in counts.values()):
            total = sum(counts.values())
            if total <= 0:
                return {}
            return {"fp_fma_share": (counts["ffma"] + counts["hfma"]) / total,
                    "fp16_fma_share": counts["hfma"] / total}
    return {}


def tensor_mma_ops(metrics: dict) -> float | None:
    values = [metrics.get(name) for name in TENSOR_OPS_METRICS]
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(sum(values)) if values else None


def launch_overhead_ns(values: dict) -> float | None:
    """The part of a launch's duration in which no SM had work: its launch and drain, what no fix removes.
    Duration x (1 - the busiest SM's active cycles / elapsed cycles). Without sm__cycles_active.max (basic
    sets of older ncu) the busiest SM is estimated from the mean: x SMs / blocks for a grid smaller than
    the GPU (a block per SM), the mean itself otherwise; both never exceed the busiest SM, so the result
    is an upper bound of the overhead. None when not measured or not positive."""
    duration = _finite(values.get("duration_ns"))
    elapsed = _finite(values.get("sm_cycles_elapsed"))
    if duration and not elapsed and _finite(values.get("sm_frequency_hz")):
        elapsed = values["sm_frequency_hz"] * duration * 1e-9
    if not duration or not elapsed:
        return None
    busiest = _finite(values.get("sm_active_cycles_max"))
    if busiest is None:
        mean, sms, grid = (_finite(values.get(c)) for c in ("sm_active_cycles_avg", "sm_count", "grid_size"))
        if not (mean and sms and grid):
            return None
        busiest = mean * sms / min(grid, sms)
    overhead = duration * (1.0 - busiest / elapsed)
    return overhead if overhead > 0 else None


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
            "stream_id": launch.metrics.get(STREAM_METRIC),
        }
        row.update(evaluation.values)
        if _finite(row.get("sm_frequency_hz")) is None and (clock := clock_from_cycles(launch.metrics, row)):
            row["sm_frequency_hz"] = clock
            evaluation.sources["sm_frequency_hz"] = "elapsed SM cycles / gpu__time_duration.sum"
            maximum = _finite(row.get("max_sm_frequency_hz"))
            if maximum and _finite(row.get("sm_clock_ratio")) is None:
                row["sm_clock_ratio"] = clock / maximum
        row.update(fp_instruction_mix(launch.metrics))
        if (ops := tensor_mma_ops(launch.metrics)) is not None:
            row["tensor_mma_ops"] = ops
        caps = device_caps(row["device_name"])
        if caps is not None:
            row["tensor_cores"] = 1.0 if caps["tensor_cores"] else 0.0
        row.update(tensor_peaks(cc, evaluation.values.get("fp32_peak_flops_per_s")) if caps is None or
                   caps["tensor_cores"] else {concept: None for concept in TENSOR_CONCEPTS})
        if (overhead := launch_overhead_ns(row)) is not None:
            row["launch_overhead_ns"] = overhead
        rows.append(row)
        sources.append(evaluation.sources)
        undefined.append(evaluation.undefined)
    units = concept_units() | {concept: "FLOP/s" for concept in TENSOR_CONCEPTS} | DERIVED_UNITS
    return KernelTable(report.path, "ncu", rows, IDENTITY_COLUMNS + concepts + list(DERIVED_UNITS), units, sources,
                       undefined)


# nsys: per kernel name, the figures `nsys stats -r cuda_gpu_kern_sum` gives, computed in SQLite.
# nsys: per kernel name, the figures `nsys stats -r cuda_gpu_kern_sum` gives. The window's kernels are
# read as columns and reduced per name in numpy (sorted once by name and duration: exact medians);
# SQLite's GROUP BY with window functions took longer than the whole rest of the report.
SUMMARY_COLUMNS = {  # column -> reduction per name
    "short_name_id": "min", "device_id": "distinct",
    "grid_x": "min", "grid_y": "min", "grid_z": "min", "block_x": "min", "block_y": "min", "block_z": "min",
    "registers_per_thread": "max", "shared_mem_per_block_bytes": "max",
}
ABSENT = {"min": NO_MIN, "max": NO_MAX, "distinct": -1}


def _sorted_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    distinct, codes = np.unique(keys, return_inverse=True)
    return codes, distinct


def _grouped(codes: np.ndarray, durations: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(an order of the launches by group, their durations sorted by group then duration). One sort of
    (group, duration) packed into an integer where it fits and one stable sort of the small group codes
    (a quarter of lexsort's time at 300k launches); lexsort where it does not fit."""
    code_bits, duration_bits = max(groups - 1, 1).bit_length(), int(durations.max()).bit_length()
    if durations.min() >= 0 and code_bits + duration_bits <= 62:
        packed = np.sort((codes.astype(np.int64) << duration_bits) | durations)
        narrow = codes.astype(np.int16 if groups <= 1 << 15 else np.int32)
        return np.argsort(narrow, kind="stable"), packed & ((1 << duration_bits) - 1)
    order = np.lexsort((durations, codes))
    return order, durations[order]


def _summarize(columns: dict[str, np.ndarray]) -> list[dict]:
    """Per demangled name id: launches, time, mean, median, min, max, mean square, and the reductions
    of SUMMARY_COLUMNS; longest total time first."""
    if not len(columns["demangled_id"]):
        return []
    codes, distinct = dense_codes(columns["demangled_id"]) or _sorted_codes(columns["demangled_id"])
    order, durations = _grouped(codes, columns["duration_ns"], len(distinct))
    counts = np.bincount(codes, minlength=len(distinct))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    keys = np.repeat(distinct, counts)  # the name id of each launch, in `order`
    totals = np.add.reduceat(durations, starts)
    squares = np.add.reduceat(durations.astype(np.float64) ** 2, starts)
    medians = (durations[starts + (counts - 1) // 2] + durations[starts + counts // 2]) / 2
    reduced = {}
    for name, how in SUMMARY_COLUMNS.items():
        values = columns[name]
        values = values() if callable(values) else values
        if how == "distinct" and values.min() == values.max():  # one value everywhere (one GPU): no sort
            reduced[name] = np.full(len(starts), int(values[0] != ABSENT[how]), dtype=np.int64)
            continue
        values = values[order]
        if how == "distinct":  # distinct values per group: sort within groups, count changes
            pairs = np.lexsort((values, keys))
            v, k = values[pairs], keys[pairs]
            new = np.concatenate(([True], (v[1:] != v[:-1]) | (k[1:] != k[:-1]))) & (v != ABSENT[how])
            reduced[name] = np.add.reduceat(new.astype(np.int64), starts)
        else:
            ufunc = np.minimum if how == "min" else np.maximum
            reduced[name] = ufunc.reduceat(values, starts)
    records = []
    for i in np.argsort(-totals, kind="stable"):
        record = {"demangled_id": int(keys[starts[i]]), "launches": int(counts[i]), "duration_ns": int(totals[i]),
                  "mean_ns": totals[i] / counts[i], "min_ns": int(durations[starts[i]]),
                  "max_ns": int(durations[starts[i] + counts[i] - 1]), "mean_square": squares[i] / counts[i],
                  "median_ns": float(medians[i])}
        for name, how in SUMMARY_COLUMNS.items():
            value = int(reduced[name][i])
            record[name] = value if how == "distinct" or value != ABSENT[how] else None
        record["devices"] = record.pop("device_id")
        records.append(record)
    return records


def _column(kernels: Columns, name: str):
    """A column of the kernels, or where it is held as codes (Columns.coded), a function that makes it."""
    coded = kernels.coded
    if coded is not None and name in coded.values:
        return lambda: getattr(kernels, name)
    return getattr(kernels, name)


def _selected(values, mask: np.ndarray):
    return (lambda: values()[mask]) if callable(values) else values[mask]


def normalize_nsys_kernels(export: NsysExport, window: tuple[int, int] | None = None,
                           kernels: Columns | None = None, strings=None) -> KernelTable:
    """One row per distinct demangled kernel name, as `nsys stats -r cuda_gpu_kern_sum` groups them.
    `kernels`: the window's kernels when the caller has read them already (normalize.activity);
    `strings`: names by id in place of export.strings (names read ahead: no SQLite from another thread)."""
    start, end = window or (-(2**62), 2**62)
    if kernels is None:
        kernels = read_kernels(export, "start >= :ws AND start < :we", {"ws": start, "we": end})
    kernels = kernels.where((kernels.start >= start) & (kernels.start < end))
    # the launch shape's columns made one at a time where they are asked for (kernels.coded: eight arrays as
    # long as the window's kernels held at once were 190 MB at 6M kernels)
    columns = {name: _column(kernels, name) for name in ("demangled_id", "device_id", "grid_x", "grid_y", "grid_z",
                                                         "block_x", "block_y", "block_z", "registers_per_thread")}
    columns |= {"duration_ns": kernels.end - kernels.start,
                "shared_mem_per_block_bytes": _column(kernels, "shared_mem_bytes"),
                "short_name_id": np.where(kernels.short_name_id == -1, NO_MIN, kernels.short_name_id)}
    named = columns["demangled_id"] != -1  # a kernel without a name id is not summarized (as nsys stats)
    records = _summarize(columns if named.all() else {key: _selected(values, named) for key, values in columns.items()})
    names = (strings or export.strings)([i for r in records for i in (r["demangled_id"], r["short_name_id"]) if i is not None])
    for record in records:
        record["demangled"] = names.get(record.pop("demangled_id"))
        record["name"] = names.get(record.pop("short_name_id")) or record["demangled"] or "(unnamed kernel)"
    total = sum(r["duration_ns"] for r in records)
    for position, record in enumerate(records):
        n, mean = record["launches"], record["mean_ns"]
        variance = (record.pop("mean_square") - mean * mean) * n / (n - 1) if n > 1 else 0.0
        record["stddev_ns"] = math.sqrt(max(variance, 0.0))
        record["time_share"] = record["duration_ns"] / total if total else None
        record["id"] = position
        record["device_name"] = export.device_name
        record["compute_capability"] = export.compute_capability
    units = {"duration_ns": "ns", "mean_ns": "ns", "median_ns": "ns", "min_ns": "ns", "max_ns": "ns",
             "stddev_ns": "ns", "time_share": "ratio", "registers_per_thread": "registers",
             "shared_mem_per_block_bytes": "byte"}
    return KernelTable(export.path, "nsys", records, NSYS_COLUMNS, units)


# Launches this short measure their overhead well: it is a large part of their time. On longer ones it is
# the difference of two large cycle counts (the busiest SM's and the elapsed), within their noise.
SHORT_LAUNCH_NS = 20_000


def report_launch_floor(rows: list[dict], default_ns: float) -> dict:
    """The launch floor of one report: the least launch overhead measured on its short launches
    (launch_overhead_ns, each an upper bound of what no fix removes from that launch), never above
    `default_ns`, the floor assumed where nothing is measured. {ns, measured, reason}."""
    measured = [(r["launch_overhead_ns"], r.get("name")) for r in rows if _finite(r.get("launch_overhead_ns"))
                and (r.get("duration_ns") or 0) <= SHORT_LAUNCH_NS]
    if not measured:
        return {"ns": float(default_ns), "measured": False,
                "reason": f"not measured (no launch under {SHORT_LAUNCH_NS / 1e3:.0f} us with SM active and elapsed "
                          f"cycles): {default_ns / 1e3:.1f} us assumed"}
    overhead, name = min(measured, key=lambda pair: pair[0])
    if overhead >= default_ns:
        return {"ns": float(default_ns), "measured": True,
                "reason": f"the least overhead measured, {overhead / 1e3:.2f} us, is above the "
                          f"{default_ns / 1e3:.1f} us assumed"}
    return {"ns": float(overhead), "measured": True,
            "reason": f"{overhead / 1e3:.2f} us of {name}'s launch had no SM at work: the least overhead of the "
                      f"report's {len(measured)} short launches measured"}
