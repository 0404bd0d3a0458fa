"""``runwatch alerts tail``: print alerts from rw.alerts as they come."""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``alerts`` command group."""
    parser = sub.add_parser("alerts", help="follow alerts")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    actions = parser.add_subparsers(dest="alerts_command", metavar="ACTION")
    tail = actions.add_parser("tail", help="subscribe to rw.alerts and print alerts as they come")
    tail.add_argument("--run", help="only this run id")
    tail.add_argument("--severity", choices=("info", "warning", "critical"))
    tail.add_argument("--cause", choices=(
        "data", "execution", "learning", "artifact", "infrastructure", "unknown"))
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest alert")
    tail.add_argument(
        "--topic", default=None, help="alerts topic (default: rw.alerts)",
    )
    tail.add_argument("--max", type=int, default=None, help="exit after this many alerts")
    tail.set_defaults(func=_tail)


def _tail(args: argparse.Namespace) -> int:
    from rich.console import Console

    from runwatch.adapters.settings import KafkaSettings
    from runwatch.pager.service import PagerSettings
    from runwatch.pager.tail import TailFilter, json_line, rich_line, tail

    if args.max is not None and args.max < 1:  # 0 printed one alert, then stopped
        print(f"runwatch alerts tail: --max must be at least 1, not {args.max}",
              file=sys.stderr)
        return 2
    console = Console(highlight=False)

    def emit(alert: object) -> None:
        if args.json:
            sys.stdout.write(json_line(alert) + "\n")
            sys.stdout.flush()
        else:
            console.print(rich_line(alert))

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    topic = args.topic or PagerSettings().alerts_topic
    tail(
        KafkaSettings(), topic, TailFilter(args.run, args.severity, args.cause), emit,
        from_beginning=args.from_beginning, stop=stop, max_alerts=args.max,
    )
    return 0
