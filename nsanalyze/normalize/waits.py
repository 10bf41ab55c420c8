"""Where the replayed steps wait for the GPU: how many waits a step, and how many of them the backward pass makes.

PyTorch runs the backward pass of CUDA tensors on a thread of its own (the autograd engine's, one per device), not
on the thread that runs the step loop. So a wait made on the thread that launches the backward's kernels, while
the step loop's thread begins the steps, is made inside the backward: a read-back per gradient or per node
(`torch.autograd.set_detect_anomaly(True)` checks every gradient a node returns for NaN with a read-back; a
backward hook or a custom autograd Function that calls `.item()`), not the loop's own `loss.item()` or logging.
The waits of an autotuner's trials and of timing code (normalize.tuning) are theirs, not counted here: cuDNN's
benchmark mode tunes the backward's convolutions on that thread too (blind_cudnnbench_base: 273 of its 420 waits
a step there, all the tuner's).

The backward's thread is told by the data: the launching thread that launches most of the block's kernels whose
names say `backward` (PyTorch's autograd kernels do: GeluBackwardCUDAKernelImpl, layer_norm_backward), where that
is not the thread whose call begins most steps. A program that runs its backward on the loop's thread has no such
thread: its waits are not placed. The report's replay keeps each process's calls as one chain (no read of the call
table's thread column); the threads of the block's calls are read here, one scan of the call tables (0.35 s over
trit52_triton_base1's 2.8M calls), only where the steps wait MIN_WAITS times or more and launch backward kernels.

Measured on blind61_anomaly_base1 (fixtures/real; a GPT with anomaly detection left on): 336 waits a step, all on
the thread that launches the backward's kernels (31,920 stream syncs in the capture, none on the loop's thread).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from nsanalyze.normalize import model
from nsanalyze.normalize.activity import PID_SHIFT
from nsanalyze.normalize.critical_path import WAITING_CLASSES, read_calls

BACKWARD = re.compile(r"backward", re.I)
# The backward's thread launches at least this share of the block's backward kernels (one thread runs a device's
# backward; a share under it is several threads sharing the work, or names that say backward by chance)
BACKWARD_THREAD_SHARE = 0.8
# Waits a step from which they are placed: fewer are the loop's own reads (a loss read once a step, a log line),
# which the advice names already; more are a read-back per item, layer or gradient (launch-overhead's PER_ITEM_WAITS)
MIN_WAITS = 4


def step_waits(export, graph) -> model.StepWaits | None:
    """The block's waits a step (median over its steps) and, where the backward's thread is told apart, those it
    makes; None without a graph or steps."""
    if graph is None or graph.c_step is None or not len(graph.step_first_op):
        return None
    steps = len(graph.step_first_op)
    waiting = graph.calls_of(WAITING_CLASSES) & (graph.c_step >= 0)
    for found in (graph.tuning, graph.timing):   # an autotuner's trials and timing code wait for their own timings
        if found is not None:
            waiting &= ~found.removed
    per_step = float(np.median(np.bincount(graph.c_step[waiting], minlength=steps)[:steps]))
    at_end = _after_last_launch(graph, waiting, steps)
    polls = _polls(graph, waiting, steps)
    backward = _backward_ops(graph)
    if per_step < MIN_WAITS or not backward.any():
        return model.StepWaits(per_step=per_step, at_end_per_step=at_end, **polls)
    threads = graph.c_thread if graph.c_thread is not None else _threads(export, graph)
    thread = backward_thread(graph, threads, backward)
    mine = waiting & (threads == thread) if thread is not None else np.zeros_like(waiting)
    in_backward = np.bincount(graph.c_step[mine], minlength=steps)[:steps]
    return model.StepWaits(per_step=per_step, backward_per_step=float(np.median(in_backward)),
                           backward_thread_known=thread is not None, at_end_per_step=at_end, **polls)


def _polls(graph, waiting: np.ndarray, steps: int) -> dict:
    """The poll loops among the block's waits (critical_path.poll_runs): how many a step, the query they call
    most, and their not-ready answers a step (medians over the block's steps)."""
    if graph.c_poll_end is None or not (graph.c_poll_end & waiting).any():
        return {}
    ends = graph.c_poll_end & waiting
    inside = graph.c_in_poll & ~graph.c_poll_end & (graph.c_step >= 0)
    names = Counter(graph.c_names[i] for i in np.flatnonzero(ends).tolist())
    return {"polls_per_step": float(np.median(np.bincount(graph.c_step[ends], minlength=steps)[:steps])),
            "poll_call": names.most_common(1)[0][0],
            "not_ready_per_step": float(np.median(np.bincount(graph.c_step[inside], minlength=steps)[:steps]))}


def _after_last_launch(graph, waiting: np.ndarray, steps: int) -> float:
    """Of the block's waits a step, those made after the step's last kernel launch (median over its steps): a
    step that ends by reading its result back (blind76_perimage's scores, `.cpu()`) can have all its work before
    that read captured in one graph."""
    launches = graph.calls_of("launch") & (graph.c_step >= 0)
    last = np.full(steps, -np.inf)
    np.maximum.at(last, graph.c_step[launches], graph.c_start[launches].astype(float))
    mine = waiting & (graph.c_step >= 0)
    after = mine.copy()
    after[mine] = graph.c_start[mine] > last[graph.c_step[mine]]
    return float(np.median(np.bincount(graph.c_step[after], minlength=steps)[:steps]))


def _backward_ops(graph) -> np.ndarray:
    """Per operation, whether it is a kernel of the backward pass by its name, launched by a call of the block."""
    said: dict = {}   # by name pair: the block's kernels share a few hundred pairs

    def says_backward(names) -> bool:
        if names not in said:
            said[names] = any(BACKWARD.search(name or "") for name in names)
        return said[names]
    return np.fromiter((call >= 0 and bool(names) and says_backward(names)
                        for call, names in zip(graph.o_call.tolist(), graph.o_names)), bool, len(graph.o_call))


def _threads(export, graph) -> np.ndarray:
    """Per call of the block, its thread (-1: not found), from one read of the call tables: the call of the same
    process with its correlation id (ids are unique within a process, not across) and its start."""
    calls = read_calls(export, int(graph.c_start.min()), int(graph.c_start.max()) + 1)
    mine = np.isin(calls["tid"] >> PID_SHIFT, np.unique(graph.c_process))
    corr, tid, start = calls["corr"][mine], calls["tid"][mine], calls["start"][mine]
    process = tid >> PID_SHIFT
    if not len(corr):
        return np.full(len(graph.c_corr), -1, np.int64)
    # by id (the block holds one process where the steps name it: ids unique; a call whose id another process's
    # call shares may be missed, never given that call's thread)
    order = np.argsort(corr, kind="stable")
    ids = corr[order]
    at = np.minimum(np.searchsorted(ids, graph.c_corr), len(ids) - 1)
    picked = order[at]
    found = (graph.c_corr >= 0) & (ids[at] == graph.c_corr) & (start[picked] == graph.c_start) & \
        (process[picked] == graph.c_process)
    return np.where(found, tid[picked], -1)


def backward_thread(graph, threads: np.ndarray, backward: np.ndarray) -> int | None:
    """The thread that launches the block's backward pass (see the module's docstring), or None."""
    launched_by = threads[graph.o_call[backward]]
    launched_by = launched_by[launched_by >= 0]
    if not len(launched_by):
        return None
    thread, count = Counter(launched_by.tolist()).most_common(1)[0]
    if count < BACKWARD_THREAD_SHARE * len(launched_by):
        return None
    firsts = [int(t) for t in threads[_first_calls(graph.c_step)] if t >= 0]
    if not firsts or Counter(firsts).most_common(1)[0][0] == thread:
        return None   # the backward runs on the loop's own thread (or one chain a process): no thread of its own
    return thread


def _first_calls(call_step: np.ndarray) -> np.ndarray:
    """Each step's first call (calls in the order they began)."""
    inside = np.flatnonzero(call_step >= 0)
    if not len(inside):
        return inside
    steps = call_step[inside]
    return inside[np.r_[True, steps[1:] != steps[:-1]]]
