"""Avro single-object codec for runwatch records.

``load_codec()`` returns a cached :class:`Codec`; ``Codec.decode`` raises only
:class:`DecodeError`.
"""

from runwatch.core.codec.codec import (
    HEADER_LEN,
    MAGIC,
    Codec,
    DecodeError,
    EncodeError,
    WriterEntry,
    load_codec,
)
from runwatch.core.codec.crc64 import crc64_avro, fingerprint_bytes
from runwatch.core.codec.schemas import (
    SchemaLoadError,
    SchemaSet,
    SchemaVersion,
    default_schema_dir,
    load_schema_set,
)

__all__ = [
    "HEADER_LEN",
    "MAGIC",
    "Codec",
    "DecodeError",
    "EncodeError",
    "SchemaLoadError",
    "SchemaSet",
    "SchemaVersion",
    "WriterEntry",
    "crc64_avro",
    "default_schema_dir",
    "fingerprint_bytes",
    "load_codec",
    "load_schema_set",
]
