"""Busy by GPU-Util, but the SMs barely issue: the GPU-Util illusion.

## What it detects
From nsys GPU metrics over the analysis window (the steady steps, or the NVTX range given with
`--nvtx-range`): GR Active, what `nvidia-smi` reports as GPU utilization, is high while the SMs issue an
instruction on few of their cycles and the tensor cores idle. It names the kernels that hold the GPU in
that time, by the work split. Where the export's launch shapes show those kernels launch fewer blocks
than the GPU has SMs (or blocks under two warps), it says so and advises more work a launch (batching,
larger grids, streams) with what that buys; otherwise it says to profile them with Nsight Compute. When the kernel names show
matrix products on the CUDA cores, `low-tensor-activity` names that cause instead; when most of the
time is attention written out, layout conversions or long elementwise chains, their checks do.

## Why it is slow
GPU-Util only says that some kernel was resident on the GPU. A kernel that waits (on memory latency,
on a spin loop, on atomics, on too few warps) keeps GPU-Util at 100% while the SMs do almost nothing.

## Example
```python
torch.cuda._sleep(10_000_000)        # a kernel that spins: GR Active ~85%, SM issue ~2%
```

## Instead
```text
ncu -k regex:<kernel> --set full -o busy python train.py   # what the resident kernel waits on
```

## Known problems
Needs an export taken with `--gpu-metrics-devices`; memory-bound work (embedding lookups, optimizers)
legitimately issues little; a sampled metric over a short window is noisy.

## Options
- `min_gr_active_pct`: GR Active above which the GPU counts as busy.
- `max_sm_issue_pct`: SM issue below which the busy time does little; also the issue rate a healthy
  kernel reaches, for the savings.
- `max_tensor_active_pct`: tensor activity below which the tensor cores count as idle.
- `max_simt_matrix_share`: CUDA-core matrix products' share of kernel time above which low-tensor-activity
  speaks for this cause.
- `min_unexplained_share`: the kernel time no other busy-GPU check explains (attention's scores path,
  layout conversions, long elementwise chains), as a share, before this check speaks for it.
"""

from nsanalyze.checks import runs
from nsanalyze.checks.base import Check, Finding, Threshold, clamp01, evidence, plural
from nsanalyze.checks.program import unfused_elementwise, unfused_normalization
from nsanalyze.normalize.device_caps import sm_count

ID = "gpu-util-illusion"
BUDGET_PART = "gpu_compute"
EXPLAINED_ROLES = ("attention_unfused", "layout")  # roles whose waste attention-unfused, layout-conversion name
HOLDING_SHARE = 0.05  # kernels named as holding the GPU: at least this share of its kernel time (the top one always)
ADVICE = """Find out what the resident kernels wait on; GPU-Util cannot say.

- Profile the kernels named here with Nsight Compute:
  `ncu -k regex:<kernel> --set full -o busy <your program>`, then run nsanalyze on the report.
- Typical causes: memory latency with few warps (raise occupancy or work per thread), spin-waits
  and polling kernels, serialized atomics, a grid too small for the GPU.

```text
# before: nvidia-smi says 100%, the step is slow
# after: ncu names the stall (long scoreboard, barrier, ...) and the source line
ncu -k regex:spin_kernel --set full -o busy python train.py
```"""

CHECK = Check(
    id=ID,
    name="program.utilization.illusion",
    title="Busy by GPU-Util, but the SMs barely issue",
    section="work",
    requires=("gpu_metrics", "work"),
    thresholds={
        "min_gr_active_pct": Threshold(50.0, "GPU-Util over half the window reads as a busy GPU to its user"),
        "max_sm_issue_pct": Threshold(30.0, "tuned kernels issue on well over 30% of SM cycles"),
        "max_tensor_active_pct": Threshold(5.0, "matrix-heavy work keeps tensor cores active far above 5%"),
        "max_simt_matrix_share": Threshold(0.15, "low-tensor-activity's min_matrix_share: above it the cause is "
                                                  "matrix products on the CUDA cores, one finding for one cause"),
        "min_unexplained_share": Threshold(0.5, "below half the kernel time left unexplained, the busy GPU is the waste "
                                                 "another check names (attention written out, layout, fusion)"),
    },
    speedup_model=("the kernels' time in the window that no other busy-GPU check explains x (1 - SM issue / "
                   "max_sm_issue_pct): what they would take issuing at a tuned kernel's rate; at most their time"),
    budget_part=BUDGET_PART,
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)


def _explained_ns(analysis) -> float:
    """Kernel time another busy-GPU check names a cause for: attention's scores path, layout conversions,
    and the fusable kernels of the chains unfused-elementwise and unfused-normalization speak for."""
    min_ops = unfused_elementwise.CHECK.thresholds["min_ops"].default
    named = [role for role, check in zip(EXPLAINED_ROLES, ("attention-unfused", "layout-conversion")) if runs(check)]
    chains = float(analysis.chains.with_ops(min_ops).ns.sum()) if runs(unfused_elementwise.ID) else 0.0
    beside = float(unfused_normalization.short_chains(analysis).ns.sum()) if runs(unfused_normalization.ID) else 0.0
    return analysis.role_ns(*named) + chains + beside


