"""``runwatch db migrate|retention|render``: the ClickHouse schema."""

from __future__ import annotations

import argparse
from pathlib import Path


def _rules(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from runwatch.core.storage.retention import RetentionError, parse_rules
    from runwatch.errors import FatalError
    from runwatch.resources import read_config, retention_file

    path = Path(args.rules) if args.rules else retention_file()
    try:
        text = read_config(path)
    except OSError as exc:
        msg = f"cannot read retention rules {path}: {exc.strerror or exc}"
        raise FatalError(msg) from None
    try:
        return parse_rules(text)
    except RetentionError as exc:
        msg = f"retention rules {path}: {exc}"
        raise FatalError(msg) from None


def _schema_dir(args: argparse.Namespace) -> Path:
    from runwatch.resources import clickhouse_ddl_dir

    return Path(args.schema_dir) if args.schema_dir else clickhouse_ddl_dir()


def _migrate(args: argparse.Namespace) -> int:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.settings import ClickHouseSettings
    from runwatch.core.storage.ddl import DdlError, check_identifier, load_migrations
    from runwatch.errors import FatalError

    settings = ClickHouseSettings(**({"database": args.database} if args.database else {}))
    try:
        check_identifier(settings.database, "database name")
        schema_dir, rules = _schema_dir(args), _rules(args)
        load_migrations(schema_dir)  # checked before the store is asked for anything
        client = ch.make_client(settings, database="")
        done = ch.migrate(client, settings.database, schema_dir, rules)
    except (DdlError, ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        raise FatalError(str(exc)) from None
    print("\n".join(f"applied {d}" for d in done) or f"{settings.database} is up to date")
    return 0


def _retention(args: argparse.Namespace) -> int:
    from runwatch.core.storage.retention import describe_rules

    print(describe_rules(_rules(args)))
    return 0


def _render(args: argparse.Namespace) -> int:
    from runwatch.core.storage import ddl
    from runwatch.core.storage.ddl import DdlError, check_identifier
    from runwatch.core.storage.retention import render_retention
    from runwatch.errors import FatalError

    db = args.database or "runwatch"
    try:
        check_identifier(db, "database name")
        if args.cluster is not None:  # --cluster '' is no cluster name
            check_identifier(args.cluster, "cluster name")
        migrations = ddl.load_migrations(_schema_dir(args))
        statements = [s for m in migrations for s in m.statements]
        statements += render_retention(_rules(args))
        rendered = ddl.render_statements(statements, db, args.cluster)
    except DdlError as exc:
        raise FatalError(str(exc)) from None
    print(
        f"CREATE DATABASE IF NOT EXISTS {db}"
        + (f" ON CLUSTER {args.cluster}" if args.cluster else "")
        + ";\n"
    )
    for statement in rendered:
        print(statement + ";\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``db`` command group.

    Args:
        sub: The top-level sub-parsers.
    """
    parser = sub.add_parser("db", help="ClickHouse schema: migrate, retention rules, render DDL")
    dsub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    for name, func, text in (
        ("migrate", _migrate, "apply pending DDL and retention rules (idempotent)"),
        ("retention", _retention, "print the effective retention and downsampling rules"),
        ("render", _render, "print the DDL (single node, or --cluster NAME)"),
    ):
        p = dsub.add_parser(name, help=text)
        p.add_argument("--schema-dir", help="folder of NNNN_*.sql migrations (default: packaged)")
        p.add_argument("--rules", help="retention rules YAML (default: packaged retention.yaml)")
        p.add_argument("--database", help="database (default CLICKHOUSE_DATABASE or runwatch)")
        if name == "render":
            p.add_argument(
                "--cluster", help="render the ON CLUSTER / Replicated / Distributed variant"
            )
        p.set_defaults(func=func)
