"""Avro int (32-bit) and long (64-bit) ranges: refused on encode, dead-lettered on decode.

Both decode paths (cavro for current-schema bodies, fastavro for the rest) must
give the same verdict on a body holding an int varint outside 32 bits.
"""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from runwatch.core.codec import HEADER_LEN, Codec, DecodeError, EncodeError, load_codec
from runwatch.core.codec.fast import plain
from runwatch.core.codec.ranges import OutOfRange, range_checker, widen_ints
from runwatch.core.records import RECORD_TYPES

FAST = load_codec()
SLOW = Codec(FAST.schemas, fast=False)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def sample(schema: Any, named: dict[str, Any]) -> Any:
    """A complete datum: unions take their last branch, arrays and maps hold one item."""
    if isinstance(schema, str):
        prims = {"null": None, "boolean": True, "int": 7, "long": 7, "float": 1.5,
                 "double": 1.5, "string": "s", "bytes": b"b"}
        return prims[schema] if schema in prims else sample(named[schema], named)
    if isinstance(schema, list):
        return sample(schema[-1], named)
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: sample(f["type"], named) for f in schema["fields"]}
    if kind == "array":
        return [sample(schema["items"], named)]
    if kind == "map":
        return {"k": sample(schema["values"], named)}
    if kind == "enum":
        named[schema["name"]] = schema
        return schema["symbols"][0]
    if kind == "fixed":
        named[schema["name"]] = schema
        return b"\x00" * schema["size"]
    return sample(kind, named)


def int_paths(schema: Any, path: str, named: dict[str, Any], kind: str) -> list[str]:
    """Every path (``a.b[].c``) of the given primitive kind in a schema."""
    if isinstance(schema, str):
        if schema == kind:
            return [path]
        return int_paths(named[schema], path, named, kind) if schema in named else []
    if isinstance(schema, list):
        return [p for s in schema for p in int_paths(s, path, named, kind)]
    t = schema["type"]
    if t == "record":
        named[schema["name"]] = schema
        pre = f"{path}." if path else ""
        return [p for f in schema["fields"]
                for p in int_paths(f["type"], pre + f["name"], named, kind)]
    if t == "array":
        return int_paths(schema["items"], path + "[]", named, kind)
    if t == "map":
        return int_paths(schema["values"], path + "{}", named, kind)
    if t in ("enum", "fixed"):
        named[schema["name"]] = schema
        return []
    return [path] if t == kind else []


def schema_of(name: str) -> Any:
    return plain(FAST.current(name).parsed)


def datum(name: str) -> dict[str, Any]:
    return sample(schema_of(name), {})  # type: ignore[no-any-return]


def put(d: Any, path: str, value: Any) -> Any:
    """Set the value at ``path`` (first item of every array or map on the way)."""
    parts = re.findall(r"[^.\[\]{}]+|\[\]|\{\}", path)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        key: Any = 0 if part == "[]" else "k" if part == "{}" else part
        if last:
            d[key] = value
        else:
            d = d[key]
    return d


def raw(name: str, d: dict[str, Any]) -> bytes:
    """Encode bypassing every check, as a foreign producer could.

    The ints are written as longs (the same varints): fastavro checks values
    inside unions to pick a branch, so it would refuse e.g. ``xid=2**31``.
    """
    buf = io.BytesIO()
    buf.write(FAST.header(name))
    schemaless_writer(buf, parse_schema(widen_ints(schema_of(name)), named_schemas={}), d)
    return buf.getvalue()


def verdict(codec: Codec, data: bytes) -> str:
    try:
        return repr(codec.decode_dict(data))
    except DecodeError as exc:
        return "DecodeError: " + exc.reason


NAMED_INTS = [
    ("runwatch.v1.JobEvent", "attempt"),
    ("runwatch.v1.JobEvent", "allocation.gpu_indices[]"),
    ("runwatch.v1.NodeSample", "gpus[].index"),
    ("runwatch.v1.NodeSample", "gpus[].sm_clock_mhz"),
    ("runwatch.v1.NodeSample", "gpus[].mem_clock_mhz"),
    ("runwatch.v1.NodeSample", "gpus[].xid"),
    ("runwatch.v1.RunManifest", "hardware.gpu_count"),
    ("runwatch.v1.StepTiming", "worker_restarts"),
    ("runwatch.v1.DeadLetter", "partition"),
]
ALL_INTS = [(n, p) for n in sorted(RECORD_TYPES) for p in int_paths(schema_of(n), "", {}, "int")]
OUT = [2**31, -(2**31) - 1, 2**32 + 3, 2**63 - 1, -(2**63)]


