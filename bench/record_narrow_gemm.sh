#!/usr/bin/env bash
# Records bench/narrow_gemm_program.py under nsys on the GPU machine (run from the repository root, Debian's
# libdw1/libelf1 .debs in .debs/): $OUT/narrow_gemm_nsys.sqlite.xz and log.txt. bench/narrow_gemm_rates.py reads
# the export into nsanalyze/normalize/narrow_gemm_rates.csv.
set -u
. fixtures/real/record_common.sh
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1 | tee -a "$OUT/log.txt"
cp bench/narrow_gemm_program.py "$REAL/"
nsys_export narrow_gemm_nsys 400 -- python3 narrow_gemm_program.py "${REPEATS:-10}"
