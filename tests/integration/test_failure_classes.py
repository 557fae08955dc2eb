"""The errors that tell Airflow what to do, through a real Airflow with ``retries=3`` and the provider's retry policy:
a script's error follows the retries (local backend, real processes); over HTTP with the API emulator, an image that
cannot be pulled fails at its first try and a replica evicted mid-training is retried at once (``retry_delay`` is a
minute), both waited for in the task and in the triggerer."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.dags.failure_class_dags import IMAGE, namespace_of
from tests.hang_scripts import gloo_hang_failure, last_report_named
from tests.helpers import replica_processes, run_dag, run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import DOCUMENT, JOB_LABEL, NOTHING, Player, settled, task_requests

pytestmark = pytest.mark.usefixtures("airflow_db")

PULL_ERROR = f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": not found'
DISRUPTED = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def tries(run) -> tuple[int, list[tuple[str, float | None, str | None]]]:
    """The task's last try number, and each earlier try's (state, retry delay the policy set, the policy's
    reason)."""
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session
    from sqlalchemy import select

    (ti,) = run.get_task_instances()
    with create_session() as session:
        rows = session.scalars(select(TaskInstanceHistory).where(
            TaskInstanceHistory.dag_id == run.dag_id, TaskInstanceHistory.run_id == run.run_id,
        ).order_by(TaskInstanceHistory.try_number)).all()
        return ti.try_number, [(row.state, row.retry_delay_override, row.retry_reason) for row in rows]


def test_a_script_that_exits_2_follows_the_tasks_retries(capfd):
    run, states = run_dag("failure_script_exits_2")

    assert states == {"train": "failed"}
    last, earlier = tries(run)
    assert last == 4
    assert [(delay, reason) for _, delay, reason in earlier] == [(None, None)] * 3  # retry_delay's, no reason
    out = capfd.readouterr().out
    assert "exited with code 2" in out and "ReplicaExitedError" in out
    job = xcom(run, "train", "job")
    assert [r["exit_code"] for r in job["replicas"] if r["role"] == "master"] == [2]


# ---------------------------------------------------------------------------------------------- Kubernetes


class Cluster(Player):
    """Plays the kubelet of every try's pods until ``stop()``: ``on_pods(pods)`` gets each new try's three pods,
    by ``role-index``."""

    thread_name = "cluster"

    def __init__(self, emu, namespace: str, on_pods) -> None:
        super().__init__()
        self.emu, self.namespace, self.on_pods = emu, namespace, on_pods
        self.stopping = threading.Event()
        self.tries = 0

    def pods(self) -> dict[str, dict]:
        return {f"{p['metadata']['labels']['airflow-distributed/role']}-"
                f"{p['metadata']['labels']['airflow-distributed/index']}": p
                for p in self.emu.list("pods", self.namespace, label_selector=JOB_LABEL)}

    def run(self) -> None:
        seen: set[str] = set()
        while not self.stopping.is_set():
            pods = self.pods()
            uids = {p["metadata"]["uid"] for p in pods.values()}
            if len(pods) == 2 and not uids & seen:
                seen |= uids
                self.tries += 1
                self.on_pods(self, self.tries, pods)
            time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.check()


@pytest.mark.usefixtures("kubernetes_connection")
@pytest.mark.parametrize("dag_id", ["failure_image_pull", "failure_image_pull_deferrable"])
def test_an_image_that_cannot_be_pulled_runs_one_try(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def on_pods(cluster: Cluster, attempt: int, pods: dict[str, dict]) -> None:
        # Every try's worker fails its pull: a retry pulls the same image.
        emulator.run_pod(namespace, pods["master-0"]["metadata"]["name"])
        emulator.pending_pod(namespace, pods["worker-0"]["metadata"]["name"], reason="ErrImagePull",
                             message=PULL_ERROR)

    cluster = Cluster(emulator, namespace, on_pods).play(Cluster.run)
    try:
        run, states = run_dag_at(dag_id)
    finally:
        cluster.stop()

    assert states == {"train": "failed"}
    assert tries(run)[0] == 1 and cluster.tries == 1
    out = capfd.readouterr().out
    assert "could not be pulled (ErrImagePull" in out and "ImagePullError" in out
    assert "not retried: a retry pulls the same image" in out  # the policy's reason, in the task log
    job = xcom(run, "train", "job")["job_name"]
    settled(emulator, namespace, {**NOTHING, "services": [job], "configmaps": [f"{job}-files"]})


@pytest.mark.usefixtures("kubernetes_connection")
@pytest.mark.parametrize("dag_id", ["failure_evicted", "failure_evicted_deferrable"])
def test_a_replica_evicted_mid_training_is_retried_at_once(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def on_pods(cluster: Cluster, attempt: int, pods: dict[str, dict]) -> None:
        master, worker = (pods[key]["metadata"]["name"] for key in ("master-0", "worker-0"))
        for name in (master, worker):
            emulator.run_pod(namespace, name)
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=30)
        emulator.append_log(namespace, master, f"try {attempt} step 1", container="base")
        if attempt == 1:
            # What the API server does on an eviction (a drain, a preemption): mark the pod, then delete it.
            emulator.set_pod_phase(namespace, worker, "Running", conditions=[DISRUPTED])
            emulator.delete("pods", namespace, worker)
            return
        emulator.set_pod_phase(namespace, master, "Running", container_states={"base": {"terminated": {
            "exitCode": 0, "reason": "Completed", "message": json.dumps(DOCUMENT)}}})

    cluster = Cluster(emulator, namespace, on_pods).play(Cluster.run)
    try:
        run, states = run_dag_at(dag_id)
    finally:
        cluster.stop()

    assert states == {"train": "success"}
    last, earlier = tries(run)
    assert last == 2 and cluster.tries == 2
    ((_, delay, reason),) = earlier
    assert delay == 0.0  # at once, not after retry_delay's minute
    assert reason is not None and reason.startswith("ReplicaLostError: the cluster took a replica away")
    assert reason.endswith(": EvictionByEvictionAPI)")
    out = capfd.readouterr().out
    assert "-worker-0 was evicted (EvictionByEvictionAPI)" in out  # the message of try 1: what took the worker
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    settled(emulator, namespace, NOTHING)


@pytest.mark.usefixtures("kubernetes_connection")
@pytest.mark.parametrize("dag_id", ["failure_refused", "failure_refused_deferrable"])
def test_a_request_the_cluster_refuses_runs_one_try(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    # The first read of the job's pods (the wait's LIST, in the task or in the triggerer) is forbidden.
    emulator.inject_faults(method="GET", path_regex=f"/api/v1/namespaces/{namespace}/pods$", statuses=(403,))

    run, states = run_dag_at(dag_id)

    assert states == {"train": "failed"}
    assert tries(run)[0] == 1
    out = capfd.readouterr().out
    assert "ClusterRefusedError" in out and "403 Forbidden" in out
    assert "not retried: a retry is refused the same way" in out


UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.mark.usefixtures("kubernetes_connection")
@pytest.mark.parametrize("dag_id", ["failure_queue_then_scheduled", "failure_queue_then_scheduled_deferrable"])
def test_a_job_waiting_for_capacity_longer_than_startup_timeout_then_scheduled_succeeds(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def on_pods(cluster: Cluster, attempt: int, pods: dict[str, dict]) -> None:
        names = [pod["metadata"]["name"] for pod in pods.values()]
        for name in names:
            emulator.pending_pod(namespace, name, reason="Unschedulable", message=UNSCHEDULABLE)
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=30)
        time.sleep(4.0)  # twice startup_timeout (2 s): the queue's limit applies, not the startup one
        for name in names:
            emulator.schedule_pod(namespace, name)
            emulator.run_pod(namespace, name)
        master = pods["master-0"]["metadata"]["name"]
        emulator.set_pod_phase(namespace, master, "Running", container_states={"base": {"terminated": {
            "exitCode": 0, "reason": "Completed", "message": json.dumps(DOCUMENT)}}})

    cluster = Cluster(emulator, namespace, on_pods).play(Cluster.run)
    try:
        run, states = run_dag_at(dag_id)
    finally:
        cluster.stop()

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    assert "pending (Unschedulable)" in capfd.readouterr().out  # the table said why it waited


@pytest.mark.usefixtures("kubernetes_connection")
def test_a_job_waiting_past_queue_timeout_fails_naming_the_schedulers_reason(emulator, capfd):
    namespace = namespace_of("failure_queue_timeout")
    emulator.create_namespace(namespace)

    def on_pods(cluster: Cluster, attempt: int, pods: dict[str, dict]) -> None:
        emulator.pending_pod(namespace, pods["worker-0"]["metadata"]["name"], reason="Unschedulable",
                             message=UNSCHEDULABLE)
        emulator.schedule_pod(namespace, pods["master-0"]["metadata"]["name"])
        emulator.run_pod(namespace, pods["master-0"]["metadata"]["name"])

    cluster = Cluster(emulator, namespace, on_pods).play(Cluster.run)
    try:
        run, states = run_dag_at("failure_queue_timeout")
    finally:
        cluster.stop()

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    failure = out[out.rindex("ReplicaNotScheduledError: job "):].splitlines()[0]
    assert (f"-worker-0 was not scheduled within 3s (queue_timeout): Unschedulable: {UNSCHEDULABLE}; "
            in failure), failure


# ---------------------------------------------------------------------------------------------- the hang watchdog


def test_a_job_whose_ranks_block_in_an_all_reduce_fails_as_hung_with_their_stacks(capfd):
    run, states = run_dag("failure_hung")

    assert states == {"train": "failed"}
    last, earlier = tries(run)
    assert last == 2  # retried at once (retry_delay is a minute), hung again
    ((_, delay, reason),) = earlier
    assert delay == 0.0 and reason is not None and reason.startswith("JobHungError: the job hung")
    job = xcom(run, "train", "job")
    gloo_hang_failure(capfd.readouterr().out, job)
    assert replica_processes(job["job_name"]) == []


def test_a_job_that_hangs_right_after_a_burst_of_reports_is_named_by_its_last_report(capfd):
    # Steps 1 to 10 reported 0.2 s apart by every rank, then the all-reduce that never completes.
    run, states = run_dag("failure_hung_after_burst")

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    last_report_named(out[out.rindex("JobHungError: job "):].splitlines()[0], 8)
    assert replica_processes(xcom(run, "train", "job")["job_name"]) == []


def test_a_slow_job_that_reports_is_not_hung():
    run, states = run_dag("failure_slow_but_reporting")

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"loss": 0.5}
