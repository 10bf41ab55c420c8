"""Roofline per kernel: arithmetic intensity from measured DRAM bytes, achieved against peak.

Bound classification, in the order an expert reads it, over the whole hierarchy (SM pipes and
issue; DRAM, L2, L1/shared), so that a tiled GEMM starved on shared memory reads "memory":
- latency:  below `latency_share` of both roofs (speed of light of SM and memory), or below `near_roof_share`
  with fewer than `ready_warps` ready warps a scheduler (the rule of the latency checks, low-ilp and
  low-occupancy, so that a row never reads "memory" beside its finding's "latency-bound");
- memory / compute: whichever roof the kernel is closer to;
- balanced: both above `near_roof_share` and within 10 points of each other;
- unknown (None) where one roof is not measured and the other is below `near_roof_share`: the missing share
  is not 0 (a report without the SM's speed of light is not latency-bound for it).

`near_roof` is the classic roofline's verdict: achieved FLOP/s or measured DRAM bytes/s at
`near_roof_share` of the device's own FP or DRAM peak. Only then is the kernel "doing its job".

A kernel whose tensor-core operations (`tensor_mma_ops`, the ncu tensor-path op counters) outnumber its
FMA-pipe FLOPs is a tensor-core kernel: its FLOPs are those operations, its peak the dense FP16/BF16
tensor peak (`precision` "tensor"), or the FP64 tensor peak where FP64 MMAs (DMMA) keep the pipe busy. The counters are summed over input types: a TF32 kernel (half that
peak) reads at half its own share, an FP8 one (twice it) at twice; FLOP/s are never 0 for work measured.
Where the report has no such counters and the tensor pipe is busier than the FP pipes' FLOPs reach of their
peak, the kernel is a tensor-core kernel whose FLOPs are not measured: `precision` "tensor", FLOPs and
intensity unknown (left out), not its FADDs' figures.
"""

from __future__ import annotations

from nsanalyze.numbers import finite_float

PRECISIONS = ("fp64", "fp32", "fp16")
BALANCED_GAP = 0.10


def _get(row, name):
    return finite_float(row.get(name))


def roofline(row: dict, near_roof_share: float, latency_share: float, ready_warps: float | None = None) -> dict:
    """Returns the roofline entry of the JSON contract for one normalized kernel row."""
    duration_ns = _get(row, "duration_ns")
    flops_by_precision = {p: _get(row, f"{p}_flops") for p in PRECISIONS}
    measured = {p: f for p, f in flops_by_precision.items() if f is not None}
    present = {p: f for p, f in measured.items() if f}
    # No FLOP counters in the report: FLOP figures are unknown (left out), not 0.
    precision = max(present, key=present.get) if present else ("fp32" if measured else None)
    flops = present.get(precision, 0.0) if measured else None
    peak_flops = _get(row, f"{precision or 'fp32'}_peak_flops_per_s")
    tensor_ops, tensor_peak = _get(row, "tensor_mma_ops"), _tensor_peak(row)
    if tensor_ops and tensor_peak and tensor_ops > (flops or 0.0):
        precision, flops, peak_flops = "tensor", tensor_ops, tensor_peak
    elif tensor_ops is None and _tensor_pipe_leads(row, _ratio(flops / (duration_ns * 1e-9), peak_flops)
                                                   if flops is not None and duration_ns else None):
        precision, flops, peak_flops = "tensor", None, tensor_peak   # its operations are not counted: unknown
    dram_bytes = _get(row, "dram_bytes")
    peak_bytes = _get(row, "dram_peak_bytes_per_s")
    achieved_flops = flops / (duration_ns * 1e-9) if flops is not None and duration_ns else None
    achieved_bytes = dram_bytes / (duration_ns * 1e-9) if dram_bytes is not None and duration_ns else None
    intensity = flops / dram_bytes if flops is not None and dram_bytes else None

    compute_share = max(
        [v for v in (_pct(row, "sm_throughput_pct"), _ratio(achieved_flops, peak_flops)) if v is not None],
        default=None)
    memory_share = max(
        [v for v in (_pct(row, "memory_throughput_pct"), _pct(row, "dram_throughput_pct"),
                     _ratio(achieved_bytes, peak_bytes)) if v is not None],
        default=None)
    bound = classify(compute_share, memory_share, near_roof_share, latency_share,
                     _get(row, "eligible_warps_per_scheduler"), ready_warps)
    dram_share = max([v for v in (_pct(row, "dram_throughput_pct"), _ratio(achieved_bytes, peak_bytes))
                      if v is not None], default=None)
    flop_share = _ratio(achieved_flops, peak_flops)
    near_roof = None
    if (dram_share or 0.0) >= near_roof_share or (flop_share or 0.0) >= near_roof_share:
        near_roof = "memory" if (dram_share or 0.0) >= (flop_share or 0.0) else "compute"
    return {
        "precision": precision,
        "arithmetic_intensity": intensity,
        "achieved_flops_per_s": achieved_flops,
        "achieved_bytes_per_s": achieved_bytes,
        "peak_flops_per_s": peak_flops,
        "peak_bytes_per_s": peak_bytes,
        "ridge_point": peak_flops / peak_bytes if peak_flops and peak_bytes else None,
        "compute_share": compute_share,
        "memory_share": memory_share,
        "bound": bound,
        "dram_roof_share": dram_share,
        "flop_roof_share": flop_share,
        "near_roof": near_roof,
    }


