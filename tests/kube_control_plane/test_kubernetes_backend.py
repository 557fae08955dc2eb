"""The kubernetes backend's hook against a real API server, as the task's service account bound to exactly the
Role of docs/rbac.yaml: submit and succeed with the master's log followed (sync), the master's output read from its
XCom sidecar over exec, a worker's exit or OOM kill failing the job, clean-up by the real garbage collector leaving
nothing, and no request of the task refused (from the audit log).

The pods are played by the test kubelet with the same scripts as on the emulator (``tests/kubernetes_helpers``).
"""

from __future__ import annotations

import json
import logging
import threading

from kubernetes import client

from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.manifests.kubernetes import MAIN_CONTAINER, job_secret_names, ssh_secret_name
from airflow_distributed.manifests.shared_memory import SHM_PATH, SHM_VOLUME
from tests.helpers import wait_until
from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import XCOM_FILE, KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, comes_to, make_job, new_hook, train_and_succeed


def test_a_job_succeeds_with_the_masters_lines_followed_and_leaves_nothing(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)
    kubelet = Kubelet(node, namespace).play(train_and_succeed)
    lines: list[str] = []
    lock = threading.Lock()

    def emit(replica: str, line: str) -> None:
        with lock:
            lines.append(line)

    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30, follow=[slots[0].name], emit=emit)
    kubelet.check()
    assert outcome.succeeded
    # The API server proxies pods/log to the kubelet: the follower must ask for what it serves (text/plain
    # answers to an Accept the server can negotiate).
    comes_to(lambda: list(lines), ["step 1 loss 0.500", "step 2 loss 0.250", "step 3 loss 0.125"], timeout=10)
    assert outcome.pods[slots[0].name]["status"]["containerStatuses"][0]["state"]["terminated"]["message"]

    hook.delete_job(namespace, name)
    # The real garbage collector deletes what the Service owns; the kubelet finishes the pods' deletion.
    control_plane.assert_clean(namespace, task_user)


def test_a_worker_exit_fails_the_job_with_its_code_and_log(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)

    def script(k: Kubelet) -> None:
        k.run_all()
        k.log(k.pod("worker-0"), "loading shard 3", "RuntimeError: CUDA error: device-side assert triggered")
        k.fail(k.pod("worker-0"), 2)

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    kubelet.check()
    assert (outcome.ending, outcome.replica, outcome.exit_code) == ("exit", slots[1].name, 2)
    assert hook.read_log_tail(namespace, slots[1].name)[-1] == "RuntimeError: CUDA error: device-side assert triggered"

    hook.delete_unfinished_pods(namespace, name)
    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_an_oom_kill_is_read_from_the_real_pod_status(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)

    def script(k: Kubelet) -> None:
        k.run_all()
        k.fail(k.pod("worker-1"), 137, reason="OOMKilled")

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    kubelet.check()
    assert (outcome.ending, outcome.replica, outcome.exit_code, outcome.reason) == (
        "exit", slots[2].name, 137, "OOMKilled")
    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_the_masters_whole_output_is_read_from_its_xcom_sidecar_over_exec(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    """The exec goes through the real API server (authorized as ``get pods/exec`` by 1.20) to the kubelet; the
    document is larger than a termination message holds, which keeps only its brief."""
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)
    document = {**DOCUMENT, "history": [{"step": step, "loss": 1 / step} for step in range(1, 400)]}
    brief = {"metrics": DOCUMENT["metrics"], "model_path": DOCUMENT["model_path"], "truncated": True}

    def script(k: Kubelet) -> None:
        k.run_all()
        node.write_file(namespace, k.master, XCOM_FILE, json.dumps(document))
        k.master_exits(0, document=brief)

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    kubelet.check()
    assert outcome.succeeded
    assert json.loads(hook.read_output(namespace, outcome.pods[slots[0].name]) or "null") == document
    # The sidecar was told to end: the kubelet reports it, and the master's pod is done.
    comes_to(lambda: node.get("pods", namespace, slots[0].name)["status"]["phase"], "Succeeded", timeout=30)
    execs = {(event["verb"], event["objectRef"].get("subresource")) for event in control_plane.audit_events(task_user)
             if (event.get("objectRef") or {}).get("subresource") == "exec"}
    assert execs == {("get", "exec")}  # a websocket exec is a GET; 1.30 and later authorize it as "create"

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_a_replica_the_real_scheduler_cannot_place_fails_the_job_with_the_schedulers_message(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    environment = {"pytorch": {"n_workers": 2, "worker": [
        {"index": 1, "resources": {"gpu": {"requests": 64, "limits": 64}}}]}}  # the node has 8
    build, slots, name = make_job(namespace, environment)
    hook.ensure_job(namespace, build(None), slots)

    def script(k: Kubelet) -> None:
        k.run_all(except_=("worker-1",))
        wait_until(lambda: any(c["type"] == "PodScheduled" and c["status"] == "False" for c in
                               (node.get("pods", namespace, k.pod("worker-1")) or {}).get("status", {}).get(
                                   "conditions") or []), timeout=30, interval=0.05)

    Kubelet(node, namespace).play(script).check(timeout=60)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=0.5)
    assert (outcome.ending, outcome.replica, outcome.reason) == ("startup", slots[2].name, "Unschedulable")
    assert "1 Insufficient nvidia.com/gpu" in (outcome.message or "")
    assert any("FailedScheduling" in event for event in hook.pod_events(namespace, slots[2].name))

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


