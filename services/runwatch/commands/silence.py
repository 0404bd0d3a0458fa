"""``runwatch silence add|list|expire``: mute alerts for a while, durably."""

from __future__ import annotations

import argparse
import getpass
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``silence`` command group."""
    parser = sub.add_parser("silence", help="add, list and expire pager silences")
    parser.add_argument("--state-dir", type=Path, help="pager state directory "
                        "(RUNWATCH_PAGER_STATE_DIR)")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    actions = parser.add_subparsers(dest="silence_command", metavar="ACTION")
    # --state-dir after the action too (`silence add ... --state-dir DIR`), as its hint says
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS,
                       help="pager state directory (RUNWATCH_PAGER_STATE_DIR)")

    add = actions.add_parser("add", parents=[state],
                             help="silence alerts matching every --match")
    add.add_argument("--match", action="append", required=True, metavar="K=V",
                     help="matcher: name=value, name!=value or name=~regex (repeatable)")
    add.add_argument("--for", dest="duration", required=True,
                     help="duration, e.g. 30m, 2h, 1d, 1w, 1y")
    add.add_argument("--reason", required=True, help="why (shown in logs and lists)")
    add.add_argument("--by", default=None, help="who (default: current user)")
    add.add_argument("--ownership", type=Path, default=None,
                     help="the ownership file whose teams an owner matcher must name "
                          "(default RUNWATCH_PROCESSOR_OWNERSHIP_FILE, else the shipped one)")
    add.set_defaults(func=_add)

    lst = actions.add_parser("list", parents=[state],
                             help="list silences (active ones unless --all)")
    lst.add_argument("--all", action="store_true", help="include expired silences")
    lst.add_argument("--json", action="store_true", help="print JSON lines")
    lst.set_defaults(func=_list)

    exp = actions.add_parser("expire", parents=[state], help="end a silence now")
    exp.add_argument("id", help="silence id (a unique prefix is enough)")
    exp.set_defaults(func=_expire)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _fail(action: str, exc: BaseException) -> int:
    """One error line for a state directory or silence file that cannot be used; exit 2."""
    why = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    print(f"runwatch silence {action}: {why}", file=sys.stderr)
    return 2


def _store(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Return the silences the command works on.

    Those of ``--state-dir``, else ``RUNWATCH_PAGER_STATE_DIR``'s, else the local stack's
    pager's when one exists (``runwatch stack up --with-services`` keeps its pager's state
    under the stack's own folder: silences written to the user default never reached it),
    else the pager's default.
    """
    import os

    from runwatch.pager.service import PagerSettings
    from runwatch.pager.state import SilenceStore

    state_dir = args.state_dir
    if state_dir is None and not os.environ.get("RUNWATCH_PAGER_STATE_DIR"):
        from runwatch.stack.settings import StackSettings

        stack = StackSettings().state / "pager"
        if stack.is_dir():
            print(f"runwatch silence: the local stack's pager ({stack}; --state-dir to "
                  "choose another)", file=sys.stderr)
            state_dir = stack
    return SilenceStore(state_dir or PagerSettings().state_dir)


_WEEKS_YEARS = {"w": 7 * 86_400_000, "y": 365 * 86_400_000}
"""``--for`` also takes weeks and years, as Alertmanager's ``amtool silence add`` does."""


def _silence_duration_ms(text: str, parse: Callable[[str], int]) -> int:
    """Parse ``--for``: the rules' durations (``30m``, ``2h``, ``1d``) plus ``1w`` and ``1y``."""
    m = re.fullmatch(r"(\d+)([wy])", text.strip())
    if m is not None:
        return int(m.group(1)) * _WEEKS_YEARS[m.group(2)]
    try:
        return parse(text)
    except ValueError:
        msg = f"bad duration {text!r} (use e.g. 30m, 2h, 1d, 1w, 1y)"
        raise ValueError(msg) from None


