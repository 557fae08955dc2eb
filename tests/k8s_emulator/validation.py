"""Semantic validation the API server does beyond the OpenAPI schema.

Each check returns ``Cause`` entries shaped like ``Status.details.causes`` of a 422 Invalid answer
(``reason`` such as ``FieldValueRequired``, ``message``, ``field``). Only the rules most likely to catch
a wrong manifest are implemented: object names, labels and annotations, owner references, the pod spec
(containers, images, ports, volumes, restart policy, resource quantities), services, jobs, secrets and
config maps, and the fields that cannot change on update.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Any, NamedTuple

from .selectors import label_key_problem, label_value_problem


class Cause(NamedTuple):
    reason: str
    message: str
    field: str

    def as_dict(self) -> dict:
        return {"reason": self.reason, "message": self.message, "field": self.field}


class DecodeError(ValueError):
    """A body the API server cannot decode (400 BadRequest), e.g. a malformed quantity."""


def go_value(value: Any) -> str:
    """Render a value the way Go's ``%#v`` does in validation messages."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, sort_keys=True)


def required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", "Required value" + (f": {detail}" if detail else ""), field)


def invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {go_value(value)}: {detail}", field)


def not_supported(field: str, value: Any, supported: Iterable[str]) -> Cause:
    listed = ", ".join(f'"{s}"' for s in supported)
    return Cause("FieldValueNotSupported", f"Unsupported value: {go_value(value)}: supported values: {listed}", field)


def duplicate(field: str, value: Any) -> Cause:
    return Cause("FieldValueDuplicate", f"Duplicate value: {go_value(value)}", field)


def not_found(field: str, value: Any) -> Cause:
    return Cause("FieldValueNotFound", f"Not found: {go_value(value)}", field)


def forbidden(field: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", f"Forbidden: {detail}", field)


# ---------------------------------------------------------------- names

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_IANA_SVC = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# Environment variable names before Kubernetes 1.34 (the emulator's default version is older); 1.34 accepts any
# printable ASCII but '='.
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_ENV_NAME_MSG = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', "
                 "and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex "
                 "used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')")

_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_1123_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                   "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                   "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_LABEL_1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                   "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                   "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def name_problems(name: str, rule: str) -> list[str]:
    """Problems of an object name under one of the API server's name rules."""
    if rule == "subdomain":
        problems = [] if len(name) <= 253 else ["must be no more than 253 characters"]
        return problems + ([] if _SUBDOMAIN.match(name) else [_SUBDOMAIN_MSG])
    if rule == "label":
        problems = [] if len(name) <= 63 else ["must be no more than 63 characters"]
        return problems + ([] if _LABEL_1123.match(name) else [_LABEL_1123_MSG])
    if rule == "label1035":
        problems = [] if len(name) <= 63 else ["must be no more than 63 characters"]
        return problems + ([] if _LABEL_1035.match(name) else [_LABEL_1035_MSG])
    if rule == "path":
        if name in (".", ".."):
            return [f"may not be '{name}'"]
        return [f"may not contain '{c}'" for c in "/%" if c in name]
    raise AssertionError(rule)


def dns_label_causes(field: str, value: str) -> list[Cause]:
    return [invalid(field, value, p) for p in name_problems(value, "label")]


