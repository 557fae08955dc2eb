"""Real bookmarks on a quiet watch. The fixture's server runs with ``EfficientWatchResumption`` and etcd's watch
progress notifications, so its watch cache keeps its resourceVersion current while nothing it serves changes (the
node's Lease renewals move etcd on), and a watch with a ``timeoutSeconds`` gets a BOOKMARK at that version shortly
before the server ends it. The job's wait must take it: the next watch resumes from the bookmark's version, newer
than anything a pod event carried, so a quiet job's resumption point does not fall behind etcd's compaction window.

What the server sent is read from the audit log: each watch request's ``resourceVersion``."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from airflow_distributed.jobstate.watch_timings import WatchTimings
from tests.helpers import wait_until
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, make_job, new_hook


def watch_versions(plane: ControlPlane, user: str, namespace: str) -> list[int]:
    """The ``resourceVersion`` of each watch of ``user`` on the namespace's pods, in the order they were made."""
    seen: dict[str, int] = {}
    for event in plane.audit_events(user):
        ref = event.get("objectRef") or {}
        if event["verb"] == "watch" and ref.get("resource") == "pods" and ref.get("namespace") == namespace:
            query = parse_qs(urlsplit(event["requestURI"]).query)
            seen.setdefault(event["auditID"], int(query["resourceVersion"][0]))
    return list(seen.values())


def test_a_quiet_watch_gets_real_bookmarks_and_resumes_from_their_newer_version(
        control_plane: ControlPlane, node: KubeletNode, namespace: str, task_kubeconfig: str, task_user: str):
    hook = new_hook(task_kubeconfig)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)
    versions: dict[str, int] = {}

    def pods_version() -> int:
        """The newest resourceVersion a pod of the job carries: as far as pod events alone could move a watch."""
        pods = control_plane.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return max(int(p["metadata"]["resourceVersion"]) for p in pods)

    def script(k: Kubelet) -> None:
        k.run_all()
        # Every pod Running: from now on nothing the watch selects changes until the master exits.
        versions["pods"] = pods_version()
        made = len(watch_versions(control_plane, task_user, namespace))
        # A watch made after that starts from the settled point (the LIST's version, or the last pod event's) ...
        wait_until(lambda: len(watch_versions(control_plane, task_user, namespace)) > made, timeout=60, interval=0.1)
        versions["settled"] = watch_versions(control_plane, task_user, namespace)[-1]
        # ... and a later one from a newer version, though no pod changed: a bookmark's. The server ends each watch
        # at its timeoutSeconds (4 s) and sends a bookmark shortly before. (The job ends either way: a wait that
        # never sees a bookmark fails the assertions below instead of hanging.)
        try:
            wait_until(lambda: watch_versions(control_plane, task_user, namespace)[-1] > versions["settled"],
                       timeout=30, interval=0.1)
        finally:
            versions["pods after"] = pods_version()
            k.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=30,
                                watch_timings=WatchTimings(server_timeout=4, read_timeout_margin=600.0))

    assert outcome.succeeded
    # The pods did not change while the job was quiet, yet a later watch started from a newer version: the one a
    # bookmark brought (the client's read timeout is far off: only the server ended these watches).
    assert versions["pods after"] == versions["pods"]
    assert watch_versions(control_plane, task_user, namespace)[-1] > versions["settled"]
    kubelet.check(timeout=90)
    hook.delete_job(namespace, name)
    control_plane.assert_clean(namespace, task_user)
