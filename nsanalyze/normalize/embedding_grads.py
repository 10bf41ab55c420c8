"""Embedding tables trained with dense gradients: the kernels of their backward, and the fills that zero a gradient
as large as the whole table before each.

PyTorch's `nn.Embedding` (sparse=False, the default) computes its weight's gradient with
`embedding_dense_backward`: a tensor of the table's size is zero-filled, the looked-up indices are sorted and
segmented (cub's radix sort, unique-by-key and scan kernels), and the rows' gradients are summed into it
(`compute_grad_weight`, `sum_and_scatter`; `embedding_backward_feature_kernel` for small batches). The optimizer
then reads and writes every row of the table and of its gradient, although a step looked up few of them. With
`sparse=True` the gradient holds the looked-up rows only, and the update touches them alone.

The fills are told by the data: a fill kernel (`FillFunctor`, `fill_kernel`) on the stream before an embedding
backward kernel, with at most WALK operations between them (the sort and segment kernels) and no other embedding
backward kernel between. Measured on blind70_word2vec_base1 (fixtures/real: skip-gram over two 2,000,000 x 300
fp32 tables): 6 fills a step of 363 µs each, every one 9 operations before a `compute_grad_weight`.
"""

from __future__ import annotations

import re

import numpy as np

# PyTorch's dense embedding backward kernels (embedding_dense_backward_cuda, embedding_bag's backward)
EMBEDDING_BACKWARD = re.compile(r"compute_grad_weight|sum_and_scatter|embedding_(?:dense_)?backward|"
                                r"embedding_bag_backward|EmbeddingBag\w*Backward", re.I)
FILL = re.compile(r"FillFunctor|fill_kernel", re.I)
# operations between a gradient's fill and the backward kernel that writes into it: the indices' radix sort is
# before the fill (blind70_word2vec_base1), its unique-by-key, scan and segment kernels after it (7 of them)
WALK = 16


def says_backward(names) -> bool:
    """Whether a kernel's (short, demangled) names are an embedding's dense backward."""
    return bool(names) and any(EMBEDDING_BACKWARD.search(name or "") for name in names)


def gradient_fills(graph) -> np.ndarray:
    """Per operation of a replay graph (normalize.critical_path.Graph), whether it is a fill that zeroes an
    embedding's dense gradient (see the module's docstring)."""
    n = len(graph.o_names)
    fills = np.zeros(n, bool)
    said: dict = {}

    def kind(names) -> str:   # by name pair: a step's kernels share a few hundred
        if names not in said:
            said[names] = ("backward" if says_backward(names) else
                           "fill" if names and any(FILL.search(name or "") for name in names) else "")
        return said[names]
    kinds = [kind(names) if names is not None else "" for names in graph.o_names]
    prev = graph.o_prev.tolist()
    for op in (i for i, k in enumerate(kinds) if k == "backward"):
        at = prev[op]
        for _ in range(WALK):
            if at < 0 or kinds[at] == "backward":
                break
            if kinds[at] == "fill":
                fills[at] = True
            at = prev[at]
    return fills
