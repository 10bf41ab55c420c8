"""The GPU waits while the host computes: data preparation on the critical path.

## What it detects
The budget's `idle_host`: GPU idle time in which the host issued no CUDA call for 0.3 ms or more
(or sat in one long runtime call such as `cudaMalloc`), and no synchronization explains it: the
host was running its own code. The longest stretches are listed with the NVTX range around them and
the OS runtime calls the host made (reads, waits on a queue), when the export traced them. A long CUDA call
inside a stretch (a `cudaFree`, a module loaded on a kernel's first launch) is not the host's own code: the
stretches are ranked and stated by the time such calls leave (`own_ns`), and a note names the calls and whose
finding prices them (allocator-churn's, for the allocator's). A longest stretch that is a tenth of a median step (of
the window without steps) or more is named by its share where no range places it, and where the export has NVTX
ranges, as having none around it (where a range is missing), or as inside the step ranges where it spans two. Where
none alone is that large, the three longest in no range are named together when they hold half the host's time. When the
threads that launch the GPU's work sat in blocking OS calls (a sleep, a lock or semaphore, a queue,
I/O) for most of those stretches, the host was blocked rather than computing: the finding names the
calls and what they wait for (the data loader's queue, a lock, a file or socket), with advice to fit.
When the longest stretches are followed, before the next launch, by loading code compiled at run time (the
host-activity class `jit`: a run-time link, a module loaded from an image in memory, NVRTC), the host was
compiling GPU code: the finding names JIT compilation / module loading (Numba, CuPy, Triton), with advice to
cache the compiled kernels and warm up outside the timed loop.
Where the steps are NVTX ranges and the longest stretches lie outside them (at most 5% of their time inside,
`in_steps_ns`: each still ends at the next step's first launch), the finding says the time is the loop's code
between steps (where a `DataLoader` without workers makes the next batch), not a step's own code.
Where the longest stretch is under a quarter of a median step, the host's time is spread over the gaps between a
step's launches (the cost of issuing each operation), and the advice is to issue fewer: CUDA graphs, one call over
all parameters, per-operation modes off. In a steady window, a long stretch that a kernel's first run in the capture
ends, where its next run comes without such a wait, is set-up for new code (a library choosing a kernel for a new
shape): left out as start-up, like the module loads at kernels' first launch.

## Why it is slow
The GPU only runs what the host has queued. When each step first decodes, augments or collates its
batch in the training process, the GPU idles for all of that time, every step.

## Example
```python
for step in range(steps):
    x, y = make_batch(files[step])        # decoding and augmentation in the training loop
    loss = loss_fn(model(x.cuda()), y.cuda()); loss.backward(); opt.step()
```

## Instead
```python
loader = DataLoader(dataset, batch_size=64, num_workers=8, pin_memory=True,
                    prefetch_factor=4, persistent_workers=True)    # batches prepared ahead, in parallel
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    ...
```

## Known problems
Host work that must stay serial (Python bookkeeping that decides the next launch) also lands here;
the NVTX ranges and OS calls in the evidence tell which code it was.

Only the OS calls of the threads that launch the GPU's work say whether the host was blocked: other
threads of the process (CUDA's and NCCL's helpers, a pool's idle workers) sit in `poll` or
`pthread_cond_timedwait` all the time, and are not the GPU's wait. Without the calls split by thread
(`blocked_ns` and `thread_os_calls` of the stretches), the finding does not judge blocking. On one
GPU of several, a straggler's host time is what the others wait for: rank-imbalance counts it.

The GPU's idle under CUDA module loads (the host-activity class `module-load`: a kernel's module loaded at its
first launch) is start-up, paid once a process: where it is a tenth of this finding's time or more and no build in
every step claims it (runtime-compilation), it is left out of the saving and the share, and the title and a note
say how much (`module_load_ns`).

## Options
- `min_idle_share`: idle_host over the window before the check speaks.
- `min_blocked_share`: the share of the longest stretches in which the launching threads sat in blocking OS
  calls before the finding says the host was blocked.
"""

from dataclasses import asdict, dataclass, replace
from itertools import takewhile

from humanize import naturalsize

from nsanalyze.normalize.critical_path import READ_BACK_KIND
from nsanalyze.normalize.host_activity import base_name
from nsanalyze.normalize.model import ApiCall, plain
from nsanalyze.normalize.steps import LATE_START_SHARE, normalize_name
from nsanalyze.numbers import duration_text
from nsanalyze.text import code_span
from nsanalyze.checks.base import Check, Finding, Threshold, budget_part, evidence, per_step_phrase, plural
from nsanalyze.checks.libraries import PYTORCH_LAUNCHES, launch_share
from nsanalyze.checks.program import allocator_churn, host_data, pinned_alloc_churn, runtime_compilation
from nsanalyze.checks.program._claims import claims_by_cause, unclaimed_part
from nsanalyze.checks.program._host_class import lock_shared
from nsanalyze.checks.program._roles import inference_steps, pytorch_inference
from nsanalyze.checks.program.launch_overhead import profiler_caveat

