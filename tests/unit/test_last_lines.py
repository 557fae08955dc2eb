"""The replicas' last lines in the task log: the closing block a job's end writes, and how the job view reads it (or
the lines relayed while the job runs) back from the task log's messages."""

from __future__ import annotations

import pytest

from airflow_distributed.jobstate.last_lines import (
    LINE_CHARS,
    LOG_LINES,
    LOG_REPLICAS,
    last_lines_block,
    lines_from_task_log,
    read_block,
)
from airflow_distributed.replica.live_report import record_line

JOB = "train-1a2b3c4d"


def test_the_block_names_each_replica_and_indents_its_last_lines():
    block = last_lines_block(JOB, {f"{JOB}-master-0": ["step 1", "done"], f"{JOB}-worker-0": []})
    assert block == (f"last lines of each replica of {JOB} (at most {LOG_LINES} each):\n"
                     f"  {JOB}-master-0:\n    step 1\n    done\n"
                     f"  {JOB}-worker-0: (no output)")
    assert last_lines_block(JOB, {}) is None


@pytest.mark.parametrize("lines", [
    pytest.param(["plain", "", "   leading spaces", "  worker-9:", "    deeper", "trailing:"], id="look-alikes"),
    pytest.param(["(no output)", f"last lines of each replica of {JOB} (at most 1 each):"], id="heading-inside"),
    pytest.param(["a\x00b", "c\rd", "\x1b[31mred\x1b[0m", "ünïcödé ✓"], id="odd-characters"),
])
def test_what_a_block_holds_reads_back_as_it_was_kept(lines):
    logs = {f"{JOB}-master-0": lines, f"{JOB}-worker-0": ["x"]}
    read = read_block(JOB, last_lines_block(JOB, logs))
    expected = [line.replace("\x00", "\ufffd").replace("\r", "") for line in lines]
    assert read == {f"{JOB}-master-0": expected, f"{JOB}-worker-0": ["x"]}


def test_the_block_is_bounded_and_leaves_the_live_records_out():
    record = record_line({"progress": {"percent": 50.0}, "metrics": {}, "history": []})
    many = {f"r-{i}": [f"line {n} " + "y" * 1000 for n in range(100)] + [record] for i in range(LOG_REPLICAS + 5)}
    read = read_block(JOB, last_lines_block(JOB, many))
    assert len(read) == LOG_REPLICAS
    assert all(len(lines) == LOG_LINES and lines[-1].startswith("line 99 ") for lines in read.values())
    assert all(len(line) == LINE_CHARS for lines in read.values() for line in lines)


def test_the_task_log_gives_the_last_block_of_its_job_else_the_relayed_lines():
    names = [f"{JOB}-master-0", f"{JOB}-worker-0"]
    relayed = [f"[{JOB}-master-0] step {n}" for n in range(50)] + [
        f"[{JOB}-worker-0] ready", "[someone-else] not ours", "[unclosed", "job started"]
    assert lines_from_task_log(JOB, names, relayed) == {
        f"{JOB}-master-0": [f"step {n}" for n in range(50 - LOG_LINES, 50)], f"{JOB}-worker-0": ["ready"]}
    first = last_lines_block(JOB, {names[0]: ["try 1"]})
    last = last_lines_block(JOB, {names[0]: ["try 1, last words"], names[1]: []})
    other = last_lines_block("train-other", {"train-other-master-0": ["not this job"]})
    assert lines_from_task_log(JOB, names, [*relayed, first, last, other]) == {
        names[0]: ["try 1, last words"], names[1]: []}
    assert lines_from_task_log(JOB, names, ["job started", "no replica printed"]) is None
