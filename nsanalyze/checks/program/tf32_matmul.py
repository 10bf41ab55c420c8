"""Matrix products in TF32, where bfloat16 inputs run them 2-2.5x as fast.

## What it detects
Library matrix products (cuBLAS and cuDNN GEMMs and convolutions, CUTLASS tensor-core SGEMMs) whose names say they take
TF32 inputs (normalize/precision.py: `tf32` in cuBLAS's and cuDNN's `xmma` names, CUTLASS's `tensorop_s1688gemm`),
holding `min_share` or more of the GPUs' time in the window: float32 tensors multiplied on the tensor cores at TF32's
rate. It is what a float32 program gets from `torch.set_float32_matmul_precision("high")`, and what PyTorch's cuDNN
convolutions do by default.

## Why it is slow
Every GPU with TF32 tensor cores multiplies bfloat16 at twice the TF32 rate (dense peaks: A100 156 against 312 TFLOP/s,
H100 SXM 494 against 989; normalize/tensor_peaks.csv), and a bfloat16 operand moves half the bytes of a float32 one.
TF32 rounds the float32 inputs inside the tensor core, so the program pays float32's memory traffic for TF32's
precision. Measured on an H100 (normalize/bf16_rates.csv, blind88's twins), the libraries' GEMMs and convolutions ran
2.5-2.6x as fast on bfloat16 inputs. Mixed precision keeps the weights and the optimizer in float32 and runs the
matrix products in bfloat16.

## Example
```python
torch.set_float32_matmul_precision("high")   # TF32 matrix products on float32 tensors
loss = loss_fn(model(x), y)
loss.backward()
```

## Instead
```python
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):   # bfloat16 matrix products, float32 weights
    loss = loss_fn(model(x), y)
loss.backward()
```

## Known problems
- Only the TF32 kernels are priced, at the rate measured for the GPU's compute capability, else the ratio of its
  bfloat16 and TF32 peaks. Autocast changes more than that: the float32 attention kernels beside them run as bfloat16
  ones (said in a note where the profile has some), the elementwise kernels between bfloat16 products move half the
  bytes, and autocast adds casts of the float32 operands, with their launches. On blind88's twins (H100) this left
  the CNN's saving under what it measured (18.5 against 23.7 ms a step: its elementwise kernels halved too) and the
  GPT's over it (9.0 against 6.2 ms: the host, launching autocast's casts, then held the step, which the profile of
  the float32 run cannot show). The replay of the steps prices the change where the steps are replayed: faster
  products on a step the host holds save what the host leaves.
- The measured rate holds for the kernel families its twins ran (bf16_rates.csv's `kernels`: cuBLAS's and cuDNN's
  sm90 xmma GEMMs and convolutions); where a tenth or more of the TF32 time runs in others (cuDNN's sm80 `_wo_smem`
  kernels of a CNN with 16-32 channels: blind67_distval, a third), a note says how much.
- cuBLASLt's Hopper kernels (`nvjet_...`) do not say their input type in a way the libraries document: they are never
  read as TF32, and a program whose TF32 products all run there is not found.
- bfloat16 keeps 8 bits of mantissa to TF32's 10. Most training converges the same; a model that does not is told
  by its loss curve, not by the profile.

## Options
- `min_share`: the TF32 products' share of the GPUs' time in the window before the check speaks.
"""

import re

from nsanalyze.checks.base import Check, Finding, Threshold, evidence, step_count, time_per_step
from nsanalyze.checks.libraries import PYTORCH_LAUNCHES, launch_share
from nsanalyze.checks.program._roles import gpus_window_ns, inference_steps, kernel_rows
from nsanalyze.normalize.critical_path import TF32
from nsanalyze.normalize.device_caps import compute_capability, device_caps
from nsanalyze.normalize.kernels import bf16_over_tf32_measured, tensor_peaks
from nsanalyze.normalize.precision import tf32
from nsanalyze.numbers import duration_text

