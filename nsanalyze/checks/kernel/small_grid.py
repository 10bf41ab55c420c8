"""The grid is too small to fill the GPU.

## What it detects
Launches whose grid holds fewer blocks than the GPU has SMs, so some SMs get no block at all and
idle for the whole kernel, whatever limits the blocks per SM (registers, shared memory, threads).
A grid under one wave that does not divide evenly over the SMs, with one or two blocks an SM (128 blocks on
80 SMs: 48 SMs run two blocks, 32 run one and then idle, each far below the blocks it can hold) leaves part
of the SMs' time idle too, whatever the occupancy limit.
A grid with the same few blocks on every SM is an occupancy question (low-occupancy).

## Why it is slow
Each SM runs the blocks it is given; an SM without a block idles for the whole kernel. A 10-block
grid on a 132-SM GPU uses 8% of the chip whatever the kernel's code does.

## Example
```cuda
// one block per row of a 64-row matrix: 64 blocks on 132 SMs
row_softmax<<<64, 256>>>(x, cols);
```

## Instead
```cuda
// split each row over several blocks (or warps per row), or batch several problems per launch
row_softmax_split<<<dim3(64, 8), 256>>>(x, cols);   // 512 blocks: every SM busy
```

## Known problems
Small problems (batch-1 inference, the last layers of a network) cannot always be split; batching
requests, fusing kernels or running independent work on other streams fills the GPU instead.

A kernel with its own inefficiency (bank conflicts, uncoalesced access, divergence, spills,
atomics) gets that first: the small-grid savings count only the time left after those findings.

## Options
- `min_idle_sm_share`: the share of SMs without a block before the check speaks.
"""

import math

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, plural

ID = "small-grid"
ADVICE = """Give every SM work.

- Launch more, smaller blocks: split each block's work (rows over several blocks, a split-K
  reduction), or use a grid-stride loop sized to `numSMs * blocksPerSM`.
- Batch several independent problems (requests, heads, layers) into one launch.
- Run independent small kernels concurrently on separate streams, or fuse them into one kernel (in PyTorch,
  `torch.compile` does this).

```cuda
// before: 16 blocks on 132 SMs
reduce<<<16, 1024>>>(x, n);
// after: enough blocks for every SM, then a second pass over the partial results
reduce<<<numSMs * 4, 256>>>(x, partial, n); reduce<<<1, 1024>>>(partial, out, numSMs * 4);
```"""

CHECK = Check(
    id=ID,
    name="scheduling.grid.small",
    title="Grid too small to fill the GPU",
    section="kernel",
    requires=("grid_size", "sm_count"),
    optional=("blocks_per_sm_limit", "blocks_per_sm_limit_registers", "blocks_per_sm_limit_shared_mem",
              "blocks_per_sm_limit_warps", "waves_per_sm", "block_size", "achieved_occupancy_pct", "theoretical_occupancy_pct",
              "sm_active_cycles_max", "sm_active_cycles_avg", "sm_cycles_elapsed", "smsp_cycles_elapsed"),
    collect="--section LaunchStats --section Occupancy",
    relieves=None,
    # Its savings count after the kernel's own code problems (rank.combine_per_kernel); latency findings that
    # the small grid itself causes (low-occupancy: "the grid fills less than one wave") overlap with it instead.
    after=("bank-conflicts", "uncoalesced-global", "warp-divergence", "local-memory-spill", "atomic-contention",
           "missing-tensor-cores"),
    thresholds={
        "min_idle_sm_share": Threshold(0.10, "a tenth of the SMs without a block is more than launch-to-launch noise "
                                             "in how blocks land on SMs"),
        "parallel_efficiency": Threshold(0.5, "splitting the work over more blocks recovers about half the idle "
                                              "share: the split adds reductions and the kernel may be latency-bound"),
    },
    speedup_model=("(1 - blocks / SMs, the share of SMs left without a block; under one wave, 1 - blocks per SM / "
                   "the most blocks an SM runs) x parallel_efficiency x the share of the kernel's cycles the busiest SM "
                   "ran (the launch's front end stays), of the time left after the kernel's code-level findings"),
    advice=ADVICE,
)


OCCUPANCY_LIMITS = ("blocks_per_sm_limit", "blocks_per_sm_limit_registers", "blocks_per_sm_limit_shared_mem",
                    "blocks_per_sm_limit_warps")


def blocks_per_sm(kernel: KernelView) -> float | None:
    """The blocks an SM can hold of this launch: the least of the occupancy limits (the hardware's blocks,
    registers, shared memory, warps; ncu's launch__occupancy_limit_*), None where none is in the report."""
    values = [kernel.get(c) for c in OCCUPANCY_LIMITS]
    values = [v for v in values if v is not None and v > 0]
    return min(values) if values else None


