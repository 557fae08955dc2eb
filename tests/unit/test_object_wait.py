"""The one judge of the Kubeflow and TrainJob waits (``jobstate.object_wait``), pure: the same sequence of what a wait
sees (the job object's events, the pods' LISTs, the hang watchdog's looks) fed to the task's synchronous wait's state
and to the trigger's ends the same way, in one decision order (stopped, deleted, the controller's judgement, the
pending pods' verdict, hung); and the trigger's event reads back, as ``KubeflowJobRun.complete`` reads it, to the
synchronous wait's ``JobOutcome``.

The case the two waits once disagreed on: a replica seen pending with an image that cannot be pulled while the hang
watchdog's clock has run out (the synchronous wait said ``image``, the trigger ``hung``): both say ``image`` now."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_distributed.jobstate.hang_watch import MasterLogWatch, hung_verdict
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.object_wait import judge_object_wait, status_outcome
from airflow_distributed.jobstate.object_watch import ObjectWatch
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.jobstate.pending_pods import IMAGE_PULL_FAILED, JOB_HUNG, QUEUE_TIMED_OUT, PendingPods
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.manifests.kubeflow_status import KUBEFLOW_KIND, expected_pods, job_suspended
from airflow_distributed.triggers.hang_watchdog import TriggerHangWatchdog
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger

NAME, NAMESPACE, TIMEOUT = "train-1", "ml", 60.0
MASTER, WORKER = f"{NAME}-master-0", f"{NAME}-worker-0"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def job(state: str = "Running", *, suspend: bool = False) -> dict[str, Any]:
    conditions = [{"type": state, "status": "True", "reason": f"PyTorchJob{state}", "message": f"job is {state}"}]
    spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}}
    if suspend:
        spec["runPolicy"] = {"suspend": True}
        conditions.append({"type": "Suspended", "status": "True", "lastTransitionTime": "2026-11-27T19:00:00Z"})
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "7"},
            "spec": spec, "status": {"conditions": conditions}}


def pod(name: str, *, running: bool = True, waiting: str = "ContainerCreating") -> dict[str, Any]:
    state = {"running": {"startedAt": "2026-11-27T19:00:00Z"}} if running else {
        "waiting": {"reason": waiting, "message": "couldn't parse image reference"}}
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
            "status": {"phase": "Running" if running else "Pending",
                       "containerStatuses": [{"name": "pytorch", "image": "trainer:1", "state": state}]}}


# ---------------------------------------------------------------------------------- the two drivers' states


@dataclass
class Wait:
    """What one wait keeps: the object's watch, the paced pod LISTs and the hang watchdog, on the test's clock."""

    clock: Clock
    watch: ObjectWatch = field(default_factory=lambda: ObjectWatch(NAME))
    pending: PendingPods = field(init=False)
    stopped: bool = False

    def __post_init__(self) -> None:
        self.pending = PendingPods(10.0, 0.0, self.clock, job_suspended, queue_timeout=30.0)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        self.watch.on_line(json.dumps({"type": kind, "object": obj}))

    def pods(self, pods: list[dict[str, Any]]) -> None:
        if self.pending.due_for(self.watch.obj):
            self.pending.on_pods(pods, expected_pods(self.watch.obj))

    def look(self, running: bool) -> None:
        raise NotImplementedError

    def hung(self) -> JobVerdict | None:
        raise NotImplementedError

    def judged(self):
        return judge_object_wait(self.watch, KUBEFLOW_KIND.status_of, self.pending.verdict, self.hung(),
                                 stopped=self.stopped)

    def ending(self) -> JobOutcome | None:
        raise NotImplementedError


@dataclass
class SyncWait(Wait):
    """``wait_for_kubeflow_job``'s: a ``MasterLogWatch`` it looks with itself; ends as a ``JobOutcome``."""

    hang: MasterLogWatch = field(init=False)
    master: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.hang = MasterLogWatch(TIMEOUT, self.clock())

    def look(self, running: bool) -> None:
        self.hang.observe([], running, self.clock())  # the master printed nothing new
        self.master[:] = [MASTER]

    def hung(self) -> JobVerdict | None:
        return hung_verdict(self.hang, self.master[-1] if self.master else None, lambda: True, self.clock())

    def ending(self) -> JobOutcome | None:
        end = self.judged()
        return None if end is None else end.outcome()


@dataclass
class TriggerWait(Wait):
    """``KubeflowJobTrigger``'s: a ``TriggerHangWatchdog`` on the same clock; ends as its event, read back as the
    resumed task reads it (``KubeflowJobRun.complete``)."""

    hang: TriggerHangWatchdog = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()

        async def nothing() -> Any:
            raise AssertionError("no I/O here")

        self.hang = TriggerHangWatchdog(TIMEOUT, NAMESPACE, nothing, nothing, nothing, None, clock=self.clock)
        self.trigger = KubeflowJobTrigger(job_name=NAME, namespace=NAMESPACE, group="kubeflow.org", version="v1",
                                          plural="pytorchjobs", execution_deadline=self.clock.now + 3600)

    def look(self, running: bool) -> None:
        self.hang.master = MASTER  # as ``TriggerHangWatchdog.check`` finds it, then observes the (no) new lines
        self.hang.watch.observe([], running, self.clock())

    def hung(self) -> JobVerdict | None:
        return self.hang.verdict()

    def ending(self) -> JobOutcome | None:
        end = self.judged()
        if end is None:
            return None
        return read_back(self.trigger._ending(end).to_payload(), self.watch.obj)