ID = "tf32-matmul"
BUDGET_PART = "gpu_compute"
ADVICE = """Run the matrix products in bfloat16 (mixed precision); keep the weights and the optimizer in float32.

- Training: `torch.autocast(device_type="cuda", dtype=torch.bfloat16)` around the forward pass and the loss, not
  around `backward()` or the optimizer step. bfloat16 has float32's range: no `GradScaler`.
- Autocast keeps the operations that need float32 (softmax, normalization, losses) in float32 by itself.
- Compare the loss curve with the float32 run's for a few hundred steps before you keep it.

```python
# before: float32 tensors, TF32 matrix products
torch.set_float32_matmul_precision("high")
loss = loss_fn(model(x), y)
# after: bfloat16 matrix products, float32 weights
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
```"""
TRAINING_LINE = ("- Training: `torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16)` around the forward pass and "
                 "the loss, not\n  around `backward()` or the optimizer step. bfloat16 has float32's range: no "
                 "`GradScaler`.")
# no optimizer and no backward kernel by name: the steps infer (_roles.inference_steps)
INFERENCE_LINE = ("- Inference: `torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16)` around the forward "
                  "pass, or the model\n  itself in bfloat16 (`model.to(torch.bfloat16)` and bfloat16 inputs).")
# where few launches are PyTorch's, its switches are no advice (fp64-compute's LIBRARY_TENSOR_LINE)
LIBRARY_ADVICE = """Run the matrix products on bfloat16 inputs with float32 accumulation; keep float32 where the values
need it.

- cuBLAS: `cublasGemmEx` or `cublasLtMatmul` with `CUDA_R_16BF` inputs and `CUBLAS_COMPUTE_32F`; cuDNN: bfloat16
  tensors with a float32 compute type.
- CuPy and JAX: multiply `bfloat16` arrays (JAX: `jnp.bfloat16` inputs, or `preferred_element_type=jnp.float32`
  for a float32 result).
- Compare the results with the float32 run's before you keep it."""

# The ratio of bfloat16's dense tensor peak to TF32's on a GPU the device tables do not know: what every GPU with
# both has (normalize/tensor_peaks.csv: A100, A10, L40S, H100)
FALLBACK_RATE = 2.0

CHECK = Check(
    id=ID,
    name="program.work.tf32_matmul",
    title="Matrix products in TF32, where bfloat16 inputs run them 2-2.5x as fast",
    section="tensor",
    requires=("work",),
    thresholds={"min_share": Threshold(0.1, "a tenth of the GPUs' time in TF32 products: half of it is 5% of the "
                                            "window, worth a change of precision to try")},
    speedup_model=("the TF32 products' time less what it takes at bfloat16's rate: measured on twins where "
                   "bf16_rates.csv has the GPU's compute capability (2.5x on an H100), else the GPU's bfloat16 over "
                   "TF32 dense tensor peak (tensor_peaks.csv: 2x on every GPU with both; 2x where the tables do not "
                   "know the GPU); priced by the replay of the steps with those kernels that much faster"),
    budget_part=BUDGET_PART,
    change={"speedup": (TF32,)},   # the replay change priced (normalize.pricing)
    advice=ADVICE,
)


def bf16_rate(timeline) -> tuple[float, str, str | None]:
    """(how many times faster the TF32 products run on bfloat16 inputs, where that figure comes from, a regex of the
    kernel families a measured rate holds for) for the first GPU the tables know: measured on twins of its compute
    capability (bf16_rates.csv), else its dense tensor peaks' ratio (tensor_peaks.csv); FALLBACK_RATE on a GPU they do
    not know."""
    for name in timeline.gpu_names():
        caps = device_caps(name)
        if not caps:
            continue
        major, minor = compute_capability(caps)
        measured = bf16_over_tf32_measured((major, minor))
        if measured is not None:
            gpu = measured[1]
            same = gpu.startswith(caps["model"]) or caps["model"].startswith(gpu)
            return measured[0], (f"measured on twins on an {gpu}" + ("" if same else
                                 f", compute capability {caps['compute_capability']} as the {caps['model']}")
                                 + " (normalize/bf16_rates.csv), more than the dense peaks' 2x"), measured[2]
        peaks = tensor_peaks((major, minor), 1.0)
        if peaks["tf32_peak_flops_per_s"] and peaks["bf16_peak_flops_per_s"]:
            rate = peaks["bf16_peak_flops_per_s"] / peaks["tf32_peak_flops_per_s"]
            return rate, f"the {caps['model']}'s bfloat16 dense tensor peak over its TF32 one", None
    return (FALLBACK_RATE, "a GPU the device tables do not know: bfloat16 at twice TF32's peak, as on every GPU with both",
            None)


