"""Bounds on a spec and on what an error message shows of it.

A spec is refused before it is validated when it is bigger or deeper than any real one, YAML aliases counted as
often as they are used (a few hundred bytes of aliases otherwise expand into gigabytes), or when it refers to
itself. Messages name the field and the problem; of a value they show only a short number, a short name (a key, a
choice) or its type and length, never a string a user wrote as a value (it may be a password).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

Problem = tuple[str, str]

#: mappings, lists and scalars of a spec, each alias counted as the nodes it stands for; a 2000-replica spec with
#: an override per replica has about 20,000
MAX_NODES = 100_000
#: nesting of mappings and lists; the deepest Kubernetes setting a spec holds (pod affinity) is about 15 below
#: ``environment``
MAX_DEPTH = 50
#: longest name (a key, a choice) a message quotes; longer ones are given by their length
MAX_SHOWN_NAME = 63

TOO_LARGE = f"is too large: a spec holds at most {MAX_NODES:,} values, each YAML alias counted as what it stands for"
TOO_DEEP = f"is nested too deeply: a spec has at most {MAX_DEPTH} levels of mappings and lists"


def yaml_problems(text: str, path: str) -> list[Problem]:
    """Walk the YAML events of ``text`` (no objects built) and refuse what is too big once aliases are expanded.

    :raises yaml.YAMLError: ``text`` is not valid YAML
    """
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, height) of the node it names
    frames: list[list[Any]] = [[0, 0, None]]  # per open collection: nodes, height, anchor
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            frames.append([1, 0, event.anchor])
            nodes, height = 1, 0
        elif isinstance(event, yaml.CollectionEndEvent):
            nodes, height, anchor = frames.pop()
            if anchor is not None:
                anchors[anchor] = (nodes, height)
            frames[-1][0] += nodes
            frames[-1][1] = max(frames[-1][1], height + 1)
            continue  # counted in total as its parts arrived
        elif isinstance(event, yaml.ScalarEvent):
            nodes, height = 1, 0
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
            frames[-1][0] += 1
        elif isinstance(event, yaml.AliasEvent):
            nodes, height = anchors.get(event.anchor or "", (1, 0))  # an unknown alias fails when loaded
            frames[-1][0] += nodes
            frames[-1][1] = max(frames[-1][1], height)
        else:
            continue
        total += nodes
        if total > MAX_NODES:
            return [(path, TOO_LARGE)]
        if len(frames) - 1 + height > MAX_DEPTH:
            return [(path, TOO_DEEP)]
    return []


def shape_problems(value: Any, path: str) -> list[Problem]:
    """The same bounds on Python objects (dicts, lists), and no object inside itself; iterative, so any depth is
    measured without a ``RecursionError``."""
    heights: dict[int, tuple[int, int]] = {}  # id -> (nodes, height) of a finished container
    open_ids: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while stack:
        node, depth, finished = stack.pop()
        children = _children(node)
        if children is None or (not finished and id(node) in heights):
            continue
        if finished:
            open_ids.discard(id(node))
            nodes, height = 1, 0
            for child in children:
                child_nodes, child_height = heights.get(id(child), (1, -1)) if _children(child) is not None \
                    else (1, -1)
                nodes = min(nodes + child_nodes, MAX_NODES + 1)
                height = max(height, child_height + 1)
            if nodes > MAX_NODES or depth + height > MAX_DEPTH:
                return [(path, TOO_LARGE if nodes > MAX_NODES else TOO_DEEP)]
            heights[id(node)] = (nodes, height)
            continue
        if id(node) in open_ids:
            return [(path, "holds itself (a mapping or list inside itself): a spec must be a tree of values")]
        if depth > MAX_DEPTH:
            return [(path, TOO_DEEP)]
        open_ids.add(id(node))
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in children)
    return []


def _children(node: Any) -> list[Any] | None:
    if isinstance(node, Mapping):
        return [*node.keys(), *node.values()]
    if isinstance(node, (list, tuple)):
        return list(node)
    return None


def shown(value: Any) -> str:
    """A value as a message may show it: a short number as itself, anything else as its type (a string: and its
    length)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 64 else f"an integer of about {int(value.bit_length() * 0.30103)} " \
                                                             "digits"
    if isinstance(value, float):
        text = repr(value)
        return text if len(text) <= 24 else "a float"
    return type_shown(value)


def type_shown(value: Any) -> str:
    """Only the type of a value (a string: and its length), for messages about what a value should have been."""
    if isinstance(value, str):
        return f"a string of {len(value)} character{'s' if len(value) != 1 else ''}"
    if value is None:
        return "null"
    return type(value).__name__


def name_shown(name: Any) -> str:
    """A key or a choice, quoted when it is a short printable string; else its type and length."""
    if isinstance(name, str) and len(name) <= MAX_SHOWN_NAME and name.isprintable():
        return repr(name)
    if isinstance(name, str):
        return f"a name of {len(name)} characters" if name.isprintable() else "a name with unprintable characters"
    return shown(name)
