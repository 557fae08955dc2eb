"""What the Kubernetes API server refuses in a pod's settings, checked when the DAG is parsed.

Pure and free of the Kubernetes client (a DAG parse must not import it). Each check returns ``(path, message)``
problems naming the field and what is allowed; the rules follow the API server's own validation
(``k8s.io/apimachinery/pkg/util/validation`` and ``pkg/apis/core/validation``), so a spec that passes here is not
refused with a 422 after some of the job's pods already exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_distributed.spec.limits import name_shown, type_shown
from airflow_distributed.spec.quantities import QuantityError, amount_in_base_units

Problem = tuple[str, str]

# A label value, and the name part of a qualified key: at most 63 characters, alphanumeric at both ends.
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Kubernetes 1.34 made any printable ASCII but '=' a valid variable name (RelaxedEnvironmentVariableValidation);
# earlier API servers, still common on managed clusters, refuse anything outside this rule. The stricter rule
# is the one that works on every cluster the project targets.
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

# Extended resources: whole numbers only, never overcommitted (requests == limits).
DEVICE_KINDS = ("gpu", "tpu")
MAX_ANNOTATIONS_BYTES = 256 * 1024
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_NAME_PART_RULE = ("alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character, "
                   "at most 63 characters")
QUALIFIED_NAME_RULE = (f"a qualified name: an optional DNS subdomain prefix and '/', then {_NAME_PART_RULE} "
                       "(e.g. 'team', 'example.com/team')")
LABEL_VALUE_RULE = f"empty, or {_NAME_PART_RULE} (e.g. 'v1', 'my_value')"
SUBDOMAIN_RULE = ("a DNS-1123 subdomain: lower-case alphanumeric characters, '-' or '.', starting and ending with an "
                  "alphanumeric character, at most 253 characters (e.g. 'my-secret')")
ENV_NAME_RULE = "letters, digits, '-', '_' or '.', not starting with a digit (e.g. 'MY_VAR')"


def is_qualified_name(key: str) -> bool:
    """A label or annotation key: ``[prefix/]name``, the prefix a DNS subdomain."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(_NAME_PART.match(name))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_NAME_PART.match(value)))


def is_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def is_env_name(name: Any) -> bool:
    return isinstance(name, str) and bool(_ENV_NAME.match(name))


def label_problems(labels: Mapping[str, str] | None, path: str) -> list[Problem]:
    """Labels and node selectors: qualified-name keys, label values."""
    problems: list[Problem] = []
    for key, value in (labels or {}).items():
        if not is_qualified_name(key):
            problems.append((path, f"key {name_shown(key)} is not valid: a key must be {QUALIFIED_NAME_RULE}"))
        if not is_label_value(value):
            problems.append((f"{path}.{key}", f"the value ({type_shown(value)}) is not valid: a value must be "
                             f"{LABEL_VALUE_RULE}"))
    return problems


def annotation_problems(annotations: Mapping[str, str] | None, path: str) -> list[Problem]:
    """Annotation keys follow the label-key rule (the API server checks them lower-cased); values are free text."""
    annotations = annotations or {}
    problems: list[Problem] = [
        (path, f"key {name_shown(key)} is not valid: a key must be {QUALIFIED_NAME_RULE}")
        for key in annotations if not is_qualified_name(key.lower())
    ]
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        problems.append((path, f"{size} bytes of keys and values; Kubernetes allows at most {MAX_ANNOTATIONS_BYTES}"))
    return problems


def name_problems(names: str | Sequence[str] | None, path: str, what: str) -> list[Problem]:
    """Object names (Secrets, ConfigMaps, service accounts): DNS-1123 subdomains.

    The API server stores any ``imagePullSecrets`` name, but no Secret can carry an invalid one: every pull would
    fail after the pods exist, so those names are held to the same rule.
    """
    if names is None:
        return []
    if isinstance(names, str):
        return [] if is_subdomain(names) else [(path, f"{name_shown(names)} is not a valid {what} name: it must "
                                                      f"be {SUBDOMAIN_RULE}")]
    return [problem for i, name in enumerate(names) for problem in name_problems(name, f"{path}[{i}]", what)]


def env_name_problems(env: Iterable[Any] | None, path: str) -> list[Problem]:
    """Variable names (never their values, which may be secrets)."""
    return [(path, f"{name_shown(name)} is not a valid variable name: use {ENV_NAME_RULE}" if isinstance(name, str)
             else f"variable names must be strings, got {type_shown(name)}")
            for name in env or {} if not is_env_name(name)]


