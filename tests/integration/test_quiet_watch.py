"""Long quiet hours: a job whose pods emit no event for many watch periods must not fail its wait.

The emulator here holds every watch past its ``timeoutSeconds`` and sends no bookmark, so each watch of a quiet
job ends by the client's read timeout (``QUIET_TIMINGS``: 1.3 s), as when a real API server's bookmarks come
less often than the client's read timeout. Each test lets at least 5 such watch periods go by (counted in the
emulator's request log) before the job ends, in every waiter: the operator's sync and deferred waits on the
``kubernetes``, ``kubeflow`` and ``trainjob`` backends and the sensor's deferred wait (its ``reschedule`` mode
pokes with a LIST instead of watching). Then the real errors: 401/403 ends the wait at once, a server refusing
connections ends it after ``reconnect_budget``, and a watch dropped mid-stream is resumed.
"""

from __future__ import annotations

import json

import pytest

from tests.dags.quiet_dags import JOB, namespace_of
from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration import trainjob_controller
from tests.integration.kubeflow_controller import GROUP, KubeflowController, register_kubeflow_crds
from tests.integration.trainjob_controller import TrainerController, register_trainjob_crd
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import DOCUMENT, NOTHING, Kubelet, first_event, make_job, new_hook, settled, trigger_for

QUIET_PERIODS = 5


@pytest.fixture(scope="module")
def emulator():
    # No bookmarks, and watches outlive their timeoutSeconds (1 s): only the client's read timeout ends them.
    with KubeEmulator(kubernetes_version="1.31", bookmark_interval=None, min_request_timeout=60) as emu:
        emu.ignore_timeout_seconds = True
        register_kubeflow_crds(emu)
        register_trainjob_crd(emu)
        yield emu
        assert emu.errors == [], "\n".join(emu.errors)


pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


def watches(emu: KubeEmulator, namespace: str, plural: str = "pods") -> int:
    return emu.request_counts(rf"/namespaces/{namespace}/{plural}$").get("watch", 0)


def pod_lists(emu: KubeEmulator, namespace: str) -> int:
    return emu.request_counts(rf"/namespaces/{namespace}/pods$").get("list", 0)


def no_pod_left(emu: KubeEmulator, namespace: str) -> None:
    """After a failure the job's pods are deleted (``clean_pod_policy`` ``running``; its Service stays)."""
    wait_until(lambda: emu.list("pods", namespace) == [], timeout=10, interval=0.05)


def quiet_for(emu: KubeEmulator, count, periods: int = QUIET_PERIODS) -> int:
    """Wait, with nothing happening, until ``count()`` grew by ``periods`` (watch requests or pokes)."""
    start = count()
    wait_until(lambda: count() >= start + periods, timeout=120, interval=0.05)
    return count() - start


# ---------------------------------------------------------------------------------------------- the operator


# The deferred cases (the same watch rules, in the triggerer) run with the slow tests, to keep the default run short.
@pytest.mark.parametrize("dag_id", ["quiet_k8s", pytest.param("quiet_k8s_deferrable", marks=pytest.mark.slow)])
def test_a_kubernetes_job_quiet_for_five_watch_periods_succeeds(emulator, dag_id):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    seen: list[int] = []

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: watches(emulator, namespace) >= 1, timeout=60, interval=0.02)
        seen.append(quiet_for(emulator, lambda: watches(emulator, namespace)))
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check(timeout=120)

    assert states == {"train": "success"}
    assert xcom(run, "train")["metrics"] == DOCUMENT["metrics"]
    assert seen and seen[0] >= QUIET_PERIODS
    settled(emulator, namespace, NOTHING)


def _kubeflow_quiet_then_succeed(emulator: KubeEmulator, seen: list[int]):
    def script(c: KubeflowController) -> None:
        c.start()
        seen.append(quiet_for(emulator, lambda: watches(emulator, c.namespace, c.plural)))
        c.succeed("master-0", DOCUMENT)
        c.succeed("worker-0")
        c.succeed("worker-1")
        c.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                     ("Succeeded", "PyTorchJobSucceeded", ""))

    return script


@pytest.mark.parametrize("dag_id", ["quiet_kubeflow",
                                    pytest.param("quiet_kubeflow_deferrable", marks=pytest.mark.slow)])
