"""The plain runtime: the processor's parts on one confluent-kafka consumer, no faust.

``RUNWATCH_PROCESSOR_RUNTIME=plain`` (``runwatch processor worker --runtime plain``).
The same :class:`~runwatch.processor.app.Processor` parts (run folder, node and
dataset re-keyers, outbox) as the faust worker, driven by one loop:

* **Input** — one :class:`~runwatch.adapters.kafka.BatchConsumer` (the sink's)
  subscribed to every input topic, group ``app_id``, the ``range`` assignor
  (partition *p* of every input topic goes to one member: the co-partitioned
  joins need it). Each ``consume`` batch is split by agent in arrival order:
  run topics to ``runs.batch`` (first: alerts go out before the node samples
  are routed), node topics to ``nodes.batch``, data topics to ``datasets.event``.
* **Tables** — dicts backed by the compacted changelogs faust uses (same topics,
  same raw bytes, written to the partition of the event that caused the write:
  :class:`~runwatch.adapters.changelog.ChangelogTable`). Writes are produced
  once per batch (write-behind); an assigned partition is restored from its
  changelog before its first message is processed; the global ``baselines``
  table is restored whole and then followed.
* **Commits** — input offsets are committed (every ``commit_interval_s``, on
  revocation and at stop) only up to messages every part has acked, and only
  after the producer has delivered every changelog write and output before them
  (at least once, as faust; the run folder's dedup makes a replayed event harmless).
* **Timers** — every ``timer_interval_s`` the loop checkpoints the run folder and
  runs its time-driven rules for each assigned run partition (faust sends itself
  a tick message per partition for this; the loop needs none).
* **Rebalances** — on revocation: a final checkpoint, flush and commit, then the
  revoked partitions' deferred state is dropped (as faust's ``_on_revoked``). An
  assignment restores the partitions not held before.

The parts' coroutines never wait on I/O here (sends hand records to librdkafka);
each batch runs on a private event loop with ``run_until_complete``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any, NamedTuple

from runwatch.adapters.changelog import (
    ChangelogFollower,
    ChangelogTable,
    StreamProducer,
    read_changelog,
)
from runwatch.adapters.kafka import BatchConsumer
from runwatch.adapters.settings import KafkaSettings
from runwatch.processor.app import RUN_TOPICS, Processor
from runwatch.processor.outbox import JOB_BY_NODE, MANIFEST_BY_DATASET, OUTPUTS, Clock, wall_ms
from runwatch.processor.settings import ProcessorSettings

logger = logging.getLogger(__name__)

NODE_TOPICS = ("rw.exec.node", JOB_BY_NODE)
DATA_TOPICS = ("rw.data", MANIFEST_BY_DATASET)
COMMIT_INTERVAL_S = 1.0  # as the faust worker's broker_commit_interval


class TP(NamedTuple):
    """A topic partition (what the parts compare and read ``.partition`` of)."""

    topic: str
    partition: int


class Message:
    """What the parts read of a message; ``refs`` counts the acks still owed."""

    __slots__ = ("offset", "partition", "refs", "topic", "tp")

    def __init__(self, tp: TP, offset: int) -> None:
        self.tp, self.topic, self.partition, self.offset = tp, tp.topic, tp.partition, offset
        self.refs = 1  # the stream's own ack

    def incref(self) -> None:
        """Owe one more ack (the run folder holds an event until its checkpoint)."""
        self.refs += 1


class Event:
    """What the parts read of an event (faust's ``event.message``, ``key``, ``value``)."""

    __slots__ = ("__weakref__", "key", "message", "value")

    def __init__(self, message: Message, key: bytes | None, value: bytes | None) -> None:
        self.message, self.key, self.value = message, key, value

    def ack(self) -> bool:
        """Pay one ack; return whether none is owed any more."""
        self.message.refs -= 1
        return self.message.refs <= 0


def committable(pending: dict[TP, deque[Message]]) -> dict[tuple[str, int], int]:
    """Pop each partition's leading acked messages; return the offsets that may be committed.

    A partition's offset passes a message only when it and every message before
    it owe no ack: one still held (a deferred save) holds back every later one.

    Args:
        pending: Per partition, its delivered messages in offset order (changed in place).

    Returns:
        ``{(topic, partition): next offset to read}`` for partitions that moved.
    """
    offsets: dict[tuple[str, int], int] = {}
    for tp, queue in pending.items():
        last = None
        while queue and queue[0].refs <= 0:
            last = queue.popleft()
        if last is not None:
            offsets[tp] = last.offset + 1
    return offsets


class _Topic:
    """An output topic of the outbox: ``send`` hands the record to the producer."""

    def __init__(self, producer: StreamProducer, name: str) -> None:
        self.producer, self.name = producer, name

    async def send(self, key: bytes | None = None, value: bytes = b"",
                   partition: int | None = None) -> None:
        self.producer.produce(self.name, key, value, partition)


class PlainRuntime:
    """One processor worker on confluent-kafka (see the module docstring)."""

    def __init__(self, settings: ProcessorSettings, kafka: KafkaSettings, *,
                 clock: Clock = wall_ms) -> None:
        """Wire the parts to a producer and changelog tables; nothing is consumed yet.

        Args:
            settings: Processor settings.
            kafka: Where Kafka is.
            clock: The processor's clock in epoch ms.
        """
        self.s, self.kafka = settings, kafka
        self.producer = StreamProducer(kafka, linger_ms=settings.producer_linger_ms,
                                       partitioner=settings.partitioner,
                                       client_id=f"{settings.app_id}-plain")
        self.tables: dict[str, ChangelogTable] = {}
        self.current = 0  # partition of the event being processed (tables write there)
        self.p = Processor(settings, kafka, table=self._table, clock=clock,
                           current=self._as_current)
        self.p.out.topics = {name: _Topic(self.producer, settings.topic(name))
                             for name in OUTPUTS}
        self.sections = self.p.sections
        self.agent_of: dict[str, str] = {}
        for names, agent in ((RUN_TOPICS, "runs"), (NODE_TOPICS, "nodes"), (DATA_TOPICS, "data")):
            self.agent_of.update({settings.topic(n): agent for n in names})
        self.pending: dict[TP, deque[Message]] = {}
        self.held: set[int] = set()  # table partitions restored and kept
        self.run_parts: list[int] = []  # assigned partitions of the run topics (timer ticks)
        self.follower: ChangelogFollower | None = None
        self.ready = False
        self.stopping = False
        self.broken = False  # a delivery failed: nothing more may be committed
        self.loop = asyncio.new_event_loop()
        self.consumer: BatchConsumer | None = None

    # ------------------------------------------------------------------ wiring

    def _table(self, name: str, glob: bool = False) -> ChangelogTable:
        table = ChangelogTable(name, f"{self.s.app_id}-{name}-changelog", self.producer,
                               self._partition, is_global=glob)
        self.tables[name] = table
        return table

    def _partition(self) -> int:
        return self.current

    def _as_current(self, event: Any) -> None:
        self.current = event.message.partition

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    # ------------------------------------------------------------------ loop

    def run(self) -> None:
        """Consume until SIGTERM or SIGINT, then checkpoint, commit and leave the group."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        s = self.s
        session_ms = int(s.session_timeout_s * 1000)
        self.consumer = BatchConsumer(
            self.kafka, s.app_id, sorted(self.agent_of),
            extra={"session.timeout.ms": session_ms,
                   "heartbeat.interval.ms": max(session_ms // 4, 500),
                   "partition.assignment.strategy": "range",
                   "fetch.max.bytes": s.max_fetch_bytes,
                   "client.id": f"{s.app_id}-plain"},
            on_assign=self._assigned, on_revoke=self._revoked)
        logger.info("plain runtime: consuming %d topics as group %s", len(self.agent_of), s.app_id)
        timer_at = commit_at = time.monotonic()
        sec = self.sections
        self.broken = False
        try:
            while not self.stopping:
                with sec.timed("plain.consume"):
                    msgs = self.consumer.poll_batch(s.batch_size, timeout=s.batch_within_s)
                if msgs:
                    self.deliver(msgs)
                now = time.monotonic()
                if now - timer_at >= s.timer_interval_s:
                    timer_at = now
                    with sec.timed("plain.timer"):
                        self.timer()
                if now - commit_at >= COMMIT_INTERVAL_S:
                    commit_at = now
                    with sec.timed("plain.commit"):
                        self.commit()
            logger.info("checkpoint before stop: %d run states, %d events to ack",
                        len(self.p.runs.dirty), len(self.p.runs.unacked))
            self._run(self.p.runs.checkpoint(force=True))
            self.commit()
        except BaseException:
            self.broken = True  # commit nothing more: the next owner replays from the last commit
            raise
        finally:
            self.consumer.close()  # leaves the group (its revocation commits nothing new)
            if self.follower is not None:
                self.follower.close()
            self.loop.close()
        logger.info("plain runtime stopped: %s", self.p.counters)

    def _stop(self, signum: int, _frame: Any) -> None:
        logger.info("signal %d: stopping", signum)
        self.stopping = True

    def deliver(self, msgs: list[Any]) -> None:
        """Hand one consumed batch to the parts, each agent's share in arrival order."""
        runs: list[Event] = []
        nodes: list[Event] = []
        data: list[Event] = []
        by = {"runs": runs, "nodes": nodes, "data": data}
        agent_of, pending = self.agent_of, self.pending
        tps: dict[tuple[str, int], TP] = {}
        for m in msgs:
            topic, part = m.topic(), m.partition()
            tp = tps.get((topic, part))
            if tp is None:
                tp = tps[(topic, part)] = TP(topic, part)
            msg = Message(tp, m.offset())
            queue = pending.get(tp)
            if queue is None:
                queue = pending[tp] = deque()
            queue.append(msg)
            by[agent_of[topic]].append(Event(msg, m.key(), m.value()))
        p = self.p
        if runs:  # first: alerts go out before the node samples' (larger) share is routed
            self._run(p.runs.batch(runs))  # deferred saves hold their acks until a checkpoint
            for ev in runs:
                ev.ack()
        if nodes:
            self._run(p.nodes.batch(nodes))
            for ev in nodes:
                ev.ack()
        if data:
            self._run(self._data(data))
        self.write_behind()

    async def _data(self, events: list[Event]) -> None:
        for ev in events:
            self._as_current(ev)
            await self.p.datasets.event(ev)
            ev.ack()

    def write_behind(self) -> None:
        """Produce every table's writes since the last batch to its changelog."""
        for table in self.tables.values():
            table.write_behind()

    def timer(self) -> None:
        """Checkpoint when due, then run the time-driven rules of every assigned run partition."""
        runs = self.p.runs
        self._run(runs.checkpoint())
        now = self.p.out.clock()
        for part in self.run_parts:
            self.current = part
            self._run(runs.tick(part, now))
        if self.follower is not None:
            self.follower.poll()
        self.write_behind()

    def commit(self) -> None:
        """Commit offsets up to the messages every part has acked, once their writes landed."""
        self.write_behind()
        self.producer.flush()  # changelogs and outputs first: raises when one was not delivered
        offsets = committable(self.pending)
        if offsets and self.consumer is not None:
            self.consumer.commit_offsets(offsets)

    # ------------------------------------------------------------------ rebalances

    def _revoked(self, parts: list[Any]) -> None:
        """Checkpoint and commit before the partitions go, then forget their deferred state."""
        if not parts:
            return
        if not self.broken:
            self._run(self.p.runs.checkpoint(force=True))
            self.commit()
        revoked = {TP(tp.topic, tp.partition) for tp in parts}
        self.p.runs.revoked(revoked)
        for tp in revoked:
            self.pending.pop(tp, None)
        logger.info("revoked %d partitions", len(revoked))

    def _assigned(self, parts: list[Any]) -> None:
        """Restore the table partitions not held before, then let their messages through."""
        t0 = time.monotonic()
        wanted = {tp.partition for tp in parts}
        dropped = self.held - wanted
        for table in self.tables.values():
            if not table.is_global and dropped:
                table.drop(dropped)
        new = sorted(wanted - self.held)
        restored = 0
        for table in self.tables.values():
            if table.is_global:
                if self.follower is None:  # once: then followed
                    records, ends = read_changelog(self.kafka, table.topic,
                                                   range(self.s.partitions))
                    table.load(records)
                    restored += len(records)
                    self.follower = ChangelogFollower(self.kafka, table, ends)
            elif new:
                records, _ = read_changelog(self.kafka, table.topic, new)
                table.load(records)
                restored += len(records)
        self.held = wanted
        runs = {self.s.topic(n) for n in RUN_TOPICS}
        self.run_parts = sorted({tp.partition for tp in parts if tp.topic in runs})
        logger.info("assigned %d partitions (table partitions %s restored: %d records in %.2f s)",
                    len(parts), new, restored, time.monotonic() - t0)
        if not self.ready and parts:
            self.ready = True
            logger.info("Ready: plain runtime, %d partitions assigned", len(parts))

