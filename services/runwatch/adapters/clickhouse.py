"""ClickHouse I/O: clients from settings, the migration runner, batch inserts.

Size: one adapter for every conversation with the store (clients, migrations, inserts,
the sink's start-up reads); each function is one query and its error classes.

Errors are sorted into two kinds the sink reacts to differently:
:class:`ClickHouseUnavailable` (network, timeouts, server overloaded: retry
later, pause consumption) and :class:`ClickHouseRejected` (the server or the
client serializer refused the data: split the batch, dead-letter the bad rows).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import (
    ClickHouseError,
    DatabaseError,
    OperationalError,
)

from runwatch.adapters.settings import ClickHouseSettings
from runwatch.core.storage import ddl, retention
from runwatch.core.storage.columns import COLUMNS
from runwatch.core.storage.outcome import LATEST_STATE_SQL
from runwatch.core.storage.rows import SUMMARISED_SQL

logger = logging.getLogger(__name__)

__all__ = [
    "ClickHouseRejected",
    "ClickHouseUnavailable",
    "apply_statements",
    "insert_rows",
    "make_client",
    "migrate",
    "migration_statements",
    "read_watermarks",
]

#: Server error codes that mean "try again later", not "bad data".
_TRANSIENT_CODES = {
    "159",
    "160",
    "164",
    "202",
    "209",
    "210",
    "241",
    "242",
    "252",
    "285",
    "319",
    "425",
    "999",
}
RETENTION_VERSION = 100000


class ClickHouseUnavailable(RuntimeError):
    """ClickHouse cannot be reached or is temporarily unable to work."""


class ClickHouseRejected(ValueError):
    """ClickHouse (or the client serializer) refused the data; the message says why."""


def refusal(exc: ClickHouseRejected, database: str) -> str:
    """Say in one line what a refused query means.

    A database without runwatch's tables (``UNKNOWN_TABLE``: not migrated, or the
    wrong one), one that does not exist (``UNKNOWN_DATABASE``), or the store's own reason.
    """
    text = str(exc)
    if "UNKNOWN_TABLE" in text or "Code: 60." in text:
        return no_tables(database)
    if "UNKNOWN_DATABASE" in text or "Code: 81." in text:
        return no_database(database)
    return f"the store refused a query (is the database migrated? runwatch db migrate): {exc}"


def no_tables(database: str) -> str:
    """Return the line that says a database holds none of runwatch's tables."""
    return (f"database {database!r} holds no runwatch tables (run `runwatch db migrate "
            f"--database {database}`, or pass --database)")


def no_database(database: str, url: str | None = None) -> str:
    """Return the line that says a database does not exist (on the server at ``url``)."""
    where = f" on ClickHouse at {url}" if url else ""
    return (f"database {database!r} does not exist{where} (create it with "
            f"`runwatch db migrate --database {database}`, or pass --database)")


#: A table every migrated runwatch database holds (migration 0003): its absence says the
#: database is not runwatch's (or not migrated).
MARKER_TABLE = "run_manifests"


def open_database(settings: ClickHouseSettings, *, readonly: bool = True,
                  as_default: bool = False) -> Client:
    """Connect to a runwatch database for a command that reads it (the governance commands).

    The one check ``investigate``, ``slo``, ``cost``, ``capacity`` and ``gate`` share:
    each refusal is one line, the same for every command. The name must be a plain
    identifier (it is written into the queries), refused before the store is asked; the
    database must exist and hold runwatch's tables.

    Args:
        settings: URL, users, the database (``settings.database``).
        readonly: Connect as the readonly user.
        as_default: Make the database the client's default (queries name bare tables);
            else the server's default (queries name ``db.table``).

    Returns:
        A connected client.

    Raises:
        ClickHouseUnavailable: The server does not answer.
        ClickHouseRejected: A bad name, no such database, or no runwatch tables in it.
    """
    db = settings.database
    try:
        ddl.check_identifier(db, "database name")
    except ddl.DdlError as exc:
        raise ClickHouseRejected(str(exc)) from None
    client = make_client(settings, readonly=readonly, database=db if as_default else "")
    found = query_rows(client, "SELECT name FROM system.databases WHERE name = {db:String}",
                       {"db": db})
    if not found:
        raise ClickHouseRejected(no_database(db, settings.url))
    marker = query_rows(client, "SELECT name FROM system.tables WHERE database = {db:String} "
                        "AND name = {t:String}", {"db": db, "t": MARKER_TABLE})
    if not marker:
        raise ClickHouseRejected(no_tables(db))
    return client


