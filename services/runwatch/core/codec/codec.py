"""Avro single-object encoding of runwatch records.

Size: the encoder and the decoder of one wire format, kept together so they cannot drift apart.

Wire format (Avro spec, "Single-object encoding"): ``0xC3 0x01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical
Form, then the schemaless Avro body. The decoder looks the writer schema up by
fingerprint among every known version and resolves it to the current schema,
so old and new producers can share a topic. Decoding raises :class:`DecodeError`
and nothing else, whatever the bytes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from runwatch.core.codec.crc64 import fingerprint_bytes
from runwatch.core.codec.errors import DecodeError, EncodeError
from runwatch.core.codec.fast import AVAILABLE as FAST_AVAILABLE
from runwatch.core.codec.fast import FastBodies
from runwatch.core.codec.ranges import Check, OutOfRange, range_checker
from runwatch.core.codec.schemas import SchemaSet, SchemaVersion, load_schema_set
from runwatch.core.codec.shape import misfit
from runwatch.core.records import RECORD_TYPES

T = TypeVar("T")

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
REGISTRY_MAGIC = 0
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024

_Writer = tuple[bytes, Any, "Check | None", str]
"""How to encode one record: header, parsed schema, int range check, Avro full name."""


@dataclass(frozen=True, slots=True)
class WriterEntry:
    """How to decode bodies written with one schema version.

    Attributes:
        name: Avro full name of the record.
        writer: Parsed writer schema.
        reader: Parsed current (reader) schema, or None when writer is current.
        cls: Dataclass the record decodes into.
        version: The writer's schema version.

    """

    name: str
    writer: Any
    reader: Any
    cls: type[Any]
    version: int



def decode_each(decode: Callable[[bytes], T], items: Sequence[bytes]) -> list[T | DecodeError]:
    """Apply ``decode`` to each item; a :class:`DecodeError` comes back in its place.

    Args:
        decode: A decoder that raises only :class:`DecodeError`.
        items: Encoded inputs.

    Returns:
        One result or :class:`DecodeError` per input, in order.

    """
    out: list[T | DecodeError] = []
    for data in items:
        try:
            out.append(decode(data))
        except DecodeError as err:
            out.append(err)
    return out


def _check_encode(name: str, check: Check, datum: Any) -> None:
    try:
        check(datum)
    except OutOfRange as exc:
        msg = f"cannot encode {name}: {exc}"
        raise EncodeError(msg) from None
    except (TypeError, KeyError, AttributeError):
        return  # a value of the wrong type: fastavro's writer refuses it with its own error


class Codec:
    """Encode and decode runwatch records in Avro single-object encoding."""

    def __init__(
        self,
        schemas: SchemaSet,
        types: Mapping[str, type[Any]] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        fast: bool = True,
    ) -> None:
        """Build a codec over a schema set.

        Args:
            schemas: Every known schema version (see :func:`load_schema_set`).
            types: Avro full name -> dataclass; default the runwatch records.
            max_record_bytes: Inputs longer than this are rejected on decode.
            fast: Decode current-schema bodies with cavro where it is a plain
                substitute for fastavro (:mod:`runwatch.core.codec.fast`).

        Raises:
            ValueError: A current schema has no dataclass.

        """
        types = dict(RECORD_TYPES if types is None else types)
        self.schemas = schemas
        self.max_record_bytes = max_record_bytes
        self._writers: dict[str, _Writer] = {}
        self._by_class: dict[type[Any], _Writer] = {}
        self._checks: dict[str, Check | None] = {}  # name -> int range check (current schema)
        self._full_checks: dict[str, Check | None] = {}  # int and long, for error messages
        self._entries: dict[bytes, WriterEntry] = {}
        self._fast = FastBodies() if fast and FAST_AVAILABLE else None
        for name, cur in schemas.current.items():
            cls = types.get(name)
            if cls is None:
                msg = f"no record class for schema {name}"
                raise ValueError(msg)
            self._checks[name] = range_checker(cur.parsed)
            check = range_checker(cur.parsed, tolerant=True)
            writer = (MAGIC + cur.fingerprint, cur.parsed, check, name)
            self._writers[name] = writer
            self._by_class[cls] = writer
            for sv in schemas.versions(name):
                self._entries[sv.fingerprint] = WriterEntry(
                    name=name,
                    writer=sv.parsed,
                    reader=None if sv.fingerprint == cur.fingerprint else cur.parsed,
                    cls=cls,
                    version=sv.version,
                )

    # ----------------------------------------------------------------- encode
    def encode(self, record: Any) -> bytes:
        """Encode one record (a runwatch dataclass).

        Args:
            record: An instance of a class in :data:`runwatch.core.records.RECORD_TYPES`.

        Returns:
            The single-object encoding.

        Raises:
            EncodeError: The type is unknown or a field does not fit its schema
                (an ``int`` outside the signed 32-bit range, a ``long``
                outside 64 bits included).

        """
        writer = self._by_class.get(type(record))
        if writer is None:
            msg = f"no schema for {type(record).__name__}"
            raise EncodeError(msg)
        return self._write(writer, record.to_dict())

    def encode_dict(self, name: str, datum: Mapping[str, Any]) -> bytes:
        """Encode a plain dict as the current version of record ``name``.

        Args:
            name: Avro full name, e.g. ``runwatch.v1.NodeSample``.
            datum: The record as fastavro expects it (nested records as dicts).

        Returns:
            The single-object encoding.

        Raises:
            EncodeError: Unknown name or a field does not fit its schema.

        """
        writer = self._writers.get(name)
        if writer is None:
            msg = f"unknown record name {name!r}"
            raise EncodeError(msg)
        return self._write(writer, datum)

    def encode_many(self, records: Iterable[Any]) -> list[bytes]:
        """Encode a batch of records.

        Args:
            records: Runwatch dataclass instances (any mix of types).

        Returns:
            One encoding per record, in order.

        Raises:
            EncodeError: On the first record that cannot be encoded.

        """
        by_class = self._by_class
        buf = io.BytesIO()
        out: list[bytes] = []
        for record in records:
            writer = by_class.get(type(record))
            if writer is None:
                msg = f"no schema for {type(record).__name__}"
                raise EncodeError(msg)
            buf.seek(0)
            buf.truncate()
            self._write_to(buf, writer, record.to_dict())
            out.append(buf.getvalue())
        return out

    def check_ranges(self, name: str, datum: Mapping[str, Any]) -> None:
        """Refuse ``int``/``long`` values outside their Avro range (for other encoders).

        The codec's own encoders call this; an encoder that writes bodies
        itself (e.g. with registry framing) should call it before writing.

        Args:
            name: Avro full name of a current record.
            datum: The record as fastavro writes it (nested records as dicts).

        Raises:
            EncodeError: Unknown name, an ``int`` outside the signed 32-bit
                range or a ``long`` outside 64 bits.

        """
        if name not in self._checks:
            msg = f"unknown record name {name!r}"
            raise EncodeError(msg)
        full = self._full_check(name)
        if full is not None:
            _check_encode(name, full, datum)

    def _write(self, writer: _Writer, datum: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        self._write_to(buf, writer, datum)
        return buf.getvalue()

    def _write_to(self, buf: io.BytesIO, writer: _Writer, datum: Mapping[str, Any]) -> None:
        """Check ``datum``'s int ranges, then write the header and body to ``buf``."""
        header, parsed, check, name = writer
        if check is not None:
            _check_encode(name, check, datum)
        buf.write(header)
        try:
            schemaless_writer(buf, parsed, datum)
        except Exception as exc:
            raise self.encode_error(name, datum, exc) from exc

    def _full_check(self, name: str) -> Check | None:
        if name not in self._full_checks:
            parsed = self.schemas.current[name].parsed
            self._full_checks[name] = range_checker(parsed, longs=True, tolerant=True)
        return self._full_checks[name]

    def encode_error(self, name: str, datum: Any, exc: Exception) -> EncodeError:
        """Explain a writer failure, naming the field: out of range, or not of its kind.

        fastavro's own text names the field at best, twice for a map's value
        (``must be real number, not str on field metrics on field metrics``);
        it is the last resort.
        """
        full = self._full_check(name)
        try:
            if full is not None:
                full(datum)
        except OutOfRange as bad:
            msg = f"cannot encode {name}: {bad}"
            return EncodeError(msg)
        except Exception:  # noqa: BLE001, S110 - the writer's own error explains it
            pass
        why = misfit(self.schemas.current[name].parsed, datum)
        if why is not None:
            return EncodeError(f"cannot encode {name}: {why}"[:500])
        msg = f"cannot encode {name}: {exc!r}"
        return EncodeError(msg[:500])

    # ----------------------------------------------------------------- decode
    def entry_for(self, data: bytes) -> WriterEntry:
        """Check the header of an encoding and find its writer schema.

        Args:
            data: A single-object encoding.

        Returns:
            How to decode its body.

        Raises:
            DecodeError: Not bytes, too short or too long, wrong magic, registry
                framing, or unknown fingerprint.

        """
        if not isinstance(data, bytes | bytearray | memoryview):
            msg = f"expected bytes, got {type(data).__name__}"
            raise DecodeError(msg)
        size = len(data)
        if size > self.max_record_bytes:
            msg = f"record of {size} bytes exceeds the {self.max_record_bytes}-byte limit"
            raise DecodeError(msg)
        if size == 0:
            msg = "empty input"
            raise DecodeError(msg)
        if data[0] == REGISTRY_MAGIC:
            msg = "schema registry framing but no registry configured"
            raise DecodeError(msg)
        if bytes(data[:2]) != MAGIC:
            msg = f"wrong magic bytes {bytes(data[:2]).hex()} (expected c301)"
            raise DecodeError(msg)
        if size < HEADER_LEN:
            msg = f"truncated header ({size} bytes)"
            raise DecodeError(msg)
        fp = bytes(data[2:HEADER_LEN])
        entry = self._entries.get(fp)
        if entry is None:
            msg = f"unknown schema fingerprint {fp.hex()}"
            raise DecodeError(msg)
        return entry

    def decode_body(self, entry: WriterEntry, data: bytes, offset: int) -> dict[str, Any]:
        """Decode the Avro body starting at ``offset`` with a writer entry.

        Args:
            entry: Writer schema and reader schema to resolve to.
            data: The whole input.
            offset: Where the body starts.

        Returns:
            The record as a dict in the reader (current) schema.

        Raises:
            DecodeError: The body is malformed, truncated or has trailing bytes,
                or an ``int`` field holds a value outside the signed 32-bit
                range (checked the same way after either reader).

        """
        datum: Any = None
        if entry.reader is None and self._fast is not None:
            datum = self._fast.decode(entry.name, entry.writer, data, offset)
        if datum is None:
            datum = self._read(entry, data, offset)
        check = self._checks.get(entry.name)
        if check is not None:
            try:
                check(datum)
            except OutOfRange as exc:
                msg = f"{entry.name}: {exc}"
                raise DecodeError(msg) from None
        return datum  # type: ignore[no-any-return]

    def _read(self, entry: WriterEntry, data: bytes, offset: int) -> dict[str, Any]:
        """Decode a body with fastavro (the authority); see :meth:`decode_body`."""
        buf = io.BytesIO(data)
        buf.seek(offset)
        try:
            datum = schemaless_reader(buf, entry.writer, entry.reader)
        except Exception as exc:
            msg = f"malformed {entry.name} body: {type(exc).__name__}: {exc}"
            raise DecodeError(msg[:500]) from exc
        if buf.tell() != len(data):
            msg = f"{len(data) - buf.tell()} trailing bytes after {entry.name} body"
            raise DecodeError(msg)
        if not isinstance(datum, dict):
            msg = f"{entry.name} body did not decode to a record"
            raise DecodeError(msg)
        return datum

    def decode_dict(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Decode to a plain dict in the current schema (the fast path).

        Args:
            data: A single-object encoding.

        Returns:
            (Avro full name, record dict).

        Raises:
            DecodeError: For anything that is not a valid encoding.

        """
        entry = self._lookup(data)
        return entry.name, self.decode_body(entry, data, HEADER_LEN)

    def decode(self, data: bytes) -> Any:
        """Decode to a runwatch dataclass.

        Args:
            data: A single-object encoding.

        Returns:
            The record, resolved to the current schema.

        Raises:
            DecodeError: For anything that is not a valid encoding; never
                another exception.

        """
        return self.decode_with(self._lookup(data), data, HEADER_LEN)

    def _lookup(self, data: bytes) -> WriterEntry:
        """Find the writer entry: a fast path for well-formed bytes, else full checks."""
        if type(data) is bytes and data[:2] == MAGIC and len(data) <= self.max_record_bytes:
            entry = self._entries.get(data[2:HEADER_LEN])
            if entry is not None:
                return entry
        return self.entry_for(data)

    def decode_with(self, entry: WriterEntry, data: bytes, offset: int) -> Any:
        """Decode the body at ``offset`` into a dataclass with a known writer entry.

        Args:
            entry: Writer schema and reader schema to resolve to.
            data: The whole input.
            offset: Where the body starts.

        Returns:
            The record.

        Raises:
            DecodeError: The body is malformed or does not build the record.

        """
        datum = self.decode_body(entry, data, offset)
        try:
            return entry.cls.from_dict(datum)
        except Exception as exc:
            msg = f"cannot build {entry.name}: {type(exc).__name__}: {exc}"
            raise DecodeError(msg[:500]) from exc

    def entry_for_schema(self, schema: Mapping[str, Any]) -> WriterEntry:
        """Return a writer entry for a schema obtained elsewhere (e.g. a registry).

        Args:
            schema: A record schema in JSON form.

        Returns:
            The known entry when its fingerprint is known, else a new entry that
            resolves it to the current schema of the same name.

        Raises:
            DecodeError: The schema does not parse or names no known record.

        """
        try:
            canonical = to_parsing_canonical_form(dict(schema))
            known = self._entries.get(fingerprint_bytes(canonical))
            if known is not None:
                return known
            parsed: Any = parse_schema(dict(schema), named_schemas={})
        except Exception as exc:
            msg = f"unusable writer schema: {type(exc).__name__}: {exc}"
            raise DecodeError(msg[:500]) from exc
        name = str(parsed.get("name")) if isinstance(parsed, dict) else ""
        cur = self.schemas.current.get(name)
        if cur is None:
            msg = f"writer schema names unknown record {name!r}"
            raise DecodeError(msg)
        cls = self._entries[cur.fingerprint].cls
        return WriterEntry(name=name, writer=parsed, reader=cur.parsed, cls=cls, version=0)

    def decode_many(self, items: Sequence[bytes]) -> list[Any]:
        """Decode a batch; failures come back in place as :class:`DecodeError`.

        Args:
            items: Single-object encodings.

        Returns:
            One record or :class:`DecodeError` per input, in order.

        """
        return decode_each(self.decode, items)

    def decode_many_dicts(
        self, items: Sequence[bytes]
    ) -> list[tuple[str, dict[str, Any]] | DecodeError]:
        """Decode a batch to dicts; failures come back in place as :class:`DecodeError`.

        Args:
            items: Single-object encodings.

        Returns:
            One (name, dict) or :class:`DecodeError` per input, in order.

        """
        return decode_each(self.decode_dict, items)

    # ------------------------------------------------------------------ info
    def header(self, name: str) -> bytes:
        """Return the 10-byte header of the current version of ``name``.

        Args:
            name: Avro full name.

        Returns:
            ``0xC3 0x01`` + fingerprint.

        """
        return self._writers[name][0]

    def current(self, name: str) -> SchemaVersion:
        """Return the current schema version of ``name``.

        Args:
            name: Avro full name.

        Returns:
            The schema version.

        """
        return self.schemas.current[name]


@lru_cache(maxsize=8)
def _cached(schema_dir: Path) -> Codec:
    return Codec(load_schema_set(schema_dir))


def load_codec(schema_dir: Path | None = None) -> Codec:
    """Return a (cached) codec over a schema directory.

    Args:
        schema_dir: Directory with the ``.avsc`` files; default
            ``$RUNWATCH_SCHEMA_DIR`` or the packaged ``schemas/avro``.

    Returns:
        The codec, shared between callers with the same directory.

    """
    from runwatch.core.codec.schemas import default_schema_dir

    return _cached((schema_dir or default_schema_dir()).resolve())
