"""Kernels shorter than their launch.

## What it detects
Kernels whose GPU time is shorter than the CPU time of the call that launched them, with their
count and the GPU idle time in front of them.

## Why it is slow
Launching costs a few microseconds of CPU each. When kernels take less than that, the GPU
finishes each before the next arrives and the program runs at the speed of the launch loop.

## Example
```cpp
for (int i = 0; i < 200; ++i) small_step<<<4, 256>>>(x, n);   // 0.8 us kernels, 7 us launches
```

## Instead
```cpp
cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);        // record once ...
for (int i = 0; i < 200; ++i) small_step<<<4, 256, 0, s>>>(x, n);
cudaStreamEndCapture(s, &graph); cudaGraphInstantiate(&exec, graph, 0);
cudaGraphLaunch(exec, s);                                      // ... replay with one launch
```

## Known problems
The launch call's CPU time includes driver work that a graph does not remove entirely.

## Options
- `min_short_kernels`: kernels shorter than their launch before the check speaks.
"""

from nsanalyze.checks.base import Finding, Threshold, evidence

ID = "launch-overhead"
NAME = "program.launch.overhead"
TITLE = "Kernels shorter than their launch"
REQUIRES = ("launches",)
THRESHOLDS = {"min_short_kernels": Threshold(50, "a few short kernels cost nothing; loops of them do")}
SPEEDUP_MODEL = ("GPU idle time in front of each short kernel, capped at its launch call's CPU time: "
                 "what a CUDA graph or fusion removes")
ADVICE = """Launch fewer, bigger kernels.

- Capture the loop in a CUDA graph (`cudaStreamBeginCapture`/`cudaGraphLaunch`;
  PyTorch: `torch.cuda.graphs` / `torch.compile(mode="reduce-overhead")`).
- Fuse element-wise kernels (`torch.compile`, a hand-written fused kernel).
- Do more work per launch (batch the steps).

```python
# before: hundreds of tiny launches per step
# after
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g): out = step(static_in)
g.replay()
```"""


def run(timeline, limits) -> Finding | None:
    launches = timeline.launches
    if launches["short_kernels"] < limits["min_short_kernels"]:
        return None
    finding = Finding(
        check=ID,
        title=f"{launches['short_kernels']} of {launches['launches']} kernels run shorter than their launch call "
              f"({launches['short_kernel_ns'] / 1e6:.2f} ms of GPU work, {launches['short_launch_api_ns'] / 1e6:.2f} ms "
              "of launch calls)",
        estimated_speedup=0.0,
        evidence={"short_kernels": evidence(launches["short_kernels"], limits["min_short_kernels"], compare=">="),
                  "short_kernel_ns": evidence(launches["short_kernel_ns"], unit="ns"),
                  "launch_api_ns": evidence(launches["short_launch_api_ns"], unit="ns"),
                  "idle_before_short_ns": evidence(launches["idle_before_short_ns"], unit="ns"),
                  "kernels": launches["top"]},
        advice=ADVICE,
    )
    finding.estimated_savings_ns = float(launches["idle_before_short_ns"])
    return finding
