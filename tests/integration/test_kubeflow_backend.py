"""``backend="kubeflow"`` through a real Airflow: the task submits a PyTorchJob to the API emulator, the test plays
the Kubeflow Training Operator (pods from the job's templates, ``status.conditions``) and the kubelet.

Every request crosses HTTP through the real clients, with ``kubernetes_default`` given as an environment variable.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_distributed.manifests.container_scripts import FORWARD_SIGNALS
from tests.dags.kubeflow_dags import namespace_of
from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration.kubeflow_controller import GROUP, KINDS, KubeflowController, register_kubeflow_crds
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import DOCUMENT, comes_to, crd_emulator, custom_job_watches, custom_jobs_left

PLURAL = "pytorchjobs"

#: The shared emulator (conftest), with Kubeflow's CRDs.
emulator = crd_emulator(register_kubeflow_crds)

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


def left(emu: KubeEmulator, namespace: str) -> tuple[list[str], list[str]]:
    return custom_jobs_left(emu, namespace, PLURAL, GROUP)


def settled(emu: KubeEmulator, namespace: str, expected: tuple[list[str], list[str]]) -> None:
    comes_to(lambda: left(emu, namespace), expected)


def train_and_succeed(controller: KubeflowController, document: dict = DOCUMENT, pods_watched: bool = False) -> None:
    """Play a job of a Master and two workers through to success, as the kind's operator reports it (once the job,
    and with ``pods_watched`` its pods too, are watched)."""
    controller.wait_for_job()
    kind = controller.kind
    master = controller.job["spec"][controller.specs_key]["Master"]["template"]["spec"]["containers"][0]["name"]
    controller.create_pods()
    controller.conditions(("Created", f"{kind}Created", ""))
    controller.run_all()
    controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""))
    # The verdict comes from a watch event, not from the first LIST.
    wait_until(lambda: controller.watched(pods=pods_watched), timeout=60, interval=0.02)
    controller.log("master-0", "step 1 loss 0.5", container=master)
    controller.succeed("master-0", document)
    controller.succeed("worker-0")
    controller.succeed("worker-1")
    controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""),
                          ("Succeeded", f"{kind}Succeeded", f"{kind} {controller.name} is successfully completed."))


def test_a_master_with_metrics_and_no_model_path_hands_none_downstream(emulator):
    namespace = namespace_of("kubeflow_metrics_only")
    emulator.create_namespace(namespace)
    controller = KubeflowController(emulator, namespace, PLURAL).play(
        lambda c: train_and_succeed(c, {"metrics": {"loss": 0.125}}))
    run, states = run_dag_at("kubeflow_metrics_only")
    controller.check()

    assert states == {"train": "success", "report_metrics": "success"}
    assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": None}


@pytest.mark.parametrize("dag_id", ["kubeflow_success", "kubeflow_deferrable"])
def test_a_pytorchjob_that_succeeds_hands_the_masters_output_to_xcom_and_is_deleted(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    # Its pods watched before the verdict: the test counts that watch, which a job judged at once could end unopened.
    controller = KubeflowController(emulator, namespace, PLURAL).play(lambda c: train_and_succeed(c, pods_watched=True))
    run, states = run_dag_at(dag_id)
    controller.check()

    assert set(states.values()) == {"success"}
    result = xcom(run, "train")
    assert {k: result[k] for k in ("framework", "backend", "state", "namespace")} == {
        "framework": "pytorch", "backend": "kubeflow", "state": "succeeded", "namespace": namespace}
    assert result["metrics"] == DOCUMENT["metrics"] and result["model_path"] == DOCUMENT["model_path"]
    job = result["job_name"]
    assert [(r["name"], r["role"], r["index"], r["state"], r["exit_code"]) for r in result["replicas"]] == [
        (f"{job}-master-0", "master", 0, "succeeded", 0),
        (f"{job}-worker-0", "worker", 0, "succeeded", 0),
        (f"{job}-worker-1", "worker", 1, "succeeded", 0),
    ]
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    assert xcom(run, "train", "model_path") == DOCUMENT["model_path"]
    assert xcom(run, "train", "job_name") == job
    assert xcom(run, "train", "job")["history"] == DOCUMENT["history"]
    if dag_id == "kubeflow_success":
        assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": DOCUMENT["model_path"]}
    # What was submitted: a PyTorchJob of the task's labels, the templated args in the master's command.
    submitted = controller.job
    assert submitted["kind"] == "PyTorchJob" and submitted["metadata"]["labels"]["airflow-distributed/job"] == job
    master = submitted["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert master["name"] == "pytorch" and master["command"][-4:] == ["python", "/opt/jobs/train.py", "--steps", "5"]
    assert submitted["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    # Deleted after success; its pods went with it (ownerReferences).
    settled(emulator, namespace, ([], []))
    requests = [r for r in emulator.requests if f"/namespaces/{namespace}/" in r.path]
    custom_job_watches(requests, PLURAL, job, deferred=dag_id == "kubeflow_deferrable")
    assert [r.method for r in requests if r.path.endswith(f"/{PLURAL}")].count("POST") == 1
    if dag_id == "kubeflow_deferrable":
        out = capfd.readouterr().out
        assert "waiting in the triggerer" in out
        # The trigger relays the master pod's lines (its last relay, when the job ends), once each.
        assert out.count(f"[{job}-master-0] step 1 loss 0.5") == 1


@pytest.mark.parametrize(("dag_id", "plural", "framework", "container", "port", "derived"), [
    ("kubeflow_xgboost", "xgboostjobs", "xgboost", "xgboost", ("xgboostjob-port", 9999), "DMLC_TASK_ID"),
    ("kubeflow_paddle", "paddlejobs", "paddle", "paddle", ("master", 36543), "PADDLE_TRAINER_ID"),
])
def test_a_master_and_workers_job_is_submitted_watched_and_its_masters_output_read(emulator, dag_id, plural,
                                                                                   framework, container, port,
                                                                                   derived):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    controller = KubeflowController(emulator, namespace, plural).play(train_and_succeed)
    run, states = run_dag_at(dag_id)
    controller.check()

    assert states == {"train": "success"}
    result = xcom(run, "train")
    assert (result["framework"], result["backend"], result["state"]) == (framework, "kubeflow", "succeeded")
    assert result["metrics"] == DOCUMENT["metrics"]
    specs = controller.job["spec"][KINDS[plural][2]]
    assert {rtype: spec["replicas"] for rtype, spec in specs.items()} == {"Master": 1, "Worker": 2}
    master = specs["Master"]["template"]["spec"]["containers"][0]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    assert (master["name"], master["ports"]) == (container, [{"name": port[0], "containerPort": port[1],
                                                               "protocol": "TCP"}])
    # One Worker template for every worker: the variable that differs is derived in the pod, by a shell under the
    # signal forwarder (the container's PID 1).
    assert worker["command"][:3] == ["python3", "-I", "-c"] and worker["command"][3] == FORWARD_SIGNALS
    assert worker["name"] == container and worker["command"][4:6] == ["sh", "-c"] and derived in worker["command"][6]
    assert worker["command"][-4:] == ["python", "/opt/jobs/train.py", "--steps", "5"]
    assert [r.method for r in emulator.requests if r.path.endswith(f"/{namespace}/{plural}")].count("POST") == 1
    # Deleted after success; its pods go with it (ownerReferences).
    assert emulator.list(plural, namespace, group=GROUP, version="v1") == []


def test_sigterm_to_the_task_deletes_the_pytorchjob(emulator, capfd):
    namespace = namespace_of("kubeflow_long_running")
    emulator.create_namespace(namespace)

    def script(controller: KubeflowController) -> None:
        controller.start()
        os.kill(os.getpid(), signal.SIGTERM)  # what Airflow sends a task marked failed in the UI

    controller = KubeflowController(emulator, namespace, PLURAL).play(script)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        run, states = run_dag_at("kubeflow_long_running")
    finally:
        signal.signal(signal.SIGTERM, previous)
    controller.check()

    assert states == {"train": "failed"}
    settled(emulator, namespace, ([], []))


def test_a_spec_one_pod_template_cannot_hold_is_refused_when_the_dag_is_parsed():
    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.spec import SpecValidationError

    environment = {"pytorch": {"n_workers": 2, "worker": [{"index": 1, "node_selector": {"gpu": "a100"}}]}}
    with pytest.raises(SpecValidationError, match=r"environment\.pytorch\.worker\[0\].*one pod template"):
        DistributedTrainingOperator(task_id="t", framework="pytorch", environment=environment, command=["train"],
                                    image="trainer:1", backend="kubeflow")
    # The same spec is fine for the kubernetes backend: one pod per replica.
    DistributedTrainingOperator(task_id="t", framework="pytorch", environment=environment, command=["train"],
                                image="trainer:1", backend="kubernetes")


def test_a_framework_without_a_kubeflow_resource_is_refused_when_the_dag_is_parsed():
    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.spec import SpecValidationError

    with pytest.raises(SpecValidationError, match=r"backend: framework 'jax' has no Kubeflow resource.*kubernetes"):
        DistributedTrainingOperator(task_id="t", framework="jax", environment={"jax": {"n_workers": 1}},
                                    command=["train"], image="trainer:1", backend="kubeflow")


def test_a_run_of_another_kind_starts_with_its_own_hook():
    """``start`` builds the hook its kind names (``hook_class``), as ``resume`` does: a subclass of the run that
    keeps ``start`` still talks to the cluster through its own hook."""
    from types import SimpleNamespace

    from airflow_distributed.backends.kubeflow_run import KubeflowJobRun
    from airflow_distributed.hooks.kubeflow import KubeflowJobHook
    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.spec import load_spec

    class OwnHook(KubeflowJobHook):
        pass

    class OwnRun(KubeflowJobRun):
        hook_class = OwnHook

    operator = DistributedTrainingOperator(task_id="train", framework="pytorch", command=["python", "train.py"],
                                           environment={"pytorch": {"n_workers": 1}}, image="trainer:1",
                                           backend="kubeflow", namespace="own")
    ti = SimpleNamespace(dag_id="d", task_id="train", run_id="r", map_index=-1, try_number=1)
    run = OwnRun.start(operator._task_calls(), operator._settings(), {"ti": ti},
                       load_spec("pytorch", operator.environment), "own-job", ["python", "train.py"])
    assert type(run.hook) is OwnHook and run.namespace == "own"
    assert type(KubeflowJobRun.start(operator._task_calls(), operator._settings(), {"ti": ti},
                                     load_spec("pytorch", operator.environment), "own-job",
                                     ["python", "train.py"]).hook) is KubeflowJobHook


def test_a_retry_reattaches_to_the_job_of_its_earlier_try(emulator):
    """409 on create: the running job of the earlier try is watched, not created twice."""
    from airflow_distributed.hooks.kubeflow import KubeflowJobHook
    from airflow_distributed.manifests.kubeflow_kinds import kubeflow_resource

    namespace = "kubeflow-reattach"
    emulator.create_namespace(namespace)
    hook = KubeflowJobHook(kubernetes_conn_id="kubernetes_default")
    resource = kubeflow_resource("pytorch")
    body = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "job-a", "labels": {"airflow-distributed/job": "job-a"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "pytorch", "image": "trainer:1"}]}}}}}}
    first = hook.submit_kubeflow_job(namespace, resource, body)
    again = hook.submit_kubeflow_job(namespace, resource, body)
    assert first.reattached is None and again.reattached == "pending"
    assert again.obj["metadata"]["uid"] == first.obj["metadata"]["uid"]
    # A failed one is replaced by a new object of the same name.
    emulator.update_status(PLURAL, namespace, "job-a", {"conditions": [
        {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "x"}]}, group=GROUP)
    replaced = hook.submit_kubeflow_job(namespace, resource, body)
    assert replaced.reattached is None and replaced.obj["metadata"]["uid"] != first.obj["metadata"]["uid"]


# ---------------------------------------------------------------------------------------------- pending pods


def pod_lists(emu: KubeEmulator, namespace: str) -> list:
    """The task's LISTs of the job's pods (not the watch of the object, not the output's read at the end)."""
    return [r for r in emu.requests if r.method == "GET" and r.path.endswith(f"/namespaces/{namespace}/pods")
            and not r.is_watch and "training.kubeflow.org/job-name" in r.query.get("labelSelector", "")]


def test_the_pods_are_listed_only_while_a_replica_has_not_started(emulator):
    namespace = namespace_of("kubeflow_pending_pods")
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    counts: dict[str, int] = {}

    def script(controller: KubeflowController) -> None:
        controller.wait_for_job()
        wait_until(lambda: pod_lists(emulator, namespace), timeout=60, interval=0.02)  # before any pod exists
        controller.create_pods()
        controller.conditions(("Created", "PyTorchJobCreated", ""))
        seen = len(pod_lists(emulator, namespace))
        wait_until(lambda: len(pod_lists(emulator, namespace)) >= seen + 2, timeout=60, interval=0.02)
        controller.run_all()
        ran = len(pod_lists(emulator, namespace))
        # The first LIST after every replica started is the last one.
        wait_until(lambda: len(pod_lists(emulator, namespace)) > ran, timeout=60, interval=0.02)
        counts["settled"] = len(pod_lists(emulator, namespace))
        time.sleep(1.5)  # several pending_pods_interval (0.2 s)
        counts["later"] = len(pod_lists(emulator, namespace))
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))
        controller.succeed("master-0", DOCUMENT)
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                              ("Succeeded", "PyTorchJobSucceeded", "done"))

    controller = KubeflowController(emulator, namespace, PLURAL).play(script)
    run, states = run_dag_at("kubeflow_pending_pods")
    controller.check()

    assert states == {"train": "success"}
    assert counts["settled"] >= 4
    assert counts["later"] == counts["settled"]
    settled(emulator, namespace, ([], []))