def device_count_problems(kind: str, amount: Any, path: str) -> list[Problem]:
    """GPUs and TPUs are extended resources: whole numbers only."""
    try:
        value = amount_in_base_units(kind, amount)
    except QuantityError:
        return []  # reported by the model
    if value != value.to_integral_value():
        return [(path, f"{name_shown(amount)} is not a whole number: {kind} is counted in whole devices "
                       "(Kubernetes extended resources cannot be fractional)")]
    return []


def toleration_problems(tolerations: Sequence[Mapping[str, Any]] | None, path: str) -> list[Problem]:
    problems: list[Problem] = []
    for i, toleration in enumerate(tolerations or ()):
        where = f"{path}[{i}]"
        unknown = _unknown_fields(toleration, _TOLERATION, where)
        problems += unknown
        if unknown:
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        value = toleration.get("value") or ""
        effect = toleration.get("effect") or ""
        seconds = toleration.get("tolerationSeconds", toleration.get("toleration_seconds"))
        if key and not is_qualified_name(key):
            problems.append((f"{where}.key", f"{name_shown(key)} is not valid: a key must be {QUALIFIED_NAME_RULE}"))
        if operator not in TOLERATION_OPERATORS:
            problems.append((f"{where}.operator", f"{name_shown(operator)} is not supported; allowed: "
                             f"{', '.join(TOLERATION_OPERATORS)}"))
        elif operator == "Exists" and value:
            problems.append((f"{where}.value", f"must be empty when operator is 'Exists' (got {type_shown(value)})"))
        elif operator == "Equal" and not key:
            problems.append((f"{where}.operator", "must be 'Exists' when key is empty (which matches every taint)"))
        elif operator == "Equal" and not is_label_value(value):
            problems.append((f"{where}.value", f"is not valid ({type_shown(value)}): a value must be "
                             f"{LABEL_VALUE_RULE}"))
        if effect and effect not in TAINT_EFFECTS:
            problems.append((f"{where}.effect", f"{name_shown(effect)} is not supported; allowed: "
                             f"{', '.join(TAINT_EFFECTS)} or empty (every effect)"))
        if seconds is not None and effect != "NoExecute":
            problems.append((f"{where}.tolerationSeconds", "only allowed with effect 'NoExecute'"))
    return problems


def affinity_problems(affinity: Mapping[str, Any] | None, path: str) -> list[Problem]:
    return [] if affinity is None else _unknown_fields(affinity, _AFFINITY, path)


def security_context_problems(context: Mapping[str, Any] | None, path: str) -> list[Problem]:
    """Field names of the pod and container security contexts (the manifests split one setting into both)."""
    return [] if context is None else _unknown_fields(context, _SECURITY_CONTEXT, path)


# ---------------------------------------------------------------- field tables
#
# A table maps each JSON field name to the check of its value: another table (a nested object), ``[table]`` (a
# list of such objects), or a type; the fields under ``REQUIRED`` must be there. Unknown fields are errors: the
# API server drops them with a warning only, so a misspelt ``nodeAfinity`` would otherwise schedule the pods
# anywhere without a word.

_Table = Mapping[str, Any]
REQUIRED = "__required__"
STR, INT, BOOL = str, int, bool
_STRINGS = (STR,)


def _requirement(operators: tuple[str, ...]) -> _Table:
    return {"key": STR, "operator": operators, "values": _STRINGS, REQUIRED: ("key", "operator")}


