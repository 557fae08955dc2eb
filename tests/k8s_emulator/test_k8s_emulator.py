"""The Kubernetes API emulator answers the real clients the way kube-apiserver does.

Every call here goes over HTTP through the real ``kubernetes`` client (a few through
``kubernetes_asyncio`` and the Airflow cncf-kubernetes hooks), configured by the kubeconfig the
emulator writes. Each test works in its own namespace of one emulator shared by the module.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

from tests.k8s_emulator import KubeEmulator

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def emulator():
    # Not the conftest's emulator: bookmarks every 0.3s here rather than 0.5s.
    with KubeEmulator(kubernetes_version="1.31", bookmark_interval=0.3) as emu:
        yield emu
        assert emu.errors == [], "\n".join(emu.errors)


@pytest.fixture(scope="module")
def api_client(kubeconfig):
    api = config.new_client_from_config(config_file=kubeconfig)
    yield api
    api.close()


@pytest.fixture
def v1(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def ns(v1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": name}})
    return name


def pod_body(name: str, labels: dict | None = None, containers: list | None = None, **meta) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, **({"labels": labels} if labels else {}), **meta},
        "spec": {"restartPolicy": "Never",
                 "containers": containers or [{"name": "main", "image": "python:3.11-slim", "command": ["true"]}]},
    }


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def raw_get(api_client, path: str, query: list[tuple[str, str]]):
    """A GET through the real client's HTTP stack for parameters its generated methods lack (e.g. sinceTime)."""
    response = api_client.call_api(path, "GET", query_params=query, auth_settings=["BearerToken"],
                                   _preload_content=False, _return_http_data_only=True)
    return response.data.decode()


# ---------------------------------------------------------------- objects and errors

def test_create_get_list_delete_round_trip(v1, ns):
    first = v1.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    second = v1.create_namespaced_config_map(ns, {"metadata": {"name": "b"}, "data": {"k": "w"}})

    assert uuid.UUID(first.metadata.uid).version == 4 and first.metadata.uid != second.metadata.uid
    raw = v1.read_namespaced_config_map("a", ns, _preload_content=False).data
    assert RFC3339.match(json.loads(raw)["metadata"]["creationTimestamp"])
    assert first.metadata.namespace == ns
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)

    fetched = v1.read_namespaced_config_map("a", ns)
    assert (fetched.metadata.uid, fetched.data) == (first.metadata.uid, {"k": "v"})
    listed = v1.list_namespaced_config_map(ns)
    assert [c.metadata.name for c in listed.items] == ["a", "b"]
    assert int(listed.metadata.resource_version) >= int(second.metadata.resource_version)

    updated = v1.patch_namespaced_config_map("a", ns, {"data": {"k": "changed"}})
    assert int(updated.metadata.resource_version) > int(second.metadata.resource_version)

    v1.delete_namespaced_config_map("a", ns)
    with pytest.raises(ApiException) as gone:
        v1.read_namespaced_config_map("a", ns)
    assert gone.value.status == 404
    assert status_of(gone.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'configmaps "a" not found', "reason": "NotFound",
        "details": {"name": "a", "kind": "configmaps"}, "code": 404,
    }


def test_list_items_carry_no_kind_like_the_api_server(api_client, v1, ns):
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    raw = json.loads(v1.list_namespaced_config_map(ns, _preload_content=False).data)
    assert raw["kind"] == "ConfigMapList" and raw["apiVersion"] == "v1"
    assert "kind" not in raw["items"][0] and "apiVersion" not in raw["items"][0]


def test_duplicate_create_is_409_already_exists(v1, ns):
    v1.create_namespaced_pod(ns, pod_body("twin"))
    with pytest.raises(ApiException) as dup:
        v1.create_namespaced_pod(ns, pod_body("twin"))
    assert dup.value.status == 409
    body = status_of(dup.value)
    assert (body["reason"], body["message"], body["details"]) == (
        "AlreadyExists", 'pods "twin" already exists', {"name": "twin", "kind": "pods"})


def test_deleted_pod_reads_404_not_500(v1, ns):
    v1.create_namespaced_pod(ns, pod_body("short-lived"))
    deleted = v1.delete_namespaced_pod("short-lived", ns)
    assert deleted.metadata.name == "short-lived"
    with pytest.raises(ApiException) as gone:
        v1.read_namespaced_pod("short-lived", ns)
    assert gone.value.status == 404 and status_of(gone.value)["message"] == 'pods "short-lived" not found'
    with pytest.raises(ApiException) as again:
        v1.delete_namespaced_pod("short-lived", ns)
    assert again.value.status == 404


def test_invalid_pod_is_422_with_causes(v1, ns):
    with pytest.raises(ApiException) as missing:
        v1.create_namespaced_pod(ns, {"metadata": {"name": "bad"}, "spec": {"restartPolicy": "Never"}})
    assert missing.value.status == 422
    body = status_of(missing.value)
    assert body["reason"] == "Invalid"
    assert body["message"] == 'Pod "bad" is invalid: spec.containers: Required value'
    assert body["details"] == {"name": "bad", "kind": "Pod", "causes": [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]}

    with pytest.raises(ApiException) as several:
        v1.create_namespaced_pod(ns, pod_body("Bad_Name", containers=[
            {"name": "main"}, {"name": "main", "image": "x", "ports": [{"containerPort": 70000}]}]))
    fields = {(c["field"], c["reason"]) for c in status_of(several.value)["details"]["causes"]}
    assert fields == {
        ("metadata.name", "FieldValueInvalid"),
        ("spec.containers[0].image", "FieldValueRequired"),
        ("spec.containers[1].name", "FieldValueDuplicate"),
        ("spec.containers[1].ports[0].containerPort", "FieldValueInvalid"),
    }
    assert v1.list_namespaced_pod(ns).items == []


