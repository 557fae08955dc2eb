"""The job view of a running cluster job, live: what the master's ``tracking`` calls report shows in the view's
JSON while the task waits, here or in the triggerer.

A real DAG run defers its Kubernetes job (the API emulator, over HTTP); the test plays the kubelet, and the master's
log lines are what a real ``tracking`` process prints. The view is asked through Airflow's own API server app, as a
user of the team that owns the DAG.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from urllib.parse import quote

import pytest

from tests.api_server import api_client, as_user
from tests.conftest import ROOT
from tests.dags.usage_dags import namespace_of
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import DOCUMENT, Kubelet, task_requests

pytestmark = pytest.mark.usefixtures("airflow_db", "kubernetes_connection")

#: A master that reports the percentages it is given on its standard input, one a line, as training would.
MASTER = """
import sys
from airflow_distributed import tracking
for line in sys.stdin:
    percent = int(line)
    tracking.log_metrics(step=percent, loss=1 - percent / 100)
    tracking.log_progress(percent, 100)
    print(f"step {percent} done", flush=True)
"""


class Master:
    """A real ``tracking`` process whose stdout goes to the master pod's log in the emulator, line by line
    (``write``)."""

    def __init__(self, write: Callable[[str], None], output: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", MASTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, "AIRFLOW_DISTRIBUTED_OUTPUT": output, "PYTHONPATH": str(ROOT)})
        self.pump = threading.Thread(target=self._relay, args=(write,), daemon=True)
        self.pump.start()

    def _relay(self, write: Callable[[str], None]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            write(line.rstrip("\n"))

    def report(self, percent: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{percent}\n")
        self.process.stdin.flush()

    def end(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.pump.join(timeout=30)


def latest_run_id(dag_id: str) -> str | None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()))


def task_state(dag_id: str, run_id: str) -> str | None:
    from airflow.utils.session import create_session

    from airflow_distributed.plugins.job_state import TaskInstanceRef, task_instance_state

    with create_session() as session:
        return task_instance_state(TaskInstanceRef(dag_id=dag_id, run_id=run_id, task_id="train"), session)


def dags_folder_bundle() -> None:
    """The DAGs folder's bundle, which the API server gives a team: there before the first run writes it."""
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    from tests.api_server import BUNDLE

    with create_session() as session:
        if session.get(DagBundleModel, BUNDLE) is None:
            session.add(DagBundleModel(name=BUNDLE))


@pytest.mark.parametrize("dag_id", ["k8s_live", "k8s_live_deferrable"])
def test_a_kubernetes_job_shows_each_progress_its_master_reports_while_it_runs(emulator, kubeconfig, tmp_path, capfd,
                                                                               dag_id):
    from kubernetes.config import kube_config

    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    seen: dict[int, tuple[dict, str | None]] = {}
    dags_folder_bundle()
    with (pytest.MonkeyPatch.context() as env,
          api_client({"alice": "viewer:ml"}, "ml", ("ml",), tmp_path) as client):
        env.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)

        def script(kubelet: Kubelet) -> None:
            wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
            run_id = wait_until(lambda: latest_run_id(dag_id))
            api = f"/distributed/api/jobs/{dag_id}/{quote(run_id, safe='')}/train"
            headers = as_user(client, "alice")
            kubelet.run_all()
            master = Master(lambda line: kubelet.log(kubelet.master, line), str(tmp_path / "output.json"))
            try:
                for percent in (10, 50, 90):
                    master.report(percent)

                    def shown(percent: int = percent) -> dict | None:
                        record = client.get(api, headers=headers).json()
                        return record if (record.get("progress") or {}).get("percent") == percent else None

                    record = wait_until(shown, timeout=30, interval=0.5)
                    seen[percent] = record, task_state(dag_id, run_id)
            finally:  # the job ends whatever the view showed, so that the run ends and check() tells
                master.end()
                kubelet.master_exits(0, document=DOCUMENT)

        kubelet = Kubelet(emulator, namespace, pods=2).play(script)
        run, states = run_dag_at(dag_id)
        kubelet.check()

    assert states == {"train": "success"}
    assert sorted(seen) == [10, 50, 90]
    for percent, (record, state) in seen.items():
        # Deferred, dag.test() runs the trigger inline and marks the task queued meanwhile (under a scheduler:
        # deferred); no task process reads anything for the view. In a synchronous wait the task is running.
        assert state == ("queued" if dag_id.endswith("deferrable") else "running")
        assert record["source"] == "live" and record["state"] == "running"
        assert record["progress"]["step"] == percent and record["metrics"] == {"loss": 1 - percent / 100}
        assert record["history"][-1] == {"step": percent, "loss": 1 - percent / 100}
        master = next(name for name in record["logs"])
        # the replicas' lines without the records
        assert record["logs"][master][-1] == f"step {percent} done" and not any(
            line.startswith("@airflow-distributed/live") for line in record["logs"][master])
    assert [point["step"] for point in seen[90][0]["history"]] == [10, 50, 90]  # the history so far
    # The final record replaces the live one; the task log never shows a live record.
    assert xcom(run, "train", "job")["metrics"] == DOCUMENT["metrics"]
    out = capfd.readouterr().out
    assert "@airflow-distributed/live" not in out
    if dag_id.endswith("deferrable"):
        assert out.count("waiting in the triggerer") == 1
    else:  # the master's lines followed into the task log, each once
        assert [out.count(f"] step {percent} done") for percent in (10, 50, 90)] == [1, 1, 1]
