"""Test scaffolding shared by the SDK tests: an in-memory transport and a hand-set clock."""

from __future__ import annotations

from runwatch.core.codec import load_codec


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
