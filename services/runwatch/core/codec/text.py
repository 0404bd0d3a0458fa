"""Text a record can carry: the deterministic repair of strings that are not UTF-8.

Avro strings are UTF-8. Python strings can hold lone surrogates (what
``os.fsdecode`` and ``surrogateescape`` make of bytes that are not UTF-8, as
in an environment variable or a path), and callers pass ``bytes`` where the
SDK takes text. Neither can be encoded, and the producers' fallback
(:meth:`runwatch.adapters.publisher.Publisher.encode_one`) repairs them
instead of dropping the whole record: bytes are decoded as UTF-8 with each
invalid sequence replaced by U+FFFD, and each lone surrogate becomes U+FFFD.
Nothing else changes (control characters, quotes and newlines are valid text
and are kept as sent).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(value: str | bytes | bytearray) -> str:
    r"""Return ``value`` as text that UTF-8 can encode (see the module docstring).

    ``b"gpu\xff0"`` and ``"gpu\udcff0"`` both give ``"gpu\ufffd0"``.
    """
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return _SURROGATE.sub(REPLACEMENT, value)


def clean_value(value: Any, *, keep_bytes: bool = False) -> Any:
    """Repair every string (and, unless ``keep_bytes``, bytes) inside ``value``."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value) if keep_bytes else clean_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return clean_record(value)
    if isinstance(value, dict):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(clean_value(v) for v in value)
    return value


def clean_record(record: Any) -> Any:
    """Return a copy of a record whose text fields UTF-8 can encode.

    Fields declared ``bytes`` keep their bytes; any other bytes value is text
    passed as bytes and is decoded.
    """
    changes = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        new = clean_value(value, keep_bytes="bytes" in str(f.type))
        if new is not value:
            changes[f.name] = new
    return dataclasses.replace(record, **changes) if changes else record
