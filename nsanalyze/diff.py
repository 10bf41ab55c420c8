"""`nsanalyze diff BASE NEW`: what got slower or faster between two profiles of one program, and why.

Kernels are matched by name and launch configuration (ncu) or by demangled name (nsys); NVTX
ranges by name, which survive kernel renames (a cuBLAS update, TF32 switched on). A change inside
the run-to-run noise is not a regression: the noise band of a kernel comes from its repeated
launches (twice the relative standard error of their mean, at least MIN_NOISE) where the profile
has them, else DEFAULT_NOISE.
"""

from __future__ import annotations

import math
from collections import Counter

from nsanalyze import __version__
from nsanalyze.analyze import Options, analyze, analyze_each, file_kind
from nsanalyze.errors import InputError
from nsanalyze.figures import median_noise, ranges_per_instance, steps_in_window

DIFF_SCHEMA = "nsanalyze/diff@1"
# Two ncu runs of unchanged code on the H200 dev suite differed by up to 6.3% per kernel
# (random_gather 279.5 -> 261.9 us); single launches get a band above that.
DEFAULT_NOISE = 0.10
MIN_NOISE = 0.02


def _kernel_key(kernel: dict) -> tuple:
    m = kernel.get("metrics") or {}
    shape = tuple(m.get(k) for k in ("grid_size", "block_size"))
    return (kernel["demangled"] or kernel["name"], shape)


def _noise(kernel: dict) -> tuple[float, str]:
    m = kernel.get("metrics") or {}
    launches = kernel.get("launches", 1)
    if launches > 1 and m.get("stddev_ns") is not None and m.get("mean_ns"):
        # the total over n launches varies like their mean: twice the standard error, relative
        band = 2 * m["stddev_ns"] / m["mean_ns"] / math.sqrt(launches)
        return max(MIN_NOISE, band), f"2 x standard error of the mean over {launches:,} launches"
    return DEFAULT_NOISE, "default for a single launch"


def _clock_drift(before: dict, after: dict) -> tuple[float, str, float] | None:
    """How much a kernel's time moves with its measured SM clock alone (an ncu report's sm_frequency_hz): the
    clocks' ratio less 1, the clocks as text, and the after clock over the before less 1 (signed); None where a side
    lacks it or the clocks agree. MW_Baseline's
    set_halo_values_x_396 ran at 784 MHz, DivToMult's at 709 MHz, both too short to hold a clock: its 12% read as a
    regression of code the change did not touch."""
    f_before = ((before.get("metrics") or {}).get("sm_frequency_hz"))
    f_after = ((after.get("metrics") or {}).get("sm_frequency_hz"))
    if not f_before or not f_after or abs(f_before / f_after - 1) < CLOCK_AGREES:
        return None
    return abs(f_before / f_after - 1), f"{f_before / 1e6:.0f} -> {f_after / 1e6:.0f} MHz", f_after / f_before - 1


CLOCK_AGREES = 0.01   # SM clocks within 1% of each other: the same clock


def _verdict(change: float | None, noise: float) -> str:
    if change is None:
        return "unmatched"
    if change > noise:
        return "regression"
    if change < -noise:
        return "improvement"
    return "within noise"


def _findings_by_kernel(model: dict) -> dict:
    """Findings by their kernel's name (the kernel list's, not the finding's: a template instance's finding reads
    `name[its own signature words]`, analyze.instance_names)."""
    names = {k.get("id"): k["name"] for k in model.get("kernels") or []}
    out: dict = {}
    for f in model["findings"]:
        if f["kernel_name"] and f["severity"] != "info":
            out.setdefault(names.get(f.get("kernel_id"), f["kernel_name"]), {})[f["check"]] = f
    return out


