"""GPU clock below its maximum while the GPU works (from nsys GPU metrics).

## What it detects
Samples taken while the GPU is busy (GR Active above a floor) whose GPC clock sits well below the
device's maximum clock: power or thermal throttling, or clocks locked low.

## Why it is slow
Everything on the SMs runs in proportion to the clock.

## Example
```
nvidia-smi -lgc 900            # clocks locked low by someone
```

## Instead
```
nvidia-smi -rgc                # reset; then check nvidia-smi -q -d PERFORMANCE for throttle reasons
```

## Known problems
Idle samples run at low clocks by design and are excluded only approximately (by GR Active).

Its id was `clock-throttling` until that id became the kernel check's alone (ids are unique across
kernel and program checks); `--skip` and `--set` take `gpu-clock-throttling`.

## Options
- `max_clock_ratio`: median busy clock over the maximum below which the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, Threshold, clamp01, evidence

ID = "gpu-clock-throttling"
BUDGET_PART = "gpu_compute"
ADVICE = """Find out why the clock is low: `nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE,CLOCK`.

- Power or thermal slowdown: cooling, power limits, fewer wasted instructions.
- Application clocks locked low: `nvidia-smi -rgc` (administrator).

```
# before: locked
nvidia-smi -lgc 900
# after
nvidia-smi -rgc
```"""

CHECK = Check(
    id=ID,
    name="program.device.clock",
    title="GPU clock below its maximum while busy",
    section="busy",
    requires=("busy_clock",),
    thresholds={"max_clock_ratio": Threshold(0.85, "boost clocks wander a few percent; 15% below the maximum is throttling")},
    speedup_model="1 - busy median clock / maximum clock, times the busy share of the window",
    budget_part=BUDGET_PART,
    change={"speedup": ("*",)},  # the replay change priced (program.py)
    advice=ADVICE,
)


def run(timeline, limits) -> Finding | None:
    busy = timeline.busy_clock
    ratio = busy.median_mhz / busy.max_mhz if busy.max_mhz else None
    if ratio is None or ratio >= limits.max_clock_ratio:
        return None
    return Finding(
        check=ID,
        title=f"While busy the GPU clock runs at {ratio:.0%} of its maximum ({busy.median_mhz:.0f} of "
              f"{busy.max_mhz:.0f} MHz)",
        estimated_speedup=clamp01((1 - ratio) * (timeline.summary.gpu_busy_share or 0.0)),
        evidence={"busy_clock_ratio": evidence(ratio, limits.max_clock_ratio, unit="ratio", compare="<"),
                  "busy_median_mhz": evidence(busy.median_mhz, unit="MHz"),
                  "max_mhz": evidence(busy.max_mhz, unit="MHz")},
        advice=ADVICE,
    )