def validate_object_meta(meta: dict, name_rule: str, namespaced: bool) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name")
    if not name:
        if not meta.get("generateName"):
            causes.append(required("metadata.name", "name or generateName is required"))
    else:
        causes += [invalid("metadata.name", name, p) for p in name_problems(name, name_rule)]
    for key, value in (meta.get("labels") or {}).items():
        problem = label_key_problem(key)
        if problem:
            causes.append(invalid("metadata.labels", key, problem))
        if not isinstance(value, str):
            continue
        problem = label_value_problem(value)
        if problem:
            causes.append(invalid("metadata.labels", value, problem))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        problem = label_key_problem(key.lower())
        if problem:
            causes.append(invalid("metadata.annotations", key, problem))
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
        causes.append(Cause("FieldValueTooLong", "Too long: must have at most 262144 bytes", "metadata.annotations"))
    controllers = 0
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        where = f"metadata.ownerReferences[{i}]"
        for key in ("apiVersion", "kind", "name"):
            if not ref.get(key):
                causes.append(invalid(f"{where}.{key}", ref.get(key, ""), f"{key} must not be empty"))
        if not ref.get("uid"):
            causes.append(invalid(f"{where}.uid", ref.get("uid", ""), "uid must not be empty"))
        controllers += 1 if ref.get("controller") else 0
    if controllers > 1:
        causes.append(invalid("metadata.ownerReferences", meta.get("ownerReferences"),
                              "Only one reference can have Controller set to true"))
    for i, finalizer in enumerate(meta.get("finalizers") or []):
        if "/" not in finalizer and finalizer not in ("kubernetes", "orphan", "foregroundDeletion"):
            causes.append(invalid(f"metadata.finalizers[{i}]", finalizer,
                                  "name is neither a standard finalizer name nor is it fully qualified"))
    return causes


# ---------------------------------------------------------------- quantities

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_QUANTITY_MSG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def parse_quantity(value: Any) -> tuple[Fraction, str]:
    """Value and format ("DecimalSI", "BinarySI", "DecimalExponent") of a resource quantity."""
    if isinstance(value, bool):
        raise DecodeError(_QUANTITY_MSG)
    if isinstance(value, (int, float)):
        return Fraction(str(value)), "DecimalSI"
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise DecodeError(_QUANTITY_MSG)
    number, suffix = match.groups()
    try:
        mantissa = Fraction(number)
    except ValueError:
        raise DecodeError(_QUANTITY_MSG) from None
    if suffix in _BINARY_SUFFIXES:
        return mantissa * (1024 ** _BINARY_SUFFIXES[suffix]), "BinarySI"
    if suffix in _DECIMAL_SUFFIXES:
        return mantissa * Fraction(10) ** _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    exp_match = re.match(r"^[eE]([-+]?[0-9]+)$", suffix)
    if exp_match:
        return mantissa * Fraction(10) ** int(exp_match.group(1)), "DecimalExponent"
    raise DecodeError(_QUANTITY_MSG)


