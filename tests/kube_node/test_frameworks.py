"""TensorFlow, JAX, XGBoost, MXNet and Paddle (collective, and parameter servers) trained for real in real pods of the
kubernetes backend: a DAG run each, the replicas exchanging gradients (or histograms, or weights through parameter
servers) between pods by their DNS names, from an image of the framework's CPU wheels built and pushed at the first
ask. Slow: each image weighs hundreds of megabytes, pulled by the node once a session."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_dag_at, xcom
from tests.kube_node.images import image_variable
from tests.kube_node.node import RealNode

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]

#: framework -> (its replicas' names after the job's, the master's first; the world size its script reports; what
#: each replica prints once it has joined the others).
JOBS = {
    "tensorflow": (["chief-0", "worker-0", "worker-1"], 3, "replicas in sync"),
    "jax": (["master-0", "worker-0", "worker-1"], 3, "local of 3 devices"),
    "xgboost": (["master-0", "worker-0", "worker-1"], 3, "task "),
    # The scheduler and the server run ps-lite; only the two workers train (and count in the world size).
    "mxnet": (["scheduler-0", "server-0", "worker-0", "worker-1"], 2, "ps-lite|key-value store dist_sync ready"),
    "paddle": (["master-0", "worker-0", "worker-1"], 3, "endpoint "),
    # Only the trainers count in the world size; each pserver says where it serves.
    "paddle_ps": (["master-0", "worker-0", "pserver-0", "pserver-1"], 2,
                  r"trainer \d/2: 2 pservers|pserver \d/2: serving"),
}


@pytest.mark.parametrize(("dag_namespace", "framework"), [(f"node_{name}", name) for name in JOBS],
                         indirect=["dag_namespace"])
def test_a_framework_trains_between_real_pods_and_leaves_nothing(
        node: RealNode, dag_namespace, framework: str, monkeypatch, tmp_path, capfd):
    namespace, user = dag_namespace
    monkeypatch.setenv(image_variable(framework), node.framework_image(framework))
    monkeypatch.setenv("KUBE_NODE_MODEL_DIR", str(tmp_path))
    run, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    result = xcom(run, "train")
    metrics = result["metrics"]
    names, world_size, joined = JOBS[framework]
    assert metrics["world_size"] == world_size, metrics
    assert metrics["final_loss"] < metrics["initial_loss"], metrics
    # Each script fails unless its replicas ended alike (weights, parameters or boosters compared across them),
    # which they only are when the exchange between the pods really happened; these sums are its own checks too.
    if framework == "jax":
        assert metrics["psum"] == metrics["psum_expected"] == 6, metrics
    if framework in ("xgboost", "paddle"):
        assert metrics["allreduce_sum"] == metrics["allreduce_expected"] == 6, metrics
    assert result["model_path"].startswith("/airflow-distributed/model/"), result["model_path"]
    job = result["job_name"]
    pods = [f"{job}-{name}" for name in names]
    assert sorted(r["name"] for r in result["replicas"]) == sorted(pods)
    assert {r["name"]: r["state"] for r in result["replicas"]}[pods[0]] == "succeeded"
    if framework == "xgboost":
        # Its workers run a second or two: the kubelet may report one only after the master ended, and the final
        # table must still say how it ended (the clean-up's look at replicas last seen starting).
        assert {r["name"]: r["state"] for r in result["replicas"]} == dict.fromkeys(pods, "succeeded"), result
    for pod in pods:
        # Every replica's lines are followed into the task log (log_replicas="all"), each after its pod's name.
        assert re.search(rf"\[{re.escape(pod)}\] .*({joined})", out), pod
    node.control_plane.assert_clean(namespace, user, timeout=90)
