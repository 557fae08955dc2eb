"""Lost is lost: a replica whose pod the cluster is taking away (being deleted or evicted, marked for disruption, its
node lost) is ``ReplicaLostError`` whatever exit code its container died with, and the message says what took it,
through every verdict that reads pods: the ``kubernetes`` tracker (the whole pod in the task, ``pod_essentials`` in
the triggerer) and the Kubeflow and TrainJob one (``jobstate.kubeflow_pods.failed_replica``).

The pods are shaped as a 1.20 API server returns them (what ``tests/kube_control_plane`` reads back): a graceful
deletion or an Eviction API eviction sets ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` and nothing else
(1.20 has no ``DisruptionTarget`` condition), the kubelet then reports the container's exit (143 after SIGTERM);
the kubelet's own eviction leaves the pod ``Failed`` with reason ``Evicted``; 1.26 and later add the condition.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_distributed.exceptions import ReplicaExitedError, ReplicaLostError, ReplicaOOMKilledError
from airflow_distributed.jobstate.disruption import TakenAway
from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.job_watch import JobTracker
from airflow_distributed.jobstate.kubeflow_pods import failed_replica, lost_replica
from airflow_distributed.jobstate.pod_state import pod_essentials
from airflow_distributed.jobstate.verdicts import JobVerdict, ReplicaSlot

NOTE = "every other replica was stopped"
MASTER, WORKER = "j-master-0", "j-worker-0"
SLOTS = (ReplicaSlot(MASTER, "master", 0, True), ReplicaSlot(WORKER, "worker", 0))


def running(name: str) -> dict[str, Any]:
    """A pod as the 1.20 API server returns it once the kubelet runs it (the fields the verdicts could read)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1042",
                     "creationTimestamp": "2026-11-27T09:30:00Z", "labels": {"airflow-distributed/job": "j"}},
        "spec": {"nodeName": "node-1", "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "base", "image": "reg/train:1"}]},
        "status": {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": "10.244.0.2", "qosClass": "BestEffort",
            "startTime": "2026-11-27T09:30:01Z",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-27T09:30:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-27T09:30:02Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-27T09:30:02Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-27T09:30:00Z"}],
            "containerStatuses": [{"name": "base", "ready": True, "restartCount": 0, "started": True,
                                   "image": "reg/train:1", "imageID": "", "containerID": "containerd://1",
                                   "state": {"running": {"startedAt": "2026-11-27T09:30:02Z"}}}],
        },
    }


def deletion_started(pod: dict[str, Any]) -> dict[str, Any]:
    """What ``kubectl delete pod`` and an Eviction API eviction (``kubectl drain``) both do to it on 1.20."""
    pod = copy.deepcopy(pod)
    pod["metadata"].update(deletionTimestamp="2026-11-27T09:31:40Z", deletionGracePeriodSeconds=30)
    return pod


def exited(pod: dict[str, Any], code: int, reason: str = "Error", at: str = "2026-11-27T09:31:11Z",
           phase: str = "Failed") -> dict[str, Any]:
    """The kubelet's report of its container's exit."""
    pod = copy.deepcopy(pod)
    status = pod["status"]
    status["phase"] = phase
    for condition in status["conditions"]:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition.update(status="False", reason="ContainersNotReady",
                             message="containers with unready status: [base]")
    entry = status["containerStatuses"][0]
    entry.update(ready=False, started=False, state={"terminated": {
        "exitCode": code, "reason": reason, "startedAt": "2026-11-27T09:30:02Z", "finishedAt": at,
        "containerID": "containerd://1"}})
    return pod


def marked(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """The ``DisruptionTarget`` condition a 1.26 or later server (or its controllers) adds before taking it."""
    pod = copy.deepcopy(pod)
    pod["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": reason,
                                        "message": message, "lastTransitionTime": "2026-11-27T09:31:10Z"})
    return pod


def evicted_by_kubelet(pod: dict[str, Any]) -> dict[str, Any]:
    """The kubelet's node-pressure eviction: the container killed (137), the pod ``Failed``, reason ``Evicted``."""
    pod = exited(pod, 137)
    pod["status"].update(reason="Evicted", message="The node was low on resource: memory. Container base was "
                                                   "using 3125Mi, which exceeds its request of 0. ")
    return pod


@dataclass(frozen=True)
class Case:
    name: str
    #: the worker's pod as each event shows it, in order (the master runs on)
    worker: tuple[dict[str, Any], ...]
    expected: type[Exception]
    #: what the message says of the worker
    says: str
    #: what it must not say
    never: tuple[str, ...] = field(default=())


