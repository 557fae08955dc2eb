"""Many deferred jobs in one triggerer share one LIST and one watch of their namespace's pods (``shared_watch``).

The triggers run as tasks of one event loop, as Airflow's triggerer runs them, against the API emulator over HTTP;
a script in a thread plays the cluster and starts or cancels triggers while the watch runs. The emulator's request
log says how many LISTs and watches the namespace got: one of each for every job at once, where a watch per job
made one of each per job.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from airflow.triggers.base import BaseTrigger

from airflow_distributed.manifests.kubernetes import JOB_LABEL, to_dict
from airflow_distributed.triggers.api_clients import open_clients
from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger
from airflow_distributed.triggers.shared_watch import open_watches
from tests.helpers import wait_until
from tests.integration.kubeflow_controller import GROUP, KubeflowController, register_kubeflow_crds
from tests.k8s_emulator import KubeEmulator
from tests.k8s_emulator.server import request_verb
from tests.kubernetes_helpers import PODS, comes_to, lists_and_watches, make_job, now, trigger_for


@pytest.fixture(scope="module")
def emulator():
    # No bookmarks: a watch resumed after compact() is then older than what the server keeps (410 Gone).
    with KubeEmulator(kubernetes_version="1.31", bookmark_interval=None) as emu:
        register_kubeflow_crds(emu)
        yield emu
        assert emu.errors == [], "\n".join(emu.errors)


Job = tuple[str, list]


def create_jobs(emu: KubeEmulator, namespace: str, count: int) -> list[Job]:
    """``count`` jobs of a master and a worker, running; (name, slots) each. Written straight into the emulator."""
    jobs = []
    for _ in range(count):
        build, slots, name = make_job(namespace, {"pytorch": {"n_workers": 1}})
        for pod in build(None).pods:
            emu.create("pods", namespace, to_dict(pod))
            emu.run_pod(namespace, pod.metadata.name)
        jobs.append((name, slots))
    return jobs


def master_exits(emu: KubeEmulator, namespace: str, job: Job) -> None:
    at = now()
    emu.set_pod_phase(namespace, job[1][0].name, "Running", container_states={"base": {"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}}})


def worker_fails(emu: KubeEmulator, namespace: str, job: Job) -> None:
    emu.fail_pod(namespace, job[1][1].name, exit_code=137, reason="OOMKilled")


def succeeded(job: Job) -> dict:
    return {"state": "succeeded", "replica": job[1][0].name}


def oom_killed(job: Job) -> dict:
    return {"state": "failed", "replica": job[1][1].name, "cause": "exit", "exit_code": 137, "reason": "OOMKilled",
            "container": "base"}


class Triggerer:
    """Triggers run as tasks of one event loop; ``start``/``cancel``/``event`` are called from the script's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, kubeconfig: str, namespace: str) -> None:
        self.loop, self.kubeconfig, self.namespace = loop, kubeconfig, namespace
        self.tasks: dict[str, asyncio.Task] = {}
        self.events: dict[str, dict] = {}
        self.after: dict[str, int] = {}

    def start(self, job: Job, trigger: BaseTrigger | None = None) -> None:
        """Run the trigger of ``job`` (a ``DistributedJobTrigger`` unless ``trigger`` is given)."""
        name, slots = job
        if trigger is None:
            trigger = trigger_for(self.kubeconfig, self.namespace, name, slots, startup_timeout=3600.0)
        started = threading.Event()

        def create() -> None:
            self.tasks[name] = self.loop.create_task(self._run(name, trigger))
            started.set()

        self.loop.call_soon_threadsafe(create)
        assert started.wait(10)

    async def _run(self, name: str, trigger: BaseTrigger) -> None:
        self.events[name] = (await anext(trigger.run())).payload

    def cancel(self, name: str) -> None:
        self.loop.call_soon_threadsafe(self.tasks[name].cancel)
        wait_until(lambda: self.tasks[name].done(), timeout=10, interval=0.02)

    def event(self, name: str) -> dict:
        return wait_until(lambda: self.events.get(name), timeout=60, interval=0.02)


def play(kubeconfig: str, namespace: str, script: Callable[[Triggerer], Any]) -> Triggerer:
    """Run ``script`` in a thread while one event loop runs the triggers it starts; then what is left open."""

    async def triggerer() -> Triggerer:
        t = Triggerer(asyncio.get_running_loop(), kubeconfig, namespace)
        try:
            await asyncio.to_thread(script, t)
        except BaseException:
            for task in t.tasks.values():
                task.cancel()
            raise
        finally:
            await asyncio.gather(*t.tasks.values(), return_exceptions=True)
        t.after = {"shared watches": open_watches(), "api clients": open_clients()}
        return t

    return asyncio.run(triggerer())


def watching(emu: KubeEmulator, namespace: str, count: int = 1) -> None:
    emu.wait_for_requests("watch", count, PODS.format(namespace))


