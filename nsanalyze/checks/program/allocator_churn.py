"""Device memory allocated and freed inside the loop: the caching allocator emptied or re-sized.

## What it detects
`cudaMalloc`/`cudaFree` (and the driver's `cuMemAlloc`/`cuMemFree`, expandable segments' `cuMemMap`)
calls inside the steady steps, classed by the host-activity table (`normalize/host_activity.csv`), and
the GPU idle time they cost: the host time in them, step by step, up to the GPU's idle time in that step.

## Why it is slow
A framework's caching allocator keeps freed blocks for the next step, so a steady loop allocates
nothing from the driver. When the cache is emptied every step (`torch.cuda.empty_cache()`), or shapes
change so that cached blocks never fit, every step frees and re-allocates through the driver.
`cudaFree` waits for all the device's work before it returns, so the host loses its lead on the GPU
and the launch queue drains; `cudaMalloc` then costs tens to hundreds of microseconds a call.

## Example
```python
for x, y in loader:
    loss = model(x).float().pow(2).mean(); loss.backward(); opt.step(); opt.zero_grad()
    torch.cuda.empty_cache()          # frees every cached block: the next step allocates them again
```

## Instead
```python
for x, y in loader:
    loss = model(x).float().pow(2).mean(); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
# no empty_cache() in the loop; for shapes that vary, pad to a few sizes (bucketing) or set
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
```

## Known problems
Allocation in the first steps is the cache filling (warm-up), outside the steady window. Calls of all
threads of the GPU's processes count; where two threads' calls overlap, the GPU's idle time is counted
once.

A cache the program empties and one the allocator empties itself, out of memory, look alike call by call: the
driver's refusal before the frees tells them apart (normalize/out_of_memory.py: a `cudaMalloc` answered
cudaErrorMemoryAllocation). Where the steps hold such refusals the title says so and the advice leads with room for
the cache (expandable segments, a lower peak, memory held beside it); a Kineto trace records no return values, so
there the two cannot be told.

An emptied cache and no cache at all look alike call by call. Their counts differ: an emptied cache still
serves most of a step, so the steps make fewer synchronous allocator calls than kernel launches (0.39-0.53
a launch on the fixtures); without one (`PYTORCH_NO_CUDA_MEMORY_CACHING=1`, a library without a pool) every
tensor goes through the driver, 1.0-2.5 a launch. From 0.75 a launch a PyTorch program's title and advice
name the variable (`evidence.allocator_calls_per_launch`). A stream-ordered pool's `cudaMallocAsync` calls
are not counted: they are a pool's.

## Options
- `min_window_share`: the savings as a share of the window before the check speaks.
"""

import re

from humanize import naturalsize

from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.checks.libraries import PYTORCH_LAUNCHES, launch_share
from nsanalyze.checks.program._host_class import calls_evidence, calls_phrase, cost_phrase, priced_class
from nsanalyze.checks.program.device_copies import GROWN, GROWN_ADVICE


ID = "allocator-churn"
CLASS = "allocator"
ADVICE = """Keep device memory across iterations instead of handing it back to the driver.

- PyTorch: remove `torch.cuda.empty_cache()` (and `gc.collect()` paired with it) from the training or
  inference loop: it hands every cached block back to the driver, and the next step allocates them
  again with `cudaMalloc`, after `cudaFree` has waited for the device.
- Other libraries: allocate from a pool instead of `cudaMalloc`/`cudaFree` per operation (RAPIDS RMM:
  `rmm.reinitialize(pool_allocator=True)`; CuPy's memory pool; `cudaMallocAsync` with a memory pool).
- Shapes that change every step (variable sequence lengths) miss the cache: pad to a few bucket sizes,
  or set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
- Allocate buffers once outside the loop and reuse them (`out=` arguments, static buffers).

```python
# before
for batch in loader:
    train_step(batch)
    torch.cuda.empty_cache()
# after
for batch in loader:
    train_step(batch)
```"""