WORKER_RUNNING = running(WORKER)
CASES = [
    Case("deleted (kubectl delete pod), its container then exits 143 after SIGTERM",
         (deletion_started(WORKER_RUNNING), exited(deletion_started(WORKER_RUNNING), 143)),
         ReplicaLostError, f"replica {WORKER} was deleted or evicted and exited with code 143"),
    Case("evicted through the 1.20 Eviction API (no DisruptionTarget), killed with 137 at the end of its grace",
         (deletion_started(WORKER_RUNNING), exited(deletion_started(WORKER_RUNNING), 137)),
         ReplicaLostError, f"replica {WORKER} was deleted or evicted and exited with code 137"),
    Case("deleted, and only its removal seen (its exit never reported)",
         (deletion_started(WORKER_RUNNING),),
         ReplicaLostError, f"the pod of replica {WORKER} was deleted or evicted"),
    Case("evicted by its kubelet for node pressure",
         (evicted_by_kubelet(WORKER_RUNNING),),
         ReplicaLostError, f"replica {WORKER} was evicted by its node (resource pressure) (Evicted) and exited "
                           "with code 137", never=(f"replica {WORKER} exited with code 137",)),
    Case("evicted through a 1.26 Eviction API (DisruptionTarget)",
         (marked(deletion_started(WORKER_RUNNING), "EvictionByEvictionAPI", "Eviction API: evicting"),
          exited(marked(deletion_started(WORKER_RUNNING), "EvictionByEvictionAPI", "Eviction API: evicting"), 143)),
         ReplicaLostError, f"replica {WORKER} was evicted (EvictionByEvictionAPI) and exited with code 143"),
    Case("preempted by the scheduler (1.26)",
         (exited(marked(deletion_started(WORKER_RUNNING), "PreemptionByKubeScheduler",
                        "Kubernetes default scheduler: preempting to accommodate a higher priority pod"), 143),),
         ReplicaLostError, f"replica {WORKER} was preempted (PreemptionByKubeScheduler) and exited with code 143"),
    Case("its node lost: deleted by the taint manager (1.26)",
         (exited(marked(deletion_started(WORKER_RUNNING), "DeletionByTaintManager",
                        "Taint manager: deleting due to NoExecute taint"), 137),),
         ReplicaLostError,
         f"replica {WORKER} was lost with its node (DeletionByTaintManager) and exited with code 137"),
    Case("a script's own error, nobody deleting it",
         (exited(WORKER_RUNNING, 3),),
         ReplicaExitedError, f"replica {WORKER} exited with code 3", never=("evicted", "deleted")),
    Case("killed for its memory, nobody deleting it",
         (exited(WORKER_RUNNING, 137, reason="OOMKilled"),),
         ReplicaOOMKilledError, f"replica {WORKER} exited with code 137 (OOMKilled)", never=("evicted", "deleted")),
]


def tracker_verdict(worker_events: tuple[dict[str, Any], ...], keep=None) -> JobVerdict:
    """The ``kubernetes`` tracker's verdict after a LIST of both pods running and the worker's events; ``keep`` is
    what of each pod it holds (``pod_essentials`` in the triggerer)."""
    def held(pod: dict[str, Any]) -> dict[str, Any]:
        return pod if keep is None else keep(pod)

    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0)
    tracker.reset([held(running(MASTER)), held(WORKER_RUNNING)])
    events = [("MODIFIED", pod) for pod in worker_events]
    if "terminated" not in worker_events[-1]["status"]["containerStatuses"][0]["state"] and (
            worker_events[-1]["metadata"].get("deletionTimestamp")):
        events.append(("DELETED", worker_events[-1]))  # the kubelet finishes the deletion, no exit reported
    for kind, pod in events:
        tracker.apply(kind, held(pod))
    verdict = tracker.verdict(now=1)
    assert verdict is not None
    return verdict


def error_of(verdict: JobVerdict) -> Exception:
    # Through the trigger's event and back, as a deferred wait hands it to the resumed task.
    return job_failure("ns/j", JobVerdict.from_dict(verdict.as_dict()).outcome(), 71.0, NOTE)


@pytest.mark.parametrize("keep", [None, pod_essentials], ids=["in the task", "in the triggerer"])
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_kubernetes_verdict(case: Case, keep) -> None:
    error = error_of(tracker_verdict(case.worker, keep))
    assert type(error) is case.expected
    assert case.says in str(error)
    assert not any(words in str(error) for words in case.never), str(error)


