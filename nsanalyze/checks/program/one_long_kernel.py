"""GPU-bound in one long kernel: the program is that kernel.

## What it detects
A window in which a few launches (one to three kernels) fill most of the time: nothing on the
host or in the launch path holds the program back; the kernel itself does. nsys cannot say why a
kernel is slow: the finding says so and points to Nsight Compute.

## Why it is slow
Whatever limits the kernel (memory access, occupancy, divergence, its algorithm) limits the
program; the timeline shows only that it runs.

## Example
```
nsys profile -o run ./solver       # one 50 s kernel: the timeline is one bar
```

## Instead
```
ncu --set full --import-source yes -k regex:<kernel> -c 1 -o kernel ./solver
nsanalyze report kernel.ncu-rep     # what holds the kernel back, with its source lines
```

## Known problems
The savings are unknown until the kernel is profiled: the finding carries none and ranks by
the kernel's share of the window.

## Options
- `min_kernel_share`: the window's share the few kernels fill before the check speaks.
- `max_kernels`: at most this many kernel launches count as "one long kernel".
"""

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, plural

ID = "one-long-kernel"
ADVICE = """Profile the kernel with Nsight Compute; the timeline cannot show what limits it.

```
ncu --set full --import-source yes -k regex:KERNEL -c 1 -o kernel ./app
nsanalyze report kernel.ncu-rep
```

Build with `-lineinfo` so the findings point at source lines; for a kernel of many seconds, add
`--replay-mode application` or shrink the input, since ncu replays the kernel once per metric pass."""

CHECK = Check(
    id=ID,
    name="program.kernel.one_long",
    title="GPU-bound in one long kernel: profile it with Nsight Compute",
    section="busy",
    requires=("summary", "launches"),
    thresholds={
        "min_kernel_share": Threshold(0.5, "a kernel filling half the window is where the time goes"),
        "max_kernels": Threshold(3, "a handful of launches is one computation, not a loop of steps"),
    },
    speedup_model="none: what the kernel could save needs a kernel profile (ncu); the finding names it",
    change=None,  # the replay change priced (program.py)
    advice=ADVICE,
)


def _advice(name: str | None) -> str:
    """The ncu command with the kernel's name, in a fence longer than any run of backticks in the name
    (a name cannot close the block and become Markdown)."""
    import re

    from nsanalyze.text import visible

    name = visible(name) if name else "KERNEL"
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", name)), default=0) + 1)
    return ADVICE.replace("```", fence).replace("KERNEL", name)


def _time(ns: float) -> str:
    return f"{ns / 1e9:.2f} s" if ns >= 1e9 else f"{ns / 1e6:.3g} ms"


def run(timeline, limits) -> Finding | None:
    summary = timeline.summary
    kernels, span, kernel_ns = summary.kernels or 0, summary.span_ns or 0, summary.kernel_ns or 0
    if not kernels or kernels > limits.max_kernels or not span:
        return None
    if any(part.role == "graph" and part.ns for part in timeline.work or ()):
        return None  # a whole-graph execution is many kernels: the graph note says how to see them
    share = kernel_ns / span
    if share < limits.min_kernel_share:
        return None
    # the longest kernel of the window's summary; the launch checks' list holds short kernels only
    longest = max(timeline.kernel_summary or [], key=lambda r: r["duration_ns"] or 0, default=None)
    top = timeline.launches.top
    name = (longest["name"] if longest else None) or (top[0].name if top else None)
    finding = Finding(
        check=ID,
        title=f"GPU-bound in {plural(kernels, 'kernel launch')}"
              + (f" ('{name}')" if name else "")
              + f": {_time(kernel_ns)} of the {_time(span)} window; profile it with ncu to see what limits it",
        estimated_speedup=0.0,
        evidence={"kernel_share": evidence(share, limits.min_kernel_share, unit="ratio"),
                  "kernel_launches": evidence(kernels, limits.max_kernels, compare="<="),
                  "kernel_ns": evidence(kernel_ns, unit="ns")},
        advice=_advice(name),
    )
    return finding