def make_client(
    settings: ClickHouseSettings,
    *,
    readonly: bool = False,
    database: str | None = None,
    **kwargs: Any,
) -> Client:
    """Build a clickhouse-connect HTTP client from settings.

    Args:
        settings: URL, users, passwords, TLS.
        readonly: Connect as the readonly (ad hoc SQL) user.
        database: Default database ('' for the server default; None = settings').
        **kwargs: More ``clickhouse_connect.get_client`` arguments.

    Returns:
        A connected client.

    Raises:
        ClickHouseUnavailable: The server does not answer.
        ClickHouseRejected: The database does not exist (the message says how to create it).
    """
    url = urlparse(settings.url)
    secure = url.scheme == "https"
    try:
        return clickhouse_connect.get_client(
            host=url.hostname or "127.0.0.1",
            port=url.port or (8443 if secure else 8123),
            username=settings.readonly_user if readonly else settings.user,
            password=settings.password_value(readonly=readonly),
            database=settings.database if database is None else database,
            secure=secure,
            verify=settings.verify_tls,
            ca_cert=str(settings.ca_cert) if settings.ca_cert else None,
            **kwargs,
        )
    except OperationalError as exc:
        msg = f"ClickHouse at {settings.url} does not answer: {exc}"
        raise ClickHouseUnavailable(msg) from exc
    except DatabaseError as exc:
        db = settings.database if database is None else database
        if "UNKNOWN_DATABASE" not in str(exc):
            raise
        raise ClickHouseRejected(no_database(db, settings.url)) from exc


def _classify(exc: Exception) -> Exception:
    text = str(exc)
    if isinstance(exc, OperationalError):
        return ClickHouseUnavailable(text)
    if isinstance(exc, DatabaseError):
        code = text.split("Code: ", 1)[1].split(".", 1)[0] if "Code: " in text else ""
        if code in _TRANSIENT_CODES or "Connection refused" in text or "timed out" in text:
            return ClickHouseUnavailable(text)
        return ClickHouseRejected(text)
    return ClickHouseRejected(f"{type(exc).__name__}: {text}")