ID = "host-compute"
BUDGET_PART = "idle_host"
ADVICE_HEAD = """Take the host work off the critical path.

- Data loading and preprocessing: prepare the next input while the GPU computes, in worker processes or a
  producer thread with a bounded queue (PyTorch: `DataLoader(num_workers=N, pin_memory=True,
  persistent_workers=True)`); or do the work on the GPU (DALI, cuDF's readers and joins, CuPy instead of NumPy,
  torchvision.transforms.v2 on tensors).
- Copies from pinned memory, asynchronous (`cudaMemcpyAsync`, PyTorch's `non_blocking=True`), prefetched a step
  ahead on a side stream.
- Python bookkeeping (metrics, logging, conversions of results to host objects): do it every N steps, or on
  data that stays on the GPU.
- Housekeeping calls in the loop: a `gc.collect()` walks every Python object the process holds (an in-memory data
  set of lists and dicts: hundreds of ms), each step; leave collection to Python (`gc.freeze()` once the data set is
  built keeps it out of every collection), or collect every N steps.

"""
# The example after the advice, by the program's framework (_framework_advice): PyTorch's loader, else a producer
# thread, which a cuDF, CuPy or CUDA C++ program has (quasiben's cudf and workflow were shown a DataLoader)
PYTORCH_EXAMPLE = """```python
# before (PyTorch): the batch is built in the training loop
x, y = make_batch(i)
# after: built ahead by worker processes
loader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True)
```"""
THREAD_EXAMPLE = """```python
# before: each input prepared on the host while the GPU waits
for chunk in chunks:
    result = gpu_work(prepare(chunk))
# after: the next one prepared by a thread while the GPU works on this one
with ThreadPoolExecutor(max_workers=1) as pool:
    ahead = pool.submit(prepare, chunks[0])
    for i in range(len(chunks)):
        ready = ahead.result()
        if i + 1 < len(chunks):
            ahead = pool.submit(prepare, chunks[i + 1])
        result = gpu_work(ready)
```"""
ADVICE = ADVICE_HEAD + PYTORCH_EXAMPLE
# A PyTorch loop without a backward pass (inference, generation): its host time is the loop's own code between the
# steps' operations, not a training input pipeline (kv57's decode loop was told to use DataLoader workers)
INFERENCE_ADVICE = """Take the host work off the critical path: these steps run no backward pass (inference or
generation), so the host's time between their launches is the loop's own code, not a training input pipeline.

- Per-token or per-request Python (sampling, stopping tests, detokenizing, building the next input): keep it on the
  GPU (`argmax` or `torch.multinomial` on the device, the end of sequence tested every N tokens) and read results
  back every N steps.
- Issue fewer operations: capture the step in a CUDA graph (`torch.compile(mode="reduce-overhead")`, with a static
  KV cache for generation), and batch requests together.
- Autograd off: `torch.inference_mode()` (or `torch.no_grad()`) around the loop; `model.eval()` alone still records
  every operation, and keeps its inputs, for a backward that never runs.
- Pre- and post-processing (tokenization, image decoding, writing results): in a worker thread or process with a
  bounded queue, ahead of the GPU.

```python
# before: the next token tested on the host every step
for _ in range(max_new):
    token = model(token).argmax(-1)
    if token.item() == eos: break
# after: the end tested every 16 tokens
for i in range(max_new):
    token = model(token).argmax(-1); out.append(token)
    if i % 16 == 15 and (torch.stack(out[-16:]) == eos).any().item(): break
```"""
# Where the host's time is spread over many short gaps between a step's launches, it is the cost of issuing each
# operation (Python, the framework's dispatch, per-operation hooks), not a piece of work to move elsewhere
SPREAD_ADVICE = """Issue fewer operations: the host's time is spread over the short gaps between a step's launches, the
cost of issuing each operation, not one piece of work that a worker could take.

- Capture the step in a CUDA graph (PyTorch: `torch.compile(mode="reduce-overhead")`, `torch.cuda.graphs`): the
  host then issues the whole step at once.
- Fewer, larger operations: one call over all parameters instead of a Python loop over them (`torch._foreach_*`,
  `torch.nn.utils.clip_grad_norm_(..., foreach=True)`, optimizers with `foreach=True` or `fused=True`), fused
  elementwise chains (`torch.compile`), small tensors batched together.
- Modes that do work for every operation cost it in every step: autograd anomaly detection, per-operation hooks,
  profiler ranges around every op that record its inputs' shapes (`emit_nvtx(record_shapes=True)`), argument
  validation. Turn them off in timed runs.
- Python bookkeeping (metrics, logging, conversions of results to host objects): do it every N steps, or on
  data that stays on the GPU.

```python
# before: one small launch per parameter, issued from Python
for p, e in zip(model.parameters(), ema):
    e.mul_(0.999).add_(p.detach(), alpha=0.001)
# after: one call over all of them
torch._foreach_mul_(ema, 0.999); torch._foreach_add_(ema, [p.detach() for p in model.parameters()], alpha=0.001)
```"""
# The longest stretch under this share of the median step: the host's time is spread (SPREAD_ADVICE). On the real
# exports the longest stretch is 0.6-23% of a step where it is per-operation cost (an EMA or a clip over parameters in
# Python, anomaly mode, host metrics) and 62-130% where it is one piece of work (a batch built on the host, a mask)
SPREAD_SHARE = 0.25


def _framework_advice(timeline) -> str:
    """ADVICE (PyTorch's example) where PyTorch's kernels (checks/libraries.py) are PYTORCH_LAUNCHES of the launches or
    more, or the kernels are not known; INFERENCE_ADVICE for PyTorch's steps with neither optimizer nor backward
    kernels; else the head with THREAD_EXAMPLE."""
    torch = launch_share(timeline, "PyTorch")
    if torch is not None and torch < PYTORCH_LAUNCHES:
        return ADVICE_HEAD + THREAD_EXAMPLE
    if pytorch_inference(timeline):
        return INFERENCE_ADVICE
    return ADVICE


CHECK = Check(
    id=ID,
    name="program.host.compute",
    title="The GPU waits while the host computes",
    section="busy",
    requires=("budget",),
    thresholds={"min_idle_share": Threshold(0.05, "a twentieth of the window spent waiting on host code is worth moving"),
                "min_blocked_share": Threshold(0.5, "when the launching threads sit in blocking OS calls most of the "
                                                    "longest stretches, the host waits rather than computes")},
    speedup_model="the budget's idle_host: moved off the critical path (workers, prefetch), the GPU would not wait",
    budget_part=BUDGET_PART,
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)


