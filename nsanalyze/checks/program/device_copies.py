"""The GPU's time goes to copying data on the device: concatenations, contiguous copies and fills.

## What it detects
The work split's `copy` kernels (PyTorch's `CatArrayBatchedCopy`, `direct_copy_kernel`, fills; by name) and the
copies inside a GPU's memory (device-to-device memcpys: PyTorch's `copy_` of contiguous tensors, and `torch.cat`
of parts past 2^31 elements, which leaves its kernel for them) when they hold most of the GPU's work
(`min_kernel_share` of its kernel and on-device memcpy time) and a share of the window worth a change
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
- `min_kernel_share`: the copies' share of the GPU's work (kernels and on-device memcpys) before the check speaks.
- `min_share`: their share of the window.
"""

import re

from humanize import naturalsize

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural, step_count, time_per_step
from nsanalyze.checks.program._roles import kernel_rows, role_time

ID = "device-copies"
BUDGET_PART = "gpu_compute"
# Copies that grow every step (normalize.timeline.copy_growth): what the title and the advice say of them, and
# allocator-churn's too (the store needs a larger block each step)
GROWN = "a tensor grown by concatenation each step copies all it holds each time"
GROWN_ADVICE = ("The copies grow from step to step: a tensor kept across steps and grown with `torch.cat` (outputs, "
                "logits or a cache gathered a batch at a time) is copied whole into a new, larger block each step, so "
                "the copies and the allocations grow with the run. Allocate it once at its final size (or append "
                "the parts to a Python list and concatenate once at the end) and write each step's part into its "
                "slice: `store[i * b:(i + 1) * b] = x`.")
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
    title="Copies on the device take most of the GPU's time",
    section="work",
    requires=("work",),
    thresholds={
        "min_kernel_share": Threshold(0.3, "copies over 30% of the GPU's work are no program's math (the real programs "
                                           "of fixtures/ copy 20% at most: Triton's tuning, an EMA's buffers)"),
        "min_share": Threshold(0.05, "a twentieth of the window is worth a change of how tensors are built"),
    },
    speedup_model=("the copy kernels' time, replayed as gone with their launches: what the step saves once the "
                   "other work and the host set its pace"),
    budget_part=BUDGET_PART,
    change={"remove_kernels": ("device-copy",)},   # the replay change priced (program.py): kernels and memcpys
    advice=ADVICE,
)


# The copies' cause the title names where its kernels (by name) hold most of their time; else ANY_COPY.
CAUSES = ((re.compile(r"CatArray|cat_|concat", re.IGNORECASE),
           "concatenations: a tensor grown by torch.cat in a loop is copied whole each time, build it in place"),
          (re.compile(r"fill|memset|zero", re.IGNORECASE), "fills: buffers set again each time, allocate them once"))
ANY_COPY = "data moved on the device with no math: build tensors in place, once"


def run(timeline, limits) -> Finding | None:
    kernels = role_time(timeline, "copy")
    memcpy = timeline.copies.on_device if timeline.copies is not None else None
    memcpy_ns = float(memcpy.duration_ns) if memcpy is not None and memcpy.copies else 0.0
    window_ns = timeline.summary.span_ns or 0
    kernel_ns = (kernels.kernel_ns if kernels is not None else
                 timeline.work_analysis.kernel_ns if timeline.work_analysis is not None else 0.0)
    copy_ns = (kernels.ns if kernels is not None else 0.0) + memcpy_ns
    if not window_ns or not copy_ns:
        return None
    share = copy_ns / (kernel_ns + memcpy_ns)   # of the GPU's work: its kernels and its on-device memcpys
    if copy_ns / window_ns < limits.min_share or share < limits.min_kernel_share:
        return None
    steps = step_count(timeline)
    each = time_per_step(steps)
    launches = (kernels.launches if kernels is not None else 0) + (memcpy.copies if memcpy_ns else 0)
    unit = "launch" if not memcpy_ns else "copy operation"   # (a memcpy is no launch)
    launched = f"{plural(round(launches / steps), unit)} a step" if steps else plural(launches, unit)
    rows = kernels.kernels if kernels is not None else []
    cause = next((text for pattern, text in CAUSES      # a cause whose kernels hold most of the copies' time
                  if sum(k.ns for k in rows if pattern.search(k.demangled or k.name or "")) > copy_ns / 2), None)
    # (the operations counted are both kinds where both ran: copy56_catlog's 2 memcpys and a cat kernel a step read
    # "(device-to-device memcpys) ... 3 copy operations a step")
    what = ("Copy kernels" if memcpy_ns < copy_ns / 2 else "Copies inside GPU memory (device-to-device memcpys"
            + (" and copy kernels)" if kernels is not None and kernels.launches else ")"))
    growth = getattr(timeline, "copy_growth", None)
    grown = (f"; they grow every step, from {naturalsize(growth.first_bytes)} in step {growth.first_step} to "
             f"{naturalsize(growth.last_bytes)} in step {growth.last_step}: {GROWN}" if growth is not None else "")
    finding = Finding(
        check=ID,
        title=f"{what} take {share:.0%} of the GPU's work ({each(copy_ns)}, {launched}), "
              + (f"most of it {cause}" if cause else ANY_COPY) + grown,
        estimated_speedup=0.0,
        evidence={"copy_ns": evidence(copy_ns, unit="ns"),
                  "copy_kernel_share": evidence(share, limits.min_kernel_share, unit="ratio"),
                  "copy_share": evidence(copy_ns / window_ns, limits.min_share, unit="ratio"),
                  "launches": evidence(launches),
                  "device_memcpy_ns": evidence(memcpy_ns, unit="ns"),
                  "kernels": kernel_rows(rows),
                  **({"growth": {"first_step": growth.first_step, "last_step": growth.last_step,
                                 "first_bytes": growth.first_bytes, "last_bytes": growth.last_bytes,
                                 "correlation": round(growth.correlation, 3)}} if growth is not None else {})},
        advice=f"{GROWN_ADVICE}\n\n{ADVICE}" if growth is not None else ADVICE,
    )
    finding.estimated_savings_ns = copy_ns
    return finding
