"""SM clock below the device's maximum during the kernel.

## What it detects
Kernels whose measured SM clock stayed well below the maximum GPU clock: power or thermal
throttling, a clock locked low by an administrator, or a profile taken with ncu's default
`--clock-control base`.

## Why it is slow
Compute time scales with the clock: at 80% of the clock a compute-bound kernel takes 25% longer.

## Example
```
ncu --set full -o rep ./app      # default clock control locks the base clock
```

## Instead
```
ncu --clock-control none --set full -o rep ./app   # measure at the clocks the application sees
nvidia-smi -q -d PERFORMANCE                        # look for power or thermal slowdown
```

## Known problems
A report taken with `--clock-control base` shows the base clock by design; the advice says so.

How much a faster clock saves depends on how much of the time the SM's pipelines bound (its compute
speed-of-light share). A report without the SpeedOfLight section does not say: the finding then
reports the clock, saves nothing (info) and notes what would measure the saving, rather than
assume the whole kernel scales with the clock.

Under ncu's lock (`--clock-control base`) a clock below the locked base clock is evidence too: the GPU
could not hold even the base clock (a T4 at 530-554 MHz against its 585 MHz lock). It is judged against
the lock (`max_lock_ratio`), not the maximum.

A kernel shorter than 20 us measures its clock too coarsely to compare: where every kernel of a report is
that short, no clock is read and the check is not judged (the report's clock line says so), as it is not on
the short kernels beside long ones.

## Options
- `max_lock_ratio`: measured over the locked base clock below which a locked report's clock speaks.
- `max_clock_ratio`: measured over maximum SM clock below which the check speaks.
"""

from nsanalyze.checks.base import Check, Finding, KernelView, Threshold, busy_scaled, evidence

ID = "clock-throttling"
ADVICE = """Find out why the clock is low before tuning the kernel.

- Profiles taken with ncu's default `--clock-control base` run at the base clock: re-profile with
  `--clock-control none` to see real clocks.
- Check `nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE` for power or thermal slowdown and
  `nvidia-smi -q -d CLOCK` for application clocks locked low.
- Sustained throttling under load: improve cooling or lower power draw (fewer wasted instructions).

```
# before
ncu --set full -o report ./app
# after: clocks as the application sees them
ncu --clock-control none --set full -o report ./app
```"""

# Clocks that ncu did not lock (they varied, or ran near the maximum elsewhere: normalize.clocks): the GPU lowered
# them itself, and re-profiling with --clock-control none, which the report already was, changes nothing
FREE_ADVICE = """Find out why the GPU lowered its clock before tuning the kernel: ncu did not lock the clocks of this
report (they varied between kernels), so the GPU ran below its maximum on its own.

- `nvidia-smi -q -d PERFORMANCE` while the program runs: the active slowdown reasons (`SW Power Cap`, `HW Slowdown`,
  `SW Thermal Slowdown`); `-d POWER,TEMPERATURE` for the draw against its limit.
- `nvidia-smi -q -d CLOCK`: application clocks an administrator set low (`nvidia-smi -rgc` resets them).
- A power cap under sustained load (dense tensor-core GEMMs draw the most): the clock follows the power limit; less
  wasted work (casts, redundant copies) lowers the draw, the limit itself is the administrator's.

```
nvidia-smi -q -d PERFORMANCE,POWER,CLOCK   # while the program runs
```"""

CHECK = Check(
    id=ID,
    name="device.clock",
    title="SM clock below the device's maximum",
    section="kernel",
    requires=("sm_clock_ratio",),
    optional=("sm_frequency_hz", "max_sm_frequency_hz", "sm_throughput_pct", "locked_clock_hz"),
    collect="--section SpeedOfLight",
    relieves="compute",
    thresholds={
        "max_clock_ratio": Threshold(0.85, "boost clocks wander by a few percent under load; 15% below the maximum "
                                           "is throttling or a locked clock"),
        "max_lock_ratio": Threshold(0.96, "a GPU that did not hold ncu's lock (2% below its base clock: the report's clock "
                                          "line) costs a compute-bound kernel a few percent there; 4% below it, a line"),
    },
    speedup_model=("(1 - measured / maximum clock) x compute speed-of-light share: only clock-bound time shrinks; "
                   "without a measured compute share, no savings (info) and a note naming --section SpeedOfLight"),
    advice=ADVICE,
)


def run(kernel: KernelView, limits) -> Finding | None:
    ratio = kernel.get("sm_clock_ratio")
    locked = kernel.get("locked_clock_hz")
    if ratio >= limits["max_lock_ratio" if locked else "max_clock_ratio"]:
        return None
    compute = kernel.get("sm_throughput_pct")
    measured, maximum = kernel.get("sm_frequency_hz"), kernel.get("max_sm_frequency_hz")
    speedup, notes = busy_scaled(1 - ratio, compute, "the report does not measure the compute speed-of-light share "
                                 "(sm_throughput_pct) that says how much of the kernel's time a faster clock "
                                 "shortens; ncu --section SpeedOfLight measures it")
    if locked:  # ncu locked the base clock and the GPU fell below it: power or thermal slowdown under the lock
        return Finding(
            check=ID,
            title=f"SM clock {1 - ratio:.0%} below the base clock ncu locked"
                  + (f" ({measured / 1e6:.0f} of {locked / 1e6:.0f} MHz)" if measured else "")
                  + ": the GPU did not hold the lock (power or thermal slowdown)",
            estimated_speedup=speedup,
            evidence={"sm_clock_ratio": evidence(ratio, limits["max_lock_ratio"], unit="ratio", compare="<"),
                      "sm_frequency_hz": evidence(measured, unit="hz"), "locked_clock_hz": evidence(locked, unit="hz"),
                      "max_sm_frequency_hz": evidence(maximum, unit="hz"),
                      "sm_throughput_pct": evidence(compute, unit="%")},
            advice=ADVICE,
            notes=notes,
        )
    return Finding(
        check=ID,
        title=f"SM clock at {ratio:.0%} of the maximum"
              + (f" ({measured / 1e6:.0f} of {maximum / 1e6:.0f} MHz)" if measured and maximum else ""),
        estimated_speedup=speedup,
        evidence={"sm_clock_ratio": evidence(ratio, limits["max_clock_ratio"], unit="ratio", compare="<"),
                  "sm_frequency_hz": evidence(measured, unit="hz"),
                  "max_sm_frequency_hz": evidence(maximum, unit="hz"),
                  "sm_throughput_pct": evidence(compute, unit="%")},
        advice=FREE_ADVICE,
        notes=notes,
    )
