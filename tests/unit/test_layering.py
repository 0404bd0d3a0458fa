"""Only `runwatch.adapters` imports the Kafka, ClickHouse, HTTP and NVML clients (DESIGN §2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from importscan import imported_modules

PACKAGE = Path(__file__).resolve().parents[2] / "services" / "runwatch"
CLIENT_LIBRARIES = ("confluent_kafka", "clickhouse_connect", "httpx", "pynvml", "requests")


def _imported(path: Path) -> list[str]:
    names = imported_modules(ast.parse(path.read_text(encoding="utf-8")))
    return [n for n in names if n.split(".")[0] in CLIENT_LIBRARIES]


OUTSIDE_ADAPTERS = sorted(
    p for p in PACKAGE.rglob("*.py") if "adapters" not in p.relative_to(PACKAGE).parts
)


def test_there_are_modules_to_check() -> None:
    assert len(OUTSIDE_ADAPTERS) > 20


@pytest.mark.parametrize("path", OUTSIDE_ADAPTERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_adapters_import_client_libraries(path: Path) -> None:
    found = _imported(path)
    assert not found, f"{path.relative_to(PACKAGE)} imports {found}"


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("from confluent_kafka.admin import AdminClient", True),
        ("import httpx", True),
        ("from runwatch.adapters.kafka import BatchConsumer", False),
        ("import numpy", False),
    ],
)
def test_checker(tmp_path: Path, source: str, bad: bool) -> None:
    f = tmp_path / "m.py"
    f.write_text(source + "\n")
    assert bool(_imported(f)) is bad
