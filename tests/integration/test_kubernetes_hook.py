"""``PodJobHook`` against the API emulator: creation, one watch per job, retries, reattach, logs.

Every call crosses HTTP through the real ``kubernetes`` client behind the cncf provider's ``KubernetesHook``.
The hook's sleep is a recorder, so retry paths take no time; the emulator's request log says what was sent.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from kubernetes import client

from airflow_distributed.hooks.api_retry import KubernetesJobError
from airflow_distributed.hooks.kubernetes import PodJobHook
from airflow_distributed.hooks.pod_logs import LogFollowers, PodLogFollower
from airflow_distributed.jobstate.outcome import describe
from airflow_distributed.manifests.kubernetes import job_secret_names, to_dict
from tests.helpers import wait_until
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import (
    DOCUMENT,
    NOTHING,
    PODS,
    Kubelet,
    lists_and_watches,
    make_job,
    new_hook,
    objects,
    settled,
    task_requests,
    train_and_succeed,
)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def hook(kubeconfig, sleeps) -> PodJobHook:
    return new_hook(kubeconfig, sleeps.append)


def pod_posts(emu: KubeEmulator, namespace: str) -> int:
    return sum(1 for r in emu.requests if r.method == "POST" and r.path == f"/api/v1/namespaces/{namespace}/pods")


# ---------------------------------------------------------------------------------------------- waiting


def test_one_list_then_one_watch_resumed_from_its_resource_version(emulator, hook, ns):
    build, slots, name = make_job(ns)
    hook.ensure_job(ns, build(None), slots)
    emulator.reset_requests()

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        kubelet.emu.wait_for_requests("watch", 3, PODS.format(ns))  # the 1 s watch has timed out and resumed twice
        kubelet.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(emulator, ns).play(script)
    outcome = hook.wait_for_job(ns, name, slots, startup_timeout=30, watch_timeout=1)
    kubelet.check()

    assert outcome.succeeded
    lists, watches = lists_and_watches(emulator, ns)
    assert len(lists) == 1 and len(watches) >= 3
    assert all(w.query["labelSelector"] == f"airflow-distributed/job={name}" for w in watches)
    # Each reconnect resumes where the last one stopped (bookmarks keep that point fresh), never from scratch.
    assert all(w.query.get("resourceVersion") for w in watches)
    versions = [int(w.query["resourceVersion"]) for w in watches]
    assert versions == sorted(versions)
    assert not [r for r in task_requests(emulator, ns) if r.method == "GET" and "/pods/" in r.path]  # no polling


def test_an_expired_watch_is_relisted_and_the_job_still_seen_through(kubeconfig, tmp_path):
    # Bookmarks would keep the watch's resourceVersion fresh: this emulator sends none in the test's time.
    with KubeEmulator(bookmark_interval=60) as emu:
        config = emu.write_kubeconfig(tmp_path / "config")
        emu.create_namespace("gone")
        hook = new_hook(config)
        build, slots, name = make_job("gone")
        hook.ensure_job("gone", build(None), slots)
        emu.reset_requests()

        def script(kubelet: Kubelet) -> None:
            kubelet.run_all()
            emu.wait_for_requests("watch", 1, PODS.format("gone"))  # listed, now watching from that version
            emu.create("configmaps", "default", {"metadata": {"name": "elsewhere"}})  # history moves on
            emu.compact()  # and is forgotten: resuming from the watch's last version is 410 Gone
            emu.wait_for_requests("list", 2, PODS.format("gone"))  # the relist that answers it
            kubelet.master_exits(0, document=DOCUMENT)

        kubelet = Kubelet(emu, "gone").play(script)
        outcome = hook.wait_for_job("gone", name, slots, startup_timeout=30, watch_timeout=1)
        kubelet.check()

        assert outcome.succeeded
        lists, watches = lists_and_watches(emu, "gone")
        assert len(lists) == 2 and len(watches) >= 2
        assert emu.errors == []


def test_a_replica_pending_past_startup_timeout_fails_on_the_hooks_clock(emulator, kubeconfig, ns):
    now = [1000.0]
    hook = new_hook(kubeconfig, clock=lambda: now[0])
    build, slots, name = make_job(ns)
    hook.ensure_job(ns, build(None), slots)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all(except_=("worker-0",))
        # Unschedulable waits for startup_timeout (a failed image pull would fail at once).
        kubelet.emu.pending_pod(ns, kubelet.pod("worker-0"), reason="Unschedulable",
                                message="0/3 nodes are available: 3 Insufficient memory.")
        kubelet.emu.wait_for_requests("watch", 1, PODS.format(ns))  # the hook's clock started, it is watching
        now[0] += 601  # ten minutes pass on the hook's clock, none on the test's

    kubelet = Kubelet(emulator, ns).play(script)
    outcome = hook.wait_for_job(ns, name, slots, startup_timeout=600, watch_timeout=300)
    kubelet.check()

    # Decided within the first 300 s watch: by the hook's clock, not by waiting for a watch to end.
    assert len(lists_and_watches(emulator, ns)[1]) == 1
    assert (outcome.succeeded, outcome.ending, outcome.replica, outcome.reason) == (
        False, "startup", slots[1].name, "Unschedulable")
    assert describe(outcome, 600) == (f"replica {slots[1].name} did not start within 600s: Unschedulable: "
                                     "0/3 nodes are available: 3 Insufficient memory.")


# ---------------------------------------------------------------------------------------------- faults


def test_transient_errors_are_retried_and_every_pod_is_created_once(emulator, hook, sleeps, ns):
    build, slots, name = make_job(ns)
    emulator.reset_requests()
    emulator.inject_faults(method="POST", path_regex=rf"/namespaces/{ns}/pods$", statuses=[500, 429, 503])
    emulator.inject_faults(method="GET", path_regex=rf"/namespaces/{ns}/pods$", statuses=[500, 503, 429])

    handle = hook.ensure_job(ns, build(None), slots)
    kubelet = Kubelet(emulator, ns).play(train_and_succeed)
    outcome = hook.wait_for_job(ns, name, slots, startup_timeout=30)
    kubelet.check()

    assert handle.created == 5 and outcome.succeeded  # Service, ConfigMap, 3 pods
    assert pod_posts(emulator, ns) == 3 + 3  # three pods, three answers to try again
    assert sorted(objects(emulator, ns)["pods"]) == sorted(slot.name for slot in slots)
    assert len(sleeps) == 6 and 0.0 in sleeps  # 429 with Retry-After: 0 waits nothing more
    emulator.clear_faults()


def test_a_create_retried_after_its_first_answer_was_lost_meets_409_and_counts_as_done(emulator, kubeconfig, ns):
    build, slots, name = make_job(ns, environment={})  # the master alone
    emulator.reset_requests()
    emulator.inject_faults(method="POST", path_regex=rf"/namespaces/{ns}/pods$", statuses=[500])

    def sleep(seconds: float) -> None:
        # The 500 came after the API server stored the pod (a lost answer): it exists when the create is retried.
        uid = emulator.get("services", ns, name)["metadata"]["uid"]
        emulator.create("pods", ns, to_dict(build(uid).pods[0]))

    handle = new_hook(kubeconfig, sleep).ensure_job(ns, build(None), slots)

    assert handle.created == 2  # the Service and ConfigMap; the pod was there when the retry met 409 AlreadyExists
    assert pod_posts(emulator, ns) == 2
    assert objects(emulator, ns)["pods"] == [slots[0].name]


@pytest.mark.parametrize("fault", ["forbidden", "unavailable"])
def test_a_pod_the_api_refuses_fails_creation_naming_it_and_leaves_nothing(emulator, hook, ns, fault):
    environment = {"pytorch": {"n_workers": 2}}
    if fault == "forbidden":  # a service account that does not exist: 403 for that pod only
        environment["pytorch"]["worker"] = [{"index": 1, "service_account": "trainer"}]
    build, slots, name = make_job(ns, environment=environment)
    if fault == "unavailable":
        emulator.inject_faults(method="POST", path_regex=rf"/namespaces/{ns}/pods$", statuses=[503] * 20)

    with pytest.raises(KubernetesJobError) as failed:
        hook.ensure_job(ns, build(None), slots)

    message = str(failed.value)
    if fault == "forbidden":
        assert message.startswith(f"creating pod {ns}/{name}-worker-1: 403 Forbidden: ")
        assert 'serviceaccount "trainer" not found' in message
    else:
        assert message.startswith(f"creating pod {ns}/{name}-") and ": 503 ServiceUnavailable:" in message
    assert isinstance(failed.value.__cause__, client.ApiException)
    emulator.clear_faults()
    settled(emulator, ns, NOTHING)


# ---------------------------------------------------------------------------------------------- creation


def test_a_job_is_built_once_and_its_dependents_are_owned_by_the_created_service(emulator, hook, ns):
    build, slots, name = make_job(ns)

    handle = hook.ensure_job(ns, build(None), slots)

    # The Service's uid reaches the dependents through owned_by, not a second build.
    owner = [{"apiVersion": "v1", "kind": "Service", "name": name, "uid": handle.uid}]
    created = [*(emulator.list(kind, ns) for kind in ("pods", "configmaps"))]
    assert [obj["metadata"].get("ownerReferences") for objs in created for obj in objs] == [owner] * 4
    # What was sent is what building with the uid gives.
    direct = build(handle.uid)
    assert [emulator.get("pods", ns, pod.metadata.name)["spec"]["containers"][0]["env"]
            for pod in direct.pods] == [to_dict(pod)["spec"]["containers"][0]["env"] for pod in direct.pods]

    # The same objects again: the running job is reattached, nothing is created.
    again = hook.ensure_job(ns, build(None), slots)
    assert (again.reattached, again.created, again.uid) == ("running", 0, handle.uid)


# ---------------------------------------------------------------------------------------------- reattach


def test_a_creation_cut_short_is_completed_not_duplicated(emulator, hook, ns):
    build, slots, name = make_job(ns)
    # What a worker that died while creating left: the Service and the master's pod.
    service = emulator.create("services", ns, to_dict(build(None).service))
    emulator.create("pods", ns, to_dict(build(service["metadata"]["uid"]).pods[0]))
    emulator.reset_requests()

    handle = hook.ensure_job(ns, build(None), slots)

    assert (handle.reattached, handle.created, handle.uid) == ("running", 3, service["metadata"]["uid"])
    posts = [r.path for r in task_requests(emulator, ns) if r.method == "POST"]
    assert posts == [f"/api/v1/namespaces/{ns}/configmaps", *[f"/api/v1/namespaces/{ns}/pods"] * 2]
    assert sorted(objects(emulator, ns)["pods"]) == sorted(slot.name for slot in slots)


def test_a_job_found_failed_is_replaced_and_one_found_succeeded_is_collected(emulator, hook, ns):
    build, slots, name = make_job(ns)
    first = hook.ensure_job(ns, build(None), slots)
    Kubelet(emulator, ns).play(lambda k: (k.run_all(), k.fail(k.pod("worker-0"), 1))).check()
    emulator.reset_requests()

    fresh = hook.ensure_job(ns, build(None), slots)  # a retry: the failed job goes, a new one of the same name comes

    assert fresh.reattached is None and fresh.created == 5 and fresh.uid != first.uid
    deletes = [r for r in task_requests(emulator, ns) if r.method == "DELETE"]
    assert [r.path for r in deletes] == [f"/api/v1/namespaces/{ns}/services/{name}"]
    assert all(p["status"]["phase"] == "Pending" for p in emulator.list("pods", ns))

    Kubelet(emulator, ns).play(lambda k: (k.run_all(), k.master_exits(0, document=DOCUMENT))).check()
    again = hook.ensure_job(ns, build(None), slots)  # a retry after the job succeeded: nothing to create
    assert (again.reattached, again.created, again.uid) == ("succeeded", 0, fresh.uid)


def test_a_job_whose_secrets_went_with_its_pods_gets_them_again_when_a_retry_completes_it(emulator, hook, ns):
    """A failure that leaves the Service and no pod (every pod was pending, so the ``running`` policy deleted them
    all) also deleted the Secrets: the retry that creates the missing pods creates the Secrets again first."""
    build, slots, name = make_job(ns, {"replicas": {"n_workers": 1}}, framework="horovod")
    hook.ensure_job(ns, build(None), slots)
    hook.delete_unfinished_pods(ns, name)
    assert hook.delete_secrets(ns, job_secret_names(name)) == 1  # the SSH key pair; there are no secret files
    settled(emulator, ns, {"services": [name], "pods": [], "configmaps": [f"{name}-files"], "secrets": []})
    emulator.reset_requests()

    handle = hook.ensure_job(ns, build(None), slots)

    assert handle.reattached == "running"
    posts = [r.path.rsplit("/", 1)[-1] for r in task_requests(emulator, ns) if r.method == "POST"]
    assert posts == ["secrets", "configmaps", "pods", "pods"]
    assert objects(emulator, ns)["secrets"] == [f"{name}-ssh"]
    assert hook.delete_secrets(ns, job_secret_names(name)) == 1 and hook.delete_secrets(ns, [f"{name}-ssh"]) == 0


# ---------------------------------------------------------------------------------------------- logs, output


def test_a_followed_log_reconnects_after_a_quiet_spell_without_repeating_lines(emulator, hook, ns):
    build, slots, name = make_job(ns, environment={})
    hook.ensure_job(ns, build(None), slots)
    master = slots[0].name
    emulator.run_pod(ns, master)
    emulator.append_log(ns, master, "a1\na2\na3", container="base")
    seen: list[str] = []

    def ended() -> bool:
        pod = emulator.get("pods", ns, master)
        return "terminated" in pod["status"]["containerStatuses"][0]["state"]

    follower = PodLogFollower(hook, ns, master, lambda pod, line: seen.append(line), finished=ended,
                              read_timeout=0.4).start()
    wait_until(lambda: len(seen) == 3, timeout=10)
    # Quiet until the follow times out and reconnects with sinceTime (whole seconds: a1-a3 again).
    emulator.wait_for_requests("get", 2, rf"/pods/{master}/log$")
    emulator.append_log(ns, master, "b1\nb2", container="base")
    wait_until(lambda: len(seen) == 5, timeout=10)
    Kubelet(emulator, ns, pods=1).play(lambda k: k.master_exits(0)).check()
    follower.join(10)

    assert not follower.alive
    assert seen == ["a1", "a2", "a3", "b1", "b2"]
    follows = [r for r in task_requests(emulator, ns) if r.path.endswith(f"/{master}/log")]
    assert len(follows) >= 2 and all(r.query.get("sinceTime") for r in follows[1:])


def test_a_replica_still_running_when_the_wait_ends_has_its_lines_read_once_though_its_follow_had_not(
        emulator, hook, ns):
    """A worker's follow opened a moment before the master ended (a real node reports a pod running a second or
    so after it started): the wait's end stops it before it read a line. The lines the worker wrote are read once
    more, without following, each once."""
    build, slots, name = make_job(ns, environment={})
    hook.ensure_job(ns, build(None), slots)
    worker = slots[0].name  # any replica still running: this job has one
    emulator.run_pod(ns, worker)
    emulator.append_log(ns, worker, "w1\nw2", container="base")
    seen: list[tuple[str, str]] = []
    followers = LogFollowers(hook, ns, [worker], lambda pod, line: seen.append((pod, line)),
                             hook.job_tracker(ns, name, slots))
    followers.start_ready()
    followers.finish()

    assert seen == [(worker, "w1"), (worker, "w2")]
    assert followers.tails() == {worker: ["w1", "w2"]}


def test_a_replica_the_wait_last_saw_pending_has_its_log_read_at_the_end(emulator, hook, ns):
    """A real kubelet reports a container's start a moment late: a short replica can run and end while the wait
    still sees its pod pending. Its lines are read once at the end; a pod that never started decides nothing."""
    build, slots, name = make_job(ns, environment={"pytorch": {"n_workers": 1}})
    hook.ensure_job(ns, build(None), slots)
    tracker = hook.job_tracker(ns, name, slots)  # both pending
    ran, never = slots[0].name, slots[1].name
    emulator.run_pod(ns, ran)
    emulator.append_log(ns, ran, "r1\nr2", container="base")
    seen: list[tuple[str, str]] = []
    followers = LogFollowers(hook, ns, [ran, never], lambda pod, line: seen.append((pod, line)), tracker)
    followers.start_ready()
    followers.finish()

    assert seen == [(ran, "r1"), (ran, "r2")]


def test_a_followed_master_goes_on_after_a_reconnect_and_a_replaced_one_is_followed_from_its_start(
        emulator, hook, ns):
    """``MasterFollower`` (a synchronous Kubeflow or TrainJob wait): its own looks find the master, a quiet follow
    reconnects without repeating lines, a master pod made again under its name (another uid) is followed from its
    start, and a look that fails decides nothing."""
    from airflow_distributed.hooks.pod_logs import MasterFollower

    master = {"metadata": {"name": "master-0", "labels": {"role": "master"}},
              "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}
    emulator.create("pods", ns, master)
    seen: list[str] = []

    def master_pods() -> list:
        response = hook.core_v1_client.list_namespaced_pod(ns, label_selector="role=master", _preload_content=False)
        return json.loads(response.data)["items"]

    def refused() -> list:
        raise client.ApiException(status=503, reason="Service Unavailable")

    follower = MasterFollower(hook, ns, lambda pods: (pods[0], "pytorch") if pods else None,
                              lambda pod, line: seen.append(line), interval=0.1, clock=time.monotonic,
                              read_timeout=0.4)
    follower.look(master_pods)
    assert not follower.following  # not started yet: nothing to follow
    emulator.run_pod(ns, "master-0")
    emulator.append_log(ns, "master-0", "a1\na2\na3", container="pytorch")
    wait_until(lambda: (follower.due() and follower.look(master_pods), follower.following)[1], timeout=10)
    wait_until(lambda: len(seen) == 3, timeout=10)
    emulator.wait_for_requests("get", 2, r"/pods/master-0/log$")  # quiet: reconnected with sinceTime
    emulator.append_log(ns, "master-0", "b1\nb2", container="pytorch")
    wait_until(lambda: len(seen) == 5, timeout=10)
    # The controller makes the master again: the old follow ends (its pod gone), the new pod is followed.
    emulator.delete("pods", ns, "master-0")
    wait_until(lambda: not follower.following, timeout=10)
    follower.look(refused)  # decides nothing
    emulator.create("pods", ns, master)
    emulator.run_pod(ns, "master-0")
    emulator.append_log(ns, "master-0", "c1\nc2", container="pytorch")
    wait_until(lambda: (follower.due() and follower.look(master_pods), len(seen) == 7)[1], timeout=10)
    emulator.succeed_pod(ns, "master-0")
    follower.finish(master_pods)

    assert not follower.following
    assert seen == ["a1", "a2", "a3", "b1", "b2", "c1", "c2"]
    follows = [r for r in task_requests(emulator, ns) if r.path.endswith("/master-0/log")]
    assert sum(1 for r in follows if not r.query.get("sinceTime")) == 2  # each pod's first read, from its start


def test_a_sidecar_that_could_not_start_is_said_once_and_the_termination_message_read(emulator, kubeconfig, ns):
    # An air-gapped cluster cannot pull the cncf provider's default sidecar image from Docker Hub.
    logger = logging.getLogger(f"test.sidecar.{ns}")
    records: list[str] = []
    logger.addHandler(type("Recorder", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})())
    hook = new_hook(kubeconfig, logger=logger)
    build, slots, name = make_job(ns, environment={})
    hook.ensure_job(ns, build(None), slots)

    def script(kubelet: Kubelet) -> None:
        kubelet.run_all()
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        emulator.set_pod_phase(ns, kubelet.master, "Running", container_states={
            "base": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at,
                                    "message": json.dumps(DOCUMENT)}},
            "airflow-xcom-sidecar": {"waiting": {"reason": "ImagePullBackOff",
                                                 "message": 'Back-off pulling image "alpine:3.24.2"'}}})

    Kubelet(emulator, ns, pods=1).play(script).check()

    text = hook.read_output(ns, hook.job_tracker(ns, name, slots).pod(slots[0].name))

    assert json.loads(text) == DOCUMENT
    said = [line for line in records if "XCom sidecar" in line]
    assert len(said) == 1, records
    assert "ImagePullBackOff" in said[0] and "alpine:3.24.2" in said[0] and "xcom_sidecar_container_image" in said[0]
    assert not [r for r in task_requests(emulator, ns) if r.path.endswith("/exec")]  # nothing to exec into


def test_the_output_document_comes_from_the_termination_message_when_exec_is_not_possible(emulator, hook, ns):
    build, slots, name = make_job(ns, environment={})
    hook.ensure_job(ns, build(None), slots)
    Kubelet(emulator, ns, pods=1).play(lambda k: (k.run_all(), k.master_exits(0, document=DOCUMENT))).check()
    tracker = hook.job_tracker(ns, name, slots)

    text = hook.read_output(ns, tracker.pod(slots[0].name))

    assert json.loads(text) == DOCUMENT
    # The sidecar was tried first (the emulator has no exec), as the cncf provider's PodManager does it.
    assert [r for r in task_requests(emulator, ns) if r.path.endswith("/exec")]