_NODE_SELECTOR_TERM = {"matchExpressions": [_requirement(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))],
                       "matchFields": [_requirement(("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))]}
_LABEL_SELECTOR = {"matchLabels": dict, "matchExpressions": [_requirement(("In", "NotIn", "Exists", "DoesNotExist"))]}
_POD_AFFINITY_TERM = {"labelSelector": _LABEL_SELECTOR, "namespaceSelector": _LABEL_SELECTOR, "namespaces": _STRINGS,
                      "topologyKey": STR, "matchLabelKeys": _STRINGS, "mismatchLabelKeys": _STRINGS,
                      REQUIRED: ("topologyKey",)}
_POD_AFFINITY = {"requiredDuringSchedulingIgnoredDuringExecution": [_POD_AFFINITY_TERM],
                 "preferredDuringSchedulingIgnoredDuringExecution": [{
                     "weight": INT, "podAffinityTerm": _POD_AFFINITY_TERM, REQUIRED: ("weight", "podAffinityTerm")}]}
_AFFINITY: _Table = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_NODE_SELECTOR_TERM],
                                                           REQUIRED: ("nodeSelectorTerms",)},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": INT, "preference": _NODE_SELECTOR_TERM,
                                                             REQUIRED: ("weight", "preference")}],
    },
    "podAffinity": _POD_AFFINITY,
    "podAntiAffinity": _POD_AFFINITY,
}
_TOLERATION: _Table = {"key": STR, "operator": STR, "value": STR, "effect": STR, "tolerationSeconds": INT}
_SE_LINUX = {"level": STR, "role": STR, "type": STR, "user": STR}
_PROFILE = {"type": STR, "localhostProfile": STR, REQUIRED: ("type",)}
_WINDOWS = {"gmsaCredentialSpec": STR, "gmsaCredentialSpecName": STR, "hostProcess": BOOL, "runAsUserName": STR}
# The union of PodSecurityContext and SecurityContext (v1).
_SECURITY_CONTEXT: _Table = {
    "allowPrivilegeEscalation": BOOL, "appArmorProfile": _PROFILE, "capabilities": {"add": _STRINGS,
                                                                                    "drop": _STRINGS},
    "fsGroup": INT, "fsGroupChangePolicy": STR, "privileged": BOOL, "procMount": STR, "readOnlyRootFilesystem": BOOL,
    "runAsGroup": INT, "runAsNonRoot": BOOL, "runAsUser": INT, "seLinuxChangePolicy": STR, "seLinuxOptions": _SE_LINUX,
    "seccompProfile": _PROFILE, "supplementalGroups": (INT,), "supplementalGroupsPolicy": STR,
    "sysctls": [{"name": STR, "value": STR, REQUIRED: ("name", "value")}], "windowsOptions": _WINDOWS,
}


def snake_case(name: str) -> str:
    """``nodeAffinity`` -> ``node_affinity``: the Kubernetes Python client's spelling, accepted too."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _unknown_fields(value: Any, table: _Table, path: str) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [(path, f"expected a mapping, got {type_shown(value)}")]
    names = [name for name in table if name != REQUIRED]
    fields = {**{snake_case(name): name for name in names}, **{name: name for name in names}}
    problems: list[Problem] = []
    given = set()
    for key, item in value.items():
        name = fields.get(key)
        if name is None:
            problems.append((path, f"unknown field {name_shown(key)}; allowed: {', '.join(sorted(names))}"))
        elif item is not None:
            given.add(name)
            problems += _value_problems(item, table[name], f"{path}.{key}")
    problems += [(f"{path}.{name}", "is required") for name in table.get(REQUIRED, ()) if name not in given]
    return problems


_TYPE_NAMES: dict[type, str] = {str: "a string", int: "an integer", bool: "true or false", dict: "a mapping"}


def _value_problems(value: Any, rule: Any, path: str) -> list[Problem]:
    checks: dict[type, Callable[[], list[Problem]]] = {
        dict: lambda: _unknown_fields(value, rule, path),
        list: lambda: _list_problems(value, rule[0], path),
        tuple: lambda: _tuple_rule(value, rule, path),
    }
    if type(rule) in checks:
        return checks[type(rule)]()
    # bool is an int in Python, not in Kubernetes JSON.
    if not isinstance(value, rule) or (rule is int and isinstance(value, bool)):
        return [(path, f"expected {_TYPE_NAMES[rule]}, got {type_shown(value)}")]
    if rule is int and not -(2**63) <= value < 2**63:
        return [(path, "is out of range: Kubernetes integers are 64-bit (-2^63 to 2^63-1)")]
    return []


def _list_problems(value: Any, item_rule: Any, path: str) -> list[Problem]:
    if not isinstance(value, list):
        return [(path, f"expected a list, got {type_shown(value)}")]
    return [problem for i, item in enumerate(value) for problem in _value_problems(item, item_rule, f"{path}[{i}]")]


def _tuple_rule(value: Any, rule: tuple[Any, ...], path: str) -> list[Problem]:
    """``(type,)``: a list of that type; a tuple of strings: one of those values."""
    if len(rule) == 1 and isinstance(rule[0], type):
        return _list_problems(value, rule[0], path)
    if value not in rule:
        return [(path, f"{name_shown(value)} is not supported; allowed: {', '.join(rule)}")]
    return []
