"""GPU code built while the loop runs: a kernel compiled and loaded in every step, for shapes that change.

## What it detects
Code loads (the host-activity table's `module-load` and `jit` classes: `cuLibraryLoadData`, `cuModuleLoadData`, ...)
in most of the replayed steps around the median step (normalize.critical_path.code_builds), an autotuner's aside
(autotuning's). A program that builds its kernels once loads them before the loop; one that loads in every step
builds code for each step's shapes: cuDNN's runtime-fused kernels (compiled by NVRTC) for a new sequence length,
Triton kernels for a new specialization, `torch.compile` recompiling for a new shape.

## Why it is slow
Compiling a kernel takes milliseconds to seconds of host time, and no CUDA call records it: in the profile it is
the host's own code just before the load, often with file reads (the compiler's headers). While the host
compiles, it launches nothing, and the GPU idles once its queue is empty.

## Example
```python
cache = torch.empty(B, H, max_len, D, device="cuda", dtype=torch.bfloat16)
for t in range(new_tokens):
    cache[:, :, t] = kv
    out = F.scaled_dot_product_attention(q, cache[:, :, :t + 1], cache[:, :, :t + 1])  # a new length each token
```

## Instead
```python
from torch.nn.attention import SDPBackend, sdpa_kernel

with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):   # built ahead for any length
    out = F.scaled_dot_product_attention(q, cache[:, :, :t + 1], cache[:, :, :t + 1])
```

## Known problems
The build is read as the host's time before each load beyond a typical launch path: the program's own code that
happens to precede a load counts with it. The replay keeps the built kernels' GPU time as measured; code built
once for a fixed or bucketed shape, or precompiled kernels, may run faster or slower. A module loaded lazily at
a kernel's first use (`CUDA_MODULE_LOADING=LAZY`) inside the steady steps counts as a build too.

## Options
- `min_loads`: code loads a step before the check speaks.
- `min_step_share`: the replayed steps that hold them.
- `min_window_share`: the saving's share of the window.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.checks.program.autotuning import (host_cause_saving, in_most_steps, in_replayed_steps,
                                                 replay_claims)
from nsanalyze.numbers import duration_text

ID = "runtime-compilation"
ADVICE = """Build the GPU code once: keep the shapes it is built for from changing every step.

- Attention over a KV cache that grows a token a step: cuDNN's SDPA compiles a fused kernel for each new length.
  Pick backends built ahead for any length (`torch.nn.attention.sdpa_kernel([SDPBackend.FLASH_ATTENTION,
  SDPBackend.EFFICIENT_ATTENTION])`, or `torch.backends.cuda.enable_cudnn_sdp(False)`), or attend over a
  fixed-length cache with a mask.
- Inputs whose length changes every batch: pad them to a few bucket lengths, so each shape is built once.
- `torch.compile` recompiling for new shapes (`TORCH_LOGS=recompiles` lists them): `torch.compile(dynamic=True)`
  or `torch._dynamo.mark_dynamic(x, dim)`.