CHECK = Check(
    id=ID,
    name="program.host.allocator",
    title="Device memory allocated and freed inside the loop",
    section="busy",
    requires=("host_activity",),
    thresholds={"min_window_share": Threshold(0.02, "a fiftieth of the window in driver allocation calls is worth "
                                                    "one line of code to keep")},
    speedup_model=("per steady step, the host time in allocator calls, up to the GPU's idle time in that step: "
                   "removed, the host keeps its lead and the GPU its work"),
    change={"remove": ("allocator",)},  # the replay change priced (program.py)
    advice=ADVICE,
)


# Under PYTORCH_LAUNCHES the program is another library's (CuPy, RAPIDS): its pool leads the advice, not PyTorch's
# empty_cache (quasiben's CuPy workflow, a user read)
OTHER_LIBRARIES_ADVICE = """Keep device memory across iterations instead of handing it back to the driver.

- Allocate from a pool instead of `cudaMalloc`/`cudaFree` per operation: CuPy's memory pool (the default
  allocator: do not replace it with `cupy.cuda.set_allocator(None)`, and do not call `free_all_blocks()` in the
  loop), RAPIDS RMM (`rmm.reinitialize(pool_allocator=True)`), `cudaMallocAsync` with a memory pool in CUDA C++.
- Allocate buffers once outside the loop and reuse them (`out=` arguments, static buffers).
- PyTorch: remove `torch.cuda.empty_cache()` from the loop.

```python
# before: a pool emptied each iteration
for chunk in chunks:
    process(chunk)
    cupy.get_default_memory_pool().free_all_blocks()
# after: freed blocks stay in the pool for the next iteration
for chunk in chunks:
    process(chunk)
```"""


# Where the steps' allocator calls are the pools of CUDA graphs captured anew each step (critical_path.allocator_within),
# the capture is their cause: no cache is emptied, and capturing once keeps the pool (blind78_recapture: 4 cudaMalloc
# inside each capture, 4 cudaFree of the graph before; graph-recapture counts them)
POOLS = ("each step's CUDA graph capture allocates its graph's memory pool, and the graph before it frees its own "
         "when it is destroyed")
POOLS_ADVICE = """Capture the CUDA graph once (graph-recapture): each capture allocates the new graph's private memory pool
and the graph destroyed before it hands its pool back to the driver, so every step allocates and frees through the
driver. A graph captured once keeps its pool, and these calls go with the captures.

- `torch.cuda.graphs`: capture once on static input buffers and `g.replay()` each step (see graph-recapture).
- Graphs that must be captured again (a few shapes): share one pool between them
  (`torch.cuda.graph(g, pool=first_graph.pool())`, or `torch.cuda.graph_pool_handle()`), and keep each graph
  alive instead of dropping it every step."""


def _pools(timeline) -> bool:
    """Whether the steps' allocator calls are the pools of graphs captured anew each step."""
    captures = getattr(timeline, "graph_captures", None)
    return captures is not None and captures.allocator_within


def _library_advice(timeline) -> str:
    """ADVICE, or OTHER_LIBRARIES_ADVICE where the kernels are known and few are PyTorch's."""
    torch = launch_share(timeline, "PyTorch")
    return ADVICE if torch is None or torch >= PYTORCH_LAUNCHES else OTHER_LIBRARIES_ADVICE


# Synchronous allocator calls (cudaMalloc, cudaFree and the like, not a stream-ordered pool's *Async ones) at this many
# a kernel launch call or more: no caching allocator, every tensor allocated and freed through the driver. Measured:
# a cache emptied each step makes fewer (alloc_churn's empty_cache 0.53 a launch, own67's 0.39: the cache still serves
# most of a step); none at all makes more (blind82_nocache, PyTorch under PYTORCH_NO_CUDA_MEMORY_CACHING=1: 2.45 a
# launch, 1,264 calls a step for 515 launches; RAPIDS cuDF without a pool: 1.0 and 1.75). Its twins without the variable
# saved 70.0 and 59.2 ms a step, this finding predicted 60.2 and 49.8 (-14%, -16%).
NO_CACHE_CALLS_PER_LAUNCH = 0.75
CLASSIC_ALLOCATOR = re.compile(r"cu(?:da)?(?:Malloc|Free|MemAlloc|MemFree)(?:_v\d+)?")
NO_CACHE = ("no caching allocator in use: every tensor allocated and freed through the driver "
            "(`PYTORCH_NO_CUDA_MEMORY_CACHING=1` in the environment)")
