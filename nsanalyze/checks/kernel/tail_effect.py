"""Tail effect: SMs idle while the last blocks finish.

## What it detects
A grid with a block for every SM whose last, partial wave keeps a few SMs busy while the rest idle.
Kernels in which the average SM was busy for much less time than the busiest one: a last,
partial wave of blocks (e.g. 133 blocks on 132 SMs) or blocks of very uneven length.

## Why it is slow
The kernel ends when its last block ends. If one SM runs a second round of blocks while the
others have nothing left, most of the GPU idles for that whole round.

## Example
```cuda
long_block_kernel<<<133, 1024>>>(...);   // 132 SMs: one SM runs the 133rd block alone
```

## Instead
```cuda
long_block_kernel<<<132, 1024>>>(...);   // a whole number of waves, or many small blocks
```

## Known problems
Uneven work per block shows the same signature; the advice then is to balance the work.

## Options
- `min_idle_share`: the busiest SM's time the average SM spent idle.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, clamp01, evidence, plural

ID = "tail-effect"
ADVICE = """Make the work divide evenly over the SMs.

- Size the grid as a whole number of waves: `blocks = k * numSMs * blocksPerSM`.
- Use many small blocks instead of few long ones, so the last wave is short.
- Use a persistent, grid-stride kernel with `numSMs * blocksPerSM` blocks that loop over the work.

```cuda
// before: 133 long blocks on 132 SMs
work<<<133, 1024>>>(data, n);
// after: one block per SM, each striding over the work
int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
work<<<sms, 1024>>>(data, n);   // for (i = blockIdx.x; i < tiles; i += gridDim.x) ...
```"""

CHECK = Check(
    id=ID,
    name="scheduling.tail",
    title="Tail effect: SMs idle while the last blocks finish",
    section="kernel",
    requires=("sm_busy_imbalance",),
    optional=("waves_per_sm", "grid_size", "sm_count", "blocks_per_sm_limit"),
    collect="--set full (SpeedOfLight and LaunchStats sections)",
    relieves=None,
    thresholds={
        "min_idle_share": Threshold(0.15, "busy-time spread across SMs of a few percent is normal; 15% is a wave problem"),
    },
    speedup_model="1 - mean SM active cycles / max SM active cycles: the time a perfectly balanced launch would save",
    advice=ADVICE,
)


WHOLE_WAVE = 0.01  # waves within 1% of a whole number leave no partial wave
UNEVEN_ADVICE = ("**Cause: uneven work per block.** The grid already fills whole waves; some blocks run longer than "
                 "others (data-dependent loops, uneven tiles or splits): balance the work per block, or split the long "
                 "blocks' work over more, smaller blocks.\n\n")


def run(kernel: KernelView, limits) -> Finding | None:
    idle = kernel.get("sm_busy_imbalance")
    if idle < limits["min_idle_share"]:
        return None
    grid, sms, waves = kernel.get("grid_size"), kernel.get("sm_count"), kernel.get("waves_per_sm")
    if grid is not None and sms is not None and grid < sms:
        return None  # SMs without any block: the grid is too small (small-grid), there is no last wave
    shape = f" ({plural(grid, 'block')} on {plural(sms, 'SM')}, {waves:.2f} waves)" if None not in (grid, sms, waves) else ""
    # a whole number of waves has no partial last wave: the spread is the blocks' uneven work
    uneven = waves is not None and waves >= 1 and abs(waves - round(waves)) < WHOLE_WAVE
    return Finding(
        check=ID,
        title=f"The average SM idles {idle:.0%} of the kernel while the busiest finishes{shape}"
              + (": the grid fills whole waves, so its blocks' work is uneven" if uneven else ""),
        estimated_speedup=clamp01(idle),
        evidence={"sm_busy_imbalance": evidence(idle, limits["min_idle_share"], unit="ratio"),
                  "waves_per_sm": evidence(waves), "grid_size": evidence(grid), "sm_count": evidence(sms)},
        advice=(UNEVEN_ADVICE if uneven else "") + ADVICE,
    )