def test_the_named_fields_are_the_schemas_ints() -> None:
    assert set(NAMED_INTS) <= set(ALL_INTS)


@pytest.mark.parametrize("value", [*OUT, 2**64, pytest.param(10**5000, id="10**5000")])
@pytest.mark.parametrize(("name", "path"), NAMED_INTS)
def test_encode_refuses_out_of_range_int(name: str, path: str, value: int) -> None:
    d = datum(name)
    put(d, path, value)
    rec = RECORD_TYPES[name].from_dict(d)
    for encode in (lambda: FAST.encode(rec), lambda: FAST.encode_many([rec]),
                   lambda: FAST.encode_dict(name, d)):
        with pytest.raises(EncodeError) as err:
            encode()
        assert f"cannot encode {name}: int field {path} out of 32-bit range" in err.value.reason
        assert len(err.value.reason) < 200


@pytest.mark.parametrize(("name", "path"), ALL_INTS)
@pytest.mark.parametrize("value", [INT_MIN, INT_MAX])
def test_int_extremes_round_trip_on_both_paths(name: str, path: str, value: int) -> None:
    d = datum(name)
    put(d, path, value)
    data = FAST.encode(RECORD_TYPES[name].from_dict(d))
    assert FAST.encode_dict(name, d) == data
    for codec in (FAST, SLOW):
        assert _at(codec.decode_dict(data)[1], path) == value
        assert _at(codec.decode(data).to_dict(), path) == value


def _at(d: Any, path: str) -> Any:
    for part in re.findall(r"[^.\[\]{}]+|\[\]|\{\}", path):
        d = d[0 if part == "[]" else "k" if part == "{}" else part]
    return d


LONGS = [("runwatch.v1.NodeSample", "mem_used_bytes"),
         ("runwatch.v1.NodeSample", "gpus[].processes[].pid"),
         ("runwatch.v1.JobEvent", "deadline_ms"),
         ("runwatch.v1.DeadLetter", "offset")]


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70])
@pytest.mark.parametrize(("name", "path"), LONGS)
def test_encode_refuses_out_of_range_long_naming_the_field(name: str, path: str,
                                                           value: int) -> None:
    d = datum(name)
    put(d, path, value)
    rec = RECORD_TYPES[name].from_dict(d)
    for encode in (lambda: FAST.encode(rec), lambda: FAST.encode_many([rec]),
                   lambda: FAST.check_ranges(name, d)):
        with pytest.raises(EncodeError, match=re.escape(f"long field {path} out of 64-bit")):
            encode()


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63)])
@pytest.mark.parametrize(("name", "path"), LONGS)
def test_long_extremes_round_trip(name: str, path: str, value: int) -> None:
    d = datum(name)
    put(d, path, value)
    data = FAST.encode(RECORD_TYPES[name].from_dict(d))
    FAST.check_ranges(name, d)
    assert _at(FAST.decode_dict(data)[1], path) == _at(SLOW.decode_dict(data)[1], path) == value


