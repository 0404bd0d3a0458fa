"""Confluent Schema Registry framing (magic 0 + 4-byte big-endian schema id).

Optional: used when a registry URL is configured. Encoding registers each
record's current schema (subject = Avro full name, the record-name strategy, so
one topic can carry several record types) and frames the Avro body with the
schema id. Decoding tells the framings apart by the first byte: ``0x00`` is
resolved through the registry, ``0xC3`` (single-object encoding) goes to the
pure :class:`~runwatch.core.codec.Codec`. Decoding raises only ``DecodeError``.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from fastavro import schemaless_writer
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.core.codec import Codec, DecodeError, EncodeError, WriterEntry
from runwatch.core.codec.codec import decode_each

log = logging.getLogger(__name__)
REGISTRY_HEADER_LEN = 5


class RegistryClient(Protocol):
    """The part of ``confluent_kafka.schema_registry.SchemaRegistryClient`` used here."""

    def register_schema(self, subject_name: str, schema: Any) -> int:
        """Register a schema under a subject and return its id."""
        ...

    def get_schema(self, schema_id: int) -> Any:
        """Return the schema (with ``schema_str``) registered under an id."""
        ...


class SchemaRegistrySettings(BaseSettings):
    """Where the schema registry is (env prefix ``SCHEMA_REGISTRY_``)."""

    model_config = SettingsConfigDict(env_prefix="SCHEMA_REGISTRY_", extra="ignore")

    url: str | None = None
    basic_auth_user_info: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None

    def client_config(self) -> dict[str, str]:
        """Return the ``SchemaRegistryClient`` configuration.

        Returns:
            Config dict; empty when no URL is set.

        """
        if not self.url:
            return {}
        conf = {"url": self.url}
        if self.basic_auth_user_info is not None:
            conf["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        for key, value in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if value:
                conf[key] = value
        return conf


class RegistryCodec:
    """Codec with Confluent framing on encode and both framings on decode."""

    def __init__(self, codec: Codec, client: RegistryClient) -> None:
        """Wrap a codec and a registry client.

        Args:
            codec: The pure single-object codec (schemas, records).
            client: A ``SchemaRegistryClient`` (``mock://`` URLs give an in-memory one).

        """
        self.codec = codec
        self.client = client
        self._ids: dict[str, bytes] = {}
        self._entries: dict[int, WriterEntry] = {}

    def _header(self, name: str) -> bytes:
        header = self._ids.get(name)
        if header is None:
            from confluent_kafka.schema_registry import Schema

            schema_str = json.dumps(self.codec.current(name).schema)
            try:
                schema_id = self.client.register_schema(name, Schema(schema_str, "AVRO"))
            except Exception as exc:
                msg = f"cannot register {name} with the schema registry: {exc}"
                raise EncodeError(msg) from exc
            header = b"\x00" + int(schema_id).to_bytes(4, "big")
            self._ids[name] = header
        return header

    def encode(self, record: Any) -> bytes:
        """Encode one record with registry framing.

        Args:
            record: A runwatch record dataclass.

        Returns:
            ``0x00`` + 4-byte schema id + Avro body.

        Raises:
            EncodeError: Unknown record type, bad field, or registry failure.

        """
        name = getattr(record, "AVRO_NAME", None)
        if name is None or name not in self.codec.schemas.current:
            msg = f"no schema for {type(record).__name__}"
            raise EncodeError(msg)
        datum = record.to_dict()
        self.codec.check_ranges(name, datum)  # fastavro's writer does not check int ranges
        buf = io.BytesIO()
        buf.write(self._header(name))
        try:
            schemaless_writer(buf, self.codec.current(name).parsed, datum)
        except Exception as exc:
            raise self.codec.encode_error(name, datum, exc) from exc
        return buf.getvalue()

    def encode_many(self, records: Iterable[Any]) -> list[bytes]:
        """Encode a batch with registry framing.

        Args:
            records: Runwatch record dataclasses.

        Returns:
            One encoding per record.

        """
        return [self.encode(r) for r in records]

    def _entry(self, schema_id: int) -> WriterEntry:
        entry = self._entries.get(schema_id)
        if entry is None:
            try:
                schema = json.loads(self.client.get_schema(schema_id).schema_str)
            except Exception as exc:
                msg = f"schema id {schema_id} lookup failed: {exc}"
                raise DecodeError(msg[:500]) from exc
            entry = self.codec.entry_for_schema(schema)
            self._entries[schema_id] = entry
        return entry

    def decode(self, data: bytes) -> Any:
        """Decode either framing into a record.

        Args:
            data: Confluent-framed or single-object-encoded bytes.

        Returns:
            The record, resolved to the current schema.

        Raises:
            DecodeError: For anything undecodable; never another exception.

        """
        if isinstance(data, bytes | bytearray | memoryview) and len(data) and data[0] == 0:
            if len(data) < REGISTRY_HEADER_LEN:
                msg = f"truncated schema registry header ({len(data)} bytes)"
                raise DecodeError(msg)
            entry = self._entry(int.from_bytes(data[1:REGISTRY_HEADER_LEN], "big"))
            return self.codec.decode_with(entry, data, REGISTRY_HEADER_LEN)
        return self.codec.decode(data)

    def decode_many(self, items: Sequence[bytes]) -> list[Any]:
        """Decode a batch; failures come back in place as ``DecodeError``.

        Args:
            items: Encoded records in either framing.

        Returns:
            One record or ``DecodeError`` per input.

        """
        return decode_each(self.decode, items)


def build_registry_codec(settings: SchemaRegistrySettings, codec: Codec) -> RegistryCodec | Codec:
    """Return a registry-aware codec when a URL is configured, else ``codec``.

    Args:
        settings: Registry settings.
        codec: The pure codec.

    Returns:
        A :class:`RegistryCodec`, or the pure codec without a registry URL.

    """
    if not settings.url:
        return codec
    from confluent_kafka.schema_registry import SchemaRegistryClient

    log.info("using schema registry framing (registry %s)", settings.url)
    client = SchemaRegistryClient.new_client(settings.client_config())
    return RegistryCodec(codec, client)
