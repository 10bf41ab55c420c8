"""The backward runs more often than the forward: one backward pass per loss where one pass of their sum would do.

## What it detects
A layer stack whose forward block runs in one run of layers a step and whose backward blocks run in more
(normalize.recompute._repeats_in_step: a backward block that recurs in more runs than the forward's block), in most of
the replayed steps around the median step. This is what `loss_a.backward(retain_graph=True)`, then `loss_b.backward()`
does with losses that share a model: each call runs the shared layers' backward again.

## Why it is slow
The backward of a shared trunk is about two thirds of a training step's work. Backpropagating each loss apart runs
it once per loss; summing the losses first (weighted as wanted) gives the same gradients in one pass.

## Example
```python
for w, loss in zip(weights, (loss_cls, loss_attr, loss_depth)):
    (w * loss).backward(retain_graph=True)      # the shared encoder's backward, once per task
```

## Instead
```python
total = sum(w * loss for w, loss in zip(weights, (loss_cls, loss_attr, loss_depth)))
total.backward()                                 # one backward pass, the same gradients
```

## Known problems
Found by the order of kernels: a step that runs several forward passes and one backward per forward (gradient
accumulation) is not told, nor a program whose gradients per loss are needed apart (gradient surgery such as PCGrad,
per-task gradient norms), which runs the passes on purpose: the finding cannot tell that from the profile.

## Options
- `min_window_share`: the extra passes' share of the window before the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, step_count
from nsanalyze.checks.program.autotuning import in_replayed_steps
from nsanalyze.numbers import duration_text

ID = "repeated-backward"
BUDGET_PART = "gpu_compute"
ADVICE = """Backpropagate once: sum the losses, then call backward on the sum.

- Several losses on one model (multi-task heads, auxiliary losses, regularizers): `(w1 * l1 + w2 * l2).backward()`
  gives the gradients of `l1.backward(retain_graph=True); l2.backward()` in one pass through the shared layers.
- With gradient scaling (`torch.amp.GradScaler`), scale the summed loss once.
- Where each loss's gradients are needed apart (gradient surgery, per-task norms), compute them for the last shared
  layer only (`torch.autograd.grad(loss_i, shared_output)`) and backpropagate the combination once.

```python
# before: the shared trunk's backward once per loss
for loss in losses:
    loss.backward(retain_graph=True)
# after: one backward pass
torch.stack(losses).sum().backward()
```"""

CHECK = Check(
    id=ID,
    name="program.work.repeated_backward",
    title="The backward runs more often than the forward",
    section="work",
    requires=(),
    optional=("repeated_backward", "budget"),
    thresholds={
        "min_window_share": Threshold(0.03, "under 3% of the window the extra passes are noise"),
    },
    speedup_model=("the replay of the steps without the backward passes beyond one per forward pass (their kernels "
                   "and launches): what the step saves once the other work and the host set its pace; capped by "
                   "their time"),
    budget_part=BUDGET_PART,
    change={"remove_kernels": ("repeated-backward",)},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    repeated = getattr(timeline, "repeated_backward", None)
    steps = step_count(timeline) or 0
    span = timeline.summary.span_ns or 0
    if repeated is None or not steps or not span or \
            repeated.kernel_ns_per_step * steps < limits.min_window_share * span:
        return None
    in_steps = in_replayed_steps(repeated.steps_with_repeats, repeated.steps)
    finding = Finding(
        check=ID,
        title=(f"The backward runs more often than the forward in {in_steps}: {repeated.backward_passes} backward "
               f"passes through a {repeated.layers}-layer stack for {repeated.forward_passes} forward "
               f"pass{'es' if repeated.forward_passes != 1 else ''} (one backward per loss?); the passes beyond one "
               f"per forward take {repeated.kernels_per_step:.0f} kernels and "
               f"{duration_text(repeated.kernel_ns_per_step)} of GPU time a step"),
        estimated_speedup=0.0,
        evidence={"forward_passes": evidence(repeated.forward_passes),
                  "backward_passes": evidence(repeated.backward_passes),
                  "layers": evidence(repeated.layers),
                  "extra_kernels_per_step": evidence(repeated.kernels_per_step),
                  "extra_ns_per_step": evidence(repeated.kernel_ns_per_step, unit="ns"),
                  "window_share": evidence(min(1.0, repeated.kernel_ns_per_step * steps / span),
                                           limits.min_window_share, unit="ratio")},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = repeated.kernel_ns_per_step * steps
    return finding