PULL_ERROR = 'rpc error: code = NotFound desc = failed to pull image "registry.example.com/trainer:1.0": not found'


def test_a_failed_image_pull_fails_the_job_naming_the_image(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)

    def script(k: Kubelet) -> None:
        k.run_all(except_=("worker-1",))
        k.emu.pending_pod(namespace, k.pod("worker-1"), reason="ErrImagePull", message=PULL_ERROR)

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=60)
    kubelet.check()
    assert (outcome.ending, outcome.replica, outcome.reason, outcome.message, outcome.image) == (
        "image", slots[2].name, "ErrImagePull", PULL_ERROR, "registry.example.com/trainer:1.0")

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_a_quiet_job_outlives_many_watches_ended_by_the_real_server_with_a_single_list(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    """Each watch asks the server to end it after 1 s; it is resumed from its resourceVersion, never re-listed. The
    client's read timeout is far longer than the script waits: only the server can end these watches."""
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)

    def pod_collection(verb: str) -> int:
        return len({e["auditID"] for e in control_plane.audit_events(task_user) if e["verb"] == verb
                    and (e.get("objectRef") or {}).get("resource") == "pods" and not e["objectRef"].get("name")})

    lists = pod_collection("list")

    def script(k: Kubelet) -> None:
        k.run_all()
        try:
            wait_until(lambda: pod_collection("watch") >= 5, timeout=60, interval=0.1)
        finally:  # the job ends whatever was seen, so that a wait that went wrong fails the asserts, not hangs
            k.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30,
                                watch_timings=WatchTimings(server_timeout=1, read_timeout_margin=600.0))
    kubelet.check()
    assert outcome.succeeded
    assert pod_collection("watch") >= 5
    assert pod_collection("list") == lists + 1
    hook.delete_job(namespace, name)
    assert control_plane.refused(task_user) == []


