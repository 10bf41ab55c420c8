"""The GPU's time goes to copying data on the device: concatenations, contiguous copies and fills.

## What it detects
The work split's `copy` kernels (PyTorch's `CatArrayBatchedCopy`, `direct_copy_kernel`, fills; by name) when
they hold most of the GPU's kernel time (`min_kernel_share`) and a share of the window worth a change
(`min_share`). A program's own math (GEMMs, attention, elementwise work) is then the smaller part.

## Why it is slow
A copy kernel moves bytes and does no math. A tensor grown by `torch.cat` inside a loop (a KV cache a token at
a time, a list of outputs) is copied whole at every iteration: the bytes moved grow with the square of the
loop's length. `.contiguous()` after a transpose, `.clone()`, and large buffers made with `torch.zeros` every
step are passes through memory too.

## Example
```python
for t in range(new_tokens):
    k_cache = torch.cat([k_cache, k_new], dim=2)   # the whole cache copied, every token, every layer
```

## Instead
```python
k_cache = torch.empty(B, H, max_len, D, device="cuda", dtype=torch.bfloat16)   # once
for t in range(new_tokens):
    k_cache[:, :, t] = k_new                       # one token written in place
    out = attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])
```

## Known problems
The change priced takes the copy kernels away with their launches; a preallocated buffer still writes what is
new (a token's keys and values), which the replay leaves out. Which copies a change removes depends on the code.

## Options
- `min_kernel_share`: copy kernels' share of the GPU's kernel time before the check speaks.
- `min_share`: their share of the window.
"""

import re

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count, time_per_step
from nsanalyze.checks.program._roles import kernel_rows, role_time

ID = "device-copies"
BUDGET_PART = "gpu_compute"
ADVICE = """Copy less on the device: build tensors in place, once.

- A tensor grown with `torch.cat` or `torch.stack` in a loop (a KV cache, outputs gathered a step at a time):
  allocate it once at its final size and write each part into its slice (`buf[:, :, t] = x`, `index_copy_`);
  Hugging Face `generate(..., cache_implementation="static")` does this for the KV cache.
- `.contiguous()` and `.clone()` of large tensors: keep the layout the consumer reads, or let `torch.compile`
  fuse the copy into the kernel that needs it.
- Large buffers made with `torch.zeros` or `torch.full` every step: allocate them once and reuse them.
- Measure the change with `nsanalyze diff` of the runs before and after.

```python
# before: the cache copied whole at every token
k_cache = torch.cat([k_cache, k_new], dim=2)
# after: preallocated once, one token written in place
k_cache[:, :, t] = k_new.squeeze(2)
```"""

CHECK = Check(
    id=ID,
    name="program.work.device_copies",
    title="Copy kernels take most of the GPU's time",
    section="work",
    requires=("work",),
    thresholds={
        "min_kernel_share": Threshold(0.3, "copies over 30% of kernel time are no program's math (the real programs "
                                           "of fixtures/ copy 20% at most: Triton's tuning, an EMA's buffers)"),
        "min_share": Threshold(0.05, "a twentieth of the window is worth a change of how tensors are built"),
    },
    speedup_model=("the copy kernels' time, replayed as gone with their launches: what the step saves once the "
                   "other work and the host set its pace"),
    budget_part=BUDGET_PART,
    change={"remove_kernels": ("copy",)},   # the replay change priced (program.py)
    advice=ADVICE,
)


# The copies' cause the title names where its kernels (by name) hold most of their time; else ANY_COPY.
CAUSES = ((re.compile(r"CatArray|cat_|concat", re.IGNORECASE),
           "concatenations: a tensor grown by torch.cat in a loop is copied whole each time, build it in place"),
          (re.compile(r"fill|memset|zero", re.IGNORECASE), "fills: buffers set again each time, allocate them once"))
ANY_COPY = "data moved on the device with no math: build tensors in place, once"


def run(timeline, limits) -> Finding | None:
    copies = role_time(timeline, "copy", limits.min_share)
    if copies is None or copies.kernel_share < limits.min_kernel_share:
        return None
    steps = step_count(timeline)
    each = time_per_step(steps)
    launches = (f"{copies.launches / steps:.0f} launches a step" if steps else plural(copies.launches, "launch"))
    cause = next((text for pattern, text in CAUSES      # a cause whose kernels hold most of the copies' time
                  if sum(k.ns for k in copies.kernels if pattern.search(k.demangled or k.name or "")) > copies.ns / 2),
                 None)
    finding = Finding(
        check=ID,
        title=f"Copy kernels take {copies.kernel_share:.0%} of GPU kernel time ({each(copies.ns)}, {launches}), "
              + (f"most of it {cause}" if cause else ANY_COPY),
        estimated_speedup=0.0,
        evidence={"copy_ns": evidence(copies.ns, unit="ns"),
                  "copy_kernel_share": evidence(copies.kernel_share, limits.min_kernel_share, unit="ratio"),
                  "copy_share": evidence(copies.window_share, limits.min_share, unit="ratio"),
                  "launches": evidence(copies.launches),
                  "kernels": kernel_rows(copies.kernels)},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = copies.ns
    return finding
