"""Label and field selectors as the Kubernetes API server parses and applies them.

Label selectors support equality (``a=b``, ``a==b``, ``a!=b``), set-based (``a in (x,y)``,
``a notin (x)``), existence (``a``, ``!a``) and numeric (``a>1``, ``a<3``) requirements joined
by commas. Field selectors support ``=``, ``==`` and ``!=`` on the fields each resource exposes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# A label value (and the name part of a key): up to 63 characters, alphanumeric at both ends.
_NAME_PART = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SelectorError(ValueError):
    """A selector string the API server would reject with 400 BadRequest."""


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid qualified label/annotation key, or None when it is."""
    if not key:
        return "name part must be non-empty"
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "prefix part must be non-empty"
    if "/" in prefix:
        return ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional "
                "DNS subdomain prefix and '/'")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character")
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_PART.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None when it is."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _NAME_PART.match(value):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return None


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            # Like the API server: objects without the label match a negative requirement.
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("gt", "lt"):
            if not present:
                return False
            try:
                number = int(value)  # type: ignore[arg-type]
            except ValueError:
                return False
            bound = int(self.values[0])
            return number > bound if self.op == "gt" else number < bound
        raise AssertionError(self.op)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unable to parse requirement: unexpected ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unable to parse requirement: unbalanced parentheses in {text!r}")
    parts.append("".join(current))
    return parts


_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\((.*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*([^\s]*)\s*$")
_NUM_RE = re.compile(rf"^\s*({_KEY})\s*([<>])\s*([^\s]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _check_key(key: str) -> None:
    problem = label_key_problem(key)
    if problem:
        raise SelectorError(f'unable to parse requirement: key: Invalid value: "{key}": {problem}')


def _check_value(key: str, value: str) -> None:
    problem = label_value_problem(value)
    if problem:
        raise SelectorError(f'unable to parse requirement: values[0][{key}]: Invalid value: "{value}": {problem}')


def parse_label_selector(selector: str | None) -> list[Requirement]:
    """Parse a label selector string; an empty or missing selector selects everything."""
    if selector is None or not selector.strip():
        return []
    requirements = []
    for part in _split_top_level(selector):
        if not part.strip():
            raise SelectorError(f"found '', expected: identifier in selector {selector!r}")
        match = _SET_RE.match(part)
        if match:
            key, op, raw = match.groups()
            _check_key(key)
            values = tuple(v.strip() for v in raw.split(",")) if raw.strip() else ()
            if not values:
                raise SelectorError("unable to parse requirement: for 'in', 'notin' operators, "
                                    "values set can't be empty")
            for value in values:
                _check_value(key, value)
            requirements.append(Requirement(key, op, values))
            continue
        match = _EQ_RE.match(part)
        if match:
            key, op, value = match.groups()
            _check_key(key)
            _check_value(key, value)
            requirements.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
            continue
        match = _NUM_RE.match(part)
        if match:
            key, op, value = match.groups()
            _check_key(key)
            try:
                int(value)
            except ValueError:
                raise SelectorError(
                    f'unable to parse requirement: values[0][{key}]: Invalid value: "{value}": '
                    "for 'Gt', 'Lt' operators, the value must be an integer") from None
            requirements.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
            continue
        match = _EXISTS_RE.match(part)
        if match:
            negated, key = match.groups()
            _check_key(key)
            requirements.append(Requirement(key, "!" if negated else "exists"))
            continue
        raise SelectorError(f"unable to parse requirement: couldn't parse the selector string {selector!r}")
    return requirements


def labels_match(requirements: Iterable[Requirement], labels: Mapping[str, str] | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


def requirements_from_label_selector(selector: Mapping[str, Any] | None) -> list[Requirement]:
    """Requirements of a ``LabelSelector`` object (``matchLabels`` / ``matchExpressions``)."""
    if not selector:
        return []
    requirements = [Requirement(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    op_names = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        requirements.append(Requirement(expr["key"], op_names[expr["operator"]], tuple(expr.get("values") or ())))
    return requirements


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        actual = fields.get(self.field, "")
        return actual == self.value if self.op == "=" else actual != self.value


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_field_selector(selector: str | None, supported: Iterable[str]) -> list[FieldRequirement]:
    """Parse a field selector, rejecting fields the resource does not index (400 like the API server)."""
    if selector is None or not selector.strip():
        return []
    supported = set(supported)
    requirements = []
    for term in _split_unescaped(selector, ","):
        for op_text, op in (("!=", "!="), ("==", "="), ("=", "=")):  # noqa: B007 - op is read after the break
            if op_text in term:
                field, value = term.split(op_text, 1)
                break
        else:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
        field = field.strip()
        if field not in supported:
            raise SelectorError(f'field label not supported: {field}')
        requirements.append(FieldRequirement(field, op, value.strip()))
    return requirements


def fields_match(requirements: Iterable[FieldRequirement], fields: Mapping[str, str]) -> bool:
    return all(r.matches(fields) for r in requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field of ``obj`` as field selectors compare it ("" when absent)."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)