def drop_the_watch(emu: KubeEmulator, namespace: str) -> None:
    """Cut the namespace's watch mid-stream, once the emulator serves it."""
    wait_until(lambda: emu.open_watches >= 1, timeout=10, interval=0.02)
    assert emu.drop_watches(path_regex=f"/namespaces/{namespace}/") == 1


def closed(emu: KubeEmulator, t: Triggerer) -> None:
    """The last trigger out closed the watch and the client: nothing open in the loop, nothing served."""
    assert t.after == {"shared watches": 0, "api clients": 0}
    comes_to(lambda: emu.open_watches, 0)


# ---------------------------------------------------------------------------------------------- tests


def test_fifty_jobs_in_one_namespace_share_one_list_and_one_watch_and_each_gets_its_own_verdict(
        emulator, kubeconfig, ns):
    jobs = create_jobs(emulator, ns, 50)
    emulator.reset_requests()

    def script(t: Triggerer) -> None:
        for job in jobs:
            t.start(job)
        watching(emulator, ns)
        for index, job in enumerate(jobs):
            (master_exits if index % 2 == 0 else worker_fails)(emulator, ns, job)
        for name, _ in jobs:
            t.event(name)

    t = play(kubeconfig, ns, script)

    for index, job in enumerate(jobs):
        event = t.events[job[0]]
        assert (event["job_name"], event["status"]) == (job[0], "succeeded" if index % 2 == 0 else "failed")
        assert event["verdict"] == (succeeded(job) if index % 2 == 0 else oom_killed(job))
    lists, watches = lists_and_watches(emulator, ns)
    assert (len(lists), len(watches)) == (1, 1)  # a watch per job: 50 and 50
    assert lists[0].query["labelSelector"] == "airflow-distributed/job"
    closed(emulator, t)


def test_jobs_join_and_leave_while_the_watch_runs(emulator, kubeconfig, ns):
    staying, leaving, ended = create_jobs(emulator, ns, 3)
    emulator.reset_requests()
    late: list[Job] = []

    def script(t: Triggerer) -> None:
        t.start(staying)
        t.start(leaving)
        watching(emulator, ns)
        # A job that ended before its trigger joined: its state comes from the watch's cache, no request.
        master_exits(emulator, ns, ended)
        time.sleep(0.2)
        t.start(ended)
        assert t.event(ended[0])["verdict"] == succeeded(ended)
        # A job created after the watch started.
        late.extend(create_jobs(emulator, ns, 1))
        t.start(late[0])
        # A trigger that leaves (the task was killed, or moved to another triggerer): the others go on.
        t.cancel(leaving[0])
        master_exits(emulator, ns, late[0])
        worker_fails(emulator, ns, staying)
        t.event(late[0][0])
        t.event(staying[0])

    t = play(kubeconfig, ns, script)

    assert t.events[late[0][0]]["verdict"] == succeeded(late[0])
    assert t.events[staying[0]]["verdict"] == oom_killed(staying)
    assert leaving[0] not in t.events and t.tasks[leaving[0]].cancelled()
    lists, watches = lists_and_watches(emulator, ns)
    assert (len(lists), len(watches)) == (1, 1)
    closed(emulator, t)


def test_a_410_mid_stream_is_one_relist_for_every_job_and_tells_each_what_it_missed(emulator, kubeconfig, ns):
    jobs = create_jobs(emulator, ns, 10)
    emulator.reset_requests()

    def script(t: Triggerer) -> None:
        for job in jobs:
            t.start(job)
        watching(emulator, ns)
        # The server goes away; while it is away one job ends and another loses a pod, and the history is gone.
        emulator.refuse_connections = True
        try:
            drop_the_watch(emulator, ns)
            wait_until(lambda: emulator.open_watches == 0, timeout=10, interval=0.02)
            master_exits(emulator, ns, jobs[0])
            emulator.delete("pods", ns, jobs[1][1][1].name)
            emulator.compact()
        finally:
            emulator.refuse_connections = False
        # The resumed watch gets an ERROR 410 in its stream: one LIST for all, then a new watch.
        emulator.wait_for_requests("list", 2, PODS.format(ns))
        assert t.event(jobs[0][0])["verdict"] == succeeded(jobs[0])
        assert t.event(jobs[1][0])["verdict"] == {"state": "failed", "replica": jobs[1][1][1].name,
                                                  "cause": "deleted"}
        watching(emulator, ns, 3)
        for job in jobs[2:]:
            master_exits(emulator, ns, job)
        for job in jobs[2:]:
            t.event(job[0])

    t = play(kubeconfig, ns, script)

    assert [t.events[job[0]]["verdict"] for job in jobs[2:]] == [succeeded(job) for job in jobs[2:]]
    lists, watches = lists_and_watches(emulator, ns)
    assert len(lists) == 2  # a watch per job: 11 (each relisted on its own)
    assert len(watches) == 3  # the first, the resumed one that got 410, the one after the relist
    closed(emulator, t)


