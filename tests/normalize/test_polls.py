"""Poll loops (normalize.polls): a host that asks whether the GPU is done until it is, found by the calls' return
values and tested against SQL on real exports."""

from nsanalyze.normalize.activity import distinct, read_activity
from nsanalyze.normalize.polls import MIN_POLLS, NOT_READY, poll_loops
from nsanalyze.read import read_profile
from tests.conftest import REAL, sql

EVERYTHING = (-(1 << 62), 1 << 62)

# Each ready answer of cudaEventQuery on a thread right after MIN_POLLS or more of the same query answered "not ready",
# with their count: SQL's window functions over each thread's calls in time order (`run` numbers the calls that are
# not such answers; those answers share the number of the call before them)
RUNS = f"""WITH c AS (SELECT r.start, r.end, r.globalTid tid, s.value LIKE 'cudaEventQuery%' AND r.returnValue = 0 ready,
                 SUM(NOT (s.value LIKE 'cudaEventQuery%' AND r.returnValue = {NOT_READY})) OVER (PARTITION BY
                     r.globalTid ORDER BY r.start, r.end ROWS UNBOUNDED PRECEDING) run
           FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId),
      n AS (SELECT tid, run, COUNT(*) - 1 polls FROM c GROUP BY tid, run)
      SELECT c.start, c.end, n.polls FROM c JOIN n ON n.tid = c.tid AND n.run = c.run - 1
      WHERE c.ready AND n.polls >= {MIN_POLLS}"""


def loops_of(name: str):
    export = read_profile(REAL / name)
    activity = read_activity(export, EVERYTHING)
    return poll_loops(export, activity, export.strings(distinct(activity.calls.name_id)))


def test_each_spin_on_an_event_is_one_loop_from_its_first_query_to_its_ready_answer():
    """blind77_pollwait_base1: after each step's launches the host spins on `while not done.query(): time.sleep(0)`
    (100 steps). A loop is each ready answer of cudaEventQuery that ends a run of MIN_POLLS or more not-ready answers
    on its thread, SQL's count; each ends at that answer, and holds its not-ready answers. Each waited for the GPU:
    its work ran when the polling began, and had ended by the answer."""
    loops = loops_of("blind77_pollwait_base1_nsys.sqlite.xz")
    runs = sql(REAL / "blind77_pollwait_base1_nsys.sqlite.xz", RUNS)
    assert len(loops) == len(runs) >= 99
    ends = {end: polls for _, end, polls in runs}
    assert all(int(end) in ends for end in loops.end)
    assert [ends[int(end)] for end in loops.end] == loops.not_ready.tolist()
    assert (loops.not_ready > 300).all() and ((loops.end - loops.start) > 10_000_000).all()   # 18 ms of a 25.6 ms step


def test_the_allocator_queries_and_a_program_without_a_spin_make_none():
    """PyTorch's caching allocator queries the events of blocks freed on other streams before each allocation
    (blind57_landcover_fix1: over a thousand not-ready answers, SQL), each run ended by a launch, not a ready answer;
    the pollwait twin without the spin queries nothing."""
    (not_ready,), = sql(REAL / "blind57_landcover_fix1_nsys.sqlite.xz",
                        f"SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE returnValue = {NOT_READY}")
    assert not_ready > 1000
    assert len(loops_of("blind57_landcover_fix1_nsys.sqlite.xz")) == 0
    assert len(loops_of("blind77_pollwait_fix1_nsys.sqlite.xz")) == 0


def test_a_profile_without_return_values_says_its_polls_cannot_be_told(tmp_path):
    """A Kineto trace records no call's return value (read/kineto.py converts it without one). The pollwait export
    with its returnValue column dropped: no loop is found, and a note says how many queries the window holds (SQL)
    and that such waits count as host time."""
    import shutil
    import sqlite3

    from nsanalyze.normalize.polls import unread_note
    from nsanalyze.read.files import open_local

    path = tmp_path / "pollwait_unanswered.sqlite"
    shutil.copy(open_local(REAL / "blind77_pollwait_base1_nsys.sqlite.xz")[1], path)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN returnValue")
        (queries,), = db.execute("""SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
            ON s.id = r.nameId WHERE s.value LIKE 'cudaEventQuery%'""").fetchall()
    export = read_profile(path)
    activity = read_activity(export, EVERYTHING)
    names = export.strings(distinct(activity.calls.name_id))
    assert len(poll_loops(export, activity, names)) == 0
    note, = unread_note(export, activity, names)
    assert note.startswith(f"{queries:,} calls of cudaEventQuery in the window") and queries > 30000
    answered = read_profile(REAL / "blind77_pollwait_base1_nsys.sqlite.xz")
    assert unread_note(answered, read_activity(answered, EVERYTHING), names) == []