NO_CACHE_ADVICE = """Turn PyTorch's caching allocator back on: the steps make {per} synchronous allocator calls for each
kernel launch, every tensor allocated with `cudaMalloc` and freed with `cudaFree`, so no cache is in use (a cache
emptied each step makes fewer calls than launches: it still serves most of a step).

- `PYTORCH_NO_CUDA_MEMORY_CACHING=1` in the environment turns the cache off: a memory-debugging setting, often left
  in a job script, a container image or a launcher (`env | grep PYTORCH`). Unset it.
- A pluggable allocator (`torch.cuda.memory.CUDAPluggableAllocator`) that calls the driver for each tensor: give it
  a pool, or use the driver's stream-ordered pool (`PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`).
- Other libraries: allocate from a pool (RAPIDS RMM `rmm.reinitialize(pool_allocator=True)`, CuPy's memory pool).

```bash
# before: the job script
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
python train.py
# after
unset PYTORCH_NO_CUDA_MEMORY_CACHING
python train.py
```"""


# Where the driver refused allocations in the steps (normalize.out_of_memory), the cache was emptied by the allocator
# itself, out of memory, not by the program: what the title says and the advice leads with
REFUSED = ("the caching allocator ran out of device memory: the driver refused {call} {refused:,} times, in "
           "{steps_with} of {steps} steady steps, and each time the allocator freed the blocks it kept and allocated "
           "again")
REFUSED_ADVICE = """Give the caching allocator room: in the steps its requests ran out of device memory, so it freed every
block it kept (`cudaFree`, which waits for the device) and allocated them again (PyTorch counts these in
`torch.cuda.memory_stats()["num_alloc_retries"]`; `torch.cuda.memory_summary()` shows the cache).

- Shapes that change from step to step (batches padded to their longest sequence, varying image sizes) leave
  cached blocks that do not fit the next step: `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` lets freed
  memory serve any later size; or pad to a few bucket sizes.
- Lower the steps' peak: a smaller batch with gradient accumulation, activation checkpointing, bf16 activations,
  `zero_grad(set_to_none=True)`; keep no tensors across steps that hold the graph (`loss` appended to a list
  without `.item()` or `.detach()`).
- Memory held beside the cache: another process on the GPU, or another library in this one (JAX preallocates
  75% of the GPU unless `XLA_PYTHON_CLIENT_PREALLOCATE=false`; CuPy's and TensorFlow's pools).

```bash
# before
python train.py
# after: freed memory serves any later size
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
```"""


# Frees this few against allocations (a quarter or less) hand little back: the memory is taken from the driver again
# and again, a pool not in use or one that grows (quasiben's workflow: 207 cudaMalloc against 3 cudaFree, read as
# "handed back to the driver and taken again" by a user read)
FEW_FREES = 0.25
FREE = re.compile(r"cu(?:da)?(?:Free|MemFree)(?:_v\d+)?")


def _classic_calls(cost, pattern=CLASSIC_ALLOCATOR) -> int:
    """The class's calls whose names the pattern matches whole (CLASSIC_ALLOCATOR: the synchronous ones)."""
    return sum(calls for name, calls, _ in cost.top_calls if pattern.fullmatch(name))


def _taken_again(cost) -> tuple[int, int] | None:
    """(allocations, frees) among the class's calls where the frees are FEW_FREES of the allocations or fewer."""
    frees = _classic_calls(cost, FREE)
    taken = _classic_calls(cost) - frees
    return (taken, frees) if taken > 0 and frees <= FEW_FREES * taken else None


def _refused(timeline):
    """The steady steps' refused allocations (normalize.out_of_memory), or None."""
    refused = getattr(timeline, "refused_allocations", None)
    return refused if refused is not None and refused.refused else None


def _calls_per_launch(timeline, cost) -> float | None:
    """The window's classic allocator calls (cudaMalloc, cudaFree and the driver's cuMemAlloc, cuMemFree: not a
    stream-ordered pool's *Async calls, nor expandable segments' cuMemMap and the like, which come several a page) a
    kernel launched, on one GPU (NO_CACHE_CALLS_PER_LAUNCH); None where the window launched nothing. Launches are
    the launch calls or the kernels run, whichever is more (a graph launch runs many), each over the GPUs, as the
    class's calls are (host_activity: a mean over the GPUs)."""
    launches = getattr(timeline, "launches", None)
    launched = max(launches.launch_calls, launches.launches) if launches is not None else 0
    if not launched:
        return None
    return _classic_calls(cost) / (launched / max(len(timeline.devices or ()), 1))