# OS runtime calls in which a thread waits rather than computes, by what it waits for
BLOCKING = (
    ("sleeping", ("nanosleep", "clock_nanosleep", "usleep", "sleep")),
    ("waiting on a lock, a queue or another thread",
     ("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_mutex_lock",
      "pthread_mutex_timedlock", "pthread_mutex_clocklock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
      "pthread_join", "sem_wait", "sem_timedwait", "sem_clockwait", "futex")),
    ("waiting for I/O (files, pipes, sockets)",
     ("poll", "ppoll", "epoll_wait", "epoll_pwait", "select", "pselect", "pselect6", "read", "pread", "readv",
      "preadv", "recv", "recvfrom", "recvmsg", "accept", "accept4", "connect", "write", "pwrite", "writev",
      "send", "sendto", "sendmsg", "fsync", "fdatasync", "open", "openat", "close", "fread", "fwrite")),
    ("waiting for a child process", ("waitpid", "wait", "wait4", "waitid")),
)
LOCK_KIND = "waiting on a lock, a queue or another thread"
# Blocked in lock waits where the launching thread shares the interpreter lock (_host_class.lock_shared): the lock's
# waits, not a loader's queue (blind78_gilthread's third finding, blocked in pthread_cond_timedwait, led with
# DataLoader workers for a program whose batches come from a Python thread; a user read)
GIL_LEAD = ("These waits are the interpreter lock's: another Python thread of the process holds the GIL while the "
            "launching thread waits for it (host-wait's finding names the timed waits that end at the switch "
            "interval). Move that thread's work to processes (DataLoader workers, `multiprocessing`), or make it "
            "release the lock (work in NumPy or a C extension that drops the GIL).\n\n")
BLOCKED_ADVICE = {
    "sleeping": """The host thread that launches the GPU's work sleeps: a `time.sleep`, a rate limiter, or a
polling loop with a sleep sits on the critical path.

- Remove the sleep, or move the throttled work to another thread; wait on an event
  (`threading.Event.wait`, `torch.cuda.Event.synchronize`) instead of polling with sleeps.
- On one rank of a multi-GPU job, every other rank waits for it (see rank-imbalance).

```python
# before: polling with a sleep in the training loop
while not ready(): time.sleep(0.004)
# after: wait on what you need, off the loop when you can
ready_event.wait()
```""",
    "waiting on a lock, a queue or another thread": """The host thread that launches the GPU's work is blocked on a
lock, a condition or a semaphore: it waits for another thread or process, not for its own code.

- A DataLoader's queue (`sem_*wait`, `pthread_cond_*wait` in the main thread): the workers do not keep up.
  Raise `num_workers`, make per-sample transforms cheaper, decode or augment on the GPU, raise `prefetch_factor`,
  keep `persistent_workers=True`.
- A lock: another Python thread holding the GIL (logging handlers, metrics, a tokenizer thread); do that work
  in a process, or less often.
- A queue fed by another thread or process: make the producer faster or give it a deeper queue.

```python
# before: two workers cannot keep up with the GPU
loader = DataLoader(ds, batch_size=64, num_workers=2)
# after: enough workers, batches prepared ahead
loader = DataLoader(ds, batch_size=64, num_workers=8, prefetch_factor=4, persistent_workers=True, pin_memory=True)
```""",
    "waiting for I/O (files, pipes, sockets)": """The host thread that launches the GPU's work waits for I/O: reading
or writing files, pipes or sockets in the loop.

- Read ahead in DataLoader workers (`num_workers`, `prefetch_factor`), or memory-map the data set.
- Data on slow or remote storage: stage it on local disk or in memory before training.
- Checkpoints and logs: write them from another thread or process (`torch.distributed.checkpoint.async_save`).

```python
# before: each step reads its batch from disk in the training loop
x = torch.load(f"batch_{i}.pt")
# after: workers read ahead
loader = DataLoader(FileDataset(paths), num_workers=8, prefetch_factor=4, persistent_workers=True)
```""",
    "waiting for a child process": """The host thread that launches the GPU's work waits for a child process
(`subprocess.run`, `os.system`) in the loop: run it asynchronously (`subprocess.Popen`) or less often.

```python
# before
subprocess.run(["rsync", ckpt, remote])
# after
subprocess.Popen(["rsync", ckpt, remote])
```""",
}


JIT_ADVICE = """The host compiles and loads GPU code while the GPU waits: a JIT compiler (Numba's `@cuda.jit`, CuPy's
`RawKernel`/`ElementwiseKernel`, NVRTC, Triton, `torch.compile`) builds the kernel at its first call, and the
driver links and loads the module before the first launch.

- Cache what is compiled: Numba `@cuda.jit(cache=True)`, CuPy's kernel cache (`CUPY_CACHE_DIR`), Triton's and
  Inductor's caches on a persistent disk; with NVRTC, keep the compiled cubin and load it with `cuModuleLoadData`.
- Compile ahead or warm up outside the timed loop: call each kernel once with the real types and shapes
  before measuring (Numba: an explicit signature, `@cuda.jit("void(float32[:, :], ...)")`, compiles at import).
- Avoid recompiles: the same dtypes, shapes and launch signatures every call.

```python
# before: compiled at the first call, inside the timed region
@cuda.jit
def matmul(a, b, c): ...
# after: compiled once and cached on disk; warmed up before timing
@cuda.jit(cache=True)
def matmul(a, b, c): ...
matmul[blocks, threads](a, b, c); cuda.synchronize()   # warm-up
```"""
JIT_SHARE = 0.5   # the longest stretches' time that ends in module loads before the finding names JIT compilation