- Kernels compiled at run time by your own code (NVRTC, CuPy's `RawKernel`, Triton): compile once and cache them
  by what changes the code, not by a value that changes every call.

```python
# before: a kernel compiled for each new KV length
out = F.scaled_dot_product_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])
# after: precompiled kernels for any length
with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
    out = F.scaled_dot_product_attention(q, k_cache[:, :, :t + 1], v_cache[:, :, :t + 1])
```"""

CHECK = Check(
    id=ID,
    name="program.runtime_compilation",
    title="GPU code is compiled and loaded in every step",
    section="busy",
    requires=(),
    optional=("code_builds", "budget"),
    thresholds={
        "min_loads": Threshold(1, "a program that builds its code once loads nothing in its steady steps"),
        "min_step_share": Threshold(0.5, "in fewer steps a build is a step that stands out (slow-steps)"),
        "min_window_share": Threshold(0.03, "under 3% of the window the builds are noise"),
    },
    speedup_model=("the replay of the steps without the builds: the code's loads gone with the host's time before "
                   "each beyond a typical launch path (critical_path.beyond_path), the kernels they load kept; capped "
                   "by the time those loads and builds take"),
    change={"unbuild": True},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def built(timeline, limits):
    """(the steps' code builds, what removing them saves over the window) where this check speaks, else None."""
    builds = getattr(timeline, "code_builds", None)
    if builds is None or not in_most_steps(timeline, builds, builds.steps_with_builds, builds.builds_per_step,
                                           limits.min_loads, limits):
        return None
    saving = host_cause_saving(timeline, CHECK.change, builds.host_ns_per_step, builds.step_ns,
                               limits.min_window_share)
    return (builds, saving) if saving is not None else None


def claimed_parts(timeline, limits, taken: dict[str, float]) -> dict[str, float]:
    """What this check's finding claims of the budget's parts, within what the causes before it leave: no kernels,
    its saving from the idle parts (autotuning.replay_claims)."""
    found = built(timeline, limits)
    if found is None or not timeline.budget:
        return {}
    return replay_claims(timeline, taken, found[1], 0.0, 0.0)


def _loads_per_step(builds) -> float | None:
    """Of the module-load class's calls a step, the loads (cuLibraryLoadData, cuModuleLoadData: a name with `Load`),
    not the look-ups beside them (cuLibraryGetKernel); None where the calls name no load."""
    total = sum(count for _, count in builds.calls)
    loads = sum(count for name, count in builds.calls if "Load" in name)
    return builds.builds_per_step * loads / total if total and loads else None


def _loads_text(builds) -> str:
    """`1 module load a step (cuLibraryLoadData, with cuLibraryGetKernel)`: the class's calls a step told as loads
    and the look-ups beside them (kv57: one load and one look-up a step read as "2 module-load calls", a user read)."""
    loads = _loads_per_step(builds)
    if loads is None:
        names = "/".join(name for name, _ in builds.calls[:2])
        return f"{plural(round(builds.builds_per_step), 'module-load call')} a step ({names})"
    loaded = [name for name, _ in builds.calls if "Load" in name]
    others = [name for name, _ in builds.calls if "Load" not in name][:2]
    return (f"{plural(round(loads), 'module load')} a step ({', '.join(loaded[:2])}"
            + (f", with {', '.join(others)}" if others else "") + ")")


def run(timeline, limits) -> Finding | None:
    found = built(timeline, limits)
    if found is None:
        return None
    builds, saving = found
    steps, span = timeline.steps.count, timeline.summary.span_ns
    in_steps = in_replayed_steps(builds.steps_with_builds, builds.steps)
    per_step = saving / steps
    finding = Finding(
        check=ID,
        # the calls are the host-activity table's module-load class: a library's load and the kernel's look-up in it
        # (kv57: one cuLibraryLoadData and one cuLibraryGetKernel a step, which read as "2 loads"); the host time is
        # the builds' and the loads' together, what the saving comes from (it read "62.8 ms ... saves 62.9 ms")
        title=(f"GPU code is compiled and loaded in {in_steps}: "
               f"{_loads_text(builds)} after "
               f"{duration_text(builds.host_ns_per_step)} of host time building and loading it; without the builds a "
               f"step saves {duration_text(per_step)} of those steps' {duration_text(builds.step_ns)} mean"),
        estimated_speedup=min(1.0, saving / span),
        evidence={"module_calls_per_step": evidence(builds.builds_per_step, limits.min_loads, compare=">="),
                  **({"loads_per_step": evidence(_loads_per_step(builds))} if _loads_per_step(builds) else {}),
                  "step_share": evidence(builds.steps_with_builds / builds.steps, limits.min_step_share,
                                         unit="ratio", compare=">="),
                  "window_share": evidence(min(1.0, saving / span), limits.min_window_share, unit="ratio", compare=">="),
                  "build_host_ns_per_step": evidence(builds.host_ns_per_step, unit="ns"),
                  "load_ns_per_step": evidence(builds.load_ns_per_step, unit="ns"),
                  "calls": [{"name": name, "loads": count} for name, count in builds.calls[:5]]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = saving
    return finding
