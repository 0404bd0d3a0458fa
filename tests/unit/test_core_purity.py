"""`runwatch.core` is pure: it imports no I/O library (DESIGN §2, §4)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from importscan import imported_modules

CORE = Path(__file__).resolve().parents[2] / "services" / "runwatch" / "core"
FORBIDDEN = {
    "confluent_kafka",
    "clickhouse_connect",
    "chdb",
    "pynvml",
    "httpx",
    "requests",
    "urllib",
    "faust",
    "aiokafka",
    "socket",
    "http",
    "psutil",
    "subprocess",
    "runwatch.adapters",
    "runwatch.processor",
    "runwatch.sink",
    "runwatch.pager",
    "runwatch.store",
    "runwatch.agent",
    "runwatch.client",
}
PURE_SUBMODULES = {"urllib.parse"}  # string functions only (receiver payloads quote URL parts)
# The clock must be passed in: core functions take now_ms.
FORBIDDEN_CALLS = {
    ("time", "time"),
    ("time", "time_ns"),
    ("datetime", "now"),
    ("datetime", "utcnow"),
}


def _clock_calls(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in FORBIDDEN_CALLS:
                found.append(f"{owner.id}.{node.func.attr}() at line {node.lineno}")
    return found


CORE_FILES = sorted(CORE.rglob("*.py"))


def test_core_has_modules() -> None:
    assert CORE_FILES, "no modules found under services/runwatch/core"


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_is_pure(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = [
        name
        for name in imported_modules(tree)
        if name not in PURE_SUBMODULES
        and any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert not bad, f"{path.name} imports I/O modules: {bad}"
    clock = _clock_calls(tree)
    assert not clock, f"{path.name} reads the clock: {clock}"


@pytest.mark.parametrize(
    ("source", "expected_bad"),
    [
        ("import confluent_kafka", True),
        ("from http.client import HTTPConnection", True),
        ("import numpy as np", False),
        ("from runwatch.core import codec", False),
        ("from runwatch.adapters.kafka import Transport", True),
        ("from urllib.parse import quote", False),
        ("from urllib.request import urlopen", True),
    ],
)
def test_checker_detects_forbidden_imported_modules(source: str, expected_bad: bool) -> None:
    names = imported_modules(ast.parse(source))
    bad = [n for n in names if n not in PURE_SUBMODULES
           and any(n == f or n.startswith(f + ".") for f in FORBIDDEN)]
    assert bool(bad) is expected_bad


def test_checker_detects_clock_reads() -> None:
    assert _clock_calls(ast.parse("import time\nx = time.time()\n"))
    assert not _clock_calls(ast.parse("def f(now_ms: int) -> int:\n    return now_ms\n"))
