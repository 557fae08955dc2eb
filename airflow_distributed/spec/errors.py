"""The one error type a user sees for a bad spec: every problem, each with its path."""

from __future__ import annotations

from collections.abc import Iterable


class SpecValidationError(ValueError):
    """A distributed-training spec is invalid.

    ``problems`` is a list of ``(path, message)``; ``str()`` lists them all, one per line, so
    a DAG author sees every mistake in one parse instead of fixing them one at a time.
    """

    def __init__(self, problems: Iterable[tuple[str, str]], *, source: str | None = None) -> None:
        self.problems: list[tuple[str, str]] = list(problems)
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = f" ({self.source})" if self.source else ""
        count = len(self.problems)
        head = f"invalid distributed training spec{where}: {count} problem{'s' if count != 1 else ''}"
        lines = [f"  {path}: {message}" if path else f"  {message}" for path, message in self.problems]
        return "\n".join([head, *lines])

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.problems]
