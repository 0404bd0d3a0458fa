"""The demo's progress display and summary (no services)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from runwatch.sim import scenarios as sc
from runwatch.sim.clock import VirtualClock
from runwatch.sim.demo import QUERIES, _summary
from runwatch.sim.progress import RichProgress
from runwatch.sim.runner import Progress, SimResult
from runwatch.sim.scoreboard import AlertSeen, Injection


def _alert(run: str, det: str, at: int, status: str = "firing") -> AlertSeen:
    return AlertSeen(run, det, "x", "learning", status, at, f"title of {det}")


@pytest.mark.parametrize("alerts,printed", [
    ((), 0),
    ((_alert("r1", "rule:non_finite", 5),), 1),
    ((_alert("r1", "rule:non_finite", 5), _alert("r1", "rule:non_finite", 6)), 1),
    ((_alert("r1", "rule:non_finite", 5), _alert("r2", "rule:failed_gate", 6),
      _alert("r3", "rule:x", 7, "resolved")), 2),
])
def test_progress_prints_each_new_alert_once(alerts, printed: int) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    with RichProgress(100.0, console) as p:
        for k in range(3):  # the same alerts again: printed once
            p.update(Progress(virtual_s=10.0 * k, duration_s=100.0, runs_active=2, runs_done=0,
                              records=10 * k, injected=(), alerts=alerts))
    assert buf.getvalue().count("  alert ") == printed


def test_summary_reports_time_to_detect_against_the_injection(capsys) -> None:
    inj = Injection("p-001-nan_loss", sc.get("nan_loss"), 10_000)
    res = SimResult(prefix="p", start_ms=0, clock=VirtualClock(1.0), injections=[inj],
                    control_runs=["p-000-control"], records=5, errors=0, wall_s=1.0,
                    alerts=[_alert("p-001-nan_loss", "rule:non_finite", 12_000),
                            _alert("p-000-control", "rule:stalled", 3_000)],
                    run_ids=["p-000-control", "p-001-nan_loss"])
    _summary(res)
    out = capsys.readouterr().out
    assert "rule:non_finite, probable cause learning; 2 virtual s after nan_loss" in out
    assert "p-000-control" in out and "no fault was injected" in out


def test_example_queries_are_scoped_to_the_demo_runs() -> None:
    assert len(QUERIES) == 3
    for _title, sql in QUERIES[:2]:
        assert "startsWith(run_id, '{p}')" in sql
