"""SVG charts with matplotlib: roofline, top kernels, utilization timeline. Returned as SVG text."""

from __future__ import annotations

import io
import os


def _writable_matplotlib_dirs() -> None:
    """Matplotlib keeps its config and font cache under ~/.config and ~/.cache; where HOME is read-only
    (a CI container, a sandbox) it warns on stderr twice. Then it gets a temporary folder (MPLCONFIGDIR,
    removed at exit); a MPLCONFIGDIR the user set is left alone."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    home = os.path.expanduser("~")
    for variable, default in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache")):
        folder = os.path.join(os.environ.get(variable) or os.path.join(home, default), "matplotlib")
        try:
            os.makedirs(folder, exist_ok=True)
            if os.access(folder, os.W_OK):
                continue
        except OSError:
            pass
        import atexit
        import shutil
        import tempfile

        temporary = tempfile.mkdtemp(prefix="nsanalyze-matplotlib-")
        atexit.register(shutil.rmtree, temporary, ignore_errors=True)
        os.environ["MPLCONFIGDIR"] = temporary
        return


_writable_matplotlib_dirs()
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from nsanalyze.native_stderr import NativeStderr  # noqa: E402
from nsanalyze.render.format import visible  # noqa: E402

# Building its font cache, matplotlib runs fc-list, and Fontconfig prints its own complaints to fd 2
# ("Fontconfig error: Cannot load default config file"); it also logs "building the font cache": both
# kept off stderr, as NVIDIA's reader's logging is.
with NativeStderr():
    import matplotlib.pyplot as plt  # noqa: E402

# A fixed salt for the SVG's element ids (random by default) and no date: one model, one report, byte for byte
# (reports diffed in CI, golden files in tests/golden).
plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                     "svg.hashsalt": "nsanalyze"})


def literal(text) -> str:
    """Profile text as a plot label: `$...$` would be read as mathtext (and can abort the plot)."""
    return visible(text).replace("$", r"\$")


def _svg(figure) -> str:
    buffer = io.StringIO()
    try:
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _legend(axes, **placement) -> None:
    """The legend of what the chart labelled, none where it labelled nothing (a phases chart without an analysis
    window, a work chart whose every role is under half a percent): matplotlib's legend() of no labels prints a
    UserWarning to the user's stderr and draws an empty box."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(**placement)


def _legend_beside(axes) -> None:
    """The legend right of the plot, outside it: inside, "best" or a corner still sat on a full-width bar
    or on a GPU-Util line at 100% (the SVG's tight box makes room for it)."""
    _legend(axes, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)


ROOF_NAMES = {"fp64": "FP64", "fp32": "FP32", "fp16": "FP16", "tensor": "tensor"}


