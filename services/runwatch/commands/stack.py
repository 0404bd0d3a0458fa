"""``runwatch stack up|down|status``: the local Kafka, ClickHouse store and Alertmanager.

``runwatch stack up processor sink pager slo`` (or ``up --with-services``) also
starts runwatch's own services under the same supervision.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from runwatch.stack.cluster import BROKER_NAMES, formatted_brokers
from runwatch.stack.manager import Stack
from runwatch.stack.secure import ROLES
from runwatch.stack.services import ALL_SERVICES, OPTIONAL_SERVICES, SERVICES, StackError
from runwatch.stack.settings import StackSettings

_STYLE = {"healthy": "green", "running": "yellow", "stopped": "red"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``stack`` command group."""
    parser = sub.add_parser("stack", help="start, stop and report the local stack")
    parser.add_argument("--state-dir", help="state directory (default: .runwatch in the checkout)")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    actions = parser.add_subparsers(dest="stack_command", metavar="ACTION")

    up = actions.add_parser("up", help="start Kafka, the ClickHouse store and Alertmanager")
    up.add_argument("--no-topics", action="store_true",
                    help="do not create the topics of schemas/topics.yaml")
    up.add_argument("--with-services", action="store_true",
                    help=f"also start {', '.join(OPTIONAL_SERVICES)}")
    up.add_argument("--secure", action="store_true",
                    help="SASL_SSL (SCRAM) listener, TLS and ACLs per role; CA, certificate "
                    "and passwords generated under <state>/secure (docs/security.md)")
    up.add_argument("--brokers", type=int, choices=range(1, len(BROKER_NAMES) + 1),
                    metavar="N", help="KRaft brokers (default 1; 3: a replicated cluster, "
                    "replication factor 3, min.insync.replicas=2; see docs/operations.md)")
    up.add_argument("services", nargs="*", type=_service, metavar="SERVICE",
                    help=f"services to start (default: {', '.join(SERVICES)}; optional: "
                    f"{', '.join(OPTIONAL_SERVICES)})")
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop the processes the stack started")
    down.add_argument("services", nargs="*", type=_service, metavar="SERVICE",
                      help="services to stop (default: everything recorded)")
    down.set_defaults(func=_down)

    env = actions.add_parser("env", help="print the KAFKA_* settings of a role of the "
                             "secured broker (`eval $(runwatch stack env --role sink)`)")
    env.add_argument("--role", required=True, choices=ROLES)
    env.set_defaults(func=_env)

    rotate = actions.add_parser("rotate", help="give a role of the secured broker a new "
                                "password (restart that role's clients afterwards)")
    rotate.add_argument("role", choices=ROLES)
    rotate.set_defaults(func=_rotate)

    status = actions.add_parser("status", help="report each service")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(func=_status)


def _service(value: str) -> str:
    if value not in ALL_SERVICES and value not in BROKER_NAMES:
        msg = f"unknown service {value!r} (choose from {', '.join(ALL_SERVICES)})"
        raise argparse.ArgumentTypeError(msg)
    return value


def _stack(args: argparse.Namespace) -> Stack:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    overrides: dict[str, object] = {"state_dir": args.state_dir} if args.state_dir else {}
    settings = StackSettings(**overrides)  # type: ignore[arg-type]
    brokers = getattr(args, "brokers", None) or formatted_brokers(settings)
    if brokers is not None and brokers != settings.brokers:  # a cluster stays one
        settings = settings.model_copy(update={"brokers": brokers})
    if getattr(args, "secure", False) or (settings.state / "kafka" / "secure.marker").is_file():
        settings = settings.model_copy(update={"secure": True})  # a secured broker stays so
    return Stack(settings)