def _jit(stretches) -> tuple[float, list] | None:
    """(host time of the longest stretches after which the host linked and loaded JIT-compiled code before it next
    gave the GPU work, those calls by name), when those stretches hold JIT_SHARE of the stretches' time."""
    total = sum(s.duration_ns for s in stretches)
    loading = [s for s in stretches if s.jit_calls]
    loading_ns = float(sum(s.duration_ns for s in loading))
    if not total or loading_ns < JIT_SHARE * total:
        return None
    first: dict = {}   # stretches before one call that gives the GPU work saw the same loads (the later ones a
    for stretch in sorted(loading, key=lambda s: s.start_ns):   # part of the earlier's): each load counted once
        first.setdefault(stretch.next_work_ns if stretch.next_work_ns is not None else ("alone", stretch.start_ns),
                         stretch)
    calls: dict[str, ApiCall] = {}
    for stretch in first.values():
        for call in stretch.jit_calls:
            seen = calls.get(call.name)
            calls[call.name] = call if seen is None else replace(seen, calls=seen.calls + call.calls,
                                                                 total_ns=seen.total_ns + call.total_ns)
    return loading_ns, sorted(calls.values(), key=lambda c: -c.total_ns)


@dataclass
class BlockingCalls:
    """The launching threads' calls of one OS function that block, over the longest stretches."""
    name: str
    kind: str
    calls: int = 0
    overlap_ns: float = 0


def _kind(name: str) -> str | None:
    base = name.removesuffix("64")
    return next((kind for kind, names in BLOCKING if base in names), None)


def _blocked(stretches) -> tuple[float, list[dict]] | None:
    """Of the longest stretches, the share of time in which every thread that launches the GPU's work sat in an
    OS runtime call (the stretches' `blocked_ns`), and those threads' blocking calls, longest first. None when
    the stretches do not say (OS runtime calls not traced, or not split by thread)."""
    known = [s for s in stretches if s.blocked_ns is not None]
    total = sum(s.duration_ns for s in known)
    if not total:
        return None
    calls: dict[str, dict] = {}
    for stretch in known:
        for call in stretch.thread_os_calls:
            kind = _kind(call.name)
            if kind is None:
                continue
            entry = calls.setdefault(call.name, BlockingCalls(call.name, kind))
            entry.calls += call.calls
            entry.overlap_ns += call.overlap_ns
    return sum(min(s.blocked_ns, s.duration_ns) for s in known) / total, \
        sorted(calls.values(), key=lambda c: -c.overlap_ns)


# A stretch that lies between the step ranges still ends at the next step's first launch, inside its range
# (augment_w0: 40-80 us of 83-90 ms stretches); bookkeeping inside a step gives most of its stretch there
# (item_sync_heavy_host: the stretches span two ranges, in_steps over half of them)
OUTSIDE_STEPS_AT_MOST = 0.05


def _between_steps(timeline, stretches) -> str:
    """Where the steps are NVTX ranges and the longest stretches lie outside them (OUTSIDE_STEPS_AT_MOST): the host's time is the
    loop's code between its steps (a DataLoader's next batch is made there, before the step's range opens), not
    the step's own code, which is where a user looks first."""
    steps = getattr(timeline, "steps", None)
    if not stretches or steps is None or not steps.count or not steps.name or \
            any(s.in_steps_ns is None for s in stretches):
        return ""
    inside = sum(s.in_steps_ns for s in stretches) / sum(s.duration_ns for s in stretches)
    if inside > OUTSIDE_STEPS_AT_MOST:
        return ""
    longest = f"longest stretch ({stretches[0].own_time_ns / 1e6:.1f} ms) lies" if len(stretches) == 1 else \
        f"{len(stretches)} longest stretches ({stretches[-1].own_time_ns / 1e6:.1f} to {stretches[0].own_time_ns / 1e6:.1f} ms) lie"
    return (f"; its {longest} outside the '{steps.name}' ranges: in the loop's code between steps (where the next "
            "batch is fetched, for one), not in a step's")


def _longest_alone(timeline, stretches, idle_ns: float) -> str:
    """The longest stretch, where no NVTX range or step places it and it is a large part of the time
    (host_data.NAMED_RANGE_SHARE of the median step, or of the window without steps): one stretch of cudf's 212 ms of
    host code in a 425 ms window is the place to look, said nowhere before. Where the export has NVTX ranges, that
    none lies around it says where the user's ranges are missing."""
    top = stretches[0] if stretches else None
    whole = _step_or_window(timeline)
    if top is None or not whole:
        return ""
    of = "a median step" if timeline.steps is not None and timeline.steps.median_ns else "the window"
    if top.own_time_ns < host_data.NAMED_RANGE_SHARE * whole:
        return _longest_few(timeline, stretches, idle_ns, whole, of)
    outside = ", with no NVTX range around it" if timeline.ranges else ""
    if top.in_steps_ns is not None and top.in_steps_ns >= 0.5 * top.duration_ns and timeline.steps.name:
        # in the step ranges, across two of them (blind_hostmetrics: 99.5% inside, past step 21's end by 6.7 us)
        outside = f", inside the '{timeline.steps.name}' ranges"
    if top.own_time_ns >= 0.95 * idle_ns:   # dev_suite: its 3.4 ms, 14% of the window, is one stretch
        return f"; all of it one stretch of {top.own_time_ns / 1e6:.1f} ms{outside}"
    return f"; longest stretch {top.own_time_ns / 1e6:.1f} ms ({top.own_time_ns / whole:.0%} of {of}){outside}"


