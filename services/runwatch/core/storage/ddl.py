"""Versioned ClickHouse DDL: parse the ordered files and render them.

The files in ``schemas/clickhouse/`` are templates. ``${db}`` stands for the
database. The single-node rendering substitutes it; the cluster rendering also
adds ``ON CLUSTER``, turns every ``*MergeTree`` table into a
``Replicated*MergeTree`` ``<name>_local`` table fronted by a ``Distributed``
table of the original name, and points materialized views at the local tables
(outside quoted strings, so dictionary source queries keep reading the
distributed tables); a column added to a table is added to both.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DdlError",
    "Migration",
    "load_migrations",
    "parse_migration",
    "render_statement",
    "render_statements",
    "split_statements",
]

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_CREATE_TABLE_RE = re.compile(
    r"^CREATE TABLE IF NOT EXISTS \$\{db\}\.(\w+)\s*\((.*)\)\s*"
    r"ENGINE\s*=\s*(\w*MergeTree)(\([^)]*\))?(.*)$",
    re.DOTALL,
)
_HEAD_RE = re.compile(
    r"^((?:CREATE (?:OR REPLACE )?(?:TABLE|MATERIALIZED VIEW|VIEW|DICTIONARY|DATABASE)"
    r"(?: IF NOT EXISTS)?|ALTER TABLE|DROP (?:TABLE|VIEW|DICTIONARY)(?: IF EXISTS)?)"
    r"\s+\S+)"
)
REPLICA_PATH = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"


class DdlError(ValueError):
    """A DDL file or statement cannot be used."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One versioned DDL file.

    Attributes:
        version: Ordinal from the file name (``0001_raw.sql`` is 1).
        name: The rest of the file name, without ``.sql``.
        statements: Template statements, in order.
        checksum: sha256 of the file text.
    """

    version: int
    name: str
    statements: tuple[str, ...]
    checksum: str


def split_statements(text: str) -> list[str]:
    """Split SQL text into statements, dropping ``--`` comment lines.

    Args:
        text: SQL with statements ending in ``;``.

    Returns:
        The non-empty statements without their trailing ``;``.
    """
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    body = "\n".join(lines)
    return [s.strip() for s in re.split(r";\s*(?:\n|$)", body) if s.strip()]


def parse_migration(file_name: str, text: str) -> Migration:
    """Parse one versioned DDL file.

    Args:
        file_name: Base name such as ``0001_raw_execution.sql``.
        text: The file content.

    Returns:
        The migration.

    Raises:
        DdlError: The name is not ``NNNN_name.sql`` or the file is empty.
    """
    match = _FILE_RE.match(file_name)
    if match is None:
        msg = f"DDL file {file_name!r} must be named NNNN_name.sql"
        raise DdlError(msg)
    statements = tuple(split_statements(text))
    if not statements:
        msg = f"DDL file {file_name!r} holds no statement"
        raise DdlError(msg)
    checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Migration(int(match.group(1)), match.group(2), statements, checksum)


def load_migrations(directory: Path) -> list[Migration]:
    """Read every ``NNNN_*.sql`` file of a directory, ordered by version.

    Args:
        directory: Usually ``schemas/clickhouse``.

    Returns:
        The migrations in version order.

    Raises:
        DdlError: Two files share a version, or the directory holds no migration
            (a mistyped ``--schema-dir`` rendered or applied nothing but retention).
    """
    if not directory.is_dir():
        msg = f"schema directory {directory} does not exist (or is not a directory)"
        raise DdlError(msg)
    migrations = [
        parse_migration(p.name, p.read_text(encoding="utf-8"))
        for p in sorted(directory.glob("*.sql"))
    ]
    if not migrations:
        msg = f"schema directory {directory} holds no migration (NNNN_*.sql)"
        raise DdlError(msg)
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        msg = f"duplicate DDL versions in {directory}: {sorted(versions)}"
        raise DdlError(msg)
    return sorted(migrations, key=lambda m: m.version)


def storage_tables(statements: list[str]) -> list[str]:
    """Return the names of the MergeTree tables the statements create.

    Args:
        statements: Template statements.

    Returns:
        Table names (without database), in order.
    """
    return [m.group(1) for s in statements if (m := _CREATE_TABLE_RE.match(s))]


def _outside_quotes(text: str, fn: object) -> str:
    parts = text.split("'")
    for i in range(0, len(parts), 2):
        parts[i] = fn(parts[i])  # type: ignore[operator]
    return "'".join(parts)


def _on_cluster(statement: str, cluster: str) -> str:
    match = _HEAD_RE.match(statement)
    if match is None:
        return statement
    head = match.group(1)
    return f"{head} ON CLUSTER {cluster}{statement[len(head) :]}"


def check_identifier(name: str, what: str) -> None:
    """Refuse a database or cluster name that is not a plain identifier (DDL takes it unquoted).

    Args:
        name: The name.
        what: What it names, for the message (``database name``).

    Raises:
        DdlError: ``database name 'bad name' is not a plain identifier (letters, digits, _)``.
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        msg = f"{what} {name!r} is not a plain identifier (letters, digits and _)"
        raise DdlError(msg)


