"""The modules a Python source imports (absolute imports), for the layering and purity tests."""

from __future__ import annotations

import ast


def imported_modules(tree: ast.AST) -> list[str]:
    """Return the module names of every ``import x`` and ``from x import y`` (level 0)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names
