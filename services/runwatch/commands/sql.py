"""``runwatch sql "..."``: ad hoc SQL as the readonly user."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any


def _cell(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _run(args: argparse.Namespace) -> int:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.settings import ClickHouseSettings

    settings = ClickHouseSettings(**({"database": args.database} if args.database else {}))
    try:
        client = ch.make_client(settings, readonly=True)
        result = client.query(args.query)
    except Exception as exc:  # noqa: BLE001 - show ClickHouse's own message
        print(f"error: {exc}", file=sys.stderr)
        return 1
    names = ch.column_names(client, args.query, result)
    rows = [[_cell(v) for v in row] for row in result.result_rows]
    if args.format == "json":
        from runwatch.core.jsontext import json_text

        print(json_text([dict(zip(names, r, strict=True)) for r in rows], default=str))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows(rows)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*names)
        for r in rows:
            table.add_row(*("" if v is None else str(v) for v in r))
        Console(width=200).print(table)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sql`` command.

    Args:
        sub: The top-level sub-parsers.
    """
    parser = sub.add_parser("sql", help="run ad hoc SQL as the readonly user")
    parser.add_argument("query", help="the SQL statement")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    parser.add_argument("--database", help="database (default CLICKHOUSE_DATABASE or runwatch)")
    parser.set_defaults(func=_run)
