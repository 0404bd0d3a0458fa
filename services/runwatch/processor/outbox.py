"""What every part of the processor shares: decoding, sending and dead-lettering.

The processor is split by responsibility (:mod:`runwatch.processor.nodes`,
:mod:`runwatch.processor.datasets`, :mod:`runwatch.processor.runs`), each part
owning its tables. They reach the outside world only through one
:class:`Outbox`: decode a message of a topic, send to a topic by its logical
name (``rw.alerts``, ``rw.internal.node-by-run``, ...) in the partition the
producers' partitioner picks, publish alerts, dead-letter with a reason. The
wiring (:mod:`runwatch.processor.app`) fills :attr:`Outbox.topics` with faust
topics; the in-memory driver (:mod:`runwatch.processor.memory`) with its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from runwatch.core.codec import Codec, DecodeError
from runwatch.core.records import Alert, DeadLetter, Source
from runwatch.core.stream.join_node import NodeAgg
from runwatch.core.stream.rekey import DataAck
from runwatch.processor.partitioning import partition_for
from runwatch.processor.timing import Sections

logger = logging.getLogger(__name__)

ALERTS = "rw.alerts"
DLQ = "rw.dlq"
NODE_BY_RUN = "rw.internal.node-by-run"
DATA_BY_RUN = "rw.internal.data-by-run"
JOB_BY_NODE = "rw.internal.job-by-node"
MANIFEST_BY_DATASET = "rw.internal.manifest-by-dataset"
OUTPUTS = (ALERTS, DLQ, NODE_BY_RUN, DATA_BY_RUN, JOB_BY_NODE, MANIFEST_BY_DATASET)
"""Logical names of the topics the processor writes (besides its timer's tick topic)."""

Clock = Callable[[], int]


def wall_ms() -> int:
    """Return the wall clock in epoch ms (the processor passes it into core)."""
    return int(time.time() * 1000)


class Sender(Protocol):
    """What the outbox needs of a topic: faust's ``Topic.send`` shape."""

    async def send(self, *, key: bytes | None = ..., value: bytes = ...,
                   partition: int | None = ...) -> Any:
        """Send one message."""


class Outbox:
    """Decode, send, publish and dead-letter for every part of one worker."""

    def __init__(self, *, codec: Codec, source: Source, allowed: dict[str, set[str]],
                 topic_prefix: str, partitions: int, partitioner: str,
                 sections: Sections, clock: Clock = wall_ms) -> None:
        """Create the outbox (its :attr:`topics` are filled by the wiring).

        Args:
            codec: The Avro codec.
            source: The processor's own ``Source`` (dead letters carry it).
            allowed: Deployed topic name → record names it may carry.
            topic_prefix: Prefix of every deployed topic name.
            partitions: Partition count of the run-keyed and internal topics.
            partitioner: The producers' partitioner (``consistent`` or ``murmur2``).
            sections: Timing sections of the worker's log line.
            clock: The processor's clock (epoch ms).
        """
        self.codec = codec
        self.source = source
        self.allowed = allowed
        self.prefix = topic_prefix
        self.partitions = partitions
        self.partitioner = partitioner
        self.sections = sections
        self.clock = clock
        self.topics: dict[str, Sender] = {}
        self.counters = {"events": 0, "alerts": 0, "dead": 0, "forwarded": 0, "unowned": 0,
                         "runs_retired": 0, "data_acks_without_state": 0}
        self._parts: dict[bytes, int] = {}

    def deployed(self, topic: str) -> str:
        """Return a deployed topic's logical name (the prefix removed)."""
        p = self.prefix
        return topic[len(p):] if p and topic.startswith(p) else topic

    def partition(self, key: bytes) -> int:
        """Return the partition the producers' partitioner picks for ``key``."""
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = partition_for(key, self.partitions, self.partitioner)
        return part

    def decode(self, topic: str, value: Any) -> Any:
        """Return the record, or a reason string when it must be dead-lettered.

        A node-by-run bundle gives a list of (aggregate or reason, its bytes).
        """
        if not isinstance(value, bytes | bytearray):
            return f"value is not bytes ({type(value).__name__})"
        name = self.deployed(topic)
        if value[:1] == b"{" and name == NODE_BY_RUN:
            return NodeAgg.unbundle(bytes(value))  # [(aggregate or reason, its bytes)]
        if value[:1] == b"{" and name == DATA_BY_RUN:  # the data agent's JSON answer
            try:
                return DataAck.from_json(bytes(value))
            except ValueError as exc:
                return str(exc)
        try:
            rec = self.codec.decode(bytes(value))
        except DecodeError as exc:
            return f"undecodable: {exc.reason}"
        allowed = self.allowed.get(name)
        if allowed is not None and rec.AVRO_NAME not in allowed:
            return f"record {rec.AVRO_NAME} not allowed on topic {name}"
        return rec

    async def dead(self, message: Any, reason: str, value: Any, key: bytes | None, *,
                   run_id: str | None = None, part: int = -1) -> None:
        """Dead-letter a message's record with ``reason``.

        Args:
            message: The message (its topic, partition and offset are kept).
            reason: Why it was rejected.
            value: The original bytes.
            key: The original key.
            run_id: The run it concerns, when known.
            part: Its line in a bundle (kept in the event id), or -1.
        """
        now = self.clock()
        self.counters["dead"] += 1
        topic, partition, offset = message.topic, message.partition, message.offset
        logger.warning("dead letter from %s[%s]@%s: %s", topic, partition, offset, reason)
        eid = f"{topic}:{partition}:{offset}" + (f"#{part}" if part >= 0 else "")
        original = bytes(value) if isinstance(value, bytes | bytearray) else repr(value).encode()
        rec = DeadLetter(event_id=eid, run_id=run_id, emitted_at_ms=now, source=self.source,
                         seq=self.counters["dead"], topic=topic, partition=partition,
                         offset=offset, reason=reason, original=original, key=key,
                         failed_at_ms=now)
        await self.topics[DLQ].send(value=self.codec.encode(rec))

    async def publish(self, outputs: list[Any]) -> None:
        """Publish a join's outputs: alerts to rw.alerts (key: dedup key), the rest to rw.dlq."""
        for out in outputs:
            if isinstance(out, Alert):
                self.counters["alerts"] += 1
                logger.info("alert %s %s run=%s cause=%s", out.status, out.detector, out.run_id,
                            out.probable_cause)
                await self.topics[ALERTS].send(key=out.dedup_key.encode(),
                                               value=self.codec.encode(out))
            else:
                self.counters["dead"] += 1
                await self.topics[DLQ].send(value=self.codec.encode(out))

    async def send(self, name: str, key: bytes, value: bytes,
                   partition: int | None = None) -> None:
        """Send to an internal topic in the partition the producers' partitioner picks.

        ``partition`` overrides it for a bundle (whose runs all hash to it).
        """
        self.counters["forwarded"] += 1
        part = self.partition(key) if partition is None else partition
        await self.topics[name].send(key=key, value=value, partition=part)