def test_a_dropped_connection_is_one_resumed_watch_for_every_job(emulator, kubeconfig, ns):
    jobs = create_jobs(emulator, ns, 10)
    emulator.reset_requests()

    def script(t: Triggerer) -> None:
        for job in jobs:
            t.start(job)
        watching(emulator, ns)
        drop_the_watch(emulator, ns)
        watching(emulator, ns, 2)
        for index, job in enumerate(jobs):
            (master_exits if index % 2 == 0 else worker_fails)(emulator, ns, job)
        for job in jobs:
            t.event(job[0])

    t = play(kubeconfig, ns, script)

    assert [t.events[job[0]]["verdict"] for job in jobs] == [
        succeeded(job) if index % 2 == 0 else oom_killed(job) for index, job in enumerate(jobs)]
    lists, watches = lists_and_watches(emulator, ns)
    assert (len(lists), len(watches)) == (1, 2)  # a watch per job: 10 LISTs, 20 watches
    assert watches[1].query.get("resourceVersion")  # resumed, not started again
    closed(emulator, t)


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection")
def test_kubeflow_jobs_of_one_kind_in_a_namespace_share_one_watch_of_the_kind(emulator, kubeconfig, ns):
    controllers = {}
    for name in ("pt-succeeds", "pt-fails", "pt-deleted"):
        controller = controllers[name] = KubeflowController(emulator, ns, "pytorchjobs")
        controller.submit(name, {"Master": 1, "Worker": 1}, container="pytorch")
        controller.create_pods()
        controller.run_all()
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))
    emulator.reset_requests()
    jobs_path = f"/namespaces/{ns}/pytorchjobs$"

    def script(t: Triggerer) -> None:
        for name in controllers:
            t.start((name, []), KubeflowJobTrigger(job_name=name, namespace=ns, group=GROUP, version="v1",
                                                   plural="pytorchjobs", kubernetes_conn_id="kubernetes_default"))
        emulator.wait_for_requests("watch", 1, jobs_path)
        controllers["pt-succeeds"].conditions(("Created", "PyTorchJobCreated", ""),
                                              ("Running", "PyTorchJobRunning", ""),
                                              ("Succeeded", "PyTorchJobSucceeded", "done"))
        controllers["pt-fails"].conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                                           ("Failed", "PyTorchJobFailed", "worker-0 exited 1"))
        emulator.delete("pytorchjobs", ns, "pt-deleted", group=GROUP, version="v1")
        for name in controllers:
            t.event(name)

    t = play(kubeconfig, ns, script)

    assert {name: event["status"] for name, event in t.events.items()} == {
        "pt-succeeds": "succeeded", "pt-fails": "failed", "pt-deleted": "deleted"}
    assert t.events["pt-fails"]["message"] == "worker-0 exited 1"
    counts = emulator.request_counts(jobs_path)
    assert (counts.get("list"), counts.get("watch")) == (1, 1)  # a watch per job: 3 and 3
    closed(emulator, t)


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection")
@pytest.mark.parametrize(("delete_on_kill", "pod_watches"), [(False, 0), (True, 1)], ids=["sensor", "operator"])
def test_only_the_operators_kubeflow_trigger_watches_the_jobs_pods(emulator, kubeconfig, ns, delete_on_kill,
                                                                   pod_watches):
    """The pods the cluster takes away word the resumed task's failure; a sensor's event never reads them, so its
    trigger opens no watch of the namespace's pods for them (its pending check's LIST of the job's pods aside)."""
    controller = KubeflowController(emulator, ns, "pytorchjobs")
    controller.submit("pt-sensed", {"Master": 1, "Worker": 1}, container="pytorch")
    controller.create_pods()
    controller.run_all()
    controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""))
    emulator.reset_requests()
    pods_path = f"/namespaces/{ns}/pods$"

    def shared_pod_watch() -> list:
        """The requests of the namespace's shared pod watch (every pod of a job: the job label's selector)."""
        return [r for r in emulator.requests if re.search(pods_path, r.path)
                and r.query.get("labelSelector") == JOB_LABEL]

    def script(t: Triggerer) -> None:
        t.start(("pt-sensed", []), KubeflowJobTrigger(job_name="pt-sensed", namespace=ns, group=GROUP, version="v1",
                                                      plural="pytorchjobs", kubernetes_conn_id="kubernetes_default",
                                                      delete_on_kill=delete_on_kill))
        emulator.wait_for_requests("watch", 1, f"/namespaces/{ns}/pytorchjobs$")
        emulator.wait_for_requests("list", 1, pods_path)  # its pending check's, or the shared watch's first
        if pod_watches:
            emulator.wait_for_requests("watch", 1, pods_path)
        controller.conditions(("Created", "PyTorchJobCreated", ""), ("Running", "PyTorchJobRunning", ""),
                              ("Succeeded", "PyTorchJobSucceeded", "done"))
        t.event("pt-sensed")

    t = play(kubeconfig, ns, script)

    assert t.events["pt-sensed"]["status"] == "succeeded"
    assert [request_verb(r) for r in shared_pod_watch()] == ["list", "watch"][:2 * pod_watches]
    closed(emulator, t)
