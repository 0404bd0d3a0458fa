"""Offline replay: what producers published, through the processor's own agents in memory.

The messages the simulator's producers publish (the SDK, ``data.report``,
``emit``, the node agent, captured by a
:class:`~runwatch.adapters.publisher.CaptureTransport`) are handed to a
:class:`~runwatch.processor.memory.MemoryProcessor`: the live worker's
``runs``, ``nodes`` and ``data`` agents, its keys, partitions, tables, re-keying
through the internal topics, join, rules and alert lifecycle. Nothing is
routed here. No Kafka and no wall clock: the worker's clock is the event time
the replay has reached, and the timer's rules (stall, missing data reports,
queue deadline, quiet-time resolution) run every :data:`TICK_MS` of event
time, as a live worker's timer runs them. Used by ``runwatch simulate
--offline`` and the unit tests to score scenarios without services.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

TICK_MS = 5_000
"""Event time between two runs of the timer's rules in a replay."""
Message = tuple[str, bytes | str | None, bytes]


def default_settings() -> ProcessorSettings:
    """Return the processor's shipped defaults, the allow-list set to the simulator's registry."""
    from runwatch.sim.scenarios import ALLOWED_IMAGE_PREFIX

    return ProcessorSettings(save_interval_s=0, image_allow_list=[ALLOWED_IMAGE_PREFIX])


def as_messages(records: Iterable[Any]) -> list[Message]:
    """Return decoded records as the producers published them: (topic, key, encoded value)."""
    from runwatch.adapters.publisher import default_topics, record_key

    codec, topics = load_codec(), default_topics()
    return [(topics[type(r).__name__], record_key(r), codec.encode(r)) for r in records]


def replay(messages: Iterable[Message], settings: ProcessorSettings | None = None) -> list[Alert]:
    """Return the alerts of :func:`replay_worker`."""
    return replay_worker(messages, settings).alerts


def replay_worker(messages: Iterable[Message], settings: ProcessorSettings | None = None, *,
                  restore_each_batch: bool = False) -> MemoryProcessor:
    """Feed published messages to an in-memory worker in event-time order; return the worker.

    Producers publish from their own threads and batches (the SDK's records
    of a second may be captured after the node agent's of the next minute in
    a simulation that runs faster than real time); live, each reaches the
    processor within moments of its event time. The feed is therefore in
    event-time order (stable: messages of one instant keep their publication
    order), a slice of :data:`TICK_MS` at a time, each slice followed by the
    timer's tick.

    Args:
        messages: ``(topic, key, value)`` as a CaptureTransport keeps them.
        settings: Processor settings (default: :func:`default_settings`).
        restore_each_batch: Restore run states from their JSON before every
            batch (see :class:`~runwatch.processor.memory.MemoryProcessor`).

    Returns:
        The worker: its ``alerts``, ``dead`` letters, ``outputs`` (both, in
        order) and its parts' state.

    """
    codec = load_codec()
    timed: list[tuple[int, Message]] = []
    for msg in messages:
        try:
            at = int(codec.decode(msg[2]).emitted_at_ms)
        except Exception:  # noqa: BLE001 - undecodable: the worker dead-letters it, in place
            at = timed[-1][0] if timed else 0
        timed.append((at, msg))
    timed.sort(key=lambda x: x[0])
    reached = [timed[0][0] if timed else 0]
    worker = MemoryProcessor(settings or default_settings(), clock=lambda: reached[0],
                             restore_each_batch=restore_each_batch)
    chunk: list[Message] = []
    next_tick = reached[0]
    for at, msg in timed:
        if at >= next_tick:
            if chunk:
                worker.feed(chunk)
                chunk = []
            reached[0] = max(reached[0], at)
            worker.tick(reached[0])
            next_tick = at + TICK_MS
        reached[0] = max(reached[0], at)
        chunk.append(msg)
    if chunk:
        worker.feed(chunk)
    worker.tick(reached[0])
    return worker
