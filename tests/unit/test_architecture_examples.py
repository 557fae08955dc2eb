"""The Python examples of docs/architecture.md run as written, and a value shown in a comment is what they give."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from airflow_distributed.backends.registry import REGISTRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
BLOCKS = [textwrap.dedent(block)  # a block inside a list item is indented with it
          for block in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
          if not block.lstrip().startswith("class Backend(Protocol)")]  # the protocol's outline, not a program


def shown_value(block: str) -> str | None:
    """The repr written as ``# '...'`` comment lines after the block's last expression, joined."""
    # A wrapped repr goes on after "# " with the space it broke at: "# 'a b" + "#  c'" is 'a b c'.
    lines = [line.strip()[2:] for line in block.splitlines() if line.strip().startswith("# '") or
             line.strip().startswith("#  ")]
    return "".join(lines) or None


def test_the_document_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.strip().splitlines()[0][:40])
def test_an_example_runs(block: str) -> None:
    saved = dict(REGISTRY)
    try:
        tree = ast.parse(block)
        last = tree.body[-1]
        namespace: dict = {}
        if isinstance(last, ast.Expr):
            exec(compile(ast.Module(tree.body[:-1], type_ignores=[]), str(DOC), "exec"), namespace)
            value = eval(compile(ast.Expression(last.value), str(DOC), "eval"), namespace)
            shown = shown_value(block)
            if shown is not None:
                assert repr(value) == shown
        else:
            exec(compile(tree, str(DOC), "exec"), namespace)
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)
