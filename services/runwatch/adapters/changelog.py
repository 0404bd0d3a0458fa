"""Kafka I/O of the plain processor runtime: a producer, changelog-backed tables, their restore.

The plain runtime (:mod:`runwatch.processor.plain`) keeps each table as a dict
in memory with its compacted changelog topic as the durable copy, in faust's
layout: topic ``{app_id}-{table}-changelog``, raw key and value bytes, each
write in the partition of the input event that caused it. A worker of either
runtime therefore restores the other's state.

* :class:`StreamProducer` — confluent-kafka, ``acks=all`` and idempotence;
  :meth:`StreamProducer.flush` raises :class:`DeliveryFailed` when a record
  was not delivered (the runtime then commits nothing and stops: its input
  is read again from the last commit, at least once).
* :class:`ChangelogTable` — the dict plus its changelog: writes are
  buffered and produced by :meth:`ChangelogTable.write_behind` (once per
  batch: the last value of a key wins); :meth:`ChangelogTable.restore`
  reads partitions back from the topic.
* :class:`ChangelogFollower` — keeps a global table (every partition, on
  every worker) up to date with what the other workers write.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from runwatch.adapters.settings import KafkaSettings

logger = logging.getLogger(__name__)

WRITER = "rw-writer"
"""Header naming the worker that wrote a changelog record (a follower skips its own)."""


class DeliveryFailed(RuntimeError):
    """A record the runtime produced was not delivered: nothing may be committed past it."""


class StreamProducer:
    """The runtime's one producer: outputs, internal topics and changelogs."""

    def __init__(self, kafka: KafkaSettings, *, linger_ms: float, partitioner: str,
                 client_id: str) -> None:
        """Create the producer.

        Args:
            kafka: Where Kafka is.
            linger_ms: How long to wait to fill a batch.
            partitioner: ``consistent`` (CRC32) or ``murmur2``, for records sent without
                a partition (alerts, dead letters).
            client_id: The client id (logs, broker metrics).
        """
        conf: dict[str, Any] = dict(kafka.client_config())
        conf.update({
            "acks": "all",  # a cluster's min.insync.replicas guards every write
            "enable.idempotence": True,
            "linger.ms": linger_ms,
            "batch.size": 256 * 1024,
            "queue.buffering.max.messages": 1_000_000,
            "partitioner": "murmur2_random" if partitioner == "murmur2" else "consistent_random",
            "client.id": client_id,
            "on_delivery": self._delivered,
        })
        self._producer = Producer(conf)
        self.failed: list[str] = []
        self.writer_id = uuid.uuid4().hex.encode()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.failed.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                partition: int | None = None, *, mark: bool = False) -> None:
        """Hand a record to librdkafka (waits while its queue is full; never drops one).

        Args:
            topic: Deployed topic name.
            key: Record key.
            value: Record value (None: a tombstone).
            partition: Partition (None: the partitioner's choice by key).
            mark: Add the :data:`WRITER` header (changelogs of global tables).
        """
        kw: dict[str, Any] = {} if partition is None else {"partition": partition}
        if mark:
            kw["headers"] = [(WRITER, self.writer_id)]
        while True:
            try:
                self._producer.produce(topic, value, key, **kw)
                break
            except BufferError:
                self._producer.poll(0.05)  # serves delivery reports, frees the queue
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every record handed over is delivered.

        Raises:
            DeliveryFailed: A record failed, or some are still undelivered after the timeout.
        """
        left = self._producer.flush(timeout_s)
        if self.failed or left:
            what = "; ".join(self.failed[:5]) or f"{left} records undelivered after {timeout_s} s"
            raise DeliveryFailed(what)


class ChangelogTable:
    """A table of bytes → bytes in memory, its writes produced to a compacted changelog.

    Reads and writes are a dict's. A write goes to the changelog partition that
    ``current_partition()`` names when it is made (the partition of the event
    being processed, as in faust), once :meth:`write_behind` runs.
    """

    def __init__(self, name: str, topic: str, producer: StreamProducer,
                 current_partition: Callable[[], int], *, is_global: bool = False) -> None:
        """Create an empty table.

        Args:
            name: The table's name (logs).
            topic: Its changelog topic.
            producer: The runtime's producer.
            current_partition: The partition a write goes to.
            is_global: Every worker holds every partition (its writes carry :data:`WRITER`).
        """
        self.name, self.topic, self.is_global = name, topic, is_global
        self.producer = producer
        self.current_partition = current_partition
        self.data: dict[bytes, bytes] = {}
        self.part_of: dict[bytes, int] = {}
        self.pending: dict[bytes, None] = {}  # keys written since the last write_behind

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        """Return a key's value (``default`` when absent)."""
        return self.data.get(key, default)

    def __getitem__(self, key: bytes) -> bytes:
        return self.data[key]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.data[key] = value
        self.part_of[key] = self.current_partition()
        self.pending[key] = None

    def __delitem__(self, key: bytes) -> None:
        """Delete a key: a tombstone goes to the changelog partition it was written to."""
        del self.data[key]
        self.pending[key] = None

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.data)

    def keys(self) -> Iterable[bytes]:
        """Return the keys of every partition this worker holds."""
        return self.data.keys()

    def write_behind(self) -> int:
        """Produce the writes since the last call (the newest value per key); return how many."""
        if not self.pending:
            return 0
        data, part_of, produce = self.data, self.part_of, self.producer.produce
        for key in self.pending:
            value = data.get(key)
            part = part_of[key] if value is not None else part_of.pop(key)
            produce(self.topic, key, value, part, mark=self.is_global)
        n = len(self.pending)
        self.pending = {}
        return n

    def load(self, records: Iterable[tuple[int, bytes, bytes | None]]) -> None:
        """Apply restored changelog records (partition, key, value; None deletes)."""
        for part, key, value in records:
            if value is None:
                self.data.pop(key, None)
                self.part_of.pop(key, None)
            else:
                self.data[key] = value
                self.part_of[key] = part

    def drop(self, partitions: set[int]) -> int:
        """Forget the keys of partitions this worker no longer holds; return how many."""
        gone = [k for k, p in self.part_of.items() if p in partitions]
        for key in gone:
            self.data.pop(key, None)
            del self.part_of[key]
            self.pending.pop(key, None)
        return len(gone)


