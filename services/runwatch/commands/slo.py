"""``runwatch slo serve | evaluate | status``: objectives on training outcomes (docs/slo.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import datetime
from typing import Any

from runwatch.core.jsontext import json_text
from runwatch.errors import FatalError

#: How long a round waits for its alerts' delivery reports: past the producer's message
#: timeout (10 s), after which a missing topic is told from a broker that does not answer.
DELIVERY_WAIT_S = 30.0


def _at(text: str | None) -> int:
    now = int(time.time() * 1000)
    if text is None:
        return now
    if text.isdigit():
        at = int(text)
    else:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            msg = f"--at {text!r}: give epoch milliseconds or an ISO 8601 time with a zone"
            raise FatalError(msg) from None
        if dt.tzinfo is None:
            msg = f"--at {text!r}: give the time zone (e.g. 2026-12-01T06:00:00+01:00 or ...Z)"
            raise FatalError(msg)
        at = int(dt.timestamp() * 1000)
    from runwatch.core.storage.rows import implausible_ms

    why = implausible_ms(at, now)
    if why:
        msg = f"--at {text!r}: {why}"
        raise FatalError(msg)
    return at


def _evaluator(args: argparse.Namespace, *, publish: bool, serve: bool = False
               ) -> tuple[Any, Any]:
    from runwatch.adapters import clickhouse as ch
    from runwatch.adapters.settings import ClickHouseSettings
    from runwatch.core.slo.spec import SloConfigError
    from runwatch.slo.service import (
        ClickHouseStore,
        Evaluator,
        PublishFailed,
        SloSettings,
        load_objectives,
    )

    settings = SloSettings()
    path = args.file or settings.file
    try:
        objectives = load_objectives(path)
    except SloConfigError as exc:
        raise FatalError(str(exc)) from None
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise FatalError(msg) from None
    from runwatch.core.storage.ddl import DdlError, check_identifier

    chs = ClickHouseSettings(**({"database": args.database} if args.database else {}))
    try:
        if serve:  # a database without the tables pauses its rounds until they are there
            check_identifier(chs.database, "database name")  # it is written into the queries
            client = ch.make_client(chs, database="")
        else:  # the check every governance command shares: name, existence, runwatch tables
            client = ch.open_database(chs, readonly=False)
    except DdlError as exc:
        raise FatalError(str(exc)) from None
    except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        raise FatalError(str(exc)) from None
    transport = None
    sender = None
    from runwatch.adapters.publisher import make_source

    source = make_source("slo")
    if publish:
        from runwatch.adapters.kafka import KafkaTransport
        from runwatch.adapters.publisher import Publisher

        transport = KafkaTransport(name="slo")
        publisher = Publisher(transport, kind="slo")
        source = publisher.source
        topic = args.topic or settings.alerts_topic

        def sender(alerts: list[Any]) -> None:
            """Hand the alerts over and wait for their delivery reports.

            Refused records (a missing topic, a record the broker rejects) raise
            :class:`PublishFailed`, so the round keeps its books as they were and
            the alerts go out again. Records that wait in the spool for a broker
            that does not answer count as sent: the spool delivers them in order.
            """
            failed = transport.counters().failed
            for alert in alerts:
                rec, value = publisher.encode_one(alert)
                transport.produce(topic, rec.dedup_key, value)
            transport.flush(max(DELIVERY_WAIT_S, 3 * transport.settings.message_timeout_ms / 1000))
            c = transport.counters()
            if c.failed > failed:
                why = (f"topic {topic!r} does not exist (--topic or "
                       "RUNWATCH_SLO_ALERTS_TOPIC)" if c.missing_topic
                       else "Kafka refused them (see the log)")
                msg = f"{c.failed - failed} of {len(alerts)} alert(s) not delivered: {why}"
                raise PublishFailed(msg)

    from runwatch.core.paging.ownership import RulesError, load_ownership
    from runwatch.core.storage.retention import parse_rules
    from runwatch.resources import retention_file

    rules = parse_rules(retention_file().read_text(encoding="utf-8"))
    ownership = None
    if publish:
        try:
            ownership = load_ownership(settings.ownership_file)
        except RulesError as exc:
            raise FatalError(str(exc)) from None
    ev = Evaluator(objectives, ClickHouseStore(client), chs.database, source=source,
                   publish=sender, raw_ttl_ms=rules.raw_ttl_s * 1000, ownership=ownership)
    return ev, transport


def _line(st: Any) -> str:
    from runwatch.core.slo.evaluate import percent

    sli = "no data" if st.sli is None else f"{st.good}/{st.valid} = {st.sli:.1%}"
    left = "-" if st.budget_left is None else f"{st.budget_left:.0%}"
    return f"{st.name}: {st.state}, SLI {sli} (target {percent(st.target)}), budget left {left}"


def _evaluate(args: argparse.Namespace) -> int:
    at = _at(args.at)  # a bad --at is refused before the store and the broker are reached
    ev, transport = _evaluator(args, publish=True)
    spooled = 0
    try:
        r = ev.evaluate(at)
    finally:
        if transport is not None:
            spooled = transport.close(30.0).in_spool
    if r.paused:
        msg = f"nothing evaluated: {r.error}"
        raise FatalError(msg)
    for st in r.statuses:
        print(_line(st))
    if r.past:
        print(f"{', '.join(r.past)}: a later round already decided (--at is before it): SLI "
              "points written, no alert decided")
    if r.undelivered:
        msg = (f"{r.error}; their objectives' alert state was not saved, so the next round "
               "sends them again")
        raise FatalError(msg)
    print(f"{len(r.alerts)} alert(s) published")
    if spooled:
        print(f"{spooled} record(s) spooled locally (Kafka did not answer); the next "
              "`runwatch slo evaluate` or `slo serve` sends them", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from runwatch.slo.service import SloSettings

    interval = args.interval if args.interval is not None else SloSettings().interval_s
    # 0 (or NaN) evaluated in a loop without pause, on the shared store; inf overflows the wait
    if not 0 < interval <= threading.TIMEOUT_MAX:
        msg = (f"slo serve: the interval must be a positive number of seconds, got {interval:g} "
               "(--interval or RUNWATCH_SLO_INTERVAL_S)")
        raise FatalError(msg)
    ev, transport = _evaluator(args, publish=True, serve=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"runwatch slo: {len(ev.objectives)} objectives every {interval:g} s", flush=True)
    try:
        ev.serve(interval, stop)
    finally:
        if transport is not None:
            transport.close(30.0)
    return 0


def _status(args: argparse.Namespace) -> int:
    from runwatch.adapters import clickhouse as ch

    at = _at(args.at)
    ev, _ = _evaluator(args, publish=False)
    try:
        statuses = ev.statuses(at)
    except ch.ClickHouseUnavailable as exc:
        msg = f"the store did not answer: {exc}"
        raise FatalError(msg) from None
    except ch.ClickHouseRejected as exc:  # one line, as runwatch investigate, not the SQL
        raise FatalError(ch.refusal(exc, ev.db)) from None
    if args.json:
        print(json_text([st.to_json() for st in statuses], indent=1))
        return 0
    print_statuses(statuses)
    return 0


def print_statuses(statuses: list[Any]) -> None:
    """Print the statuses as the ``slo status`` table."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from runwatch.core.slo.evaluate import percent

    table = Table("objective", "SLI", "target", "budget left", "burn rate", "state",
                  "bad events (runs)")
    for st in statuses:
        sli = "no data" if st.sli is None else f"{st.good}/{st.valid} = {st.sli:.1%}"
        left = "-" if st.budget_left is None else f"{st.budget_left:.0%}"
        burn = " ".join(f"{k}:{'-' if v is None else f'{v:.1f}'}" for k, v in
                        st.burn_rates.items())
        # each run once, in the order of its first bad event (a run in many buckets)
        bad = ", ".join(dict.fromkeys(r for e in st.bad[-5:] for r in (e.run_ids or (e.key,))))
        if len(st.bad) > 5:
            bad = f"{len(st.bad)} bad; last: {bad}"
        # run ids and dataset URIs are what producers wrote: text, never rich markup
        table.add_row(st.name, sli, percent(st.target), left, burn, st.state, Text(bad))
    Console(width=200, file=sys.stdout).print(table)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``slo`` command group.

    Args:
        sub: The top-level sub-parsers.
    """
    parser = sub.add_parser("slo", help="objectives on training outcomes: budgets, burn rates")
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    actions = parser.add_subparsers(dest="slo_command", metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--file", type=_path, default=None,
                       help="objectives (default RUNWATCH_SLO_FILE or the shipped example)")
        p.add_argument("--database", help="database (default CLICKHOUSE_DATABASE or runwatch)")

    serve = actions.add_parser("serve", help="evaluate on a schedule, alert to rw.alerts")
    common(serve)
    serve.add_argument("--interval", type=float, default=None,
                       help="seconds between rounds (default RUNWATCH_SLO_INTERVAL_S, 60)")
    serve.add_argument("--topic", default=None, help="alerts topic (default rw.alerts)")
    serve.set_defaults(func=_serve)
    evaluate = actions.add_parser("evaluate", help="one round: SLI points, budgets, alerts")
    common(evaluate)
    evaluate.add_argument("--at", help="evaluation time (epoch ms or ISO 8601; default now)")
    evaluate.add_argument("--topic", default=None, help="alerts topic (default rw.alerts)")
    evaluate.set_defaults(func=_evaluate)
    status = actions.add_parser("status", help="SLI, budget left, burn rates, bad events")
    common(status)
    status.add_argument("--at", help="evaluation time (epoch ms or ISO 8601; default now)")
    status.add_argument("--json", action="store_true", help="one JSON document")
    status.set_defaults(func=_status)


def _path(text: str) -> Any:
    from pathlib import Path

    return Path(text)
