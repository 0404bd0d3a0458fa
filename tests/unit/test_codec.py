"""Unit tests of the single-object codec: header, fingerprints, errors, batches."""

from __future__ import annotations

import io
import json
import math
import re
import struct

import fastavro
import pytest
from fastavro.schema import fingerprint as fa_fingerprint

from runwatch.core.codec import (
    HEADER_LEN,
    MAGIC,
    Codec,
    DecodeError,
    EncodeError,
    crc64_avro,
    load_codec,
    load_schema_set,
)
from runwatch.core.records import (
    RECORD_TYPES,
    DeadLetter,
    GpuProcess,
    GpuSample,
    LearningStep,
    NodeSample,
    Source,
    ValidationResult,
)

SRC = Source(kind="sdk", host="host-1", runwatch_version="0.1.0")


def learning(step: int = 1, loss: float = 0.5) -> LearningStep:
    return LearningStep(
        event_id=f"e{step}", run_id="run-1", emitted_at_ms=1_700_000_000_000, source=SRC,
        seq=step, step=step, loss=loss, metrics={"acc": 0.9}, lr=1e-3,
    )


def node(gpus: int = 2) -> NodeSample:
    return NodeSample(
        event_id="n1", emitted_at_ms=1, source=SRC, seq=1, node="node-a", cpu_pct=12.5,
        mem_used_bytes=10, mem_total_bytes=20,
        gpus=tuple(
            GpuSample(index=i, uuid=f"GPU-{i}", util_pct=99.0, mem_used_bytes=1, mem_total_bytes=2,
                      power_w=300.0, temp_c=70.0, xid=79 if i == 0 else None,
                      processes=(GpuProcess(pid=100 + i, run_id="run-1", used_mem_bytes=5),))
            for i in range(gpus)
        ),
    )


@pytest.fixture(scope="module")
def codec() -> Codec:
    return load_codec()


# Test vectors from the Avro specification's schema-tests (CRC-64-AVRO, signed longs).
@pytest.mark.parametrize(
    ("canonical", "signed"),
    [
        ('"null"', 7195948357588979594),
        ('"int"', 8247732601305521295),
        ('{"type":"fixed","name":"foo","size":15}', -4493743693725313664),
    ],
)
def test_crc64_spec_vectors(canonical: str, signed: int) -> None:
    assert crc64_avro(canonical.encode()) == signed % (1 << 64)


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
def test_fingerprint_matches_fastavro(codec: Codec, name: str) -> None:
    for sv in codec.schemas.versions(name):
        assert sv.fingerprint.hex() == fa_fingerprint(sv.canonical, "CRC-64-AVRO")
        assert codec.header(name) == MAGIC + codec.current(name).fingerprint


@pytest.mark.parametrize("record", [learning(), learning(loss=math.inf), node(8), node(0)])
def test_layout_is_header_plus_schemaless_body(codec: Codec, record) -> None:
    data = codec.encode(record)
    assert data[:2] == b"\xc3\x01"
    sv = codec.current(record.AVRO_NAME)
    assert data[2:HEADER_LEN] == sv.fingerprint
    body = io.BytesIO()
    fastavro.schemaless_writer(body, sv.parsed, record.to_dict())
    assert data[HEADER_LEN:] == body.getvalue()
    assert codec.decode(data) == record


def test_nan_loss_survives(codec: Codec) -> None:
    out = codec.decode(codec.encode(learning(loss=math.nan)))
    assert math.isnan(out.loss)


def test_dict_paths_agree_with_records(codec: Codec) -> None:
    rec = node(3)
    data = codec.encode_dict(rec.AVRO_NAME, rec.to_dict())
    assert data == codec.encode(rec)
    name, d = codec.decode_dict(data)
    assert name == "runwatch.v1.NodeSample"
    assert NodeSample.from_dict(d) == rec


