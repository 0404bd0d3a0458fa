"""``runwatch demo``: the stack, the services, a simulated cluster with faults, a summary."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``demo``."""
    p = sub.add_parser("demo", help="start everything, simulate faults for ~2 minutes, summarise, "
                                    "write the investigation page of a faulty run")
    p.add_argument("--speed", type=float, default=20.0, help="virtual s per wall s (default 20)")
    p.add_argument("--duration", type=float, default=2400.0,
                   help="virtual seconds to simulate (default 2400 = 2 minutes at 20x)")
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--state-dir", type=Path, help="stack state directory (default .runwatch)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from runwatch.sim.demo import run_demo

    return run_demo(speed=args.speed, duration_s=args.duration, seed=args.seed,
                    state_dir=args.state_dir)