@contextmanager
def _classified(what: str, refused: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turn the driver's errors into :class:`ClickHouseUnavailable` or :class:`ClickHouseRejected`.

    Args:
        what: The operation, for the message of a failed connection.
        refused: More exception types that :func:`_classify` judges (they mean refused).
    """
    judged: tuple[type[Exception], ...] = (ClickHouseError, *refused)
    try:
        yield
    except judged as exc:
        raise _classify(exc) from exc
    except OSError as exc:
        msg = f"{what} failed: {exc}"
        raise ClickHouseUnavailable(msg) from exc


def insert_rows(
    client: Client,
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    dedup_token: str | None = None,
    settings: dict[str, Any] | None = None,
    column_oriented: bool = False,
) -> None:
    """Insert one columnar batch.

    Args:
        client: The pipeline user's client.
        table: Qualified table name.
        columns: Column names in row order.
        rows: The rows (or, with ``column_oriented``, one sequence per column).
        dedup_token: ``insert_deduplication_token`` (a retried identical batch is dropped).
        settings: More query settings.
        column_oriented: ``rows`` holds columns, not rows (no transposing).

    Raises:
        ClickHouseUnavailable: Retry later.
        ClickHouseRejected: The data was refused (message from ClickHouse).
    """
    query_settings: dict[str, Any] = dict(settings or {})
    if dedup_token:
        query_settings["insert_deduplication_token"] = dedup_token
    # the driver raises these for values it cannot serialize: refused, like ClickHouse's own
    with _classified(f"insert into {table}", (TypeError, ValueError, OverflowError,
                                              AttributeError)):
        client.insert(
            table,
            rows,
            column_names=list(columns),
            settings=query_settings,
            column_oriented=column_oriented,
        )


def command(client: Client, sql: str, parameters: dict[str, Any] | None = None) -> Any:
    """Run one statement, with the same error classes as :func:`insert_rows`.

    Args:
        client: A client allowed to run it.
        sql: The statement.
        parameters: Its bound parameters.

    Returns:
        clickhouse-connect's result.

    Raises:
        ClickHouseUnavailable: Retry later (a connection reset or refused counts).
        ClickHouseRejected: ClickHouse refused the statement (message from ClickHouse).
    """
    with _classified("statement"):
        return client.command(sql, parameters=parameters)


def query_rows(
    client: Client, sql: str, parameters: dict[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """Run a query and return its rows, with the same error classes as :func:`insert_rows`.

    Args:
        client: A client allowed to run it.
        sql: The query.
        parameters: Its bound parameters.

    Returns:
        The result rows.

    Raises:
        ClickHouseUnavailable: Retry later (a connection reset or refused counts).
        ClickHouseRejected: ClickHouse refused the query (message from ClickHouse).
    """
    with _classified("query"):
        return [tuple(r) for r in client.query(sql, parameters=parameters).result_rows]


def column_names(client: Client, sql: str, result: Any) -> list[str]:
    """Return a query result's column names, also when it has no rows.

    ClickHouse's HTTP ``FORMAT Native`` answer to a query that matches no rows is an
    empty body, so clickhouse-connect's result has no column names; the query is then
    asked again as ``JSONCompact``, whose ``meta`` names them (only for an empty result).

    Args:
        client: The client that ran the query.
        sql: The query.
        result: Its clickhouse-connect ``QueryResult``.

    Returns:
        The names; empty when the query has none (or the second ask fails).
    """
    names = list(result.column_names)
    if names or result.result_rows:
        return names
    try:
        meta = json.loads(client.raw_query(sql, fmt="JSONCompact")).get("meta", [])
    except Exception:  # noqa: BLE001 - the names are a courtesy: an empty list is still true
        return []
    return [str(m.get("name", "")) for m in meta if isinstance(m, dict)]


def read_watermarks(client: Client, db: str) -> dict[tuple[str, str, int], int]:
    """Return the largest stored Kafka offset per (table, topic, partition).

    Args:
        client: Any client allowed to read ``db``.
        db: Database.

    Returns:
        ``{(table, topic, partition): max_offset}``.

    Raises:
        ClickHouseUnavailable: The server does not answer.
    """
    try:
        result = client.query(
            f"SELECT target_table, kafka_topic, kafka_partition, max(max_offset) "  # noqa: S608
            f"FROM {db}.sink_watermarks GROUP BY target_table, kafka_topic, kafka_partition"
        )
    except (ClickHouseError, OSError) as exc:
        raise ClickHouseUnavailable(str(exc)) from exc
    return {(str(t), str(tp), int(p)): int(o) for t, tp, p, o in result.result_rows}


SEEN_TABLES = tuple(t for t in COLUMNS if t not in ("gpu_samples", "dead_letters"))
"""The raw tables whose event ids a restarted sink remembers: every record type has one
(a NodeSample's id is read from ``host_samples``, one row per sample, not from
``gpu_samples``, one per GPU; a dead letter's id is its Kafka position)."""


def read_stored_event_ids(client: Client, db: str, since_ms: int,
                          limit: int) -> list[tuple[str, str, int, int]]:
    """Return the event ids stored with an event time from ``since_ms`` on, newest last.

    A restarted sink starts its memory of event ids from these, so a producer's
    copy of a record stored before the restart (same ``event_id``, another
    offset) is dropped, not stored again and counted twice by the rollups.

    Args:
        client: Any client allowed to read ``db``.
        db: Database.
        since_ms: Oldest event time (epoch ms) to read.
        limit: At most this many ids (the newest).

    Returns:
        ``(event_id, kafka_topic, kafka_partition, kafka_offset)`` of each stored
        row, oldest event time first (a record stored twice appears twice).

    Raises:
        ClickHouseUnavailable: The server does not answer.
        ClickHouseRejected: It refused the query (say, a table is missing).
    """
    # one row per record in these tables: no grouping, and each part a bounded top-N
    parts = [
        f"(SELECT event_id AS e, toString(kafka_topic) AS tp, toUInt32(kafka_partition) AS p, "  # noqa: S608
        f"toUInt64(kafka_offset) AS o, toInt64(toUnixTimestamp64Milli(ts)) AS t "
        f"FROM {db}.{table} WHERE ts >= fromUnixTimestamp64Milli(toInt64(%(since)s)) "
        "ORDER BY t DESC, o DESC LIMIT %(n)s)"
        for table in SEEN_TABLES
    ]
    sql = ("SELECT e, tp, p, o FROM (" + " UNION ALL ".join(parts) + ") "  # noqa: S608
           "ORDER BY t DESC, o DESC LIMIT %(n)s")
    rows = query_rows(client, sql, {"since": int(since_ms), "n": int(limit)})
    return [(str(e), str(tp), int(p), int(o)) for e, tp, p, o in reversed(rows)]


def read_ended_runs(client: Client, db: str, limit: int) -> list[str]:
    """Return the ``limit`` runs whose latest job state is terminal, newest end last.

    A restarted sink starts its memory of ended runs from these, so rows of a run
    that ended before the restart, stored after it, still rewrite its summary.

    Args:
        client: Any client allowed to read ``db``.
        db: Database.
        limit: How many runs.

    Returns:
        Run ids, oldest end first.

    Raises:
        ClickHouseUnavailable: The server does not answer.
        ClickHouseRejected: It refused the query (say, ``job_events`` is missing).
    """
    sql = (
        f"SELECT r FROM (SELECT toString(run_id) AS r, {LATEST_STATE_SQL} AS last, "  # noqa: S608
        "max(ts) AS t "
        f"FROM {db}.job_events GROUP BY r) "
        f"WHERE last IN {SUMMARISED_SQL} "
        "ORDER BY t DESC LIMIT %(n)s"
    )
    return [str(r[0]) for r in reversed(query_rows(client, sql, {"n": int(limit)}))]


def migration_statements(
    schema_dir: Path, rules: retention.RetentionRules
) -> tuple[list[ddl.Migration], list[str]]:
    """Load the versioned migrations and render the retention statements.

    Args:
        schema_dir: Directory of ``NNNN_*.sql`` files.
        rules: Retention rules.

    Returns:
        (migrations, retention template statements).
    """
    return ddl.load_migrations(schema_dir), retention.render_retention(rules)


def apply_statements(client: Client, statements: Sequence[str]) -> None:
    """Run statements in order.

    Args:
        client: The pipeline user's client.
        statements: Rendered statements.

    Raises:
        ClickHouseRejected: A statement failed (the statement head is in the message).
    """
    for statement in statements:
        try:
            client.command(statement)
        except ClickHouseError as exc:
            msg = f"DDL failed: {statement[:120]}...: {exc}"
            raise ClickHouseRejected(msg) from exc


def schema_problem(client: Client, db: str, schema_dir: Path) -> str | None:
    """Say why ``db`` cannot take what this release writes (None: it can).

    A database that does not exist, or lacks migrations of ``schema_dir`` (runwatch
    upgraded without ``runwatch db migrate``: the sink's inserts and run summaries
    name columns the tables do not have, and every summary failed, logged only).

    Raises:
        ClickHouseUnavailable: The server does not answer.
    """
    try:
        exists = client.query(
            "SELECT count() FROM system.databases WHERE name = {db:String}",
            parameters={"db": db}).result_rows[0][0]
        if not exists:
            return (f"database {db} does not exist: create it with "
                    f"`runwatch db migrate --database {db}`")
        rows = client.query(
            f"SELECT DISTINCT version FROM {db}.schema_migrations"  # noqa: S608
        ).result_rows
    except (ClickHouseError, OSError) as exc:
        if "UNKNOWN_TABLE" in str(exc) or "doesn't exist" in str(exc):
            rows = []
        else:
            raise ClickHouseUnavailable(str(exc)) from exc
    applied = {int(v) for (v,) in rows}
    missing = [f"{m.version:04d}_{m.name}" for m in ddl.load_migrations(schema_dir)
               if m.version not in applied]
    if missing:
        return (f"database {db} lacks migration(s) {', '.join(missing)}: run "
                f"`runwatch db migrate --database {db}` before starting this release")
    return None


def rollup_drift(client: Client, db: str, rules: retention.RetentionRules) -> list[str]:
    """Name the existing rollup views whose definition the rules would change.

    Returns:
        ``"<view>: <fragment> missing"`` for each; empty when none exists yet or all agree.
    """
    wanted = retention.rollup_signatures(rules)
    rows = client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String} "
        "AND name IN {names:Array(String)}",
        parameters={"db": db, "names": sorted(wanted)}).result_rows
    return [f"{name}: {frag} missing" for name, query in rows
            for frag in wanted[str(name)] if frag not in str(query)]


