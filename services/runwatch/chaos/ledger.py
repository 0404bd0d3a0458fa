"""The producers' ledger: every event id handed to a transport, by phase and producer.

:class:`LedgerTransport` wraps the transport of an SDK run, the agent or a
data report: each record it is handed is decoded (Avro single-object
encoding) for its ``event_id`` and appended to the :class:`Ledger` (and its
JSON-lines file) before the inner transport takes it. The ledger is what the
read-back is compared with; the inner transport's counters say what it dropped
on purpose (a full spool evicts, and counts, the oldest records).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from runwatch.core.codec import load_codec


@dataclass(frozen=True, slots=True)
class Entry:
    """One published record."""

    event_id: str
    record: str
    producer: str
    phase: str


class Ledger:
    """Event ids published, in memory and (optionally) appended to a JSON-lines file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.phase = "setup"
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._codec = load_codec()
        self._file = path.open("a", encoding="utf-8") if path is not None else None

    def record(self, producer: str, value: bytes) -> str:
        """Decode a record's event id and add it under the current phase.

        Args:
            producer: Which producer handed it over (``sdk:<run>``, ``agent``, ``data``).
            value: The encoded record.

        Returns:
            The event id.

        """
        name, datum = self._codec.decode_dict(value)
        entry = Entry(str(datum["event_id"]), name, producer, self.phase)
        with self._lock:
            self._entries[entry.event_id] = entry
            if self._file is not None:
                self._file.write(json.dumps(asdict(entry)) + "\n")
        return entry.event_id

    def entries(self) -> list[Entry]:
        """Return every entry so far."""
        with self._lock:
            return list(self._entries.values())

    def count(self, phase: str) -> int:
        """Return how many records a phase published so far."""
        with self._lock:
            return sum(1 for e in self._entries.values() if e.phase == phase)

    def close(self) -> None:
        """Flush and close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @staticmethod
    def read(path: Path) -> Iterator[Entry]:
        """Read a ledger file back."""
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield Entry(**json.loads(line))


class LedgerTransport:
    """A transport that records every event id in a ledger, then hands the record on."""

    def __init__(self, inner: Any, ledger: Ledger, producer: str) -> None:
        self.inner = inner
        self.ledger = ledger
        self.producer = producer

    def produce(self, topic: str, key: bytes | str | None, value: bytes) -> None:
        """Record the event id, then produce through the inner transport."""
        self.ledger.record(self.producer, value)
        self.inner.produce(topic, key, value)

    def flush(self, timeout: float = 10.0) -> int:
        """Flush the inner transport."""
        return int(self.inner.flush(timeout))

    def close(self, timeout: float = 10.0) -> Any:
        """Close the inner transport; return its counters."""
        return self.inner.close(timeout)

    def counters(self) -> Any:
        """The inner transport's counters."""
        return self.inner.counters()
