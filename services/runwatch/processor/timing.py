"""Section timers of a worker: where the time goes, logged every ``every_s`` seconds."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


class Sections:
    """Accumulated wall time and counts per named section of the worker's loop."""

    def __init__(self, every_s: float = 10.0) -> None:
        """Start empty; :meth:`maybe_log` logs and resets every ``every_s`` seconds."""
        self.every_s = every_s
        self.secs: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.since = time.perf_counter()

    @contextmanager
    def timed(self, name: str, n: int = 1) -> Iterator[None]:
        """Time a block as section ``name`` covering ``n`` items."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.secs[name] = self.secs.get(name, 0.0) + time.perf_counter() - t0
            self.counts[name] = self.counts.get(name, 0) + n

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
