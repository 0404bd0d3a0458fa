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

Signals sent to the whole process group (Ctrl-C in a terminal, ``kill --
-PGID``) or to every process of a service (systemd's default) reach the
children too: a child that stops then, cleanly or by that signal, is part of
the requested stop, not a failure. Children start with SIGINT ignored (so a
Ctrl-C during their start cannot interrupt an import) and stop themselves when
the parent dies (``PR_SET_PDEATHSIG`` on Linux, and a check of the parent's
pid), so a killed parent leaves no sink consuming behind it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sink.settings import SinkSettings

logger = logging.getLogger(__name__)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent(parent_pid: int, stop: threading.Event, poll_s: float = 1.0) -> None:
    """Make this process stop when ``parent_pid`` is gone.

    The kernel sends SIGTERM when the parent dies (``PR_SET_PDEATHSIG``, Linux);
    a daemon thread also sets ``stop`` once the parent's pid is no longer this
    process's parent (other systems, or a parent that died before the call).
    """
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        try:
            ctypes.CDLL(libc_name, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (AttributeError, OSError):
            logger.debug("prctl(PR_SET_PDEATHSIG) unavailable; polling the parent only")

    def watch() -> None:
        while not stop.wait(poll_s):
            if os.getppid() != parent_pid:
                logger.error("the sink pool's parent (pid %d) is gone; stopping", parent_pid)
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _child(
    index: int,
    parent_pid: int,
    settings: dict[str, Any],
    kafka: dict[str, Any],
    clickhouse: dict[str, Any],
) -> None:
    """Body of one child process: run a sink until SIGTERM/SIGINT or the parent's death."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s sink[{index}] %(levelname)s %(name)s %(message)s"
    )
    from runwatch.sink.service import Sink  # imported in the child only

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop_with_parent(parent_pid, stop)
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
        target: Callable[..., None] = _child,
    ) -> None:
        """Prepare (not start) the children.

        Args:
            processes: Number of sink processes (at least 1).
            settings: Sink settings (one group id for all).
            kafka: Kafka settings.
            clickhouse: ClickHouse settings.
            stop_timeout_s: How long a stopping child may take to flush before it is killed.
            target: A child's body, called as ``target(index, parent_pid, settings,
                kafka, clickhouse)`` with the settings as dicts (tests pass their own).
        """
        if processes < 1:
            msg = f"--processes must be at least 1, got {processes}"
            raise ValueError(msg)
        self.stop_timeout_s = stop_timeout_s
        ctx = multiprocessing.get_context("spawn")
        pid, conns = os.getpid(), (kafka.model_dump(), clickhouse.model_dump())
        # one summary sweep is enough (it reads the store): the first child runs it
        own = [settings.model_dump(), {**settings.model_dump(), "summary_sweep_s": 0.0}]
        self.children = [
            ctx.Process(target=target, args=(i, pid, own[min(i, 1)], *conns),
                        name=f"runwatch-sink-{i}", daemon=False)
            for i in range(processes)
        ]
        self.failed: list[tuple[int, int | None]] = []

    def start(self) -> None:
        """Start every child, with SIGINT ignored until the child sets its own handler."""
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            for child in self.children:
                child.start()  # spawn: an ignored signal stays ignored across exec
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        logger.info(
            "sink pool started %d processes: pids %s",
            len(self.children),
            ",".join(str(c.pid) for c in self.children),
        )

    def check(self, timeout: float = 0.0, stop: threading.Event | None = None) -> bool:
        """Wait up to ``timeout`` s for a child to end; record children that ended.

        A child that ends once ``stop`` is set is left to :meth:`stop` to judge:
        the signal that set it may have reached the children too.

        Returns:
            True while every child runs (or a stop was asked for); False once one
            has ended on its own (see :attr:`failed`).
        """
        live = [c.sentinel for c in self.children if c.exitcode is None]
        if live and timeout > 0:
            multiprocessing.connection.wait(live, timeout)
        if stop is not None and stop.is_set():
            return True
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
            True when every child not already counted as failed exited with code
            0, or by the SIGTERM/SIGINT of this stop (a group-wide signal may
            reach a child before its handler is set, or as it exits).
        """
        counted = {i for i, _ in self.failed}
        judged = [c for i, c in enumerate(self.children) if i not in counted]
        for child in judged:
            if child.exitcode is None and child.pid is not None:
                try:
                    os.kill(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass  # it ended just now: judged by its exit code below
        deadline = time.monotonic() + self.stop_timeout_s
        clean = True
        for child in judged:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.exitcode is None:
                logger.error("sink process pid %s did not stop in time; killing it", child.pid)
                child.kill()
                child.join()
                clean = False
            elif child.exitcode not in (0, -signal.SIGTERM, -signal.SIGINT):
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
        while not stop.is_set() and self.check(0.5, stop):
            pass
        clean = self.stop()
        if self.failed or not clean:
            return 1
        return 0