def _kernel_rows(base: dict, new: dict) -> list[dict]:
    base_steps, new_steps = steps_in_window(base.get("timeline")), steps_in_window(new.get("timeline"))
    if base_steps == 1.0 or new_steps == 1.0:
        base_steps = new_steps = 1.0
    new_by_key = {}
    for kernel in new["kernels"]:
        new_by_key.setdefault(_kernel_key(kernel), kernel)
    new_by_name = {k["name"]: k for k in new["kernels"]}
    # a name alone matches where it is one kernel's on each side (its signature or launch shape changed); a short
    # name many template instances share (PyTorch's vectorized_elementwise_kernel) says nothing of which is which
    once = {name for name, n in Counter(k["name"] for k in base["kernels"]).items() if n == 1} & \
        {name for name, n in Counter(k["name"] for k in new["kernels"]).items() if n == 1}
    base_findings, new_findings = _findings_by_kernel(base), _findings_by_kernel(new)
    totals = (base.get("timeline") is not None) or (new.get("timeline") is not None)   # nsys: times are totals
    base_names, new_names = [k["name"] for k in base["kernels"]], [k["name"] for k in new["kernels"]]
    rows, matched = [], set()
    for kernel in base["kernels"]:
        other = new_by_key.get(_kernel_key(kernel)) or (new_by_name.get(kernel["name"]) if kernel["name"] in once else None)
        if other is not None and id(other) in matched:   # each kernel of the new profile answers one of the base's
            other = None
        before = (kernel["duration_ns"] or 0) / base_steps
        after = other["duration_ns"] / new_steps if other and other["duration_ns"] is not None else None
        change = (after - before) / before if other and before else None
        counts = _launch_counts(kernel, other, base_steps, new_steps)
        per_launch = None
        if totals and other and after is not None and counts["launches_before"] and counts["launches_after"] and \
                abs(counts["launches_after"] / counts["launches_before"] - 1) > LAUNCH_COUNT_TOLERANCE:
            # 2 launches against 200: the total says how many ran, the time of one says whether it got slower
            per_launch = {"before_per_launch_ns": before / counts["launches_before"],
                          "after_per_launch_ns": after / counts["launches_after"]}
            change = (per_launch["after_per_launch_ns"] / per_launch["before_per_launch_ns"] - 1
                      if per_launch["before_per_launch_ns"] else None)
        noise, noise_source = _noise(kernel)
        drift = None
        if other:
            matched.add(id(other))
            other_noise, _ = _noise(other)
            noise = max(noise, other_noise)
            drift = _clock_drift(kernel, other)
            if drift:   # a kernel's time follows its SM clock: the clocks' own change is no change of the code
                noise += drift[0]
                noise_source += f", widened by the SM clock's change ({drift[1]})"
        gone = sorted(set(base_findings.get(kernel["name"], {})) - set(new_findings.get(kernel["name"], {})))
        appeared = sorted(set(new_findings.get(kernel["name"], {})) - set(base_findings.get(kernel["name"], {})))
        # where the SM clock moved, the time the kernel saved in SM cycles beside it (at the base's clock): FaSTED's
        # rasterized blocks saved 46.2 ms of 513, 9.0% of it the clock's (1195 -> 1303 MHz), 0.8% in cycles (a user
        # read: the whole 46.2 ms credited to l2-reuse)
        cycles = ({"actual_savings_in_cycles_ns": before - after * (1 + drift[2]), "clocks": drift[1]}
                  if other and after is not None and drift else {})
        predictions = [{"check": check, "predicted_savings_ns": base_findings[kernel["name"]][check]["estimated_savings_ns"],
                        "actual_savings_ns": before - after if after is not None else None, **cycles}
                       for check in gone] if other else []
        kept = sorted(set(base_findings.get(kernel["name"], {})) & set(new_findings.get(kernel["name"], {}))) \
            if other else []
        worse = [{"check": check, "savings_before_ns": base_findings[kernel["name"]][check]["estimated_savings_ns"],
                  "savings_after_ns": new_findings[kernel["name"]][check]["estimated_savings_ns"]} for check in kept
                 if new_findings[kernel["name"]][check]["estimated_savings_ns"]   # the same cause, grown beyond
                 > (1 + max(noise, MIN_GROWTH)) * base_findings[kernel["name"]][check]["estimated_savings_ns"]]  # noise
        verdict = _verdict(change, noise)
        compared = "per step" if base_steps != 1.0 else "per launch" if not totals else "total"
        if per_launch and verdict == "regression" and before and after is not None and (after - before) / before <= noise:
            # fewer launches of more work each (compile fused the casts; the ones left copy more): one launch is
            # slower, the kernel's time is not; judged by that time (a step, or the totals), and the change shown
            # is that time's (one launch's, +1152%, read as an improvement beside it); one launch's stays in the row
            change = (after - before) / before
            verdict = _verdict(change, noise)
        elif per_launch:
            compared = "per launch"
        in_cycles = ({"change_in_cycles": after * (1 + drift[2]) / before - 1, "clocks": drift[1]}
                     if drift and before and after is not None and not per_launch else {})
        rows.append({"name": kernel["name"], "demangled": kernel["demangled"], "shape": _shape(kernel, base_names),
                     "before_ns": before, "after_ns": after, **counts, **(per_launch or {}), **in_cycles,
                     "compared": compared,
                     "change": change, "noise": noise, "noise_source": noise_source,
                     "verdict": verdict, "findings_gone": gone, "findings_appeared": appeared,
                     "findings_worse": worse, "predictions": predictions})
    for kernel in new["kernels"]:
        if id(kernel) not in matched:
            rows.append({"name": kernel["name"], "demangled": kernel["demangled"], "shape": _shape(kernel, new_names),
                         "before_ns": None, "after_ns": (kernel["duration_ns"] or 0) / new_steps,
                         **_launch_counts(None, kernel, base_steps, new_steps), "compared": None,
                         "change": None, "noise": None, "noise_source": None,
                         "verdict": "new kernel", "findings_gone": [],
                         "findings_appeared": sorted(_findings_by_kernel(new).get(kernel["name"], {})),
                         "findings_worse": [], "predictions": []})
    return rows


