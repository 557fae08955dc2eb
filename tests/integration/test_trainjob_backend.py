"""``backend="trainjob"`` through a real Airflow: the task submits a Kubeflow Trainer v2 TrainJob to the API
emulator, which serves the TrainJob CRD with its strict schema; the test plays the Trainer controller and JobSet
(node pods with JobSet's labels, ``status.conditions``, ``status.trainerStatus``) and the kubelet.

Every request crosses HTTP through the real clients, with ``kubernetes_default`` given as an environment variable.
The task creates its TrainJob with ``fieldValidation=Strict``: a field the schema does not have fails the create.
"""

from __future__ import annotations

import os
import signal

import jsonschema
import pytest

from tests.dags.trainjob_dags import namespace_of
from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration.trainjob_controller import (
    GROUP,
    MPI_NODE_IMAGE,
    MPI_RUNTIME,
    PLURAL,
    VERSION,
    TrainerController,
    register_trainjob_crd,
    trainjob_schema,
)
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import DOCUMENT, comes_to, crd_emulator, custom_job_watches, custom_jobs_left

#: The shared emulator (conftest), serving the TrainJob CRD.
emulator = crd_emulator(register_trainjob_crd)

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


def left(emu: KubeEmulator, namespace: str) -> tuple[list[str], list[str]]:
    return custom_jobs_left(emu, namespace, PLURAL, GROUP, VERSION)


def settled(emu: KubeEmulator, namespace: str, expected: tuple[list[str], list[str]]) -> None:
    comes_to(lambda: left(emu, namespace), expected)


def train_and_complete(controller: TrainerController, document: dict = DOCUMENT, pods_watched: bool = False) -> None:
    controller.start(pods_watched)
    controller.write_status(active=1, progress={"progressPercentage": 45, "estimatedRemainingSeconds": 3600,
                                                "metrics": [{"name": "loss", "value": "0.25"}]})
    controller.log(0, "step 1 loss 0.5")
    controller.succeed(0, document)
    controller.succeed(1)
    controller.succeed(2)
    controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")