# The longest stretches without an NVTX range said together where none alone is a tenth of the time (NAMED_RANGE_SHARE)
# but they hold half the host's time or more: quasiben's cudf-groupby, 8.2, 7.7 and 7.6 ms of a 102 ms window's 37 ms
# of host code, read with no place at all (a user read)
FEW_STRETCHES, FEW_SHARE = 3, 0.5


def _longest_few(timeline, stretches, idle_ns: float, whole: float, of: str) -> str:
    """The few longest stretches outside any NVTX range and the steps (FEW_STRETCHES), where together they are
    NAMED_RANGE_SHARE of the time and FEW_SHARE of the host's: the places to look, though none alone is large."""
    few = list(takewhile(lambda s: not s.nvtx_range and not (s.in_steps_ns and s.in_steps_ns >= 0.5 * s.duration_ns),
                         stretches[:FEW_STRETCHES]))
    held = sum(s.own_time_ns for s in few)
    if len(few) < 2 or not idle_ns or held < host_data.NAMED_RANGE_SHARE * whole or held < FEW_SHARE * idle_ns:
        return ""
    times = [f"{s.own_time_ns / 1e6:.1f}" for s in few]
    listed = f"{', '.join(times[:-1])} and {times[-1]} ms"
    outside = ", with no NVTX range around them" if timeline.ranges else ""
    return f"; its {len(few)} longest stretches {listed} ({held / idle_ns:.0%} of it, {held / whole:.0%} of {of}){outside}"


def _spread(timeline, stretches) -> bool:
    """Whether the host's time lies in short gaps across the steps: its longest stretch (first runs left out) under
    SPREAD_SHARE of the median step. Only with steps: a window without them has no unit to measure a gap by."""
    if not stretches or timeline.steps is None or not timeline.steps.median_ns:
        return False
    return max(s.own_time_ns for s in stretches) < SPREAD_SHARE * timeline.steps.median_ns


def _step_or_window(timeline) -> float:
    """The median step, or the window where there are no steps."""
    return (timeline.steps.median_ns if timeline.steps is not None and timeline.steps.median_ns
            else timeline.summary.span_ns) or 0


def _step_end_lead(timeline) -> str:
    """Where the host ends a step LATE_START_SHARE of a median step or more after its last launch and the step's GPU
    work (normalize.steps: Steps.host_tail_ns), the host's time is the step's own end, not its input: the advice
    starts there (blind70_reviews: gc.collect() at the end of every step, 246 ms of a 291 ms
    step after the optimizer's launches; the DataLoader it led with was not the cause)."""
    steps = getattr(timeline, "steps", None)
    tail = getattr(steps, "host_tail_ns", None) if steps is not None else None
    if tail is None or not steps.median_ns or tail < LATE_START_SHARE * steps.median_ns:
        return ""
    after = "its last launch" if inference_steps(timeline.work_analysis) else "the optimizer step"
    return (f"The host's time lies at the end of each step: it ends a step {duration_text(tail)} after its last "
            f"launch and the step's GPU work ({tail / steps.median_ns:.0%} of a median step). "
            f"Look first at the loop's own code after {after} (logging, metrics, checkpoints, evaluation, "
            "housekeeping such as `gc.collect()` or `torch.cuda.empty_cache()`), not at its input.\n\n")


# After a step-end lead (_step_end_lead), in place of a PyTorch training loop's ADVICE: the input pipeline's bullet and
# DataLoader example contradicted the lead's "not at its input" (blind80_gccollect, a user read), and the report does
# not read the host's own code, so it names the tools that do
STEP_END_ADVICE = """Take the work at the step's end off the critical path.

- Housekeeping calls in the loop: a `gc.collect()` walks every Python object the process holds (an in-memory data
  set of lists and dicts: hundreds of ms), each step; leave collection to Python (`gc.freeze()` once the data set is
  built keeps it out of every collection), or collect every N steps. `torch.cuda.empty_cache()` likewise.
- Python bookkeeping (metrics, logging, conversions of results to host objects): do it every N steps, or on
  data that stays on the GPU.
- Checkpoints and evaluation: every N steps, the checkpoint written by a background thread from a copy.
- Which code it is, this report cannot say: the export times CUDA and OS calls, not the host's own code. A sampling
  profiler names it: nsys with Python sampling (`--sample=process-tree --python-sampling=true`), or py-spy
  (`py-spy record -- python train.py`).

```python
# before: bookkeeping or housekeeping after every step
for step, batch in enumerate(loader):
    loss = train_step(batch)
    log_metrics(loss.item(), model)        # or gc.collect(), a checkpoint, an evaluation
# after: every N steps
for step, batch in enumerate(loader):
    loss = train_step(batch)
    if step % 100 == 0:
        log_metrics(loss.item(), model)
```"""


def _lead_and_advice(timeline, stretches, data: bool, advice: str, framework: str, after_reads: str,
                     before_uploads: str) -> str:
    """The advice with the lead that says where the host's time lies (the reads it works on, the step's end, the
    inputs it builds); a PyTorch training loop whose time lies at the step's end gets STEP_END_ADVICE."""
    lead = ((host_data.range_lead(timeline, stretches) if not data else "") or
            (after_reads if advice == framework and _bulk_reads(timeline) else ""))
    if not lead and advice == framework:
        step_end = _step_end_lead(timeline)
        if step_end:
            return step_end + (STEP_END_ADVICE if framework is ADVICE else advice)
    return (lead or (before_uploads if advice == framework else "") or
            (after_reads if advice == framework else "")) + advice


# The longest stretches that end in a copy to the GPU, from this share of their time, lead the advice with the inputs
# the host builds (blind74_replaybuf: each of the 5 longest, 2.5-2.6 ms of a 11.9 ms step, ends in a 13.8 MiB pageable
# upload of a batch NumPy gathered from a replay buffer on the host, while the advice said the time was spread)
BEFORE_UPLOADS_SHARE = 0.5


