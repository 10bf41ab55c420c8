"""launch_loops.runs, which finds loops of launches and layer stacks, against its definition written out element by
element, on the kernel sequences of real steps: a loop of clipping by hand over 149 gradients (blind_gradclip) and
a layer stack run again in the backward (blind57_lm's activation checkpointing)."""

import pytest

from nsanalyze.normalize import launch_loops, recompute
from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from tests.conftest import REAL


def runs_by_definition(seq, max_period, min_repeats, long_period=0, long_repeats=0):
    """For each period, every maximal stretch where element i + period equals element i (a non-negative value):
    repeats = (stretch + period) // period, kept where enough; then greedily the runs covering most, of equal cover
    the shortest period, then the first, none overlapping one taken before."""
    seq = [int(v) for v in seq]
    n, candidates = len(seq), []
    for period in range(1, max(max_period, long_period) + 1):
        need = min_repeats if period <= max_period else long_repeats
        i = 0
        while i + period < n:
            j = i
            while j + period < n and seq[j] >= 0 and seq[j + period] == seq[j]:
                j += 1
            if j > i:
                repeats = (j - i + period) // period
                if repeats >= need:
                    candidates.append((repeats * period, period, i, repeats))
                i = j
            else:
                i += 1
    taken, out = [False] * n, []
    for cover, period, start, repeats in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
        if any(taken[start:start + cover]):
            continue
        taken[start:start + cover] = [True] * cover
        out.append((start, period, repeats))
    return sorted(out)


@pytest.mark.parametrize("name", ["blind_gradclip_base_nsys.sqlite.xz", "blind57_lm_base1_nsys.sqlite.xz"])
def test_runs_are_their_definition_on_real_steps(name):
    graph = build_timeline(read_profile(REAL / name)).step_block.graph
    sequences = [ids for _, _, ids in recompute._steps(graph)][:2]
    assert sequences and min(len(ids) for ids in sequences) > 900
    found = 0
    for ids in sequences:
        for limits in ({"max_period": launch_loops.MAX_PERIOD, "min_repeats": launch_loops.MIN_REPEATS,
                        "long_period": launch_loops.LONG_PERIOD, "long_repeats": launch_loops.LONG_REPEATS},
                       {"max_period": min(recompute.MAX_BLOCK, len(ids) // recompute.MIN_LAYERS),
                        "min_repeats": recompute.MIN_LAYERS}):
            expected = runs_by_definition(ids, **limits)
            assert launch_loops.runs(ids, **limits) == expected
            found += len(expected)
    assert found >= 4   # the loops and the stacks are there to find
