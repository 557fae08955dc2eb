"""The shared watch's fan-out (``triggers.shared_watch``), apart from I/O: LIST bodies and watch lines in, what each
job's feed hands its trigger out; and the registry's start and stop with a stand-in for the watch loop."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_distributed.hooks.api_retry import KubernetesJobError
from airflow_distributed.jobstate.watch_stream import WatchGone
from airflow_distributed.triggers import shared_watch
from airflow_distributed.triggers.kubernetes import JOB_PODS
from airflow_distributed.triggers.shared_watch import NamespaceWatch, subscribe


def pod(job: str, name: str, phase: str = "Running", version: str = "1") -> dict:
    return {"metadata": {"name": name, "resourceVersion": version, "labels": {"airflow-distributed/job": job},
                         "annotations": {"big": "x" * 100}},
            "spec": {"containers": [{"name": "base", "image": "trainer:1", "env": [{"name": "A", "value": "1"}]}]},
            "status": {"phase": phase}}


def listing(*pods: dict, version: str = "10") -> dict:
    return {"metadata": {"resourceVersion": version}, "items": list(pods)}


def line(kind: str, obj: dict) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def names(delivery) -> tuple[list[str] | None, list[tuple[str, str, str]]]:
    """(names in the view, [(type, name, phase)] of the events) of a delivery."""
    view = None if delivery.snapshot is None else sorted(o["metadata"]["name"] for o in delivery.snapshot)
    return view, [(kind, o["metadata"]["name"], o["status"]["phase"]) for kind, o in delivery.events]


def test_each_job_hears_only_its_own_pods_and_a_list_gives_every_subscriber_a_view():
    watch = NamespaceWatch(JOB_PODS)
    a, b = watch.subscribe("job-a"), watch.subscribe("job-b")
    assert a.take() is None and not a.viewed  # nothing before the first LIST

    watch.on_list(listing(pod("job-a", "a-0"), pod("job-a", "a-1"), pod("job-c", "c-0")))
    watch.on_line(line("MODIFIED", pod("job-a", "a-1", "Failed", "11")))
    watch.on_line(line("ADDED", pod("job-b", "b-0", "Pending", "12")))
    watch.on_line(line("MODIFIED", pod("job-c", "c-0", "Succeeded", "13")))  # nobody waits for job-c

    assert names(a.take()) == (["a-0", "a-1"], [("MODIFIED", "a-1", "Failed")])
    assert a.viewed and a.take() is None
    assert names(b.take()) == ([], [("ADDED", "b-0", "Pending")])
    assert watch.resource_version == "13"
    # What is kept of a pod: what the tracker reads, not its spec's environment or its annotations.
    kept = watch.objects["job-a"]["a-0"]
    assert kept["spec"] == {"containers": [{"name": "base", "image": "trainer:1"}]} and "annotations" not in kept[
        "metadata"]


def test_a_job_that_joins_a_running_watch_starts_from_the_cache_and_misses_no_event():
    watch = NamespaceWatch(JOB_PODS)
    watch.subscribe("job-a")
    watch.on_list(listing(pod("job-a", "a-0")))
    watch.on_line(line("ADDED", pod("job-late", "late-0", "Pending", "11")))
    watch.on_line(line("MODIFIED", pod("job-late", "late-0", "Running", "12")))

    late = watch.subscribe("job-late")  # its pods were created after the watch started
    watch.on_line(line("MODIFIED", pod("job-late", "late-0", "Succeeded", "13")))

    delivery = late.take()
    assert [o["status"]["phase"] for o in delivery.snapshot] == ["Running"]
    assert names(delivery)[1] == [("MODIFIED", "late-0", "Succeeded")]
    # A job with no pod yet joins with an empty view, not with nothing: its state is known.
    empty = watch.subscribe("job-none")
    assert names(empty.take()) == ([], [])


def test_a_slow_trigger_gets_the_latest_state_of_each_pod_not_every_event():
    watch = NamespaceWatch(JOB_PODS)
    feed = watch.subscribe("job-a")
    watch.on_list(listing(pod("job-a", "a-0"), pod("job-a", "a-1")))
    feed.take()
    for version in range(20, 120):
        watch.on_line(line("MODIFIED", pod("job-a", "a-0", "Running", str(version))))
    watch.on_line(line("MODIFIED", pod("job-a", "a-1", "Running", "200")))
    watch.on_line(line("MODIFIED", pod("job-a", "a-0", "Failed", "201")))
    watch.on_line(line("DELETED", pod("job-a", "a-1", "Running", "202")))

    assert feed.pending == 2  # one entry per pod, however many events
    assert names(feed.take()) == (None, [("MODIFIED", "a-0", "Failed"), ("DELETED", "a-1", "Running")])


def test_a_feed_holds_no_more_than_max_pending_pods(monkeypatch):
    monkeypatch.setattr(shared_watch, "MAX_PENDING", 3)
    watch = NamespaceWatch(JOB_PODS)
    feed = watch.subscribe("job-a")
    watch.on_list(listing())
    feed.take()
    for index in range(5):
        watch.on_line(line("ADDED", pod("job-a", f"a-{index}", "Pending", str(20 + index))))
        assert feed.pending <= 3

    view, events = names(feed.take())
    # Past the bound the feed was given the job's whole state instead, and the events after it.
    assert view == ["a-0", "a-1", "a-2", "a-3"] and events == [("ADDED", "a-4", "Pending")]


def test_a_410_mid_stream_relists_once_and_every_subscriber_gets_the_new_view():
    watch = NamespaceWatch(JOB_PODS)
    a, b = watch.subscribe("job-a"), watch.subscribe("job-b")
    watch.on_list(listing(pod("job-a", "a-0"), pod("job-b", "b-0")))
    a.take(), b.take()
    watch.on_line(line("MODIFIED", pod("job-a", "a-0", "Running", "11")))

    with pytest.raises(WatchGone):
        watch.on_line(line("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}))
    assert watch.needs_list
    # Meanwhile b-0 was deleted and a-0 finished: the relist says so to both, replacing what they had not read.
    watch.on_list(listing(pod("job-a", "a-0", "Succeeded", "30"), version="30"))

    assert names(a.take()) == (["a-0"], [])
    assert names(b.take()) == ([], [])
    assert watch.objects == {"job-a": {"a-0": watch.objects["job-a"]["a-0"]}}


def test_bookmarks_move_the_resource_version_and_reach_no_one():
    watch = NamespaceWatch(JOB_PODS)
    feed = watch.subscribe("job-a")
    watch.on_list(listing(pod("job-a", "a-0")))
    feed.take()
    watch.on_line(line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99"}}))
    watch.on_line(b"")
    assert watch.resource_version == "99" and feed.take() is None


def test_leaving_stops_the_feed_and_a_failed_watch_fails_every_feed_with_a_message():
    watch = NamespaceWatch(JOB_PODS)
    a, b, other = watch.subscribe("job-a"), watch.subscribe("job-a"), watch.subscribe("job-b")
    watch.unsubscribe(b)
    assert watch.subscribers == 2
    watch.on_list(listing(pod("job-a", "a-0")))
    assert b.take() is None

    watch.fail(KubernetesJobError("watching pods in namespace ns: 403 Forbidden: no", 403))
    for feed in (a, other):
        with pytest.raises(KubernetesJobError, match=r"^watching pods in namespace ns: 403 Forbidden") as raised:
            feed.take()
        assert raised.value.status == 403


def test_kubeflow_objects_are_keyed_by_their_name():
    from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger

    trigger = KubeflowJobTrigger(job_name="j1", namespace="ns", group="kubeflow.org", version="v1",
                                 plural="pytorchjobs")
    watch = NamespaceWatch(trigger.watched_kind)
    feed = watch.subscribe("j1")
    watch.on_list(listing({"metadata": {"name": "j1"}, "status": {"phase": "x"}},
                          {"metadata": {"name": "j2"}, "status": {"phase": "y"}}))
    watch.on_line(line("DELETED", {"metadata": {"name": "j1", "resourceVersion": "11"}, "status": {"phase": "x"}}))
    assert names(feed.take()) == (["j1"], [("DELETED", "j1", "x")])


# ---------------------------------------------------------------------------------------------- the registry


class StandIn:
    """The watch loop of a registry test: runs until cancelled (or fails when told), counting its starts."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.fail: asyncio.Future | None = None

    async def __call__(self, watch: NamespaceWatch) -> None:
        self.started += 1
        self.fail = asyncio.get_running_loop().create_future()
        watch.on_list(listing())
        try:
            raise await self.fail
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