@pytest.mark.parametrize("value", OUT)
@pytest.mark.parametrize(("name", "path"), ALL_INTS)
def test_out_of_range_int_body_is_dead_lettered_by_both_paths(name: str, path: str,
                                                               value: int) -> None:
    d = datum(name)
    put(d, path, value)
    data = raw(name, d)
    fast, slow = verdict(FAST, data), verdict(SLOW, data)
    assert fast == slow
    assert fast == f"DecodeError: {name}: int field {path} out of 32-bit range ({value})"
    # the cavro path reads the whole value (it does not fall back to fastavro)
    assert FAST._fast is not None
    body = FAST._fast.decode(name, FAST.current(name).parsed, data, HEADER_LEN)
    assert body is not None and _at(body, path) == value
    with pytest.raises(DecodeError):
        FAST.decode(data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return bytes(out + bytes([b]))
        out.append(b | 0x80)


@pytest.mark.parametrize("zigzag", [2**32, 2**32 + 1, 2**33 + 6, 2**64 - 1, 2**64 + 9, 2**70])
def test_hand_built_int_varints_get_one_verdict(zigzag: int) -> None:
    # StepTiming.worker_restarts is its last field, so the body ends with its varint
    name = "runwatch.v1.StepTiming"
    d = datum(name)
    put(d, "worker_restarts", 0)
    data = raw(name, d)
    assert data.endswith(b"\x00")
    hand = data[:-1] + _varint(zigzag)
    assert verdict(FAST, hand) == verdict(SLOW, hand)


def test_check_ranges_for_other_encoders() -> None:
    name = "runwatch.v1.JobEvent"
    d = datum(name)
    FAST.check_ranges(name, d)
    put(d, "attempt", 2**31)
    with pytest.raises(EncodeError, match="int field attempt"):
        FAST.check_ranges(name, d)
    with pytest.raises(EncodeError, match="unknown record name"):
        FAST.check_ranges("runwatch.v1.Nope", d)


def test_wrong_types_keep_the_writers_error() -> None:
    name = "runwatch.v1.JobEvent"
    d = datum(name)
    put(d, "attempt", "three")
    with pytest.raises(EncodeError, match="cannot encode runwatch.v1.JobEvent"):
        FAST.encode_dict(name, d)


# ----------------------------------------------------- the checker on its own
TREE = parse_schema({
    "type": "record", "name": "t.Node", "fields": [
        {"name": "v", "type": "int"},
        {"name": "kids", "type": {"type": "array", "items": "t.Node"}},
        {"name": "u", "type": ["null", "int",
                               {"type": "record", "name": "t.A",
                                "fields": [{"name": "a", "type": "int"}]}]},
        {"name": "m", "type": {"type": "map", "values": ["null", "t.A"]}},
        {"name": "n", "type": "long"},
    ]}, named_schemas={})
LEAF = {"v": 1, "kids": [], "u": None, "m": {}, "n": 0}


@pytest.mark.parametrize(("what", "d", "path"), [
    ("ok", LEAF, None),
    ("extremes", {**LEAF, "v": INT_MIN, "u": INT_MAX, "n": 2**63 - 1}, None),
    ("recursive", {**LEAF, "kids": [{**LEAF, "kids": [{**LEAF, "v": 2**31}]}]}, "v"),
    ("union int", {**LEAF, "u": -(2**31) - 1}, "u"),
    ("union record", {**LEAF, "u": {"a": 2**40}}, "u.a"),
    ("map of records", {**LEAF, "m": {"x": None, "y": {"a": 2**31}}}, "m{}.a"),
    ("long ignored", {**LEAF, "n": 2**70}, None),
])
def test_checker_shapes(what: str, d: dict[str, Any], path: str | None) -> None:
    check = range_checker(TREE)
    assert check is not None
    if path is None:
        check(d)
        return
    with pytest.raises(OutOfRange) as err:
        check(d)
    assert err.value.path == path, what


def test_long_checker_and_no_checker() -> None:
    check = range_checker(TREE, longs=True)
    assert check is not None
    with pytest.raises(OutOfRange, match="long field n out of 64-bit range"):
        check({**LEAF, "n": 2**63})
    none = parse_schema({"type": "record", "name": "t.S", "fields": [
        {"name": "s", "type": "string"}, {"name": "l", "type": "long"}]}, named_schemas={})
    assert range_checker(none) is None
    assert range_checker(none, longs=True) is not None


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_widen_ints_turns_exactly_the_ints_into_longs(name: str) -> None:
    schema = schema_of(name)
    wide = widen_ints(schema)
    assert int_paths(wide, "", {}, "int") == []
    assert sorted(int_paths(wide, "", {}, "long")) == sorted(
        int_paths(schema, "", {}, "int") + int_paths(schema, "", {}, "long"))
    assert wide == schema or int_paths(schema, "", {}, "int")
