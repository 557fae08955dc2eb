"""The cluster hang watchdog's looks at the master's log (``jobstate.hang_watch``): a line stamped after the newest
seen is progress, the lines of the same second that ``sinceTime`` brings again are not, the clock runs only while
every replica runs and the log can be read, and a live record gives the step."""

from __future__ import annotations

import json

from airflow_distributed.jobstate.hang_watch import MasterLogWatch
from airflow_distributed.replica.live_report import PREFIX

T0 = 1_800_000_000  # epoch seconds of the log's first line


def stamped(seconds: float, text: str) -> str:
    whole, fraction = divmod(round(seconds * 1e9), 10**9)
    from datetime import datetime, timezone

    return datetime.fromtimestamp(whole, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z {text}"


def test_the_same_lines_again_are_no_progress_and_the_quiet_master_is_hung_naming_its_step() -> None:
    watch = MasterLogWatch(10, started_at=0)
    record = PREFIX + json.dumps({"progress": {"step": 7}, "metrics": {}, "history": []})
    lines = [stamped(T0 + 0.2, "step 7"), stamped(T0 + 0.3, record)]
    watch.observe(lines, running=True, now=1)
    assert watch.query()[-1] == ("sinceTime", "2027-01-15T08:00:00Z")  # whole seconds: those lines come again
    watch.observe(lines, running=True, now=6)
    assert watch.hung(10.9) is None and watch.due(11)  # a look at the deadline, before any verdict
    watch.observe(lines, running=True, now=11)
    why = watch.hung(11)
    assert why is not None and "its last step reported was 7, 10s ago" in why


def test_a_new_line_within_each_timeout_keeps_a_slow_master_alive() -> None:
    watch = MasterLogWatch(10, started_at=0)
    for now in range(0, 120, 8):
        watch.observe([stamped(T0 + now, f"step {now}")], running=True, now=now)
        assert watch.hung(now + 7.9) is None


def test_the_clock_runs_only_while_every_replica_runs_and_the_log_is_read() -> None:
    watch = MasterLogWatch(10, started_at=0)
    watch.observe(None, running=False, now=50)  # still starting: not hung, however long
    assert watch.hung(55) is None
    watch.observe(None, running=True, now=55)  # the log could not be read: the clock starts again
    assert watch.hung(64.9) is None
    watch.observe([], running=True, now=65)
    assert watch.hung(65) is not None


def test_looks_are_paced_and_bounded() -> None:
    watch = MasterLogWatch(60, started_at=0)
    assert watch.due(0) and watch.interval == 15
    watch.observe([], running=True, now=0)
    assert not watch.due(14.9) and watch.due(15) and watch.seconds_to_look(5) == 10
    watch.observe([], running=True, now=50)
    assert watch.seconds_to_look(51) == 9  # the hung verdict is due before the next look: woken for a look then
    watch.observe([], running=True, now=60)
    # Past it with no verdict (a replica stopped running since the look): the next look, not a busy wait.
    assert watch.seconds_to_look(61) == 14
    assert dict(watch.query()) == {"timestamps": "true", "tailLines": "50", "limitBytes": str(256 * 1024)}
    assert MasterLogWatch(8, started_at=0).interval == 2


def test_a_record_held_back_to_the_end_of_its_interval_is_timed_from_its_report_and_names_its_step() -> None:
    # The trigger's clock is the wall clock. The master reported steps 1 to 10 from T0 to T0 + 1.8, then blocked; the
    # record of step 1 was printed at once, the one of step 10 held back to the end of the interval, T0 + 5.
    watch = MasterLogWatch(10, started_at=T0 - 1)
    first = stamped(T0, PREFIX + json.dumps({"progress": {"step": 1}, "metrics": {}, "history": [], "reported_at": T0}))
    held = stamped(T0 + 5, PREFIX + json.dumps({"progress": {"step": 10}, "metrics": {"loss": 0.1}, "history": [],
                                                "reported_at": T0 + 1.8}))
    watch.observe([first], running=True, now=T0 + 2.5)
    watch.observe([first, held], running=True, now=T0 + 5.5)
    assert watch.due(T0 + 11.8) and not watch.due(T0 + 7.9)  # the deadline counts from the report, T0 + 1.8
    watch.observe([held], running=True, now=T0 + 11.8)
    assert watch.hung(T0 + 11.8) == (
        "the job hung: the master reported no progress or metric and printed no line for 10s (progress_timeout 10s) "
        "while every replica ran; its last step reported was 10, 10s ago")


def test_a_line_printed_after_the_last_report_restarts_the_clock_and_the_step_keeps_its_reports_time() -> None:
    watch = MasterLogWatch(10, started_at=T0 - 1)
    record = stamped(T0 + 1, PREFIX + json.dumps({"progress": {"step": 3}, "metrics": {}, "history": [],
                                                   "reported_at": T0 + 0.5}))
    watch.observe([record, stamped(T0 + 2, "entering the all-reduce")], running=True, now=T0 + 3)
    watch.observe([], running=True, now=T0 + 12)
    assert watch.hung(T0 + 12) == (
        "the job hung: the master reported no progress or metric and printed no line for 10s (progress_timeout 10s) "
        "while every replica ran; its last step reported was 3, 12s ago")
