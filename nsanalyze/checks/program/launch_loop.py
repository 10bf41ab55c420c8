"""A loop in the program launches the same few kernels many times in a row every step, each shorter than its
launch: the step waits on the loop's launches.

## What it detects
Within the steps around the median step, a run of one short motif of kernels (at most 12: `mul` and
`add`; a GEMM, its bias and activation) launched 16 times in a row or more, or of a body of up to 24 kernels
launched 64 times or more (more than a model has layers: a recurrent cell stepped over a sequence), in the order
the host launched them (normalize/launch_loops.py), whose launch paths on the host (the framework's dispatch and the launch call,
each) take over `min_launch_share` of the median step and longer than the loop's kernels take on the GPU. Such a
run is a loop in the program's source over items: parameter tensors (an EMA, gradient clipping or weight decay
written per parameter), task heads, embedding tables, samples, chunks, layers of one width, or the frames of a
sequence (`nn.LSTMCell` or a hand-written recurrence stepped in Python). Runs over the
same number of items (within 2%, or one) are one loop, or loops over one list: the norms and then the scaling
of clipping by hand, a loop over heads and its backward pass. The finding speaks for the group whose launch
paths take most host time and names the others beside it. The optimizer's kernels are left to
unfused-optimizer where its ranges or names tell them; where the export has neither, a loop whose motif holds
Adam's update (lerp, addcmul, sqrt, addcdiv) is named as such.

## Why it is slow
Each launch costs the host tens of microseconds of Python, dispatch and driver time, while an element-wise
kernel over one parameter runs for a few. A loop over 150 tensors with two operations each spends 5 ms of host
time a step to give the GPU 0.7 ms of work: the GPU waits for the loop, and every step pays it.

## Example
```python
for p_ema, p in zip(ema.parameters(), model.parameters()):   # 2 launches a tensor
    p_ema.mul_(decay).add_(p, alpha=1 - decay)
heads_out = [head(x) for head in self.heads]                  # a GEMM and its bias a head
```

## Instead
```python
torch._foreach_lerp_(ema_params, params, 1 - decay)           # a few launches for all tensors
heads_out = torch.einsum("bd,hdk->bhk", x, self.head_weights)  # one batched product for all heads
```

## Known problems
The saving is the replay of the steps with the group's operations launched as one pass (their launch paths
gone, their GPU time kept; `nsanalyze whatif --fuse loop` does so for every group), capped by the host time of
those launch paths; other groups are other changes, not counted. Loops over two different lists of the same
length form one group, even where two changes remove them. A
foreach or batched op does the same work in a few launches; its kernels may be faster (fewer, larger): not
counted. A loop over layers that depend on each other cannot be batched: there the change is torch.compile
(fewer kernels a layer) or a CUDA graph of the loop, which removes the launches too. A motif that holds a matrix
product and a normalization or an attention is read as such a layer, and the title and advice say so; a layer
without either (a plain MLP of GEMMs and activations) reads as a loop over items. The finding names the motif and
its count so that the reader can tell which loop it is. Only a motif repeated in a row is seen: a
loop whose body launches different kernels from one item to the next (shapes that pick other GEMM kernels) is
not. Graphing the whole step (launch-overhead) removes these launches too: where both speak, this finding's
saving is counted within launch-overhead's.

## Options
- `min_launch_share`: a group's launch paths a step, as a share of the median step, before the check speaks.
"""

import statistics

import numpy as np

from nsanalyze.checks.base import Check, Finding, Threshold, evidence
from nsanalyze.checks.program._claims import unclaimed_part
from nsanalyze.normalize import critical_path as cp
from nsanalyze.normalize.work import role_of
from nsanalyze.numbers import duration_text

