"""TensorFlow, JAX and XGBoost trained for real in real pods of the kubernetes backend: a DAG run each, three
replicas exchanging gradients (or histograms) between pods by their DNS names, from an image of the framework's CPU
wheels built and pushed at the first ask. Slow: each image weighs hundreds of megabytes, pulled by the node once a
session."""

from __future__ import annotations

import pytest

from tests.dags.kube_node_framework_dags import image_variable
from tests.helpers import replica_lines, run_dag_at, xcom
from tests.kube_node.node import RealNode

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]

#: framework -> (the replica reporting, a line every replica prints once it joined the others).
JOINED = {
    "tensorflow": ("chief-0", "replicas in sync"),
    "jax": ("master-0", "local of 3 devices"),
    "xgboost": ("master-0", "task "),
}


@pytest.mark.parametrize(("dag_namespace", "framework"), [
    ("node_tensorflow", "tensorflow"), ("node_jax", "jax"), ("node_xgboost", "xgboost"),
], indirect=["dag_namespace"])
def test_a_framework_trains_between_real_pods_and_leaves_nothing(
        node: RealNode, dag_namespace, framework: str, monkeypatch, capfd):
    namespace, user = dag_namespace
    monkeypatch.setenv(image_variable(framework), node.framework_image(framework))
    run, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    result = xcom(run, "train")
    metrics = result["metrics"]
    assert metrics["world_size"] == 3, metrics
    assert metrics["final_loss"] < metrics["initial_loss"], metrics
    # Each script fails unless the replicas ended alike (weights, parameters or boosters compared across them),
    # which they only do when the exchange between the pods really happened; these are its own checks too.
    if framework == "jax":
        assert metrics["psum"] == metrics["psum_expected"] == 6, metrics
    if framework == "xgboost":
        assert metrics["allreduce_sum"] == metrics["allreduce_expected"] == 6, metrics
    job = result["job_name"]
    master, joined = JOINED[framework]
    assert result["model_path"].startswith("/airflow-distributed/model/"), result["model_path"]
    lines = replica_lines(out, job)
    assert sorted(lines) == sorted({f"{job}-{master}", f"{job}-worker-0", f"{job}-worker-1"}), sorted(lines)
    for pod, printed in lines.items():
        assert any(joined in line for line in printed), (pod, printed[-20:])
    assert {r["name"]: r["state"] for r in result["replicas"]}[f"{job}-{master}"] == "succeeded"
    node.control_plane.assert_clean(namespace, user, timeout=90)
