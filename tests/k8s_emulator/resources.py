"""The resource types the emulator serves and what the API server does to each on create and update.

A ``ResourceType`` carries what routing and discovery need (group, version, plural, kind, scope,
subresources) and the per-type behaviour that is table-driven: the name rule, the field selectors it
indexes, whether ``metadata.generation`` is tracked, the default garbage-collection policy. Defaulting
(what the API server fills in on decode) lives here too.
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from .validation import canonicalize_resources

COMMON_FIELDS = ("metadata.name", "metadata.namespace")
POD_FIELDS = COMMON_FIELDS + (
    "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork",
    "status.phase", "status.podIP", "status.nominatedNodeName",
)
EVENT_FIELDS = COMMON_FIELDS + (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
)


@dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    custom: bool = False
    # Other served versions of a custom resource; objects are converted by rewriting apiVersion.
    versions: tuple[str, ...] = ()
    # openAPIV3Schema of a custom resource per served version (None: keep every field).
    version_schemas: dict = field(default_factory=dict)
    generation: bool = False
    name_rule: str = "subdomain"
    field_selectors: tuple[str, ...] = COMMON_FIELDS
    default_gc_policy: str = "Background"
    return_deleted_object: bool = False
    categories: tuple[str, ...] = ()
    extra_subresources: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.versions:
            self.versions = (self.version,)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def api_version(self, version: str | None = None) -> str:
        version = version or self.version
        return f"{self.group}/{version}" if self.group else version

    @property
    def group_resource(self) -> str:
        """``pods`` or ``jobs.batch``, as in NotFound/AlreadyExists messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def field_values(self, obj: dict) -> dict[str, str]:
        from .selectors import field_value

        values = {}
        for name in self.field_selectors:
            path = "source.component" if (self.plural == "events" and name == "source") else name
            values[name] = field_value(obj, path)
        if self.plural == "events" and not values.get("source"):
            values["source"] = field_value(obj, "reportingComponent")
        return values

    @property
    def subresources(self) -> tuple[str, ...]:
        return (("status",) if self.status_subresource else ()) + self.extra_subresources


def builtin_types() -> list[ResourceType]:
    return [
        ResourceType("", "v1", "pods", "Pod", short_names=("po",), status_subresource=True, field_selectors=POD_FIELDS,
                     return_deleted_object=True, categories=("all",),
                     extra_subresources=("log", "exec", "attach", "portforward", "binding", "eviction")),
        ResourceType("", "v1", "services", "Service", short_names=("svc",), status_subresource=True,
                     name_rule="label1035", categories=("all",)),
        ResourceType("", "v1", "secrets", "Secret", field_selectors=COMMON_FIELDS + ("type",)),
        ResourceType("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
        ResourceType("", "v1", "events", "Event", short_names=("ev",), field_selectors=EVENT_FIELDS),
        ResourceType("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",)),
        ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short_names=("pvc",),
                     status_subresource=True),
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",),
                     status_subresource=True, name_rule="label",
                     field_selectors=COMMON_FIELDS + ("status.phase",), extra_subresources=("finalize",)),
        ResourceType("", "v1", "nodes", "Node", namespaced=False, short_names=("no",), status_subresource=True,
                     field_selectors=COMMON_FIELDS + ("spec.unschedulable",)),
        ResourceType("batch", "v1", "jobs", "Job", status_subresource=True, generation=True,
                     field_selectors=COMMON_FIELDS + ("status.successful",), categories=("all",),
                     # batch/v1 keeps the pods of a deleted Job unless the request says otherwise.
                     default_gc_policy="Orphan"),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
        ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", name_rule="path"),
        ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", name_rule="path"),
        ResourceType("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                     namespaced=False, short_names=("crd", "crds"), status_subresource=True, generation=True),
    ]


# ---------------------------------------------------------------- defaulting