def test_a_kubeflow_job_quiet_for_five_watch_periods_succeeds(emulator, dag_id):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    seen: list[int] = []
    controller = KubeflowController(emulator, namespace, "pytorchjobs").play(
        _kubeflow_quiet_then_succeed(emulator, seen))
    run, states = run_dag_at(dag_id)
    controller.check(timeout=120)

    assert states == {"train": "success"}
    assert xcom(run, "train")["metrics"] == DOCUMENT["metrics"]
    assert seen and seen[0] >= QUIET_PERIODS
    wait_until(lambda: not emulator.list("pods", namespace) and not emulator.list(
        "pytorchjobs", namespace, group=GROUP), timeout=10, interval=0.05)


@pytest.mark.parametrize("dag_id", ["quiet_trainjob",
                                    pytest.param("quiet_trainjob_deferrable", marks=pytest.mark.slow)])
def test_a_trainjob_quiet_for_five_watch_periods_succeeds(emulator, dag_id):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    seen: list[int] = []

    def script(c: TrainerController) -> None:
        c.start()
        seen.append(quiet_for(emulator, lambda: watches(emulator, namespace, trainjob_controller.PLURAL)))
        c.succeed(0, DOCUMENT)
        c.succeed(1)
        c.succeed(2)
        c.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller = TrainerController(emulator, namespace).play(script)
    run, states = run_dag_at(dag_id)
    controller.check(timeout=120)

    assert states == {"train": "success"}
    assert xcom(run, "train")["metrics"] == DOCUMENT["metrics"]
    assert seen and seen[0] >= QUIET_PERIODS
    wait_until(lambda: not emulator.list(trainjob_controller.PLURAL, namespace, group=trainjob_controller.GROUP,
                                         version=trainjob_controller.VERSION), timeout=10, interval=0.05)


# ---------------------------------------------------------------------------------------------- the sensor


def labelled_pods(emu: KubeEmulator, namespace: str) -> dict[str, str]:
    """A job started outside Airflow with the project's labels, running: a master and a worker."""
    names = {}
    for role, master in (("master", True), ("worker", False)):
        name = f"{JOB}-{role}-0"
        emu.create("pods", namespace, {"metadata": {"name": name, "labels": {
            "airflow-distributed/job": JOB, "airflow-distributed/role": role, "airflow-distributed/index": "0",
            "airflow-distributed/master": str(master).lower()}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "base", "image": "registry.example.com/trainer:1.0",
                "env": [{"name": "AIRFLOW_DISTRIBUTED_FRAMEWORK", "value": "pytorch"}]}]}})
        emu.run_pod(namespace, name)
        names[role] = name
    return names


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
@pytest.mark.parametrize(("dag_id", "count"), [("quiet_sensor_deferrable", watches),
                                               ("quiet_sensor_reschedule", pod_lists)])
def test_a_sensor_waits_through_five_quiet_periods(emulator, dag_id, count):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    pods = labelled_pods(emulator, namespace)
    emulator.reset_requests()
    seen: list[int] = []

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: count(emulator, namespace) >= 1, timeout=60, interval=0.02)
        seen.append(quiet_for(emulator, lambda: count(emulator, namespace)))
        emulator.succeed_pod(namespace, pods["master"], message=json.dumps(DOCUMENT))

    kubelet = Kubelet(emulator, namespace, pods=2).play(script)
    run, states = run_dag_at(dag_id)
    kubelet.check(timeout=120)

    assert states == {"wait": "success"}
    assert xcom(run, "wait", "metrics") == DOCUMENT["metrics"]
    assert seen and seen[0] >= QUIET_PERIODS
    # A sensor deletes nothing: the job is the test's, which removes it.
    for name in pods.values():
        emulator.delete("pods", namespace, name)
    assert emulator.list("pods", namespace) == []


# ---------------------------------------------------------------------------------------------- dropped watches


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
def test_watches_cut_mid_stream_again_and_again_are_resumed_with_the_default_timings(emulator, kubeconfig, mode):
    """Every watch is cut 0.3 s after it opened (a flaky load balancer); bookmarks every 0.1 s keep the point to
    resume from fresh. With the default timings: no argument here is new to the hook or the trigger."""
    namespace = f"cut-{mode}"
    emulator.create_namespace(namespace)
    build, slots, name = make_job(namespace)
    hook = new_hook(kubeconfig)
    hook.ensure_job(namespace, build(None), slots)
    emulator.reset_requests()
    seen: list[int] = []

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: watches(emulator, namespace) >= 1, timeout=60, interval=0.02)
        seen.append(quiet_for(emulator, lambda: watches(emulator, namespace)))
        kubelet.master_exits(0, document=DOCUMENT)

    emulator.bookmark_interval, emulator.drop_watches_after = 0.1, 0.3
    try:
        kubelet = Kubelet(emulator, namespace).play(script)
        if mode == "sync":
            state = hook.wait_for_job(namespace, name, slots, startup_timeout=30).ending
        else:
            state = first_event(trigger_for(kubeconfig, namespace, name, slots))["status"]
        kubelet.check(timeout=60)
    finally:
        emulator.bookmark_interval, emulator.drop_watches_after = None, None

    assert state == "succeeded"
    assert seen and seen[0] >= QUIET_PERIODS
    assert emulator.request_counts(rf"/namespaces/{namespace}/pods$")["list"] == 1  # resumed, never relisted
    hook.delete_job(namespace, name)
    no_pod_left(emulator, namespace)


