"""``runwatch chaos``: faults one after another on a 3-broker stack under load (docs/chaos.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``chaos`` command."""
    parser = sub.add_parser(
        "chaos", help="inject faults into a 3-broker stack under load; print the table")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="the chaos stack's state (wiped first; default .runwatch-chaos)")
    parser.add_argument("--port-base", type=int, default=39000,
                        help="ports: Kafka BASE+92 (+100, +200), controllers BASE+94, "
                        "store BASE+123, Alertmanager BASE+93 (default 39000)")
    parser.add_argument("--keep", action="store_true", help="leave the chaos stack running")
    parser.add_argument("--budget", type=float, default=900.0,
                        help="bound on the whole run in seconds (default 900)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from runwatch.chaos.runner import ChaosSettings, run
    from runwatch.stack.settings import find_checkout_root
    from runwatch.testing.nvml_double import FakeNvml8

    logging.getLogger("httpx").setLevel(logging.WARNING)
    state = args.state_dir or find_checkout_root() / ".runwatch-chaos"
    cfg = ChaosSettings(state_dir=state.resolve(), port_base=args.port_base, keep=args.keep,
                        budget_s=args.budget)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the chaos stack on the way out

    def report(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = run(cfg, report, nvml_module=FakeNvml8(gpus=2))
    print(result.table)
    for row in result.rows:
        for note in row.notes:
            print(f"  {row.fault}: {note}")
    print(f"chaos: {'OK' if result.ok else 'FAILED'} in {result.seconds:.0f}s "
          f"(report: {state / 'chaos-report.json'})")
    return 0 if result.ok else 1