def roofline_svg(kernels: list[dict], labelled: list | None = None, max_labels: int = 6) -> str | None:
    """Kernels as points sized by time share; names only on the kernels that carry the top findings
    (`labelled` ids, at most max_labels), so a real program's 60 kernels stay readable."""
    points = [k for k in kernels if k.get("roofline") and k["roofline"].get("arithmetic_intensity")
              and k["roofline"].get("achieved_flops_per_s")]
    # the roofs of the kernels drawn, one a precision (its highest: clocks differ by kernel): a roof of a kernel not
    # drawn, or another precision's, is not the ceiling of the points under it (a DMMA kernel's 19.4 TFLOP/s roof
    # drew an FP64 kernel under 310, the BF16 one)
    roofs: dict = {}
    for kernel in points:
        roof = kernel["roofline"]
        if roof.get("peak_flops_per_s") and roof.get("peak_bytes_per_s"):
            kept = roofs.get(roof.get("precision"))
            if kept is None or roof["peak_flops_per_s"] > kept["peak_flops_per_s"]:
                roofs[roof.get("precision")] = roof
    if not points or not roofs:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    ridge = max(r["peak_flops_per_s"] / r["peak_bytes_per_s"] for r in roofs.values())
    low = min(k["roofline"]["arithmetic_intensity"] for k in points) / 4
    high = max(max(k["roofline"]["arithmetic_intensity"] for k in points) * 4, 4 * ridge)
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    styles = ("-", "--", ":", "-.")
    for n, (precision, roof) in enumerate(sorted(roofs.items(), key=lambda item: -item[1]["peak_flops_per_s"])):
        peak_flops, peak_bytes = roof["peak_flops_per_s"], roof["peak_bytes_per_s"]
        axes.plot(xs, [min(peak_flops, x * peak_bytes) for x in xs], color="#444", linewidth=1.5,
                  linestyle=styles[n % len(styles)],
                  label=f"{ROOF_NAMES.get(precision, precision or 'FP')} roof: {peak_bytes / 1e12:.2f} TB/s, "
                        f"{peak_flops / 1e12:.1f} TFLOP/s")
    total = sum(k.get("time_share") or 0 for k in points) or 1
    named = set(list(labelled)[:max_labels]) if labelled is not None else \
        {k["id"] for k in sorted(points, key=lambda k: -(k.get("time_share") or 0))[:max_labels]}
    shown_names = set()
    for kernel in points:
        roof = kernel["roofline"]
        size = 15 + 400 * (kernel.get("time_share") or 0) / total
        axes.scatter(roof["arithmetic_intensity"], roof["achieved_flops_per_s"], s=size, alpha=0.6,
                     color="#c0392b" if kernel["id"] in named else "#4a7ab5")
        if kernel["id"] in named and kernel["name"] not in shown_names:  # one label per kernel name
            shown_names.add(kernel["name"])
            axes.annotate(literal(kernel["name"][:24]), (roof["arithmetic_intensity"], roof["achieved_flops_per_s"]),
                          fontsize=7, xytext=(4, 4), textcoords="offset points")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP per DRAM byte, measured)")
    axes.set_ylabel("achieved FLOP/s")
    _legend(axes, loc="lower right", fontsize=7)
    return _svg(figure)


def top_kernels_svg(kernels: list[dict], limit: int = 12) -> str | None:
    rows = sorted([k for k in kernels if k.get("time_share")], key=lambda k: -k["time_share"])[:limit]
    if not rows:
        return None
    figure, axes = plt.subplots(figsize=(7, 0.3 * len(rows) + 0.8))
    # one bar a row, longest first: kernels of one name (PyTorch's `elementwise_kernel` instances) were one label on
    # a categorical axis, drawn over each other out of order; the second and later of a name are numbered
    seen: dict[str, int] = {}
    labels = []
    for k in rows:
        name = k["name"][:40]
        seen[name] = seen.get(name, 0) + 1
        labels.append(literal(name if seen[name] == 1 else f"{name} ({seen[name]})"))
    positions = list(range(len(rows)))[::-1]
    axes.barh(positions, [100 * k["time_share"] for k in rows], color="#4a7ab5")
    axes.set_yticks(positions, labels)
    axes.set_xlabel("share of GPU kernel time (%)")
    return _svg(figure)


def utilization_svg(gpu_metrics: dict | None) -> str | None:
    if not gpu_metrics or not gpu_metrics.get("series"):
        return None
    figure, axes = plt.subplots(figsize=(7, 2.6))
    labels = {"gr_active_pct": "GR Active (GPU-Util)", "sm_issue_pct": "SM Issue", "tensor_active_pct": "Tensor Active"}
    origin = min(points[0][0] for points in gpu_metrics["series"].values() if points)
    for key, label in labels.items():
        points = gpu_metrics["series"].get(key)
        if points:
            axes.plot([(t - origin) / 1e6 for t, _ in points], [v for _, v in points], label=label, linewidth=1)
    axes.set_xlabel("time (ms)")
    axes.set_ylabel("%")
    axes.set_ylim(0, 105)
    _legend_beside(axes)
    return _svg(figure)


