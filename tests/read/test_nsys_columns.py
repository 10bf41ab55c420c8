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


def test_ids_that_fit_are_kept_narrow(monkeypatch):
    _, activity = _activity(DEV_INFER_NSYS, True, monkeypatch)
    assert activity.kernels.short_name_id.dtype == np.int32
    assert activity.kernels.start.dtype == np.int64 and activity.kernels.correlation_id.dtype == np.int64


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


@pytest.mark.parametrize("case", ROWID_CASES)
def test_rows_left_out_are_counted_whatever_the_rowids_say(tmp_path, monkeypatch, case):
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
