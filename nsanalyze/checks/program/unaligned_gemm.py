"""Tensor-core matrix products on a narrow-load path: a dimension that is not a multiple of 8.

## What it detects
Tensor-core GEMM kernels (the work split's `matmul_tensor`) whose names state the vector width their
operands are loaded with, narrower than 16 bytes: CUTLASS's and cuBLAS's `alignN` (N elements a load;
`aligna`, `alignc` for operands A and C), read with the element type their names give (bf16, fp16: 2
bytes; int8, fp8: 1; else tf32/fp32: 4). A library picks such a kernel when a matrix's leading dimension
(or its pointer) is not a multiple of 16 bytes: a vocabulary of 30,522, a hidden size of 1,000.

## Why it is slow
A 16-byte load fills a tensor-core tile's row in one instruction; 2- or 4-byte loads take 4 to 8 times the
instructions and cannot use Hopper's bulk tensor copies (TMA), so the library falls back to an older
architecture's kernel (an `sm80` CUTLASS kernel on an H100 or H200) that does not issue `wgmma`.

## Example
```python
model = GPT(vocab_size=50257)          # the LM head's GEMMs: 50,257 is odd
```

## Instead
```python
model = GPT(vocab_size=50304)          # padded to a multiple of 64; the extra logits are never targets
```

## Known problems
The saving is not measured: an nsys export has no matrix shapes, so the GEMMs' rate once padded is
unknown; the finding gives their time as the time at stake and saves nothing in the ranking. On the
fuse56 BERT (fixtures/real), 9.3 ms a step of `..._align2` GEMMs over its 30,522-wide vocabulary went
to about 5.2 ms once torch.compile padded them (with the rest of its fusion: not a clean twin).
Kernels whose names say nothing of their loads (cuBLAS's `nvjet`) are not judged.

## Options
- `min_share`: the narrow-load GEMMs' share of the window before the check speaks.
"""

import re

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count, time_per_step
from nsanalyze.checks.program._roles import kernel_rows, role_time
from nsanalyze.numbers import duration_text

ID = "unaligned-gemm"
FULL_LOAD_BYTES = 16   # a tensor-core kernel's full-width operand load (128 bits)
ALIGNMENT = re.compile(r"_align[ac]?(\d+)(?![0-9x])")
# The operands' element size by the name's type words, first match (a CUTLASS tensor-op name without one is tf32).
ELEMENT_BYTES = ((re.compile(r"bf16|f16|fp16|half|h\d{3,5}gemm", re.IGNORECASE), 2),
                 (re.compile(r"e4m3|e5m2|fp8|int8|i8\d|s8|u8", re.IGNORECASE), 1))
ADVICE = """Pad the matrix dimensions to a multiple of 8 elements (bf16, fp16; 4 for tf32, 16 for int8 and fp8),
better 64.

- Vocabularies and class counts: 50,257 -> 50,304, 30,522 -> 30,528; the padded logits are never targets
  (or mask them to -inf before sampling).
- Hidden, feed-forward and head sizes: choose multiples of 64.
- Sequence lengths and batch sizes that enter a GEMM's leading dimension: pad them too (`pad_to_multiple_of=8`
  in a tokenizer's collator).
- Measure the change with `nsanalyze diff` of the runs before and after.

```python
# before: the LM head's GEMMs load 2 elements at a time (an sm80 CUTLASS kernel on Hopper)
head = nn.Linear(768, 30522)
# after
head = nn.Linear(768, 30528)
```"""

CHECK = Check(
    id=ID,
    name="program.work.unaligned_gemm",
    title="Tensor-core GEMMs load their operands narrower than 16 bytes",
    section="tensor",
    requires=("work",),
    thresholds={
        "min_share": Threshold(0.03, "the program findings' least share: 3% of the window is worth padding a "
                                     "dimension"),
    },
    speedup_model="not estimated: the GEMMs' time is the time at stake (an nsys export has no matrix shapes)",
    budget_part=None,   # it saves nothing measured: no part of the budget to share with the others
    advice=ADVICE,
)


def element_bytes(name: str) -> int:
    return next((size for pattern, size in ELEMENT_BYTES if pattern.search(name)), 4)


def load_bytes(name: str) -> int | None:
    """The narrowest operand load a kernel's name states, in bytes; None where the name states none."""
    widths = [int(n) for n in ALIGNMENT.findall(name)]
    return min(widths) * element_bytes(name) if widths else None


def _narrow(kernel) -> bool:
    width = load_bytes(kernel.demangled or kernel.name or "")
    return width is not None and width < FULL_LOAD_BYTES


def run(timeline, limits) -> Finding | None:
    gemms = role_time(timeline, "matmul_tensor", limits.min_share, keep=_narrow)
    if gemms is None:
        return None
    steps = step_count(timeline)
    each = time_per_step(steps)
    names = [k.demangled or k.name for k in gemms.kernels]
    widths = sorted({load_bytes(name) for name in names})
    loads = " or ".join(f"{w} bytes" for w in widths)
    multiple = FULL_LOAD_BYTES // min(element_bytes(name) for name in names)   # the smallest type asks most
    count = len(gemms.kernels)
    return Finding(
        check=ID,
        title=f"Tensor-core GEMMs load their operands {loads} at a time, not {FULL_LOAD_BYTES}: "
              f"{plural(count, 'kernel')} {'takes' if count == 1 else 'take'} {each(gemms.ns)} "
              f"({gemms.kernel_share:.0%} of GPU kernel time); a matrix dimension is not a multiple of {multiple} "
              "elements: pad it",
        estimated_speedup=0.0,
        evidence={"narrow_gemm_ns": evidence(gemms.ns, unit="ns"),
                  "narrow_gemm_share": evidence(gemms.window_share, limits.min_share, unit="ratio"),
                  "load_bytes": evidence(widths[0], FULL_LOAD_BYTES, unit="byte", compare="<"),
                  "launches": evidence(gemms.launches),
                  "kernels": kernel_rows(gemms.kernels)},
        advice=ADVICE,
        notes=[f"saving not measured: an nsys export has no matrix shapes, so the GEMMs' rate once padded is not "
               f"known; {duration_text(gemms.ns)}, their time, is the time at stake"],
    )
