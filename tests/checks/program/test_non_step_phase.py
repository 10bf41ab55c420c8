"""non-step-phase on real runs: it speaks where a non-step phase holds the window, and nowhere else."""

from tests.conftest import DEV_INFER_NSYS, REAL, program_findings


def test_speaks_on_checkpoints(analyzed):
    checks = [f["check"] for f in program_findings(analyzed(REAL / "phases_nsys.sqlite.xz"))]
    assert checks[0] == "non-step-phase"


def test_silent_on_loops_and_outside_the_window(analyzed):
    """A loop of steps alone, and dev_infer whose other phases lie outside (or hardly inside) its window."""
    for path in (REAL / "nightly1_nsys.sqlite.xz", REAL / "graphs_eager_nsys.sqlite.xz", DEV_INFER_NSYS):
        assert "non-step-phase" not in [f["check"] for f in program_findings(analyzed(path))], path