@pytest.mark.parametrize("dag_id", ["trainjob_success", "trainjob_deferrable"])
def test_a_trainjob_that_completes_hands_node_0s_output_to_xcom_and_is_deleted(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    # Its pods watched before the verdict: the test counts that watch, which a job judged at once could end unopened.
    controller = TrainerController(emulator, namespace).play(lambda c: train_and_complete(c, pods_watched=True))
    run, states = run_dag_at(dag_id)
    controller.check()

    assert states == {"train": "success", "report_metrics": "success"}
    result = xcom(run, "train")
    assert {k: result[k] for k in ("framework", "backend", "state", "namespace")} == {
        "framework": "pytorch", "backend": "trainjob", "state": "succeeded", "namespace": namespace}
    assert result["metrics"] == DOCUMENT["metrics"] and result["model_path"] == DOCUMENT["model_path"]
    job = result["job_name"]
    assert [(r["name"], r["role"], r["index"], r["state"], r["exit_code"]) for r in result["replicas"]] == [
        (f"{job}-node-0-0-x0k2p", "master", 0, "succeeded", 0),
        (f"{job}-node-0-1-x1k2p", "worker", 0, "succeeded", 0),
        (f"{job}-node-0-2-x2k2p", "worker", 1, "succeeded", 0),
    ]
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    assert xcom(run, "train", "model_path") == DOCUMENT["model_path"]
    assert xcom(run, "train", "job")["history"] == DOCUMENT["history"]
    assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": DOCUMENT["model_path"]}
    # What was submitted: the strict schema holds it, and the spec's settings are where Trainer reads them.
    submitted = controller.job
    jsonschema.Draft7Validator(trainjob_schema()).validate(submitted)
    assert submitted["metadata"]["labels"]["airflow-distributed/job"] == job
    assert submitted["spec"]["runtimeRef"] == {"apiGroup": GROUP, "kind": "ClusterTrainingRuntime",
                                               "name": "torch-distributed"}
    trainer = submitted["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (
        3, 1, "registry.example.com/trainer:1.0")
    assert trainer["resourcesPerNode"] == {"requests": {"cpu": "1", "memory": "512Mi"},
                                           "limits": {"cpu": "2", "memory": "1024Mi"}}
    assert trainer["command"][-4:] == ["python", "/opt/jobs/train.py", "--steps", "5"]
    assert not {"PET_NNODES", "MASTER_ADDR", "RANK"} & {e["name"] for e in trainer["env"]}
    pod = submitted["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod_spec = pod["template"]["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"pool": "training"}
    assert pod_spec["tolerations"] == [{"key": "training", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["template"]["spec"]["template"]["metadata"]["labels"]["team"] == "vision"
    out = capfd.readouterr().out
    if dag_id == "trainjob_success":
        assert "45% done, about 1h00m left; loss=0.25" in out  # status.trainerStatus, logged as it changed
        # ... and published for the job view while the job ran (the last change: complete, progress kept).
        live = xcom(run, "train", "job_live")
        assert (live["backend"], live["state"], live["progress"], live["metrics"]) == (
            "trainjob", "succeeded", {"percent": 45, "eta_seconds": 3600}, {"loss": "0.25"})
    else:
        assert "waiting in the triggerer" in out
    # Deleted after success; its pods went with it (ownerReferences).
    settled(emulator, namespace, ([], []))
    requests = [r for r in emulator.requests if f"/namespaces/{namespace}/" in r.path]
    creates = [r for r in requests if r.path.endswith(f"/{PLURAL}") and r.method == "POST"]
    assert len(creates) == 1 and creates[0].query.get("fieldValidation") == "Strict"
    custom_job_watches(requests, PLURAL, job, deferred=dag_id == "trainjob_deferrable")


def test_an_xgboost_trainjob_references_the_xgboost_runtime_and_hands_node_0s_output_to_xcom(emulator):
    namespace = namespace_of("trainjob_xgboost")
    emulator.create_namespace(namespace)
    controller = TrainerController(emulator, namespace).play(train_and_complete)
    run, states = run_dag_at("trainjob_xgboost")
    controller.check()

    assert states == {"train": "success", "report_metrics": "success"}
    result = xcom(run, "train")
    assert (result["framework"], result["backend"], result["state"]) == ("xgboost", "trainjob", "succeeded")
    job = result["job_name"]
    assert [(r["name"], r["role"], r["index"], r["state"]) for r in result["replicas"]] == [
        (f"{job}-node-0-0-x0k2p", "master", 0, "succeeded"),
        (f"{job}-node-0-1-x1k2p", "worker", 0, "succeeded"),
        (f"{job}-node-0-2-x2k2p", "worker", 1, "succeeded"),
    ]
    assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": DOCUMENT["model_path"]}
    submitted = controller.job
    jsonschema.Draft7Validator(trainjob_schema()).validate(submitted)
    assert submitted["spec"]["runtimeRef"] == {"apiGroup": GROUP, "kind": "ClusterTrainingRuntime",
                                               "name": "xgboost-distributed"}
    trainer = submitted["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and "numProcPerNode" not in trainer
    # The runtime reserves DMLC_*: the node prologue sets the contract's values when the node starts.
    assert not [e["name"] for e in trainer["env"] if e["name"].startswith("DMLC_")]
    assert "DMLC_TASK_ID" in trainer["command"][2]
    settled(emulator, namespace, ([], []))


def test_a_horovod_trainjob_runs_its_launcher_on_the_mpi_runtime_and_hands_its_output_to_xcom(emulator):
    namespace = namespace_of("trainjob_horovod")
    emulator.create_namespace(namespace)
    seen: dict = {}

    def script(controller: TrainerController) -> None:
        controller.start()
        seen["pods"] = {o["metadata"]["name"]: o for o in emulator.list("pods", namespace)}
        # Only the launcher ends (JobSet's success policy targets it); the nodes' sshd runs until the job is gone.
        controller.succeed(0, DOCUMENT)
        controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller = TrainerController(emulator, namespace).play(script)
    run, states = run_dag_at("trainjob_horovod")
    controller.check()

    assert states == {"train": "success", "report_metrics": "success"}
    result = xcom(run, "train")
    assert (result["framework"], result["backend"], result["state"]) == ("horovod", "trainjob", "succeeded")
    job = result["job_name"]
    assert [(r["name"], r["role"], r["index"], r["state"]) for r in result["replicas"]] == [
        (f"{job}-launcher-0-0-x0m7q", "launcher", 0, "succeeded"),
        (f"{job}-node-0-0-x1m7q", "worker", 0, "running"),
        (f"{job}-node-0-1-x2m7q", "worker", 1, "running"),
    ]
    assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": DOCUMENT["model_path"]}
    submitted = controller.job
    jsonschema.Draft7Validator(trainjob_schema()).validate(submitted)
    assert submitted["spec"]["runtimeRef"] == {"apiGroup": GROUP, "kind": "ClusterTrainingRuntime",
                                               "name": MPI_RUNTIME}
    trainer = submitted["spec"]["trainer"]
    # runLauncherAsNode: the launcher is node 0, so 3 nodes are the launcher and 2 node pods; 2 GPUs -> 2 slots.
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 2)
    assert trainer["command"][-9:] == ["horovodrun", "-np", "6", "--hostfile", "/etc/mpi/hostfile", "python",
                                       "/opt/jobs/train.py", "--steps", "5"]
    assert not [e["name"] for e in trainer["env"] if e["name"].startswith("OMPI_MCA_")]  # reserved by the plugin
    patched = submitted["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [p["name"] for p in patched] == ["launcher", "node"]
    # The hostfile horovodrun reads lists every pod with the slots its -np counts.
    assert controller.hostfile == (f"{job}-launcher-0-0.{job} slots=2\n{job}-node-0-0.{job} slots=2\n"
                                   f"{job}-node-0-1.{job} slots=2\n")
    launcher = seen["pods"][f"{job}-launcher-0-0-x0m7q"]["spec"]
    assert {m["mountPath"] for m in launcher["containers"][0]["volumeMounts"]} >= {"/etc/mpi", "/airflow/xcom"}
    assert seen["pods"][f"{job}-node-0-0-x1m7q"]["spec"]["containers"][0]["image"] == MPI_NODE_IMAGE
    settled(emulator, namespace, ([], []))


def run_failing(emulator: KubeEmulator, capfd, dag_id: str, rank: int, code: int, lines: tuple[str, ...], job: str):
    """Run ``dag_id`` while node ``rank`` fails with ``code`` after logging ``lines``; the TrainJob then fails
    with the JobSet's reason for replicated job ``job``, and so does the task. Returns the run, the failed pod's
    name and the task's output."""
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(controller: TrainerController) -> None:
        controller.start()
        controller.log(rank, *lines)
        controller.fail(rank, code)
        controller.condition("Failed", "True", "FailedJobs", f"jobset failed due to: 1 failed job(s) in {job}")

    controller = TrainerController(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    controller.check()
    assert states == {"train": "failed"}
    return run, controller.pods[rank], capfd.readouterr().out


def test_a_failed_horovod_launcher_fails_the_task_naming_it_and_nothing_is_left(emulator, capfd):
    namespace = namespace_of("trainjob_horovod_failure")
    run, launcher, out = run_failing(emulator, capfd, "trainjob_horovod_failure", 0, 1, (
        "[1]<stderr>:RuntimeError: Horovod has been shut down", "horovodrun: rank 1 failed"), "launcher")
    assert f"replica {launcher} exited with code 1" in out and "horovodrun: rank 1 failed" in out
    record = xcom(run, "train", "job")
    assert {r["name"]: (r["role"], r["index"], r["state"]) for r in record["replicas"]}[launcher] == (
        "launcher", 0, "failed")
    # clean_pod_policy="all": the TrainJob goes, and its launcher, sshd nodes, hostfile and keys with it.
    settled(emulator, namespace, ([], []))
    assert emulator.list("configmaps", namespace) == [] and emulator.list("secrets", namespace) == []


def test_sigterm_to_the_task_deletes_the_trainjob_and_its_nodes(emulator):
    namespace = namespace_of("trainjob_long_running")
    emulator.create_namespace(namespace)

    def script(controller: TrainerController) -> None:
        controller.start()
        os.kill(os.getpid(), signal.SIGTERM)  # what Airflow sends a task marked failed in the UI

    controller = TrainerController(emulator, namespace).play(script)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        run, states = run_dag_at("trainjob_long_running")
    finally:
        signal.signal(signal.SIGTERM, previous)
    controller.check()

    assert states == {"train": "failed"}
    assert len(controller.pods) == 3
    settled(emulator, namespace, ([], []))


def test_a_retry_reattaches_to_the_trainjob_of_its_earlier_try_and_replaces_a_failed_one(emulator):
    """409 on create: the running TrainJob of the earlier try is watched, not created twice."""
    from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook

    namespace = "trainjob-reattach"
    emulator.create_namespace(namespace)
    hook = TrainJobHook(kubernetes_conn_id="kubernetes_default")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
            "metadata": {"name": "job-a", "labels": {"airflow-distributed/job": "job-a"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2, "image": "t:1"}}}
    first = hook.submit_kubeflow_job(namespace, TRAINJOB, body, field_validation="Strict")
    again = hook.submit_kubeflow_job(namespace, TRAINJOB, body, field_validation="Strict")
    assert first.reattached is None and again.reattached == "pending"
    assert again.obj["metadata"]["uid"] == first.obj["metadata"]["uid"]
    emulator.update_status(PLURAL, namespace, "job-a", {"conditions": [
        {"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "x",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}, group=GROUP, version=VERSION)
    replaced = hook.submit_kubeflow_job(namespace, TRAINJOB, body)
    assert replaced.reattached is None and replaced.obj["metadata"]["uid"] != first.obj["metadata"]["uid"]


def test_a_field_the_trainjob_crd_does_not_have_is_refused_by_the_strict_create(emulator):
    from airflow_distributed.hooks.api_retry import KubernetesJobError
    from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook

    namespace = "trainjob-strict"
    emulator.create_namespace(namespace)
    hook = TrainJobHook(kubernetes_conn_id="kubernetes_default")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainJob",
            "metadata": {"name": "job-b", "labels": {"airflow-distributed/job": "job-b"}},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNode": 2}}}
    with pytest.raises(KubernetesJobError, match="numNode"):
        hook.submit_kubeflow_job(namespace, TRAINJOB, body, field_validation="Strict")


# ---------------------------------------------------------------------------------------------- parse time


def _operator(environment, framework="pytorch", **kwargs):
    from airflow_distributed.operators import DistributedTrainingOperator

    return DistributedTrainingOperator(task_id="t", framework=framework, environment=environment, command=["train"],
                                       image="trainer:1", backend="trainjob", **kwargs)


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_a_framework_without_a_trainer_runtime_is_refused_when_the_dag_is_parsed_naming_backend(framework):
    from airflow_distributed.spec import SpecValidationError

    with pytest.raises(SpecValidationError, match=rf"backend: .*'{framework}'.*no Kubeflow Trainer v2 runtime.*"
                                                  r"backend='kubernetes'.*backend='kubeflow'"):
        _operator({framework: {"n_workers": 2}}, framework=framework)


def test_per_index_settings_are_refused_when_the_dag_is_parsed():
    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.spec import SpecValidationError

    environment = {"pytorch": {"n_workers": 2, "worker": [{"index": 1, "node_selector": {"gpu": "a100"}}]}}
    with pytest.raises(SpecValidationError, match=r"environment\.pytorch\.worker\[0\]: index 1 has settings of its "
                                                  r"own \(node_selector\).*one pod template"):
        _operator(environment)
    workers = {"resources": {"gpu": {"requests": 1, "limits": 1}}}
    with pytest.raises(SpecValidationError, match=r"environment\.pytorch\.default_worker: has its own resources"):
        _operator({"pytorch": {"n_workers": 2, "default_worker": workers}})
    # The same settings on every node are fine, and the kubernetes backend takes per-index settings.
    _operator({**workers, "pytorch": {"n_workers": 2, "default_worker": workers}})
    DistributedTrainingOperator(task_id="t", framework="pytorch", environment=environment, command=["train"],
                                image="trainer:1", backend="kubernetes")


def test_n_proc_per_node_is_taken_by_the_pod_backends_as_by_trainjob():
    from airflow_distributed.operators import DistributedTrainingOperator

    environment = {"pytorch": {"n_workers": 1, "n_proc_per_node": 4}}
    _operator(environment)
    for backend in ("kubernetes", "kubeflow"):
        DistributedTrainingOperator(task_id="t", framework="pytorch", environment=environment, command=["train"],
                                    image="trainer:1", backend=backend)


# ---------------------------------------------------------------------------------------------- sensors


def test_a_deferred_trainjob_sensor_watches_a_trainjob_started_elsewhere_and_reads_node_0(emulator, capfd):
    namespace = namespace_of("trainjob_sensor_deferrable")
    emulator.create_namespace(namespace)
    controller = TrainerController(emulator, namespace)
    controller.submit("external-trainjob", nodes=2)
    controller.create_pods()
    controller.run_all()
    controller.write_status(active=1)
    emulator.reset_requests()

    def script(c: TrainerController) -> None:
        wait_until(c.watched, timeout=60, interval=0.02)
        c.succeed(0, DOCUMENT)
        c.succeed(1)
        c.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller.play(script)
    run, states = run_dag_at("trainjob_sensor_deferrable")
    controller.check()

    assert states == {"wait": "success"}
    result = xcom(run, "wait")
    assert (result["backend"], result["state"], result["metrics"]) == ("trainjob", "succeeded", DOCUMENT["metrics"])
    assert [(r["role"], r["index"]) for r in result["replicas"]] == [("master", 0), ("worker", 0)]
    assert "waiting in the triggerer" in capfd.readouterr().out
    watches = [r for r in emulator.requests if r.is_watch and f"/{PLURAL}" in r.path]
    assert watches and "fieldSelector" not in watches[0].query  # the kind's watch, shared in the namespace
    assert controller.get() is not None  # a sensor deletes nothing


def test_a_failed_trainjob_fails_the_framework_sensor_naming_the_node_without_retry(emulator, capfd):
    namespace = namespace_of("trainjob_sensor_failure")
    emulator.create_namespace(namespace)
    controller = TrainerController(emulator, namespace)
    controller.submit("external-trainjob", nodes=2)
    pods = controller.create_pods()
    controller.run_all()
    controller.fail(1, 137, "OOMKilled")
    controller.condition("Failed", "True", "FailedJobs", "jobset failed due to: 1 failed job(s) in node")

    run, states = run_dag_at("trainjob_sensor_failure")

    assert states == {"wait": "failed"}
    assert (f"TrainJob {namespace}/external-trainjob failed: FailedJobs: jobset failed due to: 1 failed job(s) in "
            f"node; replica {pods[1]} exited with code 137 (OOMKilled)") in capfd.readouterr().out


def test_the_sensors_of_frameworks_without_a_trainer_runtime_refuse_kind_trainjob():
    from airflow_distributed.sensors import MXNetJobSensor, PytorchJobSensor, TensorflowJobSensor, TrainJobSensor

    assert PytorchJobSensor(task_id="s", job_name="j", kind="TrainJob").kind == "TrainJob"
    assert TrainJobSensor(task_id="s", job_name="j").kind == "TrainJob"
    for sensor in (TensorflowJobSensor, MXNetJobSensor):
        with pytest.raises(ValueError, match="has no Kubeflow Trainer v2 runtime, so no TrainJob"):
            sensor(task_id="s", job_name="j", kind="TrainJob")
