"""``runwatch store``: the embedded ClickHouse (chDB) behind the ClickHouse HTTP interface."""

from __future__ import annotations

import argparse
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from runwatch.store.service import run_store
    from runwatch.store.settings import StoreSettings

    overrides: dict[str, object] = {}
    for key in ("host", "port", "path", "users_file"):
        value = getattr(args, key)
        if value is not None:
            overrides[key] = value
    return run_store(StoreSettings(**overrides))  # type: ignore[arg-type]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:  # 70000 was a traceback from bind()
        msg = f"{text} is not a TCP port (0 to 65535; 0: any free port)"
        raise argparse.ArgumentTypeError(msg)
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``store`` command.

    Args:
        sub: The top-level sub-parsers.

    """
    parser = sub.add_parser(
        "store",
        help="serve an embedded ClickHouse (chDB) data directory over ClickHouse HTTP",
        description=(
            "One process owning a chDB data directory and serving ClickHouse's HTTP "
            "interface, so clickhouse-connect works unmodified. Settings also come from "
            "RUNWATCH_STORE_* environment variables."
        ),
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, help="listen port (default 8123; 0 = any free port)")
    parser.add_argument("--path", type=Path, help="data directory (default .runwatch/clickhouse)")
    parser.add_argument(
        "--users",
        dest="users_file",
        type=Path,
        help="users YAML (default infra/clickhouse/users.yaml or RUNWATCH_STORE_USERS_FILE)",
    )
    parser.set_defaults(func=_run)
