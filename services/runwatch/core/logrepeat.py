"""Collapse a log line that repeats: the first is written, then at most one per window.

A client library that cannot reach its broker logs the same error for each connection
attempt (aiokafka: about 780 lines a second, 75,000 lines for a 96 s outage). A
:class:`RepeatWindow` decides, per kind of line, which to write: the first, then the first
after each window, which carries how many were left out since the last one written.
Pure: the caller passes the line's time.
"""

from __future__ import annotations

from collections.abc import Hashable


class RepeatWindow:
    """Per key: the first line, then at most one per ``window_ms``, with the count left out."""

    def __init__(self, window_ms: int) -> None:
        """Start with no line seen.

        Args:
            window_ms: The least time between two lines of one key that are written.

        """
        self.window_ms = window_ms
        self._next: dict[Hashable, int] = {}  # key -> when its next line may be written
        self._left_out: dict[Hashable, int] = {}  # key -> lines left out since the last written

    def admit(self, key: Hashable, now_ms: int) -> int | None:
        """Decide on one line of ``key`` at ``now_ms``.

        Args:
            key: What makes two lines the same kind (the logger and message template).
            now_ms: The line's time (epoch ms).

        Returns:
            None to leave the line out; else how many lines of ``key`` were left out
            since the last one written (0 for the first).

        """
        if now_ms < self._next.get(key, now_ms):
            self._left_out[key] = self._left_out.get(key, 0) + 1
            return None
        self._next[key] = now_ms + self.window_ms
        return self._left_out.pop(key, 0)

    def left_out(self) -> int:
        """Return how many lines are left out and not yet reported, all keys together."""
        return sum(self._left_out.values())