def _before_uploads_lead(stretches) -> str:
    """Where the longest stretches end, BEFORE_UPLOADS_SHARE of their time or more, in the host's copy of data to the
    GPU (HostStretch.upload_after_bytes), the host builds the steps' inputs: the advice starts there."""
    uploading = [s for s in stretches if s.upload_after_bytes]
    total = sum(s.own_time_ns for s in stretches)
    if not uploading or sum(s.own_time_ns for s in uploading) < BEFORE_UPLOADS_SHARE * total:
        return ""
    size = naturalsize(sum(s.upload_after_bytes for s in uploading) / len(uploading))
    return (f"The host's longest stretches end in copies to the GPU ({len(uploading)} of the {len(stretches)} "
            f"longest, {size} a copy on average): the host builds the steps' inputs on the CPU, then uploads them. "
            "Data that fits in GPU memory can stay there: move the dataset (or replay buffer) to the GPU once and "
            "select each batch there (indices from `torch.randint(..., device='cuda')`, indexing on the GPU). Else "
            "build the batches ahead of the step in DataLoader workers (`num_workers`, `pin_memory=True`) so that the "
            "next one is ready, pinned, when a step starts.\n\n")


# The host's time after the steps' copies to the host, up to its next launch, from this share of the finding's time
# leads the advice: the host works on what it read back (blind_hostmetrics: 95 of its 120 ms after the 2 waits a step
# of a `.tolist()` and its copy, a Python loop over the tokens, while the advice said the time was spread over launches)
AFTER_READS_SHARE = 0.5
# ... where the host works this long after each wait on average: longer than any launch path (PyTorch's: 10-40 us), so
# code of the program's own (blind_hostmetrics: 238 us a wait); blind61's anomaly mode waits 336 times a step and goes
# on 43 us after each, its per-operation cost (SPREAD_ADVICE's)
AFTER_READ_NS = 100_000


# Copies to the host of this many bytes or more each, on average, bring outputs back, not values to test (a loss, a
# flag): the host's work after them is on those outputs (blind72_segeval: 84 MiB of logits a step, then NumPy's argmax
# over them, 85 ms a step, at the end of the step, where a scalar `.item()` then `gc.collect()` is the step's own end)
BULK_READ_BYTES = 1 << 20


def _bulk_reads(timeline) -> tuple[float, float] | None:
    """(mean bytes a copy, their ns in all) of the window's copies to the host where they average BULK_READ_BYTES or
    more, else None."""
    copies = getattr(timeline, "copies", None)
    rows = [r for r in (copies.by_kind if copies is not None else ()) if r.copy_kind == READ_BACK_KIND]
    count = sum(r.copies for r in rows)
    mean = sum(r.bytes for r in rows) / count if count else 0.0
    return (float(mean), float(sum(r.duration_ns for r in rows))) if mean >= BULK_READ_BYTES else None


def _after_reads_lead(timeline, idle_ns: float) -> str:
    """Where the host, after the steps' copies to the host (a wait for the GPU each), works AFTER_READS_SHARE or more
    of this finding's time before it launches again (model.Syncs: each wait's relaunch gap), AFTER_READ_NS or more
    after each on average, the advice starts there; where the copies bring outputs back (BULK_READ_BYTES), it says
    to reduce them on the GPU first."""
    syncs, steps = getattr(timeline, "syncs", None), getattr(timeline, "steps", None)
    if syncs is None or not idle_ns or steps is None or not steps.count:
        return ""
    # the waits of copies to the host (Syncs.implicit), values read back: not an event's or a whole-device sync,
    # after which the host goes on with the loop's own code (time53_gpt: 1.5 ms a step after its timing's event
    # syncs, which its fix did not save, the loop being host-bound); the GPU's idle after each, up to its next work
    reads = syncs.implicit
    gap = sum(row.relaunch_gap_ns for row in reads)
    if not gap or gap < AFTER_READS_SHARE * idle_ns or gap < AFTER_READ_NS * sum(row.calls for row in reads):
        return ""
    names = ", ".join(dict.fromkeys(code_span(base_name(row.name)) for row in reads[:2] if row.name)) or "copies"
    bulk = _bulk_reads(timeline)
    size = f", {naturalsize(bulk[0])} a copy on average" if bulk else ""
    whole = ("" if not bulk else
             " Copies this large bring data back whole: outputs reduced on the GPU first leave a small result to copy "
             "(`out.argmax(1).cpu()` before NumPy, `torch.bincount` for a confusion matrix, `topk`), and the copies, "
             f"{duration_text(bulk[1] / steps.count)} a step themselves, shrink with it (this "
             "finding counts the host's time only).")
    return (f"The host's time follows the steps' reads from the GPU ({names} to the host, which waits for it{size}): "
            f"after them it works "
            f"{duration_text(gap / steps.count)} a step before its next launch, while nothing is queued. That is code "
            "on values read back to the host (`.item()`, `.tolist()`, `.cpu()`, then Python or NumPy over them: "
            "metrics, logging, post-processing, decisions), or state the host keeps and updates (embedding tables or "
            "an optimizer on the CPU, their gradients read back each step). Keep such values and state on the GPU, "
            f"read metrics every N steps (accumulated in GPU tensors), or do that work after the next step's launches."
            f"{whole}\n\n")


# Host-activity classes whose idle time a wider cause claims (checks/program/_claims.py) where its finding speaks
CLASS_CAUSES = {allocator_churn.CLASS: allocator_churn.ID, pinned_alloc_churn.CLASS: pinned_alloc_churn.ID}


