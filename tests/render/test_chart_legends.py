"""No chart's legend covers what it explains: bars, lines or points under the legend box (issue 36: the
NVTX ranges chart's legend sat on its bars). Every chart of real reports, measured on matplotlib's own
layout (display coordinates after drawing)."""

import pytest

from nsanalyze.render import charts
from tests.conftest import DEV_INFER_NSYS, DEV_SUITE_NCU, DEV_SUITE_NSYS, PUBLIC, REAL


def _covered(figure) -> list[str]:
    """What lies under a legend: bars (patches), line vertices and scatter points, in display coordinates."""
    figure.canvas.draw()
    covered = []
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent()
        for patch in axes.patches:
            extent = patch.get_window_extent()
            if extent.width > 0 and extent.height > 0 and box.overlaps(extent):
                covered.append(f"bar {patch.get_label()!r}")
        for line in axes.lines:
            points = line.get_transform().transform(line.get_xydata())
            if any(box.contains(x, y) for x, y in points):
                covered.append(f"line {line.get_label()!r}")
        for collection in axes.collections:
            points = collection.get_offset_transform().transform(collection.get_offsets())
            if any(box.contains(x, y) for x, y in points):
                covered.append(f"points {collection.get_label()!r}")
    return covered


@pytest.fixture
def drawn(monkeypatch):
    """The figures the chart functions make, kept instead of written to SVG."""
    figures = []

    def keep(figure):
        figures.append(figure)
        return "<svg/>"
    monkeypatch.setattr(charts, "_svg", keep)
    return figures


CHARTS = {
    "ranges": lambda m: charts.ranges_svg((m.get("timeline") or {}).get("ranges") or []),
    "utilization": lambda m: charts.utilization_svg(m.get("gpu_metrics")),
    "roofline": lambda m: charts.roofline_svg(m["kernels"]),
    "budget": lambda m: charts.budget_svg(m.get("timeline")),
    "work": lambda m: charts.work_svg(m.get("timeline")),
    "phases": lambda m: charts.phases_svg(m.get("timeline")),
    "devices": lambda m: charts.devices_svg((m.get("timeline") or {}).get("devices") or []),
    "critical_path": lambda m: charts.critical_path_svg(m.get("timeline")),
}
PROFILES = [DEV_SUITE_NSYS, DEV_INFER_NSYS, DEV_SUITE_NCU, REAL / "ddp_host_all_nsys.sqlite.xz",
            REAL / "spin_gpumetrics_nsys.sqlite.xz", REAL / "nested_phases_nsys.sqlite.xz"]


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name[:40])
def test_no_legend_covers_its_chart(path, analyzed, drawn):
    import matplotlib.pyplot as plt

    model = analyzed(path)
    made = []
    for name, chart in CHARTS.items():
        before = len(drawn)
        chart(model)
        made += [(name, figure) for figure in drawn[before:]]
    assert made
    try:
        covered = {name: _covered(figure) for name, figure in made}
    finally:
        for _, figure in made:
            plt.close(figure)
    assert {name: c for name, c in covered.items() if c} == {}


@pytest.mark.parametrize("path", PROFILES + [PUBLIC / "quasiben__nvtx-examples__quickstart.sqlite.xz"],
                         ids=lambda p: p.name[:40])
def test_every_chart_draws_without_a_warning(path, analyzed):
    """A chart that labelled nothing draws no legend: matplotlib's warning for it reached the user's stderr
    in every HTML and PDF report of a run with phases and no analysis window (the NVTX quickstart)."""
    import warnings

    model = analyzed(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn = [name for name, chart in CHARTS.items() if chart(model)]
    assert drawn
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


def test_kernels_of_one_name_each_get_a_bar_longest_first(analyzed, drawn):
    """blind69_augment's top kernels hold several PyTorch `elementwise_kernel` instances of one short name. On a
    categorical axis they were one label, their bars drawn over each other out of order (a user read). Each now has a
    row, longest first, the second and later of a name numbered."""
    import matplotlib.pyplot as plt

    kernels = analyzed(REAL / "blind69_augment_base1_nsys.sqlite.xz")["kernels"]
    rows = sorted([k for k in kernels if k.get("time_share")], key=lambda k: -k["time_share"])[:12]
    names = [k["name"][:40] for k in rows]
    assert len(set(names)) < len(names)   # the same name twice or more among the twelve
    charts.top_kernels_svg(kernels)
    figure = drawn[-1]
    try:
        bars = sorted(figure.axes[0].patches, key=lambda bar: -bar.get_y())   # top row first
        assert len(bars) == len(rows) and len({bar.get_y() for bar in bars}) == len(rows)
        widths = [bar.get_width() for bar in bars]
        assert widths == sorted(widths, reverse=True)
        ticks = zip(figure.axes[0].get_yticks(), figure.axes[0].get_yticklabels())
        labels = [label.get_text() for _, label in sorted(ticks, key=lambda tick: -tick[0])]   # top row first
        assert len(set(labels)) == len(labels) and labels[0] == names[0]
    finally:
        plt.close(figure)
