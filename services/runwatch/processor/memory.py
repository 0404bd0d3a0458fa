"""The processor's agents driven in memory: no broker, the exact code live traffic runs.

Like Kafka Streams' ``TopologyTestDriver``: what producers publish (the SDK,
``data.report``, ``emit`` or the agent, through a
:class:`~runwatch.adapters.publisher.CaptureTransport`) is handed, in order, to
the agent that reads its topic (``runs``, ``nodes`` or ``data``) of a real
:class:`~runwatch.processor.app.Processor`; what the agents send to internal
topics (``rw.internal.*``) is handed back to the agent that reads those, in
the order it was sent; alerts and dead letters are decoded and kept. Tables
are dicts. Only the transport is replaced: keys, partitions, decoding, the
join, the rules and the alert lifecycle are the worker's own. The
processor's clock is the wall clock (as live) unless a clock is given (an
offline replay passes the event time it has reached); :meth:`MemoryProcessor.tick`
runs the timer's rules at a given time.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import weakref
from collections import deque
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any

from faust.types import TP

from runwatch.adapters.settings import KafkaSettings
from runwatch.core.records import Alert, DeadLetter
from runwatch.processor.app import Processor
from runwatch.processor.outbox import ALERTS, DLQ, JOB_BY_NODE, MANIFEST_BY_DATASET, Clock, wall_ms
from runwatch.processor.settings import ProcessorSettings

NODE_TOPICS = ("rw.exec.node", JOB_BY_NODE)
DATA_TOPICS = ("rw.data", MANIFEST_BY_DATASET)


def _agent(topic: str) -> str:
    return "nodes" if topic in NODE_TOPICS else "data" if topic in DATA_TOPICS else "runs"


class _Message:
    """What the agents read of a faust message (weak-referenceable, like faust's)."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.tp = TP(topic, partition)
        self.refs = 1

    def incref(self) -> None:
        self.refs += 1


class _Event:
    """What the agents read of a faust event."""

    def __init__(self, message: _Message, key: bytes | None, value: bytes) -> None:
        self.message, self.key, self.value = message, key, value

    def ack(self) -> bool:
        self.message.refs -= 1
        return self.message.refs <= 0


class _Topic:
    """An output topic: what is sent goes back on the driver's queue."""

    def __init__(self, driver: MemoryProcessor, name: str) -> None:
        self.driver, self.name = driver, name

    async def send(self, key: bytes | None = None, value: bytes = b"",
                   partition: int | None = None) -> None:
        self.driver.sent(self.name, key, value, partition)


class MemoryProcessor:
    """One processor worker fed from memory (see the module docstring)."""

    def __init__(self, settings: ProcessorSettings | None = None,
                 data_dir: str | Path | None = None, clock: Clock = wall_ms, *,
                 restore_each_batch: bool = False) -> None:
        """Build the worker (no broker is contacted).

        Args:
            settings: Processor settings (default: the shipped defaults, with
                every run state saved on every batch).
            data_dir: faust's data directory (default: a fresh temporary one,
                removed when the driver is garbage-collected or at exit).
            clock: The processor's clock (default: the wall clock, as live).
            restore_each_batch: Restore every run's state from its table (JSON)
                before each batch, as a worker restarted after every batch would.
        """
        base = settings or ProcessorSettings(save_interval_s=0)
        if data_dir is None:
            data = Path(tempfile.mkdtemp(prefix="rwmem-"))
            weakref.finalize(self, shutil.rmtree, data, ignore_errors=True)
        else:
            data = Path(data_dir)
        self.settings = base.model_copy(update={"data_dir": data, "topic_prefix": ""})
        p = self.p = Processor(self.settings, KafkaSettings(bootstrap_servers="127.0.0.1:1"),
                               table=lambda name, glob=False: {}, clock=clock)
        p.out.topics = {name: _Topic(self, name) for name in p.out.topics}
        self.codec = p.out.codec
        self.queue: deque[tuple[str, bytes | None, bytes, int | None]] = deque()
        self.offsets: dict[tuple[str, int], int] = {}
        self.alerts: list[Alert] = []
        self.dead: list[DeadLetter] = []
        self.internal: list[tuple[str, bytes | None, bytes, int | None]] = []
        self.outputs: list[Alert | DeadLetter] = []  # alerts and dead letters, in order
        self.restore_each_batch = restore_each_batch
        self.parked: dict[str, list[tuple[str, bytes | None, bytes, int | None]]] = {}
        # One private event loop for the driver's life (as the plain runtime's per-batch
        # ``run_until_complete``): a loop per delivery cost more than the delivery.
        self.loop = asyncio.new_event_loop()
        weakref.finalize(self, self.loop.close)

    def _run(self, drain: Coroutine[Any, Any, None]) -> None:
        self.loop.run_until_complete(drain)

    def sent(self, topic: str, key: bytes | None, value: bytes, partition: int | None) -> None:
        """Take what an agent sent: outputs are kept, internal topics go back on the queue."""
        if topic == ALERTS:
            self.alerts.append(self.codec.decode(value))
            self.outputs.append(self.alerts[-1])
        elif topic == DLQ:
            self.dead.append(self.codec.decode(value))
            self.outputs.append(self.dead[-1])
        else:
            self.internal.append((topic, key, value, partition))
            held = self.parked.get(topic)
            (self.queue if held is None else held).append((topic, key, value, partition))

    def park(self, topic: str) -> None:
        """Hold back what the agents send to an internal topic until :meth:`release`.

        A slow round trip through that topic, as live traffic can have one (a busy
        partition, a worker restarting): everything else goes on being delivered.
        """
        self.parked.setdefault(topic, [])

    def release(self, topic: str) -> None:
        """Deliver, in order, what :meth:`park` held back of ``topic``; then drain."""
        self.queue.extend(self.parked.pop(topic, []))
        self._run(self._drain())

    def feed(self, messages: Iterable[tuple[str, bytes | str | None, bytes]]) -> None:
        """Hand published ``(topic, key, value)`` messages to the agents, then drain.

        Args:
            messages: As a :class:`~runwatch.adapters.publisher.CaptureTransport`
                keeps them (topic names without prefix).
        """
        for topic, key, value in messages:
            k = key.encode() if isinstance(key, str) else key
            self.queue.append((topic, k, value, None))
        self._run(self._drain())

    def tick(self, at_ms: int) -> None:
        """Run the timer's rules on every partition at ``at_ms`` (or the wall clock, if later)."""
        for part in range(self.settings.partitions):
            self.queue.append((self.p.tick_topic, b"tick", str(at_ms).encode(), part))
        self._run(self._drain())

    def _event(self, topic: str, key: bytes | None, value: bytes, part: int | None) -> _Event:
        if part is None:
            part = self.p.out.partition(key) if key else 0
        slot = (topic, part)
        off = self.offsets.get(slot, 0)
        self.offsets[slot] = off + 1
        return _Event(_Message(topic, part, off), key, value)

    async def _drain(self) -> None:
        """Deliver queued messages in order; consecutive ones of one agent form a batch."""
        p = self.p
        while self.queue:
            agent = _agent(self.queue[0][0])
            batch: list[_Event] = []
            while self.queue and len(batch) < self.settings.batch_size:
                if _agent(self.queue[0][0]) != agent:
                    break
                batch.append(self._event(*self.queue.popleft()))
            if self.restore_each_batch:
                p.runs.cache.clear()  # the next load parses the saved JSON
            if agent == "nodes":
                await p.nodes.batch(batch)
            elif agent == "data":
                for ev in batch:
                    await p.datasets.event(ev)
            else:
                await p.runs.batch(batch)  # as the runs agent: deferred saves, checkpoints
                for ev in batch:
                    ev.ack()
