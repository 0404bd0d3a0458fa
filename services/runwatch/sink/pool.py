"""``runwatch sink --processes N``: N sink processes in one consumer group.

Decoding and column building hold the GIL, so one sink process uses one core.
:class:`SinkPool` starts N child processes (``spawn``), each a complete
:class:`~runwatch.sink.service.Sink` in the same consumer group: Kafka splits the
partitions between them, each child inserts its own batches and commits its own
offsets only after they are stored, and the insert deduplication tokens
(topic/partition/offset ranges) stay valid whichever child writes a range.

The parent supervises: SIGTERM/SIGINT are forwarded to every child (each
flushes and commits, then exits 0); a child that exits on its own, or dies,
stops the others and makes the parent exit non-zero, naming the child.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from typing import Any

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sink.settings import SinkSettings

logger = logging.getLogger(__name__)


def _child(
    index: int, settings: dict[str, Any], kafka: dict[str, Any], clickhouse: dict[str, Any]
) -> None:
    """Body of one child process: run a sink until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s sink[{index}] %(levelname)s %(name)s %(message)s"
    )
    from runwatch.sink.service import Sink  # imported in the child only

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    Sink(
        SinkSettings(**settings), KafkaSettings(**kafka), ClickHouseSettings(**clickhouse), stop
    ).run()


def describe_exit(code: int | None) -> str:
    """Return a process exit code in words.

    Args:
        code: ``Process.exitcode``: None while running, negative for a signal.

    Returns:
        For example ``"exit code 1"`` or ``"signal SIGKILL"``.
    """
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class SinkPool:
    """N sink child processes in one consumer group, supervised."""

    def __init__(
        self,
        processes: int,
        settings: SinkSettings,
        kafka: KafkaSettings,
        clickhouse: ClickHouseSettings,
        stop_timeout_s: float = 120.0,
    ) -> None:
        """Prepare (not start) the children.

        Args:
            processes: Number of sink processes (at least 1).
            settings: Sink settings (one group id for all).
            kafka: Kafka settings.
            clickhouse: ClickHouse settings.
            stop_timeout_s: How long a stopping child may take to flush before it is killed.
        """
        if processes < 1:
            msg = f"--processes must be at least 1, got {processes}"
            raise ValueError(msg)
        self.stop_timeout_s = stop_timeout_s
        ctx = multiprocessing.get_context("spawn")
        args = (settings.model_dump(), kafka.model_dump(), clickhouse.model_dump())
        self.children = [
            ctx.Process(target=_child, args=(i, *args), name=f"runwatch-sink-{i}", daemon=False)
            for i in range(processes)
        ]
        self.failed: list[tuple[int, int | None]] = []

    def start(self) -> None:
        """Start every child."""
        for child in self.children:
            child.start()
        logger.info(
            "sink pool started %d processes: pids %s",
            len(self.children),
            ",".join(str(c.pid) for c in self.children),
        )

    def check(self, timeout: float = 0.0) -> bool:
        """Wait up to ``timeout`` s for a child to end; record children that ended.

        Returns:
            True while every child runs; False once one has ended (see :attr:`failed`).
        """
        live = [c.sentinel for c in self.children if c.exitcode is None]
        if live and timeout > 0:
            multiprocessing.connection.wait(live, timeout)
        ok = True
        for i, child in enumerate(self.children):
            if child.exitcode is not None:
                ok = False
                if all(i != j for j, _ in self.failed):
                    self.failed.append((i, child.exitcode))
                    logger.error(
                        "sink process %d (pid %s) ended unexpectedly with %s; stopping the others",
                        i,
                        child.pid,
                        describe_exit(child.exitcode),
                    )
        return ok

    def stop(self) -> bool:
        """SIGTERM every live child, wait for them to flush, kill those that hang.

        Returns:
            True when every child that was still running exited with code 0.
        """
        running = [c for c in self.children if c.exitcode is None]
        for child in running:
            if child.pid is not None:
                os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        clean = True
        for child in running:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.exitcode is None:
                logger.error("sink process pid %s did not stop in time; killing it", child.pid)
                child.kill()
                child.join()
                clean = False
            elif child.exitcode != 0:
                logger.error(
                    "sink process pid %s stopped with %s", child.pid, describe_exit(child.exitcode)
                )
                clean = False
        return clean

    def run(self, stop: threading.Event) -> int:
        """Start, supervise until ``stop`` is set or a child ends, then stop all.

        Args:
            stop: Set (by a signal handler) to stop every child cleanly.

        Returns:
            0 after a clean stop; 1 when a child ended on its own or did not stop cleanly.
        """
        self.start()
        while not stop.is_set() and self.check(0.5):
            pass
        clean = self.stop()
        if self.failed or not clean:
            return 1
        return 0
