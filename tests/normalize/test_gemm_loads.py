"""The narrow-load slowdown table (normalize/narrow_gemm_rates.csv) against the recording it was made from
(fixtures/real/narrow_gemm_h200_nsys: bench/narrow_gemm_program.py under nsys on the H200, the forward, dgrad and
wgrad GEMMs of a linear layer with a width not a multiple of 8, narrow against padded): the table is what
bench/narrow_gemm_rates.py reads off it, and its figures hold against plain SQL over the export."""

import csv
import importlib.util
import statistics
from pathlib import Path

import pytest

from nsanalyze.normalize.gemm_loads import RATES_PATH, load_bytes, narrow, slowdown
from tests.conftest import REAL, sql

EXPORT = REAL / "narrow_gemm_h200_nsys.sqlite.xz"
ROOT = Path(__file__).resolve().parents[2]


def _rates_script():
    spec = importlib.util.spec_from_file_location("narrow_gemm_rates", ROOT / "bench" / "narrow_gemm_rates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_is_what_the_recording_gives():
    """Each row of the shipped table (chip GH100; 2- and 4-byte loads) equals the script's reading of the export."""
    script = _rates_script()
    rows = script.gemm_rows(str(EXPORT))
    columns = ("chip", "load_bytes", "median", "low", "high", "gemms")
    made = [tuple(str(row[c]) for c in columns) for row in script.table(rows, "GH100", "")]
    with open(RATES_PATH, newline="") as handle:
        shipped = [tuple(row[c] for c in columns) for row in csv.DictReader(l for l in handle if not l.startswith("#"))]
    assert made == shipped and len(rows) == 414
    assert slowdown("GH100", 2)["median"] == pytest.approx(5.62) and slowdown("GH100", 4)["median"] == pytest.approx(3.01)
    assert slowdown("GA100", 2) is None and slowdown("GH100", 8) is None


def test_one_gemm_against_sql():
    """bf16, M 16,384, K 1,024, N 50,257 (odd: CUTLASS's align1 kernel, 2-byte loads), the forward GEMM: its median
    call by SQL (the kernels launched in each of its 10 NVTX ranges) against the padded twin's (nvjet, no load width
    in its name), as the script reads them."""
    def median_call(label):
        rows = sql(EXPORT, f"""SELECT n.start, SUM(k.end - k.start), GROUP_CONCAT(s.value) FROM NVTX_EVENTS n
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= n.start AND r.start < n.end
            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
            JOIN StringIds s ON s.id = k.demangledName WHERE n.text = '{label}' GROUP BY n.start""")
        assert len(rows) == 10
        return statistics.median(ns for _, ns, _ in rows), {n for _, _, names in rows for n in names.split(",")}

    narrow_ns, narrow_names = median_call("bf16 16384 1024 50257 fwd narrow")
    padded_ns, padded_names = median_call("bf16 16384 1024 50257 fwd pad")
    assert {load_bytes(n) for n in narrow_names} == {2} and not any(narrow(n) for n in padded_names)
    row = next(r for r in _rates_script().gemm_rows(str(EXPORT))
               if (r["dtype"], r["m"], r["k"], r["n"], r["gemm"]) == ("bf16", 16384, 1024, 50257, "fwd"))
    assert (row["narrow_ns"], row["padded_ns"]) == (narrow_ns, padded_ns)
    assert 5.0 < narrow_ns / padded_ns < 10.1