# The CUDA calls inside the longest stretches are noted where they hold this share of the stretches' time (a 15 us
# copy call beside 0.6 ms of numba-jit's host code changes no reading; workflow's cudaFree is 70% of them, dev_infer's module loads 37%)
CALLS_NOTED_SHARE = 0.1


def _calls_inside_note(stretches, claimed: dict, left_out: tuple = ()) -> list[str]:
    """Where CUDA calls of a host-activity class lie inside the longest stretches, how much, and whose finding
    prices their time: the stretches are ranked and their time stated by what those calls leave."""
    inside: dict[str, list] = {}
    for stretch in stretches:
        for entry in stretch.cuda_classes:
            total = inside.setdefault(entry.name, [0.0, entry.top_calls])
            total[0] += entry.overlap_ns
    if not inside or sum(ns for ns, _ in inside.values()) < CALLS_NOTED_SHARE * sum(s.duration_ns for s in stretches):
        return []
    named = []
    for name, (ns, calls) in sorted(inside.items(), key=lambda item: -item[1][0]):
        cause = CLASS_CAUSES.get(name)
        whose = (f"{cause}'s time, not this finding's" if cause in claimed else
                 "part of the module loads' idle time this finding leaves out (start-up: the next note)" if name in left_out
                 else "within this finding's time")
        named.append(f"{name} calls {duration_text(ns)}" + (f" ({', '.join(calls)})" if calls else "") + f", {whose}")
    return [f"the longest stretches without GPU work also held CUDA calls, which are not the host's own code: "
            f"{'; '.join(named)}; each stretch is ranked and stated by the time those calls leave (own_ns)"]


# The host-activity class of CUDA modules loaded at a kernel's first launch (host_activity.csv), and the share of this
# finding's idle time under such loads past which they are left out of it and said so (launch-overhead's rule)
MODULE_LOAD_CLASS, MODULE_LOADS_NOTED = "module-load", 0.1


def _module_loads(timeline, idle_ns: float, claimed: dict) -> tuple[float, tuple]:
    """The idle time of the part under CUDA module loads (cuLibraryLoadData, ...: a library's or the program's kernels
    loaded at their first launch), with the class's longest calls, where no build in every step claims them
    (runtime-compilation): loaded once a process, they are start-up, which taking the host's code off the critical
    path does not save. dev_infer: 54.7 ms of its 131.8 ms, as its bf16 and batched phases first ran their kernels."""
    activity = getattr(timeline, "host_activity", None)
    entry = activity.by_class(MODULE_LOAD_CLASS) if activity is not None else None
    if entry is None or runtime_compilation.ID in claimed:
        return 0.0, ()
    loads = min(idle_ns, float(entry.idle_by_part.get(BUDGET_PART, 0.0)))
    return (loads, entry.top_calls) if loads >= MODULE_LOADS_NOTED * idle_ns else (0.0, ())


def _first_runs(timeline, idle_ns: float) -> tuple[float, list]:
    """The host's own time in the longest stretches that a kernel's first run in the capture ended
    (HostStretch.first_kernel), and those stretches, where they hold MODULE_LOADS_NOTED of the idle time: set-up for
    code the process had not run yet (a library choosing a kernel for a new shape), paid once, like the module
    loads beside it. A stretch followed by loading run-time compiled code is JIT's (_jit), not counted here. Only in a
    steady window (start-up left out): where the window is the whole capture of a script that runs once (quasiben's
    workflow), each kernel's first run is its only one, and the host's code before it is the program's work."""
    if timeline.window is None or timeline.window.kind != "steady":
        return 0.0, []
    first = [s for s in timeline.host_stretches if s.first_kernel and not s.jit_calls]
    ns = min(idle_ns, sum(s.own_time_ns for s in first))
    return (ns, first) if first and ns >= MODULE_LOADS_NOTED * idle_ns else (0.0, [])


