"""Contract: the record dataclasses match the .avsc files field for field."""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from fastavro.schema import expand_schema

from runwatch.core.codec import default_schema_dir, load_schema_set
from runwatch.core.records import ALL_TYPES, ENUM_TYPES, RECORD_TYPES

SCHEMAS = load_schema_set()
UNIT_SUFFIXES = ("_ms", "_bytes", "_w", "_c", "_pct", "_mhz", "_bps")
PRIM = {"string": str, "long": int, "int": int, "double": float, "float": float,
        "boolean": bool, "bytes": bytes}


def all_named() -> dict[str, dict[str, Any]]:
    """Every record and enum in the current schemas, by full name (expanded)."""
    out: dict[str, dict[str, Any]] = {}

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b)
        elif isinstance(s, dict):
            if s["type"] == "array":
                walk(s["items"])
            elif s["type"] == "map":
                walk(s["values"])
            elif s["type"] in ("record", "enum"):
                prev = out.setdefault(s["name"], s)
                assert prev == s, f"{s['name']} defined differently in two files"
                for f in s.get("fields", []):
                    walk(f["type"])

    for sv in SCHEMAS.current.values():
        walk(expand_schema(sv.schema))
    return out


NAMED = all_named()
RECORDS = {n: s for n, s in NAMED.items() if s["type"] == "record"}
ENUMS = {n: s for n, s in NAMED.items() if s["type"] == "enum"}


def expected_hint(avro: Any) -> Any:
    """The Python annotation a field of this Avro type must have."""
    if isinstance(avro, str):
        return PRIM[avro]
    if isinstance(avro, list):
        assert len(avro) == 2 and avro[0] == "null", f"only [null, T] unions allowed: {avro}"
        return expected_hint(avro[1]) | None
    if avro["type"] == "array":
        return tuple[expected_hint(avro["items"]), ...]
    if avro["type"] == "map":
        return dict[str, expected_hint(avro["values"])]
    if avro["type"] == "enum":
        return ENUM_TYPES[avro["name"]]
    return ALL_TYPES[avro["name"]]


def py_default(avro_default: Any) -> Any:
    if avro_default == []:
        return ()
    return avro_default


def test_every_current_schema_has_a_class_and_back() -> None:
    assert set(SCHEMAS.current) == set(RECORD_TYPES)
    assert set(RECORDS) == set(ALL_TYPES)
    assert set(ENUMS) == set(ENUM_TYPES)


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_fields_match(name: str) -> None:
    schema = RECORDS[name]
    cls = ALL_TYPES[name]
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert list(fields) == [f["name"] for f in schema["fields"]], "field names/order"
    for f in schema["fields"]:
        dc = fields[f["name"]]
        assert hints[f["name"]] == expected_hint(f["type"]), f"type of {f['name']}"
        nullable = isinstance(f["type"], list)
        assert (types.NoneType in typing.get_args(hints[f["name"]])) == nullable
        if "default" in f:
            if dc.default_factory is not dataclasses.MISSING:
                actual = dc.default_factory()
            else:
                actual = dc.default
            assert actual == py_default(f["default"]), f"default of {f['name']}"
        else:
            assert dc.default is dataclasses.MISSING
            assert dc.default_factory is dataclasses.MISSING


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enum_symbols_match_literals(name: str) -> None:
    assert typing.get_args(ENUM_TYPES[name]) == tuple(ENUMS[name]["symbols"])


@pytest.mark.parametrize("path", sorted(default_schema_dir().rglob("*.avsc")), ids=lambda p: p.name)
def test_schema_files_are_documented_and_namespaced(path: Path) -> None:
    schema = json.loads(path.read_text())
    assert schema["namespace"] == "runwatch.v1"
    assert schema.get("doc")

    def walk(s: Any, where: str) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b, where)
        elif isinstance(s, dict):
            if s["type"] in ("array", "map"):
                walk(s.get("items", s.get("values")), where)
            elif s["type"] in ("record", "enum"):
                assert s.get("doc"), f"{where}{s['name']} has no doc"
                for f in s.get("fields", []):
                    assert f.get("doc"), f"{where}{s['name']}.{f['name']} has no doc"
                    assert re.fullmatch(r"[a-z][a-z0-9_]*", f["name"]), f["name"]
                    walk(f["type"], where)

    walk(schema, f"{path.name}: ")


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_common_event_fields(name: str) -> None:
    fields = {f["name"]: f for f in RECORDS[name]["fields"]}
    assert fields["event_id"]["type"] == "string"
    assert fields["run_id"]["type"] == ["null", "string"]
    assert fields["run_id"]["default"] is None
    assert fields["emitted_at_ms"]["type"] == "long"
    assert fields["source"]["type"]["name"] == "runwatch.v1.Source"
    assert fields["seq"]["type"] == "long"


# Field names that carry a physical quantity must say their unit.
# (counts such as attempt, samples or batch size are dimensionless)
QUANTITY = re.compile(
    r"(^|_)(time|duration|lag|deadline|size|mem|power|temp|clock|throughput|wait)(_|$)"
)
DIMENSIONLESS = {"effective_batch_size"}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_quantities_have_units(name: str) -> None:
    for f in RECORDS[name]["fields"]:
        base = f["type"][-1] if isinstance(f["type"], list) else f["type"]
        if f["name"] in DIMENSIONLESS:
            continue
        if base in ("long", "int", "double") and QUANTITY.search(f["name"]):
            assert f["name"].endswith(UNIT_SUFFIXES), f"{name}.{f['name']} lacks a unit suffix"
