"""narrow_gemm_rates.csv from the recording of bench/narrow_gemm_program.py (bench/record_narrow_gemm.sh): per GEMM
(dtype, M, K, N, forward/dgrad/wgrad), the median over its calls of the GPU time of the kernels each NVTX range
launched, narrow against padded; kept where the narrow call's GEMM kernel states a load under 16 bytes and the padded
call's none (gemm_loads.load_bytes). Per load width: the median slowdown and its range.

    python bench/narrow_gemm_rates.py fixtures/real/narrow_gemm_h200_nsys.sqlite.xz [--chip GH100] [--csv OUT] [--rows]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsanalyze.normalize.gemm_loads import FULL_LOAD_BYTES, load_bytes  # noqa: E402
from nsanalyze.read.files import open_local  # noqa: E402


def calls(path: str) -> dict:
    """{(label, kind): [GPU ns of each call]} and {(label, kind): kernel names}: each call's kernels by its NVTX range
    (one thread, ranges in a row: a runtime call belongs to the range it starts in)."""
    with sqlite3.connect(f"file:{open_local(Path(path))[1]}?mode=ro", uri=True) as db:
        ranges = db.execute("SELECT start, end, text FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start").fetchall()
        launches = db.execute("""SELECT r.start, k.end - k.start, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
            JOIN StringIds s ON s.id = k.demangledName ORDER BY r.start""").fetchall()
    starts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    times: dict = {}
    names: dict = {}
    per_range = np.zeros(len(ranges), dtype=np.int64)
    for start, ns, name in launches:
        i = int(np.searchsorted(starts, start, side="right")) - 1
        if i < 0 or start >= ends[i]:
            continue   # the warm-up calls, outside any range
        per_range[i] += ns
        names.setdefault(ranges[i][2], set()).add(name)
    for (_, _, text), ns in zip(ranges, per_range):
        times.setdefault(text, []).append(int(ns))
    return times, names


def gemm_rows(path: str) -> list[dict]:
    times, names = calls(path)
    rows = []
    for text in sorted(t for t in times if t.endswith(" narrow")):
        base = text.removesuffix(" narrow")
        padded = base + " pad"
        if padded not in times:
            continue
        widths = [w for w in (load_bytes(n) for n in names.get(text, ())) if w is not None]
        if not widths or min(widths) >= FULL_LOAD_BYTES:
            continue   # the library loaded full width anyway
        if any(w < FULL_LOAD_BYTES for w in (load_bytes(n) for n in names.get(padded, ())) if w is not None):
            continue   # padded and still narrow: no full-width twin to compare with
        dtype, m, k, n, gemm = base.split()
        narrow_ns, padded_ns = statistics.median(times[text]), statistics.median(times[padded])
        rows.append({"dtype": dtype, "m": int(m), "k": int(k), "n": int(n), "gemm": gemm, "load_bytes": min(widths),
                     "narrow_ns": narrow_ns, "padded_ns": padded_ns, "slowdown": narrow_ns / padded_ns})
    return rows


def table(rows: list[dict], chip: str, source: str) -> list[dict]:
    out = []
    for width in sorted({r["load_bytes"] for r in rows}):
        mine = [r["slowdown"] for r in rows if r["load_bytes"] == width]
        out.append({"chip": chip, "load_bytes": width, "median": f"{statistics.median(mine):.2f}",
                    "low": f"{min(mine):.2f}", "high": f"{max(mine):.2f}", "gemms": len(mine), "source": source})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("export")
    parser.add_argument("--chip", default="GH100")
    parser.add_argument("--source", default="bench/narrow_gemm_rates.py over fixtures/real/narrow_gemm_h200_nsys "
                                            "(H200; torch 2.11 cu130)")
    parser.add_argument("--rows", action="store_true", help="print every GEMM's figures")
    args = parser.parse_args()
    rows = gemm_rows(args.export)
    if args.rows:
        for r in rows:
            print(f"{r['dtype']:5} {r['m']:6} {r['k']:5} {r['n']:6} {r['gemm']:6} {r['load_bytes']:2} B "
                  f"{r['narrow_ns'] / 1e3:10.1f} us {r['padded_ns'] / 1e3:10.1f} us {r['slowdown']:6.2f}x")
    columns = ("chip", "load_bytes", "median", "low", "high", "gemms", "source")
    print(",".join(columns))
    for row in table(rows, args.chip, args.source):
        print(",".join(f'"{row[c]}"' if c == "source" else str(row[c]) for c in columns))


if __name__ == "__main__":
    main()