def migrate(
    client: Client, db: str, schema_dir: Path, rules: retention.RetentionRules
) -> list[str]:
    """Apply pending migrations and (when changed) the retention rules. Idempotent.

    Applied versions and checksums land in ``<db>.schema_migrations``; the
    retention rules are recorded under version 100000 with their checksum and
    re-applied only when the rules change.

    Args:
        client: The pipeline user's client (no default database needed).
        db: Database to create and migrate.
        schema_dir: Directory of ``NNNN_*.sql`` files.
        rules: Retention rules.

    Returns:
        What was applied, e.g. ``["0001_raw_execution", "retention"]``.
    """
    migrations, retention_sql = migration_statements(schema_dir, rules)
    everything = [s for m in migrations for s in m.statements] + retention_sql
    local = frozenset(ddl.storage_tables(everything))
    apply_statements(
        client,
        [
            f"CREATE DATABASE IF NOT EXISTS {db}",
            f"CREATE TABLE IF NOT EXISTS {db}.schema_migrations (version UInt32, name String, "
            "checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) "
            "ENGINE = MergeTree ORDER BY (version, applied_at)",
        ],
    )
    rows = client.query(
        f"SELECT version, argMax(checksum, applied_at) FROM {db}.schema_migrations "  # noqa: S608
        "GROUP BY version"
    ).result_rows
    applied = {int(v): str(c) for v, c in rows}
    done: list[str] = []
    for m in migrations:
        if m.version in applied:
            if applied[m.version] != m.checksum:
                logger.warning("migration %04d_%s changed after it was applied", m.version, m.name)
            continue
        rendered = [r for s in m.statements for r in ddl.render_statement(s, db, None, local)]
        apply_statements(client, rendered)
        client.insert(
            f"{db}.schema_migrations",
            [[m.version, m.name, m.checksum]],
            column_names=["version", "name", "checksum"],
        )
        done.append(f"{m.version:04d}_{m.name}")
        logger.info("applied migration %04d_%s to %s", m.version, m.name, db)
    if applied.get(RETENTION_VERSION) != rules.checksum:
        drift = rollup_drift(client, db, rules)
        if drift:
            msg = (f"retention rules change rollups that exist with another definition "
                   f"({'; '.join(drift)}): a rollup's bucket width and quantiles are fixed "
                   "when it is made. Give the resolution a new name in the rules (a new "
                   "rollup), or drop the old rollup table and its _mv view, then migrate again")
            raise ClickHouseRejected(msg)
        apply_statements(client, ddl.render_statements(retention_sql, db))
        client.insert(
            f"{db}.schema_migrations",
            [[RETENTION_VERSION, "retention", rules.checksum]],
            column_names=["version", "name", "checksum"],
        )
        done.append("retention")
    return done
