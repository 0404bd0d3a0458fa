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
4. **What this process has read.** The consumer may deliver again what this
   process already read: an offset commit fails (the broker or its group
   coordinator is away) and the group then hands the partitions out again from
   the last committed offsets, while the process itself goes on. The marks of
   (1) were read when the partitions were assigned and the tokens of (2) name
   the first batch's offset ranges, not the re-read batch's, so neither caught
   it (a broker restart stored 19 of every 500 steps twice). :class:`ReadUpTo`
   remembers, per partition, where the batches handed to the writer end and
   where the current batch ends; a message before that is skipped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runwatch.core.storage.colbatch import TableColumns, offsets_token
from runwatch.core.storage.columns import COLUMNS
from runwatch.core.storage.rows import Origin

Row = tuple[Any, ...]


@dataclass(slots=True)
class FlushBatch:
    """Everything consumed since the previous flush, handed to the writer as one unit.

    Attributes:
        seq: Sequence number (batches are written and committed in this order).
        tables: Rows per table, column by column; every row ends with its
            Kafka topic/partition/offset.
        offsets: ``{(topic, partition): next offset}`` to commit once every
            row of this batch (and of every earlier batch) is stored.
        messages: The consumed messages (their bytes go into dead letters).
        ended_runs: Runs that reached a terminal state (summaries to rewrite).
    """

    seq: int = 0
    tables: dict[str, TableColumns] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    messages: list[Any] = field(default_factory=list)
    ended_runs: set[str] = field(default_factory=set)
    rows: int = 0

    def add(self, table: str, row: Row) -> None:
        """Append a row to its table."""
        cols = self.tables.get(table)
        if cols is None:
            cols = self.tables[table] = TableColumns(len(row))
        cols.append(row)
        self.rows += 1

    def columns(self, table: str) -> TableColumns:
        """Return the columns of ``table`` (created empty on first use).

        Rows appended to them directly are counted by :meth:`count`.
        """
        cols = self.tables.get(table)
        if cols is None:
            cols = self.tables[table] = TableColumns(len(COLUMNS[table]))
        return cols

    def count(self) -> int:
        """Recount :attr:`rows` from the columns and return it."""
        self.rows = sum(len(c) for c in self.tables.values())
        return self.rows

    def drop_partitions(self, lost: set[tuple[str, int]]) -> None:
        """Forget the rows and offsets of partitions this member no longer owns."""
        for cols in self.tables.values():
            cols.drop_partitions(lost)
        self.count()
        for key in lost:
            self.offsets.pop(key, None)

    def raw_of(self, topic: str, partition: int, offset: int) -> tuple[bytes, bytes | None]:
        """Return the original value and key of a consumed message (b'' when unknown)."""
        for m in self.messages:
            if m.offset() == offset and m.partition() == partition and m.topic() == topic:
                return m.value() or b"", m.key()
        return b"", None


def dedup_token(table: str, rows: Sequence[Row]) -> str:
    """Return the insert deduplication token of a batch of rows.

    Args:
        table: Target table.
        rows: The batch; each row ends with its Kafka topic, partition, offset.

    Returns:
        ``table`` plus a digest of the per-partition offset ranges and row count
        (the same as :meth:`TableColumns.token` of the same rows).
    """
    return offsets_token(table, ((r[-3], r[-2], r[-1]) for r in rows))


class SeenEvents:
    """A bounded memory of event ids and where they were first read."""

    def __init__(self, capacity: int) -> None:
        """Keep at most ``capacity`` ids (oldest forgotten first)."""
        self._capacity = capacity
        # position as one string: nothing here for the garbage collector to track
        self._seen: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        """Return how many ids are remembered."""
        return len(self._seen)

    def remember(self, entries: Iterable[tuple[str, str, int, int]]) -> None:
        """Remember ids stored earlier, oldest first: ``(event_id, topic, partition, offset)``.

        An id already remembered keeps its position (the first copy read).
        """
        for event_id, topic, partition, offset in entries:
            self.is_duplicate_at(event_id, topic, partition, offset)

    def is_duplicate(self, event_id: str, origin: Origin) -> bool:
        """Return True when the id was seen at another Kafka position.

        Re-reading the same position (a replay) is not a duplicate.
        """
        return self.is_duplicate_at(event_id, origin.topic, origin.partition, origin.offset)

    def is_duplicate_at(self, event_id: str, topic: str, partition: int, offset: int) -> bool:
        """Like :meth:`is_duplicate`, with the position given as its parts."""
        where = f"{partition}:{offset}:{topic}"
        first = self._seen.get(event_id)
        if first is None:
            self._seen[event_id] = where
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return False
        return first != where


class ReadUpTo:
    """Per partition, the offset before which this process has read every message.

    Two levels: ``handed`` (the batches given to the writer, which stores them in
    order or fails the process) and the current batch's own ``offsets``. A
    message before either was read by this process already; a revoked partition
    keeps its handed level (those rows are stored whoever owns it next) and
    loses the current batch's (those rows are dropped and read again).
    """

    __slots__ = ("handed",)

    def __init__(self) -> None:
        """Start with nothing read."""
        self.handed: dict[tuple[str, int], int] = {}

    def hand_over(self, offsets: dict[tuple[str, int], int]) -> None:
        """Note a batch given to the writer (``{(topic, partition): next offset}``)."""
        handed = self.handed
        for key, nxt in offsets.items():
            if nxt > handed.get(key, 0):
                handed[key] = nxt

    def again(self, pending: dict[tuple[str, int], int], topic: str, partition: int,
              offset: int) -> bool:
        """Note a consumed message; return whether this process had read it already.

        Either way ``pending`` (the current batch's ``{(topic, partition): next
        offset}``) comes to cover it, never moving back: a message read again is
        committed with the current batch, so the group's committed offsets catch up
        even when nothing new follows.
        """
        key = (topic, partition)
        before = pending.get(key, 0)
        if offset >= before:
            pending[key] = offset + 1
        return offset < before or offset < self.handed.get(key, 0)


def should_skip(watermarks: dict[tuple[str, str, int], int], table: str, origin: Origin) -> bool:
    """Return True when the table already holds rows at or past this offset."""
    return origin.offset <= watermarks.get((table, origin.topic, origin.partition), -1)
