"""Kernels that compute in float64, and library matrix products on TF32 inputs, by their names.

A library GEMM states its types in its name (cuBLAS's `sm90_xmma_gemm_f64f64_...`, CUTLASS's `tensorop_d884gemm`,
`dgemm`, complex `zgemm`); a PyTorch kernel in its template arguments (`<(int)4, double, double, double>`,
`ReduceOp<double, ...>`) or its lambda's (`[lambda(double, double) ...]`). A `double` in a function's parameter list
is no element type: PyTorch's float batch norm takes `double` momentum and epsilon
(`batch_norm_update_stats_and_invert(const at::Tensor &, ..., double, double, long)`), so the parameter lists are
set aside before the template arguments are read; and a kernel that names a narrower element type beside its doubles
(float, Half, BFloat16) computes in that type, its doubles being scalar arguments (fused Adam's learning rate).
"""

from __future__ import annotations

import re
from functools import lru_cache

LIBRARY_FP64 = re.compile(r"f64|(?<![a-z0-9])[dz]\d{3}gemm|[dz]gemm|dmma", re.IGNORECASE)
LAMBDA_FP64 = re.compile(r"lambda\((?:c10::complex<)?double\b")
TEMPLATE_FP64 = re.compile(r"[<,]\s*(?:c10::complex<)?double\s*[,>]")
# an element type of less than 8 bytes beside the doubles: the doubles are the kernel's scalar arguments (PyTorch's
# fused Adam: `FusedAdamMathFunctor<float, ...>, const float *, double, double, double, double, double, ...`, its
# learning rate and betas), not the values it computes on
NARROWER = re.compile(r"\bfloat\b|\bHalf\b|\bBFloat16\b|\bFloat8|\bhalf\b|__nv_bfloat16")
PARAMETERS = re.compile(r"\([^()]*\)")


def _without_parameters(name: str) -> str:
    """The name with every parenthesized group taken out, innermost first."""
    previous = None
    while previous != name:
        previous, name = name, PARAMETERS.sub("", name)
    return name


@lru_cache(maxsize=4096)
def fp64(name: str | None) -> bool:
    """Whether a kernel's (demangled) name says it computes in float64."""
    if not name:
        return False
    if LIBRARY_FP64.search(name):
        return True
    if NARROWER.search(name):
        return False
    return bool(LAMBDA_FP64.search(name) or TEMPLATE_FP64.search(_without_parameters(name)))


# TF32 inputs, as the libraries name them: cuBLAS's and cuDNN's `xmma` kernels give their input types
# (`sm90_xmma_gemm_f32f32_tf32f32_f32_...`, `sm80_xmma_fprop_implicit_gemm_..._tf32f32_tf32f32_f32_...`); CUTLASS's
# tensor-core SGEMM names its MMA shape on float (`tensorop_s1688gemm`, `s1684gemm`: TF32's m16n8k8 and m16n8k4)
# where a bfloat16 or float16 one names its input type before it (`tensorop_bf16_s1688gemm_bf16`). cuBLASLt's
# `nvjet_..._tst_...` is not TF32: bfloat16 autocast runs its GEMMs there (xfmr_bf16), and its letters are not
# documented, so it is never read as TF32.
LIBRARY_TF32 = re.compile(r"tf32|tensorop_s16(?:88|84)(?:gemm|fprop|dgrad|wgrad)", re.IGNORECASE)


@lru_cache(maxsize=4096)
def tf32(name: str | None) -> bool:
    """Whether a kernel's name says it is a library matrix product (GEMM or convolution) on TF32 inputs."""
    return bool(name) and bool(LIBRARY_TF32.search(name))
