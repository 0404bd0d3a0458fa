"""Durable pager state in the state directory: notification log and silences.

- ``notifications.jsonl``: one JSON line per notification sent (receiver,
  dedup key, status, time; a firing one also its encoded alert, base64),
  appended and fsynced right after a receiver accepted it, so the log
  survives ``kill -9``. On start the last line per (receiver, dedup key) wins;
  the file is compacted (rewritten atomically) when it grows past a multiple
  of its live entries. A torn last line (crash
  mid-write) is skipped with a warning.
- ``held.jsonl``: the same lines for the firing alerts a silence held back, so
  the pager delivers those still firing when the silence ends.
- ``deferred.jsonl``: the deliveries waiting for their next attempt (a receiver that
  failed, asked for a long ``Retry-After`` or has its breaker open), one line per
  change (a removal is a ``removed`` line), fsynced, so a ``kill -9`` loses none.
- ``silences.json``: the whole silence list, rewritten atomically (temp file,
  fsync, rename). The pager reloads it when its modification time changes.

Size: the four files of one state directory; the three logs are one keyed log
(``_KeyedLog``: line format, torn lines, compaction) with two entry types.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from runwatch.core.paging.delivery import Deferred, Notification
from runwatch.core.paging.silencing import Matcher, Silence, parse_matcher

log = logging.getLogger(__name__)
E = TypeVar("E")

NOTIFICATIONS_FILE = "notifications.jsonl"
HELD_FILE = "held.jsonl"
DEFERRED_FILE = "deferred.jsonl"
SILENCES_FILE = "silences.json"


def default_state_dir() -> Path:
    """Return the default state directory (``$XDG_STATE_HOME/runwatch/pager``).

    Returns:
        The path (not created).

    """
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "runwatch" / "pager"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class _KeyedLog(Generic[E]):
    """A durable map (receiver, dedup key) -> entry: one JSON line per change, fsynced.

    The last line of a key wins on load (a ``removed`` line drops it); the file is
    rewritten atomically with one line per live entry when it holds ``compact_factor``
    times more lines than that. A torn last line (crash mid-write) is skipped with a
    warning.
    """

    FILE = ""
    """The file's name in the state directory, by default."""

    def __init__(self, state_dir: Path, compact_factor: int = 4,
                 file_name: str | None = None) -> None:
        """Open (and load) the log in a state directory.

        Args:
            state_dir: The pager's state directory (created when missing).
            compact_factor: Rewrite the file when it holds this many times
                more lines than live entries.
            file_name: The file, if not :attr:`FILE` (``held.jsonl`` keeps the alerts a
                silence held back in a notification log).

        """
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / (file_name or self.FILE)
        self._compact_factor = compact_factor
        self._entries: dict[tuple[str, str], E] = {}
        self._lines = 0
        self._load()
        self._fh = self.path.open("ab")

    @staticmethod
    def _parse(d: dict[str, Any]) -> E:
        raise NotImplementedError

    @staticmethod
    def _encode(e: E) -> bytes:
        raise NotImplementedError

    def _load(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                try:
                    d = json.loads(raw)
                    where = (str(d["receiver"]), str(d["dedup_key"]))
                    if d.get("removed"):
                        self._entries.pop(where, None)
                    else:
                        self._entries[where] = self._parse(d)
                except (ValueError, KeyError, TypeError):
                    log.warning("%s:%d: unreadable line skipped (torn write?)", self.path, number)
                    continue
                self._lines += 1

    def get(self, receiver: str, dedup_key: str) -> E | None:
        """Return the entry of a receiver and dedup key, if any.

        Args:
            receiver: Receiver name.
            dedup_key: The alert's dedup key.

        Returns:
            The entry, or None.

        """
        return self._entries.get((receiver, dedup_key))

    def _append(self, line: bytes) -> None:
        """Write one line and fsync (the entry changes in memory only once it is on disk)."""
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._lines += 1

    def _maybe_compact(self) -> None:
        if self._lines > self._compact_factor * max(64, len(self._entries)):
            self.compact()

    def _put(self, receiver: str, dedup_key: str, entry: E) -> None:
        self._append(self._encode(entry))
        self._entries[(receiver, dedup_key)] = entry
        self._maybe_compact()

    def _drop(self, receiver: str, dedup_key: str) -> E | None:
        if (receiver, dedup_key) not in self._entries:
            return None
        doc = {"receiver": receiver, "dedup_key": dedup_key, "removed": True}
        self._append(json.dumps(doc, separators=(",", ":")).encode() + b"\n")
        entry = self._entries.pop((receiver, dedup_key))
        self._maybe_compact()
        return entry

    def compact(self) -> None:
        """Rewrite the file with one line per live entry."""
        data = b"".join(self._encode(e) for e in self._entries.values())
        self._fh.close()
        _atomic_write(self.path, data)
        self._fh = self.path.open("ab")
        self._lines = len(self._entries)

    def __len__(self) -> int:
        """Return how many live entries the log holds."""
        return len(self._entries)

    def close(self) -> None:
        """Close the file."""
        with contextlib.suppress(OSError):
            self._fh.close()


class NotificationLog(_KeyedLog[Notification]):
    """What was sent to whom, durable across crashes."""

    FILE = NOTIFICATIONS_FILE

    @staticmethod
    def _parse(d: dict[str, Any]) -> Notification:
        return Notification(d["receiver"], d["dedup_key"], d["status"], int(d["sent_at_ms"]),
                            d.get("alert_id", ""), base64.b64decode(d.get("raw", "")))

    @staticmethod
    def _encode(e: Notification) -> bytes:
        doc: dict[str, object] = {"receiver": e.receiver, "dedup_key": e.dedup_key,
                                  "status": e.status, "sent_at_ms": e.sent_at_ms,
                                  "alert_id": e.alert_id}
        if e.raw:
            doc["raw"] = base64.b64encode(e.raw).decode()
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"

    def last(self, receiver: str, dedup_key: str) -> Notification | None:
        """Return the last notification for a receiver and dedup key (None: none)."""
        return self.get(receiver, dedup_key)

    def record(self, entry: Notification) -> None:
        """Append a notification and fsync before returning.

        Args:
            entry: What was sent.

        """
        self._put(entry.receiver, entry.dedup_key, entry)

    def entries(self) -> Iterator[Notification]:
        """Iterate over the live entries.

        Yields:
            One notification per (receiver, dedup key).

        """
        yield from self._entries.values()


class DeferredLog(_KeyedLog[Deferred]):
    """Deliveries waiting for their next attempt, durable across crashes."""

    FILE = DEFERRED_FILE

    @staticmethod
    def _parse(d: dict[str, Any]) -> Deferred:
        key = d.get("key")
        return Deferred(
            str(d["receiver"]), str(d["dedup_key"]), str(d["status"]),
            str(d.get("alert_id", "")), base64.b64decode(d.get("raw", "")), int(d["attempts"]),
            int(d["first_ms"]), int(d["next_ms"]), str(d.get("last_error", "")),
            str(d.get("topic", "")), int(d.get("partition", -1)), int(d.get("offset", -1)),
            None if key is None else base64.b64decode(key),
        )

    @staticmethod
    def _encode(e: Deferred) -> bytes:
        doc: dict[str, object] = {
            "receiver": e.receiver, "dedup_key": e.dedup_key, "status": e.status,
            "alert_id": e.alert_id, "raw": base64.b64encode(e.raw).decode(),
            "attempts": e.attempts, "first_ms": e.first_ms, "next_ms": e.next_ms,
            "last_error": e.last_error, "topic": e.topic, "partition": e.partition,
            "offset": e.offset,
        }
        if e.key is not None:
            doc["key"] = base64.b64encode(e.key).decode()
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"

    def put(self, entry: Deferred) -> None:
        """Record (or replace) a deferred delivery and fsync before returning.

        Args:
            entry: The delivery.

        """
        self._put(entry.receiver, entry.dedup_key, entry)

    def remove(self, receiver: str, dedup_key: str) -> Deferred | None:
        """Forget a deferred delivery (delivered, dead-lettered or replaced).

        Args:
            receiver: Receiver name.
            dedup_key: The alert's dedup key.

        Returns:
            The entry removed, or None when there was none.

        """
        return self._drop(receiver, dedup_key)

    def entries(self) -> list[Deferred]:
        """Return the live entries.

        Returns:
            One delivery per (receiver, dedup key).

        """
        return list(self._entries.values())

    def due(self, now_ms: int) -> list[Deferred]:
        """Return the entries whose next attempt is due, the earliest first.

        Args:
            now_ms: Current time.

        Returns:
            The due entries.

        """
        return sorted((e for e in self._entries.values() if e.next_ms <= now_ms),
                      key=lambda e: (e.next_ms, e.first_ms))


def _silence_to_json(s: Silence) -> dict[str, object]:
    return {
        "id": s.silence_id, "matchers": [str(m) for m in s.matchers],
        "starts_at_ms": s.starts_at_ms, "ends_at_ms": s.ends_at_ms,
        "reason": s.reason, "created_by": s.created_by,
    }


def _silence_from_json(d: dict[str, object]) -> Silence:
    matchers: tuple[Matcher, ...] = tuple(
        parse_matcher(str(m)) for m in d["matchers"]  # type: ignore[attr-defined]
    )
    return Silence(
        str(d["id"]), matchers, int(d["starts_at_ms"]),  # type: ignore[call-overload]
        int(d["ends_at_ms"]), str(d.get("reason", "")),  # type: ignore[call-overload]
        str(d.get("created_by", "")),
    )


class SilenceStore:
    """Silences kept in ``silences.json`` in the state directory."""

    def __init__(self, state_dir: Path) -> None:
        """Point at a state directory.

        Args:
            state_dir: The pager's state directory.

        """
        self.path = state_dir / SILENCES_FILE
        self._mtime_ns: int | None = None
        self._cache: list[Silence] = []
        self._warned_ns: int | None = None  # the corrupt version already logged

    def load(self) -> list[Silence]:
        """Read every silence (including expired ones).

        Returns:
            The silences, oldest first.

        Raises:
            ValueError: When the file is corrupt.

        """
        if not self.path.exists():
            return []
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return [_silence_from_json(d) for d in raw["silences"]]
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"{self.path}: corrupt silence file: {exc}"
            raise ValueError(msg) from exc

    def current(self) -> list[Silence]:
        """Return the silences, re-reading the file only when it changed.

        A file that cannot be read or parsed (a hand edit gone wrong) keeps the last
        good set in force, logged once per version of the file: the pager goes on
        paging, as muted as before, instead of stopping every team's alerts.

        Returns:
            The silences.

        """
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._mtime_ns, self._cache = None, []
            return []
        except OSError as exc:
            self._log_bad(None, f"{self.path}: cannot read the silences: {exc}")
            return self._cache
        if mtime != self._mtime_ns:
            try:
                self._cache = self.load()
            except (ValueError, OSError) as exc:
                self._log_bad(mtime, str(exc))
                return self._cache
            self._mtime_ns = mtime
        return self._cache

    def _log_bad(self, mtime: int | None, why: str) -> None:
        if mtime is None or mtime != self._warned_ns:
            log.error("%s; keeping the %d silence(s) read before until the file is fixed",
                      why, len(self._cache))
            self._warned_ns = mtime

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the silences' lock file: a read-modify-write by one process at a time."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(SILENCES_FILE + ".lock"), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def save(self, silences: list[Silence]) -> None:
        """Write every silence atomically.

        Args:
            silences: The full list.

        """
        data = json.dumps(
            {"silences": [_silence_to_json(s) for s in silences]}, indent=2
        ).encode()
        _atomic_write(self.path, data)

    def add(
        self, matchers: tuple[Matcher, ...], now_ms: int, duration_ms: int, reason: str,
        created_by: str = "",
    ) -> Silence:
        """Create a silence starting now.

        Args:
            matchers: What it mutes (all must match).
            now_ms: Current time.
            duration_ms: How long it lasts.
            reason: Why (required by the CLI).
            created_by: Who.

        Returns:
            The new silence.

        """
        silence = Silence(
            secrets.token_hex(6), matchers, now_ms, now_ms + duration_ms, reason, created_by
        )
        with self._locked():  # two adds at once both read the file: one was lost
            self.save([*self.load(), silence])
        return silence

    def expire(self, silence_id: str, now_ms: int) -> Silence:
        """End a silence now.

        Args:
            silence_id: The silence's id (a unique prefix is enough).
            now_ms: Current time.

        Returns:
            The expired silence.

        Raises:
            KeyError: When no silence (or more than one) has that id prefix.

        """
        if not silence_id:
            msg = "no silence id given (every id starts with the empty prefix)"
            raise KeyError(msg)
        with self._locked():
            return self._expire(silence_id, now_ms)

    def _expire(self, silence_id: str, now_ms: int) -> Silence:
        silences = self.load()
        hits = [i for i, s in enumerate(silences) if s.silence_id.startswith(silence_id)]
        if len(hits) != 1:
            msg = f"no silence with id {silence_id!r}" if not hits else (
                f"id prefix {silence_id!r} is ambiguous"
            )
            raise KeyError(msg)
        i = hits[0]
        s = silences[i]
        silences[i] = Silence(
            s.silence_id, s.matchers, s.starts_at_ms, min(s.ends_at_ms, now_ms), s.reason,
            s.created_by,
        )
        self.save(silences)
        return silences[i]