def test_the_first_subscriber_starts_the_watch_and_the_last_one_out_stops_it():
    loop_watch = StandIn()

    async def scenario() -> None:
        key = ("connection", "ns", JOB_PODS)
        async with subscribe(key, JOB_PODS, "a", loop_watch) as a:
            async with subscribe(key, JOB_PODS, "b", loop_watch):
                await asyncio.sleep(0)
                assert (loop_watch.started, shared_watch.open_watches()) == (1, 1)
            assert loop_watch.cancelled == 0  # "a" is still there
            assert (await a.next(None)).snapshot == []
        assert (loop_watch.cancelled, shared_watch.open_watches()) == (1, 0)
        async with subscribe(key, JOB_PODS, "c", loop_watch):  # a new one after the last left
            await asyncio.sleep(0)
        assert (loop_watch.started, loop_watch.cancelled) == (2, 2)

    asyncio.run(scenario())


def test_a_cancelled_trigger_leaves_and_a_failed_watch_fails_its_triggers_and_is_forgotten():
    loop_watch = StandIn()

    async def reader(key, job: str) -> None:
        async with subscribe(key, JOB_PODS, job, loop_watch) as feed:
            while True:
                await feed.next(None)

    async def scenario() -> None:
        key = ("connection", "ns", JOB_PODS)
        first, second = asyncio.create_task(reader(key, "a")), asyncio.create_task(reader(key, "b"))
        await asyncio.sleep(0.01)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert loop_watch.cancelled == 0 and shared_watch.open_watches() == 1
        loop_watch.fail.set_result(KubernetesJobError("watching pods in namespace ns: gave up", None))
        with pytest.raises(KubernetesJobError, match="gave up"):
            await second
        assert shared_watch.open_watches() == 0

    asyncio.run(scenario())


