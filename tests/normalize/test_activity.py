"""The array joins and groupings the timeline is built from, against SQL over the same real export."""

import numpy as np

from nsanalyze.normalize.activity import (Columns, distinct, distinct_in_place, finder, first_by_key, group_sums, lookup,
                                          read_activity)
from nsanalyze.read import read_profile
from tests.conftest import REAL, sql

EXPORT = REAL / "graphs_eager_nsys.sqlite.xz"


def _activity(path=EXPORT):
    return read_activity(read_profile(path), (-(2**62), 2**62))


def test_group_sums_equal_group_by():
    kernels = _activity().kernels
    keys, (sums,), counts = group_sums(kernels.short_name_id, kernels.end - kernels.start)
    expected = sql(EXPORT, "SELECT shortName, SUM(end - start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                           "GROUP BY shortName ORDER BY shortName")
    assert [(int(k), int(s), int(n)) for k, s, n in zip(keys, sums, counts)] == [tuple(r) for r in expected]


def test_lookup_by_correlation_id_finds_each_kernels_launch():
    activity = _activity()
    kernels, calls = activity.kernels, activity.calls
    found = lookup(first_by_key(calls.correlation_id), kernels.correlation_id)
    assert (found >= 0).all()
    assert np.array_equal(calls.correlation_id[found], kernels.correlation_id)
    # A launch call starts before its kernel does (it may return after the kernel started).
    assert (calls.start[found] <= kernels.start).all()
    # the kernels whose correlation id a runtime call has (IN, which SQLite answers from an index it builds
    # once; the same rows as a correlated EXISTS, which scanned the 54k calls for each of the 29k kernels: 95 s)
    expected = sql(EXPORT, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                              WHERE k.correlationId IN (SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r)""")[0][0]
    assert len(kernels) == expected


def test_lookup_misses_absent_and_unknown_keys():
    """Graph nodes share their launch's correlation id: the look-up takes the first kernel of each, and an
    id no kernel has, or the unknown id -1, finds nothing."""
    graphs = REAL / "graphs_after_nsys.sqlite.xz"
    kernels = _activity(graphs).kernels
    table = first_by_key(kernels.correlation_id)
    (shared,) = sql(graphs, "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY correlationId "
                            "HAVING COUNT(*) > 1 ORDER BY correlationId LIMIT 1")[0]
    absent = int(kernels.correlation_id.max()) + 1
    found = lookup(table, np.array([shared, absent, -1]))
    assert found[1:].tolist() == [-1, -1]
    assert found[0] == np.flatnonzero(kernels.correlation_id == shared)[0]


def test_key_table_and_binary_search_find_the_same_calls():
    """The look-up by a table indexed by key (ids close together) and by binary search (others) give the
    same positions: each kernel's launch and each call itself among the calls' ids, and ids no call
    has, -1 and ids past both ends nowhere."""
    activity = _activity()
    calls, kernels = activity.calls, activity.kernels
    keys = distinct(calls.correlation_id)
    extra = np.concatenate(([-1, 0, int(keys[0]) - 1, int(keys[-1]) + 1, 2**62], keys[:50] + 1))
    asked = np.concatenate((kernels.correlation_id, calls.correlation_id, extra))
    by_table, by_search = finder(keys, len(asked)), finder(keys, 0)   # nothing asked: no table is worth its build
    assert (by_table.__name__, by_search.__name__) == ("by_table", "by_search")
    found = by_table(asked)
    assert np.array_equal(found, by_search(asked))
    known = found[:len(kernels) + len(calls)]
    assert (known >= 0).all() and np.array_equal(keys[known], asked[:len(known)])
    missing = ~np.isin(extra, keys)
    assert (found[len(known):][missing] == -1).all() and missing[:5].all()


def test_distinct_is_sorted_unique():
    values = _activity().calls.name_id
    assert distinct(values).tolist() == sorted(set(values.tolist()))


def test_distinct_in_place_is_distinct_of_the_sorted_values():
    """The sorted edges of a real export's kernels and calls (many shared: back-to-back work) made distinct
    in their own array, in chunks down to one value: the values of `distinct`, the start of that array."""
    activity = _activity()
    edges = np.sort(np.concatenate((activity.kernels.start, activity.kernels.end, activity.calls.start,
                                    activity.calls.end)))
    expected = distinct(edges)
    assert len(expected) < len(edges)   # shared edges there are
    for chunk in (1, 7, 1000, 1 << 20):
        own = edges.copy()
        found = distinct_in_place(own, chunk)
        assert np.array_equal(found, expected) and np.shares_memory(found, own)


def test_selection_copies_columns_only_when_read():
    kernels = _activity().kernels
    late = kernels.where(kernels.start > np.median(kernels.start))
    assert late._taken == {}
    assert len(late) == int((kernels.start > np.median(kernels.start)).sum())
    assert late.start.min() > np.median(kernels.start) and set(late._taken) == {"start"}
    again = late.where(late.end > late.end.min())
    assert len(again) == len(late) - int((late.end == late.end.min()).sum())
    assert isinstance(again, Columns)


def test_launch_shapes_held_as_codes_read_as_the_table_holds_them():
    """A kernel's launch shape is held as one code into a table of distinct shapes (Columns.coded); read by
    name, each kernel's shape is the kernel table's own row, as SQL gives it, and a chunked coding (chunks
    far smaller than the table, each its own hash grouping) gives the same codes."""
    from nsanalyze.normalize import activity as module

    kernels = _activity().kernels
    assert kernels.coded is not None and len(kernels.coded.values["grid_x"]) < len(kernels) / 50
    expected = np.array(sql(EXPORT, "SELECT gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
                                    "staticSharedMemory + dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                    "ORDER BY rowid"))
    names = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_mem_bytes")
    assert np.array_equal(np.stack([getattr(kernels, name) for name in names], axis=1), expected)
    selected = kernels.where(kernels.start >= np.median(kernels.start))
    assert np.array_equal(selected.grid_x, kernels.grid_x[kernels.start >= np.median(kernels.start)])
    chunk, multiplier = module.CODE_CHUNK, module.HASH_MULTIPLIER
    for module.CODE_CHUNK, module.HASH_MULTIPLIER in ((997, multiplier), (chunk, 0)):  # 0: every shape one hash
        try:                                                                            # (grouped by its values)
            again = _activity().kernels
        finally:
            module.CODE_CHUNK, module.HASH_MULTIPLIER = chunk, multiplier
        assert np.array_equal(again.shape_code, kernels.shape_code)
        assert all(np.array_equal(again.coded.values[n], kernels.coded.values[n]) for n in names)


LAUNCHING_THREADS = """SELECT DISTINCT c.globalTid FROM ({calls}) c JOIN CUPTI_ACTIVITY_KIND_KERNEL k
    ON k.correlationId = c.correlationId AND (k.globalPid >> 24) = (c.globalTid >> 24) ORDER BY c.globalTid"""


def test_launching_threads_marked_a_chunk_at_a_time_equal_sql(monkeypatch):
    """The threads whose calls launched kernels (matched within their process: ddp_host_all's two ranks share
    correlation ids), the calls marked a few hundred at a time, by the flag table and by sorted keys: SQL's."""
    from nsanalyze.normalize import activity

    path = REAL / "ddp_host_all_nsys.sqlite.xz"
    tables = {name for (name,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    calls = " UNION ALL ".join(f"SELECT globalTid, correlationId FROM {t}" for t in
                               ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER") if t in tables)
    expected = [tid for (tid,) in sql(path, LAUNCHING_THREADS.format(calls=calls))]
    assert len(expected) >= 4   # two ranks, each a main and an autograd thread
    for chunk, table_max in ((1 << 20, 1 << 26), (300, 1 << 26), (300, 0)):
        monkeypatch.setattr(activity, "MARK_CHUNK", chunk)
        monkeypatch.setattr(activity, "MARK_TABLE_MAX", table_max)
        assert _activity(path).launching_threads.tolist() == expected
