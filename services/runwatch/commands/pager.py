"""``runwatch pager``: deliver alerts from rw.alerts to paging systems."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from runwatch.adapters.receivers import ReceiverConfigError
from runwatch.core.paging.routes import RulesError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``pager`` command."""
    parser = sub.add_parser(
        "pager", help="route alerts from rw.alerts to paging systems and webhooks"
    )
    parser.add_argument("--rules", type=Path, help="routing rules YAML (RUNWATCH_PAGER_RULES_FILE)")
    parser.add_argument("--state-dir", type=Path, help="state directory (RUNWATCH_PAGER_STATE_DIR)")
    parser.add_argument(
        "--check", action="store_true",
        help="validate the rules file and receiver secrets, print the receivers and exit",
    )
    parser.add_argument(
        "--ownership", type=Path,
        help="with --check: the ownership file whose teams owner matchers must name "
             "(default RUNWATCH_PROCESSOR_OWNERSHIP_FILE, else the shipped one)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from runwatch.adapters.settings import KafkaSettings
    from runwatch.pager.service import Pager, PagerSettings, describe

    overrides: dict[str, object] = {}
    if args.rules:
        overrides["rules_file"] = args.rules
    if args.state_dir:
        overrides["state_dir"] = args.state_dir
    settings = PagerSettings(**overrides)  # type: ignore[arg-type]
    try:
        if args.check:
            info = describe(settings)
            from runwatch.adapters.receivers import resolve_settings
            from runwatch.pager.service import load_rules

            for spec in load_rules(settings.rules_file).receivers.values():
                resolve_settings(spec)
            problems = _owner_problems(settings.rules_file, args.ownership)
            if problems:
                for line in problems:
                    print(f"runwatch pager: {line}", file=sys.stderr)
                return 2
            print(json.dumps(info, indent=2))
            return 0
        stop = threading.Event()
        pager = Pager(settings, KafkaSettings(), stop=stop)
    except (RulesError, ReceiverConfigError, OSError, ValueError) as exc:
        print(f"runwatch pager: {exc}", file=sys.stderr)
        return 2

    def _stop(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return pager.run()


def _owner_problems(rules_file: Path, ownership: Path | None) -> list[str]:
    """Owner matchers of ``rules_file`` that name no team of the ownership file."""
    from runwatch.core.paging.ownership import load_ownership
    from runwatch.core.paging.routes import unknown_owner_problems
    from runwatch.resources import configured_ownership_file, read_config

    teams = load_ownership(configured_ownership_file(ownership)).teams
    return unknown_owner_problems(read_config(rules_file), str(rules_file), teams)