MIN_GROWTH = 0.05   # a finding of both profiles whose savings grew by more (and beyond the noise) is the why
LAUNCH_COUNT_TOLERANCE = 0.01   # launch counts a step that differ by more: compared per launch


def _launch_counts(before: dict | None, after: dict | None, base_steps: float, new_steps: float) -> dict:
    """Launches before and after, per step where the times are per step."""
    def count(kernel, steps):
        return kernel["launches"] / steps if kernel and kernel.get("launches") is not None else None
    return {"launches_before": count(before, base_steps), "launches_after": count(after, new_steps)}


def _shape(kernel: dict, names: list[str]) -> str | None:
    """`grid 1024 x block 256` where kernels of this name run at several launch shapes (told apart by it)."""
    if names.count(kernel["name"]) < 2:
        return None
    m = kernel.get("metrics") or {}
    grid, block = m.get("grid_size"), m.get("block_size")
    if grid is None and block is None:
        return None
    return f"grid {grid:g} x block {block:g}" if grid is not None and block is not None else \
        (f"grid {grid:g}" if grid is not None else f"block {block:g}")


def _ncu_ranges(model: dict) -> dict[str, dict]:
    """ncu: kernel time summed per NVTX range, at every level of each launch's range path
    (`train_step`, `train_step/forward`, ...): a precision switch renames kernels, not ranges."""
    ranges: dict[str, dict] = {}
    for kernel in model["kernels"]:
        parts = (kernel.get("nvtx_range") or "").split("/")
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[:depth])
            if name:
                entry = ranges.setdefault(name, {"name": name, "kernel_ns": 0.0, "kernel_names": []})
                entry["kernel_ns"] += kernel.get("total_ns") or kernel["duration_ns"] or 0.0
                entry["kernel_names"].append(kernel["name"])
    return ranges


def _nsys_ranges(model: dict) -> dict[str, dict]:
    """nsys: ranges by normalized name, GPU and host time per instance (nsanalyze.figures, as the history
    database stores them)."""
    return {name: {"name": name, "kernel_ns": e["gpu_ns"], "host_ns": e["host_ns"], "instances": e["instances"]}
            for name, e in ranges_per_instance((model.get("timeline") or {}).get("ranges", [])).items()}


