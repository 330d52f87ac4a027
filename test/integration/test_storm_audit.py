"""The storm's audit of the driver's call log (test/storm/audit.py): what it
may call a duplicate, around calls a driver crash or kill took with it."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "storm"))
import audit  # noqa: E402

VID = "h-shared-0"


def call(t, method, code="OK", pid=1, **extra):
    return dict({"time": t, "duration": 0.01, "method": method, "code": code, "pid": pid,
                 "request": {"volume_id": VID}}, **extra)


def problems(entries, killed=()):
    a = audit.CallAudit()
    a.feed(entries, killed)
    return {rule: n for rule, n in a.counts.items() if n}


def test_a_second_clean_unstage_is_a_duplicate():
    assert problems([call(10, "NodeStageVolume"), call(11, "NodeUnstageVolume"),
                     call(20, "NodeUnstageVolume")]) == {"duplicate unstage": 1}


def test_a_stage_lost_with_a_crashed_process_makes_the_next_unstage_legitimate():
    # As in a storm run: the stage in flight when another call's injected
    # crash ended the driver; kvolumed, uncertain of it, unstages.
    lost = call(15, "NodeStageVolume", code="CRASH", fault={"crash": "lost"})
    crash = call(15.05, "NodePublishVolume", code="CRASH", fault={"crash": "before"})
    entries = [call(10, "NodeStageVolume"), call(11, "NodeUnstageVolume"), lost, crash,
               call(20, "NodeUnstageVolume", pid=2)]
    assert problems(entries) == {}
    # Without the lost call in the log, the audit could only call it a duplicate.
    assert problems([e for e in entries if e is not lost]) == {"duplicate unstage": 1}


def test_a_lost_teardown_counts_as_maybe_done():
    entries = [call(10, "NodeStageVolume"),
               call(11, "NodeUnstageVolume", code="CRASH", fault={"crash": "lost"}),
               call(11.05, "NodePublishVolume", code="CRASH", fault={"crash": "before"}),
               call(20, "NodeStageVolume", pid=2)]
    assert problems(entries) == {}


def test_a_kill_from_outside_makes_the_next_call_of_each_volume_legitimate():
    entries = [call(10, "NodeStageVolume"), call(11, "NodeUnstageVolume"), call(20, "NodeUnstageVolume", pid=2)]
    assert problems(entries, killed=[(1, 15)]) == {}
    # A kill before the clean unstage says nothing of the call after it.
    entries = [call(10, "NodeStageVolume"), call(11, "NodeUnstageVolume", pid=2), call(20, "NodeUnstageVolume", pid=2)]
    assert problems(entries, killed=[(1, 10.5)]) == {"duplicate unstage": 1}
