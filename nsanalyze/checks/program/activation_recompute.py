"""The backward runs the forward again: activation checkpointing (recomputation) in every step.

## What it detects
A layer stack whose backward blocks each open with the forward block's kernels, in order (normalize.recompute: a
block of kernels repeated once per layer in the forward, and a later repeated block that holds it), in most of the
replayed steps around the median step. This is what `torch.utils.checkpoint` (Hugging Face's
`gradient_checkpointing_enable()`, Lightning's and DeepSpeed's activation checkpointing, FSDP's
`apply_activation_checkpointing`) does: it keeps a layer's input only and runs the layer's forward again when the
backward needs its activations.

## Why it is slow
Recomputation trades time for memory: each checkpointed layer's forward runs twice a step, about a third more work
for a transformer. Where the activations would fit, the trade buys nothing: it is often left on from a larger model,
a longer sequence or a smaller GPU.

## Example
```python
class Block(nn.Module):
    def forward(self, x):
        return checkpoint(self._forward, x, use_reentrant=False)   # every block, although memory is plenty
```

## Instead
```python
class Block(nn.Module):
    def forward(self, x):
        return self._forward(x)        # no recompute where the activations fit; or checkpoint every other block
```

## Known problems
The export does not tell whether the activations would fit without checkpointing (nsys records device memory with
`--cuda-memory-usage=true`; `torch.cuda.max_memory_allocated()` tells it in the program): the finding says what the
recomputation costs, not that memory allows turning it off. Found by the order of kernels: a backward block that runs
a few forward kernels in the same order by design (an attention backward that recomputes its softmax inside one
kernel is one kernel, not found) is not counted; a model whose layers differ in their kernels has no repeated block.

## Options
- `min_window_share`: the replay's saving as a share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, step_count
from nsanalyze.checks.program.autotuning import in_replayed_steps
from nsanalyze.numbers import duration_text

ID = "activation-recompute"
BUDGET_PART = "gpu_compute"
ADVICE = """Recompute less where memory allows: each checkpointed layer runs its forward twice a step.

- Measure the peak without it (`torch.cuda.max_memory_allocated()` on a few steps with checkpointing off); where it
  fits, turn checkpointing off (`model.gradient_checkpointing_disable()` for Hugging Face models).
- Where it does not fit everywhere, checkpoint fewer layers (every other block, or only the largest), or keep the
  costly operations' outputs and recompute only the cheap ones (PyTorch's selective activation checkpointing:
  `torch.utils.checkpoint.create_selective_checkpoint_contexts`).
- Where it must stay and no checkpointed layer draws random numbers (no dropout), `preserve_rng_state=False` skips
  the RNG state's stash and restore at each checkpoint, host work the replay does not take away.
- A larger batch bought by checkpointing may cost more time than the batch saves: compare the time per sample.

```python
# before: every block's forward runs again in the backward
x = checkpoint(block, x, use_reentrant=False)
# after: no recomputation where the activations fit
x = block(x)
```"""

CHECK = Check(
    id=ID,
    name="program.work.activation_recompute",
    title="The backward runs the forward again (activation checkpointing)",
    section="work",
    requires=(),
    optional=("recomputation", "budget"),
    thresholds={
        "min_window_share": Threshold(0.03, "under 3% of the window the recomputation is noise"),
    },
    speedup_model=("the replay of the steps without the kernels run again (and their launches): what the step saves "
                   "once the other work and the host set its pace; capped by their time"),
    budget_part=BUDGET_PART,
    change={"remove_kernels": ("recompute",)},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    rerun = getattr(timeline, "recomputation", None)
    steps = step_count(timeline) or 0
    span = timeline.summary.span_ns or 0
    if rerun is None or not steps or not span or rerun.kernel_ns_per_step * steps < limits.min_window_share * span:
        return None
    in_steps = in_replayed_steps(rerun.steps_with_recompute, rerun.steps)
    finding = Finding(
        check=ID,
        title=(f"The backward runs the forward again in {in_steps}: {rerun.layers} layers' blocks each rerun "
               f"{rerun.rerun_kernels} of the forward block's {rerun.forward_kernels} kernels (activation "
               f"checkpointing), {rerun.kernels_per_step:.0f} kernels and {duration_text(rerun.kernel_ns_per_step)} "
               f"of GPU time a step"),
        estimated_speedup=0.0,
        evidence={"layers": evidence(rerun.layers),
                  "rerun_kernels_per_step": evidence(rerun.kernels_per_step),
                  "rerun_ns_per_step": evidence(rerun.kernel_ns_per_step, unit="ns"),
                  "window_share": evidence(min(1.0, rerun.kernel_ns_per_step * steps / span),
                                           limits.min_window_share, unit="ratio")},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = rerun.kernel_ns_per_step * steps
    finding.notes.append("the export does not say whether the activations fit without checkpointing: measure the "
                         "peak memory with it off before turning it off")
    return finding
