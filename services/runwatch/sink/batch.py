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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runwatch.core.rows import Origin

Row = tuple[Any, ...]


@dataclass(slots=True)
class FlushBatch:
    """Everything consumed since the previous flush, handed to the writer as one unit.

    Attributes:
        seq: Sequence number (batches are written and committed in this order).
        tables: Rows per table; every row ends with its Kafka topic/partition/offset.
        offsets: ``{(topic, partition): next offset}`` to commit once every
            row of this batch (and of every earlier batch) is stored.
        messages: The consumed messages (their bytes go into dead letters).
        ended_runs: Runs that reached a terminal state (summaries to rewrite).
    """

    seq: int = 0
    tables: dict[str, list[Row]] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    messages: list[Any] = field(default_factory=list)
    ended_runs: set[str] = field(default_factory=set)
    rows: int = 0

    def add(self, table: str, row: Row) -> None:
        """Append a row to its table."""
        rows = self.tables.get(table)
        if rows is None:
            rows = self.tables[table] = []
        rows.append(row)
        self.rows += 1

    def drop_partitions(self, lost: set[tuple[str, int]]) -> None:
        """Forget the rows and offsets of partitions this member no longer owns."""
        for table, rows in self.tables.items():
            self.tables[table] = [r for r in rows if (r[-3], r[-2]) not in lost]
        self.rows = sum(len(r) for r in self.tables.values())
        for key in lost:
            self.offsets.pop(key, None)

    def raw_of(self, topic: str, partition: int, offset: int) -> tuple[bytes, bytes | None]:
        """Return the original value and key of a consumed message (b'' when unknown)."""
        for m in self.messages:
            if m.offset() == offset and m.partition() == partition and m.topic() == topic:
                return m.value() or b"", m.key()
        return b"", None


def dedup_token(table: str, rows: Sequence[Row]) -> str:
    """Return the insert deduplication token of a batch.

    Args:
        table: Target table.
        rows: The batch; each row ends with its Kafka topic, partition, offset.

    Returns:
        ``table`` plus a digest of the per-partition offset ranges and row count.
    """
    ranges: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        off = r[-1]
        lo_hi = ranges.get((r[-3], r[-2]))
        if lo_hi is None:
            ranges[(r[-3], r[-2])] = [off, off]
        elif off > lo_hi[1]:
            lo_hi[1] = off
        elif off < lo_hi[0]:
            lo_hi[0] = off
    text = ";".join(f"{t}/{p}/{lo}-{hi}" for (t, p), (lo, hi) in sorted(ranges.items()))
    digest = hashlib.sha256(f"{text}#{len(rows)}".encode()).hexdigest()[:32]
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
