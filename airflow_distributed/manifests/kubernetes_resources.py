"""A replica's ``PodSettings`` as Kubernetes client models: resources, affinity, tolerations, security context.

Pure. Dict-valued settings are written with Kubernetes' JSON field names (``nodeAffinity``), as in a pod
manifest; the client's Python names (``node_affinity``) are accepted too. An unknown field is an error that
names it, where the client's own deserialiser would drop it without a word.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client import Configuration

from airflow_distributed.spec.kubernetes_rules import DEVICE_KINDS
from airflow_distributed.spec.models import Resources
from airflow_distributed.spec.quantities import amount_in_base_units, to_kubernetes_quantity

_REQUIRED = re.compile(r"`(\w+)`, must not be `None`")
_PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


class ManifestError(ValueError):
    """A setting that cannot become a valid Kubernetes object; the message names the replica and the field."""


@functools.cache
def client_configuration() -> Configuration:
    """One ``Configuration`` shared by every model built here.

    A model built without one deep-copies the process-wide default (about 0.1 ms each), which adds up to
    seconds for a job of a thousand replicas; it is only read for ``client_side_validation``.
    """
    return Configuration()


def model(cls: type, **fields: Any) -> Any:
    """``cls(**fields)``, a client model that shares ``client_configuration()``."""
    return cls(local_vars_configuration=client_configuration(), **fields)


def copy_model(obj: Any) -> Any:
    """A deep copy of a model built here; the shared Configuration stays shared (copying it is most of the work)."""
    return copy.deepcopy(obj, {id(client_configuration()): client_configuration()})


def model_from_dict(data: Any, type_name: str, where: str) -> Any:
    """``data`` (Kubernetes JSON) as the client type ``type_name``, e.g. ``"V1Affinity"``, ``"list[V1Toleration]"``.

    :param where: the setting's path, used in error messages.
    :raises ManifestError: unknown field, wrong type or a required field missing.
    """
    if type_name.startswith("list["):
        if not isinstance(data, (list, tuple)):
            raise ManifestError(f"{where}: expected a list, got {type(data).__name__}")
        return [model_from_dict(item, type_name[5:-1], f"{where}[{i}]") for i, item in enumerate(data)]
    if type_name.startswith("dict("):
        if not isinstance(data, Mapping):
            raise ManifestError(f"{where}: expected a mapping, got {type(data).__name__}")
        value_type = type_name[5:-1].split(", ", 1)[1]
        return {str(key): model_from_dict(value, value_type, f"{where}.{key}") for key, value in data.items()}
    if type_name in _PRIMITIVES:
        expected = _PRIMITIVES[type_name]
        # bool is an int in Python but not in Kubernetes JSON.
        if not isinstance(data, expected) or (isinstance(data, bool) and bool not in expected):
            raise ManifestError(f"{where}: expected {type_name}, got {data!r}")
        return data
    cls = getattr(client, type_name, None)
    if cls is None:  # "object" (int-or-string, free-form) and dates: kept as written
        return copy.deepcopy(data)
    return _model_from_mapping(data, cls, where)


def _model_from_mapping(data: Any, cls: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ManifestError(f"{where}: expected a mapping of {cls.__name__[2:]} fields, got {type(data).__name__}")
    attribute_of = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    attribute_of.update({attr: attr for attr in cls.attribute_map})
    fields: dict[str, Any] = {}
    for key, value in data.items():
        attr = attribute_of.get(key)
        if attr is None:
            allowed = ", ".join(sorted(cls.attribute_map.values()))
            raise ManifestError(f"{where}: unknown field {key!r}; allowed: {allowed}")
        if attr in fields:
            raise ManifestError(f"{where}: {key!r} is given twice (as {cls.attribute_map[attr]!r} and {attr!r})")
        if value is not None:
            fields[attr] = model_from_dict(value, cls.openapi_types[attr], f"{where}.{key}")
    try:
        return model(cls, **fields)
    except ValueError as err:  # the client's own checks, e.g. "Invalid value for `name`, must not be `None`"
        missing = _REQUIRED.search(str(err))
        if missing and missing.group(1) in cls.attribute_map:
            raise ManifestError(f"{where}: {cls.attribute_map[missing.group(1)]!r} is required") from err
        raise ManifestError(f"{where}: {err}") from err


def resource_requirements(resources: Resources | None, keys: Mapping[str, str]) -> client.V1ResourceRequirements | None:
    """Polyaxon amounts as Kubernetes quantities.

    :param keys: resource name of a kind that is not its own name, e.g. ``{"gpu": "nvidia.com/gpu"}``.
    """
    if resources is None:
        return None
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for kind, amount in resources.amounts().items():
        key = keys.get(kind, kind)
        if kind in DEVICE_KINDS:
            # The device count is the limit, else the request, as Resources.device_count decides.
            value = amount.limits if amount.limits is not None else amount.requests
            if value is not None and amount_in_base_units(kind, value) > 0:
                requests[key] = limits[key] = to_kubernetes_quantity(kind, value)
            continue
        if amount.requests is not None:
            requests[key] = to_kubernetes_quantity(kind, amount.requests)
        if amount.limits is not None:
            limits[key] = to_kubernetes_quantity(kind, amount.limits)
    if not requests and not limits:
        return None
    return model(client.V1ResourceRequirements, requests=requests or None, limits=limits or None)


def affinity(value: Mapping[str, Any] | None, where: str) -> client.V1Affinity | None:
    return None if value is None else model_from_dict(value, "V1Affinity", where)


def tolerations(value: Sequence[Mapping[str, Any]] | None, where: str) -> list[client.V1Toleration] | None:
    return None if value is None else model_from_dict(value, "list[V1Toleration]", where)


def split_security_context(
    value: Mapping[str, Any] | None, where: str
) -> tuple[client.V1PodSecurityContext | None, client.V1SecurityContext | None]:
    """One ``security_context`` setting -> (pod part, container part).

    Fields both levels know (``runAsUser``, ``seccompProfile``, ...) go to the pod, so that they cover every
    container of it (readiness step, XCom sidecar) too; container-only fields (``capabilities``,
    ``allowPrivilegeEscalation``, ...) go to the containers.
    """
    if not value:
        return None, None
    pod_fields = _field_names(client.V1PodSecurityContext)
    container_fields = _field_names(client.V1SecurityContext)
    pod_part, container_part = {}, {}
    for key, item in value.items():
        if key in pod_fields:
            pod_part[key] = item
        elif key in container_fields:
            container_part[key] = item
        else:
            allowed = ", ".join(sorted(set(client.V1PodSecurityContext.attribute_map.values())
                                       | set(client.V1SecurityContext.attribute_map.values())))
            raise ManifestError(f"{where}: unknown field {key!r}; allowed: {allowed}")
    pod = model_from_dict(pod_part, "V1PodSecurityContext", where) if pod_part else None
    container = model_from_dict(container_part, "V1SecurityContext", where) if container_part else None
    return pod, container


def _field_names(cls: Any) -> set[str]:
    return set(cls.attribute_map) | set(cls.attribute_map.values())


def env_from(config_map_refs: Sequence[str] | None, secret_refs: Sequence[str] | None) -> list[client.V1EnvFromSource]:
    """``envFrom`` of the refs; Secrets come last so that their keys win over a ConfigMap's of the same name."""
    sources = [
        model(client.V1EnvFromSource, config_map_ref=model(client.V1ConfigMapEnvSource, name=name))
        for name in config_map_refs or ()
    ]
    sources += [
        model(client.V1EnvFromSource, secret_ref=model(client.V1SecretEnvSource, name=name))
        for name in secret_refs or ()
    ]
    return sources


def image_pull_secrets(names: Sequence[str] | None) -> list[client.V1LocalObjectReference] | None:
    return [model(client.V1LocalObjectReference, name=name) for name in names] if names else None


def env_vars(
    env: Mapping[str, str], from_config_map: Mapping[str, tuple[str, str]] | None = None
) -> list[client.V1EnvVar]:
    """Sorted by name, so the same plan always gives the same manifest.

    :param from_config_map: variables whose value the kubelet reads from a ConfigMap, as name -> (map, key).
    """
    refs = from_config_map or {}
    variables = []
    for name in sorted(env):
        if name in refs:
            map_name, key = refs[name]
            selector = model(client.V1ConfigMapKeySelector, name=map_name, key=key)
            source = model(client.V1EnvVarSource, config_map_key_ref=selector)
            variables.append(model(client.V1EnvVar, name=name, value_from=source))
        else:
            variables.append(model(client.V1EnvVar, name=name, value=str(env[name])))
    return variables