def _consumer(kafka: KafkaSettings, group: str) -> Consumer:
    conf: dict[str, Any] = dict(kafka.client_config())
    conf.update({"group.id": group, "enable.auto.commit": False,
                 "enable.partition.eof": False, "auto.offset.reset": "earliest"})
    return Consumer(conf)


def read_changelog(kafka: KafkaSettings, topic: str, partitions: Iterable[int], *,
                   timeout_s: float = 120.0) -> tuple[list[tuple[int, bytes, bytes | None]],
                                                      dict[int, int]]:
    """Read partitions of a changelog from their start to their end now.

    Args:
        kafka: Where Kafka is.
        topic: The changelog topic.
        partitions: Its partitions to read.
        timeout_s: Bound on the whole read.

    Returns:
        The records in order (partition, key, value) and each partition's end offset.

    Raises:
        TimeoutError: The end was not reached in time.
    """
    consumer = _consumer(kafka, f"{topic}-restore")
    try:
        ends: dict[int, int] = {}
        todo: list[TopicPartition] = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
            if high > low:
                todo.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        out: list[tuple[int, bytes, bytes | None]] = []
        if not todo:
            return out, ends
        consumer.assign(todo)
        waiting = {tp.partition for tp in todo}
        deadline = time.monotonic() + timeout_s
        while waiting:
            if time.monotonic() > deadline:
                msg = f"changelog {topic}: partitions {sorted(waiting)} not read to their end"
                raise TimeoutError(msg)
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                err, part, off, key = m.error(), m.partition(), m.offset(), m.key()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        logger.warning("changelog %s: %s", topic, err)
                    continue
                if part is None or off is None or part not in waiting or off >= ends[part]:
                    continue
                if key is not None:
                    out.append((part, key, m.value()))
                if off >= ends[part] - 1:
                    waiting.discard(part)
            for tp in consumer.position([TopicPartition(topic, p) for p in list(waiting)]):
                if tp.offset >= ends[tp.partition]:  # compaction removed the last offsets
                    waiting.discard(tp.partition)
        return out, ends
    finally:
        consumer.close()


class ChangelogFollower:
    """Reads a global table's changelog on from where its restore ended.

    Records this worker wrote (its :data:`WRITER` header) are skipped: the table
    holds them already, perhaps newer.
    """

    def __init__(self, kafka: KafkaSettings, table: ChangelogTable, ends: dict[int, int]) -> None:
        """Start following ``table``'s changelog at ``ends`` (partition → next offset)."""
        self.table = table
        self.consumer = _consumer(kafka, f"{table.topic}-follow")
        self.consumer.assign([TopicPartition(table.topic, p, o) for p, o in ends.items()])

    def poll(self) -> int:
        """Apply what others wrote since the last call (never waits); return how many."""
        n = 0
        own = self.table.producer.writer_id
        for m in self.consumer.consume(num_messages=1000, timeout=0):
            part, key = m.partition(), m.key()
            if m.error() is not None or part is None or key is None:
                continue
            headers: Any = m.headers() or ()
            if any(k == WRITER and v == own for k, v in headers):
                continue
            self.table.load([(part, key, m.value())])
            n += 1
        return n

    def close(self) -> None:
        """Close the follower's consumer."""
        self.consumer.close()
