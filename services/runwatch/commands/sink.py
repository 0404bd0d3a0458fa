"""``runwatch sink``: consume the rw.* topics into ClickHouse."""

from __future__ import annotations

import argparse
from typing import Any


def _run(args: argparse.Namespace) -> int:
    from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
    from runwatch.sink.__main__ import run_sink
    from runwatch.sink.settings import SinkSettings

    overrides: dict[str, Any] = {}
    if args.group:
        overrides["group_id"] = args.group
    if args.topics:
        overrides["topics"] = args.topics
    if args.batch_rows:
        overrides["batch_rows"] = args.batch_rows
    if args.batch_ms:
        overrides["batch_ms"] = args.batch_ms
    ch: dict[str, Any] = {"database": args.database} if args.database else {}
    kafka: dict[str, Any] = {"bootstrap_servers": args.bootstrap} if args.bootstrap else {}
    return run_sink(
        SinkSettings(**overrides),
        KafkaSettings(**kafka),
        ClickHouseSettings(**ch),
        processes=args.processes,
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        msg = f"give a whole number of at least 1, not {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if value < 1:
        msg = f"must be at least 1, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _topics(text: str) -> tuple[str, ...]:
    """``a,b`` as topic names; an empty list or entry (an unset variable) is refused."""
    names = tuple(t.strip() for t in text.split(","))
    if not all(names):
        msg = f"give comma-separated topic names (e.g. rw.learning,rw.exec.job), not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return names


def _text(text: str) -> str:
    if not text.strip():
        msg = "must not be empty (an unset variable?)"
        raise argparse.ArgumentTypeError(msg)
    return text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sink`` command.

    Args:
        sub: The top-level sub-parsers.
    """
    parser = sub.add_parser(
        "sink",
        help="consume rw.* topics into ClickHouse (idempotent, at-least-once)",
        description="Settings also come from RUNWATCH_SINK_*, KAFKA_* and CLICKHOUSE_* variables.",
    )
    parser.add_argument("--group", type=_text, help="consumer group (default runwatch-sink)")
    parser.add_argument("--topics", type=_topics,
                        help="comma-separated topics (default: the rw.* topics)")
    parser.add_argument("--database", type=_text,
                        help="ClickHouse database (default CLICKHOUSE_DATABASE)")
    parser.add_argument(
        "--bootstrap", type=_text,
        help="Kafka bootstrap servers (default KAFKA_BOOTSTRAP_SERVERS)"
    )
    parser.add_argument("--batch-rows", type=_positive,
                        help="flush after this many rows (default 50000)")
    parser.add_argument("--batch-ms", type=_positive, help="flush after this long (default 1000)")
    parser.add_argument(
        "--processes",
        type=_positive,
        default=1,
        help="sink processes in the consumer group, supervised by this one (default 1)",
    )
    parser.set_defaults(func=_run)