def test_wrong_json_type_is_400_like_a_decoding_failure(v1, ns):
    # The API server cannot decode a string where a list belongs: 400 BadRequest, not 422.
    with pytest.raises(ApiException) as wrong:
        v1.create_namespaced_pod(ns, {"metadata": {"name": "bad"}, "spec": {"containers": "python"}})
    body = status_of(wrong.value)
    assert (wrong.value.status, body["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal string" in body["message"] and "spec.containers" in body["message"]


def test_unknown_fields_are_dropped_with_a_warning_or_rejected_when_strict(api_client, v1, ns):
    body = pod_body("typo")
    body["spec"]["containers"][0]["imagePullPolice"] = "Always"
    response = v1.create_namespaced_pod(ns, body, _preload_content=False)
    assert response.headers.getlist("Warning") == ['299 - "unknown field \\"spec.containers[0].imagePullPolice\\""']
    stored = json.loads(response.data)["spec"]["containers"][0]
    assert "imagePullPolice" not in stored and stored["imagePullPolicy"] == "IfNotPresent"

    body["metadata"]["name"] = "typo-strict"
    with pytest.raises(ApiException) as strict:
        v1.create_namespaced_pod(ns, body, field_validation="Strict")
    assert strict.value.status == 400
    message = status_of(strict.value)["message"]
    assert 'strict decoding error: unknown field "spec.containers[0].imagePullPolice"' in message


def test_create_fills_server_fields_and_pod_defaults(v1, ns):
    pod = v1.create_namespaced_pod(ns, {"metadata": {"generateName": "train-"}, "spec": {
        "containers": [{"name": "main", "image": "python",
                        "resources": {"limits": {"cpu": "0.5", "memory": "1024Mi"}}}]}})
    assert re.fullmatch(r"train-[a-z0-9]{5}", pod.metadata.name)
    assert pod.status.phase == "Pending" and pod.status.qos_class == "Guaranteed"
    assert pod.spec.restart_policy == "Always" and pod.spec.service_account_name == "default"
    container = pod.spec.containers[0]
    assert container.image_pull_policy == "Always"  # untagged image means :latest
    assert container.resources.requests == {"cpu": "500m", "memory": "1Gi"}
    scheduled = v1.read_namespaced_pod(pod.metadata.name, ns)
    assert scheduled.spec.node_name == "emulator-node"
    assert [(c.type, c.status) for c in scheduled.status.conditions] == [("PodScheduled", "True")]


def test_create_in_missing_namespace_and_with_missing_service_account(v1, ns):
    with pytest.raises(ApiException) as no_ns:
        v1.create_namespaced_pod("nowhere", pod_body("p"))
    assert no_ns.value.status == 404 and status_of(no_ns.value)["message"] == 'namespaces "nowhere" not found'
    body = pod_body("p")
    body["spec"]["serviceAccountName"] = "trainer"
    with pytest.raises(ApiException) as no_sa:
        v1.create_namespaced_pod(ns, body)
    assert no_sa.value.status == 403
    assert 'serviceaccount "trainer" not found' in status_of(no_sa.value)["message"]
    v1.create_namespaced_service_account(ns, {"metadata": {"name": "trainer"}})
    assert v1.create_namespaced_pod(ns, body).spec.service_account_name == "trainer"


def test_replace_with_stale_resource_version_is_409_conflict(v1, ns):
    created = v1.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"a": "1"}})
    created.data = {"a": "2"}
    replaced = v1.replace_namespaced_config_map("cfg", ns, created)
    assert replaced.data == {"a": "2"}
    created.data = {"a": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        v1.replace_namespaced_config_map("cfg", ns, created)
    assert stale.value.status == 409 and status_of(stale.value)["reason"] == "Conflict"
    assert v1.read_namespaced_config_map("cfg", ns).data == {"a": "2"}
    # A replace that changes nothing is not a write.
    same = v1.replace_namespaced_config_map("cfg", ns, replaced)
    assert same.metadata.resource_version == replaced.metadata.resource_version


def test_patch_formats(v1, ns):
    v1.create_namespaced_pod(ns, pod_body("patched", labels={"a": "1"}, containers=[
        {"name": "main", "image": "python:3.11", "env": [{"name": "X", "value": "1"}]},
        {"name": "side", "image": "busybox:1.36"}]))
    # Strategic merge: containers merge by name, env by name.
    pod = v1.patch_namespaced_pod("patched", ns, {"spec": {"containers": [
        {"name": "side", "image": "busybox:1.37"}]}, "metadata": {"labels": {"b": "2"}}})
    assert [(c.name, c.image) for c in pod.spec.containers] == [("main", "python:3.11"), ("side", "busybox:1.37")]
    assert pod.metadata.labels == {"a": "1", "b": "2"}
    # JSON patch (the client picks it for a list body).
    pod = v1.patch_namespaced_pod("patched", ns, [{"op": "remove", "path": "/metadata/labels/a"},
                                                  {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}}])
    assert pod.metadata.labels == {"b": "2"} and pod.metadata.annotations == {"x": "y"}
    # Changing what a pod cannot change is 422 Forbidden.
    with pytest.raises(ApiException) as forbidden:
        v1.patch_namespaced_pod("patched", ns, {"spec": {"restartPolicy": "Always"}})
    assert forbidden.value.status == 422
    assert status_of(forbidden.value)["details"]["causes"][0]["reason"] == "FieldValueForbidden"


