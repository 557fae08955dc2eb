"""Real training in real pods: DAG runs of the kubernetes backend on the real node, the task talking as the service
account bound to exactly docs/rbac.yaml's Role."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes import watch as kube_watch

from airflow_distributed.manifests.function_script import ARGUMENTS_FILE, FUNCTION_FILE
from airflow_distributed.manifests.kubernetes import FILES_DIR, MAIN_CONTAINER, SECRET_FILES_DIR
from tests.helpers import replica_lines, run_dag, run_dag_at, xcom
from tests.kube_node.node import RealNode
from tests.kube_node.training_operator import JobOperator, PyTorchJobOperator, TrainJobOperator
from tests.process_variables import ranks_expected, ranks_seen

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.mark.parametrize("dag_namespace", ["node_ddp", pytest.param("node_ddp_deferrable", marks=pytest.mark.slow)],
                         indirect=True)
def test_pytorch_ddp_over_gloo_trains_in_real_pods_and_leaves_nothing(node: RealNode, dag_namespace, capfd):
    namespace, user = dag_namespace
    run, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    result = xcom(run, "train")
    assert result["state"] == "succeeded"
    metrics = result["metrics"]
    assert metrics["world_size"] == 3
    assert metrics["final_loss"] < metrics["initial_loss"]
    assert result["model_path"] == "/airflow-distributed/model/model.pt"
    job = result["job_name"]
    master = f"{job}-master-0"
    # The script fails unless every rank ended with the same parameters; rank 0 says so once they were compared.
    assert any("parameters identical on all ranks" in line for line in replica_lines(out, job)[master])
    # Each rank joined the process group at the master's DNS name under the job's headless Service.
    address = f"{master}.{job}.{namespace}.svc:"
    ranks = {master: 0} if namespace.endswith("deferrable") else {master: 0, f"{job}-worker-0": 1,
                                                                   f"{job}-worker-1": 2}
    for pod, rank in ranks.items():
        assert f"[{pod}] rank {rank}/3: process group ready ({address}" in out, pod
        # Each replica's /dev/shm is the pod's memory-backed emptyDir, half its 1024 MiB memory limit (shm_size
        # "auto"), not the runtime's own 64 MiB.
        said = re.search(rf"\[{re.escape(pod)}\] dev-shm: (\S+ \S+)", out)
        assert said and said.group(1) == "tmpfs 524288KiB", (pod, said and said.group(0))
    # The workers end a moment after the master: the clean-up gives them finish_grace to end on their own, so the
    # final table says how they ended, not that the clean-up stopped them.
    table = {r["name"]: (r["state"], r["exit_code"]) for r in result["replicas"]}
    assert table == {master: ("succeeded", 0), f"{job}-worker-0": ("succeeded", 0),
                     f"{job}-worker-1": ("succeeded", 0)}, table
    node.control_plane.assert_clean(namespace, user, timeout=90)


@pytest.mark.parametrize("dag_namespace", ["node_nproc_ddp"], indirect=True)
def test_replicas_of_several_processes_train_one_ddp_model_in_real_pods_and_leave_nothing(node: RealNode,
                                                                                          dag_namespace, capfd):
    namespace, user = dag_namespace
    run, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    # torch's launcher in each of the 2 pods started 3 processes, each with its global and local ranks.
    assert ranks_seen(out) == ranks_expected(2, 3), out[-6000:]
    result = xcom(run, "train")
    assert result["metrics"]["world_size"] == 6
    job = result["job_name"]
    # The script fails unless all 6 ranks ended with the same parameters; rank 0 says so once they were compared.
    assert any("parameters identical on all ranks" in line for line in replica_lines(out, job)[f"{job}-master-0"])
    table = {r["name"]: (r["state"], r["exit_code"]) for r in result["replicas"]}
    assert table == {f"{job}-master-0": ("succeeded", 0), f"{job}-worker-0": ("succeeded", 0)}, table
    node.control_plane.assert_clean(namespace, user, timeout=90)


# The OOM kill (a minute: a master and a worker, 256 MiB written) and the missing image (its pod goes only after
# the kubelet's pull back-off, 30-45 s) are left to the slow run.
@pytest.mark.parametrize(("dag_namespace", "error", "said"), [
    pytest.param("node_worker_oom", "ReplicaOOMKilledError", "-worker-0 exited with code 137 (OOMKilled)",
                 marks=pytest.mark.slow),
    # The allocating process is the output relay's child, not PID 1: the relay exits 128 + 9, the runtime reports
    # the cgroup's OOM kill.
    pytest.param("node_master_oom", "ReplicaOOMKilledError", "-master-0 exited with code 137 (OOMKilled)",
                 marks=pytest.mark.slow),
    # The worker's readiness step waits for a master that never listens: startup_timeout (20 s) fails the job, not
    # the step's own limit (10 min) nor the task's execution_timeout (150 s).
    pytest.param("node_readiness_stuck", "ReplicaNotStartedError",
                 "-worker-0 did not start within 20s: WaitingForPeers", marks=pytest.mark.slow),
    ("node_worker_exit", "ReplicaExitedError", "-worker-0 exited with code 1"),
    pytest.param("node_image_missing", "ImagePullError",
                 'image "127.0.0.1:5000/airflow-distributed/absent:0" could not be pulled', marks=pytest.mark.slow),
], indirect=["dag_namespace"])
def test_a_replica_that_fails_in_a_real_pod_fails_the_task_naming_it_and_leaves_nothing(
        node: RealNode, dag_namespace, error: str, said: str, capfd):
    namespace, user = dag_namespace
    _, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "failed"}, out[-6000:]
    failures = [line for line in out.splitlines() if f"{error}: job {namespace}/" in line]
    assert failures, out[-6000:]
    assert said in failures[0], failures[0]
    # A pod in ImagePullBackOff goes only after its back-off: the clean-up's deletions take that long.
    node.control_plane.assert_clean(namespace, user, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("dag_namespace", ["node_timed_out"], indirect=True)
def test_a_job_outliving_execution_timeout_is_deleted_with_real_grace_periods_and_nothing_is_left(
        node: RealNode, dag_namespace, capfd):
    namespace, user = dag_namespace
    with last_pod_states(node, namespace) as last:
        _, states = run_dag_at("node_timed_out")
        out = capfd.readouterr().out
        assert states == {"train": "failed"}, out[-6000:]
        assert "AirflowTaskTimeout" in out or "execution_timeout" in out
        node.control_plane.assert_clean(namespace, user, timeout=120)
    # Each replica's PID 1 got SIGTERM from the kubelet, and the scripts (no handler for it) ended of it at once:
    # PID 1 is the forwarder (the master's relay) whose child's default action is to end, so it exits 128 + 15. A
    # script run as PID 1 itself would ignore it and be SIGKILLed at the end of its grace period (30 s): 137.
    ended = {name.rsplit("-", 2)[-2]: main_container_exit(pod) for name, pod in last.items()}
    terminating = {role: terminating_seconds(node, namespace, f"-{role}-0") for role in ("master", "worker")}
    assert set(ended) == {"master", "worker"}, ended
    # The product sets no grace period: the API server's default (30 s) is in every pod's spec.
    (grace,) = {pod["spec"]["terminationGracePeriodSeconds"] for pod in last.values()}
    assert grace == 30
    for role, code in ended.items():
        if code is None:
            # The 1.20 kubelet may remove a deleted pod without reporting how its container ended (a known kubelet
            # defect of those versions: kubernetes/kubernetes#104107; seen twice in CI runs, once on the worker, once
            # on the master). The pod's Terminating time still tells the two cases apart: a container SIGKILLed at
            # the end of its grace period keeps its pod at least that long (30 s), one ended by the SIGTERM took the
            # kubelet 4-18 s in every run measured.
            assert terminating[role] < grace, (role, terminating, last_statuses(last))
        else:
            assert code == 143, (role, ended, last_statuses(last))
    with capfd.disabled():
        print("\n" + ", ".join(f"{role} pod Terminating {seconds:.1f} s" for role, seconds in terminating.items())
              + f" after its delete; exit codes seen {ended}")


@pytest.mark.parametrize("dag_namespace", ["node_task_distributed"], indirect=True)
def test_a_task_distributed_function_runs_in_real_pods_from_its_configmap_with_its_secret_arguments(
        node: RealNode, dag_namespace, capfd):
    namespace, user = dag_namespace
    token = "never-in-a-log-" + "7" * 9
    run, states = run_dag("node_task_distributed", conf={"token": token})

    out = capfd.readouterr().out
    assert states == {"reduce_ranks": "success", "total_of": "success"}, out[-6000:]
    result = xcom(run, "reduce_ranks")
    # Ranks 0 and 1 each added the token's length, summed over gloo between the pods, scaled by the second argument.
    assert result["total"] == (0 + 1 + 2 * len(token)) * 10 and result["world_size"] == 2, result
    assert xcom(run, "total_of") == result["total"]
    # Run by the image's python3, the function's script from the ConfigMap's volume, its arguments from the Secret's.
    assert result["python"] == "/usr/bin/python3"
    assert result["script"] == f"{FILES_DIR}/{FUNCTION_FILE}"
    assert result["arguments"] == f"{SECRET_FILES_DIR}/{ARGUMENTS_FILE}"
    assert token not in out
    # The XCom sidecar's image here is Debian's busybox-static, without pgrep: its stop after the read needs only
    # the shell's kill, so no exec in it fails (the cncf provider's stop tries pgrep first, then a /proc loop).
    assert "pgrep" not in out, [line for line in out.splitlines() if "pgrep" in line or "kill" in line]
    assert "could not stop the XCom sidecar" not in out
    node.control_plane.assert_clean(namespace, user, timeout=90)
    # How long the master pod stayed Terminating (its sidecar stopped after the read: nothing left to stop), beside
    # its worker, whose only container had ended by itself: figures for the record, not asserted.
    with capfd.disabled():
        print("\n" + ", ".join(f"{role} pod Terminating {terminating_seconds(node, namespace, f'-{role}-0'):.1f} s"
                               for role in ("master", "worker")) + " after its delete")


def run_under_controller(node: RealNode, namespace: str, operator: type[JobOperator], capfd) -> tuple[Any, str]:
    """The namespace's DAG run while the controller's stand-in plays its kind; its run and output, once it
    succeeded with the controller in no error."""
    controller = operator(node.control_plane, namespace).start()
    try:
        run, states = run_dag_at(namespace.replace("-", "_"))
    finally:
        controller.stop()
    out = capfd.readouterr().out
    assert controller.errors == []
    assert states == {"train": "success"}, out[-6000:]
    return run, out


# Each a couple of minutes: a job of three real pods, and its controller's stand-in's pace.
@pytest.mark.slow
@pytest.mark.parametrize(("dag_namespace", "operator", "backend", "master"), [
    ("node_pytorchjob", PyTorchJobOperator, "kubeflow", "{job}-master-0:"),
    ("node_trainjob", TrainJobOperator, "trainjob", "{job}-node-0-0.{job}:"),
], indirect=["dag_namespace"])
def test_a_job_whose_pods_its_controller_makes_trains_over_gloo_in_real_pods(
        node: RealNode, dag_namespace, operator: type[JobOperator], backend: str, master: str, capfd):
    namespace, user = dag_namespace
    run, out = run_under_controller(node, namespace, operator, capfd)
    result = xcom(run, "train")
    assert result["state"] == "succeeded" and result["backend"] == backend
    metrics = result["metrics"]
    assert metrics["world_size"] == 3 and metrics["final_loss"] < metrics["initial_loss"]
    # The ranks met at the master's address the controller gives (a Service it made), answered by the DNS stand-in;
    # the script fails unless every rank ended with the same parameters.
    assert f"rank 0/3: process group ready ({master.format(job=result['job_name'])}" in out, out[-6000:]
    node.control_plane.assert_clean(namespace, user, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize(("dag_namespace", "operator"), [
    ("node_pytorchjob_nproc", PyTorchJobOperator), ("node_trainjob_nproc", TrainJobOperator),
], indirect=["dag_namespace"])
def test_replicas_of_several_processes_train_one_ddp_model_in_pods_a_controller_makes(
        node: RealNode, dag_namespace, operator: type[JobOperator], capfd):
    namespace, user = dag_namespace
    run, out = run_under_controller(node, namespace, operator, capfd)
    result = xcom(run, "train")
    # The script fails unless all 6 ranks ended with the same parameters; global rank 0 reports the group's size.
    assert result["metrics"]["world_size"] == 6 and result["metrics"]["parameters_identical"], result
    # The variables of the master's processes, from its log as the wait follows it (the only one followed here).
    assert ranks_seen(out) == ranks_expected(2, 3)[:3], out[-6000:]
    node.control_plane.assert_clean(namespace, user, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("dag_namespace", ["node_hung"], indirect=True)
def test_a_hung_job_in_real_pods_fails_with_the_real_processes_stacks(node: RealNode, dag_namespace, capfd):
    namespace, user = dag_namespace
    _, states = run_dag_at("node_hung")

    out = capfd.readouterr().out
    assert states == {"train": "failed"}, out[-6000:]
    assert "JobHungError" in out and "AirflowTaskTimeout" not in out, out[-6000:]
    # faulthandler's dump of the real processes, asked for by the shell's kill in each container (pods/exec): the
    # master and worker 0 in the all-reduce, worker 1 in its sleep.
    assert "in block_in_all_reduce" in out and "in never_join" in out, out[-6000:]
    node.control_plane.assert_clean(namespace, user, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("dag_namespace", ["node_pytorchjob_long_output"], indirect=True)
def test_an_output_document_over_the_termination_messages_limit_keeps_its_brief_and_says_so(
        node: RealNode, dag_namespace, capfd):
    namespace, user = dag_namespace
    controller = PyTorchJobOperator(node.control_plane, namespace).start()
    try:
        run, states = run_dag_at("node_pytorchjob_long_output")
    finally:
        controller.stop()

    out = capfd.readouterr().out
    assert controller.errors == []
    assert states == {"train": "success"}, out[-6000:]
    result = xcom(run, "train")
    # The kubelet kept the relay's brief: the last metrics and the model path, no history.
    assert result["metrics"] == {"loss": 1 / 400} and result["model_path"] == "/airflow-distributed/model/model.pt"
    assert xcom(run, "train", "job")["history"] == []
    assert "longer than a termination message holds (4096 bytes)" in out, out[-6000:]
    node.control_plane.assert_clean(namespace, user, timeout=120)


@contextmanager
def last_pod_states(node: RealNode, namespace: str) -> Iterator[dict[str, dict]]:
    """Each pod of ``namespace`` as last seen by an admin watch (its DELETED event carries the state the kubelet
    reported last, its containers' exit codes included), while the block runs; the watch ends with it."""
    last: dict[str, dict] = {}
    done = threading.Event()

    def watch() -> None:
        api = client.CoreV1Api(node.control_plane.admin)
        version = None
        while not done.is_set():
            try:
                for event in kube_watch.Watch().stream(api.list_namespaced_pod, namespace, resource_version=version,
                                                      timeout_seconds=2, _request_timeout=10):
                    pod = api.api_client.sanitize_for_serialization(event["object"])
                    last[pod["metadata"]["name"]] = pod
                    version = pod["metadata"]["resourceVersion"]
            except client.ApiException as error:
                if error.status != 410:
                    raise
                version = None  # expired: list again (the pods seen are kept)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield last
    finally:
        done.set()
        watcher.join(timeout=15)


def main_container_exit(pod: dict) -> int | None:
    """The exit code of the pod's main container, if the kubelet reported it terminated."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status["name"] == MAIN_CONTAINER:
            return ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
    return None


def last_statuses(last: dict[str, dict]) -> dict[str, Any]:
    """Each pod's container statuses as last seen: what an assertion about how they ended shows when it fails."""
    return {name: (pod.get("status") or {}).get("containerStatuses") for name, pod in last.items()}


def terminating_seconds(node: RealNode, namespace: str, suffix: str) -> float:
    """Seconds from the first delete of the pod of ``namespace`` whose name ends with ``suffix`` (the garbage
    collector's, or the task's) to the kubelet's, which removes it once its containers are stopped: the audit log's
    times of receipt. 0 for a pod the first delete removed at once (the API server does so when the pod has ended,
    Succeeded or Failed: nothing left to stop)."""
    deletes = [event for event in node.control_plane.audit_events()
               if event.get("verb") == "delete" and event.get("stage") == "ResponseComplete"
               and (event.get("objectRef") or {}).get("resource") == "pods"
               and not (event.get("objectRef") or {}).get("subresource")
               and (event.get("objectRef") or {}).get("namespace") == namespace
               and str((event.get("objectRef") or {}).get("name") or "").endswith(suffix)]
    first = min(received(event) for event in deletes)
    assert deletes
    by_node = [received(event) for event in deletes if event["user"]["username"].startswith("system:node:")]
    return max(by_node) - first if by_node else 0.0


def received(event: dict) -> float:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
