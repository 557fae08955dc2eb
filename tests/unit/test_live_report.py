"""The live record the master's ``tracking`` calls print for the job view of a running cluster job."""

from __future__ import annotations

import json

from airflow_distributed import tracking
from airflow_distributed.jobstate.last_lines import last_lines_block
from airflow_distributed.outputs import sanitise_document
from airflow_distributed.replica.live_report import PREFIX, RECORD_LIMIT, latest_record, record_line, without_records


def _records(out: str) -> list[dict]:
    return [json.loads(line[len(PREFIX):]) for line in out.splitlines() if line.startswith(PREFIX)]


def test_tracking_prints_a_record_at_most_every_interval_and_the_held_back_one_when_it_ends(
        master, clock, timers, capsys):
    tracking.log_metrics(step=1, loss=0.5)
    tracking.log_progress(10, 100)
    (first,) = _records(capsys.readouterr().out)
    reported_at = first.pop("reported_at")  # when the master made the report: the hang watchdog times from it
    assert first == {"progress": None, "metrics": {"loss": 0.5}, "history": [{"step": 1, "loss": 0.5}]}
    assert isinstance(reported_at, float)
    assert [wait for wait, _ in timers] == [5.0]  # the progress came within the interval: held back until its end
    clock[0] += 1.5
    tracking.log_progress(50, 100)
    tracking.log_metrics(step=2, loss=float("nan"))
    assert _records(capsys.readouterr().out) == [] and len(timers) == 1
    timers[0][1]()  # the interval ends: the newest state is printed
    (held,) = _records(capsys.readouterr().out)
    assert held["progress"]["percent"] == 50.0 and held["metrics"] == {"loss": None} and len(held["history"]) == 2


def test_a_record_is_bounded_thinning_the_history_first_then_leaving_out_the_metrics():
    history = [{"step": i, "loss": 1.0 / (i + 1), "note": "x" * 100} for i in range(5000)]
    line = record_line({"progress": {"percent": 5.0}, "metrics": {"loss": 0.1}, "history": history})
    assert line is not None and len(line) <= RECORD_LIMIT
    record = latest_record([line])
    assert record["metrics"] == {"loss": 0.1} and 4 <= len(record["history"]) <= 100
    assert record["history"][0]["step"] == 0 and record["history"][-1]["step"] == 4999
    huge = record_line({"progress": {"percent": 5.0}, "metrics": {"m": "y" * RECORD_LIMIT}, "history": []})
    assert latest_record([huge]) == {"progress": {"percent": 5.0}, "metrics": {}, "history": []}


def test_the_newest_whole_record_is_taken_and_sanitised_and_logs_leave_records_out():
    old = record_line({"progress": {"percent": 10.0}, "metrics": {"loss": 1}})
    new = PREFIX + '{"progress": {"percent": "50"}, "metrics": {"loss": NaN, "acc": 1e999}, "history": []}'
    cut = PREFIX + '{"progress": {"percent": 90'
    lines = ["step 1", old, "step 2", new, cut, "step 3"]
    document = sanitise_document(latest_record(lines))
    assert document["metrics"] == {"loss": None, "acc": None} and document["progress"] == {"percent": None}
    assert without_records(lines) == ["step 1", "step 2", "step 3"]
    assert last_lines_block("j", {"master": lines}).splitlines()[1:] == [
        "  master:", "    step 1", "    step 2", "    step 3"]
    assert latest_record(["no record here"]) is None
