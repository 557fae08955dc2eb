"""``tracking.log_progress`` and how progress reads in the task log."""

from __future__ import annotations

import json

import pytest

from airflow_distributed import tracking
from airflow_distributed.status import progress_text


def test_progress_gives_a_percentage_and_an_estimate_from_the_pace_so_far(master, clock, timers):
    output = master.output
    tracking.log_progress(100, 1000)
    assert json.loads(output.read_text())["progress"] == {"step": 100, "total": 1000, "percent": 10.0,
                                                         "eta_seconds": None}
    clock[0] += 0.5
    tracking.log_progress(150, 1000)  # within a second of the last write: not written
    assert json.loads(output.read_text())["progress"]["step"] == 100
    clock[0] += 9.5
    tracking.log_progress(200, 1000)  # 100 steps in 10 s: 800 left take 80 s
    assert json.loads(output.read_text())["progress"] == {"step": 200, "total": 1000, "percent": 20.0,
                                                         "eta_seconds": 80.0}
    clock[0] += 0.1
    tracking.log_progress(1000, 1000)  # the last step is always written
    assert json.loads(output.read_text())["progress"]["percent"] == 100.0


def test_progress_on_another_replica_does_nothing(master, monkeypatch):
    output = master.output
    monkeypatch.setenv("RANK", "2")
    tracking.log_progress(1, 10)
    assert not output.exists()


@pytest.mark.parametrize(("step", "total", "error"), [
    (5, 0, ValueError), (11, 10, ValueError), (-1, 10, ValueError), (1.5, 10, TypeError), (True, 10, TypeError),
])
def test_bad_progress_is_refused(master, step, total, error):
    with pytest.raises(error):
        tracking.log_progress(step, total)


@pytest.mark.parametrize(("progress", "text"), [
    ({"step": 450, "total": 1000, "percent": 45.0, "eta_seconds": 130.0}, "45% (450/1000 steps), about 2 min left"),
    ({"step": 10, "total": 20, "percent": 50.0, "eta_seconds": 4.2}, "50% (10/20 steps), about 4 s left"),
    ({"step": 1, "total": 3, "percent": 33.3, "eta_seconds": None}, "33.3% (1/3 steps)"),
    ({"step": 3, "total": 3, "percent": 100.0, "eta_seconds": 0.0}, "100% (3/3 steps)"),
    ({"step": 5, "total": 100, "percent": 5.0, "eta_seconds": 7300}, "5% (5/100 steps), about 2 h 02 min left"),
    # what the master reported wrong was sanitised to None: left out, never an error
    ({"step": 5, "total": 10, "percent": None, "eta_seconds": None}, "(5/10 steps)"),
    ({"percent": None, "eta_seconds": 30}, "progress unknown, about 30 s left"),
])
def test_progress_text(progress, text):
    assert progress_text(progress) == text


def test_a_progress_held_back_is_written_when_its_second_ends_without_another_call(master, clock, timers):
    # The master reports steps within a second of its last write, then blocks (in a collective): no call comes to
    # write the last one, a timer thread does.
    output = master.output
    tracking.log_progress(1, 100)
    for step in range(2, 5):
        clock[0] += 0.2
        tracking.log_progress(step, 100)
    document = json.loads(output.read_text())
    assert document["progress"]["step"] == 1
    ((wait, write),) = timers
    assert wait == pytest.approx(0.8)
    write()
    document = json.loads(output.read_text())
    assert document["progress"]["step"] == 4 and document["reported_at"] > 0