def run(timeline, limits) -> Finding | None:
    idle_ns, share = unclaimed_part(timeline, BUDGET_PART)
    claimed = claims_by_cause(timeline)   # (the wider causes' claims: whose finding prices a class of calls)
    loads_ns, load_calls = _module_loads(timeline, idle_ns, claimed)
    loads_share = share * loads_ns / idle_ns if loads_ns else 0.0
    share -= loads_share
    idle_ns -= loads_ns
    first_ns, first_runs = _first_runs(timeline, idle_ns)
    first_share = share * first_ns / idle_ns if first_ns else 0.0
    share -= first_share
    idle_ns -= first_ns
    if share < limits.min_idle_share:
        return None
    step_text = per_step_phrase(timeline, BUDGET_PART, idle_ns, share)
    once = [f"{loads_share:.0%} under CUDA module loads at kernels' first launch" if loads_ns else "",
            f"{first_share:.0%} in set-up before kernels' first runs" if first_ns else ""]
    if any(once):
        step_text += f", and {' and '.join(filter(None, once))} (start-up, not saved)"
    # the stretches a first run ended are start-up, and those that end in a build of every step's code
    # runtime-compilation's (kv57: each stretch ends in the step's cuLibraryLoadData): the place to look is the others
    builds = runtime_compilation.ID in claimed
    built = [s for s in timeline.host_stretches[:5] if builds and (s.jit_calls or s.module_loads_after)]
    stretches = [s for s in timeline.host_stretches[:5] if not any(s is f for f in first_runs) and
                 not any(s is b for b in built)]
    where = ""
    if stretches and stretches[0].nvtx_range:
        where = (f"; longest stretch {stretches[0].own_time_ns / 1e6:.1f} ms in range "
                 f"'{stretches[0].nvtx_path or stretches[0].nvtx_range}'")
    else:
        where = _between_steps(timeline, stretches) or _longest_alone(timeline, stretches, idle_ns)
    blocked = _blocked(stretches)
    # (the data's handling, where host-data speaks of it, is its finding's: the leads on the reads and uploads go)
    data = host_data.ID in claimed
    after_reads = _after_reads_lead(timeline, idle_ns) if not data else ""
    # (time after the reads is work on them, however short each stretch: not the cost of issuing operations)
    framework = _framework_advice(timeline)
    before_uploads = _before_uploads_lead(stretches) if not data else ""
    advice = SPREAD_ADVICE if _spread(timeline, stretches) and not after_reads and not before_uploads else framework
    notes = _calls_inside_note(stretches, claimed, left_out=(MODULE_LOAD_CLASS,) if loads_ns else ())
    extra = {}
    if loads_ns:
        names = ", ".join(name for name, _, _ in load_calls[:2])
        notes.append(f"leaves out {duration_text(loads_ns)} of GPU idle under CUDA module loads ({names}: host-activity "
                     "class module-load), kernels loaded at their first launch, once a process: a run of more steps "
                     "pays them once, and a warm-up pass over each code path before the timed work, or "
                     "CUDA_MODULE_LOADING=EAGER, moves them to start-up")
    if built:
        notes.append(f"{len(built)} of the {min(5, len(timeline.host_stretches))} longest stretches end in GPU code "
                     "loaded before the host's next launch: the builds of every step that runtime-compilation prices, "
                     "not this finding's")
    if first_ns:
        names = ", ".join(sorted({s.first_kernel for s in first_runs})[:3])
        notes.append(f"leaves out {duration_text(first_ns)} of host time in {plural(len(first_runs), 'stretch')} that "
                     f"ended at a kernel's first run in the capture ({names}): set-up for code the process had not run "
                     "yet (a library choosing and loading a kernel for a new shape, a first dispatch), paid once; a "
                     "warm-up pass over each shape before the timed work moves it to start-up")
        first_run = {"first_run_ns": evidence(first_ns, unit="ns")}
    if blocked is not None:
        blocked_share, calls = blocked
        extra = {"blocked_share": evidence(blocked_share, limits.min_blocked_share, unit="ratio"),
                 "blocking_calls": [asdict(c) for c in calls[:5]]}
        measured = len([s for s in stretches if s.blocked_ns is not None])
        counted = "longest stretch" if measured == 1 else f"{measured} longest stretches"
        if blocked_share >= limits.min_blocked_share and calls:
            kind = calls[0].kind
            names = ", ".join(c.name for c in calls[:3] if c.kind == kind and c.overlap_ns >= 0.1 * calls[0].overlap_ns)
            gil = kind == LOCK_KIND and lock_shared(timeline)   # the interpreter lock's waits, which host-wait names
            said = "Python's interpreter lock, as host-wait's finding says" if gil else kind
            title = (f"The GPU waits on its host {share:.0%} of the window{step_text}, and the host thread that launches "
                     f"its work is blocked, not computing: in {names} ({said}) {blocked_share:.0%} of its {counted}"
                     f"{where}")
            advice = (GIL_LEAD if gil else "") + BLOCKED_ADVICE[kind]
        else:
            title = f"The GPU waits while the host runs its own code {share:.0%} of the window{step_text}{where}"
            how_long = "under 1%" if blocked_share < 0.005 else f"only {blocked_share:.0%}"   # (never "only 0%")
            notes.append(f"the threads that launch the GPU's work were all blocked in OS calls {how_long} of the "
                         f"{counted}: they compute; OS calls of other threads (os_calls) are not the GPU's wait")
    else:
        title = f"The GPU waits while the host runs its own code {share:.0%} of the window{step_text}{where}"
    jit = _jit(stretches) if blocked is None or blocked[0] < limits.min_blocked_share else None
    if jit is not None:
        jit_ns, loads = jit
        load_ns = sum(c.total_ns for c in loads)
        names = ", ".join(c.name if c.calls == 1 else plural(c.calls, f"{c.name} call") for c in loads[:4])
        title = (f"JIT compilation / module loading: the GPU waits {share:.0%} of the window{step_text} while the host "
                 f"runs its own code, {jit_ns / 1e6:.1f} ms of it in stretches followed by loading run-time compiled "
                 f"GPU code ({names}: {load_ns / 1e6:.2f} ms) before the next launch{where}")
        advice = JIT_ADVICE
        extra["jit_host_ns"] = evidence(jit_ns, unit="ns")
        extra["jit_calls"] = plain(tuple(loads))
        notes.append(f"measured: {jit_ns / 1e6:.1f} ms of host time without CUDA calls, each stretch followed by the "
                     f"calls that link and load run-time compiled code ({names}) before the host next gave the GPU work, and {load_ns / 1e6:.2f} ms in "
                     "those calls; that the host time was compiling is read from the loads that follow it (the export "
                     "does not sample the host's code)")
    finding = Finding(
        check=ID,
        title=title,
        estimated_speedup=share,
        evidence={"idle_host_share": evidence(share, limits.min_idle_share, unit="ratio"),
                  "idle_host_ns": evidence(idle_ns, unit="ns"),
                  **({"module_load_ns": evidence(loads_ns, unit="ns")} if loads_ns else {}),
                  **(first_run if first_ns else {}),
                  **extra,
                  "longest_stretches": plain(tuple(timeline.host_stretches[:5]))},
        # (outputs read back lead before the step's end they lie at: the work is on them)
        # (a step's late end first: the stretch at its end runs up to the next step's upload, blind70_reviews's)
        advice=_lead_and_advice(timeline, stretches, data, advice, framework, after_reads, before_uploads),
        notes=notes,
    )
    finding.estimated_savings_ns = idle_ns
    # the profiler's own work per recorded op lands between launches: host time of the trace, not the program
    profiler_caveat(finding, timeline.launches, timeline, "the gaps between a step's launches")
    return finding

