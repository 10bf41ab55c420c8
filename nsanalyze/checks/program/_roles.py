"""The time of one role of the work split (normalize.work): its kernels, their share of the window and of the
GPU's kernel time, and their DRAM bytes where every kernel has them (an ncu report). Shared by the checks
that judge a role's kernels (dtype-casts, unfused-optimizer, layout-conversion); not a check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from nsanalyze.checks.libraries import PYTORCH_LAUNCHES, launch_share
from nsanalyze.normalize.waits import BACKWARD


@dataclass(frozen=True)
class RoleKernels:
    kernels: list               # the role's kernels, as the work split orders them (longest first)
    ns: float                   # their time in the window
    window_ns: float
    kernel_ns: float            # the GPU's kernel time (the work split's)
    dram_bytes: float | None    # summed over the kernels when every one has them measured, else None

    @property
    def window_share(self) -> float:
        return self.ns / self.window_ns

    @property
    def kernel_share(self) -> float:
        """Share of the GPU's kernel time, as the titles say it."""
        return self.ns / (self.kernel_ns or 1)

    @property
    def launches(self) -> int:
        return sum(k.launches for k in self.kernels)


def gpus_window_ns(timeline) -> float:
    """The GPUs' time in the window, what their summed kernel time is a share of: the window times the GPUs with
    kernels (mfu_2gpu_before: two GPUs' 45.1 ms of casts over one GPU's 299 ms window read as 15%, twice their
    share)."""
    return float(timeline.summary.span_ns or 0) * max(1, sum(1 for d in timeline.devices or () if d.kernel_ns))


def role_time(timeline, role: str, min_window_share: float = 0.0,
              keep: Callable[[object], bool] | None = None) -> RoleKernels | None:
    """The role's kernels (those `keep` accepts, when given), when the profile has a work split and a window,
    the role has kernels, and their time reaches `min_window_share` of the window; else None."""
    analysis = timeline.work_analysis
    window_ns = gpus_window_ns(timeline)
    if analysis is None or not window_ns:
        return None
    kernels = [k for k in analysis.by_kernel if k.role == role and (keep is None or keep(k))]
    ns = float(sum(k.ns for k in kernels))
    if not kernels or ns / window_ns < min_window_share:
        return None
    moved = [k.dram_bytes for k in kernels if k.dram_bytes is not None]
    dram_bytes = float(sum(moved)) if moved and len(moved) == len(kernels) else None
    return RoleKernels(kernels, ns, window_ns, analysis.kernel_ns, dram_bytes)


def kernel_rows(kernels, limit: int = 5) -> list[dict]:
    """The evidence's list of the first kernels: name, time and launches."""
    return [{"name": k.name, "duration_ns": k.ns, "launches": k.launches} for k in kernels[:limit]]


def inference_steps(analysis) -> bool:
    """Whether the work split's kernels show no training: no optimizer kernel and none of autograd's backward
    kernels by name (a training step may have no such name: blind71_cpuemb's backward is GEMMs and elementwise
    kernels, its Adam foreach ones), and no graph whose kernels a graph-level trace hides (graph51_hostmetrics'
    graphed training step)."""
    if analysis is None or not analysis.by_kernel:
        return False
    return not any(k.role in ("optimizer", "graph") or BACKWARD.search(k.demangled or k.name or "")
                   for k in analysis.by_kernel)


def pytorch_inference(timeline) -> bool:
    """Steps of a PyTorch program (PYTORCH_LAUNCHES of its launches or more) that train nothing (inference_steps)."""
    torch = launch_share(timeline, "PyTorch")
    return torch is not None and torch >= PYTORCH_LAUNCHES and getattr(timeline, "steps", None) is not None and \
        inference_steps(timeline.work_analysis)
