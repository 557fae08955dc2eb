"""API server semantics on top of the store: the verbs, admission, validation, garbage collection.

``Cluster`` implements create / get / list / watch / update / patch / delete / deletecollection the way
kube-apiserver answers them (status codes, ``Status`` bodies, resourceVersion rules, finalizers and
ownerReference cascades), plus the few controllers whose effects clients rely on: the scheduler binding
pods to the node, the service-account controller, the namespace controller, the CRD controller and the
garbage collector. The HTTP layer (``server.py``) only translates requests into these calls.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import patch as patching
from .resources import (
    Allocator,
    ResourceType,
    allocate_service_fields,
    apply_defaults,
    builtin_types,
    initial_status,
    job_selector_labels,
)
from .schema import Findings, SchemaSet, check_custom_resource, strip_nulls
from .selectors import SelectorError, fields_match, labels_match, parse_field_selector, parse_label_selector
from .store import Store, WatchEvent
from .validation import (
    Cause,
    DecodeError,
    check_base64_values,
    forbidden,
    invalid,
    validate_config_keys,
    validate_immutable_data,
    validate_job_spec,
    validate_job_update,
    validate_object_meta,
    validate_pod_spec,
    validate_pod_update,
    validate_service_spec,
)

NODE_NAME = "emulator-node"
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_NAMESPACE_MISMATCH = "the namespace of the provided object does not match the namespace sent on the request"
_JOB_ORPHAN_WARNING = ("child pods are preserved by default when jobs are deleted; set propagationPolicy=Background "
                       "to remove them or set propagationPolicy=Orphan to suppress this warning")


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error answer of the API server, rendered as a ``Status`` object."""

    def __init__(self, code: int, reason: str | None, message: str, details: dict | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message}
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str, kind: str | None = None) -> dict:
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = kind or rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def conflict(rt: ResourceType, name: str, detail: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {detail}',
                    _details(rt, name))


def invalid_error(rt: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    # The schema and the hand-written rules can report the same problem; the API server reports it once.
    causes = list(dict.fromkeys(causes))
    rendered = [f"{c.field}: {c.message}" if c.field else c.message for c in causes]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details = _details(rt, name, kind=rt.kind)
    details["causes"] = [c.as_dict() for c in causes]
    qualified = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details)


def forbidden_error(rt: ResourceType, name: str, reason: str) -> ApiError:
    return ApiError(403, "Forbidden", f'{rt.group_resource} "{name}" is forbidden: {reason}', _details(rt, name))


@dataclass
class RequestOptions:
    """Per-request switches from the query string."""
    dry_run: bool = False
    field_validation: str = "Warn"
    field_manager: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    version: str
    label_selector: list
    field_selector: list
    cursor: int
    initial: list[dict]
    allow_bookmarks: bool
    send_initial_end: bool
    deadline: float | None
    expired_from: int | None = None


