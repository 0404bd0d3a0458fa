"""Confluent Schema Registry framing, against confluent_kafka's in-memory mock:// registry."""

from __future__ import annotations

import dataclasses
import io
import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import schemaless_writer

from runwatch.adapters.schema_registry import (
    RegistryCodec,
    SchemaRegistrySettings,
    build_registry_codec,
)
from runwatch.core.codec import Codec, DecodeError, EncodeError, load_codec
from runwatch.core.records import LearningStep, Source

SRC = Source(kind="sdk", host="h", runwatch_version="0.1.0")
REC = LearningStep(event_id="e", run_id="r", emitted_at_ms=1, source=SRC, seq=1, step=2, loss=0.1)


@pytest.fixture
def reg() -> RegistryCodec:
    client = SchemaRegistryClient.new_client({"url": f"mock://t{uuid.uuid4().hex}"})
    return RegistryCodec(load_codec(), client)


def test_confluent_framing_round_trip(reg: RegistryCodec) -> None:
    data = reg.encode(REC)
    assert data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    registered = json.loads(reg.client.get_schema(schema_id).schema_str)
    assert registered["name"] == "LearningStep"
    assert reg.decode(data) == REC
    assert reg.encode_many([REC, REC]) == [data, data]


def test_both_framings_decode(reg: RegistryCodec) -> None:
    single = load_codec().encode(REC)
    framed = reg.encode(REC)
    out = reg.decode_many([single, framed, b"\x00\x00"])
    assert out[:2] == [REC, REC]
    assert isinstance(out[2], DecodeError) and "truncated" in out[2].reason


def test_old_writer_schema_from_registry_resolves(reg: RegistryCodec) -> None:
    old = load_codec().schemas.history["runwatch.v1.LearningStep"][0]
    schema_id = reg.client.register_schema("old", Schema(json.dumps(old.schema), "AVRO"))
    body = io.BytesIO()
    datum = {k: v for k, v in REC.to_dict().items() if k != "nonfinite_count"}
    schemaless_writer(body, old.parsed, datum)
    data = b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue()
    assert reg.decode(data) == REC


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00" + (999).to_bytes(4, "big") + b"\x02", "schema id 999 lookup failed"),
        (b"\x00\x00", "truncated schema registry header"),
        (b"\xc3\x01" + bytes(8), "unknown schema fingerprint"),
    ],
)
def test_registry_decode_errors(reg: RegistryCodec, data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        reg.decode(data)


def test_unknown_record_name_in_registry(reg: RegistryCodec) -> None:
    other = {"type": "record", "name": "Other", "namespace": "x", "fields": []}
    schema_id = reg.client.register_schema("x", Schema(json.dumps(other), "AVRO"))
    with pytest.raises(DecodeError, match="unknown record"):
        reg.decode(b"\x00" + schema_id.to_bytes(4, "big"))


def test_encode_errors(reg: RegistryCodec) -> None:
    with pytest.raises(EncodeError, match="no schema"):
        reg.encode(object())


def test_registry_framing_refuses_out_of_range_ints(reg: RegistryCodec) -> None:
    from runwatch.core.records import JobEvent

    job = JobEvent(event_id="j", run_id="r", emitted_at_ms=1, source=SRC, seq=1,
                   state="running", attempt=2**31)
    with pytest.raises(EncodeError, match="int field attempt out of 32-bit range"):
        reg.encode(job)
    assert reg.decode(reg.encode(dataclasses.replace(job, attempt=2**31 - 1))).attempt == 2**31 - 1


def test_pure_codec_without_registry() -> None:
    assert isinstance(build_registry_codec(SchemaRegistrySettings(url=None), load_codec()), Codec)
    built = build_registry_codec(SchemaRegistrySettings(url="mock://b"), load_codec())
    assert isinstance(built, RegistryCodec)
    assert built.decode(built.encode(REC)) == REC
    with pytest.raises(DecodeError, match="no registry configured"):
        load_codec().decode(built.encode(REC))


def test_settings_client_config(monkeypatch) -> None:
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", "https://sr:8081")
    monkeypatch.setenv("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO", "u:p")
    conf = SchemaRegistrySettings().client_config()
    assert conf == {"url": "https://sr:8081", "basic.auth.user.info": "u:p"}
