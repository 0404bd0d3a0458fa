"""One objective's status from its events, and the SLO alert it raises or resolves (pure).

:func:`status` turns a window's :class:`~runwatch.core.slo.indicators.SliEvent`
list into the SLI, the error budget spent and left, the burn rates and the
conditions that call for an alert (:mod:`runwatch.core.slo.burn`). An
objective without events has **no data**: no SLI (not 100 %, not 0 %), no
alert, and a firing alert stays as it is.

:func:`decide` runs the alert lifecycle of :mod:`runwatch.core.paging.lifecycle`
(the processor's) on one :class:`~runwatch.core.paging.lifecycle.AlertBook` per
objective: one alert per objective (detector ``slo:<name>``, dedup key from
``slo:<name>``), firing while a condition holds, resolved at the first
evaluation without one; one that fired as a warning and whose worst condition is now
critical (the budget the next bad event was to exhaust, exhausted) is resolved and fires
again as critical. The Alert has no run id; its evidence lists the bad
events (run ids in the detail) and its ``bad_runs`` label all of their runs.
Its owner is the objective's ``owner``, else the ownership file's answer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runwatch.core.paging import lifecycle
from runwatch.core.paging.ownership import Ownership
from runwatch.core.records import Alert, Evidence, Source
from runwatch.core.signals.cause import Verdict
from runwatch.core.signals.rules import Finding
from runwatch.core.slo import burn
from runwatch.core.slo.indicators import SIGNAL, SliEvent
from runwatch.core.slo.spec import Objective
from runwatch.core.slo.timewin import iso

#: The lifecycle for SLO alerts: resolve at the first evaluation without a condition.
POLICY = lifecycle.AlertPolicy(clear_after=1, resolve_ms=0, cooldown_ms=0, per_run_cap=1_000_000,
                               evidence_max=10)
_RANK = {"info": 0, "warning": 1, "critical": 2}
_CAUSES = frozenset({"data", "execution", "learning", "artifact", "infrastructure"})

#: kind -> the probable causes of its bad runs' own alerts that can explain its bad events
#: (the SLO alert's cause when they name one): a run overruns its window or fails for any
#: reason; data is late, empty or drifted for a data reason, a pipeline that did not run
#: or a broken host; a registration skips its gate by the registry's doing; work is lost
#: on a preemption by missing, failed or slow checkpoints or the hardware; a repeat's
#: metric strays for any reason its computation can; a team's GPU share is the
#: scheduler's and its jobs' doing (execution), never its data's or its model's.
EXPLAINED_BY: dict[str, frozenset[str]] = {
    "data_availability": frozenset({"data", "execution", "infrastructure"}),
    "training_window": frozenset({"data", "execution", "learning", "artifact",
                                  "infrastructure"}),
    "evaluation_retained": frozenset({"artifact", "execution"}),
    "registry_control": frozenset({"artifact"}),
    "resumability": frozenset({"execution", "artifact", "infrastructure"}),
    "reproducibility": frozenset({"learning", "data", "execution", "artifact",
                                  "infrastructure"}),
    "fairness": frozenset({"execution"}),
}


@dataclass(frozen=True, slots=True)
class Status:
    """An objective evaluated at one instant.

    Attributes:
        name: The objective.
        kind: Its indicator kind.
        target: Its target.
        now_ms: Evaluation time.
        window_start_ms: The window's exclusive start.
        good: Good events in the window.
        valid: All events in the window.
        sli: ``good / valid``; None without events (no data).
        budget_consumed: Share of the budget spent (None: no data).
        burn_rates: Burn rate per tier's long window (``"1h"``: rate; None: no events).
        conditions: What calls for an alert.
        bad: The bad events, oldest first.

    """

    name: str
    kind: str
    target: float
    now_ms: int
    window_start_ms: int
    good: int
    valid: int
    sli: float | None
    budget_consumed: float | None
    burn_rates: dict[str, float | None] = field(default_factory=dict)
    conditions: tuple[burn.Condition, ...] = ()
    bad: tuple[SliEvent, ...] = ()

    @property
    def no_data(self) -> bool:
        """Whether the window holds no event."""
        return self.valid == 0

    @property
    def budget_left(self) -> float | None:
        """Share of the budget left (negative when overspent)."""
        return None if self.budget_consumed is None else 1.0 - self.budget_consumed

    @property
    def state(self) -> str:
        """``no_data``, ``exhausted``, ``burning`` (a condition holds) or ``ok``."""
        if self.no_data:
            return "no_data"
        if any(c.name == "budget_exhausted" for c in self.conditions):
            return "exhausted"
        return "burning" if self.conditions else "ok"

    def to_json(self) -> dict[str, Any]:
        """Return the status as JSON-able data (``runwatch slo status --json``).

        Figures that are not finite (a 100 % target's budget of zero events, spent:
        an infinite share and burn rate) are ``null``: strict JSON has no Infinity.
        """
        return {
            "objective": self.name, "kind": self.kind, "target": self.target,
            "evaluated_at": iso(self.now_ms), "window_start": iso(self.window_start_ms + 1),
            "good": self.good, "valid": self.valid, "sli": self.sli, "state": self.state,
            "budget_consumed": _finite(self.budget_consumed),
            "budget_left": _finite(self.budget_left),
            "burn_rates": {k: _finite(v) for k, v in self.burn_rates.items()},
            "conditions": [{"name": c.name, "severity": c.severity, "detail": c.detail}
                           for c in self.conditions],
            "bad_events": [{"key": e.key, "at": iso(e.at_ms), "run_ids": list(e.run_ids),
                            "observed": _finite(e.observed), "expected": _finite(e.expected),
                            "detail": e.detail}
                           for e in self.bad],
        }


def percent(target: float) -> str:
    """Return a target as a percentage with the decimals it was written with (up to 4).

    ``0.9995`` is ``99.95%``: one decimal showed it as ``100.0%`` in the page's title and
    the status table, a target no run can miss once.
    """
    for decimals in range(1, 5):
        text = f"{target:.{decimals}%}"
        if abs(float(text[:-1]) / 100 - target) < 1e-12:
            return text
    return f"{target:.4%}"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def status(obj: Objective, events: Sequence[SliEvent], now_ms: int,
           start_ms: int | None = None) -> Status:
    """Evaluate an objective over its window's events.

    Args:
        obj: The objective.
        events: The window's events (from its indicator kind).
        now_ms: Evaluation time.
        start_ms: Count from here instead of the window's start (the store keeps
            the kind's facts for less time than the window).

    Returns:
        The status.

    """
    start = obj.window.start(now_ms) if start_ms is None else start_ms
    # one event per key: a row stored twice (before the table's replacing merge) counts once
    unique = {e.key: e for e in events if start < e.at_ms <= now_ms}
    inside = sorted(unique.values(), key=lambda e: e.at_ms)
    valid = len(inside)
    bad = tuple(e for e in inside if not e.good)
    good = valid - len(bad)
    window_ms = obj.window.length_ms(now_ms)
    pairs = [(e.at_ms, e.good) for e in inside]
    rates: dict[str, float | None] = {}
    for tier in obj.alerting.tiers:
        span = [g for at, g in pairs if now_ms - tier.long_ms < at <= now_ms]
        rates[burn.span_label(tier.long_ms)] = burn.burn_rate(
            sum(1 for g in span if not g), len(span), obj.target)
    conditions: list[burn.Condition] = []
    if valid:
        consumed = burn.budget_consumed(len(bad), valid, obj.target)
        allowed = (1.0 - obj.target) * valid
        if obj.alerting.budget_exhausted and burn.exhausted(len(bad), valid, obj.target):
            conditions.append(burn.Condition(
                "budget_exhausted", "critical",
                f"error budget exhausted: {len(bad)} bad of {valid} events, the target "
                f"allows {allowed:.1f}"))
        elif obj.alerting.next_bad_exhausts and burn.next_bad_exhausts(len(bad), valid,
                                                                       obj.target):
            conditions.append(burn.Condition(
                "next_bad_exhausts", "warning",
                f"the next bad event exhausts the error budget ({len(bad)} bad of {valid} "
                f"events, the target allows {allowed:.1f})"))
        conditions.extend(burn.burn_conditions(pairs, now_ms, window_ms, obj.target,
                                               obj.alerting.tiers, obj.alerting.min_events))
    else:
        consumed = None
    return Status(obj.name, obj.kind, obj.target, now_ms, start, good, valid,
                  good / valid if valid else None, consumed, rates, tuple(conditions), bad)


CAUSE_BEFORE_EVENT = frozenset({"training_window", "resumability"})
"""Kinds whose bad event is the run's end (or overrun) or its preemption: an alert raised
after it cannot have caused it (a release gate that failed after a run died of a NaN loss
named the window's overrun ``artifact``)."""


def bad_event_causes(st: Status, alerts: Sequence[tuple[str, str, int]]) -> list[str]:
    """Return the probable causes of the alerts on an objective's bad events' runs, oldest first.

    For the kinds of :data:`CAUSE_BEFORE_EVENT`, an alert first seen after the bad
    event it would explain is left out.

    Args:
        st: The objective's status.
        alerts: ``(run, probable cause, first seen ms)`` of the window's alerts.

    """
    last: dict[str, int] = {}  # run -> the time of its latest bad event
    for e in st.bad:
        for r in e.run_ids:
            last[r] = max(last.get(r, e.at_ms), e.at_ms)
    before = st.kind in CAUSE_BEFORE_EVENT
    ordered = sorted(alerts, key=lambda a: (a[2], a[0]))
    return [c for r, c, t in ordered if r in last and not (before and t > last[r])]


def probable_cause(kind: str, causes: Iterable[str]) -> str:
    """Return the cause the bad events' own alerts name most, else the kind's signal class.

    Only causes that can explain the kind's bad events count (:data:`EXPLAINED_BY`): a
    team over its GPU quota whose runs also carry zero-rows alerts is not over it because
    of its data. Of causes named equally often, the one named first wins (a cause comes
    before what it causes; ``causes`` in time order, :func:`bad_event_causes`).

    Args:
        kind: The indicator kind.
        causes: Probable causes of the alerts raised on the bad events' runs.

    """
    plausible = EXPLAINED_BY.get(kind, _CAUSES)
    counted = Counter(c for c in causes if c in _CAUSES and c in plausible)
    if counted:  # insertion order is first mention: the sort is stable
        return sorted(counted.items(), key=lambda kv: -kv[1])[0][0]
    return SIGNAL.get(kind, "unknown")


def _context(obj: Objective, source: Source, labels: dict[str, str]) -> lifecycle.AlertContext:
    return lifecycle.AlertContext(
        run_id=f"slo:{obj.name}", source=source, team=obj.owner,
        experiment_family=obj.params.get("family"), labels=labels)


def decide(obj: Objective, st: Status, book_state: dict[str, Any] | None, cause: str,
           source: Source, now_ms: int, ownership: Ownership | None = None,
           ) -> tuple[dict[str, Any], list[Alert]]:
    """Fire, keep or resolve the objective's alert.

    Args:
        obj: The objective.
        st: Its status now.
        book_state: Its alert book (:meth:`AlertBook.to_state`), None for a new one.
        cause: The probable cause (:func:`probable_cause`).
        source: The evaluator's Source.
        now_ms: Evaluation time (stamps the records).
        ownership: The ownership file, for ``Alert.owner`` when the objective names no
            ``owner`` (by probable cause, family and team, as the processor's alerts).

    Returns:
        The new book state and the Alert records to publish (maybe none).

    """
    policy = POLICY if obj.owner or ownership is None else replace(POLICY, ownership=ownership)
    book = lifecycle.AlertBook.from_state(book_state or {})
    detector = f"slo:{obj.name}"
    if st.no_data:
        return book.to_state(), []
    bad_runs = sorted({r for e in st.bad for r in e.run_ids})
    labels = {"slo": obj.name, "slo_kind": obj.kind}
    if not st.conditions:
        ctx = _context(obj, source, labels)
        out = lifecycle.healthy(book, ctx.run_id, detector, obj.kind, "", ctx, now_ms, policy)
        return book.to_state(), [_owned(obj, replace(a, run_id=None)) for a in out]
    worst = max(st.conditions, key=lambda c: _RANK[c.severity])
    labels |= {"slo_condition": worst.name, "bad_runs": bad_runs_label(bad_runs)}
    ctx = _context(obj, source, labels)
    sli = st.sli if st.sli is not None else 0.0
    title = (f"SLO {obj.name}: {worst.detail}; SLI {st.good}/{st.valid} = {sli:.1%} "
             f"(target {percent(obj.target)})")
    escalated = _escalate(book, obj, worst, ctx, now_ms, policy)
    finding = Finding(
        detector=detector, indicator=obj.kind, signal=SIGNAL[obj.kind],  # type: ignore[arg-type]
        severity=worst.severity, observed=sli, expected=obj.target,
        score=min(1.0, st.budget_consumed or 0.0), at_ms=now_ms, title=title,
        detail="; ".join(c.detail for c in st.conditions), subject="")
    out = lifecycle.fire(book, finding, Verdict(cause, 1.0, (finding,)),  # type: ignore[arg-type]
                         ctx, now_ms, policy, one_shot=False)
    evidence = tuple(
        Evidence(signal=SIGNAL[obj.kind], indicator=obj.kind, observed=e.observed,
                 expected=e.expected, at_ms=e.at_ms, detail=e.detail)
        for e in st.bad[-POLICY.evidence_max:])
    return book.to_state(), [*(_owned(obj, replace(a, run_id=None)) for a in escalated),
                             *(_owned(obj, replace(a, run_id=None, evidence=evidence))
                               for a in out)]


def _escalate(book: lifecycle.AlertBook, obj: Objective, worst: burn.Condition,
              ctx: lifecycle.AlertContext, now_ms: int,
              policy: lifecycle.AlertPolicy) -> list[Alert]:
    """Resolve a firing alert of a lower severity than the worst condition now.

    The lifecycle sends a firing alert once: a warning (the next bad event exhausts the
    budget) whose budget the next bad event then exhausted stayed a warning, and the
    critical condition never paged. Resolved here, it fires again as critical (a new
    alert: receivers such as Alertmanager key alerts on their labels, severity among them).
    """
    key = lifecycle.dedup_key(ctx.run_id, f"slo:{obj.name}", obj.kind)
    entry = book.entries.get(key)
    if entry is None or entry["status"] != "firing" \
            or _RANK[worst.severity] <= _RANK.get(str(entry["severity"]), 0):
        return []
    return lifecycle.healthy(book, ctx.run_id, f"slo:{obj.name}", obj.kind, "", ctx, now_ms,
                             policy)


BAD_RUNS_LABEL_MAX = 16_384
"""Longest ``bad_runs`` label (characters): the Alert record stays far below the broker's 1 MB."""


def bad_runs_label(runs: Sequence[str]) -> str:
    """Return the ``bad_runs`` label: the run ids, comma-separated, bounded.

    Past :data:`BAD_RUNS_LABEL_MAX` characters the first ids that fit are kept and
    the label ends with how many more there are (``slo_points.bad_runs`` holds
    every one): thousands of bad runs with long ids made an Alert over the
    broker's record limit, which the publisher refuses.
    """
    text = ",".join(runs)
    if len(text) <= BAD_RUNS_LABEL_MAX:
        return text
    kept: list[str] = []
    size = 0
    for run in runs:
        if size + len(run) + 1 > BAD_RUNS_LABEL_MAX - 64:
            break
        kept.append(run)
        size += len(run) + 1
    return ",".join(kept) + f",… {len(runs) - len(kept)} more (slo_points.bad_runs has all)"


def _owned(obj: Objective, alert: Alert) -> Alert:
    """The objective's declared owner owns its alert (else the ownership file's answer)."""
    return replace(alert, owner=obj.owner) if obj.owner else alert