def test_status_subresource_is_separate_from_the_main_resource(v1, ns):
    v1.create_namespaced_pod(ns, pod_body("st"))
    pod = v1.patch_namespaced_pod("st", ns, {"status": {"phase": "Running"}, "metadata": {"labels": {"x": "1"}}})
    assert pod.status.phase == "Pending" and pod.metadata.labels == {"x": "1"}
    pod = v1.patch_namespaced_pod_status("st", ns, {"status": {"phase": "Running"}, "metadata": {"labels": {"y": "2"}}})
    assert pod.status.phase == "Running" and pod.metadata.labels == {"x": "1"}


# ---------------------------------------------------------------- selectors

def test_label_and_field_selectors(v1, ns, emulator):
    for name, labels in [("a", {"app": "train", "role": "worker", "idx": "0"}),
                         ("b", {"app": "train", "role": "ps", "idx": "1"}),
                         ("c", {"app": "serve"}),
                         ("d", {})]:
        v1.create_namespaced_pod(ns, pod_body(name, labels=labels))

    def names(**kwargs):
        return [p.metadata.name for p in v1.list_namespaced_pod(ns, **kwargs).items]

    assert names(label_selector="app=train") == ["a", "b"]
    assert names(label_selector="app==train,role=worker") == ["a"]
    assert names(label_selector="app!=train") == ["c", "d"]  # includes pods without the label
    assert names(label_selector="role in (ps, worker)") == ["a", "b"]
    assert names(label_selector="role notin (ps)") == ["a", "c", "d"]
    assert names(label_selector="app") == ["a", "b", "c"]
    assert names(label_selector="!app") == ["d"]
    assert names(label_selector="idx>0") == ["b"]
    assert names(label_selector="app in (train),!role") == []
    with pytest.raises(ApiException) as bad:
        v1.list_namespaced_pod(ns, label_selector="app in (")
    assert bad.value.status == 400

    emulator.run_pod(ns, "b")
    assert names(field_selector="status.phase=Running") == ["b"]
    assert names(field_selector="status.phase!=Running,metadata.name!=d") == ["a", "c"]
    assert names(field_selector="metadata.name=c") == ["c"]
    with pytest.raises(ApiException) as unsupported:
        v1.list_namespaced_pod(ns, field_selector="spec.containers=x")
    assert unsupported.value.status == 400
    assert status_of(unsupported.value)["message"] == "field label not supported: spec.containers"
    assert [p["metadata"]["name"] for p in emulator.list("pods", ns, label_selector="role in (ps)")] == ["b"]


def test_deletecollection_by_label(v1, ns):
    for name, role in [("w0", "worker"), ("w1", "worker"), ("m", "master")]:
        v1.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": {"role": role}}})
    v1.delete_collection_namespaced_config_map(ns, label_selector="role=worker")
    assert [c.metadata.name for c in v1.list_namespaced_config_map(ns).items] == ["m"]


def test_list_pagination(v1, ns):
    for i in range(5):
        v1.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
    page = v1.list_namespaced_config_map(ns, limit=2)
    assert [c.metadata.name for c in page.items] == ["c0", "c1"] and page.metadata.remaining_item_count == 3
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "c9"}})  # after the first page: not in this list
    rest = v1.list_namespaced_config_map(ns, limit=10, _continue=page.metadata._continue)
    assert [c.metadata.name for c in rest.items] == ["c2", "c3", "c4"] and rest.metadata._continue is None


# ---------------------------------------------------------------- watch

def test_watch_from_resource_version_replays_only_newer_events(v1, ns):
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "old"}})
    mark = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "new"}})
    v1.patch_namespaced_config_map("old", ns, {"data": {"k": "v"}})
    v1.delete_namespaced_config_map("new", ns)

    events = [(e["type"], e["object"].metadata.name) for e in
              watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=mark, timeout_seconds=1)]
    assert events == [("ADDED", "new"), ("MODIFIED", "old"), ("DELETED", "new")]

    initial = [(e["type"], e["object"].metadata.name) for e in
               watch.Watch().stream(v1.list_namespaced_config_map, ns, timeout_seconds=1)]
    assert initial == [("ADDED", "old")]