def _add(args: argparse.Namespace) -> int:
    from runwatch.core.paging.routes import attribute_problem, parse_duration_ms, value_problem
    from runwatch.core.paging.silencing import matches_empty, parse_matcher
    from runwatch.core.yamlconf import LONGEST_DURATION_MS

    try:
        matchers = tuple(parse_matcher(m) for m in args.match)
        duration = _silence_duration_ms(args.duration, parse_duration_ms)
    except ValueError as exc:
        print(f"runwatch silence add: {exc}", file=sys.stderr)
        return 2
    for m in matchers:  # a silence that can never match mutes nothing, silently
        problem = attribute_problem(m.name) or (
            None if m.op == "!=" else value_problem(m.name, m.value, regex=m.op == "=~"))
        if problem is None and m.name == "status" and not m.accepts({"status": "firing"}):
            problem = ("a silence mutes firing alerts only, never resolves: a matcher on "
                       "status must match firing")
        if problem is None and m.name == "owner" and m.op != "!=":
            problem = _unknown_owner(m, args.ownership)
        if problem is not None:  # ("not that value" can match whatever the value)
            print(f"runwatch silence add: --match {m}: {problem}", file=sys.stderr)
            return 2
    if matches_empty(matchers):  # mutes every alert without those values
        print(f"runwatch silence add: --match {' --match '.join(map(str, matchers))}: every "
              "matcher also matches an empty value, so the silence would mute every alert "
              "without it (an unset variable in --match team=$TEAM mutes every run without a "
              "team); as in Alertmanager, at least one matcher must not match the empty "
              "string (a broad silence: add e.g. --match 'severity=~warning|critical')",
              file=sys.stderr)
        return 2
    if duration <= 0:  # a silence that has ended as it is made mutes nothing
        print(f"runwatch silence add: --for {args.duration!r} must be longer than 0 "
              "(e.g. 30m, 2h, 1d)", file=sys.stderr)
        return 2
    if duration > LONGEST_DURATION_MS:
        print(f"runwatch silence add: --for {args.duration!r} is longer than ten years; "
              "expire the silence when it is no longer needed instead", file=sys.stderr)
        return 2
    if not args.reason.strip():
        print("runwatch silence add: --reason must not be empty", file=sys.stderr)
        return 2
    by = args.by or getpass.getuser()
    try:
        s = _store(args).add(matchers, _now_ms(), duration, args.reason.strip(), by)
    except (ValueError, OSError) as exc:
        return _fail("add", exc)
    print(s.silence_id)
    return 0


def _unknown_owner(m: Any, ownership: Path | None) -> str | None:
    """Say why an owner matcher can match no team of the ownership file (None when it can).

    An alert's owner is a team of the ownership file, so a silence on another owner
    (a typo) mutes nothing, as ``pager --check`` says of such a route.
    """
    from runwatch.core.paging.ownership import RulesError, load_ownership
    from runwatch.resources import configured_ownership_file

    path = configured_ownership_file(ownership)
    try:
        teams = load_ownership(path).teams
    except (RulesError, OSError) as exc:
        return f"cannot read the ownership file to check the owner: {exc}"
    if any(m.accepts({"owner": t}) for t in teams):
        return None
    return (f"names no team of the ownership file {path} ({', '.join(sorted(teams))}): "
            "the silence would mute nothing")


def _list(args: argparse.Namespace) -> int:
    from runwatch.core.paging.payloads import iso_ms

    now = _now_ms()
    try:
        stored = _store(args).load()
    except (ValueError, OSError) as exc:
        return _fail("list", exc)
    silences = [s for s in stored if args.all or s.ends_at_ms > now]
    for s in silences:
        state = "active" if s.active(now) else ("pending" if s.starts_at_ms > now else "expired")
        if args.json:
            print(json.dumps({
                "id": s.silence_id, "state": state, "matchers": [str(m) for m in s.matchers],
                "starts_at": iso_ms(s.starts_at_ms), "ends_at": iso_ms(s.ends_at_ms),
                "reason": s.reason, "created_by": s.created_by,
            }))
        else:
            print(f"{s.silence_id}  {state:<7}  until {iso_ms(s.ends_at_ms)}  "
                  f"{' '.join(str(m) for m in s.matchers)}  # {s.reason} ({s.created_by})")
    if not silences and not args.json:
        print("no silences", file=sys.stderr)
    return 0


def _expire(args: argparse.Namespace) -> int:
    try:
        s = _store(args).expire(args.id, _now_ms())
    except KeyError as exc:
        print(f"runwatch silence expire: {exc.args[0]}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        return _fail("expire", exc)
    print(f"expired {s.silence_id}")
    return 0
