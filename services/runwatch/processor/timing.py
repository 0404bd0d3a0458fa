"""Section timers of a worker: where the time goes, logged every ``every_s`` seconds."""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)


class _Timed:
    """One timed block (a plain context manager: the worker enters thousands a second)."""

    __slots__ = ("n", "name", "sections", "t0")

    def __init__(self, sections: Sections, name: str, n: int) -> None:
        self.sections, self.name, self.n, self.t0 = sections, name, n, 0.0

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *_exc: object) -> None:
        s, name = self.sections, self.name
        s.secs[name] = s.secs.get(name, 0.0) + time.perf_counter() - self.t0
        s.counts[name] = s.counts.get(name, 0) + self.n


class Sections:
    """Accumulated wall time and counts per named section of the worker's loop."""

    def __init__(self, every_s: float = 10.0) -> None:
        """Start empty; :meth:`maybe_log` logs and resets every ``every_s`` seconds."""
        self.every_s = every_s
        self.secs: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.since = time.perf_counter()

    def timed(self, name: str, n: int = 1) -> _Timed:
        """Time a block (``with sections.timed(...):``) as section ``name`` covering ``n`` items."""
        return _Timed(self, name, n)

    def track_gc(self) -> None:
        """Count the garbage collector's pauses as section ``gc`` (items: collections)."""
        started = [0.0]

        def on_gc(phase: str, _info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                self.secs["gc"] = self.secs.get("gc", 0.0) + time.perf_counter() - started[0]
                self.counts["gc"] = self.counts.get("gc", 0) + 1

        gc.callbacks.append(on_gc)

    def summary(self) -> str:
        """Return ``name secs/items`` per section and the share of wall time it took."""
        wall = max(time.perf_counter() - self.since, 1e-9)
        return ", ".join(f"{k} {v:.2f}s/{self.counts[k]} ({v / wall:.0%})"
                         for k, v in sorted(self.secs.items(), key=lambda kv: -kv[1]))

    def maybe_log(self) -> None:
        """Log the summary (INFO) and reset once ``every_s`` has passed."""
        if time.perf_counter() - self.since < self.every_s or not self.secs:
            return
        logger.info("sections over %.1fs: %s", time.perf_counter() - self.since, self.summary())
        self.secs, self.counts, self.since = {}, {}, time.perf_counter()
