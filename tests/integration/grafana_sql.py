"""Grafana's side of a dashboard query, for the dashboard tests (Grafana cannot run here).

Fills dashboard variables and expands the ClickHouse datasource plugin's macros
(grafana-clickhouse-datasource, pkg/macros/macros.go) the way the plugin does,
so the SQL that reaches ClickHouse is the SQL Grafana would send.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

MACRO = re.compile(r"\$__(\w+)(?:\(([^()]*)\))?")
VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(?!__)(\w+)")


@dataclass(frozen=True)
class QueryContext:
    """The time range and interval Grafana sends with a query."""

    from_ms: int
    to_ms: int
    interval_ms: int


def _date(ms: int) -> str:
    return "toDate('{}')".format(datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d"))


def _datetime(ms: int) -> str:
    return f"toDateTime({ms // 1000})"


def _datetime64(ms: int) -> str:
    return f"fromUnixTimestamp64Milli({ms})"


def expand_macros(sql: str, ctx: QueryContext) -> str:
    """Replace the plugin's ``$__`` macros; an unknown macro raises ValueError."""

    def one(match: re.Match[str]) -> str:
        name, raw = match.group(1), match.group(2)
        args = [a.strip() for a in raw.split(",")] if raw is not None else []
        f, t = ctx.from_ms, ctx.to_ms
        interval_s = max(ctx.interval_ms // 1000, 1)
        simple = {
            "fromTime": _datetime(f), "toTime": _datetime(t),
            "fromTime_ms": _datetime64(f), "toTime_ms": _datetime64(t),
            "interval_s": str(interval_s),
        }
        if name in simple:
            return simple[name] + (f"({raw})" if raw is not None else "")
        need = {"timeFilter": 1, "timeFilter_ms": 1, "dateFilter": 1, "dateTimeFilter": 2,
                "dt": 2, "timeInterval": 1, "timeInterval_ms": 1}
        if name not in need:
            msg = f"macro $__{name} is not one the ClickHouse datasource defines"
            raise ValueError(msg)
        if len(args) != need[name]:
            msg = f"$__{name} takes {need[name]} argument(s), got {len(args)}"
            raise ValueError(msg)
        col = args[0]
        if name == "timeFilter":
            return f"{col} >= {_datetime(f)} AND {col} <= {_datetime(t)}"
        if name == "timeFilter_ms":
            return f"{col} >= {_datetime64(f)} AND {col} <= {_datetime64(t)}"
        if name == "dateFilter":
            return f"{col} >= {_date(f)} AND {col} <= {_date(t)}"
        if name in ("dateTimeFilter", "dt"):
            tcol = args[1]
            return (f"({col} >= {_date(f)} AND {col} <= {_date(t)}) AND "
                    f"({tcol} >= {_datetime(f)} AND {tcol} <= {_datetime(t)})")
        if name == "timeInterval":
            return f"toStartOfInterval(toDateTime({col}), INTERVAL {interval_s} second)"
        ms = max(ctx.interval_ms, 1)
        return f"toStartOfInterval(toDateTime64({col}, 3), INTERVAL {ms} millisecond)"

    return MACRO.sub(one, sql)


def fill_variables(sql: str, values: dict[str, str]) -> str:
    """Replace ``$name`` / ``${name}`` / ``${name:format}``; an unknown name raises ValueError."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        fmt = match.group(2)
        if name not in values:
            msg = f"variable ${name} is not defined by the dashboard"
            raise ValueError(msg)
        value = values[name]
        if fmt in (None, "raw"):
            return value
        if fmt == "singlequote":
            return "'" + value.replace("'", "\\'") + "'"
        msg = f"variable format :{fmt} is not supported by this test"
        raise ValueError(msg)

    return VARIABLE.sub(one, sql)


def render(sql: str, values: dict[str, str], ctx: QueryContext) -> str:
    """Variables first, then macros (Grafana interpolates, then the plugin expands)."""
    return expand_macros(fill_variables(sql, values), ctx)