SMALL_ADVICE = """Give each launch enough work to fill the GPU; that is what the busy time lacks.

- The kernels holding the GPU launch fewer blocks than it has SMs (or one-warp blocks): the rest of the
  chip idles while GPU-Util reads busy. Batch the work of several launches into one (more rows, requests,
  iterations per launch), or size the grid to at least `numSMs * blocksPerSM` with a grid-stride loop.
- Independent small kernels: run them concurrently on separate streams, or fuse them (`torch.compile`).
- A kernel that waits on purpose (a spin or polling kernel) holds the GPU without working: replace the
  wait with an event or stream dependency.
- Then profile what remains with Nsight Compute: `ncu -k regex:<kernel> --set full -o busy <your program>`.

```cuda
// before: one block per launch, launched in a loop
for (int i = 0; i < n; ++i) step<<<1, 256>>>(x + i * m, m);
// after: one launch, a block per item
step_batched<<<n, 256>>>(x, m);
```"""


def _launch_shapes(timeline, names: list[str]) -> dict[str, tuple[int, int]]:
    """(blocks, threads per block) of each named kernel, from the window's kernel summary."""
    return timeline.kernel_table.launch_shapes(names) if timeline.kernel_table is not None else {}


def _sm_count(timeline) -> int | None:
    """The GPU's SMs, from the device table by the GPU's name (the export's own count is not in the timeline)."""
    return next((n for n in (sm_count(d.name) for d in timeline.devices or ()) if n), None)


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    gr, issue, tensor = (timeline.metric_mean(k) for k in ("gr_active_pct", "sm_issue_pct", "tensor_active_pct"))
    if analysis is None or gr is None or issue is None or gr < limits.min_gr_active_pct:
        return None
    if issue >= limits.max_sm_issue_pct or (tensor is not None and tensor >= limits.max_tensor_active_pct):
        return None
    kernel_ns = analysis.kernel_ns
    if not kernel_ns or analysis.role_ns("matmul_simt") / kernel_ns >= limits.max_simt_matrix_share:
        return None
    explained_ns = _explained_ns(analysis)
    held_ns = kernel_ns - explained_ns
    if held_ns < limits.min_unexplained_share * kernel_ns:
        return None  # the busy time is the waste another check names (attention, layout, elementwise chains)
    unexplained = [k for k in analysis.by_kernel if k.role not in EXPLAINED_ROLES]
    holding = [k for k in unexplained[:3] if k.ns >= HOLDING_SHARE * kernel_ns] or unexplained[:1]
    shapes, sms = _launch_shapes(timeline, [k.name for k in holding]), _sm_count(timeline)
    small = [k for k in holding if k.name in shapes and sms and (shapes[k.name][0] < sms
                                                                    or shapes[k.name][1] < 64)]
    small_ns = float(sum(k.ns for k in small))
    names = ", ".join(f"{k.name} ({k.ns / kernel_ns:.0%}"
                      + (f", {plural(shapes[k.name][0], 'block')} of {plural(shapes[k.name][1], 'thread')}" if k in small else "")
                      + ")" for k in holding)
    tensor_text = f", tensor cores {tensor:.1f}%" if tensor is not None else ""
    too_small = small_ns >= 0.5 * sum(k.ns for k in holding)
    saved_ns = held_ns * clamp01(1 - issue / limits.max_sm_issue_pct)
    what = (f"kernels too small to fill the {sms}-SM GPU: more work a launch (batching) could do the same in about "
            f"{(held_ns - saved_ns) / 1e6:.0f} ms instead of {held_ns / 1e6:.0f} ms" if too_small else
            f"profile {'it' if len(holding) == 1 else 'them'} with ncu")
    finding = Finding(
        check=ID,
        title=f"GPU-Util {gr:.0f}% but SMs issue on {issue:.0f}% of cycles{tensor_text}: the GPU is held by "
              f"{names}; {what}",
        estimated_speedup=0.0,
        evidence={"gr_active_pct": evidence(gr, limits.min_gr_active_pct, unit="%"),
                  "sm_issue_pct": evidence(issue, limits.max_sm_issue_pct, unit="%", compare="<"),
                  "tensor_active_pct": evidence(tensor, limits.max_tensor_active_pct, unit="%", compare="<"),
                  "kernels": [{"name": k.name, "role": k.role, "duration_ns": k.ns, "launches": k.launches,
                               "ncu": f"ncu -k regex:{k.name} --set full"} for k in holding]},
        advice=SMALL_ADVICE if too_small else ADVICE,
    )
    if too_small:
        finding.evidence["sm_count"] = evidence(sms)
        finding.notes.append(f"the kernels holding the GPU launch fewer blocks than its {sms} SMs (or blocks under "
                             "two warps), from the export's launch shapes: the SMs they leave idle are what GPU-Util "
                             f"does not show; the estimate is their time issuing at {limits['max_sm_issue_pct']:.0f}% "
                             "of cycles, a tuned kernel's rate")
    finding.estimated_savings_ns = saved_ns
    return finding
