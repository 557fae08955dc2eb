"""Which error each ending raises (``jobstate.failures``), with the facts it carries, and how the cluster's taking a
pod away is recognised (``jobstate.disruption.pod_disruption``)."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass

import pytest

from airflow_distributed import exceptions as errors
from airflow_distributed.backends.base import DistributedJobError as FromBackends
from airflow_distributed.exceptions import (
    ApiUnavailableError,
    ClusterRefusedError,
    DistributedJobError,
    ImagePullError,
    KubernetesJobError,
    ReplicaExitedError,
    ReplicaLostError,
    ReplicaNotStartedError,
    ReplicaOOMKilledError,
    api_error_class,
    error_class_named,
)
from airflow_distributed.hooks.api_retry import KubernetesJobError as FromApiRetry
from airflow_distributed.hooks.api_retry import job_error
from airflow_distributed.jobstate.disruption import pod_disruption
from airflow_distributed.jobstate.failures import FAILURE_CLASSES, job_failure
from airflow_distributed.jobstate.job_watch import JobTracker
from airflow_distributed.jobstate.outcome import Ending, JobOutcome, failure_message
from airflow_distributed.jobstate.verdicts import ReplicaSlot

NOTE = "every other replica was stopped"


@dataclass(frozen=True)
class Case:
    name: str
    outcome: JobOutcome
    expected: type[DistributedJobError]


CASES = [
    Case("a script exited 2", JobOutcome(Ending.EXITED, replica="j-worker-1", exit_code=2, tail=("boom",)),
         ReplicaExitedError),
    Case("killed by the kernel", JobOutcome(Ending.EXITED, replica="j-worker-1", exit_code=137, reason="OOMKilled"),
         ReplicaOOMKilledError),
    Case("its pod failed for memory", JobOutcome(Ending.POD_FAILED, replica="j-worker-1", reason="OOMKilled"),
         ReplicaOOMKilledError),
    Case("killed as its pod was evicted", JobOutcome(Ending.EXITED, replica="j-worker-1", exit_code=143,
                                                     reason="Error", disruption="EvictionByEvictionAPI"),
         ReplicaLostError),
    Case("its pod evicted by the kubelet", JobOutcome(Ending.POD_FAILED, replica="j-worker-0", reason="Evicted",
                                                      message="low on memory", disruption="Evicted"),
         ReplicaLostError),
    Case("its pod failed otherwise", JobOutcome(Ending.POD_FAILED, replica="j-worker-0", reason="DeadlineExceeded"),
         DistributedJobError),
    Case("its pod preempted and deleted", JobOutcome(Ending.DELETED, replica="j-worker-0",
                                                     disruption="PreemptionByScheduler"), ReplicaLostError),
    Case("its pod deleted", JobOutcome(Ending.DELETED, replica="j-worker-0"), ReplicaLostError),
    Case("the job deleted", JobOutcome(Ending.DELETED), DistributedJobError),
    Case("image pull failed", JobOutcome(Ending.IMAGE, replica="j-worker-1", reason="ErrImagePull",
                                         message="not found", image="reg/t:1"), ImagePullError),
    Case("did not start", JobOutcome(Ending.NOT_STARTED, replica="j-worker-1", reason="Unschedulable",
                                     message="0/3 nodes"), ReplicaNotStartedError),
    Case("stopped", JobOutcome(Ending.STOPPED), DistributedJobError),
    Case("timed out", JobOutcome(Ending.TIMED_OUT), DistributedJobError),
    Case("an elastic job gave up", JobOutcome(Ending.GAVE_UP, replica="j-worker-0", exit_code=1,
                                              reason="no restarts left"), DistributedJobError),
    Case("a controller said failed", JobOutcome(Ending.FAILED, judgement="BackoffLimitExceeded"),
         DistributedJobError),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_each_ending_raises_its_class_with_its_facts_and_the_same_message(case: Case) -> None:
    error = job_failure("ns/j", case.outcome, 12.34, NOTE, startup_timeout=60)

    assert type(error) is case.expected
    assert isinstance(error, DistributedJobError)
    assert str(error) == failure_message("ns/j", case.outcome, 12.34, NOTE, startup_timeout=60)
    facts = (error.ending, error.replica, error.reason, error.detail, error.exit_code, error.image, error.disruption)
    outcome = case.outcome
    assert facts == (outcome.ending, outcome.replica, outcome.reason, outcome.message, outcome.exit_code,
                     outcome.image, outcome.disruption)


def test_every_ending_but_success_is_in_the_table() -> None:
    assert set(FAILURE_CLASSES) == set(Ending) - {Ending.SUCCEEDED}


def test_a_class_named_by_a_trigger_stands_in_for_an_ending_that_names_none() -> None:
    outcome = JobOutcome(Ending.FAILED, message="pods of ns/j: 403 Forbidden")
    error = job_failure("ns/j", outcome, 1.0, NOTE, default=ClusterRefusedError)
    assert type(error) is ClusterRefusedError and isinstance(error, KubernetesJobError)
    assert str(error) == failure_message("ns/j", outcome, 1.0, NOTE)
    # An ending with a class of its own keeps it.
    exited = JobOutcome(Ending.EXITED, replica="j-master-0", exit_code=2)
    assert type(job_failure("ns/j", exited, 1.0, NOTE, default=ClusterRefusedError)) is ReplicaExitedError


@pytest.mark.parametrize("name", ["ClusterRefusedError", "ApiUnavailableError", "ReplicaLostError"])
def test_an_event_names_only_the_classes_of_the_module(name: str) -> None:
    assert error_class_named(name) is getattr(errors, name)


@pytest.mark.parametrize("name", ["KubernetesJobError", "api_error_class", "REFUSED_STATUSES", "ValueError",
                                  "__builtins__", None, 3])
def test_anything_else_an_event_names_is_no_class(name: object) -> None:
    assert error_class_named(name) is None


def test_the_errors_are_importable_where_they_were() -> None:
    assert FromBackends is DistributedJobError
    assert FromApiRetry is KubernetesJobError


@pytest.mark.parametrize("case", CASES[:3], ids=lambda case: case.name)
def test_an_error_built_from_its_message_alone_or_copied_or_pickled_keeps_what_it_has(case: Case) -> None:
    error = job_failure("ns/j", case.outcome, 1.0, NOTE)
    for again in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(again) is type(error) and str(again) == str(error)
        assert (again.replica, again.exit_code, again.reason) == (error.replica, error.exit_code, error.reason)
    # Airflow's own ``serialize()`` keeps the message only: the class must take it alone.
    path, args, kwargs = error.serialize()
    assert path.rsplit(".", 1)[1] == type(error).__name__
    assert str(type(error)(*args, **kwargs)) == str(error)


@pytest.mark.parametrize(("status", "unavailable", "expected"), [
    (401, False, ClusterRefusedError), (403, True, ClusterRefusedError), (422, False, ClusterRefusedError),
    (400, False, ClusterRefusedError), (503, True, ApiUnavailableError), (None, True, ApiUnavailableError),
    (404, False, KubernetesJobError), (409, False, KubernetesJobError), (None, False, KubernetesJobError),
])
def test_api_failures_that_end_a_job(status, unavailable, expected) -> None:
    assert api_error_class(status, unavailable=unavailable) is expected


class ApiException(Exception):
    """The shape of the clients' ``ApiException`` that ``api_status`` reads."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status, self.reason, self.body, self.headers = status, "Reason", "", {}