def read_back(event: dict[str, Any], obj: dict[str, Any] | None) -> JobOutcome:
    """``KubeflowJobRun.complete``'s reading of an event's payload (the object as its GET finds it: ``obj``)."""
    fired = JobEvent.from_payload(event)
    if fired.kind == EventKind.FAILED and fired.reason in (IMAGE_PULL_FAILED, QUEUE_TIMED_OUT, JOB_HUNG):
        assert fired.verdict is not None
        return fired.verdict.outcome(job_object=obj)
    if fired.ended:
        assert obj is not None
        return status_outcome(KUBEFLOW_KIND.status_of(obj), obj)
    assert fired.kind == EventKind.DELETED, event
    return JobOutcome(Ending.DELETED)


Step = Callable[[Wait], None]


def run(steps: list[Step]) -> tuple[JobOutcome | None, JobOutcome | None]:
    """The same steps, on a clock of their own each, to both waits: what each says at the end."""
    found = []
    for wait in (SyncWait(Clock()), TriggerWait(Clock())):
        for step in steps:
            step(wait)
        found.append(wait.ending())
    return found[0], found[1]


def later(seconds: float) -> Step:
    def step(wait: Wait) -> None:
        wait.clock.now += seconds
    return step


# ---------------------------------------------------------------------------------- the sequences

#: The master and the worker run; the master goes quiet (a collective that never returns) and the hang watchdog's
#: clock runs out; meanwhile the worker was taken away and its new pod cannot pull its image.
PENDING_AND_HUNG: list[Step] = [
    lambda w: w.event("ADDED", job()),
    lambda w: w.pods([pod(MASTER)]),  # the worker's pod not made yet: the LISTs go on
    lambda w: w.look(True),  # the hang watchdog's LIST (its own) sees both running: its clock runs
    later(TIMEOUT + 1),
    lambda w: w.look(True),  # quiet past progress_timeout: hung
    lambda w: w.pods([pod(MASTER), pod(WORKER, running=False, waiting="InvalidImageName")]),
]


def test_a_pending_pod_and_a_hung_clock_at_once_end_both_waits_with_the_pending_verdict():
    sync, trigger = run(PENDING_AND_HUNG)
    assert sync == trigger, (sync, trigger)
    assert sync is not None and (sync.ending, sync.replica, sync.reason) == (Ending.IMAGE, WORKER, "InvalidImageName")


@pytest.mark.parametrize(("steps", "expected"), [
    pytest.param(PENDING_AND_HUNG[:-1], (Ending.HUNG, MASTER, None), id="hung-alone"),
    pytest.param([*PENDING_AND_HUNG[:2], later(10),
                  lambda w: w.pods([pod(MASTER), pod(WORKER, running=False, waiting="InvalidImageName")])],
                 (Ending.IMAGE, WORKER, "InvalidImageName"), id="pending-alone"),
    pytest.param([*PENDING_AND_HUNG, lambda w: w.event("MODIFIED", job("Succeeded"))],
                 (Ending.SUCCEEDED, None, None), id="the-controllers-word-first"),
    pytest.param([*PENDING_AND_HUNG, lambda w: w.event("MODIFIED", job("Failed"))],
                 (Ending.FAILED, None, None), id="failed-by-its-controller"),
    pytest.param([*PENDING_AND_HUNG, lambda w: w.event("DELETED", job())], (Ending.DELETED, None, None),
                 id="deleted"),
    pytest.param([lambda w: w.event("ADDED", job(suspend=True)), lambda w: w.pods([]), later(31),
                  lambda w: w.pods([])], (Ending.QUEUED, None, "Suspended"), id="queued-past-queue_timeout"),
])
def test_each_end_is_the_same_for_both_waits(steps: list[Step], expected: tuple[str, str | None, str | None]):
    sync, trigger = run(steps)
    assert sync == trigger, (sync, trigger)
    assert sync is not None and (sync.ending, sync.replica, sync.reason) == expected


def test_a_wait_that_saw_nothing_decisive_goes_on_and_the_trigger_times_out():
    sync, trigger = run(PENDING_AND_HUNG[:3])
    assert sync is None and trigger is None
    wait = TriggerWait(Clock())
    assert wait.trigger._ending(None).to_payload()["status"] == "timeout"


def test_a_stopped_wait_ends_stopped_before_anything_else():
    wait = SyncWait(Clock())
    for step in PENDING_AND_HUNG:
        step(wait)
    wait.stopped = True
    found = wait.ending()
    assert found is not None and found.ending == Ending.STOPPED
    end = wait.judged()
    assert end is not None
    with pytest.raises(ValueError, match="a stopped wait has no trigger event"):
        end.event("pytorchjobs ml/train-1")


def test_the_triggers_events_keep_their_words():
    """The events' fields, as ``execute_complete``, the sensors and the resume read them."""
    wait = TriggerWait(Clock())
    for step in PENDING_AND_HUNG:
        step(wait)
    end = wait.judged()
    assert end is not None
    event = wait.trigger._ending(end).to_payload()
    assert (event["status"], event["reason"]) == ("failed", IMAGE_PULL_FAILED)
    assert event["message"] == JobVerdict.from_dict(event["verdict"]).describe()
    hung = TriggerWait(Clock())
    for step in PENDING_AND_HUNG[:-1]:
        step(hung)
    end = hung.judged()
    assert end is not None and end.verdict is not None
    event = hung.trigger._ending(end).to_payload()
    assert (event["status"], event["reason"], event["message"]) == ("failed", JOB_HUNG, end.verdict.message)
    gone = TriggerWait(Clock())
    gone.event("ADDED", job())
    gone.event("DELETED", job())
    end = gone.judged()
    assert end is not None
    assert gone.trigger._ending(end).to_payload() == {
        "status": "deleted", "message": "pytorchjobs ml/train-1 was deleted before it finished"}