def _range_rows(base: dict, new: dict) -> list[dict]:
    if base.get("timeline") is None and new.get("timeline") is None:
        before, after = _ncu_ranges(base), _ncu_ranges(new)
    else:
        before, after = _nsys_ranges(base), _nsys_ranges(new)
    rows = []
    for name in before.keys() & after.keys():
        b, a = before[name]["kernel_ns"], after[name]["kernel_ns"]
        change = (a - b) / b if b else None
        host = {"host_before_ns": before[name]["host_ns"], "host_after_ns": after[name]["host_ns"]} \
            if "host_ns" in before[name] else {}
        rows.append({"name": name, "before_ns": b, "after_ns": a, "change": change, "noise": DEFAULT_NOISE,
                     "verdict": _verdict(change, DEFAULT_NOISE) if b else "no GPU work", **host,
                     **({"kernels_before": sorted(set(before[name]["kernel_names"])),
                         "kernels_after": sorted(set(after[name]["kernel_names"]))}
                        if "kernel_names" in before[name] else {})})
    return sorted(rows, key=lambda r: -(r["before_ns"] or 0))


def _refuse_two_kinds(base_path: str, new_path: str, before: str, after: str) -> None:
    if before != after:
        raise InputError(new_path, f"is an {after} profile and {base_path} an {before} one: "
                                   "diff compares profiles of one kind (--force to compare anyway)")


def diff(base_path: str, new_path: str, options: Options | None = None, force: bool = False) -> dict:
    """Compares two profiles of one program; profiles of different kinds or GPUs are refused unless forced
    (an ncu report against an nsys export would list every finding as gone)."""
    if not force:   # files of two kinds are refused before either is read (a report can be 500 MB)
        kinds = [file_kind(p) for p in (base_path, new_path)]
        if None not in kinds:
            _refuse_two_kinds(base_path, new_path, *kinds)
    base, new = analyze_each([base_path, new_path], options)
    if not force:
        (before,), (after,) = base["profiles"], new["profiles"]
        _refuse_two_kinds(base_path, new_path, before["kind"], after["kind"])
        if before["gpu"] and after["gpu"] and before["gpu"] != after["gpu"]:
            raise InputError(new_path, f"was taken on {after['gpu']}, {base_path} on {before['gpu']}: "
                                       "figures of different GPUs do not compare (--force to compare anyway)")
    return compare(base, new)


def compare(base: dict, new: dict) -> dict:
    """The diff of two reports (analyze()'s), already read and found comparable."""
    kernels = _kernel_rows(base, new)
    ranges = _range_rows(base, new)
    predictions = [p | {"kernel_name": k["name"]} for k in kernels for p in k["predictions"]]
    steps, budget = _steps_row(base, new), _budget_rows(base, new)
    before_program, after_program = _program_findings(base), _program_findings(new)
    # gone: not in the new profile at all; a finding that fell to info is still there, smaller (findings_changed),
    # and one that rose from info is no new cause (time53: unfused-normalization at 8.2 ms a step after the timing
    # code went, under the info line, read "gone" and its prediction was set against the timing fix's saving)
    before_all, after_all = _program_findings(base, with_info=True), _program_findings(new, with_info=True)
    gone = [c for c in before_program if c not in after_all]
    appeared = [c for c in after_program if c not in before_all]
    program_predictions = _program_predictions(before_program, steps, after_all)
    predictions += program_predictions
    return {"schema": DIFF_SCHEMA, "version": __version__, "base": base["profiles"], "new": new["profiles"],
            "summary": _summary(steps, budget, gone, appeared, new, program_predictions), "steps": steps,
            "budget": budget,
            "program": {"findings_gone": gone, "findings_appeared": appeared,
                        "findings_changed": _findings_changed(before_all, after_all, steps)},
            "kernels": sorted(kernels, key=lambda k: -abs((k["after_ns"] or 0) - (k["before_ns"] or 0))),
            "ranges": ranges, "predictions": predictions}