@pytest.mark.parametrize(("status", "expected"), [(403, ClusterRefusedError), (422, ClusterRefusedError),
                                                  (503, ApiUnavailableError), (429, ApiUnavailableError),
                                                  (404, KubernetesJobError)])
def test_a_hook_call_that_failed_for_good_raises_by_its_status(status, expected) -> None:
    error = job_error("creating pod ns/p", ApiException(status))
    assert type(error) is expected and error.status == status
    assert str(error).startswith(f"creating pod ns/p: {status} Reason")
    assert isinstance(error, DistributedJobError) == (expected is not KubernetesJobError)


# ---------------------------------------------------------------------------------------------- the cluster's hand


def pod(name: str, *, conditions=(), reason: str | None = None, phase: str = "Running", exit_code: int | None = None):
    status: dict = {"phase": phase, "conditions": list(conditions)}
    if reason:
        status["reason"] = reason
    state = {"running": {}} if exit_code is None else {"terminated": {"exitCode": exit_code, "reason": "Error",
                                                                      "finishedAt": "2026-01-01T00:00:05Z"}}
    status["containerStatuses"] = [{"name": "base", "state": state}]
    return {"metadata": {"name": name}, "status": status}


DISRUPTED = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting"}


@pytest.mark.parametrize(("given", "expected"), [
    (pod("p", conditions=[DISRUPTED]), "EvictionByEvictionAPI"),
    (pod("p", conditions=[{**DISRUPTED, "reason": "PreemptionByScheduler"}]), "PreemptionByScheduler"),
    (pod("p", conditions=[{**DISRUPTED, "reason": "DeletionByTaintManager"}]), "DeletionByTaintManager"),
    (pod("p", conditions=[{**DISRUPTED, "status": "False"}]), None),
    (pod("p", phase="Failed", reason="Evicted"), "Evicted"),
    (pod("p", phase="Failed", reason="Preempting"), "Preempting"),
    (pod("p", phase="Failed", reason="NodeLost"), "NodeLost"),
    (pod("p", phase="Failed", reason="DeadlineExceeded"), None),
    (pod("p"), None),
    (None, None),
])
def test_pod_disruption(given, expected) -> None:
    assert pod_disruption(given) == expected


SLOTS = (ReplicaSlot("j-master-0", "master", 0, True), ReplicaSlot("j-worker-0", "worker", 0))


def tracker_with_running_pods() -> JobTracker:
    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0)
    tracker.reset([pod("j-master-0"), pod("j-worker-0")])
    return tracker


