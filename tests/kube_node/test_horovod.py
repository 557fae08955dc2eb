"""Horovod's launcher model trained for real in real pods of the kubernetes backend: through a DAG run, a launcher
whose ``horovodrun --gloo`` reaches two workers' sshd over SSH with the job's own key pair (its Secret mounted at
``/root/.ssh``), and starts a rank on each, from ``trainer-horovod`` (torch, Horovod's wheel built for it, Debian's
OpenSSH), built and pushed at the first ask. Slow: the image weighs hundreds of megabytes."""

from __future__ import annotations

import re

import pytest

from tests.helpers import replica_lines, run_dag_at, xcom
from tests.kube_node.images import image_variable
from tests.kube_node.node import RealNode

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]


@pytest.mark.parametrize("dag_namespace", ["node_horovod", "node_horovod_deferrable"], indirect=True)
def test_horovod_trains_over_ssh_between_real_pods_and_leaves_nothing(
        node: RealNode, dag_namespace, monkeypatch, capfd):
    namespace, user = dag_namespace
    monkeypatch.setenv(image_variable("horovod"), node.framework_image("horovod"))
    run, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    result = xcom(run, "train")
    metrics = result["metrics"]
    # The script fails unless every rank ends with the same parameters (their checksums all-gathered), which on
    # different shards they only do when the gradients really were all-reduced between the pods.
    assert metrics["world_size"] == 3, metrics
    assert metrics["final_loss"] < metrics["initial_loss"], metrics
    assert result["model_path"].startswith("/airflow-distributed/model/"), result["model_path"]
    job = result["job_name"]
    # horovodrun prefixes each rank's lines with its rank; all three ranks ran on three hosts (the launcher's own
    # slot, then each worker's), started over SSH from the launcher.
    launcher = replica_lines(out, job)[f"{job}-launcher-0"]
    for rank in range(3):
        assert any(f"rank {rank}/3" in line for line in launcher), launcher[-30:]
    replicas = {r["name"]: r["state"] for r in result["replicas"]}
    assert replicas[f"{job}-launcher-0"] == "succeeded", replicas
    # Workers, whose sshd the clean-up stops once the launcher is done, are never failed; nor waited for: an sshd
    # never ends on its own, and finish_grace is for replicas that may.
    assert "failed" not in replicas.values(), replicas
    waits = re.findall(r"waiting up to \S+ for its (\d+) replica\(s\) still running", out)
    assert waits in ([], ["0"]), waits
    node.control_plane.assert_clean(namespace, user, timeout=90)