def ranges_svg(ranges: list[dict], limit: int = 10) -> str | None:
    rows = [r for r in ranges if r.get("depth") == 0][:limit]
    if not rows:
        return None
    figure, axes = plt.subplots(figsize=(7, 0.35 * len(rows) + 0.8))
    names = [literal(str(r["name"])[:40]) for r in rows][::-1]
    wall = [r["wall_ns"] / 1e6 for r in rows][::-1]
    gpu = [(r["kernel_ns"] + r["copy_ns"]) / 1e6 for r in rows][::-1]
    axes.barh(names, wall, color="#ccc", label="wall time")
    axes.barh(names, gpu, color="#4a7ab5", label="GPU work launched")
    axes.set_xlabel("ms")
    _legend_beside(axes)
    return _svg(figure)


def devices_svg(devices: list[dict]) -> str | None:
    """Per GPU: compute, communication hidden behind compute, exposed communication, idle."""
    if len(devices) < 2:
        return None
    figure, axes = plt.subplots(figsize=(7, 0.45 * len(devices) + 1))
    labels = [literal(f"GPU {d['device_id']}") for d in devices]
    parts = [("compute", [d["compute_kernel_ns"] for d in devices], "#4a7ab5"),
             ("communication, hidden", [d["communication_ns"] - d["exposed_communication_ns"] for d in devices], "#9bc49b"),
             ("communication, exposed", [d["exposed_communication_ns"] for d in devices], "#d68910"),
             ("idle", [d["gpu_idle_ns"] for d in devices], "#dddddd")]
    left = [0.0] * len(devices)
    for label, values, color in parts:
        values_ms = [v / 1e6 for v in values]
        axes.barh(labels, values_ms, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, values_ms)]
    axes.set_xlabel("ms")
    _legend(axes, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    return _svg(figure)


BUDGET_COLORS = {"gpu_compute": "#4a7ab5", "gpu_communication": "#d68910", "gpu_copy": "#9bc49b",
                 "idle_other": "#bbbbbb", "idle_sync": "#c0392b", "idle_launch": "#e8a33d", "idle_host": "#8e6fb5"}


def budget_svg(timeline: dict | None) -> str | None:
    """The time budget as stacked bars: a median step (when the run has steps), then each GPU's window."""
    if not timeline or not timeline.get("budget"):
        return None
    from nsanalyze.render.format import budget_labels, duration

    names = budget_labels(timeline)
    rows = []
    steps = timeline.get("steps") or {}
    if steps.get("budget"):
        rows.append((f"median step ({duration(steps['median_ns'])})", steps["budget"]))
    devices = [d for d in timeline.get("devices") or [] if d.get("budget")]
    for device in devices if len(devices) > 1 else devices[:1]:
        rows.append((f"GPU {device['device_id']}, window ({duration(device.get('window_ns'))})", device["budget"]))
    figure, axes = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.1))
    labels = [literal(label) for label, _ in rows][::-1]
    budgets = [budget for _, budget in rows][::-1]
    left = [0.0] * len(rows)
    for part, color in BUDGET_COLORS.items():
        values = [100 * (next((p["share"] for p in b if p["part"] == part), 0) or 0) for b in budgets]
        if not any(v >= 0.5 for v in values):
            continue
        axes.barh(labels, values, left=left, color=color, label=names[part])
        left = [a + b for a, b in zip(left, values)]
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of the time")
    _legend(axes, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(figure)


def critical_path_svg(timeline: dict | None) -> str | None:
    """The critical path of a median step as one stacked bar: GPU work by role, the host's activity by class,
    its own code; what a faster part would shorten (normalize.critical_path)."""
    path = (timeline or {}).get("critical_path") or []
    if not path:
        return None
    from nsanalyze.render.format import duration

    total = sum(p["ns"] for p in path) or 1
    figure, axes = plt.subplots(figsize=(7, 1.5))
    left, host_shades = 0.0, iter(["#8e44ad", "#a569bd", "#bb8fce", "#d2b4de", "#5b2c6f", "#e8daef"])
    for entry in sorted(path, key=lambda p: (not str(p["part"]).startswith("gpu:"), -p["ns"])):
        share = 100 * entry["ns"] / total
        if share < 0.5:
            continue
        part = str(entry["part"])
        color = WORK_COLORS.get(part.removeprefix("gpu:"), "#2e6da4") if part.startswith("gpu:") else \
            next(host_shades, "#888888")
        axes.barh([literal(f"median step ({duration(total)})")], [share], left=[left], color=color,
                  label=literal(part))
        left += share
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of the step on its critical path")
    _legend(axes, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.6))
    return _svg(figure)


