"""The one error type a user sees for a bad spec: every problem, each with its path."""

from __future__ import annotations

from collections.abc import Iterable

#: a message is read in a DAG import error or a task log: every part of it is bounded
MAX_PATH_CHARS = 200
MAX_MESSAGE_CHARS = 500
MAX_PROBLEMS_SHOWN = 50


class SpecValidationError(ValueError):
    """A distributed-training spec is invalid.

    ``problems`` is a list of ``(path, message)``; ``str()`` lists them all, one per line, so
    a DAG author sees every mistake in one parse instead of fixing them one at a time. Paths and messages are
    cut to a bounded length and at most ``MAX_PROBLEMS_SHOWN`` are listed, the rest counted.
    """

    def __init__(self, problems: Iterable[tuple[str, str]], *, source: str | None = None) -> None:
        self.problems: list[tuple[str, str]] = [
            (_cut(str(path), MAX_PATH_CHARS), _cut(str(message), MAX_MESSAGE_CHARS)) for path, message in problems
        ]
        self.source = None if source is None else _cut(str(source), MAX_PATH_CHARS)
        super().__init__(self._render())

    def _render(self) -> str:
        where = f" ({self.source})" if self.source else ""
        count = len(self.problems)
        head = f"invalid distributed training spec{where}: {count} problem{'s' if count != 1 else ''}"
        shown = self.problems[:MAX_PROBLEMS_SHOWN]
        lines = [f"  {path}: {message}" if path else f"  {message}" for path, message in shown]
        if count > len(shown):
            lines.append(f"  ... and {count - len(shown)} more")
        return "\n".join([head, *lines])

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.problems]


def _cut(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters (a newline in a key would otherwise fake a problem line)."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 24] + f"... ({len(text)} chars)"
