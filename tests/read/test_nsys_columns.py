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
