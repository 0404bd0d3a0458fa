"""``runwatch processor worker``: the stream processor (faust)."""

from __future__ import annotations

import argparse


def _worker(args: argparse.Namespace) -> int:
    from runwatch.processor.__main__ import main

    faust_args = ["worker", "-l", args.loglevel]
    main(faust_args)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``runwatch processor worker``."""
    parser = sub.add_parser("processor", help="stream processor: join by run, detect, alert")
    psub = parser.add_subparsers(dest="processor_command", metavar="SUBCOMMAND")
    worker = psub.add_parser(
        "worker", help="run one worker (settings from RUNWATCH_PROCESSOR_* and KAFKA_* env)"
    )
    worker.add_argument("-l", "--loglevel", default="info", help="faust log level")
    worker.set_defaults(func=_worker)
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
