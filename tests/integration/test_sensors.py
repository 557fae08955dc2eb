"""The sensors through a real Airflow against the API emulator: jobs of the ``kubernetes`` backend (pods with the
project's labels, made by the operator or by the test) and Kubeflow jobs (the test plays the Kubeflow operator).

Poke, reschedule and deferrable modes; success (metrics to XCom), failure (no retry, the replica named),
``soft_fail``, ``timeout``; each framework's success rule deciding whose output is read.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.dags.sensor_dags import JOB, namespace_of
from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration.kubeflow_controller import GROUP, KubeflowController, register_kubeflow_crds
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import DOCUMENT, Kubelet, Player, crd_emulator

OTHER = {"metrics": {"loss": 9.0}, "model_path": "s3://models/not-this-one"}


#: The shared emulator (conftest), with Kubeflow's CRDs.
emulator = crd_emulator(register_kubeflow_crds)


pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


# ---------------------------------------------------------------------------------------------- helpers


def labelled_pods(emu: KubeEmulator, namespace: str, job: str = JOB, framework: str = "pytorch") -> dict[str, str]:
    """A job started outside Airflow with the project's labels: a master and two workers."""
    names = {}
    for role, index, master in (("master", 0, True), ("worker", 0, False), ("worker", 1, False)):
        name = f"{job}-{role}-{index}"
        emu.create("pods", namespace, {"metadata": {"name": name, "labels": {
            "airflow-distributed/job": job, "airflow-distributed/role": role,
            "airflow-distributed/index": str(index), "airflow-distributed/master": str(master).lower()}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "base", "image": "registry.example.com/trainer:1.0",
                "env": [{"name": "AIRFLOW_DISTRIBUTED_FRAMEWORK", "value": framework}]}]}})
        emu.run_pod(namespace, name)
        names[f"{role}-{index}"] = name
    return names


def pod_lists(emu: KubeEmulator, namespace: str) -> int:
    return len([r for r in emu.requests if r.method == "GET" and r.path == f"/api/v1/namespaces/{namespace}/pods"
                and not r.is_watch])


def succeed_after_two_pokes(emu: KubeEmulator, namespace: str, pods: dict[str, str], recover: str | None = None,
                            ) -> None:
    """Once a sensor has looked twice: run the pod ``recover`` (if given), then end the master with DOCUMENT."""
    wait_until(lambda: pod_lists(emu, namespace) >= 2, timeout=60, interval=0.02)
    if recover is not None:
        emu.run_pod(namespace, pods[recover])
    emu.succeed_pod(namespace, pods["master-0"], message=json.dumps(DOCUMENT))


def ti_of(run, task_id: str = "wait"):
    return next(ti for ti in run.get_task_instances() if ti.task_id == task_id)


# ---------------------------------------------------------------------------------------------- kubernetes backend jobs


def test_a_sensor_waits_for_the_job_an_operator_started_and_pushes_its_metrics(emulator):
    namespace = namespace_of("sensor_after_operator")
    emulator.create_namespace(namespace)
    emulator.reset_requests()

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: pod_lists(emulator, namespace) >= 2, timeout=60, interval=0.02)  # the sensor pokes
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("sensor_after_operator")
    kubelet.check()

    assert states == {"train": "success", "wait": "success", "report": "success"}
    job = xcom(run, "train", "job_name")
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    assert xcom(run, "wait", "model_path") == DOCUMENT["model_path"]
    result = xcom(run, "wait")
    assert {k: result[k] for k in ("job_name", "framework", "backend", "state", "namespace")} == {
        "job_name": job, "framework": "pytorch", "backend": "kubernetes", "state": "succeeded",
        "namespace": namespace}
    assert xcom(run, "report") == {"loss": 0.125, "model_path": DOCUMENT["model_path"]}
    # Waiting is not owning: the job is left as it is.
    assert [s["metadata"]["name"] for s in emulator.list("services", namespace)] == [job]
    emulator.delete("services", namespace, job)


def test_a_sensor_hands_none_downstream_when_the_master_reported_no_model_path(emulator):
    namespace = namespace_of("sensor_metrics_only")
    emulator.create_namespace(namespace)
    pods = labelled_pods(emulator, namespace)
    emulator.succeed_pod(namespace, pods["master-0"], message=json.dumps({"metrics": {"loss": 0.25}}))

    run, states = run_dag_at("sensor_metrics_only")

    assert states == {"wait": "success", "report": "success"}
    assert xcom(run, "report") == {"loss": 0.25, "model_path": None}


