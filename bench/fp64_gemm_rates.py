"""What a recording of bench/fp64_gemm_program.py says of float64 GEMMs against float32 ones: per GEMM (M, K, N,
forward/dgrad/wgrad), its float64 time over its float32 time (each a median of the program's calls); the median over
the GEMMs and their range, for the recording GPU's chip (normalize/device_caps.csv). fp64-compute prices a float64
GEMM at the device tables' FP32 rate over their FP64 rate (1 on an H100); bench/fp64_gemm_h100.json checks that.

    python bench/fp64_gemm_rates.py bench/fp64_gemm_h100.json [--rows]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsanalyze.normalize.device_caps import device_caps  # noqa: E402


def ratios(recording: dict) -> list[float]:
    """float64 time over float32 time of each GEMM recorded."""
    return [g["fp64_ms"] / g["fp32_ms"] for g in recording["gemms"] if g["fp32_ms"] > 0]


def row(path: Path) -> dict:
    """The table's row for the recording at `path`."""
    recording = json.loads(path.read_text())
    values = ratios(recording)
    caps = device_caps(recording["gpu"]) or {}
    return {"chip": caps.get("chip", ""), "median": f"{statistics.median(values):.2f}", "low": f"{min(values):.2f}",
            "high": f"{max(values):.2f}", "gemms": len(values),
            "source": f"bench/fp64_gemm_rates.py over bench/{path.name} ({recording['gpu']}; torch "
                      f"{recording['torch']})"}


def main() -> None:
    path = Path(sys.argv[1])
    if "--rows" in sys.argv:
        for g in json.loads(path.read_text())["gemms"]:
            print(f"{g['m']:>6} {g['k']:>5} {g['n']:>5} {g['op']:<8} {g['fp64_ms'] / g['fp32_ms']:.2f}x")
    r = row(path)
    print(",".join(str(r[k]) for k in ("chip", "median", "low", "high", "gemms")) + f',"{r["source"]}"')


if __name__ == "__main__":
    main()