def _steps_row(base: dict, new: dict) -> dict | None:
    """The median steady step before and after; the noise band from the steps' own spread (twice the
    standard error of each median, combined), at least MIN_NOISE. The mean step beside it: what the run
    costs, where a step in ten that logs for a second moves the mean and not the median."""
    before, after = ((m.get("timeline") or {}).get("steps") for m in (base, new))
    if not before or not after:
        return None
    noise = max(MIN_NOISE, math.hypot(median_noise(before), median_noise(after)))
    change = (after["median_ns"] - before["median_ns"]) / before["median_ns"] if before["median_ns"] else None
    before_mean, after_mean = before.get("mean_ns"), after.get("mean_ns")
    mean_change = (after_mean - before_mean) / before_mean if before_mean and after_mean is not None else None
    return {"name": before["name"] if before["name"] == after["name"] else f"{before['name']} -> {after['name']}",
            "before_median_ns": before["median_ns"], "after_median_ns": after["median_ns"],
            "before_mean_ns": before_mean, "after_mean_ns": after_mean,
            "before_count": before["count"], "after_count": after["count"],
            "change": change, "mean_change": mean_change, "noise": noise, "verdict": _verdict(change, noise)}


def budget_scope(base: dict, new: dict) -> str:
    """What the budget rows are of: a median step where both profiles have steps, else each one's window."""
    steps = [((m.get("timeline") or {}).get("steps") or {}).get("budget") for m in (base, new)]
    return "median step" if all(steps) else "window"


def _budget_rows(base: dict, new: dict) -> list[dict]:
    """Each budget part's share and time of a median step (or of the window) before and after."""
    scope = budget_scope(base, new)

    def parts(model):
        timeline = model.get("timeline") or {}
        budget = (timeline.get("steps") or {}).get("budget") if scope == "median step" else timeline.get("budget")
        return {p["part"]: (p["share"] or 0.0, p.get("ns")) for p in budget or []}
    before, after = parts(base), parts(new)
    return [{"part": part, "before_share": before.get(part, (None, None))[0], "after_share": after.get(part, (None, None))[0],
             "before_ns": before.get(part, (None, None))[1], "after_ns": after.get(part, (None, None))[1], "of": scope}
            for part in dict.fromkeys([*before, *after])]


def _per_step_savings(finding: dict, step_ns: float) -> float:
    """A program finding's savings in a step: its share of the window, of the step (of a mean step, the
    window being the steady steps end to end)."""
    return float(finding.get("estimated_speedup") or 0.0) * step_ns


def _program_predictions(before: dict[str, dict], steps: dict | None, after: dict[str, dict] | None = None) -> list[dict]:
    """Each base program finding's predicted saving per mean step beside the mean step time the new profile
    actually saved, both on the GPU's clock: the mean is what the run costs (removing a periodic spike saves
    the mean, not the median); the median step's change beside it. `in_new` says whether the finding is gone
    from the new profile or still there (with its savings a step there): the step time saved is the change's as a
    whole, and a finding still there is not what the change took away."""
    if not steps or not steps.get("before_median_ns") or steps.get("after_median_ns") is None:
        return []
    mean = steps.get("before_mean_ns") is not None and steps.get("after_mean_ns") is not None
    before_ns = steps["before_mean_ns"] if mean else steps["before_median_ns"]
    after_ns = steps["after_mean_ns"] if mean else steps["after_median_ns"]
    after = after or {}
    return [{"check": check, "kernel_name": None, "predicted_savings_ns": _per_step_savings(f, before_ns),
             "actual_savings_ns": before_ns - after_ns, "per": "mean step" if mean else "median step",
             "actual_median_savings_ns": steps["before_median_ns"] - steps["after_median_ns"],
             "in_new": "still there" if check in after else "gone",
             "in_new_savings_ns": _per_step_savings(after[check], after_ns) if check in after else None}
            for check, f in before.items()]


