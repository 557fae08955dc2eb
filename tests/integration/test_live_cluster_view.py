"""The job view of a running cluster job, live: what the master's ``tracking`` calls report shows in the view's
JSON while the task waits, here or in the triggerer.

A real DAG run defers its Kubernetes job (the API emulator, over HTTP); the test plays the kubelet, and the master's
log lines are what a real ``tracking`` process prints. The view is asked through Airflow's own API server app, as a
user of the team that owns the DAG (``tests/live_view.py``; the same on the real control plane:
``tests/kube_control_plane/test_live_view.py``).
"""

from __future__ import annotations

import pytest

from tests.dags.usage_dags import namespace_of
from tests.helpers import run_dag_at, xcom
from tests.kubernetes_helpers import DOCUMENT, Kubelet, task_requests
from tests.live_view import Seen, assert_master_lines_once, assert_reports_shown, kubernetes_reports, view_client

pytestmark = pytest.mark.usefixtures("airflow_db", "kubernetes_connection")


@pytest.mark.parametrize("dag_id", ["k8s_live", "k8s_live_deferrable"])
def test_a_kubernetes_job_shows_each_progress_its_master_reports_while_it_runs(emulator, kubeconfig, tmp_path, capfd,
                                                                               dag_id):
    from kubernetes.config import kube_config

    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    seen: Seen = {}
    with pytest.MonkeyPatch.context() as env, view_client(tmp_path) as client:
        env.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
        script = kubernetes_reports(client, dag_id, str(tmp_path / "output.json"), seen,
                                    watched=lambda: any(r.is_watch for r in task_requests(emulator, namespace)))
        kubelet = Kubelet(emulator, namespace, pods=2).play(script)
        run, states = run_dag_at(dag_id)
        kubelet.check()

    assert states == {"train": "success"}
    # Deferred, no task process reads anything for the view. In a synchronous wait the task is running.
    assert_reports_shown(seen, "kubernetes", "queued" if dag_id.endswith("deferrable") else "running")
    # The final record replaces the live one; the task log never shows a live record.
    assert xcom(run, "train", "job")["metrics"] == DOCUMENT["metrics"]
    out = capfd.readouterr().out
    if dag_id.endswith("deferrable"):
        assert out.count("waiting in the triggerer") == 1
    # The master's lines followed into the task log (sync), relayed by the trigger (deferred), each once.
    assert_master_lines_once(out)
