"""DAG runs of the kubernetes backend and its sensor against the real control plane, the tasks talking as the
service account bound to exactly the Role of docs/rbac.yaml: the same DAGs and kubelet scripts as the emulator's
tests (``tests/integration/test_kubernetes_backend.py``, ``test_sensors.py``), sync and deferrable."""

from __future__ import annotations

import os
import signal
from datetime import datetime, timezone

import pytest

from airflow_distributed.replica.live_report import PREFIX, record_line
from tests.helpers import replica_lines, run_dag_at, wait_until, xcom
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, train_and_succeed

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.mark.parametrize("dag_namespace", ["k8s_success", "k8s_deferrable"], indirect=True)
def test_a_dag_run_succeeds_with_the_masters_lines_in_the_task_log_and_leaves_nothing(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")

    def script(kubelet: Kubelet) -> None:
        # The master ends once the job is watched (here or in the triggerer), not before: the audit log says when.
        wait_until(lambda: any(e["verb"] == "watch" for e in control_plane.audit_events(user)), timeout=60)
        train_and_succeed(kubelet)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert set(states.values()) == {"success"}
    result = xcom(run, "train")
    assert result["state"] == "succeeded" and result["metrics"] == DOCUMENT["metrics"]
    job = result["job_name"]
    out = capfd.readouterr().out
    if dag_id == "k8s_success":
        # The master's log, followed into the task log through the API server's pods/log proxy.
        assert f"[{job}-master-0] step 2 loss 0.250" in out
    else:
        assert "waiting in the triggerer" in out
    # The master's last lines, once more at the end of the task log (in no XCom).
    assert replica_lines(out, job)[f"{job}-master-0"] == ["step 1 loss 0.500", "step 2 loss 0.250", "step 3 loss 0.125"]
    assert "logs" not in xcom(run, "train", "job")
    # The Service deleted, the garbage collector deletes the rest; the test kubelet ends the pods' deletion.
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["k8s_deferred_logs"], indirect=True)
def test_a_deferred_jobs_master_lines_and_progress_reach_the_task_log_while_it_runs_each_line_once(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    reports = {10: ["step 10 loss 0.900", "1000 samples seen"], 50: ["step 50 loss 0.500"],
               90: ["step 90 loss 0.100", "saving a checkpoint"]}

    def log_reads() -> list[str]:
        return sorted({e["requestReceivedTimestamp"] for e in control_plane.audit_events(user)
                       if e["verb"] == "get" and (e.get("objectRef") or {}).get("subresource") == "log"})

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        try:
            for percent, lines in reports.items():
                kubelet.log(kubelet.master, *lines, record_line({"progress": {"step": percent, "total": 100,
                                                                              "percent": float(percent)}}) or "")
                # Shown while the job runs: a read of the master's log that began after the one that found these
                # lines began after their relay (one read after the other), none of which the deferred task makes.
                written = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                wait_until(lambda written=written: len([at for at in log_reads() if at > written]) >= 2,
                           timeout=30, interval=0.1)
        finally:  # the job ends whatever the relay did, so that the run does
            kubelet.log(kubelet.master, "done")
            kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at("k8s_deferred_logs")
    kubelet.check()

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    out = capfd.readouterr().out
    master = f"[{job}-master-0]"
    for line in [*(line for lines in reports.values() for line in lines), "done"]:
        # Relayed by the trigger, and not again by the resumed task's last lines.
        assert out.count(f"{master} {line}") == 1, (line, out)
    for percent in reports:
        assert f"progress of {job}: {percent}% ({percent}/100 steps)" in out
    assert PREFIX not in out  # the live records are for the job view, not the log
    # The last lines, for the view at the end of the task log, are whole all the same.
    assert replica_lines(out, job)[f"{job}-master-0"][-2:] == ["saving a checkpoint", "done"]
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["sensor_after_operator"], indirect=True)
def test_a_sensor_pokes_the_job_an_operator_started_until_it_succeeds_and_leaves_it(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    namespace, user = dag_namespace

    def pod_lists() -> int:
        return len({e["auditID"] for e in control_plane.audit_events(user) if e["verb"] == "list"
                    and (e.get("objectRef") or {}).get("resource") == "pods"})

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: pod_lists() >= 2, timeout=60, interval=0.05)  # the sensor pokes
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at("sensor_after_operator")
    kubelet.check()

    assert states == {"train": "success", "wait": "success", "report": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    job = xcom(run, "train", "job_name")
    # Waiting is not owning: the job is left as it is, until deleted; then the garbage collector takes the rest.
    assert control_plane.left(namespace)["services"] == [job]
    control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}/services/{job}")
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["k8s_timed_out", "k8s_timed_out_deferrable"], indirect=True)
def test_a_job_that_outlives_the_tasks_execution_timeout_is_deleted_and_nothing_is_left(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    # The replicas run and never end: only the task's execution_timeout (here, or in the triggerer) stops the job.
    kubelet = Kubelet(node, namespace).play(lambda k: k.run_all())
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check()

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    assert "execution_timeout" in out or "AirflowTaskTimeout" in out
    # In the triggerer too, the timeout deletes the whole job, as the synchronous wait's does (the finished pods,
    # Service and files were kept there before, as clean_pod_policy "running" keeps a failed job's).
    # The Service deleted, the real garbage collector deletes the pods and files it owns: nothing is left.
    control_plane.assert_clean(namespace, user)


@pytest.mark.parametrize("dag_namespace", ["k8s_long_running"], indirect=True)
def test_sigterm_to_the_task_deletes_the_job_and_nothing_is_left(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    # What Airflow does to a task marked failed in the UI: SIGTERM to the task process, whose handler calls
    # on_kill(). dag.test() runs the task in this process, so the signal goes to this process.
    namespace, user = dag_namespace

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: any(e["verb"] == "watch" for e in control_plane.audit_events(user)), timeout=60)
        os.kill(os.getpid(), signal.SIGTERM)

    kubelet = Kubelet(node, namespace).play(script)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        run, states = run_dag_at("k8s_long_running")
    finally:
        signal.signal(signal.SIGTERM, previous)
    kubelet.check()

    assert states == {"train": "failed"}
    assert "was stopped after" in capfd.readouterr().out
    control_plane.assert_clean(namespace, user)
