"""The one failure message: every ending of a job, as every backend words it (``jobstate.outcome``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from airflow_distributed.jobstate.outcome import Ending, JobOutcome, describe, failure_message
from airflow_distributed.jobstate.verdicts import JobVerdict

NOTE = "every other replica was stopped"


@dataclass(frozen=True)
class Case:
    name: str
    outcome: JobOutcome
    expected: str


CASES = [
    Case("a replica exited", JobOutcome(Ending.EXITED, replica="j-worker-1", exit_code=3, tail=("a", "boom")),
         f"job ns/j failed after 12.3s: replica j-worker-1 exited with code 3; {NOTE}. Its last lines:\n"
         "    a\n    boom"),
    Case("exited without a line", JobOutcome(Ending.EXITED, replica="j-master-0", exit_code=-9),
         f"job ns/j failed after 12.3s: replica j-master-0 exited with code -9; {NOTE}. Its last lines:\n"
         "    (no output)"),
    Case("killed by the kernel", JobOutcome(Ending.EXITED, replica="j-worker-1", exit_code=137, reason="OOMKilled"),
         f"job ns/j failed after 12.3s: replica j-worker-1 exited with code 137 (OOMKilled); {NOTE}. "
         "Its last lines:\n    (no output)"),
    Case("its readiness step exited", JobOutcome(Ending.EXITED, replica="j-worker-1", exit_code=1,
                                                 reason="Error", container="wait-for-peers"),
         f"job ns/j failed after 12.3s: replica j-worker-1 exited with code 1 (container wait-for-peers); {NOTE}. "
         "Its last lines:\n    (no output)"),
    Case("its pod failed", JobOutcome(Ending.POD_FAILED, replica="j-worker-0", reason="Evicted",
                                      message="low on memory"),
         f"job ns/j failed after 12.3s: the pod of replica j-worker-0 failed: Evicted: low on memory; {NOTE}"),
    Case("its pod was deleted", JobOutcome(Ending.DELETED, replica="j-worker-0"),
         f"job ns/j failed after 12.3s: the pod of replica j-worker-0 was deleted; {NOTE}"),
    Case("the job was deleted", JobOutcome(Ending.DELETED),
         f"job ns/j failed after 12.3s: the job was deleted before it finished; {NOTE}"),
    Case("image pull failed", JobOutcome(Ending.IMAGE, replica="j-worker-1", reason="ErrImagePull",
                                         message="not found", image="reg/t:1"),
         f'job ns/j failed after 12.3s: replica j-worker-1: image "reg/t:1" could not be pulled '
         f"(ErrImagePull: not found); {NOTE}"),
    Case("invalid image", JobOutcome(Ending.IMAGE, replica="j-worker-1", reason="InvalidImageName", image="Reg//"),
         f'job ns/j failed after 12.3s: replica j-worker-1: image "Reg//" is not a valid image name '
         f"(InvalidImageName); {NOTE}"),
    Case("did not start", JobOutcome(Ending.NOT_STARTED, replica="j-worker-1", reason="Unschedulable",
                                     message="0/3 nodes", events=("Warning FailedScheduling: 0/3 nodes",)),
         f"job ns/j failed after 12.3s: replica j-worker-1 did not start within 60s: Unschedulable: 0/3 nodes; "
         f"{NOTE}\n  events:\n    Warning FailedScheduling: 0/3 nodes"),
    Case("stopped", JobOutcome(Ending.STOPPED),
         f"job ns/j was stopped after 12.3s (task killed); {NOTE}"),
    Case("timed out in the triggerer", JobOutcome(Ending.TIMED_OUT, message="the pods reached the execution_timeout"),
         f"job ns/j failed after 12.3s: the pods reached the execution_timeout; {NOTE}"),
    Case("timed out locally", JobOutcome(Ending.TIMED_OUT),
         f"job ns/j failed after 12.3s: the job timed out; {NOTE}"),
    Case("not scheduled", JobOutcome(Ending.QUEUED, replica="j-worker-1", reason="Unschedulable", message="0/3"),
         f"job ns/j failed after 12.3s: replica j-worker-1 was not scheduled: Unschedulable: 0/3; {NOTE}"),
    Case("hung", JobOutcome(Ending.HUNG, message="the job hung: no progress for 30s", logs={"j-master-0": ("x",)}),
         f"job ns/j failed after 12.3s: the job hung: no progress for 30s; {NOTE}\n  j-master-0, last lines:\n    x"),
    Case("elastic gave up after an exit", JobOutcome(Ending.GAVE_UP, replica="j-worker-0", exit_code=-9,
                                                     reason="replica j-worker-0 was killed after 1 restart",
                                                     tail=("step 3",)),
         f"job ns/j failed after 12.3s: replica j-worker-0 was killed after 1 restart; {NOTE}. Its last lines:\n"
         "    step 3"),
    Case("elastic gave up after a lost pod", JobOutcome(Ending.GAVE_UP, replica="j-worker-0",
                                                        reason="2 workers left, below min_workers=3"),
         f"job ns/j failed after 12.3s: 2 workers left, below min_workers=3; {NOTE}"),
    Case("the controller said failed", JobOutcome(Ending.FAILED, judgement="JobFailed: 1 replica(s) failed."),
         f"job ns/j failed after 12.3s: JobFailed: 1 replica(s) failed.; {NOTE}"),
    Case("the controller named a replica", JobOutcome(Ending.EXITED, replica="j-node-0-1", exit_code=137,
                                                      reason="OOMKilled", judgement="FailedJobs: node failed",
                                                      tail=("killed",)),
         f"job ns/j failed after 12.3s: FailedJobs: node failed; replica j-node-0-1 exited with code 137 "
         f"(OOMKilled); {NOTE}. Its last lines:\n    killed"),
    Case("the waiter could not watch", JobOutcome(Ending.FAILED, message="403 Forbidden"),
         f"job ns/j failed after 12.3s: 403 Forbidden; {NOTE}"),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_ending_reads_the_same_on_every_backend(case):
    assert failure_message("ns/j", case.outcome, 12.34, NOTE, startup_timeout=60) == case.expected


def test_every_ending_has_a_case():
    assert {case.outcome.ending for case in CASES} == set(Ending) - {Ending.SUCCEEDED}


def test_only_the_last_fifteen_lines_are_quoted():
    outcome = JobOutcome(Ending.EXITED, replica="r", exit_code=1, tail=tuple(f"line {i}" for i in range(40)))
    quoted = failure_message("j", outcome, 1.0, NOTE).split("Its last lines:\n")[1].splitlines()
    assert quoted == [f"    line {i}" for i in range(25, 40)]


def test_a_verdict_reads_as_its_outcome():
    verdict = JobVerdict("failed", "j-worker-1", "exit", 137, "OOMKilled", None, "base")
    outcome = verdict.outcome(tail=("x",))
    assert (outcome.ending, outcome.replica, outcome.exit_code, outcome.reason, outcome.tail) == (
        "exit", "j-worker-1", 137, "OOMKilled", ("x",))
    assert verdict.describe() == describe(outcome) == "replica j-worker-1 exited with code 137 (OOMKilled)"
    assert JobVerdict("succeeded", "j-master-0").outcome().succeeded


def test_an_unknown_ending_is_refused():
    with pytest.raises(ValueError, match="'crashed' is not one of succeeded, exit"):
        JobOutcome("crashed")
