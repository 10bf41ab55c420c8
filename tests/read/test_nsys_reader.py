"""The nsys reader: schema detection across versions, views over the export, totals equal to SQL."""

import sqlite3

import pytest

from nsanalyze.read import read_profile
from nsanalyze.read.files import open_local
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NSYS, PUBLIC, PUBLIC_NSYS


@pytest.mark.parametrize("path", PUBLIC_NSYS + [DEV_SUITE_NSYS, DEV_INFER_NSYS], ids=lambda p: p.name[:50])
def test_kernel_totals_equal_direct_sql(path):
    export = read_profile(path)
    _, local = open_local(path)
    with sqlite3.connect(local) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        expected = con.execute("SELECT COUNT(*), COALESCE(SUM(end - start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone() \
            if "CUPTI_ACTIVITY_KIND_KERNEL" in tables else (0, 0)
    assert tuple(export.query("SELECT COUNT(*), COALESCE(SUM(duration_ns), 0) FROM kernels")[0]) == tuple(expected)


def test_old_schema_devices_and_names():
    export = read_profile(PUBLIC / "quasiben__nvtx-examples__cudf.sqlite.xz")   # nsys 2020.3
    assert export.devices[0].name == "Quadro RTX 8000" and export.devices[0].compute_capability == "7.5"
    kinds = export.query("SELECT DISTINCT s.label FROM copies c JOIN memory_kinds s ON s.id = c.src_kind")
    assert {"Pageable", "Device"} <= {r[0] for r in kinds}
    assert export.scalar("SELECT COUNT(*) FROM nvtx WHERE name = 'GROUPBY_AGG'") > 0


def test_new_schema_gpu_metrics():
    export = read_profile(DEV_INFER_NSYS)
    assert export.has_gpu_metrics
    assert export.devices[0].sm_count == 132


def test_export_without_kernels_is_empty_not_an_error():
    export = read_profile(PUBLIC / "quasiben__nvtx-examples__quickstart.sqlite.xz")
    assert export.scalar("SELECT COUNT(*) FROM kernels") == 0
    assert export.scalar("SELECT COUNT(*) FROM nvtx") > 0