def test_watch_streams_live_events_with_selectors(v1, ns, emulator):
    v1.create_namespaced_pod(ns, pod_body("w", labels={"job": "a"}))
    v1.create_namespaced_pod(ns, pod_body("other", labels={"job": "b"}))
    mark = v1.read_namespaced_pod("w", ns).metadata.resource_version

    def kubelet():
        time.sleep(0.2)
        emulator.run_pod(ns, "other")
        emulator.run_pod(ns, "w")
        emulator.succeed_pod(ns, "w")

    threading.Thread(target=kubelet, daemon=True).start()
    phases = []
    w = watch.Watch()
    for event in w.stream(v1.list_namespaced_pod, ns, label_selector="job=a", resource_version=mark, timeout_seconds=5):
        phases.append((event["type"], event["object"].status.phase))
        if event["object"].status.phase == "Succeeded":
            w.stop()
    assert phases == [("MODIFIED", "Running"), ("MODIFIED", "Succeeded")]


def test_watch_sees_objects_enter_and_leave_a_selector(v1, ns):
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "m", "labels": {"stage": "a"}}})
    mark = v1.read_namespaced_config_map("m", ns).metadata.resource_version
    v1.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"stage": "b"}}})
    v1.patch_namespaced_config_map("m", ns, {"metadata": {"labels": {"stage": "a"}}})
    events = [e["type"] for e in watch.Watch().stream(
        v1.list_namespaced_config_map, ns, label_selector="stage=a", resource_version=mark, timeout_seconds=1)]
    assert events == ["DELETED", "ADDED"]


def test_watch_timeout_seconds_ends_the_stream(v1, ns):
    started = time.monotonic()
    events = list(watch.Watch().stream(v1.list_namespaced_config_map, ns, timeout_seconds=1))
    elapsed = time.monotonic() - started
    assert events == [] and 0.9 <= elapsed < 3


def test_compaction_gives_410_to_old_resource_versions(v1, ns, emulator):
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    old = v1.list_namespaced_config_map(ns).metadata.resource_version
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    page = v1.list_namespaced_config_map(ns, limit=1)
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    emulator.compact()

    with pytest.raises(ApiException) as exact:
        v1.list_namespaced_config_map(ns, resource_version=old, resource_version_match="Exact")
    assert exact.value.status == 410 and status_of(exact.value)["reason"] == "Expired"
    with pytest.raises(ApiException) as paged:
        v1.list_namespaced_config_map(ns, limit=1, _continue=page.metadata._continue)
    assert paged.value.status == 410
    # Not-older-than semantics (the default without limit) are served from current state.
    assert len(v1.list_namespaced_config_map(ns, resource_version=old).items) == 3

    # A watch answers 200 and then one ERROR event carrying a 410 Status.
    response = v1.list_namespaced_config_map(ns, watch=True, resource_version=old, timeout_seconds=2,
                                             _preload_content=False)
    lines = [json.loads(line) for line in response.data.decode().splitlines()]
    assert response.status == 200 and len(lines) == 1
    assert lines[0]["type"] == "ERROR"
    error = lines[0]["object"]
    assert (error["kind"], error["code"], error["reason"]) == ("Status", 410, "Expired")
    with pytest.raises(ApiException) as watched:
        list(watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=old, timeout_seconds=2))
    assert watched.value.status == 410

    fresh = v1.list_namespaced_config_map(ns).metadata.resource_version
    assert list(watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=fresh,
                                     timeout_seconds=1)) == []


def test_bookmarks_carry_only_the_resource_version(v1, ns):
    mark = v1.list_namespaced_config_map(ns).metadata.resource_version
    response = v1.list_namespaced_config_map(ns, watch=True, resource_version=mark, allow_watch_bookmarks=True,
                                             timeout_seconds=1, _preload_content=False)
    events = [json.loads(line) for line in response.data.decode().splitlines()]
    assert len(events) >= 2 and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[0]["object"]["kind"] == "ConfigMap"
    assert set(events[0]["object"]["metadata"]) == {"resourceVersion"}
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= int(mark)

    w = watch.Watch()
    for event in w.stream(v1.list_namespaced_config_map, ns, resource_version=mark, allow_watch_bookmarks=True,
                          timeout_seconds=1):
        assert event["type"] == "BOOKMARK"
        w.stop()
    assert w.resource_version is not None and int(w.resource_version) >= int(mark)


def test_timing_of_watches_is_the_real_servers_by_default_and_settable(v1, ns, emulator):
    assert (KubeEmulator().bookmark_interval, KubeEmulator().min_request_timeout) == (60.0, 1800.0)
    mark = v1.list_namespaced_config_map(ns).metadata.resource_version
    emulator.bookmark_interval = None
    try:
        quiet = v1.list_namespaced_config_map(ns, watch=True, resource_version=mark, allow_watch_bookmarks=True,
                                              timeout_seconds=1, _preload_content=False)
        assert quiet.data == b""  # no bookmark at all: the stream ends empty at timeoutSeconds
    finally:
        emulator.bookmark_interval = 0.3

    # Without timeoutSeconds the server picks 1x-2x of its --min-request-timeout, as kube-apiserver does.
    emulator.min_request_timeout = 0.2
    try:
        response = v1.list_namespaced_config_map(ns, watch=True, resource_version=mark, _preload_content=False)
        assert response.status == 200 and response.data == b""
    finally:
        emulator.min_request_timeout = 1800.0