class Allocator:
    """Hands out cluster IPs, pod IPs and node ports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._service_ips = (ipaddress.IPv4Address("10.96.0.0") + i for i in itertools.count(10))
        self._pod_ips = (ipaddress.IPv4Address("10.244.0.0") + i for i in itertools.count(2))
        self._node_ports = itertools.count(30000)

    def service_ip(self) -> str:
        with self._lock:
            return str(next(self._service_ips))

    def pod_ip(self) -> str:
        with self._lock:
            return str(next(self._pod_ips))

    def node_port(self) -> int:
        with self._lock:
            return next(self._node_ports)


def default_pod_spec(spec: dict, where: str) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"]
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            image = container.get("image", "")
            tag = image.rsplit("/", 1)[-1]
            if "imagePullPolicy" not in container and image:
                latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
                container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
            container.setdefault("resources", {})
            # Requests default to limits when only limits are given.
            limits = container["resources"].get("limits")
            if limits:
                requests = container["resources"].setdefault("requests", {})
                for key, value in limits.items():
                    requests.setdefault(key, value)
            canonicalize_resources(container["resources"], f"{where}.{group}[{i}].resources")
            for port in container.get("ports") or []:
                port.setdefault("protocol", "TCP")
            for env in container.get("env") or []:
                field_ref = (env.get("valueFrom") or {}).get("fieldRef")
                if field_ref is not None:
                    field_ref.setdefault("apiVersion", "v1")


def pod_qos_class(spec: dict) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def apply_defaults(rt: ResourceType, obj: dict, allocator: Allocator) -> None:
    """Fill in what the API server defaults on decode (subset)."""
    if rt.custom:
        return
    spec = obj.get("spec")
    if rt.plural == "pods":
        obj.setdefault("spec", {})
        default_pod_spec(obj["spec"], "spec")
        obj["spec"].setdefault("serviceAccountName", "default")
        obj["spec"].setdefault("serviceAccount", obj["spec"]["serviceAccountName"])
    elif rt.plural == "jobs":
        obj.setdefault("spec", {})
        spec = obj["spec"]
        template = spec.setdefault("template", {})
        default_pod_spec(template.setdefault("spec", {}), "spec.template.spec")
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        if spec.get("backoffLimitPerIndex") is None:
            spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec.setdefault("manualSelector", None)
        if spec.get("manualSelector") is None:
            spec.pop("manualSelector", None)
    elif rt.plural == "services":
        obj.setdefault("spec", {})
        spec = obj["spec"]
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName":
            spec.setdefault("internalTrafficPolicy", "Cluster")
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif rt.plural == "secrets":
        obj.setdefault("type", "Opaque")
    elif rt.plural == "persistentvolumeclaims":
        obj.setdefault("spec", {})
        obj["spec"].setdefault("volumeMode", "Filesystem")
        canonicalize_resources(obj["spec"].get("resources"), "spec.resources")
    elif rt.plural == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif rt.plural == "rolebindings":
        for subject in obj.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject.setdefault("apiGroup", "")
            else:
                subject.setdefault("apiGroup", "rbac.authorization.k8s.io")


def allocate_service_fields(obj: dict, old: dict | None, allocator: Allocator) -> None:
    """Cluster IPs and node ports are allocated once and kept on update."""
    spec = obj.setdefault("spec", {})
    old_spec = (old or {}).get("spec") or {}
    if spec.get("type") == "ExternalName":
        return
    if not spec.get("clusterIP"):
        spec["clusterIP"] = old_spec.get("clusterIP") or allocator.service_ip()
    spec.setdefault("clusterIPs", old_spec.get("clusterIPs") or [spec["clusterIP"]])
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        old_ports = {p.get("port"): p.get("nodePort") for p in old_spec.get("ports") or []}
        for port in spec.get("ports") or []:
            port.setdefault("nodePort", old_ports.get(port.get("port")) or allocator.node_port())
        spec.setdefault("externalTrafficPolicy", "Cluster")


def job_selector_labels(obj: dict) -> None:
    """What the Job API adds on create: the controller-uid selector and labels on the pod template."""
    spec = obj["spec"]
    if spec.get("manualSelector"):
        return
    uid = obj["metadata"]["uid"]
    name = obj["metadata"]["name"]
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update({
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    })
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def initial_status(rt: ResourceType, obj: dict) -> Any:
    """Status an object starts with; clients cannot set status on create."""
    if rt.plural == "pods":
        return {"phase": "Pending", "qosClass": pod_qos_class(obj.get("spec") or {})}
    if rt.plural == "namespaces":
        return {"phase": "Active"}
    if rt.plural == "services":
        return {"loadBalancer": {}}
    if rt.plural == "persistentvolumeclaims":
        return {"phase": "Pending"}
    if rt.plural == "customresourcedefinitions":
        return None  # filled when the definition is registered
    if rt.plural == "nodes":
        return obj.get("status")
    if rt.custom:
        return None
    return {}