def render_statement(
    statement: str, db: str, cluster: str | None = None, local_tables: frozenset[str] = frozenset()
) -> list[str]:
    """Render one template statement.

    Args:
        statement: Template text with ``${db}``.
        db: Database name.
        cluster: Cluster name for the replicated variant, or None.
        local_tables: Storage table names (cluster variant: read through ``_local``).

    Returns:
        One statement (single node) or one or two (cluster: local + distributed).

    Raises:
        DdlError: The database name is not a plain identifier.
    """
    check_identifier(db, "database name")
    if cluster is None:
        return [statement.replace("${db}", db)]
    check_identifier(cluster, "cluster name")
    match = _CREATE_TABLE_RE.match(statement)
    if match is not None:
        name, columns, engine, args, rest = match.groups()
        inner = (args or "()")[1:-1].strip()
        replica_args = REPLICA_PATH + (f", {inner}" if inner else "")
        local = (
            f"CREATE TABLE IF NOT EXISTS {db}.{name}_local ON CLUSTER {cluster}\n({columns})\n"
            f"ENGINE = Replicated{engine}({replica_args}){rest}"
        )
        shard_key = "cityHash64(run_id)" if re.search(r"^\s*run_id\s", columns, re.M) else "rand()"
        dist = (
            f"CREATE TABLE IF NOT EXISTS {db}.{name} ON CLUSTER {cluster} AS {db}.{name}_local\n"
            f"ENGINE = Distributed({cluster}, {db}, {name}_local, {shard_key})"
        )
        return [local, dist]

    def localize(seg: str) -> str:
        for table in local_tables:
            seg = re.sub(rf"\$\{{db\}}\.{table}\b", f"${{db}}.{table}_local", seg)
        return seg

    text = statement
    if re.match(r"^(CREATE MATERIALIZED VIEW|ALTER TABLE)", text):
        text = _outside_quotes(text, localize)
    out = [_on_cluster(text, cluster).replace("${db}", db)]
    added = re.match(r"^ALTER TABLE \$\{db\}\.(\w+)\s+ADD COLUMN", statement)
    if added and added.group(1) in local_tables:  # the Distributed table gets the column too
        out.append(_on_cluster(statement, cluster).replace("${db}", db))
    return out


def render_statements(statements: list[str], db: str, cluster: str | None = None) -> list[str]:
    """Render template statements for one node or for a cluster.

    Args:
        statements: Template statements in order (migrations then retention).
        db: Database name.
        cluster: Cluster name for the replicated/distributed variant.

    Returns:
        Executable statements in order.
    """
    local = frozenset(storage_tables(statements)) if cluster else frozenset()
    out: list[str] = []
    for statement in statements:
        out.extend(render_statement(statement, db, cluster, local))
    return out