def test_a_pod_deleted_after_the_cluster_marked_it_is_lost_to_a_disruption() -> None:
    tracker = tracker_with_running_pods()
    tracker.apply("MODIFIED", pod("j-worker-0", conditions=[DISRUPTED]))
    tracker.apply("DELETED", pod("j-worker-0", conditions=[DISRUPTED]))

    verdict = tracker.verdict(now=1)
    assert verdict is not None and (verdict.cause, verdict.replica) == ("deleted", "j-worker-0")
    assert verdict.disruption == "EvictionByEvictionAPI"
    # The trigger's event carries it to the resumed task, which then raises the same class.
    again = type(verdict).from_dict(verdict.as_dict())
    assert type(job_failure("ns/j", again.outcome(), 1.0, NOTE)) is ReplicaLostError


def test_a_container_killed_as_its_pod_is_evicted_is_lost_not_a_script_error() -> None:
    tracker = tracker_with_running_pods()
    tracker.apply("MODIFIED", pod("j-worker-0", conditions=[DISRUPTED], exit_code=143))

    verdict = tracker.verdict(now=1)
    assert verdict is not None and (verdict.cause, verdict.exit_code) == ("exit", 143)
    assert type(job_failure("ns/j", verdict.outcome(), 1.0, NOTE)) is ReplicaLostError


def test_a_script_error_is_a_script_error_and_a_verdict_without_disruption_keeps_its_old_shape() -> None:
    tracker = tracker_with_running_pods()
    tracker.apply("MODIFIED", pod("j-worker-0", exit_code=2))

    verdict = tracker.verdict(now=1)
    assert verdict is not None and "disruption" not in verdict.as_dict()
    assert type(job_failure("ns/j", verdict.outcome(), 1.0, NOTE)) is ReplicaExitedError


def test_a_recreated_pod_that_nobody_disrupts_is_no_longer_marked() -> None:
    tracker = tracker_with_running_pods()
    tracker.apply("MODIFIED", pod("j-worker-0", conditions=[DISRUPTED]))
    tracker.apply("MODIFIED", pod("j-worker-0"))
    assert tracker.disruption("j-worker-0") is None


# ---------------------------------------------------------------------------------------------- a hung job


def test_a_hung_job_is_a_job_hung_error_quoting_every_replicas_last_lines() -> None:
    outcome = JobOutcome(Ending.HUNG, message="the job hung: no progress for 30s",
                         logs={"j-master-0": ("step 1", 'File "t.py", line 9 in block'), "j-worker-0": ()})
    error = job_failure("ns/j", outcome, 31.0, "every replica was stopped")
    assert type(error) is errors.JobHungError
    assert str(error) == ("job ns/j failed after 31.0s: the job hung: no progress for 30s; every replica was stopped"
                          "\n  j-master-0, last lines:\n    step 1\n    File \"t.py\", line 9 in block"
                          "\n  j-worker-0, last lines:\n    (no output)")


# ---------------------------------------------------------------------------------------------- queue and start


def unschedulable(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}]}}


def bound(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": "n1"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True"}], "containerStatuses": [
        {"name": "base", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}


def test_waiting_for_capacity_counts_against_the_queue_limit_and_startup_from_scheduling() -> None:
    tracker = JobTracker(SLOTS, startup_timeout=30, started_at=0, queue_timeout=600)
    tracker.reset([unschedulable("j-master-0"), unschedulable("j-worker-0")])
    assert tracker.verdict(now=90) is None  # 90 s unschedulable: past startup_timeout, within queue_timeout
    assert tracker.startup_deadline == 600
    tracker.reset([bound("j-master-0"), bound("j-worker-0")])
    assert tracker.verdict(now=95) is None and tracker.scheduled_at == 95
    assert tracker.startup_deadline == 125
    verdict = tracker.verdict(now=125)
    assert verdict is not None and verdict.cause == "startup"


def test_past_the_queue_limit_is_not_scheduled_naming_the_schedulers_reason() -> None:
    tracker = JobTracker(SLOTS, startup_timeout=30, started_at=0, queue_timeout=600)
    tracker.reset([bound("j-master-0"), unschedulable("j-worker-0")])
    assert tracker.verdict(now=599) is None
    verdict = tracker.verdict(now=600)
    assert verdict is not None
    assert (verdict.cause, verdict.replica, verdict.reason, verdict.message) == (
        "queue", "j-worker-0", "Unschedulable", "0/3 nodes")
    error = job_failure("ns/j", verdict.outcome(), 600.0, NOTE, startup_timeout=30, queue_timeout=600)
    assert type(error) is errors.ReplicaNotScheduledError and isinstance(error, ReplicaNotStartedError)
    assert str(error) == (f"job ns/j failed after 600.0s: replica j-worker-0 was not scheduled within 600s "
                          f"(queue_timeout): Unschedulable: 0/3 nodes; {NOTE}")


def test_without_a_queue_limit_startup_covers_the_wait_for_scheduling_as_before() -> None:
    tracker = JobTracker(SLOTS, startup_timeout=30, started_at=0)
    tracker.reset([unschedulable("j-master-0"), bound("j-worker-0")])
    verdict = tracker.verdict(now=30)
    assert verdict is not None and (verdict.cause, verdict.reason) == ("startup", "Unschedulable")