@pytest.mark.parametrize(("dag_id", "message", "metrics", "warning"), [
    ("sensor_bad_report",
     json.dumps({"metrics": {"loss": float("nan"), "deep": {"a": {"b": {"c": {"d": float("inf")}}}}},
                 "model_path": "s3://models/m", "return_value": [float("-inf")]}),
     {"loss": None, "deep": {"a": {"b": {"c": {"d": None}}}}}, "the master's output document was sanitised: "),
    ("sensor_unreadable_report", "{metrics: garbage",
     {}, "the master's output document could not be read, so no metrics were taken from it: it is not JSON"),
])
def test_a_sensor_succeeds_on_a_job_whose_report_is_not_strict_json(emulator, dag_id, message, metrics, warning,
                                                                     capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    pods = labelled_pods(emulator, namespace)
    emulator.succeed_pod(namespace, pods["master-0"], message=message)

    run, states = run_dag_at(dag_id)

    assert states == {"wait": "success", "report": "success"}
    assert xcom(run, "wait", "metrics") == metrics
    assert xcom(run, "report") == {"loss": None, "model_path": "s3://models/m" if metrics else None}
    assert warning in capfd.readouterr().out


def test_a_job_still_running_at_the_timeout_fails_the_sensor(emulator, capfd):
    namespace = namespace_of("sensor_timeout")
    emulator.create_namespace(namespace)
    labelled_pods(emulator, namespace)

    started = time.monotonic()
    run, states = run_dag_at("sensor_timeout")

    assert states == {"wait": "failed"}
    assert time.monotonic() - started < 15
    assert "Sensor has timed out" in capfd.readouterr().out


PULL_ERROR = 'failed to pull image "registry.example.com/trainer:1.0": unauthorized'


def test_a_pull_that_recovers_within_the_sensors_grace_succeeds(emulator):
    namespace = namespace_of("sensor_image_pull_recovers")
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    pods = labelled_pods(emulator, namespace)
    emulator.pending_pod(namespace, pods["worker-1"], reason="ErrImagePull", message=PULL_ERROR)

    # The failed pull is seen by two pokes, then the registry answers again.
    kubelet = Player().play(
        lambda _: succeed_after_two_pokes(emulator, namespace, pods, recover="worker-1"))
    run, states = run_dag_at("sensor_image_pull_recovers")
    kubelet.check()

    assert states == {"wait": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]


def test_a_framework_sensor_refuses_another_frameworks_job(emulator, capfd):
    namespace = namespace_of("sensor_wrong_framework")
    emulator.create_namespace(namespace)
    pods = labelled_pods(emulator, namespace, framework="pytorch")
    emulator.succeed_pod(namespace, pods["master-0"], message=json.dumps(DOCUMENT))

    run, states = run_dag_at("sensor_wrong_framework")

    assert states == {"wait": "failed"}
    assert f"job {namespace}/{JOB} is a pytorch job, not tensorflow" in capfd.readouterr().out


# ---------------------------------------------------------------------------------------------- Kubeflow jobs


# framework: also the name of the main container its operator looks for.
@pytest.mark.parametrize(("dag_id", "plural", "framework", "replicas", "decides"), [
    # the Chief decides, and holds the output
    ("sensor_tfjob", "tfjobs", "tensorflow", {"Chief": 1, "Worker": 2}, "chief-0"),
    # a TFJob without a Chief: worker 0
    ("sensor_tfjob", "tfjobs", "tensorflow", {"Worker": 2}, "worker-0"),
    # a PaddleJob with a Master (this project's collective jobs): the Master
    ("sensor_paddlejob", "paddlejobs", "paddle", {"Master": 1, "Worker": 2}, "master-0"),
])
def test_a_kubeflow_sensor_reads_the_output_of_the_replica_its_success_rule_names(emulator, dag_id, plural,
                                                                                  framework, replicas, decides):
    namespace = namespace_of(dag_id)
    if emulator.get("namespaces", None, namespace) is None:
        emulator.create_namespace(namespace)
    controller = KubeflowController(emulator, namespace, plural)
    kind = controller.kind
    controller.submit(JOB, replicas, container=framework)
    pods = controller.create_pods()
    controller.run_all()
    controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""))

    def script(c: KubeflowController) -> None:
        wait_until(lambda: len([r for r in emulator.requests if r.path.endswith(f"/{plural}/{JOB}")]) >= 2,
                   timeout=60, interval=0.02)
        for key in pods:
            c.succeed(key, DOCUMENT if key == decides else OTHER)
        c.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""),
                     ("Succeeded", f"{kind}Succeeded", f"{kind} {namespace}/{JOB} successfully completed."))

    emulator.reset_requests()
    controller.play(script)
    run, states = run_dag_at(dag_id)
    controller.check()

    assert states == {"wait": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    result = xcom(run, "wait")
    assert (result["backend"], result["framework"], result["state"]) == ("kubeflow", framework, "succeeded")
    assert sorted(r["name"] for r in result["replicas"]) == sorted(pods.values())
    emulator.delete(plural, namespace, JOB, group=GROUP)  # its pods go with it (ownerReferences)
    wait_until(lambda: emulator.list("pods", namespace) == [], timeout=5, interval=0.05)


def test_a_failed_tfjob_fails_the_sensor_naming_the_replica_and_reason_without_retry(emulator, capfd):
    namespace = namespace_of("sensor_tfjob_failure")
    emulator.create_namespace(namespace)
    controller = KubeflowController(emulator, namespace, "tfjobs")
    controller.submit(JOB, {"Chief": 1, "Worker": 2}, container="tensorflow")
    pods = controller.create_pods()
    controller.run_all()
    controller.fail("worker-1", 137, "OOMKilled")
    controller.conditions(("Created", "TFJobCreated", ""), ("Running", "TFJobRunning", ""),
                          ("Failed", "TFJobFailed", f"TFJob {namespace}/{JOB} has failed because 1 Worker "
                                                    "replica(s) failed."))

    run, states = run_dag_at("sensor_tfjob_failure")

    assert states == {"wait": "failed"} and ti_of(run).try_number == 1
    out = capfd.readouterr().out
    assert (f"TFJob {namespace}/{JOB} failed: TFJobFailed: TFJob {namespace}/{JOB} has failed because 1 Worker "
            f"replica(s) failed.; replica {pods['worker-1']} exited with code 137 (OOMKilled)") in out


@pytest.mark.parametrize("dag_id", ["sensor_pytorchjob_image_pull", "sensor_pytorchjob_image_pull_reschedule",
                                    "sensor_pytorchjob_image_pull_deferrable"])
def test_a_pytorchjob_sensor_fails_on_a_failed_image_pull_and_deletes_nothing(emulator, capfd, dag_id):
    # The object stays "Created": only the pods tell it (listed while a replica has not started), in every mode.
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    controller = KubeflowController(emulator, namespace, "pytorchjobs")
    controller.submit(JOB, {"Master": 1, "Worker": 1}, container="pytorch")
    controller.create_pods()
    controller.conditions(("Created", "PyTorchJobCreated", ""))
    emulator.run_pod(namespace, controller.pods["master-0"])
    emulator.pending_pod(namespace, controller.pods["worker-0"], reason="ImagePullBackOff", message=PULL_ERROR)

    run, states = run_dag_at(dag_id)

    assert states == {"wait": "failed"}
    assert (f'replica {controller.pods["worker-0"]}: image "registry.example.com/trainer:1.0" could not be pulled '
            f"(ImagePullBackOff: {PULL_ERROR})") in capfd.readouterr().out
    assert ti_of(run).try_number == 1
    assert controller.get(JOB) is not None and len(emulator.list("pods", namespace)) == 2  # a sensor deletes nothing


def test_a_sensor_refuses_a_kind_of_another_framework():
    from airflow_distributed.manifests.kubeflow_kinds import KINDS
    from airflow_distributed.sensors import DistributedJobSensor, MXNetJobSensor, TensorflowJobSensor
    from airflow_distributed.sensors.base import KIND_FRAMEWORK

    assert {kind.kind: framework for framework, kind in KINDS.items()} == KIND_FRAMEWORK
    assert MXNetJobSensor(task_id="s", job_name="j", kind="kubeflow").kind == "MXJob"
    with pytest.raises(ValueError, match="a PyTorchJob is a pytorch job, not tensorflow"):
        TensorflowJobSensor(task_id="s", job_name="j", kind="PyTorchJob")
    with pytest.raises(ValueError, match="kind='kubeflow' needs a framework"):
        DistributedJobSensor(task_id="s", job_name="j", kind="kubeflow")


def test_the_xgboost_sensor_takes_the_xgboostjob_and_the_jax_sensor_has_no_kubeflow_kind():
    from airflow_distributed.sensors import JaxJobSensor, PaddleJobSensor, XGBoostJobSensor

    assert XGBoostJobSensor(task_id="s", job_name="j", kind="kubeflow").kind == "XGBoostJob"
    assert PaddleJobSensor(task_id="s", job_name="j", kind="kubeflow").kind == "PaddleJob"
    assert JaxJobSensor(task_id="s", job_name="j").kind is None
    with pytest.raises(ValueError, match="jax has no Kubeflow kind; use kind=None"):
        JaxJobSensor(task_id="s", job_name="j", kind="kubeflow")