def test_a_lost_replica_is_created_again_under_its_name_and_bound_by_the_real_scheduler(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    """What an elastic job does with a lost worker: delete its pod (at once: grace 0) and create it again."""
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)
    Kubelet(node, namespace).play(lambda k: (k.run_all(), k.fail(k.pod("worker-0"), 1))).check(timeout=60)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    assert (outcome.ending, outcome.replica) == ("exit", slots[1].name)

    owner = (node.get("services", namespace, name) or {})["metadata"]["uid"]
    lost = (node.get("pods", namespace, slots[1].name) or {})["metadata"]["uid"]
    hook.recreate_pod(namespace, next(p for p in build(owner).pods if p.metadata.name == slots[1].name))
    again = node.bound(namespace, slots[1].name)
    assert again["metadata"]["uid"] != lost
    assert [ref["uid"] for ref in again["metadata"]["ownerReferences"]] == [owner]
    node.run_pod(namespace, slots[1].name)

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_a_horovod_job_with_its_ssh_key_secret_succeeds_and_its_secrets_are_deleted(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace, {"replicas": {"n_workers": 2}}, framework="horovod")
    hook.ensure_job(namespace, build(None), slots)
    # The job's SSH key pair is a Secret, created by the task (the Role's "create secrets").
    assert control_plane.left(namespace)["secrets"] == [ssh_secret_name(name)]
    kubelet = Kubelet(node, namespace, pods=len(slots)).play(train_and_succeed)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    kubelet.check()
    assert outcome.succeeded

    # The job's Secrets go by name when it ends, whatever the policy keeps; the garbage collector takes the rest.
    hook.delete_secrets(namespace, job_secret_names(name))
    assert control_plane.left(namespace)["secrets"] == []
    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_an_exec_the_real_server_refuses_is_logged_as_that_refusal(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str,
        caplog):
    """A task whose Role lacks ``pods/exec``: the XCom sidecar's read and the hang watchdog's stack dump are refused
    (403, at the websocket handshake); the task log says so, in the server's words, without a traceback."""
    without_exec = role("airflow-distributed")
    without_exec = {**without_exec, "metadata": {"name": "airflow-distributed-without-exec"},
                    "rules": [rule for rule in without_exec["rules"] if "pods/exec" not in rule["resources"]]}
    account = "without-exec"
    log = logging.getLogger("tests.task-without-exec")
    hook = new_hook(control_plane.bind_role(namespace, without_exec, account), logger=log)
    build, slots, name = make_job(namespace)
    new_hook(task_kubeconfig).ensure_job(namespace, build(None), slots)
    Kubelet(node, namespace).play(lambda k: k.run_all()).check(timeout=60)
    master = node.get("pods", namespace, slots[0].name)

    with caplog.at_level(logging.INFO, logger=log.name):
        assert hook.read_output(namespace, master) is None  # the termination message instead: there is none yet
        hook.dump_stacks(namespace, [slots[1].name], "base")

    records = [record for record in caplog.records if record.name == log.name]
    refusal = (f'403 Forbidden: pods "{{pod}}" is forbidden: User "system:serviceaccount:{namespace}:{account}" '
               f'cannot get resource "pods/exec" in API group "" in the namespace "{namespace}"')
    assert [record.getMessage() for record in records] == [
        f"could not read the output of {namespace}/{slots[0].name} from its XCom sidecar "
        f"({refusal.format(pod=slots[0].name)}); using its termination message",
        f"could not ask {slots[1].name} for its Python stacks ({refusal.format(pod=slots[1].name)}): its last "
        "lines are quoted without them",
    ]
    assert [record.exc_info for record in records] == [None, None]  # no traceback
    # The server refused them: the audit log has each exec (the sidecar's read and kill, the stack dump) as 403.
    refused = control_plane.refused(f"system:serviceaccount:{namespace}:{account}")
    assert refused and all("/exec?" in line and line.endswith("-> 403") for line in refused), refused

    new_hook(task_kubeconfig).delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)


def test_every_pod_the_server_stores_mounts_memory_backed_dev_shm_sized_from_its_memory_limit(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    # What the API server validated and stored, not what was sent: a field it drops or rejects would show here.
    environment = {"resources": {"memory": {"limits": "2Gi"}},
                   "pytorch": {"n_workers": 1, "default_worker": {"resources": {"memory": {"limits": "3Gi"}}}}}
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace, environment)
    hook.ensure_job(namespace, build(None), slots)
    kubelet = Kubelet(node, namespace, pods=len(slots)).play(train_and_succeed)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30)
    kubelet.check()
    assert outcome.succeeded
    core = client.CoreV1Api(control_plane.admin)
    stored = {pod.metadata.name: pod for pod in core.list_namespaced_pod(namespace).items}
    sizes = {}
    for slot in slots:
        pod = stored[slot.name]
        (volume,) = [v for v in pod.spec.volumes if v.name == SHM_VOLUME]
        assert volume.empty_dir.medium == "Memory"
        sizes[slot.name] = volume.empty_dir.size_limit
        main = next(c for c in pod.spec.containers if c.name == MAIN_CONTAINER)
        assert [(m.name, m.mount_path) for m in main.volume_mounts if m.name == SHM_VOLUME] == [(SHM_VOLUME, SHM_PATH)]
    assert sizes == {slots[0].name: "1Gi", slots[1].name: "1536Mi"}

    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)
