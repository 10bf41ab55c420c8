"""How wide a tensor-core GEMM kernel loads its operands, as its name states, and what a narrow load costs.

CUTLASS's and cuBLAS's kernels name the vector width of their operand loads (`alignN`: N elements a load;
`aligna`, `alignc` for operands A and C), read with the element type their names give (bf16, fp16: 2 bytes; int8,
fp8: 1; else tf32/fp32: 4). A library picks a kernel under 16 bytes a load when a matrix's leading dimension (or its
pointer) is not a multiple of 16 bytes. What such a kernel costs against the kernel the library picks once the
dimension is padded is measured per chip and load width (narrow_gemm_rates.csv, by bench/narrow_gemm_rates.py from
a recording of the three GEMMs of a linear layer, narrow and padded); a chip or width the table lacks is not priced.
"""

from __future__ import annotations

import csv
import re
from functools import lru_cache
from pathlib import Path

from nsanalyze.normalize import precision

RATES_PATH = Path(__file__).with_name("narrow_gemm_rates.csv")
FULL_LOAD_BYTES = 16   # a tensor-core kernel's full-width operand load (128 bits)
ALIGNMENT = re.compile(r"_align[ac]?(\d+)(?![0-9x])")
# The operands' element size by the name's type words, first match (a CUTLASS tensor-op name without one is tf32).
ELEMENT_BYTES = ((re.compile(r"bf16|f16|fp16|half|h\d{3,5}gemm", re.IGNORECASE), 2),
                 (re.compile(r"e4m3|e5m2|fp8|int8|i8\d|s8|u8", re.IGNORECASE), 1))


def element_bytes(name: str) -> int:
    return next((size for pattern, size in ELEMENT_BYTES if pattern.search(name)), 4)


def load_bytes(name: str) -> int | None:
    """The narrowest operand load a kernel's name states, in bytes; None where the name states none."""
    widths = [int(n) for n in ALIGNMENT.findall(name)]
    return min(widths) * element_bytes(name) if widths else None


def narrow(name: str | None) -> bool:
    """Whether a kernel's name states operand loads narrower than FULL_LOAD_BYTES. A float64 GEMM is none: its
    8-byte elements are outside what the rates measure, and the element size read above (4 bytes where the name
    gives no 1- or 2-byte type) took blind71's float64 `d884gemm_..._align1` for a narrow-load tf32 kernel."""
    if precision.fp64(name):
        return False
    width = load_bytes(name or "")
    return width is not None and width < FULL_LOAD_BYTES


@lru_cache(maxsize=1)
def _rates() -> dict:
    with open(RATES_PATH, newline="") as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    return {(row["chip"], int(row["load_bytes"])): row for row in rows}


def slowdown(chip: str | None, width: int | None) -> dict | None:
    """{median, low, high, gemms, source}: a narrow GEMM kernel's time over the padded GEMM's, as measured on this
    chip for this load width; None where the table has no measurement."""
    row = _rates().get((chip or "", width or 0))
    if row is None:
        return None
    return {"median": float(row["median"]), "low": float(row["low"]), "high": float(row["high"]),
            "gemms": int(row["gemms"]), "source": row["source"]}
