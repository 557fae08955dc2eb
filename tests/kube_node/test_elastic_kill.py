"""A container killed mid-training on the real node: an elastic PyTorch job's worker has its container's first
process (torch's elastic agent) SIGKILLed from the host, found by its pid through containerd, once the job has saved
a checkpoint; the task recreates the worker's pod, the group re-forms and training resumes from the checkpoint, and
the job succeeds. Through a DAG run of the kubernetes backend, the task as the service account of docs/rbac.yaml."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import threading
import time

import pytest

from airflow_distributed.manifests.pod_names import MAIN_CONTAINER
from tests.dags.kube_node_capacity_dags import EVERY, STEPS
from tests.helpers import replica_lines, run_dag_at, xcom
from tests.kube_node.node import RealNode, run

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]

KILL_AFTER_STEP = 4 * EVERY
_RESUMED = re.compile(r"resuming from the checkpoint of step (\d+)")


def container_pid(node: RealNode, pod: str, container: str) -> int | None:
    """The host pid of a running container's first process, as containerd (the node's own socket) knows it."""
    ctr = ("ctr", "-a", str(node.socket), "-n", "k8s.io")
    for line in run(*ctr, "tasks", "ls").stdout.splitlines()[1:]:
        task, pid, status = line.split()[:3]
        if status != "RUNNING":
            continue
        labels = json.loads(run(*ctr, "containers", "info", task).stdout).get("Labels") or {}
        if (labels.get("io.kubernetes.pod.name"), labels.get("io.kubernetes.container.name")) == (pod, container):
            return int(pid)
    return None


class Killer(threading.Thread):
    """SIGKILLs worker-0's container (its first process) once the checkpoint of ``KILL_AFTER_STEP`` is on the host."""

    def __init__(self, node: RealNode, model_dir: str) -> None:
        super().__init__(daemon=True)
        self.node, self.model_dir = node, model_dir
        self.killed: tuple[str, int] | None = None
        self.error: str | None = None

    def run(self) -> None:
        pattern = os.path.join(self.model_dir, "checkpoints", "*", f"checkpoint-{KILL_AFTER_STEP:012d}.pkl")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (found := glob.glob(pattern)):
            time.sleep(0.1)
        if not found:
            self.error = f"no {pattern}"
            return
        worker = f"{os.path.basename(os.path.dirname(found[0]))}-worker-0"
        pid = container_pid(self.node, worker, MAIN_CONTAINER)
        if pid is None:
            self.error = f"no running container {MAIN_CONTAINER} of {worker}"
            return
        os.kill(pid, signal.SIGKILL)
        self.killed = (worker, pid)


@pytest.mark.parametrize("dag_namespace", ["node_elastic_kill"], indirect=True)
def test_a_workers_container_killed_mid_training_is_recreated_and_resumes_from_its_checkpoint(
        node: RealNode, dag_namespace, tmp_path, monkeypatch, capfd):
    namespace, user = dag_namespace
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    model_dir.chmod(0o777)
    monkeypatch.setenv("KUBE_NODE_MODEL_DIR", str(model_dir))
    killer = Killer(node, str(model_dir))
    killer.start()
    run_, states = run_dag_at("node_elastic_kill")
    killer.join(5)

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-8000:]
    assert killer.killed is not None, f"{killer.error}: the job ended before the worker could be killed"
    worker, _ = killer.killed
    job = worker.removesuffix("-worker-0")
    assert f"replica {worker} was killed (exit code 137): restarting it (1 of max_restarts=1)" in out, out[-6000:]
    record = xcom(run_, "train", "job")
    assert record["restarts"] == 1
    assert {r["name"]: r["restarts"] for r in record["replicas"]} == {f"{job}-master-0": 0, worker: 1}
    # The master's agent restarted its training process, which read the newest checkpoint: the kill came after
    # the one of KILL_AFTER_STEP was saved, so training went on from it or a later one, not from the start.
    resumed = [int(m.group(1)) for line in replica_lines(out, job)[f"{job}-master-0"]
               if (m := _RESUMED.search(line))]
    assert resumed and KILL_AFTER_STEP <= resumed[-1] < STEPS, resumed
    metrics = xcom(run_, "train")["metrics"]
    assert metrics["world_size"] == 2
    assert metrics["final_loss"] < metrics["initial_loss"]
    node.control_plane.assert_clean(namespace, user, timeout=90)