def _findings_changed(before: dict[str, dict], after: dict[str, dict], steps: dict | None) -> list[dict]:
    """Program findings in both profiles (info ones too) whose severity or time changed, above info on one side at
    least: shrunk is not gone."""
    rows = []
    for check in before.keys() & after.keys():
        b, a = before[check], after[check]
        if b["severity"] == "info" and a["severity"] == "info":
            continue
        row = {"check": check, "severity_before": b["severity"], "severity_after": a["severity"],
               "savings_before_ns": b["estimated_savings_ns"], "savings_after_ns": a["estimated_savings_ns"]}
        if steps:   # per mean step, as the predictions
            row["per_step_before_ns"] = _per_step_savings(b, steps.get("before_mean_ns") or steps["before_median_ns"])
            row["per_step_after_ns"] = _per_step_savings(a, steps.get("after_mean_ns") or steps["after_median_ns"])
        if b["severity"] != a["severity"] or abs((a.get("estimated_speedup") or 0) - (b.get("estimated_speedup") or 0)) >= 0.05:
            rows.append(row)
    return sorted(rows, key=lambda r: r["check"])


def _program_findings(model: dict, with_info: bool = False) -> dict[str, dict]:
    return {f["check"]: f for f in model["findings"] if f["kernel_id"] is None and (with_info or f["severity"] != "info")}


def _summary(steps: dict | None, budget: list[dict], gone: list[str], appeared: list[str], new: dict,
             predictions: list[dict] = ()) -> str | None:
    """What changed, in one sentence: the step time, the causes gone, and the bottleneck now."""
    if not steps:
        return None
    from nsanalyze.render.format import BUDGET_LABELS, duration

    text = (f"{steps['name']} {duration(steps['before_median_ns'])} → {duration(steps['after_median_ns'])}"
            f" ({steps['change']:+.0%}, {steps['verdict']})")
    if steps.get("mean_change") is not None and abs(steps["mean_change"] - steps["change"]) > steps["noise"]:
        text += (f", the mean step {duration(steps['before_mean_ns'])} → {duration(steps['after_mean_ns'])}"
                 f" ({steps['mean_change']:+.0%})")   # what the run costs moved otherwise: periodic spikes
    if gone:
        text += f": {', '.join(gone)} {'is' if len(gone) == 1 else 'are'} gone"
    if predictions:   # the prediction the change answers: the first finding it took away, else the first finding
        first = next((p for p in predictions if p.get("in_new") == "gone"), predictions[0])
        still = " (still there)" if first.get("in_new") == "still there" else ""
        actual = first["actual_savings_ns"]
        outcome = f"saved {duration(actual)}" if actual >= 0 else f"was {duration(-actual)} slower"   # not "saved -5 ms"
        text += f"; {first['check']}{still} predicted {duration(first['predicted_savings_ns'])} a {first['per']}, " \
                f"the new profile {outcome}"
    idle = [b for b in budget if b["part"].startswith("idle_") and (b["after_share"] or 0) >= 0.05]
    first = next(iter(_program_findings(new).values()), None)
    if first:
        text += f"; now first: {first['check']} ({first['title']})"
    elif idle:
        top = max(idle, key=lambda b: b["after_share"])
        text += f"; largest idle part now: {BUDGET_LABELS[top['part']]} ({top['after_share']:.0%} of the step)"
    else:
        compute = next((b["after_share"] for b in budget if b["part"] == "gpu_compute"), None)
        if compute is not None:
            text += f"; the GPU now computes {compute:.0%} of the step: profile its top kernels with ncu"
    if appeared:
        text += f"; new: {', '.join(appeared)}"
    return text


def regressions(result: dict, threshold_pct: float) -> list[dict]:
    """Steps, kernels and ranges slower by more than threshold_pct and beyond their noise band."""
    limit = threshold_pct / 100.0
    return [row for row in ([result["steps"]] if result.get("steps") else []) + result["kernels"] + result["ranges"]
            if row["verdict"] == "regression" and row["change"] is not None and row["change"] > limit
            and not math.isnan(row["change"])]
