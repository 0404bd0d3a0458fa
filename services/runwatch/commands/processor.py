"""``runwatch processor worker``: the stream processor (faust or the plain runtime)."""

from __future__ import annotations

import argparse
import os


def _worker(args: argparse.Namespace) -> int:
    from runwatch.processor.__main__ import main

    if args.runtime:  # as RUNWATCH_PROCESSOR_RUNTIME, which the settings read
        os.environ["RUNWATCH_PROCESSOR_RUNTIME"] = args.runtime
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
    worker.add_argument("--runtime", choices=("faust", "plain"), default=None,
                        help="what drives the worker (default: RUNWATCH_PROCESSOR_RUNTIME, "
                             "else faust; see docs/processor.md#runtime)")
    worker.set_defaults(func=_worker)
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
