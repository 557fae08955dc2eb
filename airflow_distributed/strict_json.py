"""Values a job reported, made strict JSON and bounded (pure, standard library only).

What a master reports (its output document, hand-written or not) goes into XComs, asset events, OpenLineage facets,
the task log and the job view. Airflow stores XComs as strict JSON and the view renders them, so a NaN loss, an
``Infinity``, a number of a thousand digits or a string with a NUL must not get there as they are, and a hostile or
buggy master must not make any of them huge. :class:`StrictJson` is the one place such values are cleaned:

- a non-finite float (NaN, ``Infinity``, ``1e999``) becomes ``null``;
- an integer beyond 64 bits becomes a float, or ``null`` beyond the float range;
- a string keeps at most :data:`MAX_STRING` characters; NUL and unpaired surrogates become U+FFFD;
- a list or object deeper than :data:`MAX_DEPTH` levels (the document itself is the first) becomes ``null``;
- what is not a JSON value (a set, bytes, an object of a library) becomes ``null``;
- every value takes its size (as ``json.dumps`` writes it) from one budget: once that is spent, what comes after is
  dropped.

It also stands alone in training images (``tracking`` uses :func:`strict_number`), so it imports nothing of
Airflow.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: Containers (lists, objects) deeper than this, the document itself being the first, become ``null``.
MAX_DEPTH = 10
#: Strings (keys too) are cut to this many characters.
MAX_STRING = 4096
#: The largest integer kept as an integer (a signed 64-bit one); beyond, a float.
MAX_INT = 2**63 - 1
#: How many changes a :class:`StrictJson` names in its warning (the rest are counted), and how long a path may be.
NOTES_NAMED = 5
PATH_CHARS = 120

# NUL is refused by PostgreSQL's JSON types; a lone surrogate (json.loads keeps "\ud800" as one) by every UTF-8
# encoder and by PostgreSQL.
_BAD_CHARACTERS = re.compile("[\x00\ud800-\udfff]")
# ", " or ": " around each entry, as json.dumps writes them by default (the widest form Airflow may store)
_SEPARATOR = 2


class _Dropped:
    """A value that did not fit in what was left of the budget."""


DROPPED: Any = _Dropped()


def strict_number(value: int | float) -> int | float | None:
    """``value`` as strict JSON: an integer within 64 bits as it is, beyond as a float; a non-finite float (or an
    integer beyond the float range) ``None``. ``bool`` is not a number here: pass it elsewhere."""
    if isinstance(value, int):
        if -MAX_INT - 1 <= value <= MAX_INT:
            return int(value)  # a plain int, also from an IntEnum
        try:
            value = float(value)
        except OverflowError:
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def safe_text(value: str) -> str:
    """``value`` with NUL and unpaired surrogates replaced by U+FFFD, so any JSON store and UTF-8 encoder takes it."""
    return _BAD_CHARACTERS.sub("\ufffd", value)


class StrictJson:
    """Cleans values into strict JSON against one budget, and notes each change by where it was made.

    :param budget: characters the cleaned values may take in all, as ``json.dumps`` writes them.
    """

    def __init__(self, budget: int) -> None:
        self.left = budget
        #: once a value did not fit, nothing more is taken: the cut is at one place, not scattered
        self.exhausted = False
        self.notes: list[str] = []
        self.changes = 0

    def note(self, path: str, what: str) -> None:
        self.changes += 1
        if len(self.notes) < NOTES_NAMED:
            self.notes.append(f"{path if len(path) <= PATH_CHARS else path[:PATH_CHARS] + '...'}: {what}")

    def warning(self) -> str | None:
        """The changes in one line (``None`` when there were none)."""
        if not self.changes:
            return None
        more = self.changes - len(self.notes)
        return "; ".join(self.notes) + (f"; and {more} more" if more else "")

    def clean(self, value: Any, path: str, depth: int = 1) -> Any:
        """``value`` as strict JSON within the limits, or :data:`DROPPED` when it does not fit in the budget.

        :param path: where the value is, for the notes (``metrics.loss``).
        :param depth: how many containers hold it (1 for a value of the document itself).
        """
        if isinstance(value, bool) or value is None:
            return self._take(value, path)
        if isinstance(value, (int, float)):
            number = strict_number(value)
            if number is None:
                self.note(path, "NaN, an infinity or a number beyond the float range became null")
            elif isinstance(value, int) and isinstance(number, float):
                self.note(path, "an integer beyond 64 bits became a float")
            return self._take(number, path)
        if isinstance(value, str):
            return self._take(self.text(value, path), path)
        if isinstance(value, (Mapping, list, tuple)):
            if depth >= MAX_DEPTH:
                self.note(path, f"nested more than {MAX_DEPTH} levels deep, became null")
                return self._take(None, path)
            if isinstance(value, Mapping):
                return self._mapping(value, path, depth)
            return self._list(value, path, depth)
        self.note(path, f"a {type(value).__name__} is not a JSON value, became null")
        return self._take(None, path)

    def text(self, value: str, path: str) -> str:
        """``value`` cut to :data:`MAX_STRING` characters, NUL and unpaired surrogates replaced."""
        if len(value) > MAX_STRING:
            self.note(path, f"a string cut to {MAX_STRING} characters")
            value = value[:MAX_STRING]
        if _BAD_CHARACTERS.search(value):
            self.note(path, "NUL or unpaired surrogate characters replaced")
            value = safe_text(value)
        return value

    def _mapping(self, value: Mapping[Any, Any], path: str, depth: int) -> Any:
        if not self._spend(2, path):
            return DROPPED
        out: dict[str, Any] = {}
        for raw_key, item in value.items():
            key = self.text(str(raw_key), path)
            entry = len(json.dumps(key)) + 2 * _SEPARATOR
            if not self._spend(entry, path):
                break
            cleaned = self.clean(item, f"{path}.{key}", depth + 1)
            if cleaned is DROPPED:
                self.left += entry
                break
            out[key] = cleaned
        return out

    def _list(self, value: list[Any] | tuple[Any, ...], path: str, depth: int) -> Any:
        if not self._spend(2, path):
            return DROPPED
        out: list[Any] = []
        for index, item in enumerate(value):
            if not self._spend(_SEPARATOR, path):
                break
            cleaned = self.clean(item, f"{path}[{index}]", depth + 1)
            if cleaned is DROPPED:
                self.left += _SEPARATOR
                break
            out.append(cleaned)
        return out

    def _take(self, value: Any, path: str) -> Any:
        return value if self._spend(len(json.dumps(value)), path) else DROPPED

    def _spend(self, size: int, path: str) -> bool:
        if self.exhausted or size > self.left:
            if not self.exhausted:
                self.note(path, "dropped with what follows it: the report is over its size limit")
            self.exhausted = True
            return False
        self.left -= size
        return True


def downsample(points: list[Any], limit: int) -> list[Any]:
    """At most ``limit`` evenly spaced points, always keeping the first and the last."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


__all__ = ["DROPPED", "MAX_DEPTH", "MAX_INT", "MAX_STRING", "StrictJson", "downsample", "safe_text",
           "strict_number"]