def test_watches_can_outlive_their_timeout_and_be_dropped_mid_stream(v1, ns, emulator):
    mark = v1.list_namespaced_config_map(ns).metadata.resource_version
    emulator.ignore_timeout_seconds = True
    emulator.reset_requests()
    done: list[BaseException | None] = []

    def hold() -> None:
        try:
            response = v1.list_namespaced_config_map(ns, watch=True, resource_version=mark, timeout_seconds=1,
                                                     _preload_content=False)
            for _ in response.stream():
                pass
            done.append(None)
        except Exception as error:
            done.append(error)

    thread = threading.Thread(target=hold, daemon=True)
    try:
        thread.start()
        wait_until_true(lambda: emulator.open_watches == 1)
        time.sleep(1.5)  # past timeoutSeconds: still open
        assert emulator.open_watches == 1 and not done
        assert emulator.drop_watches() == 1
        thread.join(5)
    finally:
        emulator.ignore_timeout_seconds = False
    # Cut without the end of the chunked body: the client sees a broken stream, not a clean end.
    assert done and done[0] is not None
    assert emulator.open_watches == 0
    assert emulator.request_counts(rf"/namespaces/{ns}/") == {"watch": 1}


def test_a_server_refusing_connections_answers_nothing_and_records_them(v1, ns, emulator):
    emulator.refused.clear()
    emulator.refuse_connections = True
    try:
        with pytest.raises(Exception) as refused:
            v1.list_namespaced_config_map(ns, _request_timeout=5)
    finally:
        emulator.refuse_connections = False
    assert not isinstance(refused.value, ApiException)  # no answer at all, not an HTTP error
    assert [(r.method, r.path) for r in emulator.refused][-1:] == [("GET", f"/api/v1/namespaces/{ns}/configmaps")]
    assert v1.list_namespaced_config_map(ns).items == []  # back


def test_requests_are_counted_by_verb(v1, ns, emulator):
    emulator.reset_requests()
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    v1.read_namespaced_config_map("c", ns)
    v1.patch_namespaced_config_map("c", ns, {"metadata": {"labels": {"a": "b"}}})
    v1.replace_namespaced_config_map("c", ns, {"metadata": {"name": "c"}})
    v1.list_namespaced_config_map(ns)
    list(watch.Watch().stream(v1.list_namespaced_config_map, ns, timeout_seconds=1))
    v1.delete_namespaced_config_map("c", ns)
    v1.delete_collection_namespaced_config_map(ns)
    assert emulator.request_counts(rf"/namespaces/{ns}/") == {
        "create": 1, "get": 1, "patch": 1, "update": 1, "list": 1, "watch": 1, "delete": 1, "deletecollection": 1}


def test_waiting_for_requests_returns_when_a_client_makes_them_and_times_out_otherwise(v1, ns, emulator):
    emulator.reset_requests()
    counted: list[int] = []
    path = rf"/namespaces/{ns}/configmaps$"
    waiter = threading.Thread(target=lambda: counted.append(emulator.wait_for_requests("list", 2, path)), daemon=True)
    waiter.start()
    v1.list_namespaced_config_map(ns)
    v1.list_namespaced_secret(ns)  # another path: does not count
    assert not counted
    v1.list_namespaced_config_map(ns)
    waiter.join(10)

    assert counted == [2]
    assert emulator.wait_for_requests("list", 1, rf"/{ns}/secrets$") == 1  # already there: at once
    with pytest.raises(TimeoutError, match=r"1 watch request\(s\) .* 0 seen"):
        emulator.wait_for_requests("watch", 1, rf"/{ns}/", timeout=0.2)


def wait_until_true(predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not met"
        time.sleep(0.02)


def test_stop_ends_open_watches_and_log_follows(tmp_path):
    with KubeEmulator() as emu:
        api = config.new_client_from_config(config_file=emu.write_kubeconfig(tmp_path / "config"))
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", pod_body("p"))
        emu.run_pod("default", "p")
        ended = {"watch": threading.Event(), "log": threading.Event()}

        def drain(kind, call):
            try:
                call().read()
            except Exception:
                pass  # a connection cut by the server is also an end
            ended[kind].set()

        threading.Thread(target=drain, args=("watch", lambda: core.list_namespaced_pod(
            "default", watch=True, _preload_content=False)), daemon=True).start()
        threading.Thread(target=drain, args=("log", lambda: core.read_namespaced_pod_log(
            "p", "default", follow=True, _preload_content=False)), daemon=True).start()
        time.sleep(0.3)
        assert not ended["watch"].is_set() and not ended["log"].is_set()
    assert ended["watch"].wait(3) and ended["log"].wait(3)


# ---------------------------------------------------------------- deletion and garbage collection

def _owned_pod(name: str, owner) -> dict:
    ref = {"apiVersion": "v1", "kind": owner.kind or "Service", "name": owner.metadata.name, "uid": owner.metadata.uid}
    return pod_body(name, labels={"job": "x"}, ownerReferences=[ref])


def test_deleting_an_owner_deletes_its_dependents(v1, ns):
    service = v1.create_namespaced_service(ns, {"metadata": {"name": "job-x"}, "spec": {"clusterIP": "None",
                                                                                       "selector": {"job": "x"}}})
    service.kind = "Service"
    for name in ("r0", "r1"):
        v1.create_namespaced_pod(ns, _owned_pod(name, service))
    v1.create_namespaced_pod(ns, pod_body("unrelated"))
    mark = v1.list_namespaced_pod(ns).metadata.resource_version

    v1.delete_namespaced_service("job-x", ns)
    assert [p.metadata.name for p in v1.list_namespaced_pod(ns).items] == ["unrelated"]
    deleted = [(e["type"], e["object"].metadata.name) for e in
               watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=mark, timeout_seconds=1)]
    assert deleted == [("DELETED", "r0"), ("DELETED", "r1")]


