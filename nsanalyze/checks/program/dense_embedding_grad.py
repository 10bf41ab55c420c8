"""Embedding tables updated whole every step (dense gradients).

## What it detects
A training step with PyTorch's dense embedding backward (`compute_grad_weight`, `sum_and_scatter`,
`embedding_backward_feature_kernel`: normalize.embedding_grads) in which the optimizer's kernels (the work split's
`optimizer` role) and the passes over the dense embedding gradients (the fill that zeroes each before its backward,
a fill on the stream a few kernels before the backward kernel; the add that sums a table's two gradients, right
after its second backward) take a large share of the GPU's kernel time, measured on the replayed steps around the
median one.

## Why it is slow
`nn.Embedding`'s gradient is dense by default: every step allocates and zero-fills a tensor as large as the whole
table, sums the looked-up rows' gradients into it, and the optimizer then reads and writes every row of the table,
its gradient and its state, although a step looked up a few thousand of its rows. Each is a pass through memory
over the table: a 2,000,000 x 300 fp32 table is 2.4 GB a pass. The forward and backward touch the looked-up rows
only, so these passes grow with the vocabulary, not with the batch.

## Example
```python
emb_in, emb_out = nn.Embedding(2_000_000, 300), nn.Embedding(2_000_000, 300)
opt = torch.optim.SGD(list(emb_in.parameters()) + list(emb_out.parameters()), lr=0.025)
```

## Instead
```python
emb_in = nn.Embedding(2_000_000, 300, sparse=True)    # the gradient holds the looked-up rows only
emb_out = nn.Embedding(2_000_000, 300, sparse=True)
opt = torch.optim.SGD(list(emb_in.parameters()) + list(emb_out.parameters()), lr=0.025)  # or SparseAdam
```

## Known problems
The saving is the replay of the steps without the optimizer's kernels and the gradients' passes (the change
`remove_kernels` of the roles `optimizer` and `embedding-grad`), capped by their time. It counts the optimizer
whole: the update of the model's dense layers stays after the change, a small part where the check speaks (those
layers' forward and backward would then outweigh it). A sparse update's own kernels (an `index_add` of the looked-up
rows) are not counted: the finding says so. Measured on blind70_word2vec (made after that pair showed the check
missing, so no blind test): 9.65 ms a step against 9.61 ms saved by `sparse=True` (the first pair). A table trained by a
custom kernel (TorchRec's fused embedding optimizers, FBGEMM) has no such kernels: the check says nothing there.

## Options
- `min_share`: the optimizer's and the fills' share of the GPU's kernel time in the replayed steps before the check
  speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural
from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize.embedding_grads import says_backward
from nsanalyze.numbers import duration_text

ID = "dense-embedding-grad"
BUDGET_PART = "gpu_compute"   # the passes are GPU time
ROLES = ("optimizer", cp.EMBEDDING_GRAD)
ADVICE = """Give the large embedding tables sparse gradients: a step then writes and updates only the rows it looked up.

- `nn.Embedding(num, dim, sparse=True)` (`nn.EmbeddingBag(..., sparse=True)`), with an optimizer that takes sparse
  gradients: `torch.optim.SGD`, `torch.optim.SparseAdam`, `torch.optim.Adagrad`. Keep the dense layers in a
  second optimizer (AdamW over the rest of the parameters).
- Weight decay and momentum over a whole table densify its update again; per-row schemes (row-wise Adagrad) do not.
- Recommendation-scale tables: TorchRec's `EmbeddingBagCollection` with a fused optimizer updates the rows inside
  the backward.

```python
# before: every step zero-fills each table-sized gradient and updates every row
emb = nn.Embedding(vocab, dim)
# after: the gradient holds the looked-up rows; SGD adds to those rows alone
emb = nn.Embedding(vocab, dim, sparse=True)
```"""

CHECK = Check(
    id=ID,
    name="program.work.dense_embedding_grad",
    title="Embedding tables updated whole every step (dense gradients)",
    section="work",
    requires=("work",),
    thresholds={"min_share": Threshold(
        0.2, "an optimizer reads and writes each parameter a few times a step, and a model's forward and backward "
             "do six operations per parameter and sample: where every parameter is used, the update is a few percent "
             "of the kernel time (blind70_reviews, a BERT-base with a 30,522-row table: 4.2%); a fifth or more means "
             "most of the parameters are rows the step did not look up (blind70_word2vec_base1, two 2,000,000-row "
             "tables: 79%, of which the optimizer 42 points)")},
    speedup_model=("the replay of the steps without the optimizer's kernels and the dense gradients' fills and sums, "
                   "capped by their time"),
    budget_part=BUDGET_PART,
    change={"remove_kernels": ROLES},
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    block = getattr(timeline, "step_block", None)
    steps = getattr(timeline, "steps", None)
    if analysis is None or block is None or steps is None or not steps.count:
        return None
    backward = [k for k in analysis.by_kernel if says_backward((k.name, k.demangled))]
    if not backward:
        return None
    graph = block.graph
    gradient = cp.role_mask(graph, (cp.EMBEDDING_GRAD,))   # found once: the passes' time and count read it
    optimizer_ns = cp.kernel_ns_per_step(block, ("optimizer",))
    gradient_ns = cp.ops_ns_per_step(block, gradient)
    kernel_ns = cp.kernel_ns_per_step(block, ("*",))
    share = (optimizer_ns + gradient_ns) / kernel_ns if kernel_ns else 0.0
    if not optimizer_ns or share < limits.min_share:
        return None
    passes = float((gradient & (graph.o_call >= 0)).sum()) / max(len(graph.step_first_op), 1)
    finding = Finding(
        check=ID,
        title=f"Embedding tables are updated whole every step: the optimizer's passes ({duration_text(optimizer_ns)} a "
              f"step) and {plural(round(passes), 'pass')} a step over dense embedding gradients as large as their "
              f"tables (zero fills and sums, {duration_text(gradient_ns)}) take {share:.0%} of the GPU's kernel time, "
              "while the backward writes only the rows the step looked up; sparse gradients "
              "(`nn.Embedding(..., sparse=True)`) update those rows alone",
        estimated_speedup=0.0,
        evidence={"update_share": evidence(share, limits.min_share, unit="ratio", compare=">="),
                  "optimizer_ns_per_step": evidence(optimizer_ns, unit="ns"),
                  "gradient_pass_ns_per_step": evidence(gradient_ns, unit="ns"),
                  "gradient_passes_per_step": evidence(passes),
                  "kernel_ns_per_step": evidence(kernel_ns, unit="ns"),
                  "kernels": [{"name": k.name, "duration_ns": k.ns, "launches": k.launches} for k in backward[:5]]},
        advice=ADVICE,
        notes=["not counted: a sparse update's own kernels (an index_add of the looked-up rows); the optimizer is "
               "counted whole, the dense layers' update with it"],
    )
    finding.estimated_savings_ns = (optimizer_ns + gradient_ns) * steps.count
    return finding