def _cause(timeline, cost, growth, refused, uncached: bool, torch: bool) -> str:
    """Why the steps allocate, in the title's words: the first that holds of a growing store, graphs' pools, refusals,
    no cache, few frees, and a cache (or pool) emptied."""
    if growth is not None:
        return (f"the steps' device-to-device copies grow every step ({naturalsize(growth.first_bytes)} in step "
                f"{growth.first_step}, {naturalsize(growth.last_bytes)} in step {growth.last_step}): {GROWN}, in a "
                "larger block of memory each time")
    if _pools(timeline):
        return POOLS
    if refused is not None:
        return REFUSED.format(**refused.to_json())
    if uncached:
        return NO_CACHE
    taken_again = _taken_again(cost)
    if taken_again is not None:
        return (f"memory is taken from the driver again and again ({taken_again[0]:,} allocations against "
                f"{taken_again[1]:,} frees: no pool in use, or one that grows)")
    return "memory is handed back to the driver and taken again (" + (
        "a caching allocator emptied, `torch.cuda.empty_cache()`, or no pool)" if torch
        else "a memory pool emptied, or none in use)")


def run(timeline, limits) -> Finding | None:
    priced = priced_class(timeline, CLASS, limits.min_window_share)
    if priced is None:
        return None
    cost, share = priced
    growth = getattr(timeline, "copy_growth", None)   # a growing tensor, not a cache emptied (copy56_catlog)
    torch = _library_advice(timeline) is ADVICE
    refused = _refused(timeline)
    per_launch = (_calls_per_launch(timeline, cost) if torch and growth is None and not _pools(timeline)
                  and refused is None else None)
    uncached = per_launch is not None and per_launch >= NO_CACHE_CALLS_PER_LAUNCH
    finding = Finding(
        check=ID,
        title=(f"Device memory is allocated and freed {'inside the loop' if cost.steps else 'while the program runs'}: "
               f"{calls_phrase(cost)}; {cost_phrase(cost, share)}: "
               f"{_cause(timeline, cost, growth, refused, uncached, torch)}, and cudaFree waits for the device"),
        estimated_speedup=share,
        evidence={"allocator_calls": evidence(cost.calls),
                  "allocator_host_ns": evidence(cost.host_ns, unit="ns"),
                  # (a window without steps has none to count: "0 of 0" read as a measurement)
                  **({"steps_with_calls": evidence(cost.steps_with_calls), "steps": evidence(cost.steps)}
                     if cost.steps else {}),
                  "savings_share": evidence(share, limits.min_window_share, unit="ratio"),
                  "calls": calls_evidence(cost),
                  **({"refused_allocations": evidence(refused.refused),
                      "steps_with_refused_allocations": evidence(refused.steps_with)} if refused is not None else {})},
        # (a grown store that ran the allocator out of memory: room for the cache, not the empty_cache() example)
        advice=(f"{GROWN_ADVICE}\n\n{REFUSED_ADVICE if refused is not None else ADVICE}" if growth is not None
                else POOLS_ADVICE if _pools(timeline)
                else REFUSED_ADVICE if refused is not None else _library_advice(timeline)),
    )
    if refused is not None and growth is not None:   # the store outgrew the memory: said beside the growth
        said = REFUSED.format(**refused.to_json())
        finding.notes.append(f"{said[0].upper()}{said[1:]}: the grown store leaves the cache no room")
    finding.estimated_savings_ns = cost.savings_ns
    if uncached:   # no cache to empty: the empty_cache advice and example would point at the wrong line
        finding.advice = NO_CACHE_ADVICE.format(per=f"{per_launch:.2g}")
        finding.evidence["allocator_calls_per_launch"] = evidence(per_launch, NO_CACHE_CALLS_PER_LAUNCH, compare=">=")
    return finding