# The SMs' measured idle share replaces the placement's bound where it lies this far below it (the blocks of a
# fuller SM ran side by side, not one after the other); near it, the bound stands (the dev suite's one extra block:
# 49.5% measured against 49.6%)
MEASURED_BELOW = 0.8
MOST_UNEVEN_BLOCKS = 2  # one block against two per SM halves an SM's work; 4 against 5 is within latency's noise


def _within_one_wave(kernel: KernelView, grid: float, sms: float) -> bool:
    """The grid fits on the GPU at once (under one wave): every block starts at the launch."""
    waves = kernel.get("waves_per_sm")
    if waves is not None:
        return waves < 1
    per_sm = blocks_per_sm(kernel)
    return per_sm is not None and grid < per_sm * sms


def run(kernel: KernelView, limits) -> Finding | None:
    grid, sms = kernel.get("grid_size"), kernel.get("sm_count")
    if not grid or not sms:
        return None
    if grid < sms:
        idle_sms = clamp01(1 - grid / sms)  # SMs without a block, whatever limits the blocks per SM
        title = f"{plural(grid, 'block')} on {plural(sms, 'SM')}: {idle_sms:.0%} of the SMs get no block"
    elif _within_one_wave(kernel, grid, sms) and grid % sms and math.ceil(grid / sms) <= MOST_UNEVEN_BLOCKS:
        # under one wave, blocks land unevenly: some SMs run twice the blocks of the rest
        most = math.ceil(grid / sms)
        idle_sms = clamp01(1 - (grid / sms) / most)
        fuller = int(grid - (most - 1) * sms)
        limit = blocks_per_sm(kernel)
        rest = int(sms) - fuller
        title = (f"{plural(grid, 'block')} on {plural(sms, 'SM')}, under one wave: {plural(fuller, 'SM')} "
                 f"{'runs' if fuller == 1 else 'run'} {plural(most, 'block')} while {rest} "
                 f"{'runs' if rest == 1 else 'run'} {most - 1}" + (f", of the {limit:.0f} an SM can hold" if limit else "")
                 + f": up to {idle_sms:.0%} of the SMs' time idles")
    else:
        return None
    if idle_sms < limits["min_idle_sm_share"]:
        return None
    # the placement says the grid is uneven; what it costs is the SMs' measured idle share, where lower: the
    # placement's bound is an upper one (FaSTED's memCpyAsync kernel: 128 blocks on 108 SMs read "up to 41%" where
    # the SMs ran 90% of the cycles). An SM's sub-partitions count the SM's clock: their elapsed cycles stand in where
    # ncu 2022 has no SM's own
    mean_active = kernel.get("sm_active_cycles_avg")
    elapsed_cycles = kernel.get("sm_cycles_elapsed") or kernel.get("smsp_cycles_elapsed")
    measured = clamp01(1 - mean_active / elapsed_cycles) if mean_active is not None and elapsed_cycles else None
    cost = idle_sms
    if measured is not None and measured < MEASURED_BELOW * idle_sms:
        cost = measured
        title = title.split(": up to ")[0] + (f": the SMs idled {measured:.0%} of the kernel's cycles (measured; "
                                              f"up to {idle_sms:.0%} had the fuller SMs run their blocks one by one)")
    waves = kernel.get("waves_per_sm")
    # More blocks shorten only the time the SMs run; the launch's front end and drain, when no SM runs, stay
    active, elapsed = kernel.get("sm_active_cycles_max"), kernel.get("sm_cycles_elapsed")
    running = clamp01(active / elapsed) if active is not None and elapsed else 1.0
    notes = [f"the busiest SM ran {running:.0%} of the kernel's cycles; more blocks shorten only that part"] \
        if running < 0.9 else []
    return Finding(
        check=ID,
        title=title,
        estimated_speedup=cost * limits["parallel_efficiency"] * running,
        evidence={"idle_sm_share": evidence(idle_sms, limits["min_idle_sm_share"], unit="ratio"),
                  **({"measured_idle_sm_share": evidence(measured, unit="ratio")} if cost != idle_sms else {}),
                  "grid_size": evidence(grid, unit="blocks"), "sm_count": evidence(sms),
                  "waves_per_sm": evidence(waves),
                  "blocks_per_sm_limit": evidence(blocks_per_sm(kernel)),
                  "achieved_occupancy_pct": evidence(kernel.get("achieved_occupancy_pct"), unit="%"),
                  "theoretical_occupancy_pct": evidence(kernel.get("theoretical_occupancy_pct"), unit="%"),
                  "block_size": evidence(kernel.get("block_size"), unit="threads"),
                  **({"sm_running_share": evidence(running, unit="ratio")} if running < 1.0 else {})},
        advice=ADVICE,
        notes=notes,
    )
