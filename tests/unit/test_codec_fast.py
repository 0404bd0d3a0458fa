"""The codec's cavro path gives exactly what fastavro gives: same dicts, same errors."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_codec_properties import PRIMS, VALID, mutated, records, strategy

from runwatch.core.codec import Codec, DecodeError, load_codec
from runwatch.core.codec.fast import plain
from runwatch.core.codec.ranges import widen_ints
from runwatch.core.records import RECORD_TYPES
from runwatch.testing.synth import mixed_events

FAST = load_codec()
EVENTS = mixed_events(5, 2, 30, 1_800_000_000_000 - 3_600_000)
SLOW = Codec(FAST.schemas, fast=False)


def outcome(codec: Codec, data: bytes) -> Any:
    """repr of the decoded dict (types and NaN included), or the error's reason."""
    try:
        return repr(codec.decode_dict(data))
    except DecodeError as exc:
        return "DecodeError: " + re.sub(r"0x[0-9a-f]+", "0x?", exc.reason)  # object addresses


def test_fast_path_is_on_and_taken() -> None:
    assert FAST._fast is not None and SLOW._fast is None
    events = mixed_events(3, 2, 10, 1_800_000_000_000)
    for e in events:
        data = FAST.encode(e.record)
        entry = FAST.entry_for(data)
        assert FAST._fast.decode(entry.name, entry.writer, data, 10) is not None, e.kind


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_same_dicts_for_every_record_type(name: str) -> None:
    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(records(name))
    def check(rec: Any) -> None:
        data = FAST.encode(rec)
        assert outcome(FAST, data) == outcome(SLOW, data)

    check()


# ints anywhere in 64 bits (a foreign producer's bytes): written as longs, the same varints
WIDE_PRIMS = {**PRIMS, "int": st.one_of(PRIMS["int"], st.integers(-(2**63), 2**63 - 1))}


def wide_bodies(name: str) -> st.SearchStrategy[bytes]:
    header = FAST.header(name)
    writer = parse_schema(widen_ints(plain(FAST.current(name).parsed)), named_schemas={})

    def write(datum: Any) -> bytes:
        buf = io.BytesIO()
        buf.write(header)
        schemaless_writer(buf, writer, datum)
        return buf.getvalue()

    return strategy(FAST.current(name).schema, {}, WIDE_PRIMS).map(write)


WIDE = st.sampled_from(sorted(RECORD_TYPES)).flatmap(wide_bodies)


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_same_verdict_with_out_of_range_ints(name: str) -> None:
    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(wide_bodies(name))
    def check(data: bytes) -> None:
        fast, slow = outcome(FAST, data), outcome(SLOW, data)
        assert fast == slow
        if "out of 32-bit range" not in fast:  # in range: decodes, and re-encodes the same
            assert FAST.encode_dict(name, FAST.decode_dict(data)[1]) == data

    check()


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(), VALID.map(lambda d: d + b"\x00"), VALID.map(lambda d: d[:-1]),
                 WIDE, mutated(WIDE)))
def test_same_verdict_on_damaged_bytes(data: bytes) -> None:
    assert outcome(FAST, data) == outcome(SLOW, data)


def test_older_writer_versions_resolve_through_fastavro() -> None:
    old = [sv for name in FAST.schemas.current for sv in FAST.schemas.versions(name)
           if sv.fingerprint != FAST.schemas.current[name].fingerprint]
    assert old, "schemas/avro/history holds older versions"
    for sv in old:
        entry = FAST._entries[sv.fingerprint]
        assert entry.reader is not None  # resolution: never the cavro path


def _first(kind: str) -> bytes:
    return FAST.encode(next(e.record for e in EVENTS if e.kind == kind))


def _mutations() -> list[tuple[str, bytes]]:
    node = _first("NodeSample")
    step = _first("StepTiming")
    cut = len(step) - 3
    return [
        ("truncated", node[:-5]),
        ("trailing bytes", step + b"\x00"),
        ("many trailing bytes", node + bytes(range(1, 20))),
        ("trailing zeros", step + b"\x00" * 9),
        ("header only", step[:10]),
        ("bad magic", b"\x00\x01" + step[2:]),
        ("unknown fingerprint", step[:2] + b"\xff" * 8 + step[10:]),
        # run_id is the second field: a union index 7 does not exist
        (
            "bad union index",
            step[:10]
            + step[10:11]
            + step[11 : 11 + step[10] // 2]
            + b"\x0e"
            + step[12 + step[10] // 2 :],
        ),
        ("invalid utf-8", step[:11] + b"\xff" + step[12:]),
        ("garbage tail", step[:cut] + b"\xff\xff\xff"),
    ]


@pytest.mark.parametrize(("what", "data"), _mutations(), ids=[m[0] for m in _mutations()])
def test_bad_bytes_decode_exactly_like_fastavro(what: str, data: bytes) -> None:
    assert outcome(FAST, data) == outcome(SLOW, data), what
