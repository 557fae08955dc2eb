"""On the real node (``tests/kube_node``): a job's start, phase by phase, through the operator vs the same pods made
by hand; and the PyTorch DDP example's run time on ``kubernetes`` vs ``local``.

A real kubelet, containerd and CNI beside the real control plane, started for the benchmark and stopped after it
(root, ``make kube``; one real node per machine: run it under ``flock /tmp/realnode-queue.lock``). The job is the
PyTorch example's script (``pytorch_ddp.py``, gloo, 20 steps, a loss line each step) as 3 and as 12 replicas, each
asking 50m of CPU and 64 MiB (so that 12 fit on the node), from the node's ``trainer`` image:

- ``operator``: ``DistributedTrainingOperator(backend="kubernetes")`` in a real Airflow (``dag.test()`` on SQLite),
  the task talking as the service account of ``docs/rbac.yaml``; its own record, the ``job`` XCom's ``startup``
  (seconds from the job's creation: ``scheduled``, ``running`` (the last replica's main container started),
  ``rendezvous`` (the master's first progress record));
- ``plain``: the same pods created by hand with the plain kubernetes client (no operator): a headless Service, one
  pod per rank with ``MASTER_ADDR``/``RANK``/``WORLD_SIZE`` and a wait until the master's name resolves (what the
  operator's readiness step does), restart policy ``Never``;
- both watched by the same observer (admin LISTs of the namespace's pods and reads of the master's log every
  0.2 s): from the submit (the task's start; the first create) to every replica's main container running, and to
  the master's first ``step N batch loss`` line (the first training step every rank took).

Rounds alternate the sides; figures are medians. The DDP ratio: the task's run time (``dag.test()``, task start to
end) of the 3-replica operator job on ``kubernetes`` vs the same script and arguments on ``local``.

    flock /tmp/realnode-queue.lock env PYTHONPATH=$PWD .venv/bin/python bench/kube_node_startup.py [--rounds 3]

Not in ``run.py``: it needs root and the node's binaries.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from tests.kube_control_plane.control_plane import ControlPlane

SIZES = (3, 12)
STEPS = 20
#: A loss line at each step: the first one is the first step every rank took.
ARGS = ["--steps", str(STEPS), "--log-every", "1"]
NAMESPACE, PLAIN_NAMESPACE = "bench-node", "bench-node-plain"
TRAINING_DIR = "/opt/airflow-distributed/training"
CPU, MEMORY_MIB, MEMORY_LIMIT_MIB = "50m", 64, 768
_STEP = re.compile(r"^step \d+ batch loss", re.MULTILINE)

DAG_FILE = '''
import pendulum
from airflow.sdk import DAG
from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
ARGS = {args!r}
for replicas in {sizes!r}:
    with DAG(dag_id=f"bench_node_{{replicas}}", schedule=None, start_date=START, catchup=False) as dag:
        DistributedTrainingOperator(
            task_id="train", framework="pytorch", image={image!r}, backend="kubernetes", namespace={namespace!r},
            command=["python3", "{training}/pytorch_ddp.py"], args=ARGS,
            environment={{"resources": {{"cpu": {{"requests": 0.05}},
                                         "memory": {{"requests": {memory}, "limits": {limit}}}}},
                          "pytorch": {{"n_workers": replicas - 1}}}},
            startup_timeout=300, logging_interval=1)
    globals()[dag.dag_id] = dag

with DAG(dag_id="bench_node_local_3", schedule=None, start_date=START, catchup=False) as dag:
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", environment={{"pytorch": {{"n_workers": 2}}}},
        command=["python", {local_script!r}], args=ARGS)
'''


class Observer(threading.Thread):
    """When every pod of a namespace (``expected`` of them) first had its main container running, and when the
    master's log first showed a training step: wall-clock times, read by the admin every 0.2 s."""

    def __init__(self, plane: ControlPlane, namespace: str, expected: int, main: str) -> None:
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(plane.admin)
        self.namespace, self.expected, self.main = namespace, expected, main
        self.running: float | None = None
        self.first_step: float | None = None
        #: the last failed read of the master's log (a run that never saw a step says why)
        self.log_error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and self.first_step is None:
            try:
                self.look()
            except client.ApiException as error:
                self.log_error = f"{error.status} {error.reason}: {error.body}"[:300]
            except Exception as error:  # said in the results: a thread that died would say nothing
                self.log_error = f"{type(error).__name__}: {error}"[:300]
            time.sleep(0.2)

    def look(self) -> None:
        pods = self.core.list_namespaced_pod(self.namespace).items
        now = time.time()
        started = [p for p in pods for s in (p.status.container_statuses or [])
                   if s.name == self.main and (s.state.running or s.state.terminated)]
        if self.running is None and len(started) >= self.expected:
            self.running = now
        master = next((p.metadata.name for p in pods if p.metadata.name.endswith("-master-0")), None)
        if master is not None and self.running is not None:
            # Not preloaded: kubernetes 36 returns a preloaded log as the repr of its bytes, one line with its
            # newlines escaped, where no line starts with a step (tests/k8s_emulator/README.md).
            log = self.core.read_namespaced_pod_log(master, self.namespace, container=self.main,
                                                    _preload_content=False).data.decode(errors="replace")
            if _STEP.search(log):
                self.first_step = time.time()