def canonical_quantity(value: Any) -> str:
    """The canonical string the API server stores for a quantity (e.g. ``0.5`` -> ``500m``, ``1024Mi`` -> ``1Gi``)."""
    amount, fmt = parse_quantity(value)
    negative = amount < 0
    amount = abs(amount)
    if fmt == "BinarySI" and amount.denominator == 1 and amount >= 1024:
        whole = amount.numerator
        power = 0
        while power < 6 and whole % 1024 == 0:
            whole //= 1024
            power += 1
        suffix = {v: k for k, v in _BINARY_SUFFIXES.items()}.get(power, "")
        return ("-" if negative else "") + f"{whole}{suffix}"
    if fmt == "BinarySI" and amount.denominator == 1:
        return ("-" if negative else "") + str(amount.numerator)
    # Decimal forms: smallest unit is 1n, amounts are rounded up to it.
    nanos = -((-amount * 10 ** 9) // 1)
    exponent = -9
    while exponent < 18 and nanos % 1000 == 0 and nanos != 0:
        nanos //= 1000
        exponent += 3
    if nanos == 0:
        exponent = 0
    if fmt == "DecimalExponent":
        suffix = "" if exponent == 0 else f"e{exponent}"
    else:
        suffix = {v: k for k, v in _DECIMAL_SUFFIXES.items()}[exponent]
    return ("-" if negative else "") + f"{nanos}{suffix}"


def canonicalize_resources(resources: dict | None, field: str) -> None:
    """Canonicalize ``requests``/``limits`` in place; malformed quantities raise DecodeError."""
    if not isinstance(resources, dict):
        return
    for section in ("requests", "limits"):
        values = resources.get(section)
        if isinstance(values, dict):
            for key, value in list(values.items()):
                try:
                    values[key] = canonical_quantity(value)
                except DecodeError as exc:
                    raise DecodeError(f"{field}.{section}[{key}]: {exc}") from None


# ---------------------------------------------------------------- pod spec

RESTART_POLICIES = ("Always", "OnFailure", "Never")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
PROTOCOLS = ("SCTP", "TCP", "UDP")


def _port_name_problems(name: str) -> list[str]:
    problems = []
    if len(name) > 15:
        problems.append("must be no more than 15 characters")
    if not _IANA_SVC.match(name):
        problems.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in name:
        problems.append("must not contain consecutive hyphens")
    if not re.search(r"[a-z]", name):
        problems.append("must contain at least one letter (a-z)")
    return problems


def validate_pod_spec(spec: dict, where: str, *, is_pod: bool) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required(f"{where}.containers"))
    volumes = {}
    for i, volume in enumerate(spec.get("volumes") or []):
        vname = volume.get("name", "")
        vfield = f"{where}.volumes[{i}].name"
        if not vname:
            causes.append(required(vfield))
        else:
            causes += dns_label_causes(vfield, vname)
            if vname in volumes:
                causes.append(duplicate(vfield, vname))
            volumes[vname] = volume
    seen_names: set[str] = set()
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            cfield = f"{where}.{group}[{i}]"
            cname = container.get("name", "")
            if not cname:
                causes.append(required(f"{cfield}.name"))
            else:
                causes += dns_label_causes(f"{cfield}.name", cname)
                if cname in seen_names:
                    causes.append(duplicate(f"{cfield}.name", cname))
                seen_names.add(cname)
            # Only a pod needs an image; workload templates may leave it for a controller to fill.
            if is_pod and not container.get("image", "").strip():
                causes.append(required(f"{cfield}.image"))
            policy = container.get("imagePullPolicy")
            if policy is not None and policy not in PULL_POLICIES:
                causes.append(not_supported(f"{cfield}.imagePullPolicy", policy, PULL_POLICIES))
            port_names: set[str] = set()
            for j, port in enumerate(container.get("ports") or []):
                pfield = f"{cfield}.ports[{j}]"
                number = port.get("containerPort")
                if not isinstance(number, int) or not 1 <= number <= 65535:
                    causes.append(invalid(f"{pfield}.containerPort", number, "must be between 1 and 65535, inclusive"))
                if "name" in port:
                    causes += [invalid(f"{pfield}.name", port["name"], p) for p in _port_name_problems(port["name"])]
                    if port["name"] in port_names:
                        causes.append(duplicate(f"{pfield}.name", port["name"]))
                    port_names.add(port["name"])
                if port.get("protocol", "TCP") not in PROTOCOLS:
                    causes.append(not_supported(f"{pfield}.protocol", port.get("protocol"), PROTOCOLS))
            for j, env in enumerate(container.get("env") or []):
                if not env.get("name"):
                    causes.append(required(f"{cfield}.env[{j}].name"))
                elif not _ENV_NAME.match(env["name"]):
                    causes.append(invalid(f"{cfield}.env[{j}].name", env["name"], _ENV_NAME_MSG))
            for j, source in enumerate(container.get("envFrom") or []):
                for ref in ("configMapRef", "secretRef"):
                    ref_name = (source.get(ref) or {}).get("name")
                    if ref_name is not None:
                        causes += [invalid(f"{cfield}.envFrom[{j}].{ref}.name", ref_name, p)
                                   for p in name_problems(ref_name, "subdomain")]
            for j, mount in enumerate(container.get("volumeMounts") or []):
                mfield = f"{cfield}.volumeMounts[{j}]"
                if not mount.get("name"):
                    causes.append(required(f"{mfield}.name"))
                elif mount["name"] not in volumes:
                    causes.append(not_found(f"{mfield}.name", mount["name"]))
                if not mount.get("mountPath"):
                    causes.append(required(f"{mfield}.mountPath"))
            causes += _resource_causes(container.get("resources"), f"{cfield}.resources")
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        causes.append(not_supported(f"{where}.restartPolicy", policy, RESTART_POLICIES))
    for key in ("hostname", "subdomain"):
        if spec.get(key):
            causes += dns_label_causes(f"{where}.{key}", spec[key])
    if spec.get("serviceAccountName"):
        causes += [invalid(f"{where}.serviceAccountName", spec["serviceAccountName"], p)
                   for p in name_problems(spec["serviceAccountName"], "subdomain")]
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline < 1:
        causes.append(invalid(f"{where}.activeDeadlineSeconds", deadline,
                              "must be between 1 and 2147483647, inclusive"))
    for i, toleration in enumerate(spec.get("tolerations") or []):
        causes += _toleration_causes(toleration, f"{where}.tolerations[{i}]")
    for key, value in (spec.get("nodeSelector") or {}).items():
        problem = label_key_problem(key)
        if problem:
            causes.append(invalid(f"{where}.nodeSelector", key, problem))
        problem = label_value_problem(str(value))
        if problem:
            causes.append(invalid(f"{where}.nodeSelector", value, problem))
    return causes


TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "PreferNoSchedule")


def _toleration_causes(toleration: dict, field: str) -> list[Cause]:
    """The API server's toleration rules (``validateTolerations``)."""
    causes: list[Cause] = []
    key, value = toleration.get("key", ""), toleration.get("value", "")
    operator, effect = toleration.get("operator", ""), toleration.get("effect", "")
    if key:
        problem = label_key_problem(key)
        if problem:
            causes.append(invalid(f"{field}.key", key, problem))
    if not key and operator != "Exists":
        causes.append(invalid(f"{field}.operator", operator,
                              "operator must be Exists when `key` is empty, which means \"match all values and all "
                              "keys\""))
    if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
        causes.append(invalid(f"{field}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    if operator in ("Equal", ""):
        problem = label_value_problem(value)
        if problem:
            causes.append(invalid(f"{field}.value", value, problem))
    elif operator == "Exists":
        if value:
            causes.append(invalid(f"{field}.operator", toleration, "value must be empty when `operator` is 'Exists'"))
    else:
        causes.append(not_supported(f"{field}.operator", operator, TOLERATION_OPERATORS))
    if effect and effect not in TAINT_EFFECTS:
        causes.append(not_supported(f"{field}.effect", effect, TAINT_EFFECTS))
    return causes


def _resource_causes(resources: dict | None, field: str) -> list[Cause]:
    if not isinstance(resources, dict):
        return []
    causes = []
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for section, values in (("requests", requests), ("limits", limits)):
        for name, amount in values.items():
            # Extended resources (a domain-prefixed name outside kubernetes.io, e.g. nvidia.com/gpu) are counted.
            extended = "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")
            try:
                whole = parse_quantity(amount)[0].denominator == 1
            except DecodeError:
                continue
            if extended and not whole:
                causes.append(invalid(f"{field}.{section}[{name}]", amount, "must be an integer"))
    for name, request in requests.items():
        if name in limits:
            try:
                if parse_quantity(request)[0] > parse_quantity(limits[name])[0]:
                    causes.append(invalid(f"{field}.requests", request,
                                          f"must be less than or equal to {name} limit of {limits[name]}"))
            except DecodeError:
                pass
    return causes


def validate_job_spec(spec: dict) -> list[Cause]:
    causes: list[Cause] = []
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    policy = pod_spec.get("restartPolicy")
    if policy not in ("OnFailure", "Never"):
        causes.append(not_supported("spec.template.spec.restartPolicy", policy or "", ("OnFailure", "Never")))
    causes += validate_pod_spec(pod_spec, "spec.template.spec", is_pod=False)
    for key in ("parallelism", "completions", "backoffLimit"):
        if spec.get(key) is not None and spec[key] < 0:
            causes.append(invalid(f"spec.{key}", spec[key], "must be greater than or equal to 0"))
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        causes.append(not_supported("spec.completionMode", mode, ("NonIndexed", "Indexed")))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(required("spec.completions", "when completion mode is Indexed"))
    return causes


SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")


def validate_service_spec(spec: dict) -> list[Cause]:
    causes: list[Cause] = []
    svc_type = spec.get("type", "ClusterIP")
    if svc_type not in SERVICE_TYPES:
        causes.append(not_supported("spec.type", svc_type, SERVICE_TYPES))
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    if not ports and not headless and svc_type != "ExternalName":
        causes.append(required("spec.ports"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        pfield = f"spec.ports[{i}]"
        if len(ports) > 1 and not port.get("name"):
            causes.append(required(f"{pfield}.name"))
        if port.get("name"):
            causes += dns_label_causes(f"{pfield}.name", port["name"])
            if port["name"] in names:
                causes.append(duplicate(f"{pfield}.name", port["name"]))
            names.add(port["name"])
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.append(invalid(f"{pfield}.port", number, "must be between 1 and 65535, inclusive"))
        if port.get("protocol", "TCP") not in PROTOCOLS:
            causes.append(not_supported(f"{pfield}.protocol", port.get("protocol"), PROTOCOLS))
    for value in (spec.get("selector") or {}).values():
        problem = label_value_problem(str(value))
        if problem:
            causes.append(invalid("spec.selector", value, problem))
    return causes


def validate_config_keys(obj: dict, sections: Iterable[str]) -> list[Cause]:
    causes = []
    for section in sections:
        for key in obj.get(section) or {}:
            if not _CONFIG_KEY.match(key) or len(key) > 253:
                causes.append(invalid(f"{section}[{key}]", key,
                                      "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
                                      "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation "
                                      "is '[-._a-zA-Z0-9]+')"))
    return causes


def check_base64_values(data: dict | None, kind: str) -> None:
    """Secret ``data`` values are base64 on the wire; bad encoding fails decoding (400)."""
    for value in (data or {}).values():
        if not isinstance(value, str):
            continue
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise DecodeError(f"{kind} in version \"v1\" cannot be handled as a {kind}: illegal base64 data "
                              f"at input byte {_first_bad_byte(value)}") from None


def _first_bad_byte(value: str) -> int:
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    for i, char in enumerate(value):
        if char not in alphabet:
            return i
    return len(value)


# ---------------------------------------------------------------- updates

_POD_MUTABLE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,"
                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                    "(allow it to be set to 1 if it was previously negative)")


def _pod_spec_fixed_part(spec: dict) -> dict:
    fixed = json.loads(json.dumps(spec))
    for group in ("containers", "initContainers"):
        for container in fixed.get(group) or []:
            container.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        fixed.pop(key, None)
    return fixed


def validate_pod_update(old: dict, new: dict) -> list[Cause]:
    if _pod_spec_fixed_part(old.get("spec") or {}) != _pod_spec_fixed_part(new.get("spec") or {}):
        return [forbidden("spec", _POD_MUTABLE_MSG)]
    return []


def validate_job_update(old: dict, new: dict) -> list[Cause]:
    causes = []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if old_spec.get("selector") != new_spec.get("selector"):
        causes.append(invalid("spec.selector", new_spec.get("selector"), "field is immutable"))
    if old_spec.get("completionMode") != new_spec.get("completionMode"):
        causes.append(invalid("spec.completionMode", new_spec.get("completionMode"), "field is immutable"))
    if not old_spec.get("suspend") and old_spec.get("template") != new_spec.get("template"):
        causes.append(invalid("spec.template", new_spec.get("template"), "field is immutable"))
    return causes


def validate_immutable_data(old: dict, new: dict, sections: Iterable[str]) -> list[Cause]:
    if not old.get("immutable"):
        return []
    causes = []
    for section in sections:
        if old.get(section) != new.get(section):
            causes.append(forbidden(section, "field is immutable when `immutable` is set"))
    if not new.get("immutable"):
        causes.append(forbidden("immutable", "field is immutable when `immutable` is set"))
    return causes
