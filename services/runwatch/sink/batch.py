"""Per-table batches of the sink (no I/O).

Idempotency, as designed here:

1. **High-water marks.** Every raw row carries its Kafka topic/partition/offset,
   and materialized views keep ``sink_watermarks`` (largest stored offset per
   table and partition). On start and after every rebalance the sink reads
   them and skips what is already stored, so a crash between an insert and
   its offset commit never stores a row twice.
2. **Insert deduplication tokens.** Each insert carries a token derived from the
   table and the topic/partition/offset ranges it holds; a retried batch (for
   example after a timeout whose insert did land) is dropped by the server and
   so are its materialized-view blocks
   (``deduplicate_blocks_in_dependent_materialized_views``).
3. **event_id.** Producer duplicates (same ``event_id`` at another offset) are
   dropped within a bounded window; ReplacingMergeTree keys are the backstop.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from runwatch.core.rows import Origin

Row = tuple[Any, ...]


@dataclass(slots=True)
class Pending:
    """Rows of one table waiting for an insert, with where each came from."""

    rows: list[Row] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    raw: list[tuple[bytes, bytes | None]] = field(default_factory=list)

    def add(self, row: Row, origin: Origin, value: bytes, key: bytes | None) -> None:
        """Append a row."""
        self.rows.append(row)
        self.origins.append(origin)
        self.raw.append((value, key))


def dedup_token(table: str, origins: list[Origin]) -> str:
    """Return the insert deduplication token of a batch.

    Args:
        table: Target table.
        origins: Kafka coordinates of the batch's rows.

    Returns:
        ``table`` plus a digest of the per-partition offset ranges and row count.
    """
    ranges: dict[tuple[str, int], list[int]] = {}
    for o in origins:
        lo_hi = ranges.setdefault((o.topic, o.partition), [o.offset, o.offset])
        lo_hi[0] = min(lo_hi[0], o.offset)
        lo_hi[1] = max(lo_hi[1], o.offset)
    text = ";".join(f"{t}/{p}/{lo}-{hi}" for (t, p), (lo, hi) in sorted(ranges.items()))
    digest = hashlib.sha256(f"{text}#{len(origins)}".encode()).hexdigest()[:32]
    return f"{table}:{digest}"


class SeenEvents:
    """A bounded memory of event ids and where they were first read."""

    def __init__(self, capacity: int) -> None:
        """Keep at most ``capacity`` ids (oldest forgotten first)."""
        self._capacity = capacity
        self._seen: OrderedDict[str, Origin] = OrderedDict()

    def is_duplicate(self, event_id: str, origin: Origin) -> bool:
        """Return True when the id was seen at another Kafka position.

        Re-reading the same position (a replay) is not a duplicate.
        """
        first = self._seen.get(event_id)
        if first is None:
            self._seen[event_id] = origin
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return False
        return first != origin


def should_skip(watermarks: dict[tuple[str, str, int], int], table: str, origin: Origin) -> bool:
    """Return True when the table already holds rows at or past this offset."""
    return origin.offset <= watermarks.get((table, origin.topic, origin.partition), -1)
