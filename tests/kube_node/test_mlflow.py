"""MLflow tracking of a job whose replicas are real containers: the real master's history, params, tags, final
status, read back from a real tracking server (``tests/mlflow_server.py``). The task logs from
the Airflow side what its job record holds, so the pods need no MLflow client and reach no tracking server."""

from __future__ import annotations

import pytest

from tests.dags.kube_node_mlflow_dags import MODEL, STEPS
from tests.dags.mlflow_dags import CONN_ID
from tests.helpers import run_dag_at, xcom
from tests.kube_node.node import RealNode
from tests.mlflow_server import MlflowReader, serving_connection

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]


@pytest.mark.parametrize("dag_namespace", ["node_mlflow"], indirect=True)
def test_a_job_in_real_pods_is_one_mlflow_run_with_the_masters_history(
        node: RealNode, dag_namespace, capfd):
    namespace, user = dag_namespace
    with serving_connection(CONN_ID) as server:
        run, states = run_dag_at("node_mlflow")
        out = capfd.readouterr().out
        assert states == {"train": "success"}, out[-6000:]
        reader = MlflowReader(server.uri)
        [mlflow_run] = reader.runs("node_mlflow")
        job = xcom(run, "train", "job_name")
        metrics = xcom(run, "train", "metrics")
        assert (mlflow_run.status, mlflow_run.name) == ("FINISHED", job)
        assert mlflow_run.tags["airflow_distributed.backend"] == "kubernetes"
        assert mlflow_run.tags["airflow_distributed.state"] == "succeeded"
        assert (mlflow_run.params["replicas"], mlflow_run.params["param.steps"]) == ("3", str(STEPS))
        # Every second step, as the real master reported it, at its step; the final metrics as XCom has them.
        history = reader.history(mlflow_run.run_id, "loss")
        assert [step for step, _ in history] == list(range(2, STEPS + 1, 2)), history
        assert history[-1][1] < history[0][1], history
        assert mlflow_run.metrics["final_loss"] == pytest.approx(metrics["final_loss"])
        assert mlflow_run.metrics["world_size"] == 3
        # The model stayed in the master pod's own model directory, which the task cannot read or the registry
        # point at: not registered, said once, and the job a success all the same.
        path = "/airflow-distributed/model/model.pt"
        assert xcom(run, "train", "model_path") == path
        assert xcom(run, "train", "mlflow_model_version") is None
        assert reader.model_versions(MODEL) == []
        assert out.count(f"the model is not registered as {MODEL}: its path {path} is neither uploaded nor a URL") == 1
    node.control_plane.assert_clean(namespace, user, timeout=90)
