"""non-step-phase on real runs: it speaks where a non-step phase holds the window, and nowhere else."""

import pytest

from tests.conftest import DEV_INFER_NSYS, REAL, program_findings, sql


def test_speaks_on_checkpoints(analyzed):
    checks = [f["check"] for f in program_findings(analyzed(REAL / "phases_nsys.sqlite.xz"))]
    assert checks[0] == "non-step-phase"


def test_silent_on_loops_and_outside_the_window(analyzed):
    """A loop of steps alone, and dev_infer whose other phases lie outside (or hardly inside) its window."""
    for path in (REAL / "nightly1_nsys.sqlite.xz", REAL / "graphs_eager_nsys.sqlite.xz", DEV_INFER_NSYS):
        assert "non-step-phase" not in [f["check"] for f in program_findings(analyzed(path))], path


def test_claims_what_its_instances_hold_inside_the_window(analyzed):
    """phases_nsys: 2 of 3 checkpoints lie in the window, the third past the GPU's last work. The phase
    prices (and claims from the budget) its in-window instances less the GPU compute in them, by SQL; the
    host-sync idle time inside those instances is the phase's, so host-sync has under its 3% left (before,
    a share of the whole phase's budget was claimed, and host-sync sold the rest again: 725 ms)."""
    path = REAL / "phases_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    lo, hi = window["start_ns"], window["end_ns"]
    ranges = sql(path, "SELECT MAX(n.start, {lo}), MIN(n.end, {hi}) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
                       "ON s.id = n.textId WHERE n.eventType = 59 AND COALESCE(n.text, s.value) = 'checkpoint' "
                       "AND n.end > {lo} AND n.start < {hi}".format(lo=lo, hi=hi))
    inside = sum(e - s for s, e in ranges)
    computing = sum(sql(path, f"SELECT COALESCE(SUM(MAX(0, MIN(end, {e}) - MAX(start, {s}))), 0) "
                              "FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0] for s, e in ranges)
    assert len(ranges) == 2 and inside > 3e9
    finding = next(f for f in model["findings"] if f["check"] == "non-step-phase")
    assert abs(finding["estimated_savings_ns"] - (inside - computing)) <= 0.01 * inside
    assert "host-sync" not in [f["check"] for f in program_findings(model)]


def test_the_title_tells_the_instances_it_prices_and_every_large_part(analyzed):
    """phases_nsys: the two checkpoints in the window take 4.06 s (by SQL): the title's time each is their
    mean, not that of all three; their pageable device-to-host copies (37%) are named beside the idle time
    the host's file writes cover."""
    path = REAL / "phases_nsys.sqlite.xz"
    model = analyzed(path)
    window = model["timeline"]["window"]
    ranges = sql(path, "SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                       "WHERE n.eventType = 59 AND COALESCE(n.text, s.value) = 'checkpoint' "
                       f"AND n.end > {window['start_ns']} AND n.start < {window['end_ns']}")
    each = sum(min(e, window["end_ns"]) - max(s, window["start_ns"]) for s, e in ranges) / len(ranges)
    finding = next(f for f in model["findings"] if f["check"] == "non-step-phase")
    assert f"{each / 1e6:.1f} ms each" in finding["title"]
    assert "copies between host and GPU 37%" in finding["title"] and "file-io" in finding["title"]


def test_an_epoch_range_around_the_steps_is_not_a_phase_beside_them(analyzed):
    """blind76_epochs (chosen for round 76, read before any change): each of 8 epochs is an `epoch N` range around its
    20 `step N` ranges (SQL: every step range inside an epoch range), and each epoch's first step waits for its
    DataLoader's 6 workers to start again. The epochs, which hold the steps, were told as "a phase that is not the
    steps holds 100% of the window" with checkpoint advice first; an epoch range around the steps is their
    container, and the waits are host-wait's, priced within 10% of what `persistent_workers=True` saved (the mean
    GPU periods by SQL) and told as workers forked at the first step of each epoch."""
    from tests.conftest import sql_saved_per_step

    for run in (1, 2):
        base, fix = f"blind76_epochs_base{run}_nsys.sqlite.xz", f"blind76_epochs_fix{run}_nsys.sqlite.xz"
        path = REAL / base
        (steps, inside), = sql(path, """WITH r AS (SELECT n.start, n.end, COALESCE(n.text, s.value) name FROM NVTX_EVENTS n
            LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59)
            SELECT COUNT(*), SUM(EXISTS (SELECT 1 FROM r e WHERE e.name LIKE 'epoch %' AND e.start <= r.start
                                         AND e.end >= r.end)) FROM r WHERE r.name LIKE 'step %'""")
        assert steps == inside == 160
        model = analyzed(path)
        checks = [f["check"] for f in program_findings(model)]
        assert "non-step-phase" not in checks and checks[0] == "host-wait"
        first = program_findings(model)[0]
        saved = first["estimated_savings_ns"] / model["timeline"]["steps"]["count"]
        assert saved == pytest.approx(sql_saved_per_step(analyzed, base, fix), rel=0.1)
        assert "They come at the first step of each `epoch N`" in first["advice"]
        # every epoch's first step in the window is named, not the few a share of the waits holds (5 of 7, a user read)
        window = model["timeline"]["window"]
        firsts = [n for (n,) in sql(path, f"""WITH r AS (SELECT n.start, n.end, COALESCE(n.text, s.value) name
            FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59)
            SELECT MIN(CAST(SUBSTR(st.name, 6) AS INTEGER)) FROM r e JOIN r st ON st.name LIKE 'step %'
            AND st.start >= e.start AND st.end <= e.end WHERE e.name LIKE 'epoch %' GROUP BY e.start
            HAVING MIN(st.start) >= {int(window['start_ns'])} AND MIN(st.start) < {int(window['end_ns'])}
            ORDER BY e.start""")]
        assert len(firsts) >= 6 and f"in {len(firsts)} of " in first["title"]
        assert f"({', '.join(str(n) for n in firsts)})" in first["title"]
        # the forks run in those steps only: a median step's budget does not name them (a user read)
        forks = next(c for c in model["timeline"]["host_activity"]["classes"] if c["class"] == "child-process")
        assert forks["steps_with_calls"] == len(firsts)
        from nsanalyze.render.format import window_lines
        budget_line = next(line for line in window_lines(model["timeline"])
                           if line.startswith("Time budget of a median step"))
        assert "child process" not in budget_line and "idle on host code" in budget_line
        assert "persistent_workers=True" in first["advice"] and "subprocess" not in first["advice"]
