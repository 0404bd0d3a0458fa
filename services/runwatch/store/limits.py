"""Per-user caps the engine cannot keep for the store, and cancelling abandoned queries.

chDB runs every connection as one engine user, so ``max_concurrent_queries_for_user``
and ``max_memory_usage_for_user`` would count all users together. The store keeps
them per store user instead:

* :meth:`Limits.admit` counts each user's running queries and refuses one over
  the profile's ``max_concurrent_queries`` (202 TOO_MANY_SIMULTANEOUS_QUERIES).
* A watchdog thread, awake only while client queries run, reads
  ``system.processes`` every ``poll_s``: it finds each query by the
  ``log_comment`` tag the store gave its connection (clients cannot change it:
  the profile holds it const) and kills, with ``KILL QUERY``, the largest query
  of a user whose queries together pass ``max_memory_usage_for_user``, and any
  query whose HTTP client has closed its connection.

The query that was killed fails in the engine with QUERY_WAS_CANCELLED; the
store reports the reason recorded here instead.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from runwatch.store.errors import StoreError

logger = logging.getLogger(__name__)


class Killer(Protocol):
    """What the watchdog needs of the engine."""

    def running(self) -> dict[str, int]:
        """Return the memory use (bytes) of each running tagged query, by tag."""
        ...

    def kill(self, tag: str) -> None:
        """Cancel the running queries of the connection tagged ``tag``."""
        ...


@dataclass(eq=False)
class Running:
    """One client query in flight."""

    user: str
    tag: str
    sock: socket.socket | None = None
    reason: StoreError | None = field(default=None)


def new_tag() -> str:
    """Return a fresh connection tag (the engine's ``log_comment``).

    Returns:
        ``rw-`` and 32 hex digits.

    """
    return f"rw-{uuid.uuid4().hex}"


def peer_closed(sock: socket.socket) -> bool:
    """Return whether the peer of ``sock`` has closed the connection (without blocking).

    Args:
        sock: A connected socket with no request bytes pending.

    Returns:
        True on end of stream or a reset.

    """
    try:
        # poll, not select: select refuses descriptors over FD_SETSIZE (1024), and a
        # busy store's sockets reach them (every query was then "disconnected").
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        if not poller.poll(0):
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


class Limits:
    """Concurrency caps, per-user memory caps and disconnect cancelling."""

    def __init__(self, engine: Killer, poll_s: float = 0.1) -> None:
        self._engine = engine
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._running: dict[str, Running] = {}
        self._count: dict[str, int] = {}
        self._memory_cap: dict[str, int] = {}
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._watch, name="store-watchdog", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def admit(
        self,
        user: str,
        tag: str,
        *,
        max_concurrent: int,
        max_memory_for_user: int,
        sock: socket.socket | None,
    ) -> Iterator[Running]:
        """Count a query of ``user`` while it runs, or refuse it over the user's cap.

        Args:
            user: The store user.
            tag: The tag of the connection that runs it.
            max_concurrent: The user's cap on queries at once (0: none).
            max_memory_for_user: The user's cap on memory of all its queries (0: none).
            sock: The client's socket, watched for a disconnect (None: not watched).

        Yields:
            The record of the query; ``reason`` is set if the watchdog killed it.

        Raises:
            StoreError: TOO_MANY_SIMULTANEOUS_QUERIES over the cap.

        """
        with self._lock:
            count = self._count.get(user, 0)
            if max_concurrent and count >= max_concurrent:
                err = StoreError.named(
                    "TOO_MANY_SIMULTANEOUS_QUERIES",
                    f"Too many simultaneous queries for user {user}: {count} running, "
                    f"maximum: {max_concurrent} (max_concurrent_queries of its profile)",
                )
                raise err
            self._count[user] = count + 1
            self._memory_cap[user] = max_memory_for_user
            entry = Running(user, tag, sock)
            self._running[tag] = entry
            self._wake.set()
        try:
            yield entry
        finally:
            with self._lock:
                self._running.pop(tag, None)
                self._count[user] -= 1

    def stop(self) -> None:
        """Stop the watchdog."""
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stopped:
            self._wake.wait()
            with self._lock:
                if not self._running:
                    self._wake.clear()
                    continue
            try:
                self._sweep()
            except Exception:
                logger.warning("store watchdog sweep failed", exc_info=True)
            time.sleep(self._poll_s)

    def _sweep(self) -> None:
        with self._lock:
            entries = list(self._running.values())
            caps = dict(self._memory_cap)
        for entry in entries:
            if entry.reason is None and entry.sock is not None and peer_closed(entry.sock):
                entry.reason = StoreError.named(
                    "QUERY_WAS_CANCELLED",
                    f"Query of user {entry.user} cancelled: its HTTP client disconnected",
                )
                logger.info("client of user %s disconnected: cancelling its query", entry.user)
                self._engine.kill(entry.tag)
        if not any(caps.get(e.user) for e in entries):
            return
        memory = self._engine.running()
        by_user: dict[str, list[tuple[int, Running]]] = {}
        for entry in entries:
            if entry.tag in memory and entry.reason is None:
                by_user.setdefault(entry.user, []).append((memory[entry.tag], entry))
        for user, queries in by_user.items():
            total = sum(used for used, _ in queries)
            cap = caps.get(user, 0)
            if cap and total > cap:
                used, victim = max(queries, key=lambda item: item[0])
                victim.reason = StoreError.named(
                    "MEMORY_LIMIT_EXCEEDED",
                    f"Memory limit (for user {user}) exceeded: its queries use {total} bytes, "
                    f"maximum: {cap} (max_memory_usage_for_user of its profile); cancelled "
                    f"its largest query ({used} bytes)",
                )
                logger.info("user %s over its memory cap: cancelling a query", user)
                self._engine.kill(victim.tag)
