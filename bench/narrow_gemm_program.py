"""The three GEMMs of a linear layer (forward y = x W^T, dgrad dx = dy W, wgrad dW = dy^T x) with an output width N
that is not a multiple of 8 (a vocabulary, a class count), each against the same GEMMs with N padded to a multiple
of 64, in bf16, fp16 and fp32 with TF32: what a library's narrow-load kernel costs on this GPU. Run under nsys
(bench/record_narrow_gemm.sh); each GEMM call is one NVTX range `DTYPE M K N GEMM pad|narrow` so that SQL over the
export gives each call's kernels and their GPU time (bench/narrow_gemm_rates.py)."""

import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = True
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
TOKENS = (4096, 16384)                 # M: batch x sequence
HIDDEN = (768, 1024, 2048)             # K
# N: remainders 1-7 modulo 8 (align1, align2, align4 kernels), vocabulary-sized and small
WIDTHS = (50257, 30522, 50260, 32003, 30526, 51865, 1001, 5002)
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 10


def gemms(x, w, dy):
    return {"fwd": lambda: x @ w.t(), "dgrad": lambda: dy @ w, "wgrad": lambda: dy.t() @ x}


def main() -> None:
    for label, dtype in DTYPES.items():
        for m in TOKENS:
            for k in HIDDEN:
                for n in WIDTHS:
                    padded = -(-n // 64) * 64
                    for kind, width in (("narrow", n), ("pad", padded)):
                        x = torch.randn(m, k, device="cuda", dtype=dtype)
                        w = torch.randn(width, k, device="cuda", dtype=dtype)
                        dy = torch.randn(m, width, device="cuda", dtype=dtype)
                        for gemm, run in gemms(x, w, dy).items():
                            run()   # warm-up: the library's choice and its load
                            torch.cuda.synchronize()
                            for _ in range(REPEATS):
                                torch.cuda.nvtx.range_push(f"{label} {m} {k} {n} {gemm} {kind}")
                                run()
                                torch.cuda.nvtx.range_pop()
                            torch.cuda.synchronize()
                        del x, w, dy
    print("ok", torch.__version__, torch.cuda.get_device_name())


if __name__ == "__main__":
    main()