# ---------------------------------------------------------------------------------------------- real errors


def test_a_watch_dropped_mid_stream_is_resumed_from_where_it_was(emulator, capfd):
    namespace = namespace_of("quiet_dropped")
    emulator.create_namespace(namespace)
    emulator.reset_requests()

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: emulator.open_watches >= 1 and watches(emulator, namespace) >= 1, timeout=60,
                   interval=0.02)
        before = watches(emulator, namespace)
        assert emulator.drop_watches(path_regex=rf"/namespaces/{namespace}/") == 1
        wait_until(lambda: watches(emulator, namespace) > before, timeout=30, interval=0.02)
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("quiet_dropped")
    kubelet.check(timeout=60)

    assert states == {"train": "success"}
    requests = [r for r in emulator.requests if r.path == f"/api/v1/namespaces/{namespace}/pods"]
    # One LIST: the watch after the drop resumed from its resourceVersion, it did not start again.
    assert sum(1 for r in requests if not r.is_watch and r.method == "GET") == 1
    assert all(r.query.get("resourceVersion") for r in requests if r.is_watch)
    # A quiet end, logged as such: not an API failure with a retry.
    out = capfd.readouterr().out
    assert "the watch ended (ProtocolError" in out and "retrying in" not in out
    settled(emulator, namespace, NOTHING)


@pytest.mark.parametrize("dag_id", ["quiet_forbidden", "quiet_forbidden_deferrable"])
def test_a_forbidden_watch_ends_the_wait_at_once_and_says_why(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: watches(emulator, namespace) >= 1, timeout=60, interval=0.02)
        # Every watch from now on is refused (the role lost its watch permission).
        emulator.inject_faults(method="GET", path_regex=rf"/namespaces/{namespace}/pods$", statuses=[403] * 50)
        emulator.drop_watches(path_regex=rf"/namespaces/{namespace}/")

    kubelet = Kubelet(emulator, namespace).play(script)
    _, states = run_dag_at(dag_id)
    kubelet.check(timeout=60)
    refused = watches(emulator, namespace) - 1
    emulator.clear_faults()

    assert states == {"train": "failed"}
    assert refused == 1  # not retried
    out = capfd.readouterr().out
    assert "403 Forbidden" in out and "refused the credentials or their permissions; not retried" in out
    no_pod_left(emulator, namespace)


@pytest.mark.parametrize("dag_id", ["quiet_unreachable", "quiet_unreachable_deferrable"])
def test_a_server_that_stays_unreachable_ends_the_wait_after_the_reconnect_budget(emulator, dag_id, capfd):
    namespace = namespace_of(dag_id)
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    emulator.refused.clear()

    def gave_up() -> bool:
        # The clean-up's first request (deleting the job) comes once the wait has given up.
        return any(r.method == "DELETE" for r in emulator.refused)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        wait_until(lambda: watches(emulator, namespace) >= 1, timeout=60, interval=0.02)
        emulator.refuse_connections = True
        emulator.drop_watches()
        try:
            wait_until(gave_up, timeout=60, interval=0.02)
        finally:
            emulator.refuse_connections = False  # back for the clean-up's retries

    kubelet = Kubelet(emulator, namespace).play(script)
    try:
        _, states = run_dag_at(dag_id)
    finally:
        emulator.refuse_connections = False
    kubelet.check(timeout=60)

    assert states == {"train": "failed"}
    tries = [r for r in emulator.refused if r.method == "GET" and r.path == f"/api/v1/namespaces/{namespace}/pods"]
    assert len(tries) >= 2  # it kept trying to reconnect
    out = capfd.readouterr().out
    assert "the API server could not be reached again for" in out and "(reconnect_budget 3s)" in out
    no_pod_left(emulator, namespace)
