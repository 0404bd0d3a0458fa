"""The detection scoreboard: injections against the alerts that came back (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runwatch.sim.scenarios import Scenario

#: An alert counts for an injection if first seen at most this long before it (stamp skew).
SKEW_MS = 2_000


@dataclass(frozen=True, slots=True)
class Injection:
    """A scenario injected into a run (``injected_ms`` None: never reached)."""

    run_id: str
    scenario: Scenario
    injected_ms: int | None


@dataclass(frozen=True, slots=True)
class AlertSeen:
    """The parts of an Alert the scoreboard reads."""

    run_id: str
    detector: str
    indicator: str
    cause: str
    status: str
    first_seen_ms: int
    title: str
    received_wall_ms: int = 0

    @classmethod
    def from_alert(cls, alert: object, received_wall_ms: int = 0) -> AlertSeen:
        """Build from a ``runwatch.core.records.Alert``."""
        a: object = alert
        return cls(run_id=str(getattr(a, "run_id", "") or ""),
                   detector=str(getattr(a, "detector", "")),
                   indicator=str(getattr(a, "indicator", "")),
                   cause=str(getattr(a, "probable_cause", "")),
                   status=str(getattr(a, "status", "")),
                   first_seen_ms=int(getattr(a, "first_seen_ms", 0)),
                   title=str(getattr(a, "title", "")), received_wall_ms=received_wall_ms)


@dataclass(frozen=True, slots=True)
class Row:
    """One scenario's result."""

    scenario: str
    run_id: str
    detected: bool
    cause_correct: bool
    ttd_s: float | None
    budget_s: float
    within_budget: bool
    detector: str
    cause: str
    expected_cause: str


@dataclass(frozen=True, slots=True)
class Board:
    """The whole scoreboard."""

    rows: tuple[Row, ...]
    control_runs: tuple[str, ...]
    false_alerts: tuple[AlertSeen, ...]

    @property
    def passed(self) -> int:
        """Scenarios detected with the right cause within budget."""
        return sum(1 for r in self.rows if r.detected and r.cause_correct and r.within_budget)


def score(injections: Iterable[Injection], alerts: Iterable[AlertSeen],
          control_runs: Sequence[str]) -> Board:
    """Score every injection against the firing alerts of its run.

    A scenario is detected by the earliest firing alert on its run whose
    detector is one the scenario accepts and that was first seen no earlier
    than the injection (less :data:`SKEW_MS`). Time to detect is that alert's
    ``first_seen_ms`` (virtual event time) minus the injection time. Every
    firing alert on a healthy control run is a false alert.

    Args:
        injections: What was injected where.
        alerts: Alerts read back from rw.alerts.
        control_runs: Run ids of the healthy runs.

    Returns:
        The board.

    """
    firing = sorted((a for a in alerts if a.status == "firing"), key=lambda a: a.first_seen_ms)
    rows: list[Row] = []
    for inj in injections:
        sc = inj.scenario
        hit = None
        if inj.injected_ms is not None:
            hit = next((a for a in firing if a.run_id == inj.run_id and a.detector in sc.detectors
                        and a.first_seen_ms >= inj.injected_ms - SKEW_MS), None)
        ttd = None
        if hit is not None and inj.injected_ms is not None:
            ttd = max(hit.first_seen_ms - inj.injected_ms, 0) / 1000.0
        rows.append(Row(
            scenario=sc.name, run_id=inj.run_id, detected=hit is not None,
            cause_correct=hit is not None and hit.cause == sc.cause, ttd_s=ttd,
            budget_s=sc.budget_s, within_budget=ttd is not None and ttd <= sc.budget_s,
            detector=hit.detector if hit else "", cause=hit.cause if hit else "",
            expected_cause=sc.cause,
        ))
    controls = set(control_runs)
    false = tuple(a for a in firing if a.run_id in controls)
    return Board(tuple(rows), tuple(control_runs), false)


def format_board(board: Board) -> str:
    """Render the scoreboard as a Markdown table plus a totals line."""
    lines = ["| scenario | detected | cause correct | time to detect (s) | budget (s) | alert "
             "| cause |", "|---|---|---|---|---|---|---|"]
    for r in board.rows:
        ttd = f"{r.ttd_s:.0f}" if r.ttd_s is not None else "-"
        cause = r.cause or "-"
        if r.detected and not r.cause_correct:
            cause = f"{r.cause} (expected {r.expected_cause})"
        lines.append(f"| {r.scenario} | {'yes' if r.detected else 'NO'} | "
                     f"{'yes' if r.cause_correct else 'no'} | {ttd} | {r.budget_s:.0f} | "
                     f"{r.detector or '-'} | {cause} |")
    lines.append("")
    lines.append(f"{board.passed}/{len(board.rows)} scenarios detected with the right cause within "
                 f"budget; false alerts in {len(board.control_runs)} healthy control run(s): "
                 f"{len(board.false_alerts)}")
    for a in board.false_alerts:
        lines.append(f"  false alert on {a.run_id}: {a.detector} ({a.cause}) {a.title}")
    return "\n".join(lines)
