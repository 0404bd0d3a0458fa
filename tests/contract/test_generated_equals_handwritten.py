"""Transitional: the generated record classes equal the hand-written ones field by field.

The generator's output is imported from a temporary package (``rwgen``) next to
the hand-written :mod:`runwatch.core.records`, and every class is compared:
field names and order, annotations, defaults, dataclass flags, ``AVRO_NAME``,
docstrings, the registries, and ``from_dict``/``to_dict`` round trips over
sample data of every schema (max and min variants, and with every defaulted
field left out) and over the sink's synthetic events.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import typing
from typing import Any

import pytest
from fastavro.schema import expand_schema

import runwatch.core.records as old
from runwatch import recordgen
from runwatch.core.codec import load_schema_set
from runwatch.core.codec.compat import sample_datum
from runwatch.sink.synth import mixed_events

SCHEMAS = load_schema_set()


@pytest.fixture(scope="module")
def new(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("gen")
    pkg = root / "rwgen"
    pkg.mkdir()
    for name, text in recordgen.render(
        {sv.path.name: sv.schema for sv in SCHEMAS.current.values()}
    ).items():
        (pkg / name).write_text(text.replace("runwatch.core.records.", "rwgen."))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("rwgen")
    finally:
        sys.path.remove(str(root))


def _norm(hint: Any) -> str:
    """An annotation as text with classes by name (the two packages' classes differ)."""
    return str(hint).replace("rwgen.", "").replace("runwatch.core.records.", "")


def test_registries_equal(new: Any) -> None:
    assert list(new.RECORD_TYPES) == list(old.RECORD_TYPES)
    assert list(new.ALL_TYPES) == list(old.ALL_TYPES)
    assert list(new.ENUM_TYPES) == list(old.ENUM_TYPES)
    for name, lit in old.ENUM_TYPES.items():
        assert typing.get_args(new.ENUM_TYPES[name]) == typing.get_args(lit)
    assert new.__all__ == old.__all__
    assert [a.__name__ for a in typing.get_args(new.Record)] == [
        a.__name__ for a in typing.get_args(old.Record)
    ]
    for mod in ("alerts", "artifact", "common", "data", "execution", "learning", "lineage",
                "node"):
        o = importlib.import_module(f"runwatch.core.records.{mod}")
        n = importlib.import_module(f"rwgen.{mod}")
        assert n.__all__ == o.__all__, mod
        assert n.__doc__.splitlines()[0] == o.__doc__.splitlines()[0], mod


@pytest.mark.parametrize("name", list(old.ALL_TYPES))
def test_class_equal(new: Any, name: str) -> None:
    o, n = old.ALL_TYPES[name], new.ALL_TYPES[name]
    assert n.__name__ == o.__name__
    assert n.AVRO_NAME == o.AVRO_NAME
    assert n.__doc__ == o.__doc__
    assert n.__dataclass_params__.frozen and "__slots__" in n.__dict__
    assert n.__slots__ == o.__slots__
    oh, nh = typing.get_type_hints(o), typing.get_type_hints(n)
    of, nf = dataclasses.fields(o), dataclasses.fields(n)
    assert [f.name for f in nf] == [f.name for f in of]
    for a, b in zip(of, nf, strict=True):
        assert _norm(nh[b.name]) == _norm(oh[a.name]), b.name
        assert b.kw_only and a.kw_only
        assert b.default == a.default, b.name
        assert (b.default_factory is dataclasses.MISSING) == (
            a.default_factory is dataclasses.MISSING), b.name
        if a.default_factory is not dataclasses.MISSING:
            assert b.default_factory() == a.default_factory()  # type: ignore[misc]


def _required(t: Any, datum: Any) -> Any:
    """The datum with every defaulted field left out, in nested records too."""
    if isinstance(t, list):
        return None if datum is None else _required(t[-1], datum)
    if isinstance(t, dict) and t["type"] == "array":
        return [_required(t["items"], x) for x in datum]
    if isinstance(t, dict) and t["type"] == "record":
        return {f["name"]: _required(f["type"], datum[f["name"]]) for f in t["fields"]
                if "default" not in f or isinstance(datum[f["name"]], list | dict)
                and datum[f["name"]]}
    return datum


def _datums(schema: dict[str, Any]) -> list[dict[str, Any]]:
    full = expand_schema(schema)
    out = [sample_datum(full, "max"), sample_datum(full, "min")]
    defaulted = {f["name"] for f in full["fields"] if "default" in f}
    top = {k: v for k, v in out[0].items() if k not in defaulted}
    return [*out, _required(full, out[0]), top]


@pytest.mark.parametrize("name", list(old.RECORD_TYPES))
def test_round_trips_equal(new: Any, name: str) -> None:
    o, n = old.RECORD_TYPES[name], new.RECORD_TYPES[name]
    datums = _datums(SCHEMAS.current[name].schema)
    datums += [e.record.to_dict() for e in mixed_events(seed=3, runs=8, ticks=30,
               start_ms=1_800_000_000_000) if e.record.AVRO_NAME == name]
    for d in datums:
        a, b = o.from_dict(d), n.from_dict(d)
        assert b.to_dict() == a.to_dict()
        assert repr(b).replace("rwgen.", "") == repr(a)
        assert n.from_dict(b.to_dict()) == b

