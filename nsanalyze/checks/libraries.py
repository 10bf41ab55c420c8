"""Library kernels: recognized by name, advised at the level the user controls.

A finding on `sm80_xmma_gemm_f32f32...` is no use as "rewrite the kernel": nobody edits cuBLAS. What
the user controls is the call: the precision flags, autocast, the shapes and their alignment,
torch.compile, or a library call in place of a hand-written kernel. The NVTX range the launches ran
in (PyTorch's op, the user's own ranges) says where in the program that call is.
"""

from __future__ import annotations

import re

# (pattern on the demangled or function name, library); the first match wins.
LIBRARIES = (
    (re.compile(r"nvjet|cublasLt", re.I), "cuBLASLt"),
    (re.compile(r"cublas|xmma_gemm|sgemm|hgemm|gemv2?T?_kernel|gemmk1|splitKreduce|Kernel2<cutlass_80_simt", re.I), "cuBLAS"),
    (re.compile(r"cudnn|xmma_fprop|xmma_dgrad|xmma_wgrad|implicit_convolve|winograd", re.I), "cuDNN"),
    (re.compile(r"cutlass", re.I), "CUTLASS"),
    (re.compile(r"triton_|^triton", re.I), "Triton"),
    (re.compile(r"^at::|at::native|at::cuda|cunn_|elementwise_kernel|reduce_kernel|multi_tensor_apply", re.I), "PyTorch"),
    (re.compile(r"nccl", re.I), "NCCL"),
)

# What to change instead of the kernel, per library and check; "*" for any check.
LEVERS = {
    ("cuBLAS", "missing-tensor-cores"): "enable TF32 (`torch.backends.cuda.matmul.allow_tf32 = True` or "
        "`torch.set_float32_matmul_precision('high')`) or run the op under `torch.autocast(dtype=torch.bfloat16)`; "
        "keep M, N, K multiples of 8 (16 for INT8) so cuBLAS picks tensor-core kernels",
    ("cuBLASLt", "missing-tensor-cores"): "enable TF32 or bf16 autocast for this matmul; keep M, N, K multiples of 8",
    ("CUTLASS", "missing-tensor-cores"): "use a tensor-core CUTLASS configuration (OpClassTensorOp) or let cuBLAS "
        "choose with TF32 enabled",
    ("cuDNN", "missing-tensor-cores"): "enable `torch.backends.cudnn.allow_tf32` or bf16 autocast, use "
        "channels-last (`model.to(memory_format=torch.channels_last)`), and channel counts that are multiples of 8",
    ("cuBLAS", "*"): "change the call, not the kernel: the shapes (multiples of 8/16, fewer small matmuls batched "
        "with `torch.bmm`), the precision, or fuse the surrounding ops with `torch.compile`",
    ("cuBLASLt", "*"): "change the call: shapes, precision, or fusion with `torch.compile`",
    ("cuDNN", "*"): "change the call: layout (channels-last), precision, `torch.backends.cudnn.benchmark = True`",
    ("PyTorch", "*"): "this is a PyTorch built-in kernel: fuse it with its neighbours (`torch.compile`), "
        "change the tensor layout (`.contiguous()`, channels-last), or use a fused op (e.g. `fused=True` optimizers, "
        "`F.scaled_dot_product_attention`)",
    ("Triton", "*"): "a Triton kernel (often from torch.compile): tune its block sizes (`mode='max-autotune'`) "
        "or change the code that generated it",
    ("NCCL", "*"): "a communication kernel: see the nsys program checks (exposed-communication, rank-imbalance)",
}


def library_of(name: str | None) -> str | None:
    for pattern, library in LIBRARIES:
        if name and pattern.search(name):
            return library
    return None


def library_advice(kernel: dict, check: str) -> str:
    """A Markdown paragraph put before a finding's advice when the kernel comes from a library."""
    library = kernel.get("library")
    if not library:
        return ""
    lever = LEVERS.get((library, check)) or LEVERS.get((library, "*"))
    if not lever:
        return ""
    where = f" in NVTX range `{kernel['nvtx_range']}`" if kernel.get("nvtx_range") else ""
    return (f"**{library} kernel** ({kernel['launches']} launch{'es' if kernel['launches'] != 1 else ''}{where}): "
            f"{lever}.\n\n")


# Checks about how a kernel's own code touches memory and schedules its work: advice for the kernel's author.
CODE_LEVEL_CHECKS = frozenset({"uncoalesced-global", "bank-conflicts", "warp-divergence", "low-ilp",
                               "local-memory-spill", "atomic-contention"})
# Libraries whose kernels the user cannot edit (CUTLASS and Triton kernels are configured or written by them).
CLOSED_LIBRARIES = frozenset({"cuBLAS", "cuBLASLt", "cuDNN", "PyTorch", "NCCL"})


def cap_code_level(finding, kernel: dict) -> None:
    """A code-level finding on a closed library's kernel drops to info: its access pattern is the library's,
    and what the user can change (the call, fusion, layout) is the program finding about its role."""
    if finding.check not in CODE_LEVEL_CHECKS or kernel.get("library") not in CLOSED_LIBRARIES:
        return
    if finding.severity != "info":
        finding.notes.append(f"capped at info: a {kernel['library']} kernel, whose code you do not write; "
                             "change the call (see the advice and the program findings)")
    finding.severity = "info"
