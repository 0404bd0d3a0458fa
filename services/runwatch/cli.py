"""The ``runwatch`` command line.

Every module in :mod:`runwatch.commands` contributes one command group through
a ``register(subparsers)`` function that adds its sub-parsers and sets
``func`` (taking the parsed namespace, returning an exit code) on each. Modules
are found by listing the package, so adding a command is adding a module.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from runwatch import commands
from runwatch._version import __version__
from runwatch.errors import FatalError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""What ``--log-level`` takes (in any case)."""
LIBRARY_CHATTER = ("urllib3.connectionpool", "clickhouse_connect.driver", "httpx", "httpcore")
"""Library loggers whose warnings repeat what the command's own error line says (urllib3's
"Retrying ...", clickhouse-connect's "Unexpected Http Driver Exception" before the one
``error: ClickHouse at ... does not answer``; httpx's line per request, which the pager's
own lines already say): shown from ``--log-level DEBUG`` only (the pager redacts its
receivers' secrets from every line, DEBUG included: ``runwatch.pager.redact``). Set
here, for the command line; a program importing runwatch keeps its own logging."""


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser from every command module.

    Returns:
        The top-level parser.
    """
    parser = argparse.ArgumentParser(
        prog="runwatch",
        description="Monitor ML training pipelines: telemetry, detectors, storage, paging.",
    )
    parser.add_argument("--version", action="version", version=f"runwatch {__version__}")
    parser.add_argument(  # a level logging does not know was a ValueError traceback
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
        help="logging level (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        try:
            module = importlib.import_module(f"{commands.__name__}.{info.name}")
        except ModuleNotFoundError as exc:
            line = _missing_extra_line(info.name, exc)
            if line is None:
                raise
            _register_unavailable(sub, info.name, line)
            continue
        module.register(sub)
    return parser


def _register_unavailable(sub: argparse._SubParsersAction, name: str, line: str) -> None:
    """Add a command whose module needs an extra that is not installed: it prints ``line``."""

    def refuse(_args: argparse.Namespace) -> int:
        print(line, file=sys.stderr)
        return 2

    # No option prefix: whatever follows the command is accepted, then refused with ``line``.
    parser = sub.add_parser(name, help=f"(not installed) {line}", add_help=False,
                            prefix_chars="\0")
    parser.add_argument("rest", nargs="*")
    parser.set_defaults(func=refuse)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns:
        The process exit code.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # as parse_args reports them, with the command's own exit status if it has one
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: unrecognized arguments: {' '.join(extra)}",
              file=sys.stderr)
        return int(getattr(args, "usage_exit", 2))
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if logging.getLevelName(args.log_level.upper()) != logging.DEBUG:
        for name in LIBRARY_CHATTER:
            logging.getLogger(name).setLevel(logging.ERROR)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`runwatch db render | head`): stop quietly, as Unix tools do;
        # stdout goes to /dev/null so the interpreter's flush at exit cannot fail again
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell shows for a writer the pipe closed on
    except FatalError as exc:  # wrong credentials, refused, cannot provision: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        line = _missing_extra_line(args.command, exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    except Exception as exc:
        line = _settings_error_line(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2


def _settings_error_line(exc: Exception) -> str | None:
    """Return the one line for a settings class that refused the environment, else None."""
    if "pydantic" not in sys.modules:
        return None
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    from runwatch.adapters.settings import settings_error_line

    return settings_error_line(exc)


def _missing_extra_line(command: str | None, exc: ModuleNotFoundError) -> str | None:
    """Return the one line naming the extra to install, or None if ``exc`` is a real bug."""
    from runwatch.extras import MissingExtraError, extra_for, install_hint

    if isinstance(exc, MissingExtraError):
        return str(exc)
    extra = extra_for(command, exc.name)
    if extra is None:
        return None
    return f"{install_hint(extra, f'runwatch {command}')} (missing: {exc.name})"


if __name__ == "__main__":
    sys.exit(main())