def _env(args: argparse.Namespace) -> int:
    stack = _stack(args)
    if not stack.settings.secure:
        print(f"runwatch stack env: the broker in {stack.settings.state} is not secured "
              "(start it with `runwatch stack up --secure`)", file=sys.stderr)
        return 2
    from runwatch.stack.secure import SecureFiles, role_env

    files = SecureFiles(stack.settings.secure_dir)
    for key, value in role_env(files, stack.settings.bootstrap_servers, args.role).items():
        sys.stdout.write(f"export {key}={shlex.quote(value)}\n")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False)
    stack = _stack(args)
    if not stack.settings.secure or args.role == "admin":
        console.print("[red]error:[/red] only the roles of a secured broker rotate here "
                      "(the admin password is the broker's own login: see docs/security.md)")
        return 2
    from runwatch.stack.prepare import PrepareError, secure_broker
    from runwatch.stack.secure import SecureFiles

    files = SecureFiles(stack.settings.secure_dir)
    old = files.password_file(args.role).read_bytes()
    files.rotate(args.role)
    try:
        secure_broker(stack.settings, console.print)
    except PrepareError as exc:
        files.password_file(args.role).write_bytes(old)  # the broker still has the old one
        console.print(f"[red]error:[/red] {exc}")
        return 1
    console.print(f"{args.role}: new password in {files.password_file(args.role)}; "
                  "restart that role's clients")
    return 0


def _up(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False)
    stack = _stack(args)
    requested = list(args.services or stack.core)
    if args.with_services:
        requested += [s for s in OPTIONAL_SERVICES if s not in requested]
    core = [s for s in requested if s in stack.core]
    optional = [s for s in requested if s in OPTIONAL_SERVICES]
    if optional:  # reuse a healthy stack whoever started it; add what the services need
        for name in [c for c in core if stack.running(c) is None and stack.healthy(c)]:
            console.print(f"{name}: healthy at {stack.url(name)}; reusing it")
            core.remove(name)
        for name in optional:
            core += [n for n in stack.specs[name].needs
                     if n not in core and not stack.healthy(n)]
    failed: dict[str, str] = {}
    try:
        if core:
            failed.update(stack.up(console.print, core).failed)
        if "kafka" in core and "kafka" not in failed and not args.no_topics:
            from runwatch.stack.prepare import PrepareError, ensure_topics

            try:
                created = ensure_topics(stack.settings)
            except PrepareError as exc:
                console.print(f"[red]topics:[/red] {exc}")
                return 1
            if created:
                console.print(f"topics: created {len(created)} from schemas/topics.yaml")
        todo = [s for s in optional if stack.running(s) is None]
        if optional:
            from runwatch.stack.prepare import PrepareError, prepare

            try:
                prepare(stack.settings, todo, console.print)
            except PrepareError as exc:
                console.print("[red]error:[/red]", end=" ")
                console.print(str(exc), markup=False)
                return 1
            failed.update(stack.up(console.print, optional).failed)
    except StackError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    for name, why in failed.items():
        console.print(f"[red]{name} failed:[/red]", end=" ")
        console.print(why, markup=False)
    return 0 if not failed else 1


def _down(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False)
    outcome = _stack(args).down(console.print, args.services or None)
    if all(v == "not running" for v in outcome.values()):
        console.print("nothing to stop")
    return 0


def _status(args: argparse.Namespace) -> int:
    stack = _stack(args)
    rows = stack.status()
    if args.json:
        payload = {"state_dir": str(stack.settings.state), "services": [asdict(r) for r in rows]}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        table = Table(title=f"runwatch stack ({stack.settings.state})")
        for col in ("service", "state", "pid", "port", "address"):
            table.add_column(col, no_wrap=True)
        table.add_column("detail", overflow="fold")
        for r in rows:
            style = _STYLE[r.state]
            table.add_row(r.name, f"[{style}]{r.state}[/{style}]", str(r.pid or "-"),
                          str(r.port or "-"), r.url, r.detail)
        Console().print(table)
    return 0 if all(r.state == "healthy" for r in rows) else 3
