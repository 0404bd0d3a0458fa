"""``runwatch simulate``: the cluster simulator with fault injection and a scoreboard."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from runwatch.errors import FatalError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``simulate``."""
    p = sub.add_parser(
        "simulate",
        help="simulate a GPU cluster publishing telemetry, inject faults, score detection",
        description="Simulate N nodes x 8 GPUs and M runs publishing through the real SDK, "
        "agent and scheduler-hook code on a virtual clock; inject failure scenarios; with "
        "--report, read rw.alerts back and print the detection scoreboard.",
    )
    p.add_argument("--nodes", type=int, default=4, help="nodes, 8 GPUs each (default 4)")
    p.add_argument("--runs", type=int, default=2,
                   help="healthy runs; the first is the control (default 2)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--speed", type=float, default=20.0,
                   help="virtual seconds per wall second (default 20)")
    p.add_argument("--duration", type=float, default=1200.0,
                   help="virtual seconds to simulate (default 1200)")
    p.add_argument("--scenario", action="append", default=[], metavar="NAME",
                   help="inject a scenario or add a control run (repeatable; 'all' for every one; "
                   "'slo' for the SLO scenarios; 'list' to list)")
    p.add_argument("--report", action="store_true", help="print the detection scoreboard")
    p.add_argument("--offline", action="store_true",
                   help="no Kafka: fold the records through the processor's pure join")
    p.add_argument("--topic-prefix", default="", help="prefix of every topic name")
    p.add_argument("--slo-file", type=Path, default=None,
                   help="objectives of the SLO scenarios (default: the shipped "
                   "infra/slo/sim-slos.yaml); they are evaluated from the store "
                   "(CLICKHOUSE_URL, CLICKHOUSE_DATABASE) at virtual instants")
    p.add_argument("--grace", type=float, default=30.0,
                   help="with --collect 0: wall seconds to wait for the expected alerts after "
                   "the runs end (default 30)")
    p.add_argument("--collect", type=float, default=900.0,
                   help="wall seconds to keep collecting alerts after the runs end, node "
                   "agents sampling on (default 900: rules that fire minutes later count, "
                   "late false alerts on controls included; 0 = stop once every fault is "
                   "detected, within --grace)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from runwatch.sim import scenarios as sc

    if "list" in args.scenario:
        for s in (*sc.SCENARIOS.values(), *sc.SLO_SCENARIOS.values()):
            slo = f" [SLO {s.slo}]" if s.slo else ""
            if s.control:
                print(f"{s.name:24} control: {s.title} (expects no alert){slo}")
            else:
                print(f"{s.name:24} {s.title} (at {s.at_s:.0f}s, budget {s.budget_s:.0f}s, "
                      f"expects {s.detectors[0]} / {s.cause}){slo}")
        return 0
    names = _names(args.scenario, offline=args.offline)
    try:
        chosen = tuple(sc.get(n) for n in names)
    except ValueError as exc:
        print(f"runwatch simulate: {exc}", file=sys.stderr)
        return 2
    needs_store = [s.name for s in chosen if s.slo]
    if needs_store and args.offline:
        msg = (f"SLO scenarios ({', '.join(needs_store)}) are evaluated from what the sink "
               "stored in ClickHouse: they need Kafka, the sink and the store, not --offline")
        raise FatalError(msg)
    # written so that nan fails each test (nan --speed crashed, nan --grace never ended)
    if not (args.nodes >= 1 and args.runs >= 1 and 0 < args.speed < math.inf
            and 0 < args.duration < math.inf and 0 <= args.grace < math.inf
            and 0 <= args.collect < math.inf):
        print("runwatch simulate: --nodes, --runs, --speed and --duration must be positive, "
              "--grace and --collect not negative (finite numbers)", file=sys.stderr)
        return 2
    from runwatch.core.slo.spec import SloConfigError
    from runwatch.sim.report import print_progress, run_and_score
    from runwatch.sim.slodrive import SloUnavailable

    try:
        return run_and_score(
            nodes=args.nodes, runs=args.runs, seed=args.seed, speed=args.speed,
            duration_s=args.duration, scenarios=chosen, report=args.report,
            offline=args.offline, topic_prefix=args.topic_prefix, grace_s=args.grace,
            collect_s=args.collect, progress=print_progress, slo_file=args.slo_file,
        )
    except (SloUnavailable, SloConfigError) as exc:
        raise FatalError(str(exc)) from None


def _names(asked: list[str], *, offline: bool) -> list[str]:
    """Expand ``all`` (every scenario; offline, the processor's only) and ``slo`` (the SLO ones)."""
    from runwatch.sim import scenarios as sc

    out: list[str] = []
    for name in asked:
        if name == "all":
            out += [*sc.SCENARIOS, *([] if offline else sc.SLO_SCENARIOS)]
            if offline:
                print("runwatch simulate: --offline leaves out the SLO scenarios (they need "
                      "the store)", file=sys.stderr)
        elif name == "slo":
            out += list(sc.SLO_SCENARIOS)
        else:
            out.append(name)
    return list(dict.fromkeys(out))
