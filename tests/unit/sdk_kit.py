"""Test scaffolding shared by the SDK tests: an in-memory transport, a hand-set clock, and
live delivery of what the SDK published to a worker driven in memory."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
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


FILE_TRANSPORT = textwrap.dedent(
    """
    class T:  # the SDK's transport protocol: each value appended, length-prefixed, to OUT
        def produce(self, t, k, v):
            with open(OUT, "ab") as f:
                f.write(len(v).to_bytes(4, "little") + v)
        def flush(self, timeout=1): return 0
        def close(self, timeout=1): return None
    """
)
"""Source of a file transport for child-process jobs (``# <file transport>`` in a script,
which defines ``OUT``); :func:`read_records` reads what it wrote."""


def child_script(source: str) -> str:
    """Return a child job's source with :data:`FILE_TRANSPORT` in place of its marker."""
    return textwrap.dedent(source).replace("# <file transport>\n", FILE_TRANSPORT.lstrip("\n"))


def read_records(path: Path) -> list[object]:
    """Decode the records a child job's :data:`FILE_TRANSPORT` wrote to ``path``."""
    codec = load_codec()
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "little")
        out.append(codec.decode(data[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return out


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