ID = "launch-loop"
MAX_LISTED = 4   # loops named in the note, the largest first (the evidence lists every one)
BUDGET_PART = "idle_launch"     # the GPU's wait on the loop's launches
LOOP = (cp.LOOP,)
# The element-wise operations of Adam's and AdamW's update, as PyTorch's kernels name their functors (lerp_scalar
# for the first moment, addcmul for the second, sqrt, addcdiv for the step): a loop whose motif holds three of them
# is an optimizer written per parameter (foreach=False, or by hand), whatever ranges the export has.
ADAM_WORDS = ("lerp", "addcmul", "sqrt", "addcdiv")
# PyTorch's fused cell kernels (nn.LSTMCell, nn.GRUCell): a loop whose motif holds one is a recurrence stepped over a
# sequence in Python, which the library's layer over the whole sequence (cuDNN) replaces
CELL_WORDS = ("lstm_cell", "gru_cell")
# What the title asks for where the motif says nothing more: each kind of loop's change (ADVICE's list)
CHANGE_TEXT = "make {it} a few launches: foreach or batched ops over items, torch.compile or a CUDA graph over layers"
LOOP_ADVICE = """Launch the loop's work as a few operations over all its items.

- A loop over tensors (an EMA of the weights, gradient clipping, weight decay or a hand-written update, per
  parameter): the `torch._foreach_*` ops (`_foreach_lerp_`, `_foreach_mul_`, `_foreach_add_`,
  `_foreach_norm`) take lists and launch a few kernels for all of them;
  `torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)` clips them so.
- A loop over heads, tables, samples or chunks of the same shape: stack their weights or inputs and make
  one batched call (`torch.bmm`, `torch.einsum`, one `nn.Embedding` with offsets, `torch.func.vmap`).
- An optimizer's update per parameter (`foreach=False`): `fused=True` (`torch.optim.AdamW(params,
  fused=True)`) updates every parameter in one kernel.
- A recurrence stepped over a sequence in Python (`nn.LSTMCell`, `nn.GRUCell` per frame): the layer over the
  whole sequence (`nn.LSTM`, `nn.GRU`: cuDNN runs it in a few kernels a layer) with the same weights.
- A loop over layers that depend on each other: `torch.compile` fuses each layer's element-wise kernels;
  a CUDA graph of the loop (`torch.cuda.graph`, `torch.compile(mode="reduce-overhead")`) launches it once."""

# The advice's example, by what the loop's kernels say it is (a user read: blind58's LSTMCell loop and 48 embedding
# tables were shown an EMA over parameters); the loop over tensors where they say nothing more
TENSOR_LOOP_EXAMPLE = """```python
# before: two launches for each of the model's parameters, every step
for p_ema, p in zip(ema.parameters(), model.parameters()):
    p_ema.mul_(decay).add_(p, alpha=1 - decay)
# after: a few launches for all of them
torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - decay)
```"""
CELL_EXAMPLE = """```python
# before: the cell stepped over the sequence in Python, a dozen launches a frame and as many in the backward
cell = nn.LSTMCell(n_in, n_hidden).cuda()
for t in range(x.size(0)):
    h, c = cell(x[t], (h, c))
# after: the layer runs the whole sequence (cuDNN: a few kernels a layer), the same weights
lstm = nn.LSTM(n_in, n_hidden).cuda()     # load the cell's weight_ih/weight_hh/bias_ih/bias_hh into weight_*_l0
out, (h, c) = lstm(x, (h[None], c[None]))
```"""
ADAM_EXAMPLE = """```python
# before: the update launched per parameter
opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)
# after: one fused kernel updates every parameter
opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
```"""
TABLES_EXAMPLE = """```python
# before: one lookup (and its backward) per table, every step
out = torch.cat([table(ids[:, i]) for i, table in enumerate(tables)], dim=1)
# after: the tables stacked in one embedding, each table's ids offset by its first row: one lookup for all
offsets = torch.tensor([0] + sizes[:-1], device=ids.device).cumsum(0)
out = stacked(ids + offsets).flatten(1)   # stacked = nn.Embedding(sum(sizes), dim), the tables' rows in order
```"""
# The roles (normalize/kernel_roles.csv) of a network layer's kernels: a motif that holds a matrix product and one of
# a normalization or an attention is a layer, and the loop a stack of layers that depend on each other, which no
# foreach or batched op can take (blind77_pollwait's 24 encoder layers, told to use foreach ops, a user read)
LAYER_PRODUCT_ROLES = ("matmul_tensor", "matmul_simt")
LAYER_ROLES = ("normalization", "attention_fused", "attention_unfused")
LAYER_WORDS = {"matmul_tensor": "matrix products", "matmul_simt": "matrix products", "normalization": "normalization",
               "attention_fused": "attention", "attention_unfused": "attention"}
LAYERS_TEXT = ("{whose} kernels are a network layer's ({roles}): a stack of layers, each on the one before, which no "
               "batched op takes; torch.compile (fewer kernels a layer) or a CUDA graph of the loop")
LAYERS_ADVICE = """Launch the stack of layers in fewer, larger pieces: each layer works on the one before's output, so no
foreach or batched op can take them together.

- `torch.compile` of the model (or of the layer) fuses each layer's element-wise kernels (its normalization,
  activation, residual adds and casts) into a few, so each layer launches fewer kernels.
- A CUDA graph of the loop (`torch.cuda.graph`, `torch.compile(mode="reduce-overhead")`) launches the whole stack
  at once; its input shapes must stay the same from step to step."""
