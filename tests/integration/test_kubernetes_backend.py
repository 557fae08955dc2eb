"""The Kubernetes backend through a real Airflow: DAG runs against the API emulator, the test playing the kubelet.

Every request crosses HTTP through the real ``kubernetes`` / ``kubernetes_asyncio`` clients and the cncf
provider's hooks, with the ``kubernetes_default`` connection given as an environment variable. After each run
the test checks what is left in the emulator: the clean-up policy, not luck, decides it.

``Kubelet`` and the other shared helpers are in ``tests.kubernetes_helpers``; the emulator fixtures are the conftest's.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.dags.kubernetes_dags import IMAGE, SHORT_STARTUP, namespace_of
from tests.helpers import replica_lines, run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import (
    DOCUMENT,
    JOB_LABEL,
    NOTHING,
    Kubelet,
    failure_line,
    lists_and_watches,
    objects,
    settled,
    task_requests,
    train_and_succeed,
)

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


# ---------------------------------------------------------------------------------------------- success


def succeeds_with_worker_0_ended(emulator, namespace: str, dag_id: str, script) -> None:
    """The DAG run of ``script`` (the kubelet's part) succeeds; the final table, in the result and the ``job`` XCom,
    says the master and worker-0 ended with 0 and worker-1, deleted by the clean-up, was stopped; nothing is left."""
    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert states == {"train": "success"}
    job = xcom(run, "train")["job_name"]
    expected = [(f"{job}-master-0", "succeeded", 0), (f"{job}-worker-0", "succeeded", 0),
                (f"{job}-worker-1", "stopped", None)]
    assert [(r["name"], r["state"], r["exit_code"]) for r in xcom(run, "train")["replicas"]] == expected
    assert [(r["name"], r["state"], r["exit_code"]) for r in xcom(run, "train", "job")["replicas"]] == expected
    settled(emulator, namespace, NOTHING)


@pytest.mark.parametrize("dag_id", ["k8s_workers_end_after", "k8s_workers_end_after_deferrable"])
def test_workers_ending_a_moment_after_the_master_show_how_they_ended_not_stopped(emulator, dag_id):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        train_and_succeed(kubelet)
        time.sleep(0.3)  # as a DDP worker leaves the process group after the master
        emulator.succeed_pod(namespace, kubelet.pod("worker-0"))

    # worker-1 never ends: deleted once finish_grace (2 s) is over, it alone reads stopped.
    succeeds_with_worker_0_ended(emulator, namespace, dag_id, script)


@pytest.mark.parametrize("dag_id", ["k8s_late_report", "k8s_late_report_deferrable"])
def test_a_worker_reported_only_after_the_master_ended_reads_how_it_ended_not_pending(emulator, dag_id):
    """A real kubelet reports a container's start and end a moment late: a short worker can run and exit 0 while
    the wait (or the resumed task's read of the pods) still sees it starting. The clean-up looks again at the
    replicas last seen starting; one still starting when that look is over (worker-1) reads stopped."""
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def job_lists() -> int:
        return sum(1 for r in lists_and_watches(emulator, namespace)[0]
                   if r.query.get("labelSelector", "").startswith(f"{JOB_LABEL}="))

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        for key in ("worker-0", "worker-1"):
            emulator.pending_pod(namespace, kubelet.pod(key), reason="ContainerCreating")
        emulator.run_pod(namespace, kubelet.master)
        lists = job_lists()
        kubelet.master_exits(0, document=DOCUMENT)
        if dag_id.endswith("deferrable"):
            # The resumed task reads the job's pods once: worker-0's run is reported only after that read.
            wait_until(lambda: job_lists() > lists, timeout=60)
        # The synchronous wait ended at the master's exit: it never sees this.
        emulator.succeed_pod(namespace, kubelet.pod("worker-0"))

    succeeds_with_worker_0_ended(emulator, namespace, dag_id, script)


@pytest.mark.parametrize("dag_id", ["k8s_success", "k8s_deferrable"])
def test_a_job_that_succeeds_hands_its_metrics_to_xcom_and_leaves_nothing(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    def script(kubelet: Kubelet) -> None:
        # The master ends once the job is being watched (here or in the triggerer), not before.
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        train_and_succeed(kubelet)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert set(states.values()) == {"success"}
    result = xcom(run, "train")
    assert {k: result[k] for k in ("framework", "backend", "state", "namespace")} == {
        "framework": "pytorch", "backend": "kubernetes", "state": "succeeded", "namespace": namespace}
    assert result["metrics"] == DOCUMENT["metrics"] and result["model_path"] == DOCUMENT["model_path"]
    job = result["job_name"]
    assert [(r["name"], r["role"], r["index"], r["state"], r["exit_code"]) for r in result["replicas"]] == [
        (f"{job}-master-0", "master", 0, "succeeded", 0),
        (f"{job}-worker-0", "worker", 0, "stopped", None),
        (f"{job}-worker-1", "worker", 1, "stopped", None),
    ]
    assert xcom(run, "train", "metrics") == DOCUMENT["metrics"]
    assert xcom(run, "train", "model_path") == DOCUMENT["model_path"]
    assert xcom(run, "train", "job_name") == job
    record = xcom(run, "train", "job")
    assert record["state"] == "succeeded" and record["history"] == DOCUMENT["history"]
    assert "logs" not in record  # the replicas' lines are the task log's
    if dag_id == "k8s_success":
        assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": DOCUMENT["model_path"]}
    # The templated args reached the pods' command, after the relay that copies the output document.
    assert kubelet.seen[f"{job}-worker-0"]["spec"]["containers"][0]["command"][-4:] == [
        "python", "/opt/jobs/train.py", "--steps", "5"]
    settled(emulator, namespace, NOTHING)

    requests = task_requests(emulator, namespace)
    watches = [r for r in requests if r.is_watch]
    # The task's own wait watches its job's pods; deferred, the watch is of the namespace's provider pods, shared by
    # the triggerer's jobs there (shared_watch).
    selector = JOB_LABEL if dag_id == "k8s_deferrable" else f"{JOB_LABEL}={job}"
    assert len(watches) == 1 and watches[0].query["labelSelector"] == selector
    # No polling: single pods are read once (the XCom sidecar check), never in a loop.
    assert len([r for r in requests if r.method == "GET" and r.path.endswith("/pods/" + f"{job}-master-0")]) <= 1
    assert [r.method for r in requests if r.path.endswith("/pods")].count("POST") == 3
    out = capfd.readouterr().out
    assert replica_lines(out, job)[f"{job}-master-0"] == ["step 1 loss 0.500", "step 2 loss 0.250", "step 3 loss 0.125"]
    if dag_id == "k8s_success":
        assert f"[{job}-master-0] step 2 loss 0.250" in out  # the master's log, followed into the task log
    else:
        assert "waiting in the triggerer" in out


@pytest.mark.parametrize("dag_id", ["k8s_metrics_only", "k8s_metrics_only_deferrable"])
def test_a_master_with_metrics_and_no_model_path_hands_none_downstream(emulator, dag_id):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        train_and_succeed(kubelet, document={"metrics": {"loss": 0.125}})

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert states == {"train": "success", "report_metrics": "success"}
    assert xcom(run, "report_metrics") == {"loss": 0.125, "model_path": None}
    assert xcom(run, "train")["model_path"] is None
    settled(emulator, namespace, NOTHING)


@pytest.mark.parametrize("dag_id", ["k8s_bad_report", "k8s_bad_report_deferrable"])
def test_a_master_whose_report_is_not_strict_json_succeeds_at_its_first_try_with_nulls(emulator, dag_id, capfd):
    """NaN, an infinity and a number beyond the float range in the termination message, as json.dumps writes them
    (``NaN``, ``Infinity``), and a percent as a string: the task succeeds once, every XCom strict JSON."""
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    document = {"metrics": {"loss": float("nan"), "accuracy": 0.9, "nested": {"a": {"b": {"c": {"d": {
        "e": float("inf")}}}}}}, "model_path": "s3://models/bad", "history": [{"step": 1, "loss": float("-inf")}],
        "progress": {"step": 5, "total": 10, "percent": "10", "eta_seconds": float("inf")}}

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        train_and_succeed(kubelet, document=document)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert states == {"train": "success", "report_metrics": "success"}
    assert [ti.try_number for ti in run.get_task_instances() if ti.task_id == "train"] == [1]
    metrics = {"loss": None, "accuracy": 0.9, "nested": {"a": {"b": {"c": {"d": {"e": None}}}}}}
    assert xcom(run, "train", "metrics") == metrics
    assert xcom(run, "report_metrics") == {"loss": None, "model_path": "s3://models/bad"}
    record = xcom(run, "train", "job")
    assert record["history"] == [{"step": 1, "loss": None}]
    assert record["progress"] == {"step": 5, "total": 10, "percent": None, "eta_seconds": None}
    assert "the master's output document was sanitised: " in capfd.readouterr().out
    settled(emulator, namespace, NOTHING)


def test_wait_for_completion_false_starts_the_job_and_returns(emulator):
    namespace = namespace_of("k8s_no_wait")
    emulator.create_namespace(namespace)

    run, states = run_dag_at("k8s_no_wait")

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    assert xcom(run, "train") == {"job_name": job, "namespace": namespace}
    assert xcom(run, "train", "namespace") == namespace
    left = objects(emulator, namespace)
    assert left["services"] == [job] and len(left["pods"]) == 3  # still running: a sensor's business now
    emulator.delete("services", namespace, job)
    settled(emulator, namespace, NOTHING)


def test_the_connections_xcom_sidecar_image_runs_the_masters_sidecar(emulator, kubeconfig):
    # A cluster that cannot reach Docker Hub names an image of its own registry, as for the KubernetesPodOperator.
    namespace = namespace_of("k8s_no_wait")
    if emulator.get("namespaces", None, namespace) is None:  # the module's emulator: an earlier test may have made it
        emulator.create_namespace(namespace)
    extra = {"kube_config_path": kubeconfig, "xcom_sidecar_container_image": "registry.internal/busybox:1.36"}
    connection = {"conn_type": "kubernetes", "extra": extra}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
        run, states = run_dag_at("k8s_no_wait")

    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    master = emulator.get("pods", namespace, f"{job}-master-0")
    assert {c["name"]: c["image"] for c in master["spec"]["containers"]} == {
        "base": IMAGE, "airflow-xcom-sidecar": "registry.internal/busybox:1.36"}
    emulator.delete("services", namespace, job)
    settled(emulator, namespace, NOTHING)


# ---------------------------------------------------------------------------------------------- failures


def test_a_failing_worker_fails_the_task_at_once_naming_it(emulator, capfd):
    namespace = namespace_of("k8s_worker_failure")
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        worker = kubelet.pod("worker-1")
        kubelet.log(worker, "step 1", "Traceback (most recent call last):", "RuntimeError: NCCL error: unhandled")
        kubelet.fail(worker, 3)

    kubelet = Kubelet(emulator, namespace).play(script)
    started = time.monotonic()
    run, states = run_dag_at("k8s_worker_failure")
    kubelet.check()

    assert states == {"train": "failed"}
    assert time.monotonic() - started < 30  # not the 30 s startup window, nor any other wait
    worker = kubelet.pod("worker-1")
    out = capfd.readouterr().out
    assert f"replica {worker} exited with code 3" in out
    assert "RuntimeError: NCCL error: unhandled" in out  # its last lines are in the failure message
    assert xcom(run, "train") is None
    record = xcom(run, "train", "job")
    assert record["state"] == "failed"
    assert {r["name"]: (r["state"], r["exit_code"]) for r in record["replicas"]} == {
        kubelet.pod("master-0"): ("stopped", None), kubelet.pod("worker-0"): ("stopped", None), worker: ("failed", 3)}
    assert replica_lines(out, record["job_name"])[worker][-1] == "RuntimeError: NCCL error: unhandled"
    # Default policy after the last try (no retries): the job deleted whole, no try comes to look at its pods.
    settled(emulator, namespace, NOTHING)


@pytest.mark.parametrize(("dag_id", "kept_pods"), [
    ("k8s_horovod_failure", None),
    ("k8s_horovod_failure_deferrable", None),
    ("k8s_horovod_failure_kept", ["launcher-0", "worker-0", "worker-1"]),
])
def test_a_failed_horovod_job_keeps_pods_for_a_look_but_never_its_ssh_key(emulator, dag_id, kept_pods):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        job = kubelet.seen[kubelet.master]["metadata"]["labels"][JOB_LABEL]
        assert [s["metadata"]["name"] for s in emulator.list("secrets", namespace)] == [f"{job}-ssh"]
        kubelet.run_all()
        kubelet.fail(kubelet.master, 1)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert states == {"train": "failed"}
    job = xcom(run, "train", "job")["job_name"]
    # After the last try the default policy keeps nothing; "none" keeps the Service and every pod, never the Secret
    # with the private key.
    if kept_pods is None:
        settled(emulator, namespace, NOTHING)
    else:
        settled(emulator, namespace, {"services": [job], "pods": sorted(kubelet.pod(key) for key in kept_pods),
                                      "configmaps": [f"{job}-files"], "secrets": []})


def test_an_oom_killed_master_fails_the_task_with_the_reason(emulator, capfd):
    namespace = namespace_of("k8s_master_oom")
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        kubelet.log(kubelet.master, "step 1 loss 0.5")
        kubelet.master_exits(137, "OOMKilled")

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("k8s_master_oom")
    kubelet.check()

    assert states == {"train": "failed"}
    assert f"replica {kubelet.master} exited with code 137 (OOMKilled)" in capfd.readouterr().out
    record = xcom(run, "train", "job")
    assert record["replicas"][0]["exit_code"] == 137 and record["replicas"][0]["state"] == "failed"
    settled(emulator, namespace, NOTHING)  # clean_pod_policy="all"


@pytest.mark.parametrize(
    ("dag_id", "reason", "message"),
    [
        ("k8s_unschedulable", "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
    ],
)
def test_a_replica_that_cannot_start_fails_the_task_after_startup_timeout(emulator, dag_id, reason, message, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all(except_=("worker-1",))
        stuck = kubelet.pod("worker-1")
        kubelet.emu.pending_pod(namespace, stuck, reason=reason, message=message)
        kubelet.emu.add_event(namespace, "Pod", stuck, "FailedScheduling" if reason == "Unschedulable" else "Failed",
                              message)

    kubelet = Kubelet(emulator, namespace).play(script)
    started = time.monotonic()
    run, states = run_dag_at(dag_id)
    elapsed = time.monotonic() - started
    kubelet.check()

    assert states == {"train": "failed"}
    stuck = kubelet.pod("worker-1")
    out = capfd.readouterr().out
    assert f"replica {stuck} did not start within {SHORT_STARTUP:g}s: {reason}: {message}" in out
    assert f"Warning {'FailedScheduling' if reason == 'Unschedulable' else 'Failed'}: {message}" in out  # events
    assert elapsed < 25
    record = xcom(run, "train", "job")
    assert {r["name"]: r["state"] for r in record["replicas"]}[stuck] == "stopped"
    # Its last try (no retries): the job deleted whole, no try comes to replace it.
    settled(emulator, namespace, NOTHING)


PULL_ERROR = 'rpc error: code = NotFound desc = failed to pull image "registry.example.com/trainer:1.0": not found'


@pytest.mark.parametrize("dag_id", ["k8s_image_pull", "k8s_image_pull_grace_over"])
def test_a_failed_image_pull_fails_the_task_naming_replica_image_and_message(emulator, dag_id, capfd):
    # startup_timeout is 600 s: the task ends on the failed pull (at once, or when the grace is over), never on it.
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all(except_=("worker-1",))
        kubelet.emu.pending_pod(namespace, kubelet.pod("worker-1"), reason="ErrImagePull", message=PULL_ERROR)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check()

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    line = failure_line(out)
    assert (f'replica {kubelet.pod("worker-1")}: image "registry.example.com/trainer:1.0" could not be pulled '
            f"(ErrImagePull: {PULL_ERROR})") in line
    assert "did not start" not in line
    # Its last try (no retries): the job deleted whole.
    settled(emulator, namespace, NOTHING)


def test_a_pull_that_recovers_within_the_grace_lets_the_job_succeed(emulator, capfd):
    namespace = namespace_of("k8s_image_pull_recovers")
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        worker = kubelet.pod("worker-1")
        kubelet.run_all(except_=("worker-1",))
        # Once the watch is open, every state below reaches the task as an event of its own, in order.
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        kubelet.emu.pending_pod(namespace, worker, reason="ErrImagePull", message=PULL_ERROR)
        kubelet.emu.pending_pod(namespace, worker, reason="ImagePullBackOff", message=PULL_ERROR)
        kubelet.emu.run_pod(namespace, worker)  # the registry answers again
        train_and_succeed(kubelet)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("k8s_image_pull_recovers")
    kubelet.check()

    assert states == {"train": "success"}
    out = capfd.readouterr().out
    assert "pending (ErrImagePull)" in out and "pending (ImagePullBackOff)" in out  # seen, and waited out
    settled(emulator, namespace, NOTHING)


# ---------------------------------------------------------------------------------------------- kill


def test_sigterm_to_the_task_runs_on_kill_and_deletes_the_job(emulator, capfd):
    # What Airflow does to a task marked failed in the UI: SIGTERM to the task process, whose handler calls
    # on_kill(). dag.test() runs the task in this process, so the signal goes to this process.
    namespace = namespace_of("k8s_long_running")
    emulator.create_namespace(namespace)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        kubelet.log(kubelet.master, "step 1")
        wait_until(lambda: any(r.path.endswith("/log") for r in task_requests(emulator, namespace)), timeout=30)
        os.kill(os.getpid(), signal.SIGTERM)

    kubelet = Kubelet(emulator, namespace).play(script)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        run, states = run_dag_at("k8s_long_running")
    finally:
        signal.signal(signal.SIGTERM, previous)
    kubelet.check()

    assert states == {"train": "failed"}
    assert "was stopped after" in capfd.readouterr().out
    settled(emulator, namespace, NOTHING)
