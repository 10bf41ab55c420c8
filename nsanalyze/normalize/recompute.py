"""Layer-stack work run again in a step, found in the order of its kernels: the forward rerun in the backward
(activation checkpointing), and the backward run in more passes than the forward (one backward per loss).

A model's layer stack launches the same block of kernels once per layer, in a row: its forward (blind57's GPT: 20
kernels x 12 layers), then its backward, one block per layer (37 kernels x 12). Where the backward's block holds the
forward block's kernels, in order, before its own (55 kernels x 12: 18 of the forward's 20 run again, then the 37),
each layer's forward runs a second time in the step: recomputation, as `torch.utils.checkpoint` does to keep fewer
activations. Found on the block of steps around the median step (normalize.critical_path), a step at a time:
runs of a motif repeated MIN_LAYERS times or more (launch_loops.runs), and a later run whose motif holds the first
MATCH_SHARE of an earlier one's.

Measured on the real nsys exports of fixtures/real (the replayed steps around each one's median step): found in every
step of blind57's checkpointed GPT (both runs), in none of its twins without checkpointing, nor in the transformers,
CNNs, ViTs and MLPs of the others, whose backward blocks share no forward block's opening kernels in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from nsanalyze.normalize.launch_loops import _identities, runs

MIN_LAYERS = 3      # a layer stack: a block repeated this many times in a row or more
MIN_BLOCK = 4       # kernels in a layer's block, at least (a loop over items is launch_loops'; shorter motifs of a
#                     stack's forward and backward would match by chance: add, mul)
MAX_BLOCK = 400     # and at most (a transformer block's backward with its recompute: 55 here; 20-50 usual)
MATCH_SHARE = 0.75  # the backward's block holds at least this share of the forward block's kernels, in order, from
#                     its start (blind57: 18 of 20: the block's last two, its residual add and output, not rerun)
MIN_STEP_SHARE = 0.5   # found in at least this share of the block's steps: a program's, not one step's
# At most this many runs of a step are paired (those covering the most kernels): a layer stack's forward and backward
# runs are among a step's longest (2-4 on the fixtures); a step of thousands of short repeated runs would otherwise
# pair each with each
MAX_STACKS = 32


@dataclass
class Recompute:
    """One step's recomputation: a backward run whose every block opens with the forward block's kernels."""

    step: int            # the block step
    layers: int          # backward blocks that run the forward again
    forward_kernels: int  # kernels in the forward's block
    rerun_kernels: int   # of them, run again in each backward block
    ops: np.ndarray      # the graph's operations run again, in launch order


@dataclass
class RepeatedPass:
    """One step's backward pass through a layer stack run more often than its forward: a stack run whose block recurs
    in more runs than the step's first stack run (its forward) does."""

    step: int
    forward_passes: int  # runs of the forward's block
    passes: int          # backward runs through the stack (runs of its layer count that are not the forward's block)
    layers: int          # blocks in each run
    ops: np.ndarray      # the graph's operations of the runs beyond the forward's count (the last ones), in launch order


def _steps(graph):
    """(step, its kernels in launch order, their identities) for each step of the block: memsets are no layer's work,
    and an autotuner's trials, which repeat a few kernels per candidate, are autotuning's."""
    identity = _identities(graph)
    left_out = np.array([label == "gpu:memset" for label in graph.o_label], dtype=bool)
    if graph.tuning is not None and graph.tuning.any:
        left_out |= graph.tuning.gone
    call_start = np.where(graph.o_call >= 0, graph.c_start[np.maximum(graph.o_call, 0)], graph.o_start)
    for step, ops in enumerate(graph.step_first_op):
        ops = np.asarray(ops, dtype=np.int64)
        kernels = ops[np.lexsort((ops, call_start[ops]))]
        kernels = kernels[~left_out[kernels]]
        if len(kernels) >= 2 * MIN_LAYERS * MIN_BLOCK:
            yield step, kernels, identity[kernels]


