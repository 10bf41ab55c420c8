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
An nsys export has no matrix shapes, so the padded GEMMs' time is not measured but taken from what padding did to
such kernels on the same chip (normalize/narrow_gemm_rates.csv, measured on an H200: the three GEMMs of a linear
layer with a width not a multiple of 8, narrow against padded, 414 in all): a kernel on 2-byte loads took 5.6x the
padded one's time (4.3-10x), on 4-byte loads 3.0x (1.6-4.0x). The saving is the kernels' time less that share,
priced by the replay of the steps with them that much faster; on a chip or load width the table lacks it is not
estimated (the GEMMs' time is the time at stake). copy56's vocab twins (fixtures/real): 30.7 ms a step of
`..._align1` bf16 GEMMs over a 50,257-wide vocabulary; padding to 50,304 saved 26.0 and 25.1 ms a step. On the
fuse56 BERT, 9.3 ms a step of `..._align2` GEMMs over its 30,522-wide vocabulary went to about 5.2 ms once
torch.compile padded two of its three (with the rest of its fusion: not a clean twin).
Kernels whose names say nothing of their loads (cuBLAS's `nvjet`) are not judged.

## Options
- `min_share`: the narrow-load GEMMs' share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count, time_per_step
from nsanalyze.checks.program._roles import kernel_rows, role_time
from nsanalyze.normalize.critical_path import NARROW_GEMM
from nsanalyze.normalize.device_caps import device_caps
from nsanalyze.normalize.gemm_loads import FULL_LOAD_BYTES, element_bytes, load_bytes, narrow, slowdown
from nsanalyze.numbers import duration_text

ID = "unaligned-gemm"
BUDGET_PART = "gpu_compute"
ADVICE_TEXT = """Pad the matrix dimensions to a multiple of 8 elements (bf16, fp16; 4 for tf32, 16 for int8 and fp8),
better 64.

- Vocabularies and class counts: 50,257 -> 50,304, 30,522 -> 30,528; the padded logits are never targets
  (or mask them to -inf before sampling).
- Hidden, feed-forward and head sizes: choose multiples of 64.
- Sequence lengths and batch sizes that enter a GEMM's leading dimension: pad them too (`pad_to_multiple_of=8`
  in a tokenizer's collator).
- `torch.compile` pads a matrix product's dimensions where its own benchmark says padding pays (Inductor's
  pad_mm pass), though not every GEMM: check the compiled run's kernels.
- Measure the change with `nsanalyze diff` of the runs before and after.

"""
ADVICE = ADVICE_TEXT + """```python
# before: 30,522 is a multiple of 2, not of 8: the LM head's bf16 GEMMs load 2 elements (4 bytes) at a time
# (an odd size, 1 element: 2 bytes), on an sm80 CUTLASS kernel on Hopper
head = nn.Linear(768, 30522)
# after
head = nn.Linear(768, 30528)
```"""
# the example for 2-byte loads of 2-byte types (an odd dimension: one element at a time), which the 4-byte one above
# names only in parentheses (copy56_vocab's 50,257, a user read)
ODD_EXAMPLE = """```python
# before: 50,257 is odd: the LM head's bf16 GEMMs load 1 element (2 bytes) at a time, on an sm80 CUTLASS kernel on
# Hopper
head = nn.Linear(768, 50257)
# after: a multiple of 64 (the padded logits are never targets)
head = nn.Linear(768, 50304)
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
    speedup_model=("each narrow kernel's time x (1 - 1/slowdown), the slowdown of its load width on this chip as "
                   "measured narrow against padded (normalize/narrow_gemm_rates.csv); priced by the replay of the "
                   "steps with those kernels that much faster; not estimated on a chip or width the table lacks"),
    budget_part=BUDGET_PART,
    change={"speedup": (NARROW_GEMM,)},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def _narrow(kernel) -> bool:
    return narrow(kernel.demangled or kernel.name)


def _chip(timeline) -> tuple[str | None, str | None]:
    """(chip, model) of the first named GPU the device table knows."""
    for name in timeline.gpu_names():
        caps = device_caps(name)
        if caps:
            return caps["chip"], caps["model"]
    return None, None


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
    chip, model = _chip(timeline)
    rates = {w: slowdown(chip, w) for w in widths}
    saved = float(sum(k.ns * (1 - 1 / rates[load_bytes(name)]["median"])
                      for k, name in zip(gemms.kernels, names) if rates[load_bytes(name)]))
    priced = [w for w in widths if rates[w]]
    if priced:
        measured = "; ".join(f"{w}-byte loads {rates[w]['median']:g}x ({rates[w]['low']:g}-{rates[w]['high']:g}x over "
                             f"{rates[w]['gemms']} GEMMs)" for w in priced)
        note = (f"saving: each kernel's time less what it would take once padded, by the slowdown of its load width "
                f"measured narrow against padded on an H200 ({chip}; normalize/narrow_gemm_rates.csv): {measured}"
                f"{'; this GPU (' + model + ') shares its chip' if model and model != 'H200' else ''}; an nsys export has no matrix "
                "shapes, so the padded GEMMs' own time is not measured")
        unpriced = [w for w in widths if not rates[w]]
        if unpriced:
            note += f"; kernels on {' or '.join(f'{w}-byte' for w in unpriced)} loads: not measured, not counted"
    else:
        where = f"on this GPU's chip ({chip})" if chip else "on a GPU the device table names"
        note = (f"saving not measured: an nsys export has no matrix shapes, and what padding does to such kernels was "
                f"not measured {where} at these load widths; {duration_text(gemms.ns)}, their time, is the time at "
                "stake")
    # what the measurement says, where there is one: the reader sees why padding pays before the notes
    measured_in_title = "".join(f" (on {w}-byte loads such GEMMs took {rates[w]['median']:g}x the padded ones' time on "
                                f"an H200)" for w in priced[:1])
    finding = Finding(
        check=ID,
        title=f"Tensor-core GEMMs load their operands {loads} at a time, not {FULL_LOAD_BYTES}: "
              f"{plural(count, 'kernel')} {'takes' if count == 1 else 'take'} {each(gemms.ns)} "
              f"({gemms.kernel_share:.0%} of GPU kernel time); a matrix dimension is not a multiple of {multiple} "
              f"elements: pad it{measured_in_title}",
        estimated_speedup=0.0,
        evidence={"narrow_gemm_ns": evidence(gemms.ns, unit="ns"),
                  "narrow_gemm_share": evidence(gemms.window_share, limits.min_share, unit="ratio"),   # of the window
                  # of GPU kernel time, the title's (fuse56_bert: 18% there beside 17% here read as one share twice)
                  "narrow_gemm_kernel_share": evidence(gemms.kernel_share, unit="ratio"),
                  "load_bytes": evidence(widths[0], FULL_LOAD_BYTES, unit="byte", compare="<"),
                  "launches": evidence(gemms.launches),
                  "padded_slowdown": evidence(rates[priced[0]]["median"] if priced else None, unit="x"),
                  "kernels": kernel_rows(gemms.kernels)},
        advice=ADVICE if widths[0] != 2 or multiple != 8 else ADVICE_TEXT + ODD_EXAMPLE,
        notes=[note],
    )
    finding.estimated_savings_ns = saved
    return finding