def _airflow_home(home: Path) -> None:
    """Before anything imports Airflow: its settings are read once."""
    (home / "dags").mkdir(parents=True)
    os.environ.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
                      AIRFLOW__CORE__LOAD_EXAMPLES="False")


def _airflow(home: Path, image: str) -> None:
    (home / "dags" / "bench_node.py").write_text(DAG_FILE.format(
        sizes=SIZES, image=image, namespace=NAMESPACE, training=TRAINING_DIR, args=ARGS, memory=MEMORY_MIB,
        limit=MEMORY_LIMIT_MIB, local_script=str(ROOT / "example_dags" / "training" / "pytorch_ddp.py")))
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _role() -> dict[str, Any]:
    """The kubernetes backend's Role of docs/rbac.yaml (read here: the tests' module that has it sets its own
    AIRFLOW_HOME at import)."""
    return next(doc for doc in yaml.safe_load_all((ROOT / "docs" / "rbac.yaml").read_text())
                if doc["kind"] == "Role" and doc["metadata"]["name"] == "airflow-distributed")


def _wait_empty(plane: ControlPlane, namespace: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods left in {namespace}")
        time.sleep(0.5)


def _operator(plane: ControlPlane, dag_id: str, size: int | None) -> dict[str, Any]:
    """One run of a bench DAG; with ``size``, watched by the observer."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from airflow_distributed.manifests.pod_names import MAIN_CONTAINER

    dag = DagBag().get_dag(dag_id)
    observer = Observer(plane, NAMESPACE, size, MAIN_CONTAINER) if size else None
    if observer is not None:
        observer.start()
    try:
        run = dag.test()
    finally:
        if observer is not None:
            observer.done.set()
            observer.join(10)
    ti = next(t for t in run.get_task_instances() if t.task_id == "train")
    assert ti.state == "success", ti.state
    result: dict[str, Any] = {"task_seconds": (ti.end_date - ti.start_date).total_seconds()}
    if observer is not None:
        with create_session() as session:
            row = session.execute(XComModel.get_many(run_id=run.run_id, dag_ids=dag_id, task_ids="train",
                                                     key="job")).first()
        result["startup"] = XComModel.deserialize_value(row[0]).get("startup") or {}
        t0 = ti.start_date.timestamp()
        result["observed"] = {"running": observer.running and observer.running - t0,
                              "first_step": observer.first_step and observer.first_step - t0,
                              "log_error": observer.log_error}
        _wait_empty(plane, NAMESPACE)
    return result


def _plain_pod(name: str, job: str, rank: int, size: int, image: str) -> dict[str, Any]:
    master = f"{job}-master-0.{job}.{PLAIN_NAMESPACE}.svc"
    # What the operator's readiness step does, by hand: wait until the master's name resolves.
    wait = (f"import os, socket, time\nwhile True:\n    try:\n        socket.getaddrinfo({master!r}, 29500)\n"
            f"        break\n    except OSError:\n        time.sleep(0.2)\n"
            f"os.execvp('python3', {['python3', f'{TRAINING_DIR}/pytorch_ddp.py', *ARGS]!r})\n")
    env = {"MASTER_ADDR": master, "MASTER_PORT": "29500", "WORLD_SIZE": str(size), "RANK": str(rank)}
    return {
        "metadata": {"name": name, "labels": {"bench-job": job}},
        "spec": {"restartPolicy": "Never", "hostname": name, "subdomain": job,
                 "containers": [{"name": "train", "image": image, "command": ["python3", "-c", wait],
                                 "env": [{"name": k, "value": v} for k, v in env.items()],
                                 "ports": [{"containerPort": 29500}],
                                 "resources": {"requests": {"cpu": CPU, "memory": f"{MEMORY_MIB}Mi"},
                                               "limits": {"memory": f"{MEMORY_LIMIT_MIB}Mi"}}}]},
    }


def _plain(plane: ControlPlane, size: int, image: str, job: str) -> dict[str, Any]:
    """The same pods by hand: a headless Service and one pod per rank, created one after the other."""
    core = client.CoreV1Api(plane.admin)
    observer = Observer(plane, PLAIN_NAMESPACE, size, "train")
    observer.start()
    t0 = time.time()
    core.create_namespaced_service(PLAIN_NAMESPACE, {
        "metadata": {"name": job}, "spec": {"clusterIP": "None", "selector": {"bench-job": job},
                                            "publishNotReadyAddresses": True}})
    names = [f"{job}-master-0"] + [f"{job}-worker-{i}" for i in range(size - 1)]
    for rank, name in enumerate(names):
        core.create_namespaced_pod(PLAIN_NAMESPACE, _plain_pod(name, job, rank, size, image))
    deadline = time.monotonic() + 300
    while True:
        master = core.read_namespaced_pod(names[0], PLAIN_NAMESPACE)
        if master.status.phase in ("Succeeded", "Failed") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    observer.done.set()
    observer.join(10)
    phase = master.status.phase
    for name in names:
        core.delete_namespaced_pod(name, PLAIN_NAMESPACE, grace_period_seconds=0)
    core.delete_namespaced_service(job, PLAIN_NAMESPACE)
    _wait_empty(plane, PLAIN_NAMESPACE)
    assert phase == "Succeeded", phase
    return {"observed": {"running": observer.running and observer.running - t0,
                         "first_step": observer.first_step and observer.first_step - t0,
                         "log_error": observer.log_error}}


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def measure(rounds: int = 3, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-node-"))
    _airflow_home(home)
    from tests.kube_control_plane import control_plane as plane_module
    from tests.kube_control_plane.control_plane import TASK_ACCOUNT
    from tests.kube_node import node as node_module
    from tests.kube_node.node import RealNode

    reason = plane_module.missing() or node_module.missing()
    if reason is not None:
        shutil.rmtree(home, ignore_errors=True)
        return {"skipped": reason}
    node = RealNode()
    plane = node.control_plane_to_join()
    results: dict[str, Any] = {"rounds": rounds, "steps": STEPS, "load_before": os.getloadavg()}
    try:
        plane.start()
        node.start(plane)
        for namespace in (NAMESPACE, PLAIN_NAMESPACE):
            plane.create_namespace(namespace)
        kubeconfig = plane.bind_role(NAMESPACE, _role(), TASK_ACCOUNT)
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": kubeconfig, "xcom_sidecar_container_image": node.images["busybox"]}})
        _airflow(home, node.images["trainer"])
        runs: dict[str, list[dict[str, Any]]] = {}
        for round_ in range(rounds):
            for size in sizes:
                sides = ("operator", "plain") if round_ % 2 == 0 else ("plain", "operator")
                for side in sides:
                    if side == "operator":
                        got = _operator(plane, f"bench_node_{size}", size)
                    else:
                        got = _plain(plane, size, node.images["trainer"], f"plain{size}-{round_}")
                    runs.setdefault(f"{side}_{size}", []).append(got)
            runs.setdefault("local_3", []).append(_operator(plane, "bench_node_local_3", None))
        results["load_after"] = os.getloadavg()
        for size in sizes:
            operator, plain = runs[f"operator_{size}"], runs[f"plain_{size}"]
            row: dict[str, Any] = {}
            for what in ("running", "first_step"):
                mine = [r["observed"][what] for r in operator]
                theirs = [r["observed"][what] for r in plain]
                row[what] = {"operator": _median(mine), "plain": _median(theirs),
                             "operator_rounds": [v and round(v, 2) for v in mine],
                             "plain_rounds": [v and round(v, 2) for v in theirs]}
                if row[what]["operator"] and row[what]["plain"]:
                    row[what]["ratio"] = round(row[what]["operator"] / row[what]["plain"], 2)
            row["log_errors"] = sorted({r["observed"]["log_error"] for r in operator + plain
                                        if r["observed"]["log_error"]})
            row["operator_startup_median"] = {
                phase: _median([(r["startup"].get("job") or {}).get(phase) for r in operator])
                for phase in ("created", "scheduled", "running", "rendezvous")}
            row["operator_startup_rounds"] = [r["startup"].get("job") for r in operator]
            row["task_seconds"] = [round(r["task_seconds"], 2) for r in operator]
            results[f"{size}_replicas"] = row
        kube = [r["task_seconds"] for r in runs["operator_3"]]
        local = [r["task_seconds"] for r in runs["local_3"]]
        results["ddp_3_replicas"] = {"kubernetes": _median(kube), "local": _median(local),
                                     "kubernetes_rounds": [round(v, 2) for v in kube],
                                     "local_rounds": [round(v, 2) for v in local],
                                     "ratio": round(statistics.median(kube) / statistics.median(local), 2)}
    finally:
        node.stop()
        plane.stop()
        shutil.rmtree(home, ignore_errors=True)
    left = node.leftovers()
    if left:
        results["leftovers"] = left
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="replicas per job (default: 3 12)")
    arguments = parser.parse_args()
    print(json.dumps(measure(arguments.rounds, tuple(arguments.sizes)), indent=2))
