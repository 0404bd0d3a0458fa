"""The detection scoreboard: injections against the alerts that came back (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
    ended_wall_ms: int | None = None


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
    alert_id: str = ""

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
                   title=str(getattr(a, "title", "")), received_wall_ms=received_wall_ms,
                   alert_id=str(getattr(a, "alert_id", "") or ""))


@dataclass(frozen=True, slots=True)
class Row:
    """One fault run's result.

    ``forbidden`` lists detectors the scenario rules out that fired on the run
    anyway (e.g. an image page on a run that has no image); ``others`` every
    other detector that fired on it, for information; ``flaps`` counts
    resolutions of the expected alert received while a persistent fault's run
    was still going (read back live only: offline alerts have no arrival time).
    """

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
    forbidden: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    flaps: int = 0

    @property
    def passed(self) -> bool:
        """Detected with the right cause within budget; nothing ruled out fired, no flapping."""
        return (self.detected and self.cause_correct and self.within_budget
                and not self.forbidden and not self.flaps)


@dataclass(frozen=True, slots=True)
class ControlRow:
    """One healthy control run and the alerts it raised (any is a false alert)."""

    scenario: str
    run_id: str
    alerts: tuple[AlertSeen, ...]


@dataclass(frozen=True, slots=True)
class Board:
    """The whole scoreboard."""

    rows: tuple[Row, ...]
    control_runs: tuple[str, ...]
    false_alerts: tuple[AlertSeen, ...]
    controls: tuple[ControlRow, ...] = ()

    @property
    def passed(self) -> int:
        """Fault runs detected with the right cause within budget (nothing ruled out fired)."""
        return sum(1 for r in self.rows if r.passed)

    @property
    def ok(self) -> bool:
        """Every fault passed and no control raised anything."""
        return self.passed == len(self.rows) and not self.false_alerts


def score(injections: Iterable[Injection], alerts: Iterable[AlertSeen],
          control_runs: Sequence[str], control_names: Mapping[str, str] | None = None,
          control_slos: Mapping[str, str] | None = None) -> Board:
    """Score every injection against the firing alerts of its run.

    A scenario is detected by the earliest firing alert on its run whose
    detector is one the scenario accepts and that was first seen no earlier
    than the injection (less :data:`SKEW_MS`). Time to detect is that alert's
    ``first_seen_ms`` (virtual event time) minus the injection time. Every
    firing alert on a healthy control run is a false alert, whenever it came.
    An SLO scenario's alert names no run: it is its objective's
    (``slo:<objective>``, one objective per SLO scenario), and every firing
    alert of a control's objective is a false alert too.

    Args:
        injections: What was injected where.
        alerts: Alerts read back from rw.alerts.
        control_runs: Run ids of the healthy runs (plain ones and control scenarios).
        control_names: Control scenario name per run id (plain healthy runs: absent).
        control_slos: The objective of an SLO control, per run id.

    Returns:
        The board.

    """
    alerts = list(alerts)
    firing = sorted((a for a in alerts if a.status == "firing"), key=lambda a: a.first_seen_ms)
    # an alert re-sent with the cause that evidence processed after it named (the same
    # alert id): its latest record, as received, names the alert's cause (as the store's
    # latest row does)
    latest = {a.alert_id: a for a in alerts if a.status == "firing" and a.alert_id}
    resolved = [a for a in alerts if a.status == "resolved"]
    rows: list[Row] = []
    for inj in injections:
        sc = inj.scenario
        hit = None
        if inj.injected_ms is not None:
            hit = next((a for a in firing if (a.run_id == inj.run_id or sc.slo)
                        and a.detector in sc.detectors
                        and a.first_seen_ms >= inj.injected_ms - SKEW_MS), None)
        if hit is not None:
            hit = latest.get(hit.alert_id, hit)
        ttd = None
        if hit is not None and inj.injected_ms is not None:
            ttd = max(hit.first_seen_ms - inj.injected_ms, 0) / 1000.0
        on_run = sorted({a.detector for a in firing if a.run_id == inj.run_id
                         or (sc.slo and a.detector == f"slo:{sc.slo}")})
        flaps = 0
        if sc.persistent and inj.ended_wall_ms is not None:
            flaps = sum(1 for a in resolved if a.run_id == inj.run_id
                        and a.detector in sc.detectors
                        and 0 < a.received_wall_ms < inj.ended_wall_ms)
        rows.append(Row(
            scenario=sc.name, run_id=inj.run_id, detected=hit is not None,
            cause_correct=hit is not None and hit.cause == sc.cause, ttd_s=ttd,
            budget_s=sc.budget_s, within_budget=ttd is not None and ttd <= sc.budget_s,
            detector=hit.detector if hit else "", cause=hit.cause if hit else "",
            expected_cause=sc.cause,
            forbidden=tuple(d for d in on_run if d in sc.forbidden),
            others=tuple(d for d in on_run if d not in sc.detectors and d not in sc.forbidden),
            flaps=flaps,
        ))
    names = dict(control_names or {})
    slos = dict(control_slos or {})
    controls = tuple(ControlRow(names.get(r, "healthy"), r,
                                tuple(a for a in firing if a.run_id == r
                                      or (r in slos and a.detector == f"slo:{slos[r]}")))
                     for r in control_runs)
    false = tuple(a for c in controls for a in c.alerts)
    return Board(tuple(rows), tuple(control_runs), false, controls)


def format_board(board: Board, ended_wall_ms: int | None = None) -> str:
    """Render the scoreboard as Markdown tables (faults, controls) plus a totals line.

    Args:
        board: The board.
        ended_wall_ms: Wall time the last run ended; false alerts then show
            how long after it they arrived.

    Returns:
        The text.

    """
    lines = ["| scenario | run | detected | cause correct | time to detect (s) | budget (s) "
             "| alert | cause | also fired |", "|---|---|---|---|---|---|---|---|---|"]
    for r in board.rows:
        ttd = f"{r.ttd_s:.0f}" if r.ttd_s is not None else "-"
        cause = r.cause or "-"
        if r.detected and not r.cause_correct:
            cause = f"{r.cause} (expected {r.expected_cause})"
        also = ", ".join([*(f"{d} (ruled out)" for d in r.forbidden), *r.others,
                          *([f"resolved {r.flaps}x while the fault went on"] if r.flaps else [])
                          ]) or "-"
        lines.append(f"| {r.scenario} | {r.run_id} | {'yes' if r.detected else 'NO'} | "
                     f"{'yes' if r.cause_correct else 'no'} | {ttd} | {r.budget_s:.0f} | "
                     f"{r.detector or '-'} | {cause} | {also} |")
    if board.controls:
        lines += ["", "| control | run | false alerts |", "|---|---|---|"]
        for c in board.controls:
            found = ", ".join(f"{a.detector} ({a.cause})" for a in c.alerts) or "none"
            lines.append(f"| {c.scenario} | {c.run_id} | {found} |")
    lines.append("")
    lines.append(f"{board.passed}/{len(board.rows)} fault runs detected with the right cause "
                 f"within budget; false alerts in {len(board.control_runs)} healthy control "
                 f"run(s): {len(board.false_alerts)}")
    for a in board.false_alerts:
        late = ""
        if ended_wall_ms is not None and a.received_wall_ms:
            after = (a.received_wall_ms - ended_wall_ms) / 1000.0
            late = f" [arrived {after:+.0f} s after the runs ended]"
        lines.append(f"  false alert on {a.run_id}: {a.detector} ({a.cause}) {a.title}{late}")
    return "\n".join(lines)