WORK_COLORS = {"matmul_tensor": "#2e6da4", "matmul_simt": "#8fb3d9", "attention_fused": "#1f8a70",
               "attention_unfused": "#c0392b", "normalization": "#d98cb3", "elementwise": "#f0c27b",
               "reduction": "#d68910", "gather": "#c39bd3", "layout": "#8e6fb5", "cast": "#b39ddb", "copy": "#9bc49b",
               "communication": "#5d6d7e", "optimizer": "#a3c4a0", "graph": "#7f8c8d", "other": "#dddddd"}


def work_svg(timeline: dict | None) -> str | None:
    """What the busy GPU does: its kernel time by role, one stacked bar (one per GPU when several)."""
    if not timeline or not timeline.get("work"):
        return None
    from nsanalyze.render.format import WORK_LABELS, duration

    rows = [(f"window ({duration(timeline.get('kernel_ns'))} of kernels)", timeline["work"])]
    rows += [(f"GPU {d['device_id']}", d["work"]) for d in timeline.get("devices") or [] if d.get("work")]
    figure, axes = plt.subplots(figsize=(7, 0.35 * len(rows) + 0.9))
    labels = [literal(label) for label, _ in rows][::-1]
    works = [work for _, work in rows][::-1]
    left = [0.0] * len(rows)
    for role, color in WORK_COLORS.items():
        values = [100 * (next((w["share"] for w in work if w["role"] == role), 0) or 0) for work in works]
        if not any(v >= 0.5 for v in values):
            continue
        axes.barh(labels, values, left=left, color=color, label=WORK_LABELS[role], height=0.6)
        left = [a + b for a, b in zip(left, values)]
    axes.set_xlim(0, 100)
    axes.set_xlabel("% of GPU kernel time")
    _legend(axes, fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(figure)


def _with_nested(phases: list[dict]) -> list[dict]:
    """Each phase followed by the phases nested in it (normalize.phases), as rows of the time line."""
    return [row for phase in phases for row in (phase, *_with_nested(phase.get("children") or []))]


def phases_svg(timeline: dict | None) -> str | None:
    """The run's phases on one time line: a row per phase (nested phases under theirs, named by their path),
    its instances as bars coloured by the budget part that holds most of the phase, the analysis window shaded."""
    phases = _with_nested((timeline or {}).get("phases") or [])
    if not phases:
        return None
    origin = min(p["start_ns"] for p in phases)
    figure, axes = plt.subplots(figsize=(7, 0.4 * len(phases) + 1.0))
    window = timeline.get("window") or {}
    if window.get("start_ns") is not None and window.get("end_ns") is not None:
        axes.axvspan((window["start_ns"] - origin) / 1e9, (window["end_ns"] - origin) / 1e9, color="#eef3fa",
                     label="analysis window")
    for row, phase in enumerate(reversed(phases)):
        top = max(phase.get("budget") or [{"part": "gpu_compute", "ns": 0}], key=lambda p: p["ns"])["part"]
        spans = [((a - origin) / 1e9, max((b - a) / 1e9, 1e-6)) for a, b in phase.get("instances") or []]
        axes.broken_barh(spans, (row - 0.35, 0.7), color=BUDGET_COLORS.get(top, "#888888"))
    axes.set_yticks(range(len(phases)))
    axes.set_yticklabels([literal(p.get("path") or p["name"]) for p in reversed(phases)])
    axes.set_xlabel("s since the first phase")
    _legend(axes, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return _svg(figure)
