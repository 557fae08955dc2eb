"""The three PATCH formats the API server accepts for JSON bodies.

* ``application/json-patch+json``: RFC 6902 operations.
* ``application/merge-patch+json``: RFC 7386 merge patch.
* ``application/strategic-merge-patch+json``: merge patch in which lists are merged by the key the
  OpenAPI schema names (``x-kubernetes-patch-merge-key`` / ``x-kubernetes-patch-strategy``), with the
  ``$patch``, ``$retainKeys``, ``$deleteFromPrimitiveList/`` and ``$setElementOrder/`` directives.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

Resolver = Callable[[Any], Any]


class PatchError(Exception):
    """A patch that cannot be applied; ``code`` is the HTTP status the API server answers with."""

    def __init__(self, message: str, code: int = 422):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- JSON patch (RFC 6902)

def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'invalid JSON pointer "{path}"', 400)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts:
        if isinstance(node, dict):
            if part not in node:
                raise PatchError(f'doc is missing path: "{path}": missing value')
            node = node[part]
        elif isinstance(node, list):
            index = _index(part, len(node), path, allow_end=False)
            node = node[index]
        else:
            raise PatchError(f'doc is missing path: "{path}": missing value')
    return node


def _index(part: str, length: int, path: str, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return length
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")):
        raise PatchError(f'invalid array index "{part}" in "{path}"')
    index = int(part)
    if index > length or (index == length and not allow_end):
        raise PatchError(f'index out of range: "{path}"')
    return index


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), path, allow_end=True), value)
    else:
        raise PatchError(f'doc is missing path: "{path}": missing value')
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f'unable to remove nonexistent key: {last}: missing value')
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(last, len(parent), path, allow_end=False))
    raise PatchError(f'doc is missing path: "{path}": missing value')


def apply_json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation: {op!r}", 400)
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f'missing value for "{kind}" operation', 400)
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _walk(doc, _pointer(path), path)  # must exist
            doc, _ = _remove(doc, path) if _pointer(path) else (doc, None)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise PatchError(f'missing from for "{kind}" operation', 400)
            if kind == "move":
                doc, value = _remove(doc, op["from"])
            else:
                value = copy.deepcopy(_walk(doc, _pointer(op["from"]), op["from"]))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _walk(doc, _pointer(path), path) != op["value"]:
                raise PatchError(f'testing value {path} failed: test failed')
        else:
            raise PatchError(f'Unexpected kind: {kind}', 400)
    return doc


# ---------------------------------------------------------------- merge patch (RFC 7386)

def apply_merge_patch(doc: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- strategic merge patch

_DELETE = object()


def _schema_child(schema: Any, key: str, resolve: Resolver) -> Any:
    node = resolve(schema) if schema is not None else None
    if not isinstance(node, dict):
        return None
    props = node.get("properties") or {}
    if key in props:
        return resolve(props[key])
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return resolve(extra)
    return None


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items()
                if not (k == "$patch" or k == "$retainKeys" or k.startswith("$setElementOrder/")
                        or k.startswith("$deleteFromPrimitiveList/"))}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value
                if not (isinstance(v, dict) and v.get("$patch") == "replace" and len(v) == 1)]
    return value


def _merge_map(original: Any, patch: dict, schema: Any, resolve: Resolver) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive == "delete":
        return _DELETE
    if directive is not None:
        raise PatchError(f"Unknown patch type: {directive} in map", 400)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    deferred_deletions = []
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deferred_deletions.append((key.split("/", 1)[1], value))
            continue
        if value is None:
            result.pop(key, None)
            continue
        child = _schema_child(schema, key, resolve)
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current, value, child, resolve)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(current, value, child, resolve)
        else:
            result[key] = value
    for field, values in deferred_deletions:
        if isinstance(result.get(field), list):
            result[field] = [v for v in result[field] if v not in (values or [])]
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: Any, patch: list, schema: Any, resolve: Resolver) -> list:
    node = resolve(schema) if schema is not None else None
    strategy = (node or {}).get("x-kubernetes-patch-strategy", "") if isinstance(node, dict) else ""
    merge_key = (node or {}).get("x-kubernetes-patch-merge-key") if isinstance(node, dict) else None
    if "merge" not in strategy.split(","):
        return _strip_directives(patch)
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(item) for item in patch
                if not (isinstance(item, dict) and item.get("$patch") == "replace")]
    current = copy.deepcopy(original) if isinstance(original, list) else []
    if not merge_key:
        # A list of scalars with the merge strategy (e.g. finalizers) is a set union.
        return current + [item for item in patch if item not in current]
    item_schema = resolve(node.get("items")) if node.get("items") is not None else None
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"cannot merge a non-object list item on key {merge_key}", 400)
        if merge_key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}", 400)
        position = next((i for i, existing in enumerate(current)
                         if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            current = [e for e in current if not (isinstance(e, dict) and e.get(merge_key) == item[merge_key])]
            continue
        if position is None:
            current.append(_strip_directives(item))
        else:
            merged = _merge_map(current[position], item, item_schema, resolve)
            if merged is _DELETE:
                current.pop(position)
            else:
                current[position] = merged
    return current


def apply_strategic_merge_patch(doc: Any, patch: Any, schema: Any, resolve: Resolver) -> Any:
    if not isinstance(patch, dict):
        raise PatchError("json: cannot unmarshal array into Go value of type map[string]interface {}", 400)
    merged = _merge_map(doc, patch, schema, resolve)
    return {} if merged is _DELETE else merged
