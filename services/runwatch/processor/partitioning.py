"""Partition choice matching the producers' partitioner, for forwarding to internal topics."""

from __future__ import annotations

import zlib


def _murmur2(data: bytes) -> int:
    length = len(data)
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    i = 0
    while length - i >= 4:
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
        i += 4
    rest = length - i
    if rest == 3:
        h ^= data[i + 2] << 16
    if rest >= 2:
        h ^= data[i + 1] << 8
    if rest >= 1:
        h ^= data[i]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int, partitioner: str) -> int:
    """Return the partition a producer with ``partitioner`` picks for ``key``.

    Args:
        key: Message key.
        partitions: Partition count.
        partitioner: ``consistent`` (librdkafka CRC32) or ``murmur2`` (Java).

    Returns:
        The partition index.

    """
    if partitioner == "murmur2":
        return (_murmur2(key) & 0x7FFFFFFF) % partitions
    return zlib.crc32(key) % partitions