def test_foreground_deletes_dependents_before_the_owner_and_orphan_keeps_them(v1, ns, emulator):
    owner = v1.create_namespaced_secret(ns, {"metadata": {"name": "owner"}, "stringData": {"k": "v"}})
    owner.kind = "Secret"
    v1.create_namespaced_pod(ns, _owned_pod("dep", owner))
    mark = emulator.resource_version
    v1.delete_namespaced_secret("owner", ns, propagation_policy="Foreground")
    pods = list(watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=mark, timeout_seconds=1))
    secrets = list(watch.Watch().stream(v1.list_namespaced_secret, ns, resource_version=mark, timeout_seconds=1))
    assert [e["type"] for e in pods] == ["DELETED"]
    assert [e["type"] for e in secrets] == ["MODIFIED", "DELETED"]  # marked with foregroundDeletion, then gone
    assert secrets[0]["object"].metadata.finalizers == ["foregroundDeletion"]
    assert int(pods[0]["object"].metadata.resource_version) < int(secrets[1]["object"].metadata.resource_version)

    owner = v1.create_namespaced_secret(ns, {"metadata": {"name": "owner"}, "data": {"k": "dg=="}})
    owner.kind = "Secret"
    v1.create_namespaced_pod(ns, _owned_pod("kept", owner))
    v1.delete_namespaced_secret("owner", ns, propagation_policy="Orphan")
    assert v1.read_namespaced_pod("kept", ns).metadata.owner_references is None


def test_jobs_orphan_their_pods_by_default_with_a_warning(api_client, v1, ns):
    batch = client.BatchV1Api(api_client)
    job = batch.create_namespaced_job(ns, {"metadata": {"name": "train"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "python:3.11"}]}}}})
    assert job.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "train"
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": job.metadata.uid}
    assert (job.spec.backoff_limit, job.spec.completions, job.spec.parallelism) == (6, 1, 1)
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job.metadata.uid, "controller": True}
    v1.create_namespaced_pod(ns, pod_body("train-abcde", ownerReferences=[ref]))

    response = batch.delete_namespaced_job("train", ns, _preload_content=False)
    assert "child pods are preserved by default" in response.headers.get("Warning")
    assert v1.read_namespaced_pod("train-abcde", ns).metadata.owner_references is None

    with pytest.raises(ApiException) as bad:
        batch.create_namespaced_job(ns, {"metadata": {"name": "bad"}, "spec": {"template": {"spec": {
            "containers": [{"name": "main", "image": "python:3.11"}]}}}})
    assert bad.value.status == 422
    assert status_of(bad.value)["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"


def test_objects_with_absent_owners_are_garbage_collected(v1, ns):
    stray = pod_body("stray", ownerReferences=[{"apiVersion": "v1", "kind": "Service", "name": "ghost",
                                                "uid": str(uuid.uuid4())}])
    v1.create_namespaced_pod(ns, stray)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and v1.list_namespaced_pod(ns).items:
        time.sleep(0.05)
    assert v1.list_namespaced_pod(ns).items == []


def test_finalizers_hold_deletion_until_removed(v1, ns):
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})
    v1.delete_namespaced_config_map("held", ns)
    held = v1.read_namespaced_config_map("held", ns)
    assert held.metadata.deletion_timestamp is not None
    v1.patch_namespaced_config_map("held", ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException) as gone:
        v1.read_namespaced_config_map("held", ns)
    assert gone.value.status == 404


# ---------------------------------------------------------------- kubelet playing and logs

