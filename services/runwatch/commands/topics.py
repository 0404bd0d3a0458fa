"""``runwatch topics ensure|list``: provision the topics of ``schemas/topics.yaml``."""

from __future__ import annotations

import argparse
import dataclasses
import json

from runwatch.adapters.settings import KafkaSettings


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``topics`` command group.

    Args:
        sub: The CLI's sub-parsers.
    """
    parser = sub.add_parser("topics", help="create and list runwatch's Kafka topics")
    group = parser.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    ensure = group.add_parser("ensure", help="create the missing topics of schemas/topics.yaml")
    ensure.add_argument("--prefix", default="", help="prefix for every topic name")
    ensure.set_defaults(func=_ensure)
    listing = group.add_parser("list", help="compare schemas/topics.yaml with the broker")
    listing.add_argument("--prefix", default="", help="prefix for every topic name")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_list)


def _ensure(args: argparse.Namespace) -> int:
    from runwatch.adapters.topics import TopicProvisionError, ensure_topics

    try:
        created = ensure_topics(KafkaSettings().client_config(), prefix=args.prefix)
    except TopicProvisionError as exc:
        print(f"error: {exc}")
        return 1
    print(f"created {len(created)} topic(s)" + (": " + ", ".join(created) if created else ""))
    return 0


def _list(args: argparse.Namespace) -> int:
    from runwatch.adapters.topics import TopicProvisionError, topic_states

    try:
        states = topic_states(KafkaSettings().client_config(), prefix=args.prefix)
    except TopicProvisionError as exc:
        print(f"error: {exc}")
        return 1
    if args.json:
        print(json.dumps([dataclasses.asdict(s) for s in states]))
        return 0
    for s in states:
        have = "missing" if s.partitions is None else f"{s.partitions} partitions"
        flag = "" if s.partitions == s.expected_partitions else "  <- differs from the map"
        print(f"{s.name:32} {have:16} (map: {s.expected_partitions}){flag}")
    return 0 if all(s.partitions == s.expected_partitions for s in states) else 1
