"""``PendingPods`` (the Kubeflow wait's paced pod LISTs) and ``pod_essentials`` (what a waiter keeps of a pod): pure."""

from __future__ import annotations

import json

import pytest

from airflow_distributed.jobstate.object_wait import OWN, ObjectWaitEnd, own_reason
from airflow_distributed.jobstate.pending_pods import IMAGE_PULL_FAILED, PendingPods
from airflow_distributed.jobstate.pod_state import image_failure, pod_essentials, replica_status
from airflow_distributed.jobstate.verdicts import ReplicaSlot
from airflow_distributed.manifests.kubeflow_status import expected_pods, job_suspended, pod_group_of
from airflow_distributed.manifests.kubernetes import (
    POD_LAUNCH,
    JobManifestOptions,
    build_job_objects,
    layout_for_kubernetes,
    to_dict,
)
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.spec import load_spec
from tests.k8s_emulator import kubelet

IMAGE = "registry.example.com/trainer:1.0"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, waiting: str | None = None, running: bool = False, message: str = "no such tag") -> dict:
    state = {"running": {"startedAt": "2026-01-01T00:00:00Z"}} if running else {
        "waiting": {"reason": waiting or "ContainerCreating", "message": message}}
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "pytorch", "image": IMAGE}]},
            "status": {"phase": "Running" if running else "Pending",
                       "containerStatuses": [{"name": "pytorch", "image": IMAGE, "state": state}]}}


def job(workers: int = 2) -> dict:
    return {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1},
                                                                   "Worker": {"replicas": workers}}}}


def test_expected_pods_count_every_replica_spec():
    assert expected_pods(job(3)) == 4
    assert expected_pods({"kind": "TFJob", "spec": {"tfReplicaSpecs": {"Chief": {}, "Worker": {"replicas": 2}}}}) == 3
    assert expected_pods(None) is None and expected_pods({"kind": "Other", "spec": {}}) is None


def test_lists_are_paced_and_stop_once_every_replica_started():
    clock = Clock()
    check = PendingPods(interval=10.0, image_pull_grace=0.0, clock=clock)
    assert check.due()  # the first look at once
    assert check.on_pods([], expected_pods(job())) is None  # no pod yet
    assert not check.due() and check.watch_seconds(300) == 10
    clock.now += 4
    assert check.watch_seconds(300) == 6 and check.watch_seconds(3) == 3
    clock.now += 6
    assert check.due()
    check.on_pods([pod("j-master-0", running=True), pod("j-worker-0", running=True)], 3)
    assert check.pending  # one replica has no pod yet
    clock.now += 10
    check.on_pods([pod("j-master-0", running=True), pod("j-worker-0", running=True),
                   pod("j-worker-1", running=True)], 3)
    assert not check.pending and not check.due() and check.watch_seconds(300) == 300
    clock.now += 1000
    assert not check.due()
    assert check.lists == 3


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"])
def test_a_failed_pull_is_the_verdict_at_once_without_grace(reason):
    check = PendingPods(interval=10.0, image_pull_grace=0.0, clock=Clock())
    verdict = check.on_pods([pod("j-master-0", running=True), pod("j-worker-1", reason, message="kubelet says")], 3)
    assert verdict is not None and (verdict.replica, verdict.reason, verdict.image) == ("j-worker-1", reason, IMAGE)
    # The trigger's event of it (``object_wait``): the task tells it from the Kubeflow operator's verdicts by it.
    event = ObjectWaitEnd(OWN, verdict=verdict).event("pytorchjobs ns/j").to_payload()
    state, why, message = event["status"], event["reason"], event["message"]
    assert (state, why) == ("failed", IMAGE_PULL_FAILED)
    assert f'replica j-worker-1: image "{IMAGE}"' in message and f"({reason}: kubelet says)" in message
    assert not check.due()


