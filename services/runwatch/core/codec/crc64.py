"""CRC-64-AVRO, the Rabin fingerprint the Avro spec uses for single-object encoding.

Implemented from the specification ("Schema Fingerprints"): the empty value
``0xc15d213aa4d7a795``, a 256-entry table, and a byte-at-a-time update. The
single-object header carries the fingerprint as 8 little-endian bytes.
"""

from __future__ import annotations

from functools import lru_cache

EMPTY64 = 0xC15D213AA4D7A795


@lru_cache(maxsize=1)
def _table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY64 & -(fp & 1))
        table.append(fp)
    return tuple(table)


def crc64_avro(data: bytes) -> int:
    """Return the CRC-64-AVRO fingerprint of ``data`` as an unsigned 64-bit int.

    Args:
        data: Bytes to fingerprint, normally a schema's Parsing Canonical Form
            encoded as UTF-8.

    Returns:
        The fingerprint, 0 <= value < 2**64.

    """
    table = _table()
    fp = EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def fingerprint_bytes(canonical_form: str) -> bytes:
    """Return the 8-byte little-endian fingerprint of a canonical schema string.

    Args:
        canonical_form: The schema's Parsing Canonical Form.

    Returns:
        The fingerprint as it appears in a single-object encoding header.

    """
    return crc64_avro(canonical_form.encode("utf-8")).to_bytes(8, "little")