class Cluster:
    def __init__(self, schemas: SchemaSet, *, schedule_pods: bool = True, collect_orphans: bool = True,
                 bookmark_interval: float | None = 60.0, history_limit: int = 100_000,
                 min_request_timeout: float = 1800.0):
        self.schemas = schemas
        self.store = Store(history_limit=history_limit)
        self.allocator = Allocator()
        self.schedule_pods = schedule_pods
        self.collect_orphans = collect_orphans
        self.bookmark_interval = bookmark_interval
        # kube-apiserver's --min-request-timeout: a watch without timeoutSeconds lasts a random 1x-2x of it.
        self.min_request_timeout = min_request_timeout
        # A server (or a proxy in front of it) that keeps watches open past their timeoutSeconds.
        self.ignore_timeout_seconds = False
        self._types: dict[tuple[str, str], ResourceType] = {}
        self._timers: list[threading.Timer] = []
        for rt in builtin_types():
            self._types[rt.key] = rt
        self._bootstrap()

    # ------------------------------------------------------------ types

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self._types.get((group, plural))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def lookup_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for rt in self._types.values():
            if rt.group == group and rt.kind == kind and version in rt.versions:
                return rt
        return None

    def types(self) -> list[ResourceType]:
        return list(self._types.values())

    # ------------------------------------------------------------ bootstrap

    def _bootstrap(self) -> None:
        opts = RequestOptions()
        ns_type = self._types[("", "namespaces")]
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(ns_type, None, {"metadata": {"name": name}}, "v1", opts)
        node = {
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                                                        "kubernetes.io/arch": "amd64"}},
            "spec": {},
        }
        stored = self.create(self._types[("", "nodes")], None, node, "v1", opts)
        status = {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": now_rfc3339(),
                            "lastTransitionTime": now_rfc3339()}],
            "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}, {"type": "Hostname", "address": NODE_NAME}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                         "kubeletVersion": f"v{self.schemas.version}.0",
                         "containerRuntimeVersion": "containerd://1.7.0", "kernelVersion": "6.1.0", "osImage": "Linux",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        }
        self.write_status(self._types[("", "nodes")], "", stored["metadata"]["name"], status)
        service = {"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"clusterIP": "10.96.0.1",
                            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}
        self.create(self._types[("", "services")], "default", service, "v1", opts)
        for group, version, kind in (("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
                                     ("scheduling.volcano.sh", "v1beta1", "PodGroup")):
            self.register_crd(group, version, "podgroups", kind, short_names=("pg",))

    def register_crd(self, group: str, version: str, plural: str, kind: str, namespaced: bool = True,
                     schema: dict | None = None, *, status_subresource: bool = True,
                     short_names: tuple[str, ...] = (), versions: tuple[str, ...] | None = None) -> dict:
        served = tuple(versions or (version,))
        if version not in served:
            served = (version,) + served
        crd_versions = []
        for name in served:
            entry: dict[str, Any] = {
                "name": name, "served": True, "storage": name == version,
                "schema": {"openAPIV3Schema": schema or {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}},
            }
            if status_subresource:
                entry["subresources"] = {"status": {}}
            crd_versions.append(entry)
        body = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced" if namespaced else "Cluster",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List",
                               **({"shortNames": list(short_names)} if short_names else {})},
                     "versions": crd_versions},
        }
        crd_type = self._types[("apiextensions.k8s.io", "customresourcedefinitions")]
        with self.store.lock:
            existing = self.store.get(crd_type.key, "", body["metadata"]["name"])
            if existing is not None:
                body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                return self.update(crd_type, None, body["metadata"]["name"], body, "v1", RequestOptions())
            return self.create(crd_type, None, body, "v1", RequestOptions())

    def _install_crd(self, crd: dict) -> dict:
        spec = crd["spec"]
        served = [v for v in spec.get("versions") or [] if v.get("served", True)]
        storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), served[0]["name"])
        names = spec["names"]
        rt = ResourceType(
            spec["group"], storage, names["plural"], names["kind"], namespaced=spec.get("scope") == "Namespaced",
            singular=names.get("singular") or names["kind"].lower(), short_names=tuple(names.get("shortNames") or ()),
            status_subresource=any("status" in (v.get("subresources") or {}) for v in served),
            custom=True, versions=tuple(v["name"] for v in served), generation=True,
            categories=tuple(names.get("categories") or ()),
            version_schemas={v["name"]: ((v.get("schema") or {}).get("openAPIV3Schema")) for v in served},
        )
        self._types[rt.key] = rt
        status = {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now_rfc3339()},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now_rfc3339()},
            ],
            "acceptedNames": names, "storedVersions": [storage],
        }
        crd_type = self._types[("apiextensions.k8s.io", "customresourcedefinitions")]
        return self.write_status(crd_type, "", crd["metadata"]["name"], status)

    # ------------------------------------------------------------ presentation

    @staticmethod
    def present(rt: ResourceType, obj: dict, version: str | None = None, in_list: bool = False) -> dict:
        shown = copy.deepcopy(obj)
        if in_list and not rt.custom:
            # Items of built-in lists carry no kind/apiVersion on the wire.
            shown.pop("kind", None)
            shown.pop("apiVersion", None)
        elif version and rt.custom:
            shown["apiVersion"] = rt.api_version(version)
        return shown

    # ------------------------------------------------------------ decoding

    def _decode(self, rt: ResourceType, body: Any, version: str, opts: RequestOptions) -> tuple[dict, list[Cause]]:
        kind, api_version = rt.kind, rt.api_version(version)
        if not isinstance(body, dict):
            raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
                              f'{"array" if isinstance(body, list) else "value"} into Go value of type struct')
        obj = strip_nulls(body)
        if obj.get("apiVersion") and obj["apiVersion"] != api_version:
            raise bad_request(f"the API version in the data ({obj['apiVersion']}) does not match the expected "
                              f"API version ({api_version})")
        if obj.get("kind") and obj["kind"] != kind:
            raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: the kind in the data '
                              f'({obj["kind"]}) does not match the expected kind ({kind})')
        obj["apiVersion"], obj["kind"] = api_version, kind
        if not isinstance(obj.setdefault("metadata", {}), dict):
            raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
                              f"{type(obj['metadata']).__name__} into Go struct field {kind}.metadata "
                              "of type v1.ObjectMeta")
        if rt.custom:
            obj, findings = check_custom_resource(obj, rt.version_schemas.get(version))
        else:
            findings = self.schemas.check(obj, kind, api_version)
            if findings.type_errors:
                raise bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: '
                                  f"{findings.type_errors[0]}")
        self._report_unknown(rt, version, findings, opts)
        if rt.plural == "secrets":
            try:
                check_base64_values(obj.get("data"), kind)
            except DecodeError as exc:
                raise bad_request(str(exc)) from None
            string_data = obj.pop("stringData", None) or {}
            if string_data:
                data = obj.setdefault("data", {})
                for key, value in string_data.items():
                    data[key] = base64.b64encode(str(value).encode()).decode()
        return obj, findings.causes

    @staticmethod
    def _report_unknown(rt: ResourceType, version: str, findings: Findings, opts: RequestOptions) -> None:
        if not findings.unknown:
            return
        if opts.field_validation == "Strict":
            listed = ", ".join(f'unknown field "{p}"' for p in findings.unknown)
            raise bad_request(f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: '
                              f"strict decoding error: {listed}")
        if opts.field_validation == "Warn":
            opts.warnings.extend(f'unknown field "{p}"' for p in findings.unknown)

    def _validate(self, rt: ResourceType, obj: dict, old: dict | None) -> list[Cause]:
        causes = validate_object_meta(obj["metadata"], rt.name_rule, rt.namespaced)
        if rt.plural == "pods":
            causes += validate_pod_spec(obj.get("spec") or {}, "spec", is_pod=True)
            if old is not None:
                causes += validate_pod_update(old, obj)
        elif rt.plural == "jobs":
            causes += validate_job_spec(obj.get("spec") or {})
            if old is not None:
                causes += validate_job_update(old, obj)
        elif rt.plural == "services":
            causes += validate_service_spec(obj.get("spec") or {})
            if old is not None:
                old_ip, new_ip = (old.get("spec") or {}).get("clusterIP"), (obj.get("spec") or {}).get("clusterIP")
                if old_ip and new_ip and old_ip != new_ip:
                    causes.append(invalid("spec.clusterIPs[0]", new_ip, "may not change once set"))
        elif rt.plural in ("configmaps", "secrets"):
            sections = ("data", "binaryData") if rt.plural == "configmaps" else ("data",)
            causes += validate_config_keys(obj, sections)
            if old is not None:
                causes += validate_immutable_data(old, obj, sections)
        elif rt.plural == "rolebindings" and old is not None and old.get("roleRef") != obj.get("roleRef"):
            causes.append(invalid("roleRef", obj.get("roleRef"), "cannot change roleRef"))
        elif rt.plural == "customresourcedefinitions":
            spec = obj.get("spec") or {}
            expected = f"{(spec.get('names') or {}).get('plural', '')}.{spec.get('group', '')}"
            if obj["metadata"].get("name") != expected:
                causes.append(invalid("metadata.name", obj["metadata"].get("name"),
                                      'must be spec.names.plural+"."+spec.group'))
        if old is not None and old["metadata"].get("deletionTimestamp"):
            added = set(obj["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                causes.append(forbidden("metadata.finalizers", "no new finalizers can be added if the object is "
                                        f"being deleted, found new finalizers {sorted(added)}"))
        return causes

    # ------------------------------------------------------------ create

    def create(self, rt: ResourceType, namespace: str | None, body: Any, version: str, opts: RequestOptions) -> dict:
        with self.store.lock:
            obj, causes = self._decode(rt, body, version, opts)
            meta = obj["metadata"]
            if rt.namespaced:
                if meta.get("namespace") and meta["namespace"] != namespace:
                    raise bad_request(_NAMESPACE_MISMATCH)
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if meta.get("resourceVersion"):
                raise ApiError(500, None, "resourceVersion should not be set on objects to be created")
            if rt.namespaced:
                self._admit_namespace(rt, namespace or "", meta.get("name") or meta.get("generateName", ""))
            try:
                apply_defaults(rt, obj, self.allocator)
            except DecodeError as exc:
                raise bad_request(f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {exc}') from None
            if rt.plural == "pods":
                self._admit_service_account(rt, obj)
            generated = not meta.get("name") and bool(meta.get("generateName"))
            if generated:
                meta["name"] = self._generate_name(rt, namespace or "", meta["generateName"])
            causes = causes + self._validate(rt, obj, None)
            if causes:
                raise invalid_error(rt, meta.get("name") or meta.get("generateName", ""), causes)
            if self.store.get(rt.key, namespace or "", meta["name"]) is not None:
                raise ApiError(409, "AlreadyExists", f'{rt.group_resource} "{meta["name"]}" already exists',
                               _details(rt, meta["name"]))
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
                meta.pop(key, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            if rt.generation:
                meta["generation"] = 1
            if rt.status_subresource or not rt.custom:
                status = initial_status(rt, obj)
                if status is None:
                    obj.pop("status", None)
                else:
                    obj["status"] = status
            if rt.plural == "jobs":
                job_selector_labels(obj)
            if rt.plural == "services":
                allocate_service_fields(obj, None, self.allocator)
            if opts.dry_run:
                return self.present(rt, obj, version)
            stored = self.store.put(rt.key, obj, None)
            self._after_create(rt, stored)
            return self.present(rt, stored, version)

    def _admit_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        ns = self.store.get(("", "namespaces"), "", namespace)
        if ns is None:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"})
        if ns["metadata"].get("deletionTimestamp"):
            raise forbidden_error(rt, name, f"unable to create new content in namespace {namespace} because it is "
                                            "being terminated")

    def _admit_service_account(self, rt: ResourceType, pod: dict) -> None:
        namespace = pod["metadata"]["namespace"]
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        if self.store.get(("", "serviceaccounts"), namespace, account) is None:
            raise forbidden_error(rt, pod["metadata"].get("name") or "",
                                  f'error looking up service account {namespace}/{account}: '
                                  f'serviceaccount "{account}" not found')

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        prefix = prefix[:58]  # leave room for the suffix within the 63-character limits
        for _ in range(10):
            name = prefix + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
            if self.store.get(rt.key, namespace, name) is None:
                return name
        return name

    def _after_create(self, rt: ResourceType, stored: dict) -> None:
        meta = stored["metadata"]
        if rt.plural == "namespaces":
            # The service-account controller gives every namespace a "default" account.
            account = {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default", "namespace": meta["name"], "uid": str(uuid.uuid4()),
                                    "creationTimestamp": now_rfc3339()}}
            self.store.put(("", "serviceaccounts"), account, None)
        elif rt.plural == "customresourcedefinitions":
            self._install_crd(stored)
        elif rt.plural == "pods" and self.schedule_pods:
            self._schedule(stored)
        self._check_owners(rt, stored)

    def _schedule(self, pod: dict) -> None:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        bound = copy.deepcopy(pod)
        if spec.get("schedulingGates"):
            bound["status"]["conditions"] = [{
                "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}]
        else:
            bound["spec"]["nodeName"] = NODE_NAME
            bound["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                              "lastTransitionTime": now_rfc3339()}]
        self.store.put(("", "pods"), bound, pod)

    # ------------------------------------------------------------ read

    def get(self, rt: ResourceType, namespace: str | None, name: str, version: str) -> dict:
        with self.store.lock:
            obj = self.store.get(rt.key, namespace or "", name)
            if obj is None:
                raise not_found(rt, name)
            return self.present(rt, obj, version)

    def _selectors(self, rt: ResourceType, query: dict) -> tuple[list, list]:
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"), rt.field_selectors)
        except SelectorError as exc:
            raise bad_request(str(exc)) from None
        return labels, fields

    def _matches(self, rt: ResourceType, obj: dict | None, namespace: str | None, labels: list, fields: list) -> bool:
        if obj is None:
            return False
        if namespace is not None and obj["metadata"].get("namespace", "") != namespace:
            return False
        return labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, rt.field_values(obj))

    def _state_at(self, rt: ResourceType, rv: int) -> list[dict]:
        """Objects of one resource as they were at ``rv`` (undoing later history)."""
        current = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in self.store.items(rt.key)}
        for event in reversed(self.store.events_after(rv)):
            if event.resource != rt.key:
                continue
            key = (event.obj["metadata"].get("namespace", ""), event.obj["metadata"]["name"])
            if event.type == "ADDED":
                current.pop(key, None)
            else:
                current[key] = event.prev
        return [current[k] for k in sorted(current)]

    def _wait_for_rv(self, rv: int) -> None:
        deadline = time.monotonic() + 3.0
        with self.store.changed:
            while self.store.rv < rv and not self.store.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ApiError(504, "Timeout", f"Too large resource version: {rv}, current: {self.store.rv}",
                                   {"causes": [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1})
                self.store.changed.wait(min(left, 0.1))

    def list(self, rt: ResourceType, namespace: str | None, version: str, query: dict) -> dict:
        labels, fields = self._selectors(rt, query)
        rv_text = query.get("resourceVersion") or ""
        match = query.get("resourceVersionMatch") or ""
        token = query.get("continue") or ""
        limit_text = query.get("limit") or ""
        try:
            limit = int(limit_text) if limit_text else 0
        except ValueError:
            raise bad_request(f'limit: Invalid value: "{limit_text}"') from None
        if match and match not in ("NotOlderThan", "Exact"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{match}": supported values: "Exact", '
                              '"NotOlderThan"')
        if match and not rv_text:
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        start_after = None
        exact_rv = None
        if token:
            if rv_text:
                raise bad_request("specifying resource version is not allowed when using continue")
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
                exact_rv, start_after = int(decoded["rv"]), decoded["start"]
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                  "(version meta.k8s.io/v1)") from None
            if exact_rv < self.store.floor:
                raise expired("The provided continue parameter is too old to display a consistent list result. "
                              "You can start a new list without the continue parameter, or use the continue token "
                              "in this response to retrieve the remainder of the results. Continuing with the provided "
                              "token results in an inconsistent list - objects that were created, modified, or deleted "
                              "between the time the first chunk was returned and now may show up in the list.")
        elif rv_text:
            try:
                requested = int(rv_text)
            except ValueError:
                raise bad_request(f'resourceVersion: Invalid value: "{rv_text}": must be an integer') from None
            if requested > self.store.rv:
                self._wait_for_rv(requested)
            # Exact semantics: asked for, or implied by a paginated list at a non-zero version (legacy rule).
            if match == "Exact" or (not match and limit and requested != 0):
                if requested < self.store.floor:
                    raise expired("The resourceVersion for the provided list is too old.")
                exact_rv = requested
        with self.store.lock:
            list_rv = self.store.rv if exact_rv is None else exact_rv
            source = self.store.items(rt.key) if exact_rv is None else self._state_at(rt, exact_rv)
            items = [o for o in source if self._matches(rt, o, namespace, labels, fields)]
        if start_after is not None:
            items = [o for o in items if _list_key(o) > start_after]
        metadata: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and len(items) > limit:
            start = _list_key(items[limit - 1])
            metadata["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"v": "meta.k8s.io/v1", "rv": list_rv, "start": start}).encode()).decode().rstrip("=")
            if not labels and not fields:
                metadata["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version(version), "metadata": metadata,
                "items": [self.present(rt, o, version, in_list=True) for o in items]}

    # ------------------------------------------------------------ watch

    def prepare_watch(self, rt: ResourceType, namespace: str | None, version: str, query: dict) -> WatchRequest:
        labels, fields = self._selectors(rt, query)
        rv_text = query.get("resourceVersion") or ""
        allow_bookmarks = query.get("allowWatchBookmarks") in ("true", "1", "True")
        send_initial = query.get("sendInitialEvents") in ("true", "1", "True")
        timeout_text = query.get("timeoutSeconds")
        try:
            timeout = int(timeout_text) if timeout_text else None  # an integer, as the API server insists
        except ValueError:
            raise bad_request(f'timeoutSeconds: Invalid value: "{timeout_text}"') from None
        if send_initial and (query.get("resourceVersionMatch") != "NotOlderThan" or not allow_bookmarks):
            raise ApiError(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                           "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled "
                           "and resourceVersionMatch is set to NotOlderThan and allowWatchBookmarks is true")
        if timeout is None or self.ignore_timeout_seconds:
            lifetime = self.min_request_timeout * (1 + random.random())
        else:
            lifetime = timeout
        deadline = time.monotonic() + lifetime
        request = WatchRequest(rt, namespace, version, labels, fields, 0, [], allow_bookmarks, False, deadline)
        if rv_text in ("", "0") or send_initial:
            with self.store.lock:
                request.cursor = self.store.rv
                request.initial = [{"type": "ADDED", "object": self.present(rt, o, version)}
                                   for o in self.store.items(rt.key) if self._matches(rt, o, namespace, labels, fields)]
            request.send_initial_end = send_initial
            return request
        try:
            requested = int(rv_text)
        except ValueError:
            raise bad_request(f'resourceVersion: Invalid value: "{rv_text}": must be an integer') from None
        if requested > self.store.rv:
            self._wait_for_rv(requested)
        with self.store.lock:
            if requested < self.store.floor:
                request.expired_from = requested
            request.cursor = requested
        return request

    def _too_old(self, rv: int) -> dict:
        return {"type": "ERROR", "object": expired(f"too old resource version: {rv} ({self.store.floor + 1})").status()}

    def _bookmark(self, request: WatchRequest, initial_end: bool = False) -> dict:
        meta: dict[str, Any] = {"resourceVersion": str(request.cursor)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"type": "BOOKMARK", "object": {"kind": request.rt.kind,
                                               "apiVersion": request.rt.api_version(request.version), "metadata": meta}}

    def _translate(self, request: WatchRequest, event: WatchEvent) -> dict | None:
        rt = request.rt
        if event.resource != rt.key:
            return None
        now_matches = event.type != "DELETED" and self._matches(rt, event.obj, request.namespace,
                                                                 request.label_selector, request.field_selector)
        was_matching = event.type != "ADDED" and self._matches(rt, event.prev, request.namespace,
                                                                request.label_selector, request.field_selector)
        if event.type == "ADDED":
            etype = "ADDED" if now_matches else None
        elif event.type == "DELETED":
            etype = "DELETED" if was_matching else None
        elif now_matches and was_matching:
            etype = "MODIFIED"
        elif now_matches:
            etype = "ADDED"
        elif was_matching:
            etype = "DELETED"
        else:
            etype = None
        if etype is None:
            return None
        return {"type": etype, "object": self.present(rt, event.obj, request.version)}

    def watch_events(self, request: WatchRequest, should_stop: Callable[[], bool]) -> Iterator[dict | None]:
        """Events of a prepared watch; yields None now and then so the caller can notice a closed client."""
        if request.expired_from is not None:
            yield self._too_old(request.expired_from)
            return
        yield from request.initial
        if request.send_initial_end:
            yield self._bookmark(request, initial_end=True)
        last_bookmark = time.monotonic()
        store = self.store
        while True:
            now = time.monotonic()
            if request.deadline is not None and now >= request.deadline:
                return
            waits = [0.2]
            if request.deadline is not None:
                waits.append(request.deadline - now)
            interval = self.bookmark_interval
            if request.allow_bookmarks and interval:
                waits.append(max(0.0, last_bookmark + interval - now))
            with store.changed:
                if store.rv == request.cursor and not store.closed:
                    store.changed.wait(max(0.0, min(waits)))
                if store.closed:
                    return
                if request.cursor < store.floor:
                    yield self._too_old(request.cursor)
                    return
                events = store.events_after(request.cursor)
                request.cursor = store.rv
            for event in events:
                translated = self._translate(request, event)
                if translated is not None:
                    yield translated
            if request.allow_bookmarks and interval and time.monotonic() - last_bookmark >= interval:
                yield self._bookmark(request)
                last_bookmark = time.monotonic()
            if should_stop():
                return
            yield None

    # ------------------------------------------------------------ update / patch

    def update(self, rt: ResourceType, namespace: str | None, name: str, body: Any, version: str,
               opts: RequestOptions, subresource: str | None = None) -> dict:
        with self.store.lock:
            existing = self.store.get(rt.key, namespace or "", name)
            if existing is None:
                raise not_found(rt, name)
            obj, causes = self._decode(rt, body, version, opts)
            self._check_identity(rt, obj, namespace, name)
            return self._apply_update(rt, existing, obj, causes, version, opts, subresource)

    @staticmethod
    def _check_identity(rt: ResourceType, obj: dict, namespace: str | None, name: str) -> None:
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        meta["name"] = name
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(_NAMESPACE_MISMATCH)
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)

    def _apply_update(self, rt: ResourceType, existing: dict, obj: dict, causes: list[Cause], version: str,
                      opts: RequestOptions, subresource: str | None) -> dict:
        name = existing["metadata"]["name"]
        body_rv = obj["metadata"].get("resourceVersion")
        if body_rv:
            if body_rv != existing["metadata"]["resourceVersion"]:
                raise conflict(rt, name, "the object has been modified; please apply your changes to the latest "
                                         "version and try again")
        elif rt.custom:
            raise invalid_error(rt, name, [invalid("metadata.resourceVersion", 0, "must be specified for an update")])
        body_uid = obj["metadata"].get("uid")
        if body_uid and body_uid != existing["metadata"]["uid"]:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {body_uid}, UID in object "
                                            f"meta: {existing['metadata']['uid']}", _details(rt, name))
        if subresource == "status":
            result = copy.deepcopy(existing)
            if "status" in obj:
                result["status"] = obj["status"]
            else:
                result.pop("status", None)
        else:
            result = obj
            if rt.status_subresource:
                if "status" in existing:
                    result["status"] = copy.deepcopy(existing["status"])
                else:
                    result.pop("status", None)
            try:
                apply_defaults(rt, result, self.allocator)
            except DecodeError as exc:
                raise bad_request(f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {exc}') from None
            if rt.plural == "services":
                allocate_service_fields(result, existing, self.allocator)
            if rt.plural == "jobs" and not (result.get("spec") or {}).get("selector"):
                result["spec"]["selector"] = copy.deepcopy(existing["spec"].get("selector"))
            if rt.plural == "namespaces":
                result["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        meta, old_meta = result["metadata"], existing["metadata"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace",
                    "generation"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("selfLink", None)
        causes = causes + self._validate(rt, result, existing)
        if causes:
            raise invalid_error(rt, name, causes)
        if rt.generation and _spec_part(result) != _spec_part(existing):
            meta["generation"] = int(old_meta.get("generation", 0)) + 1
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if result == existing:
            return self.present(rt, existing, version)  # no-op writes do not bump the resourceVersion
        if opts.dry_run:
            return self.present(rt, result, version)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The update that clears the last finalizer deletes the object: one DELETED event.
            gone = self._remove(rt, result, "Background") or result
            return self.present(rt, gone, version)
        stored = self.store.put(rt.key, result, existing)
        if rt.plural == "customresourcedefinitions" and subresource != "status":
            self._install_crd(stored)
        self._check_owners(rt, stored)
        return self.present(rt, stored, version)

    def patch(self, rt: ResourceType, namespace: str | None, name: str, content_type: str, raw: bytes, version: str,
              opts: RequestOptions, subresource: str | None = None) -> tuple[dict, int]:
        content_type = content_type.split(";")[0].strip().lower()
        accepted = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
        if not rt.custom:
            accepted.insert(2, "application/strategic-merge-patch+json")
        if content_type not in accepted:
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted media types include: "
                           + ", ".join(accepted))
        try:
            if content_type == "application/apply-patch+yaml":
                document = _load_yaml(raw)
            else:
                document = json.loads(raw or b"null")
        except ValueError as exc:
            raise bad_request(f"error decoding patch: {exc}") from None
        with self.store.lock:
            existing = self.store.get(rt.key, namespace or "", name)
            if content_type == "application/apply-patch+yaml":
                if not opts.field_manager:
                    raise bad_request("PATCH requests with apply content type must have a fieldManager")
                if existing is None:
                    if subresource:
                        raise not_found(rt, name)
                    if isinstance(document, dict):
                        document = strip_nulls(document)
                        if not isinstance(document.setdefault("metadata", {}), dict):
                            raise bad_request("metadata must be an object")
                        self._check_identity(rt, document, namespace, name)
                    return self.create(rt, namespace, document, version, opts), 201
            if existing is None:
                raise not_found(rt, name)
            current = self.present(rt, existing, version)
            try:
                if content_type == "application/json-patch+json":
                    patched = patching.apply_json_patch(current, document)
                elif content_type == "application/strategic-merge-patch+json":
                    schema = self.schemas.kind_schema(rt.kind, rt.api_version(version))
                    patched = patching.apply_strategic_merge_patch(current, document, schema, self.schemas.resolve)
                else:
                    if not isinstance(document, dict):
                        raise patching.PatchError(
                            "json: cannot unmarshal array into Go value of type map[string]interface {}", 400)
                    patched = patching.apply_merge_patch(current, document)
            except patching.PatchError as exc:
                if exc.code == 400:
                    raise bad_request(str(exc)) from None
                raise ApiError(422, "Invalid", str(exc), _details(rt, name, kind=rt.kind)) from None
            obj, causes = self._decode(rt, patched, version, opts)
            meta = obj["metadata"]
            if meta.get("name") != name:
                raise invalid_error(rt, name, [invalid("metadata.name", meta.get("name"), "field is immutable")])
            self._check_identity(rt, obj, namespace, name)
            return self._apply_update(rt, existing, obj, causes, version, opts, subresource), 200

    # ------------------------------------------------------------ delete

    def delete(self, rt: ResourceType, namespace: str | None, name: str, version: str, opts: RequestOptions,
               delete_options: dict) -> dict:
        with self.store.lock:
            existing = self.store.get(rt.key, namespace or "", name)
            if existing is None:
                raise not_found(rt, name)
            policy = self._propagation(rt, delete_options, opts)
            pre = delete_options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != existing["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                                                f"object meta: {existing['metadata']['uid']}", _details(rt, name))
            if pre.get("resourceVersion") and pre["resourceVersion"] != existing["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f"Precondition failed: ResourceVersion in precondition: "
                                                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                                f"{existing['metadata']['resourceVersion']}", _details(rt, name))
            if rt.plural == "namespaces" and name in ("default", "kube-system", "kube-public"):
                raise forbidden_error(rt, name, "this namespace may not be deleted")
            if opts.dry_run:
                return self.present(rt, existing, version)
            if existing["metadata"].get("deletionTimestamp"):
                return self.present(rt, existing, version)
            final = self._delete_object(rt, existing, policy)
            still_there = self.store.get(rt.key, namespace or "", name)
            if still_there is not None:
                return self.present(rt, still_there, version)
            if rt.return_deleted_object or rt.plural == "namespaces":
                return self.present(rt, final, version)
            details = _details(rt, name)
            details["uid"] = existing["metadata"]["uid"]
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _propagation(self, rt: ResourceType, options: dict, opts: RequestOptions) -> str:
        policy = options.get("propagationPolicy")
        orphan = options.get("orphanDependents")
        if policy is not None and orphan is not None:
            raise ApiError(422, "Invalid", 'DeleteOptions.meta.k8s.io "" is invalid: [orphanDependents: Invalid '
                           f"value: {str(orphan).lower()}: orphanDependents and deletionPropagation cannot be "
                           "both set]")
        if policy is not None:
            if policy not in ("Orphan", "Background", "Foreground"):
                raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                               f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                               '"Orphan", "nil"')
            return policy
        if orphan is not None:
            return "Orphan" if orphan in (True, "true") else "Background"
        if rt.default_gc_policy == "Orphan" and rt.plural == "jobs":
            opts.warnings.append(_JOB_ORPHAN_WARNING)
        return rt.default_gc_policy

    def _delete_object(self, rt: ResourceType, obj: dict, policy: str) -> dict:
        """Delete honouring finalizers and the propagation policy; returns the object's last state."""
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if rt.plural == "namespaces":
            return self._delete_namespace(rt, obj)
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if not finalizers:
            return self._remove(rt, obj, policy) or obj
        marked = copy.deepcopy(obj)
        marked["metadata"]["deletionTimestamp"] = now_rfc3339()
        marked["metadata"]["deletionGracePeriodSeconds"] = 0
        marked["metadata"]["finalizers"] = finalizers
        current = self.store.put(rt.key, marked, obj)
        # The garbage collector's part of foreground / orphan deletion, done right away.
        if "foregroundDeletion" in finalizers:
            for dep_rt, dependent in self._dependents(meta["uid"]):
                self._release_or_delete(dep_rt, dependent, meta["uid"], "Foreground")
            current = self._drop_finalizer(rt, current, "foregroundDeletion")
        elif "orphan" in finalizers:
            for dep_rt, dependent in self._dependents(meta["uid"]):
                self._drop_owner_ref(dep_rt, dependent, meta["uid"])
            current = self._drop_finalizer(rt, current, "orphan")
        return current

    def _drop_finalizer(self, rt: ResourceType, obj: dict, finalizer: str) -> dict:
        updated = copy.deepcopy(obj)
        updated["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        if not updated["metadata"]["finalizers"]:
            # Removing the last finalizer of an object being deleted is the deletion itself (no MODIFIED).
            updated["metadata"].pop("finalizers")
            return self._remove(rt, updated, "Background") or updated
        return self.store.put(rt.key, updated, obj)

    def _remove(self, rt: ResourceType, obj: dict, policy: str) -> dict | None:
        meta = obj["metadata"]
        gone = self.store.remove(rt.key, meta.get("namespace", ""), meta["name"], final=obj)
        if gone is None:
            return None
        if rt.plural == "pods":
            for key in [k for k in self.store.logs if k[0] == meta["uid"]]:
                del self.store.logs[key]
        if rt.plural == "customresourcedefinitions":
            spec = obj.get("spec") or {}
            key = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            custom = self._types.get(key)
            if custom is not None and custom.custom:
                for item in self.store.items(key):
                    self.store.remove(key, item["metadata"].get("namespace", ""), item["metadata"]["name"])
                del self._types[key]
        if policy != "Orphan":
            for dep_rt, dependent in self._dependents(meta["uid"]):
                self._release_or_delete(dep_rt, dependent, meta["uid"], "Background")
        return gone

    def _delete_namespace(self, rt: ResourceType, ns: dict) -> dict:
        name = ns["metadata"]["name"]
        terminating = copy.deepcopy(ns)
        terminating["metadata"]["deletionTimestamp"] = now_rfc3339()
        terminating["metadata"]["deletionGracePeriodSeconds"] = 0
        terminating["status"] = {"phase": "Terminating"}
        current = self.store.put(rt.key, terminating, ns)
        for key in self.store.resources():
            contained = self._types.get(key)
            if contained is None or not contained.namespaced:
                continue
            for item in self.store.items(key, name):
                if self.store.get(key, name, item["metadata"]["name"]) is not None:
                    self._remove(contained, item, "Background")
        if current["metadata"].get("finalizers"):
            return current
        return self.store.remove(rt.key, "", name) or current

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, dict]]:
        found = []
        for key, obj in self.store.iter_all():
            refs = obj["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in refs) and key in self._types:
                found.append((self._types[key], obj))
        return found

    def _release_or_delete(self, rt: ResourceType, dependent: dict, owner_uid: str, policy: str) -> None:
        current = self.store.get(rt.key, dependent["metadata"].get("namespace", ""), dependent["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != dependent["metadata"]["uid"]:
            return
        others = [ref for ref in current["metadata"].get("ownerReferences") or []
                  if ref.get("uid") != owner_uid and self.store.find_by_uid(ref.get("uid", "")) is not None]
        if others:
            self._drop_owner_ref(rt, current, owner_uid)
        elif not current["metadata"].get("deletionTimestamp"):
            self._delete_object(rt, current, "Background")

    def _drop_owner_ref(self, rt: ResourceType, dependent: dict, owner_uid: str) -> None:
        updated = copy.deepcopy(dependent)
        refs = [r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
        if refs:
            updated["metadata"]["ownerReferences"] = refs
        else:
            updated["metadata"].pop("ownerReferences", None)
        self.store.put(rt.key, updated, dependent)

    def _check_owners(self, rt: ResourceType, obj: dict) -> None:
        """Like the garbage collector: an object whose owners are all absent is deleted shortly after."""
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs or not self.collect_orphans:
            return
        for ref in refs:
            owner_rt = self.lookup_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
            if owner_rt is None:
                return  # an owner of a kind the server does not serve is left alone
            namespace = obj["metadata"].get("namespace", "") if owner_rt.namespaced else ""
            owner = self.store.get(owner_rt.key, namespace, ref.get("name", ""))
            if owner is not None and owner["metadata"]["uid"] == ref.get("uid"):
                return
        meta = obj["metadata"]
        timer = threading.Timer(0.05, self._collect_orphan,
                                args=(rt, meta.get("namespace", ""), meta["name"], meta["uid"]))
        timer.daemon = True
        self._timers = [t for t in self._timers if t.is_alive()] + [timer]
        timer.start()

    def _collect_orphan(self, rt: ResourceType, namespace: str, name: str, uid: str) -> None:
        with self.store.lock:
            if self.store.closed:
                return
            current = self.store.get(rt.key, namespace, name)
            if current is None or current["metadata"]["uid"] != uid:
                return
            for ref in current["metadata"].get("ownerReferences") or []:
                owner_rt = self.lookup_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
                if owner_rt is None:
                    return
                owner = self.store.get(owner_rt.key, namespace if owner_rt.namespaced else "", ref.get("name", ""))
                if owner is not None and owner["metadata"]["uid"] == ref.get("uid"):
                    return
            if not current["metadata"].get("deletionTimestamp"):
                self._delete_object(rt, current, "Background")

    def delete_collection(self, rt: ResourceType, namespace: str | None, version: str, query: dict,
                          opts: RequestOptions, delete_options: dict) -> dict:
        labels, fields = self._selectors(rt, query)
        with self.store.lock:
            policy = self._propagation(rt, delete_options, opts)
            doomed = [o for o in self.store.items(rt.key) if self._matches(rt, o, namespace, labels, fields)]
            removed = []
            for obj in doomed:
                if opts.dry_run:
                    removed.append(obj)
                    continue
                current = self.store.get(rt.key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                if current is None or current["metadata"].get("deletionTimestamp"):
                    continue
                removed.append(self._delete_object(rt, current, policy))
            return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version(version),
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": [self.present(rt, o, version, in_list=True) for o in removed]}

    # ------------------------------------------------------------ internal writes (kubelet / controllers)

    def write_status(self, rt: ResourceType, namespace: str, name: str, status: Any) -> dict:
        with self.store.lock:
            existing = self.store.get(rt.key, namespace, name)
            if existing is None:
                raise KeyError(f'{rt.group_resource} "{name}" not found in namespace "{namespace}"')
            updated = copy.deepcopy(existing)
            updated["status"] = copy.deepcopy(status)
            if updated == existing:
                return copy.deepcopy(existing)
            return copy.deepcopy(self.store.put(rt.key, updated, existing))

    def replace_object(self, rt: ResourceType, existing: dict, updated: dict) -> dict:
        with self.store.lock:
            if updated == existing:
                return copy.deepcopy(existing)
            return copy.deepcopy(self.store.put(rt.key, updated, existing))

    def close(self) -> None:
        self.store.close()
        for timer in self._timers:
            timer.cancel()


def _list_key(obj: dict) -> str:
    """Position of an object in a list, as the storage key a continue token resumes after."""
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}\x00"


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _load_yaml(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        import yaml  # only needed for server-side apply bodies written as YAML

        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ValueError(str(exc)) from None