def test_a_failing_pull_is_looked_at_again_when_its_grace_ends_and_a_recovered_one_forgotten():
    clock = Clock()
    check = PendingPods(interval=10.0, image_pull_grace=3.0, clock=clock)
    assert check.on_pods([pod("j-master-0", "ErrImagePull")], 1) is None
    assert check.pull_failures == {"j-master-0": 100.0} and check.watch_seconds(300) == 3
    clock.now += 2
    assert check.on_pods([pod("j-master-0", running=True)], 1) is None  # the registry answered
    assert check.pull_failures == {} and not check.pending
    # A permanent reason fails at once whatever the grace; a pull failing past the grace fails.
    assert PendingPods(10.0, 600.0, Clock()).on_pods([pod("a", "InvalidImageName")], 1) is not None
    check = PendingPods(10.0, 3.0, clock)
    check.on_pods([pod("a", "ImagePullBackOff")], 1)
    clock.now += 3
    assert check.due()
    assert check.on_pods([pod("a", "ImagePullBackOff")], 1) is not None


def _real_pods() -> list[dict]:
    """The pods of a 4-replica PyTorch job as the project builds them, in every state the verdicts read."""
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 3}})
    plan = build_plan(spec, "job-a", KubernetesAddressing("ns"), layout_for_kubernetes(), ["python", "train.py"],
                      backend="kubernetes", launch=POD_LAUNCH)
    pods = [to_dict(p) for p in build_job_objects(plan, JobManifestOptions(namespace="ns", image=IMAGE)).pods]
    states = [
        ("Running", {"base": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}, False),
        ("Pending", {"base": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}, False),
        ("Failed", {"base": {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": "2026-01-01T00:01:00Z"}}},
         False),
        ("Pending", {}, True),
    ]
    for index, (one, (phase, containers, unschedulable)) in enumerate(zip(pods, states)):
        one["metadata"]["uid"] = f"uid-{index}"
        one["spec"]["nodeName"] = "node-1"
        one["status"] = kubelet.pod_status(one, phase, now="2026-01-01T00:00:00Z", pod_ip="10.0.0.1",
                                           host_ip="192.168.0.2", container_states=containers,
                                           unschedulable=unschedulable, message="0/3 nodes are available")
    return pods


def test_pod_essentials_give_the_same_rows_and_verdicts_as_whole_pods():
    pods = _real_pods()
    slots = [ReplicaSlot(p["metadata"]["name"], "worker", i) for i, p in enumerate(pods)]
    kept = [pod_essentials(p) for p in pods]
    for slot, whole, small in zip(slots, pods, kept):
        assert replica_status(slot, small) == replica_status(slot, whole)
    whole_verdict = image_failure([(s.name, p) for s, p in zip(slots, pods)], {}, 0.0, 0.0)
    assert whole_verdict is not None and whole_verdict.image == IMAGE
    assert image_failure([(s.name, p) for s, p in zip(slots, kept)], {}, 0.0, 0.0) == whole_verdict
    # What is left out is most of a pod: its spec (environment, volumes, probes) and metadata.
    assert sum(len(json.dumps(p)) for p in kept) * 2 < sum(len(json.dumps(p)) for p in pods)


def suspended_job(suspended: bool) -> dict:
    """A job whose status says whether it is suspended (a Suspended condition True, or turned False on resume)."""
    return {**job(), "status": {"conditions": [
        {"type": "Created", "status": "True"},
        {"type": "Suspended", "status": "True" if suspended else "False",
         "reason": "PyTorchJobSuspended" if suspended else "PyTorchJobResumed"}]}}


def test_no_list_is_due_while_the_job_is_suspended_and_one_is_due_at_once_on_resume():
    clock = Clock()
    check = PendingPods(interval=10.0, image_pull_grace=0.0, clock=clock, suspended_of=job_suspended)
    assert not check.due_for(None)  # the object not seen yet
    assert not check.due_for(suspended_job(True))  # due at once otherwise: the first look
    assert check.suspended and check.watch_seconds(300) == 300  # its watches are not cut either
    clock.now += 3600  # an hour later, still suspended: still nothing to list
    assert not check.due_for(suspended_job(True)) and check.lists == 0
    assert check.due_for(suspended_job(False))  # resumed: a LIST at once
    assert check.on_pods([], 3) is None
    assert not check.due_for(suspended_job(False)) and check.watch_seconds(300) == 10
    clock.now += 10
    assert check.due_for(suspended_job(False)) and check.lists == 1


def test_a_job_suspended_after_its_replicas_started_is_checked_again_once_resumed():
    clock = Clock()
    check = PendingPods(interval=10.0, image_pull_grace=5.0, clock=clock, suspended_of=job_suspended)
    running = [pod("j-master-0", running=True), pod("j-worker-0", running=True)]
    check.on_pods([*running, pod("j-worker-1", "ErrImagePull")], 3)
    assert check.pull_failures == {"j-worker-1": 100.0}
    clock.now += 1
    check.on_pods([*running, pod("j-worker-1", running=True)], 3)
    assert not check.pending and not check.due_for(suspended_job(False))
    # Suspended (Kueue preempted it): its pods are deleted; once resumed they start again and are watched again.
    check.pull_failures["j-worker-1"] = 90.0  # as if a pull had failed just before the suspension
    assert not check.due_for(suspended_job(True)) and check.pull_failures == {}
    clock.now += 600
    assert check.due_for(suspended_job(False)) and check.pending
    assert check.on_pods([*running, pod("j-worker-1", "ErrImagePull")], 3) is None  # the grace starts afresh
    assert check.pull_failures == {"j-worker-1": 701.0}


def test_without_a_suspension_rule_a_job_is_never_taken_for_suspended():
    check = PendingPods(interval=10.0, image_pull_grace=0.0, clock=Clock())
    assert check.due_for(suspended_job(True)) and not check.suspended


def _unschedulable(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}}


def test_a_suspended_job_or_an_unschedulable_pod_past_queue_timeout_is_a_queue_verdict() -> None:
    clock = Clock()
    pending = PendingPods(10, 0, clock, job_suspended, queue_timeout=60)
    assert pending.due_for({"spec": {"runPolicy": {"suspend": True}}}) is False  # Kueue holds it: no LIST
    clock.now += 59
    assert pending.verdict is None and pending.seconds_to_queue_deadline() == 1
    assert pending.watch_seconds(300) == 1  # the watch ends when the verdict is due, not 300 s later
    clock.now += 1
    verdict = pending.verdict
    assert verdict is not None and (verdict.cause, verdict.replica, verdict.reason) == ("queue", None, "Suspended")
    assert own_reason(verdict) == "QueueTimedOut"

    admitted = PendingPods(10, 0, clock, job_suspended, queue_timeout=60)
    admitted.on_pods([_unschedulable("job-worker-0")], expected=1)
    clock.now += 60
    verdict = admitted.verdict
    assert verdict is not None and (verdict.replica, verdict.reason) == ("job-worker-0", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in (verdict.message or "")


def test_without_queue_timeout_or_once_scheduled_there_is_no_queue_verdict() -> None:
    clock = Clock()
    unlimited = PendingPods(10, 0, clock, job_suspended)
    unlimited.on_pods([_unschedulable("job-worker-0")], expected=1)
    clock.now += 10_000
    assert unlimited.verdict is None
    scheduled = PendingPods(10, 0, clock, job_suspended, queue_timeout=60)
    scheduled.on_pods([_unschedulable("job-worker-0")], expected=1)
    scheduled.on_pods([pod("job-worker-0", running=True)], expected=1)
    clock.now += 61
    assert scheduled.verdict is None


def _pod_group(phase: str, unschedulable: str | None = None) -> dict:
    conditions = [] if unschedulable is None else [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": unschedulable}]
    return {"metadata": {"name": "job"}, "status": {"phase": phase, "conditions": conditions}}


def test_a_podgroup_not_admitted_queues_a_job_whose_pods_are_missing_and_only_then() -> None:
    clock = Clock()
    waiting = PendingPods(10, 0, clock, job_suspended, queue_timeout=60)
    waiting.on_pods([], expected=3, pod_group=_pod_group("Pending", "3/3 tasks in gang unschedulable"))
    clock.now += 60
    verdict = waiting.verdict
    assert verdict is not None and (verdict.replica, verdict.reason) == (None, "NotEnoughResources")
    assert verdict.message == "PodGroup job is not admitted: 3/3 tasks in gang unschedulable"

    bare = PendingPods(10, 0, clock, job_suspended, queue_timeout=60)
    bare.on_pods([], expected=3, pod_group={"metadata": {"name": "job"}})  # no status written yet
    assert bare.queued == (None, "PodGroupPending", "PodGroup job is not admitted yet (phase Pending)")
    # Admitted (Volcano's Inqueue), or every pod there (their own state tells): not queued by the group.
    for phase, pods in (("Inqueue", []), ("Pending", [pod(f"job-worker-{i}", running=True) for i in range(3)])):
        other = PendingPods(10, 0, clock, job_suspended, queue_timeout=60)
        other.on_pods(pods, expected=3, pod_group=_pod_group(phase))
        assert other.queued is None, phase


def test_the_queue_note_tells_why_and_since_the_clusters_own_time_once_per_change() -> None:
    clock, notes = Clock(), []  # type: ignore[var-annotated]
    # Kueue's suspension: the job's Suspended condition's time, told once however often the job is looked at.
    pending = PendingPods(10, 0, clock, job_suspended, on_queue=notes.append, wall_clock=lambda: 0.0)
    suspended = {"spec": {"runPolicy": {"suspend": True}}, "status": {"conditions": [
        {"type": "Suspended", "status": "True", "lastTransitionTime": "2026-11-25T15:00:00Z"}]}}
    for _ in range(3):
        pending.due_for(suspended)
    assert notes == ["the job waits to be admitted (suspended) since 2026-11-25T15:00:00Z: Suspended: "
                     "the job is suspended (waiting to be admitted, e.g. by Kueue)"]
    # Resumed, then a pod the scheduler cannot place: its PodScheduled condition's time, once over two LISTs.
    pending.due_for({"spec": {}})
    unschedulable = _unschedulable("job-worker-0")
    unschedulable["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-25T15:05:00Z"
    pending.on_pods([unschedulable], expected=2)
    pending.on_pods([unschedulable], expected=2)
    assert notes[1:] == ["1 of 2 replicas wait to be scheduled since 2026-11-25T15:05:00Z: job-worker-0: "
                         "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."]
    # A PodGroup not admitted: its condition's time; without one, when first seen (the wall clock), kept.
    group = _pod_group("Pending", "3/3 tasks in gang unschedulable")
    group["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-25T15:10:00Z"
    pending.on_pods([], expected=3, pod_group=group)
    assert notes[2:] == ["the job waits for its PodGroup to be admitted since 2026-11-25T15:10:00Z: "
                         "NotEnoughResources: PodGroup job is not admitted: 3/3 tasks in gang unschedulable"]
    told: list[str] = []
    bare = PendingPods(10, 0, clock, job_suspended, on_queue=told.append, wall_clock=lambda: 60.0)
    bare.on_pods([], expected=3, pod_group={"metadata": {"name": "job"}})
    bare.wall_clock = lambda: 120.0
    bare.on_pods([], expected=3, pod_group={"metadata": {"name": "job"}})
    assert told == ["the job waits for its PodGroup to be admitted since 1970-01-01T00:01:00Z: PodGroupPending: "
                    "PodGroup job is not admitted yet (phase Pending)"]
    # Scheduled: no note (the replica table tells what follows); a new wait is told again.
    pending.on_pods([pod("job-worker-0", running=True)] * 3, expected=3)
    assert pending.note is None and len(notes) == 3


def test_the_podgroup_of_a_kubeflow_job_is_volcanos_or_scheduler_plugins_by_its_pods_scheduler() -> None:
    def job(scheduler: str | None, gang: bool = True) -> dict:
        template = {"spec": {"schedulerName": scheduler}} if scheduler else {"spec": {}}
        return {"kind": "PyTorchJob", "metadata": {"name": "job"}, "spec": {
            **({"runPolicy": {"schedulingPolicy": {"minAvailable": 2}}} if gang else {}),
            "pytorchReplicaSpecs": {"Master": {"template": template}, "Worker": {"template": template}}}}

    assert pod_group_of(job("volcano")) == ("scheduling.volcano.sh", "v1beta1", "podgroups", "job")
    assert pod_group_of(job(None)) == ("scheduling.x-k8s.io", "v1alpha1", "podgroups", "job")
    assert pod_group_of(job("volcano", gang=False)) is None and pod_group_of(None) is None
