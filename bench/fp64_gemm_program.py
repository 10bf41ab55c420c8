"""Times the GEMMs of a linear layer's training step in float64 and in float32 on this GPU (CUDA events, cuBLAS through
PyTorch, TF32 off): what a float64 GEMM's time becomes once its program computes in float32 (bench/fp64_gemm_rates.py
reads the recording). The device tables' rates are peaks: on an H100 the FP64 tensor cores' peak equals the FP32
peak, and blind71_fp64's cuBLAS GEMMs ran 1.2x faster in float32.

    python bench/fp64_gemm_program.py OUT.json          (on the GPU machine; bench/fp64_gemm_h100.json: an H100,
                                                         2026-12-06, torch 2.11.0+cu130: median 0.90x, 0.79-1.01x)

Shapes: M tokens of 4,096 and 16,384 rows; (K, N) of (128, 1,024), (512, 512), (1,024, 1,024), (1,024, 4,096),
(4,096, 1,024), (2,048, 2,048); each layer's forward (X W^T), input gradient (dY W) and weight gradient (dY^T X).
Each timed REPS times after WARMUP, the median kept.
"""

import json
import statistics
import sys

import torch

M = (4096, 16384)
KN = ((128, 1024), (512, 512), (1024, 1024), (1024, 4096), (4096, 1024), (2048, 2048))
WARMUP, REPS = 5, 20


def timed(fn) -> float:
    """Median ms of REPS calls of fn, each between two CUDA events."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for m in M:
        for k, n in KN:
            result = {}
            for dtype in (torch.float32, torch.float64):
                x = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
                w = torch.randn(n, k, device="cuda", dtype=dtype, generator=gen)
                dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
                ops = {"forward": lambda: x @ w.t(), "dgrad": lambda: dy @ w, "wgrad": lambda: dy.t() @ x}
                result[dtype] = {op: timed(fn) for op, fn in ops.items()}
                del x, w, dy
            for op in ("forward", "dgrad", "wgrad"):
                rows.append({"m": m, "n": n, "k": k, "op": op, "fp32_ms": result[torch.float32][op],
                             "fp64_ms": result[torch.float64][op]})
                print(f"{m} {n} {k} {op}: fp32 {result[torch.float32][op]:.4f} ms, fp64 "
                      f"{result[torch.float64][op]:.4f} ms, {result[torch.float64][op] / result[torch.float32][op]:.2f}x",
                      flush=True)
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cublas_tf32": False, "reps": REPS, "warmup": WARMUP, "gemms": rows}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
