"""Hypothesis property tests: every record round-trips; any bytes give only DecodeError."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwatch.core.codec import HEADER_LEN, DecodeError, load_codec
from runwatch.core.records import RECORD_TYPES

CODEC = load_codec()
PRIMS: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=True, allow_infinity=True),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
}


def strategy(
    schema: Any, named: dict[str, Any], prims: dict[str, st.SearchStrategy[Any]] = PRIMS
) -> st.SearchStrategy[Any]:
    """A strategy of fastavro-ready data for an Avro schema (JSON form)."""
    if isinstance(schema, str):
        return prims[schema] if schema in prims else st.deferred(lambda: named[schema])
    if isinstance(schema, list):
        return st.one_of([strategy(s, named, prims) for s in schema])
    kind = schema["type"]
    if kind == "array":
        return st.lists(strategy(schema["items"], named, prims), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=6), strategy(schema["values"], named, prims),
                               max_size=3)
    if kind == "enum":
        out: st.SearchStrategy[Any] = st.sampled_from(schema["symbols"])
    elif kind == "record":
        out = st.fixed_dictionaries(
            {f["name"]: strategy(f["type"], named, prims) for f in schema["fields"]}
        )
    else:
        return prims[kind]
    named[schema["name"]] = out
    return out


def records(name: str) -> st.SearchStrategy[Any]:
    cls = RECORD_TYPES[name]
    return strategy(CODEC.current(name).schema, {}).map(cls.from_dict)


def normal(x: Any) -> Any:
    """Make values comparable: NaN -> marker, dataclasses -> dicts, lists -> tuples."""
    if hasattr(x, "to_dict"):
        x = x.to_dict()
    if isinstance(x, float) and math.isnan(x):
        return "<nan>"
    if isinstance(x, dict):
        return {k: normal(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return tuple(normal(v) for v in x)
    return x


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_round_trip(name: str) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(records(name))
    def check(rec: Any) -> None:
        data = CODEC.encode(rec)
        back = CODEC.decode(data)
        assert type(back) is type(rec)
        assert normal(back) == normal(rec)
        assert CODEC.encode(back) == data
        many = CODEC.decode_many(CODEC.encode_many([rec, rec]))
        assert [normal(r) for r in many] == [normal(rec), normal(rec)]

    check()


VALID = st.sampled_from(sorted(RECORD_TYPES)).flatmap(records).map(CODEC.encode)


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes] = VALID) -> bytes:
    data = bytearray(draw(valid))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "body"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[pos]
        elif op == "truncate":
            del data[pos:]
        else:
            data[HEADER_LEN:] = draw(st.binary(max_size=64))
    return bytes(data)


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=64),
        st.binary(max_size=64).map(lambda b: b"\xc3\x01" + b),
        st.binary(max_size=64).map(lambda b: b"\x00" + b),
        mutated(),
    )
)
def test_fuzz_only_decode_error(data: bytes) -> None:
    for fn in (CODEC.decode, CODEC.decode_dict):
        try:
            fn(data)
        except DecodeError as err:
            assert err.reason
    out = CODEC.decode_many([data])
    assert len(out) == 1