def _stacks(ids: np.ndarray) -> list[tuple[int, int, int]]:
    """The runs of a block repeated MIN_LAYERS times or more, of MIN_BLOCK kernels or more, the MAX_STACKS covering the
    most kernels, in the step's order: (first, period, repeats)."""
    found = [r for r in runs(ids, max_period=min(MAX_BLOCK, len(ids) // MIN_LAYERS), min_repeats=MIN_LAYERS)
             if r[1] >= MIN_BLOCK]
    longest = sorted(found, key=lambda r: (-r[1] * r[2], r[0]))[:MAX_STACKS]
    return sorted(longest)   # in the step's order


def _kept(graph, found: list) -> tuple[np.ndarray, list]:
    """The operations' mask of what was found, where found in MIN_STEP_SHARE of the steps (a program's, not one
    step's), and the findings so kept."""
    mask = np.zeros(len(graph.o_start), bool)
    if len({entry.step for entry in found}) < MIN_STEP_SHARE * len(graph.step_first_op):
        return mask, []
    for entry in found:
        mask[entry.ops] = True
    return mask, found


def find(graph) -> tuple[np.ndarray, list[Recompute], np.ndarray, list[RepeatedPass]]:
    """Per operation of the graph, whether it runs forward work again (a bool mask), and the recomputations, step by
    step; per operation, whether it belongs to a backward pass run beyond the forward's count, and those passes step
    by step (_repeats_in_step). Each kept where found in MIN_STEP_SHARE of the steps; a step's runs found once."""
    reruns: list[Recompute] = []
    repeats: list[RepeatedPass] = []
    for step, kernels, ids in _steps(graph):
        stacks = _stacks(ids)
        entry = _in_step(ids, stacks)
        if entry is not None:
            layers, forward, rerun, positions = entry
            reruns.append(Recompute(step, layers, forward, rerun, kernels[positions]))
        entry = _repeats_in_step(ids, stacks)
        if entry is not None:
            forward_passes, backward_passes, layers, positions = entry
            repeats.append(RepeatedPass(step, forward_passes, backward_passes, layers, kernels[positions]))
    return (*_kept(graph, reruns), *_kept(graph, repeats))


def _repeats_in_step(ids: np.ndarray, stacks: list) -> tuple[int, int, int, np.ndarray] | None:
    """(forward passes, backward passes, layers, the positions in `ids` of the passes beyond one per forward pass)
    where a backward block recurs in more runs than the forward's; None where none does. A step that runs its forward
    once and then one backward per loss (`loss_i.backward(retain_graph=True)`) runs its stack's backward block in
    several runs after one forward run (blind58's three task losses: the forward's 22 kernels x 12 layers once, the
    backward's 41 x 12 once and 53 x 12 twice: the first pass writes the gradients, the others add to them); the
    passes beyond one per forward pass are the last ones. Gradient accumulation runs forward and backward alike; an
    encoder and a decoder run each of their blocks once."""
    if len(stacks) < 3:
        return None
    layers_of = stacks[0][2]
    blocks: dict = {}   # a run's block, as the multiset of its kernels (a run may start anywhere in its block)
    for first, period, repeats in stacks:
        if abs(repeats - layers_of) <= 1:
            key = tuple(sorted(ids[first:first + period].tolist()))
            blocks.setdefault(key, []).append((first, period, repeats))
    forward = blocks.get(tuple(sorted(ids[stacks[0][0]:stacks[0][0] + stacks[0][1]].tolist())), [])
    backward = sorted(run for runs_of in blocks.values() if runs_of is not forward for run in runs_of)
    if max((len(r) for r in blocks.values() if r is not forward), default=0) <= len(forward):
        return None   # no backward block recurs more often than the forward's
    extra = backward[len(forward):]   # one backward pass per forward pass; the others, the last runs
    positions = np.concatenate([first + np.arange(period * repeats) for first, period, repeats in extra])
    return len(forward), len(backward), layers_of, positions


def _in_step(ids: np.ndarray, stacks: list) -> tuple[int, int, int, np.ndarray] | None:
    """(backward blocks, forward block's kernels, kernels run again a block, their positions in `ids`) where a run
    of a repeated block (`stacks`, _stacks') holds an earlier run's block from its start; None where no run does."""
    for first, period, _ in stacks:
        probe = max(MIN_BLOCK, int(np.ceil(MATCH_SHARE * period)))
        opening = ids[first:first + probe]
        for later, later_period, later_repeats in stacks:
            # a backward block holds its layer's own backward kernels beside the rerun: a later run of the same block
            # alone (blind58's shared encoder's backward run again per task loss) is the block run again, no rerun
            if later <= first or later_period < period + MIN_BLOCK:
                continue
            motif = ids[later:later + later_period]
            twice = np.concatenate((motif, motif))   # the run may start anywhere in its block
            hits = np.flatnonzero((sliding_window_view(twice, probe)[:later_period] == opening).all(axis=1))
            if not len(hits):
                continue
            offset = int(hits[0])
            length = probe   # as far as the forward block's kernels go on, in order
            while length < period and length < later_period and \
                    twice[offset + length] == ids[first + length]:
                length += 1
            span = later + later_period * later_repeats
            starts = [later + offset + r * later_period for r in range(later_repeats)]
            starts = [start for start in starts if start + length <= span]   # the reruns whole inside the run
            if not starts:
                continue
            positions = np.concatenate([start + np.arange(length) for start in starts])
            return len(starts), period, length, positions
    return None


def _section(block, found: list, ops: np.ndarray, steps_with: str, medians: dict) -> dict:
    """A model section of what a block's steps run again: its steps, the steps that do (under `steps_with`), the median
    of each named attribute over them, and the operations' count and GPU time a step."""
    graph = block.graph
    steps = len(graph.step_first_op)
    durations = (graph.o_end - graph.o_start).astype(np.float64)
    return {"steps": steps, steps_with: len({entry.step for entry in found}),
            **{key: int(np.median([getattr(entry, attr) for entry in found])) for key, attr in medians.items()},
            "kernels_per_step": float(ops.sum()) / steps, "kernel_ns_per_step": float(durations[ops].sum()) / steps,
            "step_ns": float(block.measured.mean()) if len(block.measured) else 0.0}


def repeated_summary(block) -> dict | None:
    """The replayed steps' backward passes beyond one per forward pass as the model's section
    (model.RepeatedBackward); None where the block is not trusted or runs none."""
    if block is None or not block.trusted or not block.graph.repeated:
        return None
    return _section(block, block.graph.repeated, block.graph.o_repeated, "steps_with_repeats",
                    {"forward_passes": "forward_passes", "backward_passes": "passes", "layers": "layers"})


def summary(block) -> dict | None:
    """The replayed steps' recomputation as the model's section (model.Recomputation); None where the block is not
    trusted or runs no forward work again."""
    if block is None or not block.trusted or not block.graph.recomputes:
        return None
    return _section(block, block.graph.recomputes, block.graph.o_recompute, "steps_with_recompute",
                    {"layers": "layers", "forward_kernels": "forward_kernels", "rerun_kernels": "rerun_kernels"})