def test_batch_apis(codec: Codec) -> None:
    recs = [learning(i) for i in range(5)] + [node(1)]
    blobs = codec.encode_many(recs)
    assert blobs == [codec.encode(r) for r in recs]
    out = codec.decode_many([*blobs[:2], b"junk", *blobs[2:]])
    assert out[:2] == recs[:2]
    assert isinstance(out[2], DecodeError)
    assert out[3:] == recs[2:]
    dicts = codec.decode_many_dicts([blobs[0], b""])
    assert dicts[0] == ("runwatch.v1.LearningStep", recs[0].to_dict() | {"nonfinite_count": 0})
    assert isinstance(dicts[1], DecodeError)


def test_dead_letter_bytes_round_trip(codec: Codec) -> None:
    dl = DeadLetter(event_id="d", emitted_at_ms=1, source=SRC, seq=0, topic="rw.learning",
                    partition=3, offset=42, reason="bad", original=b"\x00\xff", key=None,
                    failed_at_ms=2)
    assert codec.decode(codec.encode(dl)) == dl


def _valid() -> bytes:
    return load_codec().encode(learning())


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty input"),
        (b"\x00\x00\x00\x00\x01body", "schema registry framing but no registry configured"),
        (b"\xc3\x02" + bytes(20), "wrong magic bytes"),
        (b"\x4f\x62\x6a\x01", "wrong magic bytes"),  # an Avro container file
        (b"\xc3\x01\x00", "truncated header"),
        (b"\xc3\x01" + bytes(8) + b"\x02", "unknown schema fingerprint"),
        (_valid()[:-3], "malformed runwatch.v1.LearningStep body"),
        (_valid()[:HEADER_LEN], "malformed runwatch.v1.LearningStep body"),
        (_valid() + b"\x00", "trailing bytes"),
        ("not bytes", "expected bytes"),
        (None, "expected bytes"),
    ],
)
def test_decode_errors_have_reasons(codec: Codec, data, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        codec.decode(data)
    assert reason in info.value.reason
    with pytest.raises(DecodeError):
        codec.decode_dict(data)


def test_oversized_input_rejected() -> None:
    small = Codec(load_schema_set(), max_record_bytes=32)
    data = small.encode(node(4))
    with pytest.raises(DecodeError, match="exceeds"):
        small.decode(data)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (object(), "no schema for object"),
        (LearningStep(event_id="e", emitted_at_ms=1, source=SRC, seq=1, step="x", loss=1.0),
         'cannot encode runwatch.v1.LearningStep: field step is "x", not an integer'),
        # fastavro said "must be real number, not str on field metrics on field metrics"
        (ValidationResult(event_id="e", emitted_at_ms=1, source=SRC, seq=1, step=1,
                          metrics={"val_loss": "1.9"}),
         'cannot encode runwatch.v1.ValidationResult: field metrics.val_loss is "1.9", '
         "not a number"),
    ],
)
def test_encode_errors(codec: Codec, bad, reason: str) -> None:
    with pytest.raises(EncodeError, match=re.escape(reason)):
        codec.encode(bad)
    with pytest.raises(EncodeError):
        codec.encode_many([bad])


def test_encode_dict_unknown_name(codec: Codec) -> None:
    with pytest.raises(EncodeError, match="unknown record name"):
        codec.encode_dict("runwatch.v1.Nope", {})


def test_load_codec_is_cached_and_honours_env(tmp_path, monkeypatch) -> None:
    default = load_codec()
    assert default is load_codec()
    schema = {"type": "record", "name": "LearningStep", "namespace": "runwatch.v1",
              "fields": [{"name": "step", "type": "long", "doc": "s"}]}
    (tmp_path / "LearningStep.avsc").write_text(json.dumps(schema))
    monkeypatch.setenv("RUNWATCH_SCHEMA_DIR", str(tmp_path))
    other = load_codec()
    assert other is not default
    assert list(other.schemas.current) == ["runwatch.v1.LearningStep"]
    # the one-field body decodes, but the record class needs its required fields
    data = other.header("runwatch.v1.LearningStep") + struct.pack("B", 2)
    with pytest.raises(DecodeError, match="cannot build"):
        other.decode(data)