def _tensor_peak(row) -> float | None:
    """The tensor roof of the kernel's MMA kind: FP64's (DMMA) where FP64 MMAs keep the tensor pipe busier than the
    other kinds (a DMMA kernel on an A100 reached for the BF16 roof, 16x too high), else the dense FP16/BF16 one."""
    dmma, pipe = _pct(row, "tensor_dmma_pipe_pct"), _pct(row, "tensor_pipe_pct")
    if dmma and pipe and dmma >= DMMA_SHARE * pipe:
        return _get(row, "fp64_tensor_peak_flops_per_s")
    return _get(row, "bf16_peak_flops_per_s")


# FP64 MMAs are the kernel's tensor work where their pipe activity is at least this share of the tensor pipe's
DMMA_SHARE = 0.5


# The tensor pipe busy this share of the time, and more than the FP pipes' FLOPs reach of their peak, makes a
# kernel whose math the report's FLOP counters do not hold: an HMMA kernel on a report without the tensor-path op
# counters (an A100 under ncu 2022) read as FP32 from its few FADDs, at AI 0 with the tensor pipe 99% busy.
TENSOR_PIPE_SHARE = 0.05


def _tensor_pipe_leads(row, fp_share: float | None) -> bool:
    pipe = _pct(row, "tensor_pipe_pct")
    return pipe is not None and pipe >= TENSOR_PIPE_SHARE and pipe > (fp_share or 0.0)


def _pct(row, name):
    value = _get(row, name)
    return None if value is None else value / 100.0


def _ratio(value, peak):
    return value / peak if value is not None and peak else None


def classify(compute_share, memory_share, near_roof_share, latency_share, eligible=None, ready_warps=None) -> str | None:
    if compute_share is None and memory_share is None:
        return None
    if compute_share is None or memory_share is None:   # one roof unmeasured (a report without the SM's speed of
        known, unit = (memory_share, "memory") if compute_share is None else (compute_share, "compute")   # light)
        return unit if known >= near_roof_share else None   # near its roof it bounds; else latency is not shown
    compute, memory = compute_share, memory_share
    if max(compute, memory) < latency_share:
        return "latency"
    if max(compute, memory) < near_roof_share and None not in (eligible, ready_warps) and eligible < ready_warps:
        return "latency"   # the latency checks' reading (low-ilp, low-occupancy): the row never contradicts them
    if min(compute, memory) >= near_roof_share and abs(compute - memory) <= BALANCED_GAP:
        return "balanced"
    return "memory" if memory >= compute else "compute"