def test_each_event_loop_has_watches_of_its_own():
    loop_watch = StandIn()

    async def one() -> int:
        async with subscribe(("connection", "ns", JOB_PODS), JOB_PODS, "a", loop_watch):
            await asyncio.sleep(0)
            return shared_watch.open_watches()

    assert [asyncio.run(one()), asyncio.run(one())] == [1, 1]
    assert loop_watch.started == 2


def test_a_trigger_that_does_not_read_holds_up_neither_the_watch_nor_the_others():
    async def stream(watch: NamespaceWatch) -> None:
        watch.on_list(listing(pod("job-slow", "slow-0"), pod("job-busy", "busy-0")))
        for version in range(100, 1100):
            job = "job-slow" if version % 2 else "job-busy"
            watch.on_line(line("MODIFIED", pod(job, f"{job[4:]}-0", f"Phase{version}", str(version))))
            await asyncio.sleep(0)
        await asyncio.Event().wait()  # then quiet, until the last trigger leaves

    async def scenario() -> tuple[int, list[str]]:
        key = ("connection", "ns", JOB_PODS)
        async with subscribe(key, JOB_PODS, "job-slow", stream) as slow, \
                subscribe(key, JOB_PODS, "job-busy", stream) as busy:
            seen: list[str] = []
            while not seen or seen[-1] != "Phase1098":
                delivery = await busy.next(None)
                seen.extend(obj["status"]["phase"] for _, obj in delivery.events)
            return slow.pending, seen

    pending, seen = asyncio.run(scenario())
    assert pending == 1  # 500 events of its one pod, unread: one entry, the latest
    assert seen[-1] == "Phase1098" and seen == sorted(seen, key=lambda phase: int(phase[5:]))