@pytest.mark.parametrize("case", [case for case in CASES if "terminated" in str(case.worker[-1]["status"])],
                         ids=lambda case: case.name)
def test_the_kubeflow_and_trainjob_verdict(case: Case) -> None:
    found = failed_replica([running(MASTER), case.worker[-1]], "base")
    assert found is not None and found.replica == WORKER
    error = job_failure("ns/j", found.outcome(), 71.0, NOTE)
    assert type(error) is case.expected
    assert case.says in str(error)


def test_a_peer_failing_as_a_replica_is_deleted_is_that_replicas_loss() -> None:
    # The worker is being deleted; the master loses its connection to it and its exit is reported before the
    # worker's SIGTERM exit.
    tracker = JobTracker(SLOTS, startup_timeout=60, started_at=0)
    tracker.reset([running(MASTER), WORKER_RUNNING])
    tracker.apply("MODIFIED", deletion_started(WORKER_RUNNING))
    tracker.apply("MODIFIED", exited(running(MASTER), 1))
    verdict = tracker.verdict(now=1)
    assert verdict is not None and (verdict.replica, verdict.cause) == (WORKER, "deleted")
    error = error_of(verdict)
    assert type(error) is ReplicaLostError
    assert f"the pod of replica {WORKER} was deleted or evicted" in str(error)


def test_of_replicas_exiting_in_the_same_second_the_one_taken_away_decides() -> None:
    master = exited(running(MASTER), 1, at="2026-11-27T09:31:11Z")
    worker = exited(deletion_started(WORKER_RUNNING), 143, at="2026-11-27T09:31:11Z")
    found = failed_replica([master, worker], "base")
    assert found is not None and found.replica == WORKER
    assert type(job_failure("ns/j", found.outcome(), 1.0, NOTE)) is ReplicaLostError


def test_a_replica_its_controller_deletes_after_another_failed_is_not_the_cause() -> None:
    # A Kubeflow operator's clean-up (cleanPodPolicy Running) deletes the pods still running once the job failed:
    # they exit later than the replica whose error failed the job, which stays the cause.
    worker = exited(WORKER_RUNNING, 2, at="2026-11-27T09:31:11Z")
    master = exited(deletion_started(running(MASTER)), 143, at="2026-11-27T09:31:13Z")
    found = failed_replica([master, worker], "base")
    assert found is not None and found.replica == WORKER
    assert type(job_failure("ns/j", found.outcome(), 1.0, NOTE)) is ReplicaExitedError


def test_a_pod_taken_away_and_gone_before_its_controller_judged_the_job_is_still_the_cause() -> None:
    # The worker's deletion began, its container exited 143, the kubelet finished the deletion: the controller's
    # Failed condition comes after, when a LIST of the pods finds only the master. What the pod watch saw is kept,
    # across a deferral too (the trigger's event), and judged with the pods still there.
    taken = TakenAway()
    for pod in (running(MASTER), WORKER_RUNNING):  # the watch's first LIST: nothing taken away
        taken.observe(pod)
    assert taken.pods == {}
    taken.observe(deletion_started(WORKER_RUNNING))
    taken.observe(exited(deletion_started(WORKER_RUNNING), 143))  # the DELETED event's object
    resumed = TakenAway.from_dict(json.loads(json.dumps(taken.as_dict())))
    present = [running(MASTER)]
    gone = resumed.gone(present)
    assert [pod["metadata"]["name"] for pod in gone] == [WORKER]
    found = failed_replica([*gone, *present], "base")
    assert found is not None and found.replica == WORKER
    error = job_failure("ns/j", found.outcome(), 71.0, NOTE)
    assert type(error) is ReplicaLostError
    assert f"replica {WORKER} was deleted or evicted and exited with code 143" in str(error)
    # Still there (within its grace period), it is read from the LIST itself, not twice.
    assert resumed.gone([running(MASTER), exited(deletion_started(WORKER_RUNNING), 143)]) == []


def test_a_pod_seen_only_as_its_deletion_began_and_gone_is_lost_without_an_exit() -> None:
    taken = TakenAway()
    taken.observe(deletion_started(WORKER_RUNNING))
    gone = taken.gone([running(MASTER)])
    assert failed_replica([*gone, running(MASTER)], "base") is None
    found = lost_replica(gone)
    assert found is not None and (found.replica, found.cause) == (WORKER, "deleted")
    error = job_failure("ns/j", found.outcome(), 71.0, NOTE)
    assert type(error) is ReplicaLostError
    assert f"the pod of replica {WORKER} was deleted or evicted" in str(error)
    assert lost_replica([]) is None