LAYERS_EXAMPLE = """```python
# before: each layer's dozen kernels launched one by one, every step
for layer in self.layers:
    x = layer(x)
# after: the stack compiled (fused element-wise work), or captured once as a CUDA graph and replayed
self.layers = torch.compile(self.layers)                 # or torch.compile(model, mode="reduce-overhead")
```"""
# Words of an embedding lookup's kernels (PyTorch's embedding backward, index_select's indexSelect kernels)
TABLE_WORDS = ("embedding", "indexselect")
ADVICE = LOOP_ADVICE + "\n\n" + TENSOR_LOOP_EXAMPLE

CHECK = Check(
    id=ID,
    name="program.launch.loop",
    title="A loop launches the same few kernels many times a step",
    section="busy",
    requires=("step_block", "steps", "budget"),
    thresholds={
        "min_launch_share": Threshold(
            0.05, "the loops' launch paths over 5% of the median step are worth one flag, as an optimizer loop's are "
                  "(unfused-optimizer): blind_emaloop_base's EMA over 152 tensors takes 5.5 ms of its 43.6 ms step "
                  "(13%), blind_heads_base's 64 heads 10.7 ms of 47.1 ms (23%)"),
    },
    speedup_model=("the replay of the steps with the loops' operations launched as one pass (their launch paths gone, "
                   "their GPU time kept), capped by those paths' host time, drawn from idle_launch"),
    budget_part=BUDGET_PART,
    change={"fuse": LOOP},   # the replay change priced (program.py): whatif --fuse loop
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    block, steps = timeline.step_block, timeline.steps
    if block is None or steps is None or not steps.count or not steps.median_ns or not block.graph.loops:
        return None
    replayed = max(len(block.graph.step_first_op), 1)
    loops = _typical_loops(block, replayed)
    groups = _groups(block, loops)
    costly = [g for g in groups if g["path_ns"] >= limits.min_launch_share * steps.median_ns
              and g["path_ns"] > g["kernel_ns"]]
    if not costly:
        return None
    group = max(costly, key=lambda g: g["path_ns"])   # the finding's change: this group's loops launched fused
    path_ns, kernel_ns, mine = group["path_ns"], group["kernel_ns"], group["loops"]
    share = path_ns / steps.median_ns
    launches = sum(loop["launches_per_step"] for loop in mine)
    idle_ns, _ = unclaimed_part(timeline, BUDGET_PART)
    adam = max(([word for word in ADAM_WORDS if any(word in name.lower() for name in loop["motif"])]
                for loop in mine), key=len)
    if len(mine) == 1:
        loop = mine[0]
        body = "one kernel" if loop["period"] == 1 else f"{loop['period']} kernels"
        what = (f"A loop launches the same {body} {loop['repeats']:,} times in a row every step "
                f"({launches:,.0f} launches)")
    else:
        per_item = sum(loop["period"] for loop in mine)
        low, high = min(loop["repeats"] for loop in mine), max(loop["repeats"] for loop in mine)
        what = (f"Loops over the same {low:,}{f'-{high:,}' if high > low else ''} items launch {per_item} kernels an "
                "item every step "
                f"({launches:,.0f} launches in {len(mine)} runs)")
    cell = next((word for word in CELL_WORDS for loop in mine if any(word in name.lower() for name in loop["motif"])),
                None)
    layer = _layer_roles(mine)
    change = (f"{'its' if len(mine) == 1 else 'their'} kernels are Adam's update ({', '.join(adam)}): an optimizer "
              "stepped per parameter, use fused=True" if len(adam) >= 3 else
              f"{'its' if len(mine) == 1 else 'their'} kernels hold a recurrent cell's ({cell}): a sequence stepped "
              "frame by frame in Python, use the layer over the whole sequence (nn.LSTM, nn.GRU: cuDNN)" if cell else
              LAYERS_TEXT.format(whose="its" if len(mine) == 1 else "their", roles=", ".join(layer)) if layer else
              CHANGE_TEXT.format(it="it" if len(mine) == 1 else "them"))
    tables = any(word in name.lower() for loop in mine for name in loop["motif"] for word in TABLE_WORDS)
    example = (ADAM_EXAMPLE if len(adam) >= 3 else CELL_EXAMPLE if cell else LAYERS_EXAMPLE if layer
               else TABLES_EXAMPLE if tables else TENSOR_LOOP_EXAMPLE)
    others = [g for g in groups if g is not group]
    beside = (f"; {len(others)} other loop{'s' if len(others) > 1 else ''} beside it "
              f"({duration_text(sum(g['path_ns'] for g in others))} of launch paths a step, not counted here)"
              if others else "")
    finding = Finding(
        check=ID,
        title=f"{what}: their launch paths take {duration_text(path_ns)} of host time a step, {share:.0%} of the "
              f"median step, for {duration_text(kernel_ns)} of GPU work; {change}{beside}",
        estimated_speedup=0.0,
        evidence={"launch_path_ns_per_step": evidence(path_ns, unit="ns"),
                  "launch_path_share": evidence(share, limits.min_launch_share, unit="ratio", compare=">="),
                  "loop_kernel_ns_per_step": evidence(kernel_ns, unit="ns"),
                  "launches_per_step": evidence(launches),
                  "loops": loops},
        advice=f"{LAYERS_ADVICE if layer else LOOP_ADVICE}\n\n{example}",
        notes=[f"on the {replayed} consecutive steps replayed around the median one, a motif repeated in a row is a loop over "
               f"{'layers' if layer else 'items'} in the program's source: " + "; ".join(_loop_text(loop) for loop in mine[:MAX_LISTED])
               + (f"; and {len(mine) - MAX_LISTED} more" if len(mine) > MAX_LISTED else "")],
    )
    # whatif replays as many of the window's steps as fit its event budget, the report these around the median: on
    # blind_gradclip 66 steps against 8, 5.3 against 5.68 ms a step
    finding.notes.append(f"replayed alone by: nsanalyze whatif PROFILE --fuse {cp.loop_role(group['group'])} "
                         f"(--fuse {cp.LOOP} fuses every group of loops)"
                         + (f"; whatif replays more of the window's {steps.count} steps than these {replayed}, so its "
                            "figure may differ a little" if steps.count > replayed else ""))
    if others:
        finding.notes.append("other loops, over other items (another change; not in this finding's saving): "
                             + "; ".join(_loop_text(loop) for g in others for loop in g["loops"][:MAX_LISTED]))
    finding.estimated_savings_ns = min(path_ns * steps.count, idle_ns)   # the replay prices it (rank)
    finding.change = {"fuse": (cp.loop_role(group["group"]),)}
    # the loop's kernels name its change (fused=True, nn.LSTM, one embedding): a smaller change than a graph of
    # the step, which ranks first where it saves as much (rank.within_wider_changes); a stack of layers is told to
    # compile or graph them, no smaller (opt_fused's MLP)
    finding.names_its_change = example not in (TENSOR_LOOP_EXAMPLE, LAYERS_EXAMPLE)
    return finding


def _groups(block, loops: list[dict]) -> list[dict]:
    """The loops by group (loops over the same items, normalize.launch_loops.group_loops), each with its launch
    paths' host time and GPU time a step."""
    out = []
    for group in sorted({loop["group"] for loop in loops}):
        role = (cp.loop_role(group),)
        out.append({"group": group, "loops": [loop for loop in loops if loop["group"] == group],
                    "path_ns": cp.dropped_host_ns_per_step(block, role),
                    "kernel_ns": cp.kernel_ns_per_step(block, role)})
    return out


def _layer_roles(loops: list[dict]) -> list[str]:
    """The roles of a layer's kernels in the loops' motifs (a matrix product, and a normalization or an attention:
    LAYER_ROLES), in the order the motif runs them; none where the motifs do not hold both."""
    roles = list(dict.fromkeys(role_of(name) for loop in loops for name in loop["motif"]))
    if not any(r in LAYER_PRODUCT_ROLES for r in roles) or not any(r in LAYER_ROLES for r in roles):
        return []
    return list(dict.fromkeys(LAYER_WORDS[r] for r in roles if r in LAYER_WORDS))


def _loop_text(loop: dict) -> str:
    runs = "once a step" if loop["runs_per_step"] == 1 else f"{loop['runs_per_step']:g} times a step"
    return (f"{' > '.join(loop['motif'])} x {loop['repeats']:,} ({runs}): "
            f"{duration_text(loop['launch_path_ns_per_step'])} of launch paths and "
            f"{duration_text(loop['kernel_ns_per_step'])} of GPU work a step")


def _typical_loops(block, replayed: int) -> list[dict]:
    """The loops by motif: the median run's repeats, runs and launches a step (over the replayed steps), and
    their launch paths' host time and GPU time a step; the most host time first."""
    graph = block.graph
    by_motif: dict[tuple, list] = {}
    for loop in graph.loops:
        by_motif.setdefault(loop.motif, []).append(loop)
    out = []
    for motif, loops in by_motif.items():
        ops = np.zeros(len(graph.o_start), bool)
        for loop in loops:
            ops[loop.ops] = True
        repeats = [loop.repeats for loop in loops]
        out.append({"motif": list(motif), "period": len(motif), "repeats": int(statistics.median_low(repeats)),
                    "group": loops[0].group,
                    "runs_per_step": round(len(loops) / replayed, 2),
                    "launches_per_step": round(len(motif) * sum(repeats) / replayed, 1),
                    "launch_path_ns_per_step": round(cp.ops_host_ns_per_step(block, ops)),
                    "kernel_ns_per_step": round(cp.ops_ns_per_step(block, ops))})
    return sorted(out, key=lambda loop: (-loop["launch_path_ns_per_step"], loop["motif"]))
