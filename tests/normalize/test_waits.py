"""Where the steps wait for the GPU (normalize/waits.py), against SQL over real exports (fixtures/real)."""

from nsanalyze.normalize.timeline import build_timeline
from nsanalyze.read import read_profile
from tests.conftest import REAL, program_findings, sql

# Per thread, the stream and device syncs its calls make inside the `step N` ranges, a step, and whether the thread
# is the one that pushes those ranges (the step loop's)
SYNCS_BY_THREAD_SQL = """
WITH st AS (SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %'),
loop AS (SELECT globalTid FROM st GROUP BY globalTid ORDER BY COUNT(*) DESC LIMIT 1)
SELECT r.globalTid = (SELECT globalTid FROM loop), COUNT(*) * 1.0 / (SELECT COUNT(*) FROM st)
FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
WHERE s.value LIKE '%Synchronize%' AND EXISTS (SELECT 1 FROM st WHERE r.start >= st.start AND r.start < st.end)
GROUP BY 1 ORDER BY 1
"""

# Per thread, the kernels with `backward` in their names it launched (by correlation id)
BACKWARD_BY_THREAD_SQL = """
SELECT r.globalTid, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
WHERE s.value LIKE '%backward%' GROUP BY 1 ORDER BY 2 DESC
"""


def _waits(name):
    return build_timeline(read_profile(REAL / name)).step_waits


def test_anomaly_detections_read_backs_are_placed_in_the_backward():
    """A GPT trained with `torch.autograd.set_detect_anomaly(True)` left on (blind61, recorded blind): every wait of
    its steps is a stream sync on the thread that launches the backward's kernels, none on the step loop's."""
    name = "blind61_anomaly_base1_nsys.sqlite.xz"
    by_thread = dict(sql(REAL / name, SYNCS_BY_THREAD_SQL))
    assert by_thread.get(1, 0) < 0.02   # inside the steps, the loop's thread makes one in all
    (backward_thread, _), *_ = sql(REAL / name, BACKWARD_BY_THREAD_SQL)
    ((on_it,),) = sql(REAL / name, f"""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
        ON s.id = r.nameId WHERE s.value LIKE 'cudaStreamSynchronize%' AND r.globalTid = {backward_thread}""")
    ((everywhere,),) = sql(REAL / name, """SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
        ON s.id = r.nameId WHERE s.value LIKE 'cudaStreamSynchronize%'""")
    assert on_it / everywhere > 0.99   # 31,920 of 31,923: the backward's thread makes them
    waits = _waits(name)
    assert waits.backward_thread_known
    assert waits.per_step == waits.backward_per_step == round(by_thread[0]) == 336


def test_the_loops_own_syncs_are_not_the_backwards():
    """torch.cuda.synchronize() around each of 5 stages of a ResNet-50 (sync53, blind): 10 waits a step on the step
    loop's thread, none on the backward's, which the replayed block tells apart."""
    name = "sync53_resnet256_base_nsys.sqlite.xz"
    by_thread = dict(sql(REAL / name, SYNCS_BY_THREAD_SQL))
    assert round(by_thread[1]) == 10 and by_thread.get(0, 0) == 0
    waits = _waits(name)
    assert waits.backward_thread_known and waits.per_step == 10 and waits.backward_per_step == 0


def test_the_advice_names_the_backward_only_where_it_waits(analyzed):
    """The launch-bound finding's first lines name per-gradient read-backs (anomaly detection among them) where the
    backward makes the waits, and the host-sync finding leads with it; the stage syncs of sync53 keep their own
    advice (torch.cuda.synchronize() between stages), an autotuner's trials in the backward are not read-backs
    (blind_cudnnbench), and the fixed twin, which never waits, has neither."""
    base = program_findings(analyzed(REAL / "blind61_anomaly_base1_nsys.sqlite.xz"))
    launch = next(f for f in base if f["check"] == "launch-overhead")
    first_paragraph = launch["advice"].split("\n\n")[0]
    assert "All 336 waits a step are made inside the backward pass" in first_paragraph
    assert "set_detect_anomaly(True)" in first_paragraph
    assert launch["title"].endswith("; the steps wait 336 times inside the backward pass (a read-back per gradient)")
    sync = next(f for f in base if f["check"] == "host-sync")
    assert sync["advice"].startswith("All 336 waits a step are made inside the backward pass")
    stages = next(f for f in program_findings(analyzed(REAL / "sync53_resnet256_base_nsys.sqlite.xz"))
                  if f["check"] == "host-sync")
    assert "backward pass" not in stages["advice"] and "torch.cuda.synchronize()" in stages["advice"].split("\n")[0]
    # cuDNN's benchmark mode tunes the backward's convolutions on its thread: those waits are the tuner's
    tuned = analyzed(REAL / "blind_cudnnbench_base_nsys.sqlite.xz")
    assert not any("inside the backward pass" in f["advice"] for f in tuned["findings"])
    fixed = analyzed(REAL / "blind61_anomaly_fix1_nsys.sqlite.xz")
    assert not any("inside the backward pass" in f["advice"] for f in fixed["findings"])
