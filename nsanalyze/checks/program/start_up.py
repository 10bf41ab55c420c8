"""Start-up and warm-up that cost as much as the steady steps the report measures.

## What it detects
The part of the capture the steady window leaves out before it (`timeline.left_out`: process start-up
from the first CUDA call, and slow warm-up steps), when it is a large share of the capture up to the
window's end, with what the host did in it: its CUDA calls by host-activity class (module loading,
allocation, copies, launches) and the rest, host code (imports, building the model, loading data).

## Why it is slow
A short job (a CI benchmark, an evaluation, a notebook cell) pays its start-up every time it runs:
loading CUDA modules and libraries, compiling or autotuning kernels, importing frameworks, reading
weights. Steps that run fast do not help when the run is mostly start-up.

## Example
```python
import torch, torchvision            # seconds of imports and CUDA context creation
model = build_model().cuda()         # weights read and copied, modules loaded
torch.backends.cudnn.benchmark = True   # autotuning in the first steps
for step in range(20): train_step()  # the 20 steps take less than the start-up
```

## Instead
```python
# keep the process (a server, persistent workers) and run more work per start-up;
# CUDA_MODULE_LOADING=LAZY (default since CUDA 12.2) loads kernels on first use;
# cache compiled kernels across runs (TORCHINDUCTOR_FX_GRAPH_CACHE=1, a persistent Triton cache)
```

## Known problems
Start-up is paid once per process: its saving is not part of the window's time, so the finding is
information beside the ranked ones (no savings), for runs whose start-up rivals their steps. Host code
before the first CUDA call is not in the export.

## Options
- `min_capture_share`: the left-out part's share of the capture up to the window's end.
- `min_left_out_ns`: the left-out part's length.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.normalize.model import plain

ID = "start-up"
ADVICE = """Pay start-up less often, or make it shorter.

- Run more work per process: keep a server or worker process alive between jobs, batch evaluations.
- CUDA modules: `CUDA_MODULE_LOADING=LAZY` (the default from CUDA 12.2) loads kernels on first use.
- Compiled kernels: keep compile caches across runs (`TORCHINDUCTOR_FX_GRAPH_CACHE=1`, a persistent
  `TRITON_CACHE_DIR`); autotune once and save the choice.
- Weights and data: load with memory maps (`safetensors`), straight to the GPU, in the background.

```python
# before: each benchmark run starts a new process
for config in configs: subprocess.run(["python", "bench.py", config])
# after: one process runs them all
for config in configs: bench(config)
```"""

CHECK = Check(
    id=ID,
    name="program.startup",
    title="Start-up and warm-up cost as much as the steps",
    section="busy",
    requires=(),  # left_out: none where the window is not the steady steps (nothing left out to judge)
    thresholds={
        "min_capture_share": Threshold(0.5, "when start-up is half of the run or more, the run is its start-up"),
        "min_left_out_ns": Threshold(1e9, "a second of start-up is worth knowing where it goes"),
    },
    speedup_model="none within the window: start-up is paid once per process, outside the steady steps",
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)

WORDS = {"module-load": "CUDA module loading", "jit": "JIT compilation / module loading",
         "allocator": "device memory allocation",
         "pinned-alloc": "pinned host allocation", "copy": "synchronous copies", "copy-async": "copies",
         "context": "CUDA context creation", "sync": "synchronizations", "launch": "kernel launches"}


def run(timeline, limits) -> Finding | None:
    left = timeline.left_out
    if left is None or left.ns < limits.min_left_out_ns or left.capture_share < limits.min_capture_share:
        return None
    calls = [c for c in left.classes if c.host_ns >= 0.01 * left.ns]
    named = ", ".join(f"{WORDS.get(c.class_, c.class_)} {c.host_ns / 1e9:.2f} s ({c.top_call})" for c in calls[:3])
    in_calls = sum(c.host_ns for c in left.classes)
    warm = (f"; {plural(left.warmup_steps, 'warm-up step')} "
            f"{left.warmup_ns / 1e9:.2f} s of it") if left.warmup_steps else ""
    # (a window without steps is the steady loop read off its launches: no "steps" to name)
    steady, end = ("steady steps", "last step") if timeline.steps is not None and timeline.steps.count else \
        ("steady window", "window's end")
    # (counted from the program's first CUDA call: the imports before it are not in it, those after it are; a user
    # read took "imports" for the 3.5 s before blind68_gpt's first call, which the figure leaves out)
    own = ("" if in_calls >= 0.995 * left.ns else
           " and otherwise in its own code (data and model set-up, imports made after its first CUDA call)")
    finding = Finding(
        check=ID,
        title=(f"Start-up before the {steady} takes {left.ns / 1e9:.2f} s, {left.capture_share:.0%} of the run up "
               f"to the {end}: " + (f"{named}; " if named else "") +
               f"the GPU busy {left.gpu_busy_ns / left.ns:.0%} of it, the host in CUDA calls "
               f"{in_calls / left.ns:.0%}{own}{warm}"),
        estimated_speedup=0.0,
        evidence={"left_out_ns": evidence(left.ns, limits.min_left_out_ns, unit="ns"),
                  "capture_share": evidence(left.capture_share, limits.min_capture_share, unit="ratio"),
                  "gpu_busy_ns": evidence(left.gpu_busy_ns, unit="ns"),
                  "calls_by_class": plain(left.classes)},
        advice=ADVICE,
        notes=["start-up is paid once per process and lies outside the window: no savings within it are promised",
               "start-up is counted from the program's first CUDA call (or GPU work): the interpreter's start and the "
               "imports before that call are not in it"],
    )
    return finding