def test_pod_status_helpers_shape_status_like_a_kubelet(v1, ns, emulator):
    for name in ("run", "ok", "oom", "unsched", "pull"):
        v1.create_namespaced_pod(ns, pod_body(name))
    emulator.run_pod(ns, "run")
    emulator.succeed_pod(ns, "ok", message='{"loss": 0.1}')
    emulator.fail_pod(ns, "oom", exit_code=137, reason="OOMKilled")
    emulator.pending_pod(ns, "unsched", reason="Unschedulable",
                         message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    emulator.pending_pod(ns, "pull", reason="ErrImagePull")

    running = v1.read_namespaced_pod("run", ns)
    assert running.status.phase == "Running" and running.status.pod_ip
    assert running.status.container_statuses[0].state.running.started_at is not None
    assert {c.type: c.status for c in running.status.conditions}["Ready"] == "True"

    ok = v1.read_namespaced_pod("ok", ns).status
    terminated = ok.container_statuses[0].state.terminated
    assert (ok.phase, terminated.exit_code, terminated.reason, terminated.message) == (
        "Succeeded", 0, "Completed", '{"loss": 0.1}')

    oom = v1.read_namespaced_pod("oom", ns).status
    assert (oom.phase, oom.container_statuses[0].state.terminated.exit_code,
            oom.container_statuses[0].state.terminated.reason) == ("Failed", 137, "OOMKilled")

    unsched = v1.read_namespaced_pod("unsched", ns)
    scheduled = next(c for c in unsched.status.conditions if c.type == "PodScheduled")
    assert (unsched.status.phase, scheduled.status, scheduled.reason) == ("Pending", "False", "Unschedulable")
    assert "nvidia.com/gpu" in scheduled.message and unsched.spec.node_name is None

    pull = v1.read_namespaced_pod("pull", ns).status
    assert pull.phase == "Pending" and pull.container_statuses[0].state.waiting.reason == "ErrImagePull"

    emulator.add_event(ns, "Pod", "unsched", "FailedScheduling", "0/1 nodes are available")
    events = v1.list_namespaced_event(ns, field_selector="involvedObject.name=unsched")
    assert [(e.reason, e.type, e.involved_object.uid) for e in events.items] == [
        ("FailedScheduling", "Warning", unsched.metadata.uid)]


def test_pod_logs_tail_since_timestamps_and_errors(api_client, v1, ns, emulator):
    v1.create_namespaced_pod(ns, pod_body("logs"))
    with pytest.raises(ApiException) as waiting:
        v1.read_namespaced_pod_log("logs", ns, _preload_content=False)
    assert waiting.value.status == 400
    assert status_of(waiting.value)["message"] == (
        'container "main" in pod "logs" is waiting to start: ContainerCreating')

    emulator.run_pod(ns, "logs")
    now = datetime.now(timezone.utc).replace(microsecond=0)
    emulator.append_log(ns, "logs", "step 1", at=now - timedelta(seconds=100))
    emulator.append_log(ns, "logs", "step 2\nstep 3", at=now - timedelta(seconds=50))
    emulator.append_log(ns, "logs", "step 4")

    def read(**kwargs) -> str:
        return v1.read_namespaced_pod_log("logs", ns, _preload_content=False, **kwargs).data.decode()

    assert read() == "step 1\nstep 2\nstep 3\nstep 4\n"
    assert read(tail_lines=2) == "step 3\nstep 4\n"
    assert read(since_seconds=75) == "step 2\nstep 3\nstep 4\n"
    since = (now - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert raw_get(api_client, f"/api/v1/namespaces/{ns}/pods/logs/log",
                   [("sinceTime", since), ("tailLines", "2")]) == "step 3\nstep 4\n"
    stamped = read(timestamps=True, tail_lines=1).rstrip("\n")
    stamp, text = stamped.split(" ", 1)
    assert text == "step 4" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z", stamp)

    with pytest.raises(ApiException) as missing:
        v1.read_namespaced_pod_log("nope", ns, _preload_content=False)
    assert missing.value.status == 404
    v1.create_namespaced_pod(ns, pod_body("two", containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]))
    emulator.run_pod(ns, "two")
    with pytest.raises(ApiException) as ambiguous:
        v1.read_namespaced_pod_log("two", ns, _preload_content=False)
    assert ambiguous.value.status == 400
    assert status_of(ambiguous.value)["message"] == (
        "a container name must be specified for pod two, choose one of: [a b]")
    emulator.append_log(ns, "two", "from b", container="b")
    assert v1.read_namespaced_pod_log("two", ns, container="b", _preload_content=False).data == b"from b\n"


def test_follow_streams_until_the_pod_terminates(v1, ns, emulator):
    v1.create_namespaced_pod(ns, pod_body("follow"))
    emulator.run_pod(ns, "follow")
    emulator.append_log(ns, "follow", "epoch 0")

    def training():
        for epoch in (1, 2):
            time.sleep(0.1)
            emulator.append_log(ns, "follow", f"epoch {epoch}")
        emulator.succeed_pod(ns, "follow")

    threading.Thread(target=training, daemon=True).start()
    started = time.monotonic()
    lines = list(watch.Watch().stream(v1.read_namespaced_pod_log, "follow", ns))
    assert lines == ["epoch 0", "epoch 1", "epoch 2"]
    assert time.monotonic() - started < 3


# ---------------------------------------------------------------- faults

def test_injected_500_then_429_then_success(v1, ns, emulator):
    emulator.reset_requests()
    emulator.inject_faults(method="POST", path_regex=rf"/namespaces/{ns}/configmaps$", statuses=[500, 429])
    body = {"metadata": {"name": "flaky"}}

    with pytest.raises(ApiException) as first:
        v1.create_namespaced_config_map(ns, body)
    assert first.value.status == 500 and status_of(first.value)["reason"] == "InternalError"
    with pytest.raises(ApiException) as second:
        v1.create_namespaced_config_map(ns, body)
    assert second.value.status == 429 and second.value.headers["Retry-After"] == "0"
    assert status_of(second.value)["reason"] == "TooManyRequests"
    assert v1.create_namespaced_config_map(ns, body).metadata.name == "flaky"
    posts = [r for r in emulator.requests if r.method == "POST" and r.path.endswith("/configmaps")]
    assert len(posts) == 3 and not any(r.is_watch for r in posts)


def test_urllib3_retries_a_429_with_retry_after_on_idempotent_requests(v1, ns, emulator):
    # The sync client's urllib3 pool retries GET/PUT/DELETE answered 429 + Retry-After by itself.
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    emulator.reset_requests()
    emulator.inject_faults(method="GET", path_regex=rf"/namespaces/{ns}/configmaps/cm$", statuses=[429])
    assert v1.read_namespaced_config_map("cm", ns).metadata.name == "cm"
    assert [r.method for r in emulator.requests] == ["GET", "GET"]


# ---------------------------------------------------------------- custom resources and discovery

TFJOB_SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "required": ["tfReplicaSpecs"], "properties": {
            "runPolicy": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "tfReplicaSpecs": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                "replicas": {"type": "integer"}, "restartPolicy": {"type": "string"},
                "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_custom_objects_of_a_registered_crd(api_client, ns, emulator):
    emulator.register_crd("kubeflow.org", "v1", "tfjobs", "TFJob", schema=TFJOB_SCHEMA)
    custom = client.CustomObjectsApi(api_client)
    body = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {}}}}, "bogus": 1}}
    created = custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "tfjobs", body)
    assert created["metadata"]["generation"] == 1 and "bogus" not in created["spec"]  # pruned, as the API server does
    fetched = custom.get_namespaced_custom_object("kubeflow.org", "v1", ns, "tfjobs", "mnist")
    assert fetched["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 2

    status = {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
    patched = custom.patch_namespaced_custom_object_status("kubeflow.org", "v1", ns, "tfjobs", "mnist", status)
    assert patched["status"]["conditions"][0]["type"] == "Running"
    assert patched["metadata"]["generation"] == 1  # status writes do not bump the generation
    ignored = custom.patch_namespaced_custom_object("kubeflow.org", "v1", ns, "tfjobs", "mnist",
                                                    {"status": {"conditions": []}, "spec": {"runPolicy": {"a": 1}}})
    assert ignored["status"]["conditions"][0]["type"] == "Running" and ignored["metadata"]["generation"] == 2

    with pytest.raises(ApiException) as invalid:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", ns, "tfjobs", {
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "bad"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": "two"}}}})
    assert invalid.value.status == 422
    assert status_of(invalid.value)["details"]["causes"][0]["field"] == "spec.tfReplicaSpecs.Worker.replicas"

    listed = custom.list_namespaced_custom_object("kubeflow.org", "v1", ns, "tfjobs")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["mnist"] and listed["items"][0]["kind"] == "TFJob"
    pg = custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", ns, "podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "mnist"},
        "spec": {"minMember": 3}})
    assert pg["spec"]["minMember"] == 3
    assert emulator.get("tfjobs", ns, "mnist", group="kubeflow.org")["status"]["conditions"][0]["status"] == "True"


