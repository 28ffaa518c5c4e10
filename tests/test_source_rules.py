"""The project's size rule, checked on the source: no function in ``src/ebpo`` is over 80 lines
(``def`` to its last line, docstring included; a longer one is split where it does two things)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "ebpo"
MAX_LINES = 80


def test_no_function_is_over_80_lines():
    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(
                        f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name} ({lines})"
                    )
    assert not long, long
