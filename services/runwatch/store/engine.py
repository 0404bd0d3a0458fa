"""The chDB engine behind the store: one data directory, many connection handles.

chDB hosts one engine per process; ``chdb.connect(path)`` opens another handle to
it in a fraction of a millisecond. Handles run queries concurrently (a single
handle serializes), and each keeps its own ``SET``/``USE`` state. The store opens
a fresh handle for every sessionless request, so per-query settings cannot leak,
and keeps one handle per HTTP session (``session_id``), like ClickHouse keeps a
session context.

Size: everything that holds a chDB handle lives here (the handles, the sessions, the
watchdog's and the dictionary keeper's), so no other module touches the engine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chdb

from runwatch.store.errors import StoreError, from_engine
from runwatch.store.guard import SAFE_ENGINES, SAFE_TABLE_FUNCTIONS
from runwatch.store.policy import Profile, users_xml
from runwatch.store.request import split_settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a statement produced: the output bytes and the summary figures."""

    data: bytes | memoryview
    read_rows: int = 0
    read_bytes: int = 0
    written_rows: int = 0
    written_bytes: int = 0
    elapsed_s: float = 0.0
    keep: Any = None  # the engine result owning ``data``'s memory


#: Where insert bodies are spilled: memory-backed where the system has it.
# mkstemp creates the file privately (O_EXCL, mode 0600), so a shared directory is safe.
_SHM = "/dev/shm"  # noqa: S108
_SPILL_DIR = _SHM if os.path.isdir(_SHM) and os.access(_SHM, os.W_OK) else None


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ident(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


DICTIONARY_CHECK_S = 5.0
"""How often the store looks for dictionaries due for a reload
(:meth:`Engine.reload_due_dictionaries`)."""


class Handle:
    """One chDB connection handle; not for concurrent use by several threads."""

    def __init__(self, conn: Any, tag: str = "") -> None:
        self._conn = conn
        self.tag = tag  # the connection's log_comment, by which the store can kill its queries

    def run(
        self, sql: str, fmt: str = "TabSeparated", params: Mapping[str, str] | None = None
    ) -> Outcome:
        """Run one statement and return its output in ``fmt``.

        Args:
            sql: The statement (its own FORMAT clause, if any, wins).
            fmt: The output format.
            params: Values for ``{name:Type}`` placeholders.

        Returns:
            The outcome.

        Raises:
            StoreError: With the engine's code and message.

        """
        try:
            result = self._conn.query(sql, fmt, params=dict(params or {}))
        except Exception as exc:  # chDB raises RuntimeError subclasses with the message
            raise from_engine(str(exc)) from None
        return Outcome(
            data=result.get_memview().view() if result.size() else b"",
            read_rows=result.rows_read(),
            read_bytes=result.bytes_read(),
            written_rows=result.rows_written(),
            written_bytes=result.bytes_written(),
            elapsed_s=result.elapsed(),
            keep=result,
        )

    def value(self, sql: str, params: Mapping[str, str] | None = None) -> str:
        """Return the first field of a one-row statement as text.

        Args:
            sql: The statement.
            params: Values for ``{name:Type}`` placeholders.

        Returns:
            The value, without the trailing newline.

        """
        return bytes(self.run(sql, "TabSeparatedRaw", params).data).decode("utf-8").rstrip("\n")

    def insert(self, statement: str, fmt: str, chunks: Iterable[bytes]) -> Outcome:
        """Insert data in ``fmt`` through an ``INSERT`` statement.

        The body is spilled to a private temporary file (in ``/dev/shm`` when it
        exists) and inserted with ``INSERT ... FROM INFILE``. chDB's streaming
        insert (``send_insert``) reports success when the engine rejects rows
        while writing them (a violated CONSTRAINT, a failing materialized view):
        the rows vanish and the client is told they were written. The
        ``FROM INFILE`` path raises the engine's error like ClickHouse does, at
        the same speed.

        Args:
            statement: ``INSERT INTO t [(cols)] [SETTINGS ...]`` without FORMAT.
            fmt: The input format of the chunks (Native, Arrow, RowBinary, ...).
            chunks: The data.

        Returns:
            The outcome with the rows and bytes written.

        Raises:
            StoreError: With the engine's code and message.

        """
        head, settings = split_settings(statement)
        fd, name = tempfile.mkstemp(prefix="rw-insert-", dir=_SPILL_DIR)
        try:
            with os.fdopen(fd, "wb") as spill:
                for chunk in chunks:
                    if chunk:
                        spill.write(chunk)
            sql = f"{head} FROM INFILE {_quote(name)}"
            if settings:
                sql += f" SETTINGS {settings}"
            return self.run(f"{sql} FORMAT {fmt}")
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def apply(self, settings: Mapping[str, str]) -> None:
        """``SET`` each setting on this handle.

        Args:
            settings: Setting names (validated identifiers) and values.

        """
        if settings:
            self.run("SET " + ", ".join(f"{n} = {_quote(v)}" for n, v in settings.items()))

    @contextmanager
    def scoped(self, database: str | None, settings: Mapping[str, str]) -> Iterator[None]:
        """Apply a database and settings for one query, then put the old ones back.

        Args:
            database: The database to use, or None.
            settings: The per-query settings.

        Yields:
            Nothing; the handle is configured inside the block.

        """
        saved_db = self.value("SELECT currentDatabase()") if database else None
        saved: dict[str, tuple[str, bool]] = {}
        if settings:
            names = "[" + ", ".join(_quote(n) for n in settings) + "]"
            rows = self.value(
                "SELECT arrayStringConcat(groupArray(concat(name, '\\t', value, '\\t', "
                "toString(changed))), '\\n') FROM system.settings "
                "WHERE has({names:Array(String)}, name)",
                {"names": names},
            )
            for line in rows.split("\n"):
                if line:
                    name, value, flag = line.split("\t")
                    saved[name] = (value, flag == "1")
        try:
            if database:
                self.run(f"USE `{database.replace('`', '``')}`")
            self.apply(settings)
            yield
        finally:
            for name, (value, changed) in saved.items():
                try:
                    self.run(f"SET {name} = {_quote(value) if changed else 'DEFAULT'}")
                except StoreError:
                    logger.warning("could not restore setting %s on a session handle", name)
            if saved_db is not None:
                self.run(f"USE `{saved_db.replace('`', '``')}`")

    def close(self) -> None:
        """Close the handle."""
        try:
            self._conn.close()
        except Exception:
            logger.debug("closing a chDB handle failed", exc_info=True)


def _engine_config(profiles: Iterable[Profile], floors: Mapping[str, int]) -> Path:
    """Write the engine's config.xml and users.xml to a private directory; return the config."""
    folder = Path(tempfile.mkdtemp(prefix="rw-store-engine-"))
    unique = {p.name: p for p in profiles}
    (folder / "users.xml").write_text(users_xml(unique, floors), encoding="utf-8")
    config = folder / "config.xml"
    config.write_text(
        f"<clickhouse><users_config>{folder / 'users.xml'}</users_config></clickhouse>\n",
        encoding="utf-8",
    )
    return config


@dataclass(slots=True)
class _Session:
    handle: Handle
    lock: threading.Lock
    timeout_s: float
    last_used: float


class Engine:
    """The process's chDB engine on one data directory, with its HTTP sessions."""

    def __init__(
        self, path: Path, profiles: Iterable[Profile] = (), floors: Mapping[str, int] | None = None
    ) -> None:
        """Open the data directory with the users' profiles rendered into the engine's config.

        Args:
            path: The data directory.
            profiles: The profiles of the store's users (their constraints go to the engine).
            floors: The lowest readonly level of each profile's users.

        """
        path.mkdir(parents=True, exist_ok=True)
        self._config = _engine_config(profiles, floors or {})
        self._path = f"{path.resolve()}?config-file={self._config}"
        self._root = Handle(chdb.connect(self._path))
        self.version = self._root.value("SELECT version()")
        self.timezone = self._root.value("SELECT timezone()")
        names = self._root.value(
            "SELECT arrayStringConcat(groupUniqArray(lower(name)), ' ') FROM (SELECT name FROM "
            "system.table_functions UNION ALL SELECT name FROM system.table_engines "
            "UNION ALL SELECT name FROM system.database_engines)"
        ).split()
        #: Every table function and engine the engine knows that is not on a safe list.
        self.dangerous = frozenset(names) - SAFE_TABLE_FUNCTIONS - SAFE_ENGINES
        self._watch = Handle(chdb.connect(self._path))
        self._watch_lock = threading.Lock()
        self._keeper = Handle(chdb.connect(self._path))  # dictionary reloads, off the watchdog's
        self._keeper_lock = threading.Lock()
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._sessions_lock = threading.Lock()
        self._closed = False

    def reload_due_dictionaries(self) -> list[str]:
        """Reload every dictionary whose ``LIFETIME`` has passed since it last loaded.

        A ClickHouse server reloads a dictionary within its lifetime by itself; the
        embedded engine does not (a dictionary stays as it was first loaded), and
        clients may not ``SYSTEM RELOAD``. The retention TTL reads ``retained_runs``:
        left as it was loaded at start, it kept no run, and the TTL deleted the raw
        rows of anomalous and gated runs with the routine ones. The store calls this
        every few seconds (:data:`DICTIONARY_CHECK_S`). A dictionary not loaded yet
        is left to load on first use; one that failed is tried again each lifetime.

        Returns:
            The dictionaries reloaded (``database.name``); one that fails is logged.

        """
        with self._keeper_lock:
            if self._closed:
                return []
            due = self._keeper.value(
                "SELECT arrayStringConcat(groupArray(concat(database, '\t', name)), '\n') "
                "FROM system.dictionaries WHERE lifetime_max > 0 "
                "AND status IN ('LOADED', 'FAILED') "
                "AND greatest(last_successful_update_time, loading_start_time) "
                "<= now() - toIntervalSecond(lifetime_max)"
            )
            done = []
            for line in due.split("\n"):
                database, _, name = line.partition("\t")
                if not name:
                    continue
                full = f"{_ident(database)}.{_ident(name)}"
                try:
                    self._keeper.run(f"SYSTEM RELOAD DICTIONARY {full}")
                except StoreError as exc:
                    logger.warning("dictionary %s.%s did not reload: %s", database, name, exc)
                    continue
                done.append(f"{database}.{name}")
        return done

    def open_client(self, profile: Profile, tag: str) -> Handle:
        """Open a handle for a client: its profile's settings and constraints, and a tag.

        The settings and the tag (``log_comment``) are set first, then ``SET profile``
        switches on the profile's constraints: from then on the engine refuses any
        change beyond them, and the tag cannot change.

        Args:
            profile: The user's profile.
            tag: The connection's tag (see :func:`runwatch.store.limits.new_tag`).

        Returns:
            The handle; close it when done.

        """
        if self._closed:
            err = StoreError.named("CANNOT_SCHEDULE_TASK", "The store is shutting down")
            raise err
        handle = Handle(chdb.connect(self._path), tag)
        try:
            handle.apply({**profile.settings, "log_comment": tag})
            handle.run(f"SET profile = {_quote(profile.engine_name)}")
        except BaseException:
            handle.close()
            raise
        return handle

    def running(self) -> dict[str, int]:
        """Return the memory use (bytes) of each running client query, by its connection's tag.

        Returns:
            Bytes by tag.

        """
        with self._watch_lock:
            rows = self._watch.value(
                "SELECT arrayStringConcat(groupArray(concat(Settings['log_comment'], ' ', "
                "toString(memory_usage))), '\n') FROM system.processes "
                "WHERE startsWith(Settings['log_comment'], 'rw-')"
            )
        out: dict[str, int] = {}
        for line in rows.split("\n"):
            tag, _, used = line.partition(" ")
            if tag:
                out[tag] = out.get(tag, 0) + int(used or 0)
        return out

    def kill(self, tag: str) -> None:
        """Cancel the running queries of the connection tagged ``tag`` (without waiting).

        Args:
            tag: The connection's tag.

        """
        with self._watch_lock:
            self._watch.run(
                "KILL QUERY WHERE Settings['log_comment'] = {tag:String} ASYNC FORMAT Null",
                params={"tag": tag},
            )

    @contextmanager
    def session(
        self,
        user: str,
        session_id: str,
        *,
        opener: Callable[[], Handle],
        timeout_s: float,
        check: bool,
    ) -> Iterator[Handle]:
        """Hold the handle of an HTTP session for one request.

        Args:
            user: The authenticated user (sessions are per user).
            session_id: The client's session id.
            opener: Opens the session's handle (profile and readonly level applied)
                when the session is created.
            timeout_s: Idle seconds after which the session is dropped.
            check: Refuse with ``SESSION_NOT_FOUND`` instead of creating a session.

        Yields:
            The session's handle, locked for this request.

        Raises:
            StoreError: ``SESSION_IS_LOCKED`` when another request holds it.

        """
        now = time.monotonic()
        key = (user, session_id)
        with self._sessions_lock:
            self._expire(now)
            session = self._sessions.get(key)
            if session is None:
                if check:
                    err = StoreError.named("SESSION_NOT_FOUND", f"Session {session_id} not found")
                    raise err
                session = _Session(opener(), threading.Lock(), timeout_s, now)
                self._sessions[key] = session
            if not session.lock.acquire(blocking=False):
                err = StoreError.named(
                    "SESSION_IS_LOCKED", f"Session {session_id} is locked by a concurrent client"
                )
                raise err
        try:
            yield session.handle
        finally:
            session.timeout_s = timeout_s
            session.last_used = time.monotonic()
            session.lock.release()

    def _expire(self, now: float) -> None:
        for key, session in list(self._sessions.items()):
            if now - session.last_used > session.timeout_s and session.lock.acquire(blocking=False):
                del self._sessions[key]
                session.handle.close()
                session.lock.release()

    def close(self) -> None:
        """Close every session handle and the engine."""
        self._closed = True
        with self._sessions_lock:
            for session in self._sessions.values():
                session.handle.close()
            self._sessions.clear()
        self._watch.close()
        with self._keeper_lock:
            self._keeper.close()
        self._root.close()
        shutil.rmtree(self._config.parent, ignore_errors=True)