def test_discovery_and_dynamic_client(api_client, ns):
    assert client.VersionApi(api_client).get_code().minor == "31"
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"batch", "coordination.k8s.io", "rbac.authorization.k8s.io", "scheduling.x-k8s.io"} <= groups
    dyn = dynamic.DynamicClient(api_client)
    leases = dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    leases.create(body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
                        "spec": {"holderIdentity": "me"}}, namespace=ns)
    assert leases.get(name="leader", namespace=ns).spec.holderIdentity == "me"


# ---------------------------------------------------------------- other clients

def test_kubernetes_asyncio_list_and_watch(kubeconfig, ns, emulator):
    from kubernetes_asyncio import client as aclient
    from kubernetes_asyncio import config as aconfig
    from kubernetes_asyncio import watch as awatch

    emulator.create("configmaps", ns, {"metadata": {"name": "before"}})

    async def scenario():
        configuration = aclient.Configuration()
        await aconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        async with aclient.ApiClient(configuration) as api:
            core = aclient.CoreV1Api(api)
            listed = await core.list_namespaced_config_map(ns)
            names = [c.metadata.name for c in listed.items]
            threading.Timer(0.2, emulator.create, ("configmaps", ns, {"metadata": {"name": "after"}})).start()
            seen = []
            async with awatch.Watch().stream(core.list_namespaced_config_map, ns,
                                             resource_version=listed.metadata.resource_version,
                                             timeout_seconds=1) as stream:
                async for event in stream:
                    seen.append((event["type"], event["object"].metadata.name))
            return names, seen

    names, seen = asyncio.run(scenario())
    assert names == ["before"] and seen == [("ADDED", "after")]


def test_airflow_kubernetes_hooks(kubeconfig, ns, emulator):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
    from kubernetes_asyncio import client as aclient

    emulator.create("pods", ns, pod_body("hooked", labels={"app": "h"}))
    emulator.run_pod(ns, "hooked")
    hook = KubernetesHook(conn_id=None, kubernetes_conn_id=None, config_file=kubeconfig,
                          client_configuration=client.Configuration())
    assert hook.get_pod("hooked", ns).status.phase == "Running"
    listed = hook.core_v1_client.list_namespaced_pod(ns, label_selector="app=h")
    assert [p.metadata.name for p in listed.items] == ["hooked"]

    # The async hook retries a 429 (honouring Retry-After) and then gets the pod.
    async_hook = AsyncKubernetesHook(conn_id=None, kubernetes_conn_id=None,
                                     connection_extras={"kube_config_path": kubeconfig},
                                     client_configuration=aclient.Configuration())
    emulator.reset_requests()
    emulator.inject_faults(method="GET", path_regex=rf"/namespaces/{ns}/pods/hooked$", statuses=[429])
    pod = asyncio.run(async_hook.get_pod("hooked", ns))
    assert pod.status.phase == "Running"
    assert len([r for r in emulator.requests if r.path.endswith("/pods/hooked")]) == 2
