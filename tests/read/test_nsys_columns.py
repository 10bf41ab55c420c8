"""Bulk integer columns of an nsys export: the Arrow reader and the row reader agree, and a column that
holds something else than integers is read through the checked query, not wrongly."""

import shutil
import sqlite3

import numpy as np
import pytest

from nsanalyze.normalize.activity import read_activity
from nsanalyze.read import nsys
from nsanalyze.read.files import open_local
from tests.conftest import DEV_INFER_NSYS, REAL, sql

FOREVER = (-(2**62), 2**62)
EXPORTS = [DEV_INFER_NSYS, REAL / "ddp_gpu_all_nsys.sqlite.xz", REAL / "item_sync_nsys.sqlite.xz"]


def _activity(path, arrow: bool, monkeypatch):
    monkeypatch.setattr(nsys, "USE_ARROW", arrow)
    export = nsys.read_nsys(open_local(path)[1], display_path=str(path))
    assert (export.arrow is not None) == arrow
    return export, read_activity(export, FOREVER)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name[:40])
def test_arrow_and_rows_read_the_same_columns(path, monkeypatch):
    _, by_arrow = _activity(path, True, monkeypatch)
    _, by_rows = _activity(path, False, monkeypatch)
    for table in ("kernels", "copies", "calls"):
        arrow_table, rows_table = getattr(by_arrow, table), getattr(by_rows, table)
        assert arrow_table.names() == rows_table.names()
        for name in arrow_table.names():
            assert np.array_equal(getattr(arrow_table, name), getattr(rows_table, name)), (table, name)
    # And both equal the export itself: every kernel, and the total of their durations.
    count, total = sql(path, "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert len(by_arrow.kernels) == count
    assert int((by_arrow.kernels.end - by_arrow.kernels.start).sum()) == total


def test_a_text_value_falls_back_to_the_checked_read(tmp_path, monkeypatch):
    """One kernel whose stream id is text: the bare Arrow read cannot hold it, the checked one reads -1
    there and every other value as stored."""
    path = tmp_path / "text_stream.sqlite"
    shutil.copy(open_local(DEV_INFER_NSYS)[1], path)
    with sqlite3.connect(path) as con:
        first = con.execute("SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 'seven' WHERE rowid = ?", (first,))
        streams = [r[0] for r in con.execute("SELECT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
    export, activity = _activity(path, True, monkeypatch)
    assert activity.kernels.stream_id[0] == -1
    assert activity.kernels.stream_id[1:].tolist() == streams[1:]


KERNEL_IDS = "SELECT correlationId, deviceId, streamId, globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid"


def _kernel_ids(activity) -> list[tuple]:
    kernels = activity.kernels
    return list(zip(*(c.tolist() for c in (kernels.correlation_id, kernels.device_id, kernels.stream_id, kernels.pid))))


@pytest.mark.parametrize("arrow", [True, False], ids=["arrow", "rows"])
def test_ids_that_fit_are_kept_narrow(monkeypatch, arrow):
    """Ids (names, correlation, device, stream, process) as int32, times as int64; the values SQL's."""
    path = REAL / "ddp_host_all_nsys.sqlite.xz"   # (two ranks: two processes)
    _, activity = _activity(path, arrow, monkeypatch)
    kernels, calls = activity.kernels, activity.calls
    assert kernels.start.dtype == np.int64 and calls.end.dtype == np.int64
    for column in (kernels.short_name_id, kernels.correlation_id, kernels.device_id, kernels.stream_id, kernels.pid,
                   calls.correlation_id, calls.pid, calls.name_id):
        assert column.dtype == np.int32
    assert _kernel_ids(activity) == [tuple(r) for r in sql(path, KERNEL_IDS)]
    assert len(set(kernels.pid.tolist())) == 2


WIDE = 2**31 + 5   # one past int32's largest value, and a few


@pytest.mark.parametrize("arrow", [True, False], ids=["arrow", "rows"])
def test_an_id_past_int32_is_read_as_int64_not_wrapped(tmp_path, monkeypatch, arrow):
    """A copy of a real export with the last kernel's correlation id (and its launch call's) and stream id, and
    the 700th kernel's process id raised past int32: those columns are int64 and hold SQL's values, the others
    stay int32, the raised kernel still finds its launch call, and the kernel totals are SQL's. Process ids are
    made 300 at a time here, so the wide one comes in a later chunk than the first."""
    from nsanalyze.normalize import activity as module

    path = _copy(tmp_path, "wide_ids.sqlite",
                 f"""UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = {WIDE} WHERE correlationId =
                       (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid DESC LIMIT 1);
                     UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = {WIDE}, streamId = {WIDE + 2}
                       WHERE rowid = (SELECT MAX(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);
                     UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = {WIDE} << 24
                       WHERE rowid = (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1 OFFSET 699)""")
    monkeypatch.setattr(module, "CODE_CHUNK", 300)
    _, activity = _activity(path, arrow, monkeypatch)
    kernels, calls = activity.kernels, activity.calls
    assert kernels.correlation_id.dtype == kernels.stream_id.dtype == kernels.pid.dtype == np.int64
    assert calls.correlation_id.dtype == np.int64
    assert kernels.device_id.dtype == kernels.short_name_id.dtype == calls.pid.dtype == np.int32
    assert _kernel_ids(activity) == [tuple(r) for r in sql(path, KERNEL_IDS)]
    assert (kernels.correlation_id[-1], kernels.stream_id[-1], kernels.pid[699]) == (WIDE, WIDE + 2, WIDE)
    # the last kernel's launch call, joined by (process, correlation id) as the timeline joins them
    call_start = sql(path, f"SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = {WIDE}")[0][0]
    assert activity.launch_call_starts()[2][len(kernels) - 1] == call_start
    count, total = sql(path, "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert len(kernels) == count and int((kernels.end - kernels.start).sum()) == total


def _copy(tmp_path, name, *statements):
    path = tmp_path / name
    shutil.copy(open_local(REAL / "item_sync_nsys.sqlite.xz")[1], path)
    with sqlite3.connect(path) as con:
        for statement in statements:
            con.executescript(statement)
    return path


def _counts(path):
    with sqlite3.connect(path) as con:
        return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")}


# Row bounds come from the rowid range (no pass over the table); each case is a way that range could lie.
ROWID_CASES = {
    # deleted rows leave rowid gaps: the range is above the count, the survey scans and still counts right
    "gaps": ["DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 3 = 0",
             "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE rowid % 7 = 1"],
    # a column named rowid hides the real one: its values say nothing of the rows
    "rowid column": ["CREATE TABLE k2 AS SELECT 1 AS rowid, * FROM CUPTI_ACTIVITY_KIND_KERNEL",
                     "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL", "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL",
                     "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE start % 7 = 1"],
    # rowids far apart: a range larger than the file could hold is not used as a bound
    "far rowids": ["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = 9000000000000000000 "
                   "WHERE rowid = (SELECT MAX(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME)"],
}


@pytest.mark.parametrize("keep_chunk", [nsys.KEEP_CHUNK, 100], ids=["rows tested at once", "100 at a time"])
@pytest.mark.parametrize("case", ROWID_CASES)
def test_rows_left_out_are_counted_whatever_the_rowids_say(tmp_path, monkeypatch, case, keep_chunk):
    monkeypatch.setattr(nsys, "KEEP_CHUNK", keep_chunk)   # (the bare read's row tests, a chunk at a time)
    path = _copy(tmp_path, "rowids.sqlite", *ROWID_CASES[case])
    counts = _counts(path)
    export, activity = _activity(path, True, monkeypatch)
    bounds = export.row_bounds()
    assert all(bounds[t] >= n for t, n in counts.items()), (bounds, counts)
    with sqlite3.connect(path) as con:
        bad = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE end < start").fetchone()[0]
    assert len(activity.kernels) == counts["CUPTI_ACTIVITY_KIND_KERNEL"] - bad
    assert export.dropped_rows.get("CUPTI_ACTIVITY_KIND_KERNEL", 0) == bad
    assert len(activity.calls) == counts["CUPTI_ACTIVITY_KIND_RUNTIME"] + _counts_driver(path)


def _counts_driver(path):
    with sqlite3.connect(path) as con:
        has = con.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_DRIVER'").fetchone()[0]
        return con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_DRIVER").fetchone()[0] if has else 0


def test_row_bounds_are_the_counts_of_an_untouched_export(monkeypatch):
    export, _ = _activity(REAL / "item_sync_nsys.sqlite.xz", True, monkeypatch)
    path = open_local(REAL / "item_sync_nsys.sqlite.xz")[1]
    with sqlite3.connect(path) as con:
        assert export.row_bounds() == {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                                       for t in export.row_bounds()}


def test_a_capture_without_kernels_reads_its_gpu_metrics_through_arrow(tmp_path, monkeypatch):
    """A capture without a kernel table gets an empty stand-in table under the kernels view; the Arrow reader
    makes it again in its own connection (it refused the export, and 2.3M GPU-metric samples were read row by row:
    4.5 s against 1.8 s). Its copies, calls and samples are those the row reader reads, and SQL's count."""
    from nsanalyze.normalize.gpu_metrics import read_samples

    path = tmp_path / "no_kernels.sqlite"
    shutil.copy(open_local(DEV_INFER_NSYS)[1], path)
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    by_arrow = _activity(path, True, monkeypatch)
    by_rows = _activity(path, False, monkeypatch)
    assert len(by_arrow[1].kernels) == 0 and len(by_arrow[1].calls) == len(by_rows[1].calls) > 0
    for name in by_rows[1].copies.names():
        assert np.array_equal(getattr(by_arrow[1].copies, name), getattr(by_rows[1].copies, name)), name
    samples, rows = read_samples(by_arrow[0]), read_samples(by_rows[0])
    assert samples.series.keys() == rows.series.keys() and samples.series
    for key, (times, values) in samples.series.items():
        assert np.array_equal(times, rows.series[key][0]) and np.array_equal(values, rows.series[key][1]), key
    ((count,),) = sql(DEV_INFER_NSYS, "SELECT COUNT(*) FROM GPU_METRICS")
    assert 0 < sum(len(times) for times, _ in samples.series.values()) <= count
