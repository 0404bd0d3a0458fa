"""``runwatch sql "..."``: ad hoc SQL as the readonly user."""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import re
import sys
import zoneinfo
from typing import Any

_OWN_FORMAT = re.compile(r"\bFORMAT\s+[A-Za-z][A-Za-z0-9]*\s*;?\s*$", re.IGNORECASE)
#: The clause the client appends to a query it decodes itself ("\n FORMAT Native"), as a
#: server's message may quote it (a newline, or its escape inside a quoted query).
_APPENDED_FORMAT = re.compile(r"(?:\n|\\n) FORMAT Native")
_ZONED = re.compile(r"^DateTime(?:64)?\((?:\d+\s*,\s*)?'([^']+)'\)$")


def _cell(value: Any, zone: str | None = None) -> Any:
    """Return a value as JSON-ready data: nested maps, arrays and tuples stay nested."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(_cell(k)): _cell(v, zone) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_cell(v, zone) for v in value]
    if isinstance(value, datetime.datetime) and zone:
        # the engine's Native answer names no time zone (DateTime, not DateTime('Zone')):
        # the client reads the instant as UTC; show it in the column's own zone
        # (a ClickHouse server's client may give it with its zone already: kept as is)
        with contextlib.suppress(ValueError, LookupError):
            instant = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
            return str(instant.astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None))
    return str(value)


def _text(value: Any) -> str:
    """One cell of the table or CSV: nested values as JSON, not Python's repr."""
    if isinstance(value, (dict, list)):
        from runwatch.core.jsontext import json_text

        return json_text(value, ensure_ascii=False)
    return "" if value is None else str(value)


def _zones(client: Any, sql: str, types: list[Any]) -> list[str | None]:
    """Each column's time zone, when it is a DateTime column that names one."""
    if not any(str(getattr(t, "name", "")).startswith("DateTime") for t in types):
        return [None] * len(types)
    try:
        import json

        meta = json.loads(client.raw_query(f"DESCRIBE ({sql.strip().rstrip(';')})",
                                           fmt="JSONCompact")).get("data", [])
        found = [_ZONED.match(str(row[1])) for row in meta]
    except Exception:  # noqa: BLE001 - a courtesy: the instants stay in UTC
        return [None] * len(types)
    if len(found) != len(types):
        return [None] * len(types)
    return [m.group(1) if m else None for m in found]


def _in_own_words(client: Any, query: str, exc: Exception) -> str:
    """Return ClickHouse's message about the query as written, not as the client sent it.

    The client appends ``FORMAT Native`` to the query, which ClickHouse's message may
    quote or even misread (``SELECT 1 FROM`` reads ``FORMAT`` as the table): the query is
    then asked once more without it, for ClickHouse's words on the query as written
    (it failed already: nothing is read twice); should it pass, the clause is cut out of
    the first message.
    """
    text = str(exc)
    if client is None or "FORMAT" not in text or re.search(r"\bFORMAT\b", query, re.I):
        return text
    try:
        client.raw_query(query)
    except Exception as again:  # noqa: BLE001 - ClickHouse's own message is the answer
        return str(again)
    return _APPENDED_FORMAT.sub("", text)


def _run(args: argparse.Namespace) -> int:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.settings import ClickHouseSettings

    if not args.query.strip().rstrip(";").strip():  # refused before the store is asked
        print('error: the query is empty: give one SQL statement, e.g. runwatch sql '
              '"SELECT 1"', file=sys.stderr)
        return 2
    settings = ClickHouseSettings(**({"database": args.database} if args.database else {}))
    own = _OWN_FORMAT.search(args.query) is not None
    client = None
    try:
        client = ch.make_client(settings, readonly=True)
        if own:  # the query names its format: print ClickHouse's answer as it is
            sys.stdout.buffer.write(client.raw_query(args.query))
            sys.stdout.flush()
            return 0
        result = client.query(args.query)
    except Exception as exc:  # noqa: BLE001 - show ClickHouse's own message
        print(f"error: {_in_own_words(client, args.query, exc)}", file=sys.stderr)
        return 1
    names = ch.column_names(client, args.query, result)
    zones = _zones(client, args.query, list(result.column_types or []))
    rows = [[_cell(v, z) for v, z in zip(row, zones, strict=False)]
            for row in result.result_rows]
    if args.format == "json":
        from runwatch.core.jsontext import json_text

        print(json_text([dict(zip(names, r, strict=True)) for r in rows], default=str))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows([[_text(v) for v in r] for r in rows])
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*names)
        for r in rows:
            table.add_row(*(_text(v) for v in r))
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
