"""Turn what a DAG author passes (dict, YAML text, a YAML/JSON file, a whole polyaxonfile) into a ``TrainingSpec``."""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from airflow_distributed.spec import models
from airflow_distributed.spec.checks import check_environment, resolve_framework
from airflow_distributed.spec.errors import SpecValidationError
from airflow_distributed.spec.limits import name_shown, shape_problems, shown, type_shown, yaml_problems
from airflow_distributed.spec.models import FRAMEWORKS, MAX_REPLICAS_PER_ROLE, Environment, TrainingSpec

#: longest spec text (YAML or JSON, or a file of it) read; real ones are a few kilobytes
MAX_SPEC_CHARS = 1_000_000


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
    too_big = shape_problems(data, "environment")
    if too_big:  # before anything walks it: a bigger spec is a mistake or an attack
        raise SpecValidationError(too_big, source=source)
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
        return [("framework", f"expected a string, got {type_shown(framework)}; allowed: {allowed}")]
    if framework not in FRAMEWORKS:
        return [("framework", f"{name_shown(framework)} is not supported; allowed: {allowed}")]
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
                if item["type"] == "invalid_key":
                    _drop_keys_that_are_not_strings(pruned, _value_loc(item))
                else:
                    _drop(pruned, _value_loc(item))
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


def _drop_keys_that_are_not_strings(data: Any, loc: tuple[Any, ...]) -> None:
    node = data
    for part in loc:
        if not isinstance(node, (dict, list)) or (isinstance(node, list) and not isinstance(part, int)):
            return
        try:
            node = node[part]
        except (KeyError, IndexError):
            return
    if isinstance(node, dict):
        for key in [key for key in node if not isinstance(key, str)]:
            del node[key]


def _unique(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(problems))


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and (text.endswith((".yml", ".yaml", ".json")) or os.path.isfile(text))


def _read(environment: Any, source: str | None) -> Any:
    if not isinstance(environment, str):
        return environment
    text = environment
    try:
        if source is not None:
            with open(source, encoding="utf-8") as handle:
                text = handle.read(MAX_SPEC_CHARS + 1)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path, a file that is not UTF-8
        reason = err.strerror if isinstance(err, OSError) else "not a readable UTF-8 text file"
        raise SpecValidationError([("environment", f"cannot read the spec file: {reason}")], source=source) from None
    if len(text) > MAX_SPEC_CHARS:
        raise SpecValidationError([("environment", f"is too large: a spec is at most {MAX_SPEC_CHARS:,} characters")],
                                  source=source)
    try:
        # Sized on the YAML events first: aliases expand only once the objects are built.
        problems = yaml_problems(text, "environment")
        data = None if problems else yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        reason = _yaml_reason(err.problem or err.context or "")
        raise SpecValidationError([("environment", f"is not valid YAML: {reason}{where}")], source=source) from None
    except yaml.YAMLError:
        raise SpecValidationError([("environment", "is not valid YAML")], source=source) from None
    except (ValueError, OverflowError):  # a scalar Python cannot hold as its YAML type (a 5000-digit int, 2020-13-45)
        raise SpecValidationError([("environment", "is not valid YAML: a value cannot be read as its YAML type "
                                    "(an integer of more than 4300 digits, an impossible date)")],
                                  source=source) from None
    if problems:
        raise SpecValidationError(problems, source=source)
    return data


def _yaml_reason(problem: str) -> str:
    """The parser's words without what it quotes of the document (an alias, a tag, a character may be a value)."""
    return re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", problem)[:120]


def format_path(root: str, loc: tuple[Any, ...]) -> str:
    path = root
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            path += f"[{shown(part)}]"
        else:
            path += "." + (part if isinstance(part, str) and part.isprintable() else f"<{name_shown(part)}>")
    return path


def _translate(err: ValidationError, root: str) -> list[tuple[str, str]]:
    """pydantic's errors as (path, message), one per place, with suggestions for unknown keys."""
    problems: dict[str, str] = {}
    for item in err.errors(include_url=False):
        loc = _value_loc(item)
        path = format_path(root, loc)
        if path not in problems:  # one message per place
            problems[path] = _message(item, loc)
    return list(problems.items())


def _value_loc(item: Mapping[str, Any]) -> tuple[Any, ...]:
    """Where the problem is; a key that is not a string is reported at its mapping."""
    loc = tuple(item["loc"])
    return loc[:-1] if item["type"] == "invalid_key" else loc


_EXPECTED = {"int_type": "an integer", "float_type": "a number", "string_type": "a string", "dict_type": "a mapping",
             "list_type": "a list", "model_type": "a mapping", "bool_type": "true or false",
             "tuple_type": "a list"}


def _message(item: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    """pydantic's error in the project's words; of the value only its type (and a short number) is shown."""
    kind, value = item["type"], item.get("input")
    if kind == "extra_forbidden" and loc:
        return _unknown_key(loc)
    if kind == "missing":
        return "is required"
    if kind == "invalid_key":
        return f"keys must be strings, got {type_shown(value)}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {type_shown(value)}"
    if kind == "greater_than_equal":
        return f"{shown(value)} is out of range (must be >= {item['ctx']['ge']})"
    if kind == "less_than_equal":
        return f"{shown(value)} is out of range (must be <= {item['ctx']['le']})"
    if kind == "value_error":
        return str(item["msg"]).removeprefix("Value error, ")
    return f"is not valid ({kind}, got {type_shown(value)})"


def _unknown_key(loc: tuple[Any, ...]) -> str:
    key = loc[-1]
    allowed = _keys_at(loc[:-1])
    if key in ("n_ps", "default_ps", "ps", "ps_resources", "default_ps_resources") and "n_ps" not in allowed:
        return (f"unknown key {name_shown(key)}: this framework has no parameter servers; allowed: "
                f"{', '.join(sorted(allowed))}")
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6) if _short_name(key) else []
    hint = f"; did you mean '{close[0]}'?" if close else f"; allowed: {', '.join(sorted(allowed))}"
    return f"unknown key {name_shown(key)}{hint}"


def _short_name(key: Any) -> bool:
    return isinstance(key, str) and len(key) <= 64


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
