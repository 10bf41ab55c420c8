"""Blocks whose size wastes warp lanes.

## What it detects
A block size that is not a multiple of the warp size (32 threads): the last warp of every block
runs with lanes switched off. 1-thread blocks use 1 lane in 32.

## Why it is slow
The SM schedules whole warps. A 1-thread block occupies a warp slot (and a block slot) for 1/32 of
the work; a 48-thread block wastes 16 lanes of its second warp on every instruction.

## Example
```cuda
scale<<<n, 1>>>(x);            // one thread per block
```

## Instead
```cuda
scale<<<(n + 255) / 256, 256>>>(x, n);   // 256 threads: 8 full warps, guard the tail with if (i < n)
```

## Known problems
Kernels that launch a single block on purpose (a final reduction) are cheap; rank by time decides.

## Options
- `min_wasted_lanes`: wasted lane share before the check speaks.
"""

import math

from nsanalyze.checks.base import Finding, KernelView, Threshold, evidence

ID = "block-size"
NAME = "scheduling.block.size"
TITLE = "Block size wastes warp lanes"
SECTION = "kernel"  # the report section its findings appear in
REQUIRES = ("block_size",)
OPTIONAL = ("grid_size",)
COLLECT = "--section LaunchStats"
RELIEVES = None
THRESHOLDS = {"min_wasted_lanes": Threshold(0.10, "a tenth of every warp's lanes idle is worth a one-line change")}
SPEEDUP_MODEL = "the share of warp lanes the block size leaves empty: 1 - threads / (warps x 32)"
ADVICE = """Use a block size that is a multiple of 32 (128-256 threads is a good default).

```cuda
// before
kernel<<<n, 1>>>(x);
// after
kernel<<<(n + 127) / 128, 128>>>(x, n);   // if (i < n) guards the tail
```"""


def run(kernel: KernelView, limits) -> Finding | None:
    threads = kernel.get("block_size")
    if not threads:
        return None
    lanes = math.ceil(threads / 32) * 32
    wasted = 1 - threads / lanes
    if wasted < limits["min_wasted_lanes"]:
        return None
    return Finding(
        check=ID,
        title=f"{threads:.0f}-thread blocks fill {threads / lanes:.0%} of their warps' lanes "
              f"(block size not a multiple of 32)",
        estimated_speedup=wasted,
        evidence={"block_size": evidence(threads, unit="threads"),
                  "wasted_lane_share": evidence(wasted, limits["min_wasted_lanes"], unit="ratio"),
                  "grid_size": evidence(kernel.get("grid_size"), unit="blocks")},
        advice=ADVICE,
    )
