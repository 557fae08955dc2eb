"""Structural checks of request bodies against OpenAPI schemas.

Built-in kinds are checked against the strict JSON schemas that ``kubernetes-validate`` ships for one
Kubernetes version; custom resources against the ``openAPIV3Schema`` of their definition. A check
sorts what it finds the way the API server does:

* wrong JSON types: the body cannot be decoded (400 BadRequest for built-in kinds, 422 for custom
  resources, whose decoding is schemaless);
* unknown fields: dropped from the object, reported as warnings or as a 400 when the request asks for
  ``fieldValidation=Strict``;
* everything else (missing required fields, values outside an enum, ...): 422 Invalid causes.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from referencing import Registry, Resource

from .validation import Cause, go_value

_GO_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}


def format_path(parts) -> str:
    """``["spec", "containers", 0, "image"]`` -> ``spec.containers[0].image``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


def strip_nulls(value: Any) -> Any:
    """Drop JSON nulls, which Go decoding turns into absent fields."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value if v is not None]
    return value


@dataclass
class Findings:
    unknown: list[str] = field(default_factory=list)
    type_errors: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)


def _schema_dir_names() -> dict[str, str]:
    import importlib.resources

    root = importlib.resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    found = {}
    for entry in root.iterdir():
        match = re.match(r"^v(\d+)\.(\d+)\.\d+-local-strict$", entry.name)
        if match:
            found[f"{match.group(1)}.{match.group(2)}"] = entry.name
    return found


def available_versions() -> list[str]:
    return sorted(_schema_dir_names(), key=lambda v: tuple(int(x) for x in v.split(".")))


class SchemaSet:
    """The strict schemas of one Kubernetes minor version."""

    def __init__(self, kubernetes_version: str):
        import importlib.resources

        wanted = kubernetes_version.lstrip("v")
        wanted = ".".join(wanted.split(".")[:2])
        dirs = _schema_dir_names()
        if wanted not in dirs:
            raise ValueError(f"kubernetes-validate has no schemas for {kubernetes_version}; "
                             f"available: {', '.join(available_versions())}")
        self.version = wanted
        self._root = importlib.resources.files("kubernetes_validate").joinpath(
            "kubernetes-json-schema", dirs[wanted])
        self._definitions = json.loads(self._root.joinpath("_definitions.json").read_text())
        self._defs = self._definitions["$defs"]
        self._registry = Resource.from_contents(self._definitions) @ Registry()
        self._validators: dict[tuple[str, str], Any] = {}
        self._kind_schemas: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _file_name(kind: str, api_version: str) -> str:
        # Same naming as kubernetes-validate: rbac.authorization.k8s.io/v1 -> rbac-v1
        short = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        return f"{kind.lower()}-{short}.json"

    def kind_schema(self, kind: str, api_version: str) -> dict | None:
        key = (kind, api_version)
        with self._lock:
            if key not in self._kind_schemas:
                path = self._root.joinpath(self._file_name(kind, api_version))
                try:
                    self._kind_schemas[key] = json.loads(path.read_text())
                except FileNotFoundError:
                    self._kind_schemas[key] = None
            return self._kind_schemas[key]

    def resolve(self, node: Any) -> Any:
        """Follow ``$ref`` links into the shared definitions."""
        while isinstance(node, dict) and "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            node = self._defs.get(name)
        return node

    def _validator(self, kind: str, api_version: str):
        key = (kind, api_version)
        with self._lock:
            if key in self._validators:
                return self._validators[key]
        schema = self.kind_schema(kind, api_version)
        validator = None
        if schema is not None:
            registry = Resource.from_contents(schema) @ self._registry
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
        with self._lock:
            self._validators[key] = validator
        return validator

    def check(self, obj: dict, kind: str, api_version: str) -> Findings:
        """Check ``obj`` (already free of nulls); unknown fields are removed from it in place."""
        findings = Findings()
        validator = self._validator(kind, api_version)
        if validator is None:
            return findings
        prune: list[tuple[dict, str]] = []
        for error in validator.iter_errors(obj):
            path = list(error.absolute_path)
            where = format_path(path)
            if error.validator == "additionalProperties" and error.validator_value is False:
                known = set((error.schema.get("properties") or {}).keys())
                for key in error.instance:
                    if key not in known:
                        findings.unknown.append(format_path(path + [key]))
                        prune.append((error.instance, key))
            elif error.validator in ("type", "oneOf", "anyOf"):
                expected = error.validator_value if error.validator == "type" else "int or string"
                if isinstance(expected, list):
                    expected = next((t for t in expected if t != "null"), expected[0])
                got = _GO_JSON_TYPES.get(type(error.instance), "value")
                findings.type_errors.append(
                    f"json: cannot unmarshal {got} into Go struct field {_go_field(path, kind)} of type {expected}")
            elif error.validator == "required":
                for name in error.validator_value:
                    if isinstance(error.instance, dict) and name not in error.instance:
                        findings.causes.append(Cause("FieldValueRequired", "Required value",
                                                     format_path(path + [name])))
            elif error.validator == "enum":
                if path in (["apiVersion"], ["kind"]):
                    continue  # checked against the URL before schema validation
                supported = ", ".join(f'"{v}"' for v in error.validator_value)
                message = f"Unsupported value: {go_value(error.instance)}: supported values: {supported}"
                findings.causes.append(Cause("FieldValueNotSupported", message, where))
            else:
                findings.causes.append(Cause("FieldValueInvalid",
                                             f"Invalid value: {go_value(error.instance)}: {error.message}", where))
        for parent, key in prune:
            parent.pop(key, None)
        return findings


def _go_field(path: list, kind: str) -> str:
    names = [p for p in path if not isinstance(p, int)]
    return ".".join([kind] + names) if names else kind


@functools.cache
def schema_set(kubernetes_version: str) -> SchemaSet:
    return SchemaSet(kubernetes_version)


# ---------------------------------------------------------------- custom resources

_ROOT_FIELDS = {"apiVersion", "kind", "metadata"}


def _prune(value: Any, schema: dict | None, path: list, unknown: list[str], root: bool = False) -> Any:
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        result = {}
        for key, item in value.items():
            if root and key in _ROOT_FIELDS:
                result[key] = item
            elif props is not None and key in props:
                result[key] = _prune(item, props[key], path + [key], unknown)
            elif isinstance(extra, dict):
                result[key] = _prune(item, extra, path + [key], unknown)
            elif extra is True or (props is None and extra is None and not root and schema.get("type") != "object"):
                result[key] = item
            else:
                unknown.append(format_path(path + [key]))
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(item, schema["items"], path + [i], unknown) for i, item in enumerate(value)]
    return value


def check_custom_resource(obj: dict, schema: dict | None) -> tuple[dict, Findings]:
    """Prune unknown fields of a custom resource and validate it against its openAPIV3Schema."""
    findings = Findings()
    if not schema:
        return obj, findings
    obj = _prune(obj, schema, [], findings.unknown, root=True)
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    validator = jsonschema.Draft7Validator(_without_root_meta(schema))
    for error in validator.iter_errors(body):
        path = list(error.absolute_path)
        where = format_path(path)
        if error.validator == "required":
            for name in error.validator_value:
                if isinstance(error.instance, dict) and name not in error.instance:
                    findings.causes.append(Cause("FieldValueRequired", "Required value", format_path(path + [name])))
        elif error.validator == "type":
            findings.causes.append(Cause(
                "FieldValueTypeInvalid",
                f"Invalid value: {go_value(error.instance)}: {where} in body must be of type {error.validator_value}: "
                f"{go_value(error.instance)}", where))
        elif error.validator == "enum":
            supported = ", ".join(f'"{v}"' for v in error.validator_value)
            message = f"Unsupported value: {go_value(error.instance)}: supported values: {supported}"
            findings.causes.append(Cause("FieldValueNotSupported", message, where))
        else:
            message = f"Invalid value: {go_value(error.instance)}: {error.message}"
            findings.causes.append(Cause("FieldValueInvalid", message, where))
    return obj, findings


def _without_root_meta(schema: dict) -> dict:
    # apiVersion/kind/metadata are validated by the server itself, not by the CRD schema.
    schema = dict(schema)
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in _ROOT_FIELDS}
    if isinstance(schema.get("required"), list):
        schema["required"] = [r for r in schema["required"] if r not in _ROOT_FIELDS]
    return schema
