"""``DistributedJobTrigger`` against the API emulator, through ``kubernetes_asyncio`` and ``AsyncKubernetesHook``.

The kill test runs the trigger the way the triggerer does (``TriggerRunner.run_trigger``) and cancels it the
way a user action does, so that what deletes the job is Airflow's own call of the trigger's ``on_kill()``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from airflow_distributed.jobstate.job_event import JobEvent
from airflow_distributed.jobstate.verdicts import JobVerdict, slots_to_json
from airflow_distributed.triggers.api_clients import open_clients
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger
from tests.helpers import wait_until
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import (
    DOCUMENT,
    NOTHING,
    PODS,
    Kubelet,
    first_event,
    lists_and_watches,
    make_job,
    new_hook,
    objects,
    settled,
    task_requests,
    trigger_for,
)


def start_job(config: str, namespace: str, environment: dict | None = None):
    build, slots, name = make_job(namespace, environment)
    new_hook(config).ensure_job(namespace, build(None), slots)
    return slots, name


# ---------------------------------------------------------------------------------------------- events


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_the_trigger_reports_the_verdict_from_one_resumed_watch(emulator, kubeconfig, ns, outcome):
    slots, name = start_job(kubeconfig, ns)
    emulator.reset_requests()

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        kubelet.emu.wait_for_requests("watch", 2, PODS.format(ns))  # the 1 s watch has timed out and resumed
        if outcome == "succeeded":
            kubelet.master_exits(0, document=DOCUMENT)
        else:
            kubelet.fail(kubelet.pod("worker-1"), 137, "OOMKilled")

    kubelet = Kubelet(emulator, ns).play(script)
    event = first_event(trigger_for(kubeconfig, ns, name, slots, watch_timeout=1))
    kubelet.check()

    assert (event["status"], event["job_name"], event["namespace"]) == (outcome, name, ns)
    assert event["replicas"] == slots_to_json(slots)
    # The task reads the same event back (``JobEvent``), and the event is the one the trigger fired.
    assert JobEvent.from_payload(event).to_payload() == event
    assert JobEvent.from_payload(event).verdict == JobVerdict.from_dict(event["verdict"])
    if outcome == "succeeded":
        assert event["verdict"] == {"state": "succeeded", "replica": slots[0].name}
    else:
        assert event["verdict"] == {"state": "failed", "replica": slots[2].name, "cause": "exit", "exit_code": 137,
                                    "reason": "OOMKilled", "container": "base"}
    lists, watches = lists_and_watches(emulator, ns)
    assert len(lists) == 1 and len(watches) >= 2
    assert objects(emulator, ns)["pods"] == sorted(s.name for s in slots)  # the trigger only watches


def test_an_expired_watch_in_the_triggerer_is_relisted(tmp_path):
    with KubeEmulator(bookmark_interval=60) as emu:
        config = emu.write_kubeconfig(tmp_path / "config")
        emu.create_namespace("gone")
        slots, name = start_job(config, "gone")
        emu.reset_requests()

        def script(kubelet: Kubelet) -> None:
            kubelet.run_all()
            emu.wait_for_requests("watch", 1, PODS.format("gone"))  # listed, now watching from that version
            emu.create("configmaps", "default", {"metadata": {"name": "elsewhere"}})
            emu.compact()
            emu.wait_for_requests("list", 2, PODS.format("gone"))  # the relist after 410 Gone
            kubelet.master_exits(0, document=DOCUMENT)

        kubelet = Kubelet(emu, "gone").play(script)
        event = first_event(trigger_for(config, "gone", name, slots, watch_timeout=1))
        kubelet.check()

        assert event["status"] == "succeeded"
        lists, _ = lists_and_watches(emu, "gone")
        assert len(lists) == 2
        assert emu.errors == []


def test_a_replica_that_cannot_start_fails_in_the_triggerer_too(emulator, kubeconfig, ns):
    slots, name = start_job(kubeconfig, ns)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all(except_=("worker-1",))
        kubelet.emu.pending_pod(ns, kubelet.pod("worker-1"), reason="Unschedulable",
                                message="0/3 nodes are available: 3 Insufficient memory.")

    kubelet = Kubelet(emulator, ns).play(script)
    event = first_event(trigger_for(kubeconfig, ns, name, slots, startup_timeout=1.5))
    kubelet.check()

    assert event["status"] == "failed"
    assert event["verdict"] == {"state": "failed", "replica": slots[2].name, "cause": "startup",
                                "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient memory."}


def test_the_triggers_of_one_connection_share_one_api_client_closed_with_the_last(emulator, kubeconfig):
    """One triggerer, three deferred jobs of one connection: one client (one aiohttp session and SSL context),
    three watches; the client is closed once the last trigger fired, and a new event loop opens its own."""
    jobs = []
    for _ in range(3):
        namespace = f"t-{uuid.uuid4().hex[:8]}"
        emulator.create_namespace(namespace)
        jobs.append((namespace, *start_job(kubeconfig, namespace)))
    measured = threading.Event()

    def watching(namespace: str) -> bool:
        return bool(lists_and_watches(emulator, namespace)[1])

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        assert measured.wait(60)
        kubelet.master_exits(0, document=DOCUMENT)

    kubelets = [Kubelet(emulator, namespace).play(script) for namespace, _, _ in jobs]
    figures: dict[str, int] = {}

    async def triggerer() -> list[dict]:
        triggers = [trigger_for(kubeconfig, ns, name, slots, startup_timeout=3600.0) for ns, slots, name in jobs]
        tasks = [asyncio.create_task(anext(trigger.run())) for trigger in triggers]
        try:
            await asyncio.to_thread(wait_until, lambda: all(watching(ns) for ns, _, _ in jobs), timeout=60)
            figures["while_watching"] = open_clients()
        finally:
            measured.set()
        events = [event.payload for event in await asyncio.gather(*tasks)]
        figures["after"] = open_clients()
        return events

    events = asyncio.run(triggerer())
    for kubelet in kubelets:
        kubelet.check()

    assert [e["status"] for e in events] == ["succeeded"] * 3
    assert figures == {"while_watching": 1, "after": 0}
    # Another loop (a test, "airflow dags test"): a client of its own, not the closed one of the first loop.
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    emulator.create_namespace(namespace)
    slots, name = start_job(kubeconfig, namespace)
    kubelet = Kubelet(emulator, namespace).play(lambda k: (k.run_all(), k.master_exits(0, document=DOCUMENT)))
    assert first_event(trigger_for(kubeconfig, namespace, name, slots))["status"] == "succeeded"
    kubelet.check()


PULL_ERROR = 'failed to pull and unpack image "registry.example.com/trainer:bad": not found'


def test_a_failed_image_pull_fails_in_the_triggerer_at_once(emulator, kubeconfig, ns):
    slots, name = start_job(kubeconfig, ns)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all(except_=("worker-1",))
        kubelet.emu.pending_pod(ns, kubelet.pod("worker-1"), reason="ErrImagePull", message=PULL_ERROR)

    kubelet = Kubelet(emulator, ns).play(script)
    # A startup window no test waits out: the verdict comes from the failed pull, not from the window's end.
    event = first_event(trigger_for(kubeconfig, ns, name, slots, startup_timeout=3600.0))
    kubelet.check()

    image = kubelet.seen[slots[2].name]["spec"]["containers"][0]["image"]
    assert event["verdict"] == {"state": "failed", "replica": slots[2].name, "cause": "image",
                                "reason": "ErrImagePull", "message": PULL_ERROR, "image": image}


def test_a_pull_that_recovers_within_the_grace_succeeds_in_the_triggerer(emulator, kubeconfig, ns):
    slots, name = start_job(kubeconfig, ns)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all(except_=("worker-1",))
        worker = kubelet.pod("worker-1")
        kubelet.emu.pending_pod(ns, worker, reason="ErrImagePull", message=PULL_ERROR)
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, ns)), timeout=60, interval=0.02)
        kubelet.emu.pending_pod(ns, worker, reason="ImagePullBackOff", message=PULL_ERROR)
        kubelet.emu.run_pod(ns, worker)  # the registry answers again
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, ns).play(script)
    trigger = trigger_for(kubeconfig, ns, name, slots, startup_timeout=3600.0, image_pull_grace=600.0)
    assert trigger.serialize()[1]["image_pull_grace"] == 600.0  # survives a triggerer restart
    event = first_event(trigger)
    kubelet.check()

    assert event["verdict"] == {"state": "succeeded", "replica": slots[0].name}


def test_the_tasks_execution_timeout_fires_a_timeout_event(emulator, kubeconfig, ns):
    slots, name = start_job(kubeconfig, ns)
    Kubelet(emulator, ns).play(lambda k: k.run_all()).check()

    event = first_event(trigger_for(kubeconfig, ns, name, slots, execution_deadline=time.time() + 1.0,
                                    watch_timeout=300))

    assert event["status"] == "timeout" and "execution_timeout" in event["message"]
    # Fired within the first 300 s watch: the deadline cuts the watch, it does not wait for the watch to end.
    assert len(lists_and_watches(emulator, ns)[1]) == 1


def test_the_trigger_serializes_to_what_builds_it_again(kubeconfig):
    trigger = DistributedJobTrigger(job_name="train-1", namespace="ml", replicas=[["train-1-master-0", "master", 0]],
                                    startup_timeout=60.0, started_at=1.5, connection_extras={"kube_config_path": "x"},
                                    execution_deadline=99.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_distributed.triggers.kubernetes.DistributedJobTrigger"
    assert DistributedJobTrigger(**kwargs).serialize() == (classpath, kwargs)


# ---------------------------------------------------------------------------------------------- kill


@pytest.mark.parametrize(("cancel", "deleted"), [("user action", True), ("triggerer shutdown", False)])
def test_a_user_killing_the_deferred_task_deletes_the_job(emulator, kubeconfig, ns, monkeypatch, cancel, deleted):
    from airflow.jobs import triggerer_job_runner
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    monkeypatch.setenv("AIRFLOW_DISABLE_GREENBACK_PORTAL", "true")
    slots, name = start_job(kubeconfig, ns)
    Kubelet(emulator, ns).play(lambda k: k.run_all()).check()
    trigger = trigger_for(kubeconfig, ns, name, slots)

    async def scenario() -> None:
        runner = TriggerRunner()
        task = asyncio.create_task(runner.run_trigger(1, trigger))
        runner.triggers[1] = {"task": task, "name": "distributed-job", "events": 0, "is_watcher": False}
        await asyncio.to_thread(wait_until, lambda: any(r.is_watch for r in task_requests(emulator, ns)), 30)
        if cancel == "user action":
            runner.to_cancel.append(1)
            await runner.cancel_triggers()  # what the triggerer does when the task is marked failed/success
        else:
            task.cancel()  # a triggerer going away: the trigger moves elsewhere, the job must keep running
        with pytest.raises(asyncio.CancelledError):
            await task

    assert triggerer_job_runner._USER_ACTION_CANCEL_MSG  # the cancel message on_kill() depends on exists
    asyncio.run(scenario())

    if deleted:
        settled(emulator, ns, NOTHING)
    else:
        assert objects(emulator, ns)["services"] == [name] and len(objects(emulator, ns)["pods"]) == 3


class TriggerOnOlderAirflow(DistributedJobTrigger):
    """The trigger as a triggerer before Airflow 3.3 runs it: no on_kill(), so cleanup() must tell a user's kill
    (the task left the deferred state) from a triggerer restart (still deferred). The task's state is given."""

    def __init__(self, task_state: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.task_state = task_state

    async def _task_left_deferral(self) -> bool:
        return self.task_state != "deferred"


@pytest.mark.parametrize(("task_state", "deleted"), [("failed", True), ("deferred", False)])
def test_before_airflow_3_3_cleanup_deletes_the_job_only_after_a_kill(emulator, kubeconfig, ns, monkeypatch,
                                                                      task_state, deleted):
    from airflow_distributed.triggers import kubernetes as module

    monkeypatch.setattr(module, "_AIRFLOW_HAS_TRIGGER_ON_KILL", False)
    slots, name = start_job(kubeconfig, ns)
    kwargs = trigger_for(kubeconfig, ns, name, slots).serialize()[1]

    asyncio.run(TriggerOnOlderAirflow(task_state, **kwargs).cleanup())

    if deleted:
        settled(emulator, ns, NOTHING)
    else:
        assert objects(emulator, ns)["services"] == [name] and len(objects(emulator, ns)["pods"]) == 3


# ---------------------------------------------------------------------------------------------- the master's log


def test_a_master_far_ahead_of_the_relay_is_shown_to_its_last_lines_with_the_gap_said_and_no_line_twice(
        emulator, kubeconfig, ns):
    import logging

    from airflow_distributed.triggers.log_relay import RELAY_BYTES, SKIP_TAIL_LINES

    slots, name = start_job(kubeconfig, ns)
    shown: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            shown.append(record.getMessage())

    burst = [f"line {i:06d} " + "x" * 60 for i in range(3 * RELAY_BYTES // 72)]  # 3 MiB with the timestamps

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        try:
            kubelet.log(kubelet.master, "first")
            wait_until(lambda: f"[{kubelet.master}] first" in shown, timeout=30)
            kubelet.log(kubelet.master, *burst)  # between two relays: more than one relay reads
            # The skip note comes before the read of the last lines: "after" is printed once that read is shown,
            # else it could be among them (a race of this script, not of the relay).
            wait_until(lambda: f"[{kubelet.master}] {burst[-1]}" in shown, timeout=30)
            kubelet.log(kubelet.master, "after")
            wait_until(lambda: f"[{kubelet.master}] after" in shown, timeout=30)
        finally:  # the job ends whatever the relay did, so that the trigger does
            kubelet.master_exits(0, document=DOCUMENT)

    trigger = trigger_for(kubeconfig, ns, name, slots, logging_interval=0.2)
    logger = logging.getLogger(f"test-relay-{ns}")
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    logger.propagate = False
    trigger._log = logger
    kubelet = Kubelet(emulator, ns).play(script)
    event = first_event(trigger)
    kubelet.check()

    master = slots[0].name
    lines = [line.removeprefix(f"[{master}] ") for line in shown if line.startswith(f"[{master}] ")]
    relayed = [line for line in lines if line.startswith("line ")]
    assert len(relayed) == len(set(relayed))  # no line twice
    assert relayed[-SKIP_TAIL_LINES:] == burst[-SKIP_TAIL_LINES:]  # the master's last lines, after the gap
    assert relayed[:100] == burst[:100] and len(relayed) < len(burst) // 2  # one relay's worth, then the gap
    assert lines.count("first") == 1 and lines.count("after") == 1
    assert event["status"] == "succeeded" and event["log_cursor"]["uid"]
