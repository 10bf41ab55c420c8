"""Embedding tables trained with dense gradients: the kernels of their backward, and the fills that zero a gradient
as large as the whole table before each.

PyTorch's `nn.Embedding` (sparse=False, the default) computes its weight's gradient with
`embedding_dense_backward`: a tensor of the table's size is zero-filled, the looked-up indices are sorted and
segmented (cub's radix sort, unique-by-key and scan kernels), and the rows' gradients are summed into it
(`compute_grad_weight`, `sum_and_scatter`; `embedding_backward_feature_kernel` for small batches). The optimizer
then reads and writes every row of the table and of its gradient, although a step looked up few of them. With
`sparse=True` the gradient holds the looked-up rows only, and the update touches them alone.

A table looked up twice in a step (word2vec's output table: contexts and negatives) gets two such gradients, which
autograd sums as it accumulates them: an element-wise add as large as the table, right after the second backward.

Both are told by the data: a fill kernel (`FillFunctor`, `fill_kernel`) on the stream before an embedding backward
kernel, with at most WALK operations between them (the sort and segment kernels) and no other embedding backward
kernel between; and the add kernels (`CUDAFunctor_add`, `AddFunctor`) that follow an embedding backward kernel on
its stream, one after the other. Measured on blind70_word2vec_base1 (fixtures/real: skip-gram over two 2,000,000 x
300 fp32 tables): 6 fills a step of 363 µs each, every one 9 operations before a `compute_grad_weight`, and 2 adds
of 1.16 ms right after the third table backward (one sum, in two kernels of 32-bit indexing).
"""

from __future__ import annotations

import re

import numpy as np

# PyTorch's dense embedding backward kernels (embedding_dense_backward_cuda, embedding_bag's backward)
EMBEDDING_BACKWARD = re.compile(r"compute_grad_weight|sum_and_scatter|embedding_(?:dense_)?backward|"
                                r"embedding_bag_backward|EmbeddingBag\w*Backward", re.I)
FILL = re.compile(r"FillFunctor|fill_kernel", re.I)
ADD = re.compile(r"CUDAFunctor_add|AddFunctor", re.I)
# operations between a gradient's fill and the backward kernel that writes into it: the indices' radix sort is
# before the fill (blind70_word2vec_base1), its unique-by-key, scan and segment kernels after it (7 of them)
WALK = 16


def says_backward(names) -> bool:
    """Whether a kernel's (short, demangled) names are an embedding's dense backward."""
    return bool(names) and any(EMBEDDING_BACKWARD.search(name or "") for name in names)


def gradient_passes(graph) -> np.ndarray:
    """Per operation of a replay graph (normalize.critical_path.Graph), whether it is a pass over an embedding's
    dense gradient: a fill that zeroes it, or an add that sums two (see the module's docstring)."""
    n = len(graph.o_names)
    passes = np.zeros(n, bool)
    said: dict = {}

    def kind(names) -> str:   # by name pair: a step's kernels share a few hundred
        if names not in said:
            said[names] = ("backward" if says_backward(names) else
                           "fill" if names and any(FILL.search(name or "") for name in names) else
                           "add" if names and any(ADD.search(name or "") for name in names) else "")
        return said[names]
    kinds = [kind(names) if names is not None else "" for names in graph.o_names]
    prev = graph.o_prev.tolist()
    following = [-1] * n   # the next operation on the stream
    for op, before in enumerate(prev):
        if before >= 0:
            following[before] = op
    for op in (i for i, k in enumerate(kinds) if k == "backward"):
        at = prev[op]
        for _ in range(WALK):
            if at < 0 or kinds[at] == "backward":
                break
            if kinds[at] == "fill":
                passes[at] = True
            at = prev[at]
        at = following[op]
        while at >= 0 and kinds[at] == "add":
            passes[at] = True
            at = following[at]
    return passes
