"""Service layer of ``runwatch simulate``: run (online or offline), score, print."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from runwatch.sim.runner import Progress, SimConfig, SimResult, run_simulation
from runwatch.sim.scenarios import Scenario
from runwatch.sim.scoreboard import AlertSeen, format_board


def print_progress(p: Progress) -> None:
    """Print one progress line to stderr (overwritten in place on a terminal)."""
    firing = sum(1 for a in p.alerts if a.status == "firing")
    if p.runs_active == 0 and p.virtual_s > p.duration_s:  # the post-run collection window
        print(f"runs ended; collecting alerts (t={p.virtual_s:7.0f}s, agents sampling)  "
              f"records {p.records:8d}  alerts {firing:3d}",
              end="\r" if sys.stderr.isatty() else "\n", file=sys.stderr, flush=True)
        return
    line = (f"t={p.virtual_s:7.0f}s/{p.duration_s:.0f}s  runs active {p.runs_active:3d} "
            f"done {p.runs_done:3d}  records {p.records:8d}  injected {len(p.injected):2d}  "
            f"alerts {firing:3d}")
    end = "\r" if sys.stderr.isatty() else "\n"
    print(line, end=end, file=sys.stderr, flush=True)


def simulate_offline(cfg: SimConfig) -> SimResult:
    """Simulate without Kafka: the published messages through the processor's agents in memory."""
    from runwatch.adapters.publisher import CaptureTransport
    from runwatch.sim.replay import replay

    transport = CaptureTransport()
    res = run_simulation(cfg, transport=transport)
    alerts = replay(transport.messages)
    res.alerts = [AlertSeen.from_alert(a) for a in alerts]
    return res


def run_and_score(*, nodes: int, runs: int, seed: int, speed: float, duration_s: float,
                  scenarios: tuple[Scenario, ...], report: bool, offline: bool,
                  topic_prefix: str = "", grace_s: float = 30.0, collect_s: float = 0.0,
                  progress: Callable[[Progress], None] | None = None,
                  slo_file: Path | None = None) -> int:
    """Run a simulation and print its summary (and the scoreboard with ``report``).

    Returns:
        0 (the scoreboard is information, not a verdict); 1 when producing failed.

    Raises:
        SloUnavailable: SLO scenarios offline, or without a store holding the SLO tables.
        SloConfigError: The SLO scenarios' objectives file is invalid.

    """
    cfg = SimConfig(nodes=nodes, runs=runs, seed=seed, speed=speed, duration_s=duration_s,
                    scenarios=scenarios, topic_prefix=topic_prefix, grace_s=grace_s,
                    collect_s=collect_s if report or offline else 0.0,
                    collect_alerts=report and not offline, slo_file=slo_file)
    if offline:
        res = simulate_offline(dataclasses.replace(cfg, collect_alerts=False))
    else:
        res = run_simulation(cfg, progress=progress)
    print(file=sys.stderr)
    print(f"simulated {len(res.run_ids)} runs on {nodes} nodes x 8 GPUs for {duration_s:.0f} "
          f"virtual s at {speed:g}x in {res.wall_s:.0f} wall s: {res.records} records, "
          f"{res.errors} producer errors (run ids {res.prefix}-*)")
    if report:
        print()
        print(format_board(res.board(), res.ended_wall_ms))
    return 1 if res.errors else 0

