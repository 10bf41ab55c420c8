"""Convolutions in NCHW: the library converts every tensor to NHWC and back.

## What it detects
Layout conversion kernels between NCHW and NHWC (cuDNN's `nchwToNhwcKernel` / `nhwcToNchwKernel`, and
the like by name) in a program that runs convolutions (cuDNN or CUTLASS fprop, dgrad, wgrad, implicit
GEMM kernels).

## Why it is slow
Tensor-core convolutions work on NHWC (channels last). Given NCHW tensors, cuDNN transposes each input
to NHWC and each output back: passes through memory that do no math, forward and backward. PyTorch's
NCHW batch-norm and pooling kernels are slower than their channels-last ones too.

## Example
```python
model = torchvision.models.resnet50().cuda()
y = model(x)                                   # NCHW, PyTorch's default
```

## Instead
```python
model = model.to(memory_format=torch.channels_last)
y = model(x.to(memory_format=torch.channels_last))
```

## Known problems
The NCHW kernels' gain is a conservative factor, not measured per kernel; convolutions that cuDNN
runs faster in NHWC are not counted.

## Options
- `min_share`: the conversion kernels' share of the window before the check speaks.
- `nchw_speedup`: how much faster PyTorch's channels-last normalization and pooling kernels run than
  their NCHW ones.
"""

import re

from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.checks.program._roles import kernel_rows, role_time

ID = "layout-conversion"
BUDGET_PART = "gpu_compute"
# NCHW <-> NHWC conversions as cuDNN, TensorRT and CUTLASS name them.
CONVERSION = re.compile(r"(?:nchw|nhwc|ncdhw|ndhwc)\w{0,64}?To\w{0,64}?(?:nchw|nhwc|ncdhw|ndhwc)|nchw_?to_?nhwc|nhwc_?to_?nchw",
                        re.I)   # (bounded gaps: an unbounded \w*? took 40 s on a 70 KB name of repeated "nhwc")
# PyTorch's NCHW kernels that have channels-last twins: batch norm without `channels_last`, `*_nchw` pooling.
NCHW_KERNEL = re.compile(r"_nchw\b|_nchw<|nchw_kernel|^(?!.*(?:channels_last|nhwc)).*batch_norm", re.I)
CONVOLUTION = re.compile(r"fprop|dgrad|wgrad|conv|implicit_gemm|winograd|implicit_convolve", re.I)
ADVICE = """Keep the tensors channels-last (NHWC) end to end.

- `model = model.to(memory_format=torch.channels_last)` and
  `x = x.to(memory_format=torch.channels_last)` for every input batch.
- With autocast (bf16/fp16), channels-last also picks the NHWC batch-norm and pooling kernels.

```python
# before
y = model(x)
# after
model = model.to(memory_format=torch.channels_last)
y = model(x.to(memory_format=torch.channels_last))
```"""
# Said only where NCHW normalization or pooling kernels ran (a bullet about kernels the profile has not is noise)
NCHW_BULLET = "- With autocast (bf16/fp16), channels-last also picks the NHWC batch-norm and pooling kernels.\n"

CHECK = Check(
    id=ID,
    name="program.work.layout_conversion",
    title="Convolutions in NCHW: layout conversion kernels around them",
    section="work",
    requires=("work",),
    thresholds={"min_share": Threshold(0.03, "the program findings' least share: 3% of the window in layout conversions "
                                               "is worth a memory-format change"),
                "nchw_speedup": Threshold(1.5, "channels-last batch-norm and pooling kernels read each pixel's "
                                                 "channels contiguously; conservatively 1.5x the NCHW kernels", at_least=1.0)},
    speedup_model=("the conversion kernels' time, which channels_last for model and input removes, plus the NCHW "
                   "normalization and pooling kernels' time x (1 - 1/nchw_speedup)"),
    budget_part=BUDGET_PART,
    change={"remove_kernels": ("layout",), "speedup": ("normalization", "reduction")},  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    layout = role_time(timeline, "layout", limits.min_share, keep=lambda k: CONVERSION.search(k.demangled or k.name or ""))
    if layout is None:
        return None
    analysis, layout_ns = timeline.work_analysis, layout.ns
    convolutions = [k for k in analysis.by_kernel if k.role in ("matmul_tensor", "matmul_simt")
                    and CONVOLUTION.search(k.demangled or k.name or "")]
    if not convolutions:
        return None
    conv_ns = float(sum(k.ns for k in convolutions))
    nchw = [k for k in analysis.by_kernel if k.role in ("normalization", "reduction")
            and NCHW_KERNEL.search(k.demangled or k.name or "")]
    nchw_ns = float(sum(k.ns for k in nchw))
    finding = Finding(
        check=ID,
        title=f"Convolutions in NCHW: NCHW<->NHWC conversion kernels take {layout.kernel_share:.0%} "
              f"of GPU kernel time ({layout_ns / 1e6:.1f} ms, convolutions {conv_ns / 1e6:.1f} ms)"
              + (f" and NCHW normalization and pooling kernels {nchw_ns / 1e6:.1f} ms" if nchw else "")
              + "; use channels_last for model and input",
        estimated_speedup=0.0,
        evidence={"layout_ns": evidence(layout_ns, unit="ns"),
                  "layout_share": evidence(layout.window_share, limits.min_share, unit="ratio"),   # of the window
                  "layout_kernel_share": evidence(layout.kernel_share, unit="ratio"),   # of GPU kernel time: the title's
                  "convolution_ns": evidence(conv_ns, unit="ns"),
                  "nchw_kernel_ns": evidence(nchw_ns, unit="ns"),
                  "kernels": kernel_rows(layout.kernels)},
        advice=ADVICE if nchw else ADVICE.replace(NCHW_BULLET, ""),
    )
    finding.estimated_savings_ns = layout_ns + nchw_ns * (1 - 1 / limits.nchw_speedup)
    return finding
