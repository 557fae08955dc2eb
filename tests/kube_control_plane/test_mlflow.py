"""MLflow tracking (``mlflow_conn_id``) of kubernetes jobs on the real control plane, the task talking as the
service account bound to exactly the Role of docs/rbac.yaml: one run per job, with the whole history the master
reported, the params, the tags, the registered model and the final status, read back from a real tracking server
(``tests/mlflow_server.py``); waited for in the task and in the triggerer."""

from __future__ import annotations

import pytest

from tests.dags.mlflow_dags import CONN_ID, MODEL_NAME
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import Kubelet, train_and_succeed
from tests.mlflow_server import MlflowReader, serving_connection

pytestmark = [pytest.mark.usefixtures("airflow_db")]

#: The master's output document: a history longer than a few points, each at its own step.
DOCUMENT = {
    "metrics": {"loss": 0.05, "accuracy": 0.97},
    "model_path": "s3://models/nightly/run-42",
    "history": [{"step": step, "loss": round(1 / step, 6), "lr": 0.1} for step in range(1, 41)],
}


@pytest.fixture(scope="module")
def tracking():
    with serving_connection(CONN_ID) as server:
        yield server


@pytest.mark.parametrize("dag_namespace", ["test_mlflow_kubernetes", "test_mlflow_deferred"], indirect=True)
def test_a_kubernetes_job_is_one_run_with_its_history_params_tags_model_and_status(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], tracking, capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    deferred = dag_id == "test_mlflow_deferred"

    def script(kubelet: Kubelet) -> None:
        # The master ends once the job is watched (here or in the triggerer), not before: the audit log says when.
        wait_until(lambda: any(e["verb"] == "watch" for e in control_plane.audit_events(user)), timeout=60)
        train_and_succeed(kubelet, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    assert ("waiting in the triggerer" in out) == deferred
    reader = MlflowReader(tracking.uri)
    [mlflow_run] = [found for found in reader.runs(dag_id) if found.tags["airflow_distributed.run_id"] == run.run_id]
    job_name = xcom(run, "train", "job_name")
    assert (mlflow_run.status, mlflow_run.name) == ("FINISHED", job_name)
    tags = mlflow_run.tags
    assert {key: tags[f"airflow_distributed.{key}"] for key in ("backend", "framework", "job_name", "state",
                                                                "try_number", "model_path")} == {
        "backend": "kubernetes", "framework": "pytorch", "job_name": job_name, "state": "succeeded",
        "try_number": "1", "model_path": DOCUMENT["model_path"]}
    params = mlflow_run.params
    assert (params["backend"], params["replicas"], params["replicas.worker"]) == ("kubernetes", "3", "2")
    if not deferred:
        assert params["param.steps"] == "40"
        assert params["resources.worker"] == '{"cpu": {"requests": 1}}'
    # Every point of the master's history at its step; the final metrics; what the job's pods cost.
    assert reader.history(mlflow_run.run_id, "loss") == [(p["step"], p["loss"]) for p in DOCUMENT["history"]]
    assert [step for step, _ in reader.history(mlflow_run.run_id, "lr")] == list(range(1, 41))
    assert mlflow_run.metrics["accuracy"] == DOCUMENT["metrics"]["accuracy"]
    assert mlflow_run.metrics["usage.tries"] == 1
    # The model on storage, registered from its URL.
    model = MODEL_NAME + ("-deferred" if deferred else "-kubernetes")
    version = xcom(run, "train", "mlflow_model_version")
    registered = reader.model_version(model, version)
    assert (registered["source"], registered["run_id"]) == (DOCUMENT["model_path"], mlflow_run.run_id)
    assert tags["airflow_distributed.model_version"] == f"{model}/{version}"
    control_plane.assert_clean(namespace, user)
