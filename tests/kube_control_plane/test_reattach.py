"""A task restarted while its job runs, against the real control plane, the task talking as the service account
bound to exactly the Role of docs/rbac.yaml: the new try finds the job (by its labels, or by the identity its
first try kept in the task state store) and waits on it, creating nothing. What the server saw of the task is
read from its audit log, so "nothing created twice" is the server's word, not the client's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pendulum
import pytest

from tests.conftest import ROOT
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet

pytestmark = [pytest.mark.usefixtures("airflow_db")]


def dag_in_subprocess(dag_id: str, logical_date: str) -> subprocess.Popen:
    """The DAG run in a process of its own, as a worker runs a task; its output is discarded."""
    # Not through this module: importing tests.conftest there would point AIRFLOW_HOME somewhere new.
    code = textwrap.dedent(f"""
        import pendulum
        from airflow.dag_processing.dagbag import DagBag
        when = pendulum.parse({logical_date!r})
        DagBag().get_dag({dag_id!r}).test(logical_date=when, run_after=when)
    """)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class StateStore:
    """``context["task_state_store"]``: JSON values by key, kept across the task instance's tries."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self.values[key] = json.loads(json.dumps(value))


class TaskInstance:
    """What the backend reads from ``context["ti"]`` and what it pushes to XCom."""

    def __init__(self, try_number: int) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = "state_store", "train", "scheduled__2026-04-01", -1
        self.try_number = try_number
        self.start_date = pendulum.now("UTC")
        self.stats_tags: dict[str, str] = {}
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def creates(plane: ControlPlane, user: str) -> set[str]:
    """The audit IDs of the create requests of ``user``."""
    return {e["auditID"] for e in plane.audit_events(user) if e["verb"] == "create"}


# A task process of its own, killed and run again: about a minute; with the slow tests (the retry cases below,
# through the task state store, stay in the default run).
@pytest.mark.slow
@pytest.mark.parametrize("dag_namespace", ["k8s_reattach"], indirect=True)
def test_a_task_killed_while_its_job_runs_is_run_again_and_waits_on_the_same_pods(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    namespace, user = dag_namespace
    when = "2026-03-01T00:00:00+00:00"
    kubelet = Kubelet(node, namespace).play(lambda k: k.run_all())  # type: ignore[arg-type]  # the node plays
    proc = dag_in_subprocess("k8s_reattach", when)
    try:
        kubelet.check(timeout=90)
        wait_until(lambda: any(e["verb"] == "watch" for e in control_plane.audit_events(user)), timeout=60)
    finally:
        proc.kill()  # the worker dies: no handler runs, the job keeps running
        proc.wait(timeout=60)
    pods = {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]}
    assert len(pods) == 3
    first = creates(control_plane, user)

    again = Kubelet(node, namespace)  # type: ignore[arg-type]
    again.seen = dict(kubelet.seen)
    again.play(lambda k: (k.log(k.master, "resumed"), k.master_exits(0, document=DOCUMENT)))
    run, states = run_dag_at("k8s_reattach", pendulum.parse(when))
    again.check()

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    # The same pods, found by their labels: the server saw no create from the second try.
    assert creates(control_plane, user) == first
    assert xcom(run, "train")["job_name"] == kubelet.names()["master-0"].rsplit("-", 2)[0]
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("found", ["running", "succeeded"])
def test_a_retry_finds_the_job_of_its_earlier_try_through_the_task_state_store(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str,
        found: str, capfd, monkeypatch):
    from airflow_distributed.backends.kubernetes import KubernetesBackend
    from airflow_distributed.backends.kubernetes_run import KubernetesJobRun
    from airflow_distributed.backends.resumable import STATE_KEY, ResumableKubernetesJob
    from airflow_distributed.naming import job_name
    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.spec import load_spec

    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": task_kubeconfig}}))
    operator = DistributedTrainingOperator(task_id="train", framework="pytorch", environment={"pytorch": {
        "n_workers": 2}}, command=["python", "train.py"], image="trainer:1", backend="kubernetes",
        namespace=namespace, startup_timeout=30)
    spec = load_spec("pytorch", operator.environment)
    task, settings = operator._task_calls(), operator._settings()
    store, first = StateStore(), TaskInstance(try_number=1)
    name = job_name(first.dag_id, first.task_id, first.run_id)
    # What a first try leaves when its worker dies after submitting: the job, and its identity in the store.
    submitted = ResumableKubernetesJob(KubernetesJobRun.start(
        task, settings, {"ti": first}, spec, name, ["python", "train.py"])).submit_job({"ti": first})
    store.set(STATE_KEY, submitted)
    kubelet = Kubelet(node, namespace)  # type: ignore[arg-type]
    if found == "succeeded":
        kubelet.play(lambda k: (k.run_all(), k.master_exits(0, document=DOCUMENT))).check(timeout=60)
    else:
        # The master ends once the second try watches the job, not before: the audit log says when.
        kubelet.play(lambda k: (k.run_all(), wait_until(lambda: any(
            e["verb"] == "watch" for e in control_plane.audit_events(task_user)), timeout=60),
            k.master_exits(0, document=DOCUMENT)))
    before = creates(control_plane, task_user)

    second = TaskInstance(try_number=2)
    result = KubernetesBackend().run(task, settings, {"ti": second, "task_state_store": store}, spec, name,
                                     ["python", "train.py"])
    kubelet.check(timeout=60)

    assert result["state"] == "succeeded" and result["metrics"] == DOCUMENT["metrics"]
    assert second.xcom["job"]["metrics"] == DOCUMENT["metrics"]
    assert creates(control_plane, task_user) == before  # the same job: nothing submitted again
    assert store.get(STATE_KEY) == submitted
    expected = "Reconnecting to existing job" if found == "running" else "already completed successfully"
    assert expected in capfd.readouterr().out  # ResumableJobMixin's own decision, from the stored identity
    control_plane.assert_clean(namespace, task_user)
