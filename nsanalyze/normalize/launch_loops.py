"""Loops of launches: the same few kernels launched many times in a row within a step, in the order the
host launched them.

A Python loop over tensors (an EMA or a clipping written per parameter, an optimizer with foreach=False), over
task heads, embedding tables or chunks launches one short motif (mul, add; or a GEMM and its bias) once per item.
A model's layers repeat too, but with a motif of tens of kernels (a transformer block is 20-50): a motif of at most
MAX_PERIOD kernels repeated MIN_REPEATS times or more is a loop over items, and so is a motif of up to LONG_PERIOD
repeated LONG_REPEATS times or more, more than a layer stack has blocks: a recurrent cell stepped over a sequence.
Found on the block of steps around
the median step (normalize.critical_path), a step at a time; whether such a loop costs the step is the check's
question (checks/program/launch_loop.py), from the launch paths' host time against the loop's GPU time. Loops
over the same number of items are grouped (group_loops): one change removes them together.

Measured on the 74 real nsys exports of fixtures/real (the replayed steps around each one's median step): loops
appear in 8, each a loop in the program's source: an EMA over 152 parameters (2 kernels x 152), clipping by hand
over 149 gradients (a norm each, then a mul_ each: 1 x 149, twice), 48 embedding tables (1 x 48 twice, 4 x 48),
64 task heads (4 x 64; their backward, 9 x 63), AdamW with foreach=False (8 x 128), a 32-layer MLP of one
width (7 x 32; its backward, 10 x 31) and a chunked copy-and-scale loop (1 x 20); none in the 65 others with
replayed steps (transformers, CNNs, DDP, graphs). Of the 84 of round 58, blind58's LSTMCell loop over 100 frames
(6 x 99 forward, 21 x 98 backward) needs LONG_PERIOD; with it and no LONG_REPEATS the decoders' layer stacks of
kvcat and kv57 (13 x 16) and catlog (20 x 24) were taken for loops too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsanalyze.text import own_signature_words

MAX_PERIOD = 12       # a loop's body: at most this many kernels (a transformer block is 20-50; a backward of
#                       a per-head GEMM 9, of a small MLP layer 10; AdamW foreach=False 8)
MIN_REPEATS = 16      # and repeated this many times in a row (a model's layer stack is 2-48 blocks of 20-50)
# A longer body, of up to LONG_PERIOD kernels, is a loop where it repeats LONG_REPEATS times or more: more than a layer
# stack has blocks (the real exports' deepest, 16-24 blocks of 13-20 kernels, kvcat's and catlog's decoders). A
# recurrent cell stepped over a sequence in Python is such a loop: blind58's two LSTMCell layers stepped over 100
# frames launch 21 kernels a frame in the backward (the two cells' gradients), 98 times in a row.
LONG_PERIOD = 24
LONG_REPEATS = 64
# and in at least this share of the block's steps: a loop of every step, not one of a step that stands out (a
# histogram logged every 10th step is slow-steps')
MIN_STEP_SHARE = 0.5
# Loops whose item counts differ by at most this share (or by one) go over the same items (group_loops)
ITEMS_TOLERANCE = 0.02
# Operations of these roles never form a loop here: the optimizer's are unfused-optimizer's to judge
# (a loop over the parameters in an Optimizer.step# range, or foreach kernels by name).
OWN_CHECK_ROLES = ("gpu:optimizer",)
# runs() compares this many (period, position) pairs at once (about 20 MB of temporaries)
PAIRS_AT_ONCE = 1 << 20

# A kernel's label at most this long: a motif of 12 names of 70 KB each (a profile's author chooses them) would
# otherwise fill a finding's notes
LABEL_CHARS = 120
# Words of a signature that name types or C++ syntax, not the operation: left out of a kernel's label.
TYPE_WORDS = frozenset({"float", "double", "int", "long", "short", "char", "bool", "signed", "unsigned", "void",
                        "const", "lambda", "instance", "operator", "array", "Half", "BFloat16", "T1", "T2", "T3",
                        "TensorIteratorBase", "Scalar"})


@dataclass
class LaunchLoop:
    """One run of a motif repeated in a row within one step of the block."""

    step: int              # the block step it ran in
    period: int            # kernels in the motif
    repeats: int           # times in a row
    ops: np.ndarray        # the graph's operations of the run, in launch order (its kernels, the memsets among them)
    motif: tuple           # the motif's kernels, in order (short names, with the words that tell instances apart)
    group: int = -1        # the loops over the same number of items (group_loops), numbered from 0


def find(graph) -> tuple[np.ndarray, list[LaunchLoop]]:
    """Per operation of the graph, the group of the loop it is in (-1: none), and the loops, step by step."""
    n_ops = len(graph.o_start)
    in_loop = np.full(n_ops, -1, np.int64)
    loops: list[LaunchLoop] = []
    if not n_ops:
        return in_loop, loops
    identity = _identities(graph)
    memset = np.array([label == "gpu:memset" for label in graph.o_label], dtype=bool)
    labels = _labels(graph)
    call_start = np.where(graph.o_call >= 0, graph.c_start[np.maximum(graph.o_call, 0)], graph.o_start)
    found: dict[tuple, list] = {}   # motif (its operations' identities) -> its runs
    for step, ops in enumerate(graph.step_first_op):
        ops = np.asarray(ops, dtype=np.int64)
        if len(ops) < MIN_REPEATS:
            continue
        ops = ops[np.lexsort((ops, call_start[ops]))]   # launch order (a call's operations in their order)
        # memsets are left out of the motif (PyTorch zeroes a reduction's scratch for some sizes and not others)
        # and belong to the loop they fall in: their launches are the loop's too
        kernels = np.flatnonzero(~memset[ops])
        for first, period, repeats in runs(identity[ops[kernels]], long_period=LONG_PERIOD, long_repeats=LONG_REPEATS):
            motif = ops[kernels[first:first + period]]
            run_ops = ops[kernels[first]:kernels[first + period * repeats - 1] + 1]
            found.setdefault(tuple(identity[motif].tolist()), []).append(
                LaunchLoop(step, period, repeats, run_ops, tuple(labels(int(i)) for i in motif)))
    steps = len(graph.step_first_op)
    kept = [motif_runs for motif_runs in found.values()   # a loop of the steps, not of one step
            if len({loop.step for loop in motif_runs}) >= MIN_STEP_SHARE * steps]
    for group, motifs in enumerate(group_loops(kept)):
        for loop in (loop for motif_runs in motifs for loop in motif_runs):
            loop.group = group
            in_loop[loop.ops] = group
            loops.append(loop)
    loops.sort(key=lambda loop: (loop.step, int(loop.ops[0])))
    return in_loop, loops


def group_loops(motifs: list[list[LaunchLoop]]) -> list[list[list[LaunchLoop]]]:
    """The motifs (each a list of its runs) grouped by the number of items their loop went over, the most items
    first: runs of one motif over the same count, within ITEMS_TOLERANCE, are one loop of the program's source
    (an EMA's mul and add; the norms, then the scaling, of clipping by hand over the same gradients; a loop over
    heads and its backward pass, 64 and 63 here) or loops over one list, which one change removes together."""
    def items(motif_runs):
        return int(np.median([loop.repeats for loop in motif_runs]))

    groups: list[list] = []
    for motif_runs in sorted(motifs, key=lambda m: (-items(m), m[0].motif)):
        if groups and items(groups[-1][0]) - items(motif_runs) <= max(1, ITEMS_TOLERANCE * items(groups[-1][0])):
            groups[-1].append(motif_runs)
        else:
            groups.append([motif_runs])
    return groups


def runs(seq: np.ndarray, max_period: int = MAX_PERIOD, min_repeats: int = MIN_REPEATS,
         long_period: int = 0, long_repeats: int = 0) -> list[tuple[int, int, int]]:
    """Maximal runs of a motif repeated in a row in `seq` (ints; negative values never match anything): (first
    index, period, repeats), no two overlapping, the runs covering the most elements taken first and, of equal
    cover, the shortest motif (ABAB is 2 x 2, not 4 x 1). Motifs of up to `max_period` need `min_repeats`, longer
    ones up to `long_period` need `long_repeats`. The periods are compared together, PAIRS_AT_ONCE elements of
    period x position at a time: a step of a few thousand kernels tried against 400 periods one by one took most of
    a replayed block's making."""
    seq = np.asarray(seq, dtype=np.int64)
    n = len(seq)
    periods = np.arange(1, max(max_period, long_period) + 1)
    need = np.where(periods <= max_period, min_repeats, long_repeats)
    periods, need = periods[periods <= n // np.maximum(need, 1)], need[periods <= n // np.maximum(need, 1)]
    if not n or not len(periods):
        return []
    found = []   # (cover, period, start, repeats) as arrays, a chunk of periods each
    position = np.arange(n)
    rows = max(1, PAIRS_AT_ONCE // n)
    for lo in range(0, len(periods), rows):
        period, wanted = periods[lo:lo + rows], need[lo:lo + rows]
        later = position[None, :] + period[:, None]   # element i + period repeats element i, where it exists
        value = seq[np.minimum(later, n - 1)]
        same = np.zeros((len(period), n + 2), np.int8)
        same[:, 1:-1] = (later < n) & (value == seq[None, :]) & (value >= 0)
        edges = np.diff(same, axis=1)
        row, starts = np.nonzero(edges == 1)
        ends = np.nonzero(edges == -1)[1]   # row by row, in order: each stretch's end pairs with its start
        repeats = (ends - starts + period[row]) // period[row]   # the stretch start..end-1 repeats the period before it
        long = repeats >= wanted[row]
        found.append((repeats[long] * period[row][long], period[row][long], starts[long], repeats[long]))
    cover, period, start, repeats = (np.concatenate(parts).tolist() for parts in zip(*found))
    order = np.lexsort((start, period, [-c for c in cover])).tolist()
    taken = np.zeros(n, bool)
    out = []
    for i in order:
        if taken[start[i]:start[i] + cover[i]].any():
            continue
        taken[start[i]:start[i] + cover[i]] = True
        out.append((start[i], period[i], repeats[i]))
    return sorted(out)


def _identities(graph) -> np.ndarray:
    """One int per operation: equal for the same kernel (its demangled name); a distinct negative value for the
    operations that match nothing: copies and memsets (a copy is the copy checks' to judge: its call may wait
    for it, so its launch path is not a launch's) and the kernels of OWN_CHECK_ROLES."""
    if getattr(graph, "o_identity", None) is not None:   # made once a graph (loops and recomputation both read it)
        return graph.o_identity
    keys: dict = {}
    out = np.empty(len(graph.o_start), np.int64)
    for i, (label, names) in enumerate(zip(graph.o_label, graph.o_names)):
        if names is None or label in OWN_CHECK_ROLES:
            out[i] = -1 - i
            continue
        out[i] = keys.setdefault(names[1] or names[0], len(keys))
    graph.o_identity = out
    return out


def _labels(graph):
    """A kernel's label: its short name, and where the graph's kernels of that name are several template
    instances, the last words of its signature that tell it apart (`vectorized_elementwise_kernel[MulFunctor]`)."""
    by_short: dict = {}
    for names in graph.o_names:
        if names is not None and names[0] and names[1]:
            by_short.setdefault(names[0], set()).add(names[1])
    own = {short: own_signature_words(signatures) for short, signatures in by_short.items() if len(signatures) > 1}

    def label(op: int) -> str:
        short, demangled = graph.o_names[op]
        words = [w for w in own.get(short, {}).get(demangled, ()) if w not in TYPE_WORDS]
        text = f"{short}[{', '.join(words[-2:])}]" if words else short or demangled or "kernel"
        return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"   # a name is the profile's text
    return label
