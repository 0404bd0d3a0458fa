"""Test scaffolding shared by the SDK tests: an in-memory transport, a hand-set clock, and
live delivery of what the SDK published to a worker driven in memory."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runwatch.core.codec import load_codec

LAG_MS = 250
"""How long after its event time a live message reaches the worker."""


class ListTransport:
    """Keeps every produced message (the SDK's transport protocol)."""

    def __init__(self) -> None:
        self.out: list[tuple[str, str | None, bytes]] = []

    def produce(self, topic, key, value):
        self.out.append((topic, key, value))

    def flush(self, timeout=1.0):
        return 0

    def close(self, timeout=1.0):
        return None

    def records(self, name: str | None = None) -> list[object]:
        """Decode the produced messages, optionally only records of type ``name``."""
        codec = load_codec()
        recs = [codec.decode(v) for _, _, v in self.out]
        return [r for r in recs if name is None or type(r).__name__ == name]


class Clock:
    """A clock the test sets by hand (``runwatch.init(clock=...)``); returns ``t``."""

    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def timed(messages: Iterable[tuple[str, Any, bytes]]) -> list[tuple[int, Any]]:
    """Return captured ``(topic, key, value)`` messages with their event times, in order."""
    codec = load_codec()
    return sorted(((int(codec.decode(m[2]).emitted_at_ms), m) for m in messages),
                  key=lambda m: m[0])


def deliver_live(m: Any, wall: Clock, msgs: list[tuple[int, Any]],
                 tick_ms: int = 5_000) -> None:
    """Deliver each message ``LAG_MS`` after its event time; the timer ticks every ``tick_ms``.

    ``m`` is a :class:`~runwatch.processor.memory.MemoryProcessor` whose clock is ``wall``.
    """
    next_tick = msgs[0][0] + tick_ms
    for at, msg in msgs:
        while next_tick <= at + LAG_MS:
            wall.t = next_tick
            m.tick(next_tick)
            next_tick += tick_ms
        wall.t = at + LAG_MS
        m.feed([msg])
