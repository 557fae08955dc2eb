"""Turn what a DAG author passes (dict, YAML text, a YAML/JSON file, a whole polyaxonfile) into a ``TrainingSpec``."""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from airflow_distributed.spec import models
from airflow_distributed.spec.checks import check_environment, resolve_framework
from airflow_distributed.spec.errors import SpecValidationError
from airflow_distributed.spec.models import FRAMEWORKS, MAX_REPLICAS_PER_ROLE, Environment, TrainingSpec


def load_spec(framework: str | None = None, environment: Any = None) -> TrainingSpec:
    """Validate a framework and ``environment`` section; raise one ``SpecValidationError`` listing every problem.

    :param framework: ``tensorflow``, ``mxnet``, ``pytorch``, ``horovod``, ``jax``, ``xgboost`` or ``paddle``;
        inferred from the one cluster section when omitted. A polyaxonfile's own ``framework`` is used when this is
        omitted.
    :param environment: a dict, YAML text, a path to a YAML/JSON file, or a whole polyaxonfile (dict or text);
        ``None`` means the master alone.
    """
    source = environment if isinstance(environment, str) and _looks_like_path(environment) else None
    data = _read(environment, source)
    # The environment section has no key of that name, so a mapping holding one is a whole polyaxonfile
    # (version, kind, build, run, logging, hptuning, ... are the polyaxonfile's business, not ours).
    if isinstance(data, Mapping) and "environment" in data:
        if framework is None:
            framework = data.get("framework")
        data = data.get("environment")
    if data is None:
        data = {}
    problems: list[tuple[str, str]] = []
    problems += framework_problems(framework)
    bad_framework = bool(problems)
    if bad_framework:
        framework = None
    if not isinstance(data, Mapping):
        problems.append(("environment", f"must be a mapping of settings, got {type(data).__name__}"))
        raise SpecValidationError(problems, source=source)
    env, structural = _validate_structure(dict(data))
    problems += structural
    resolved, resolve_problems = resolve_framework(framework, env, "environment")
    # A bad framework= is reported once, not again as "missing".
    problems += [p for p in resolve_problems if not (bad_framework and p[0] == "framework")]
    problems += check_environment(env, "environment")
    if problems or resolved is None:
        raise SpecValidationError(_unique(problems), source=source)
    # resolve_framework returns only names of FRAMEWORKS: the Literal holds.
    return TrainingSpec(framework=resolved, environment=env)  # type: ignore[arg-type]


def framework_problems(framework: Any) -> list[tuple[str, str]]:
    """A ``framework`` argument that is not one of the supported names (``None`` is fine: it is inferred)."""
    allowed = ", ".join(FRAMEWORKS)
    if framework is None:
        return []
    if not isinstance(framework, str):
        return [("framework", f"expected a string, got {type(framework).__name__} {framework!r}; allowed: {allowed}")]
    if framework not in FRAMEWORKS:
        return [("framework", f"{framework!r} is not supported; allowed: {allowed}")]
    return []


def _validate_structure(data: dict[str, Any]) -> tuple[Environment, list[tuple[str, str]]]:
    """Validate; on errors, drop the offending keys and try again so later checks still see the rest.

    That way one parse reports a misspelt key *and* an out-of-range index, not one per attempt.
    """
    problems: list[tuple[str, str]] = []
    for _ in range(8):
        try:
            return Environment.model_validate(data), problems
        except ValidationError as err:
            problems += _translate(err, "environment")
            pruned = copy.deepcopy(data)
            for item in err.errors(include_url=False):
                _drop(pruned, _drop_union_branches(item["loc"]))
            if pruned == data:
                break
            data = pruned
    return Environment(), problems


def _drop(data: Any, loc: tuple[Any, ...]) -> None:
    """Remove the value at ``loc`` (or the deepest part of it that exists)."""
    parent, key = None, None
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        if in_dict or (isinstance(node, list) and isinstance(part, int) and part < len(node)):
            parent, key, node = node, part, node[part]
        else:
            break
    if isinstance(parent, dict) and key in ("n_workers", "n_ps"):
        # A bad count is already reported; the maximum keeps it from also failing every override's range check.
        parent[key] = MAX_REPLICAS_PER_ROLE
    elif isinstance(parent, dict):
        parent.pop(key, None)
    elif isinstance(parent, list) and isinstance(key, int):
        parent.pop(key)


def _unique(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and (text.endswith((".yml", ".yaml", ".json")) or os.path.isfile(text))


def _read(environment: Any, source: str | None) -> Any:
    if not isinstance(environment, str):
        return environment
    try:
        if source is not None:
            with open(source, encoding="utf-8") as handle:
                return yaml.safe_load(handle)
        return yaml.safe_load(environment)
    except OSError as err:
        raise SpecValidationError([("environment", f"cannot read {source}: {err.strerror}")]) from None
    except yaml.YAMLError as err:
        raise SpecValidationError([("environment", f"is not valid YAML: {err}")], source=source) from None


def format_path(root: str, loc: tuple[Any, ...]) -> str:
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _translate(err: ValidationError, root: str) -> list[tuple[str, str]]:
    """pydantic's errors as (path, message), without union noise and with suggestions for unknown keys."""
    problems: dict[str, str] = {}
    for item in err.errors(include_url=False):
        loc = _drop_union_branches(item["loc"])
        path = format_path(root, loc)
        if path in problems:
            continue  # one message per place: a union reports each failed branch
        problems[path] = _message(item, loc)
    return list(problems.items())


def _drop_union_branches(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic names the tried branch of a union ("int", "list[tuple[str,str]]", "function-after[...]").
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"int", "float", "str"})))


def _message(item: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    kind, value = item["type"], item.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "missing":
        return "is required"
    if kind in {"int_type", "float_type", "string_type", "dict_type", "list_type", "model_type", "bool_type"}:
        expected = {"int_type": "an integer", "float_type": "a number", "string_type": "a string",
                    "dict_type": "a mapping", "list_type": "a list", "model_type": "a mapping",
                    "bool_type": "true or false"}[kind]
        return f"expected {expected}, got {type(value).__name__} {value!r}"
    if kind == "greater_than_equal":
        return f"{value!r} is out of range (must be >= {item['ctx']['ge']})"
    if kind == "less_than_equal":
        return f"{value!r} is out of range (must be <= {item['ctx']['le']})"
    message = item["msg"].removeprefix("Value error, ")
    return message if kind == "value_error" else f"{message} (got {value!r})"


def _unknown_key(loc: tuple[Any, ...]) -> str:
    key = str(loc[-1])
    allowed = _keys_at(loc[:-1])
    if key in ("n_ps", "default_ps", "ps", "ps_resources", "default_ps_resources") and "n_ps" not in allowed:
        return f"unknown key '{key}': this framework has no parameter servers; allowed: {', '.join(sorted(allowed))}"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f"; allowed: {', '.join(sorted(allowed))}"
    return f"unknown key '{key}'{hint}"


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys valid at a location, found by walking the models along the path."""
    model: type[BaseModel] = Environment
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        nested = _model_in(field.annotation) if field else None
        if nested is None:
            break
        model = nested
    keys = list(model.model_fields)
    if model is models.ResourceAmount:
        keys += ["request", "limit"]
    if issubclass(model, models.WorkerCluster):
        keys += ["worker_resources", "default_worker_resources"]
        if issubclass(model, models.PSCluster):
            keys += ["ps_resources", "default_ps_resources"]
    return keys


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
