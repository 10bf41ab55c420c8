"""Library kernels: recognized by the library, advised at the level the user controls.

A kernel belongs to a library by the library's marks: its namespace in the demangled name (`at::native::`,
`cutlass::`, `cub::`), or the naming scheme of a closed library's kernels (cuBLAS's `sm80_xmma_gemm_...`,
`ampere_sgemm_128x64_nn`), never by a word anywhere in the name: `sgemm_tiled` is as likely the
user's. A kernel whose most executed source lines are in the user's own files (a build with
`-lineinfo`) is the user's, whatever its name.

A finding on `sm80_xmma_gemm_f32f32...` is no use as "rewrite the kernel": nobody edits cuBLAS. What
the user controls is the call: the precision flags, autocast, the shapes and their alignment,
torch.compile, or a library call in place of a hand-written kernel. The NVTX range the launches ran
in (PyTorch's op, the user's own ranges) says where in the program that call is.
"""

from __future__ import annotations

import re

from nsanalyze.normalize.frameworks import PYTORCH, mark

# (pattern on the demangled or function name, library); the first match wins. Namespaces, and the naming
# schemes of closed libraries' kernels (an architecture prefix, the library's own words), not bare words.
ARCH = r"(?:maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell|sm\d{2,3}a?)"
LIBRARIES = (
    (re.compile(r"^nvjet_|cublasLt", re.I), "cuBLASLt"),
    (re.compile(r"cublas|xmma_gemm|^" + ARCH + r"_[a-z0-9]*gemm|^[sdhcz]gemm_(?:largek|lds\d|\d+x\d+)|"
                r"^gemv2?[NT]?_kernel|^gemmk1_kernel|^splitKreduce_kernel|Kernel2?<cutlass_\d+_", re.I), "cuBLAS"),
    (re.compile(r"cudnn|xmma_fprop|xmma_dgrad|xmma_wgrad|^" + ARCH + r"_[a-z0-9]*(?:scudnn|fprop|dgrad|wgrad)|"
                r"^implicit_convolve_|^winograd\w*<|^fft2d_", re.I), "cuDNN"),
    (re.compile(r"(?:^|[^a-z0-9_])cutlass::|^cutlass_|^Kernel2?<cutlass", re.I), "CUTLASS"),
    (re.compile(r"^triton_|^triton::", re.I), "Triton"),
    (mark(PYTORCH), PYTORCH),   # (its marks: normalize/frameworks.csv, which the advice's examples read too)
    (re.compile(r"(?:^|[^a-z0-9_])(?:cub|thrust)::|^(?:cub|thrust)_|^Device(?:Radix|Merge|Segmented|Reduce|Scan|"
                r"Select|Histogram|Partition)\w*Kernel", re.I), "CUB/Thrust"),
    (re.compile(r"nccl", re.I), "NCCL"),
)
# Source files that belong to libraries (headers compiled into the user's kernels, framework sources).
LIBRARY_FILES = re.compile(r"(?:^|[/\\])(?:cutlass|cute|cub|thrust|libcudacxx|cuda[/\\]std|ATen|c10|torch|triton|"
                           r"cublas|cudnn|nccl|flash_attn)(?:[/\\]|$)|[/\\]cuda(?:-[\d.]+)?[/\\]include[/\\]|"
                           r"site-packages|dist-packages", re.I)

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
    ("CUB/Thrust", "*"): "a CUB/Thrust device-wide algorithm, whose launch shapes the library picks for the input "
        "size: give it fewer, larger inputs (one call over a batch, `cub::DeviceSegmented*` for many small segments)",
    ("NCCL", "*"): "a communication kernel: see the nsys program checks (exposed-communication, rank-imbalance)",
}


def user_source(files) -> bool:
    """The kernel's most executed source lines are in the user's files (not a library's headers)."""
    files = [f for f in files if f]
    return bool(files) and any(not LIBRARY_FILES.search(f) for f in files)


def library_of(name: str | None, source_files=()) -> str | None:
    """The library a kernel comes from, or None for the user's. `source_files`: the files of its most
    executed source lines, when the report holds them: user files make it the user's kernel."""
    if user_source(source_files):
        return None
    name = re.sub(r"^(?:void|static|__global__)\s+", "", name or "")  # demangled: `void ns::kernel<...>(...)`
    for pattern, library in LIBRARIES:
        if name and pattern.search(name):
            return library
    return None


# PyTorch's own kernels among this share of the launches or more: a PyTorch program (its GEMMs are cuBLAS's); under
# it another library's (CuPy, RAPIDS), whose advice leads (host-compute's, allocator-churn's)
PYTORCH_LAUNCHES = 0.05


def launch_share(timeline, library: str) -> float | None:
    """The share of the window's kernel launches whose kernels are the library's (library_of, by demangled or short
    name); None where the kernels are not known."""
    analysis = getattr(timeline, "work_analysis", None)
    kernels = analysis.by_kernel if analysis is not None else []
    launches = sum(k.launches or 0 for k in kernels)
    if not launches:
        return None
    return sum(k.launches or 0 for k in kernels if library in (library_of(k.demangled or k.name), library_of(k.name))) \
        / launches


def hot_source_files(source_spots, limit: int = 3) -> list[str]:
    """The files of a launch's most executed instructions (each file lookup costs ~0.5 ms: a few only)."""
    try:
        spots = (source_spots or {}).get("inst_executed") or []
    except Exception:  # noqa: BLE001 - a damaged source section: no evidence, not an error
        return []
    top = sorted(spots, key=lambda s: -s.value)[:limit]
    return [s.file for s in top if s.file]


def library_advice(kernel: dict, check: str) -> str:
    """A Markdown paragraph put before a finding's advice when the kernel comes from a library."""
    library = kernel.get("library")
    if not library or check in DEVICE_LEVEL_CHECKS:
        return ""
    lever = LEVERS.get((library, check)) or LEVERS.get((library, "*"))
    if not lever:
        return ""
    from nsanalyze.checks.base import plural
    from nsanalyze.text import code_span

    where = f" in NVTX range {code_span(kernel['nvtx_range'])}" if kernel.get("nvtx_range") else ""
    return (f"**{library} kernel** ({plural(kernel['launches'], 'launch')}{where}): "
            f"{lever}.\n\n")


# Checks about how a kernel's own code touches memory and schedules its work, and how its author splits the work
# into blocks (a tail of uneven blocks, the block size): advice for the kernel's author. A closed library picks
# its own grid (cuBLASLt's persistent nvjet kernels run one block an SM: "use a persistent kernel" was told to one).
CODE_LEVEL_CHECKS = frozenset({"uncoalesced-global", "bank-conflicts", "warp-divergence", "low-ilp",
                               "local-memory-spill", "atomic-contention", "tail-effect", "block-size"})
# Checks about the GPU the kernel ran on, not the call that launched it: a library's lever (shapes, precision, fusion)
# is no advice for a clock below its maximum (attn_naive_full's nvjet GEMM was told "change the call" for its clock).
DEVICE_LEVEL_CHECKS = frozenset({"clock-throttling"})
# Libraries whose kernels the user cannot edit (CUTLASS and Triton kernels are configured or written by them).
CLOSED_LIBRARIES = frozenset({"cuBLAS", "cuBLASLt", "cuDNN", "PyTorch", "NCCL"})
# Libraries whose GEMM and convolution kernels choose their own tiling, occupancy and block order (low-occupancy and
# l2-reuse leave them be)
TUNED_LIBRARIES = frozenset({"cuBLAS", "cuBLASLt", "cuDNN", "CUTLASS"})