def _advice(timeline, analysis) -> str:
    """ADVICE, in a library's words where few launches are PyTorch's, with the inference line where the steps
    train nothing."""
    torch = launch_share(timeline, "PyTorch")
    if torch is not None and torch < PYTORCH_LAUNCHES:
        return LIBRARY_ADVICE
    return ADVICE.replace(TRAINING_LINE, INFERENCE_LINE) if inference_steps(analysis) else ADVICE


# The share of the TF32 products' time in kernel families a measured rate was not measured on, from which a note
# says so: under a tenth, the rate's figure moves less than the twins' own spread (2.47-2.64x)
UNMEASURED_SAID = 0.1


def _beyond_measured(kernels, families: str | None) -> float:
    """The TF32 kernels' time outside the families a measured rate holds for (their names); 0 where the rate is not a
    measured one."""
    if not families:
        return 0.0
    measured = re.compile(families)
    return float(sum(k.ns for k in kernels if not measured.search(k.demangled or k.name or "")))


def _fp32_attention_ns(analysis) -> float:
    """The fused attention kernels that compute in float32 (PyTorch's memory-efficient `fmha_cutlass*_f32`):
    autocast runs them in bfloat16 too, which the saving does not count."""
    return float(sum(k.ns for k in analysis.by_kernel if k.role == "attention_fused"
                     and "_f32" in (k.demangled or k.name or "")))


def run(timeline, limits) -> Finding | None:
    analysis = timeline.work_analysis
    span = timeline.summary.span_ns or 0
    if analysis is None or not span:
        return None
    kernels = sorted((k for k in analysis.by_kernel if tf32(k.demangled or k.name)), key=lambda k: -k.ns)
    tf32_ns = float(sum(k.ns for k in kernels))
    share = tf32_ns / gpus_window_ns(timeline)
    if not kernels or share < limits.min_share:
        return None
    rate, where, families = bf16_rate(timeline)
    saved = tf32_ns * (1.0 - 1.0 / rate)
    steps = step_count(timeline)
    each = time_per_step(steps)
    kernel_share = tf32_ns / (analysis.kernel_ns or 1)
    notes = [f"saving: the TF32 products {rate:g}x faster ({where}); what else autocast changes is not counted: "
             "the elementwise kernels between bfloat16 products move half the bytes (less time), and it adds a cast "
             "of each float32 operand, kernels and their launches (more; where the host then holds the step, it "
             "saves less: a small GPT measured on an H100 went from 34.4 to 28.2 ms a step, its host the bound, "
             "where its products alone promised 9 ms)"]
    beyond = _beyond_measured(kernels, families)
    if beyond >= UNMEASURED_SAID * tf32_ns:
        notes.append(f"{beyond / tf32_ns:.0%} of these kernels' time ({each(beyond)}) runs in kernel families the twins "
                     f"that measured the rate did not run (they ran /{families}/): for those the rate is less sure")
    attention = _fp32_attention_ns(analysis)
    if attention:
        notes.append(f"float32 attention kernels take {each(attention)} beside them: autocast runs attention in "
                     "bfloat16 too (flash attention), which this saving does not count")
    return Finding(
        check=ID,
        title=(f"Matrix products in TF32: {len(kernels)} library kernel{'s' if len(kernels) > 1 else ''} on TF32 "
               f"inputs take {kernel_share:.0%} of GPU kernel time ({each(tf32_ns)}); on bfloat16 inputs they run "
               f"{rate:g}x as fast"),
        estimated_speedup=min(1.0, saved / span),
        evidence={"tf32_ns": evidence(tf32_ns, unit="ns"),
                  "tf32_share": evidence(share, limits.min_share, unit="ratio"),   # of the GPUs' time in the window
                  "tf32_kernel_share": evidence(kernel_share, unit="ratio"),   # of GPU kernel time: the title's
                  "bf16_over_tf32": evidence(rate, unit="x"),
                  **({"fp32_attention_ns": evidence(attention, unit="ns")} if attention else {}),
                  **({"tf32_unmeasured_ns": evidence(beyond, unit="ns")} if families else {}),
                  "check_savings_ns": evidence(saved, unit="ns"),
                  "kernels": kernel_rows(kernels)},
        advice=_advice(timeline, analysis),
        notes=notes,
        estimated_savings_ns=saved,
    )
