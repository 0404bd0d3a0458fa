"""Alert lifecycle: dedup key, firing → resolved with hysteresis, cooldown, per-run cap.

An :class:`AlertBook` holds the open and recently resolved alerts of one run
as plain JSON-able data (it lives inside the run state). The functions here
decide, for each finding and each healthy evaluation, whether an Alert
record goes out:

* the dedup key is a stable hash of run, detector, indicator and subject, so
  repeats (including replays after a crash) carry the same key and alert id;
* a firing alert is not re-sent while it keeps firing (``renotify_ms`` aside);
* a detector alert resolves only after ``clear_after`` consecutive healthy
  evaluations spanning at least ``resolve_ms`` of the run's event time
  (hysteresis); an evaluation out of range that is not yet persistent enough
  to fire still keeps a firing alert firing (:func:`hold`). A one-shot rule
  alert resolves after ``quiet_ms`` without a repeat;
* after resolving, the same key stays quiet for ``cooldown_ms``;
* one run fires at most ``per_run_cap`` distinct alert conditions (dedup keys;
  one that resolves and fires again is not a new one), critical ones excepted:
  a storm of warnings must not mute a run's non-finite loss or stall; the cap
  itself is announced once as an alert of its own;
* the owner (``Alert.owner``) is looked up in the policy's ownership
  (:mod:`runwatch.core.paging.ownership`) when the alert fires or its cause
  changes, and kept in the entry, so its resolve names the same owner.

Every duration here is measured on the run's event time (the findings'
``at_ms``, the event time of healthy evaluations, the processor's event-time
horizon on the timer), never on the processor's wall clock, so a replay or a
backfill goes through the same lifecycle as live traffic. ``now_ms`` only
stamps the records sent (and ``renotify_ms``, a delivery matter).

Size: one alert's whole lifecycle (fire, hold, clear, expire, cap, cause updates) in one
place, over one book format; split, each part would need the book's invariants again.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from runwatch.core.paging.ownership import Ownership
from runwatch.core.records import Alert, Evidence, Source
from runwatch.core.signals.cause import Verdict
from runwatch.core.signals.rules import Finding

_NS = uuid.UUID("6d1b1f0e-2a8e-4c55-9f43-8f0f0a2c9a11")


@dataclass(frozen=True, slots=True)
class AlertPolicy:
    """Lifecycle knobs.

    Attributes:
        clear_after: Consecutive healthy evaluations before a detector alert resolves.
        resolve_ms: Event time those healthy evaluations must span (the indicator
            back in its normal range for a sustained period, not a few lucky
            samples). Default 5 min, Alertmanager's ``resolve_timeout``: the span
            a receiver already waits before it treats a silent alert as resolved.
        quiet_ms: Event time without a repeat after which a one-shot (rule) alert resolves.
        cooldown_ms: After resolving, the same key stays quiet this long (event time).
        renotify_ms: Re-send a still-firing alert after this long (0 = never).
        per_run_cap: Most distinct alert conditions (dedup keys) one run may fire;
            critical ones fire past it.
        evidence_max: Most evidence items carried by one alert.
        ownership: Who owns an alert, by cause, family, team and dataset (None: no owner).

    """

    clear_after: int = 5
    resolve_ms: int = 5 * 60_000
    quiet_ms: int = 15 * 60_000
    cooldown_ms: int = 10 * 60_000
    renotify_ms: int = 0
    per_run_cap: int = 20
    evidence_max: int = 10
    ownership: Ownership | None = None


@dataclass(slots=True)
class AlertBook:
    """Per-run alert bookkeeping (JSON-able via :meth:`to_state`).

    Attributes:
        entries: Dedup key → entry dict (status, times, the last alert's fields).
        fired: Distinct conditions this run has fired so far (the cap counts these).
        capped: Whether the cap alert has been sent.
        seq: Sequence number for emitted alerts.

    """

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    fired: int = 0
    capped: bool = False
    seq: int = 0

    def to_state(self) -> dict[str, Any]:
        """Return the book as a JSON-able dict."""
        return {"entries": self.entries, "fired": self.fired, "capped": self.capped,
                "seq": self.seq}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> AlertBook:
        """Rebuild a book from :meth:`to_state` output."""
        return cls(dict(state.get("entries", {})), int(state.get("fired", 0)),
                   bool(state.get("capped", False)), int(state.get("seq", 0)))

    def firing_keys(self) -> list[str]:
        """Return the dedup keys currently firing."""
        return [k for k, e in self.entries.items() if e["status"] == "firing"]


@dataclass(frozen=True, slots=True)
class AlertContext:
    """What an alert needs beyond the finding: run identity and routing labels."""

    run_id: str
    source: Source
    team: str | None = None
    experiment_family: str | None = None
    node: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def dedup_key(run_id: str, detector: str, indicator: str, subject: str = "") -> str:
    """Return the stable dedup key of an alert condition.

    Args:
        run_id: The run.
        detector: Detector or rule name.
        indicator: Indicator name.
        subject: Extra discriminator (dataset, GPU, checkpoint).

    Returns:
        ``<run_id>:<24 hex chars>``, identical for every repeat of the condition.

    """
    digest = hashlib.sha256(f"{run_id}\x1f{detector}\x1f{indicator}\x1f{subject}".encode())
    return f"{run_id}:{digest.hexdigest()[:24]}"


def _evidence(findings: tuple[Finding, ...], limit: int) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(signal=f.signal, indicator=f.indicator, observed=f.observed,
                 expected=f.expected, at_ms=f.at_ms, detail=f.detail or f.title)
        for f in findings[-limit:]
    )


def _identity(ctx: AlertContext, extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The alert's identity: the run's context, its labels and the finding's own labels."""
    return {"team": ctx.team, "family": ctx.experiment_family, "node": ctx.node,
            "labels": {**ctx.labels, **(extra or {})}}


def _build(book: AlertBook, key: str, entry: dict[str, Any], status: str,
           ctx: AlertContext, now_ms: int, evidence: tuple[Evidence, ...]) -> Alert:
    book.seq += 1
    alert_id = str(uuid.uuid5(_NS, f"{key}:{entry['first_seen_ms']}"))
    event_id = str(uuid.uuid5(_NS, f"{alert_id}:{status}:{entry['last_seen_ms']}"))
    cause = entry["cause"]
    # the identity the alert fired with: its resolve must carry the same labels (receivers
    # such as Alertmanager key alerts on them), even if the run's team or labels changed since
    ident = entry.get("ident") or _identity(ctx)
    return Alert(
        event_id=event_id, run_id=ctx.run_id, emitted_at_ms=now_ms, source=ctx.source,
        seq=book.seq, alert_id=alert_id, dedup_key=key, status=status,  # type: ignore[arg-type]
        severity=entry["severity"], detector=entry["detector"], indicator=entry["indicator"],
        observed=entry["observed"], expected=entry["expected"], score=entry["score"],
        probable_cause=cause, evidence=evidence, title=entry["title"],
        summary=f"{entry['title']} (probable cause: {cause}, run {ctx.run_id})",
        team=ident["team"], experiment_family=ident["family"], node=ident["node"],
        labels=dict(ident["labels"]), first_seen_ms=entry["first_seen_ms"],
        last_seen_ms=entry["last_seen_ms"], owner=entry.get("owner", ""),
    )


def _owner(policy: AlertPolicy, cause: str, ctx: AlertContext, finding: Finding) -> str:
    if policy.ownership is None:
        return ""
    dataset = finding.subject if finding.signal == "data" else ""
    return policy.ownership.owner_for(cause, team=ctx.team, dataset=dataset,
                                      experiment_family=ctx.experiment_family).team


def fire(book: AlertBook, finding: Finding, verdict: Verdict, ctx: AlertContext, now_ms: int,
         policy: AlertPolicy, *, one_shot: bool, seen_ms: int | None = None) -> list[Alert]:
    """Record a firing condition; return the Alert records to publish (maybe none).

    Args:
        book: The run's alert book (updated in place).
        finding: The finding that fires.
        verdict: Its probable cause and evidence.
        ctx: Run identity and labels.
        now_ms: Current time.
        policy: Lifecycle knobs.
        one_shot: True for rule findings that resolve by quiet time.
        seen_ms: Event time the run's own records have reached (default: the finding's):
            a one-shot alert whose last sighting is ``quiet_ms`` behind both resolved
            before this one. A condition the timer judges again on the horizon (a stall, a
            report still missing) while the run sends nothing goes on.

    Returns:
        Zero, one or two alerts (an alert plus the cap notice).

    """
    key = dedup_key(ctx.run_id, finding.detector, finding.indicator, finding.subject)
    entry = book.entries.get(key)
    seen = finding.at_ms if seen_ms is None else min(finding.at_ms, seen_ms)
    if (entry is not None and entry["status"] == "firing" and entry["one_shot"]
            and seen - entry["last_seen_ms"] >= policy.quiet_ms):
        # quiet for quiet_ms of event time before this repeat: it resolved then, as the
        # timer resolves it live (a backfill or a replay reads the repeat in the same batch:
        # the NaN of a retry at the same step was the first alert's sighting, never a new one)
        resolved = _resolve(book, key, entry, ctx, now_ms,
                            entry["last_seen_ms"] + policy.quiet_ms)
        return [resolved, *fire(book, finding, verdict, ctx, now_ms, policy,
                                one_shot=one_shot, seen_ms=seen_ms)]
    if entry is not None and entry["status"] == "firing":
        entry["last_seen_ms"] = max(entry["last_seen_ms"], finding.at_ms)
        entry["clear_streak"] = 0
        entry["observed"] = finding.observed
        if entry["cause"] == finding.signal != verdict.cause:
            # it fired with no cause found (its own class); evidence that came later names
            # one: a throughput fall paged before the node's NVLink or occupancy watch,
            # slower than the correlation delay at a 15 s agent, confirmed what slowed it
            return update_cause(book, finding, verdict, ctx, now_ms, policy)
        if policy.renotify_ms and now_ms - entry["sent_ms"] >= policy.renotify_ms:
            entry["sent_ms"] = now_ms
            return [_build(book, key, entry, "firing", ctx, now_ms,
                           _evidence(verdict.evidence, policy.evidence_max))]
        return []
    if entry is not None and finding.at_ms - resolved_at(entry) < policy.cooldown_ms:
        return []
    if entry is None:  # the cap counts conditions: one that fires again is not a new one
        if book.fired >= policy.per_run_cap and finding.severity != "critical":
            return _cap(book, ctx, now_ms, policy)
        book.fired += 1
    entry = {
        "status": "firing", "severity": finding.severity, "detector": finding.detector,
        "indicator": finding.indicator, "observed": finding.observed,
        "expected": finding.expected, "score": finding.score, "cause": verdict.cause,
        "title": finding.title, "first_seen_ms": finding.at_ms, "last_seen_ms": finding.at_ms,
        "clear_streak": 0, "one_shot": one_shot, "sent_ms": now_ms,
        "ident": _identity(ctx, finding.labels),
        "owner": _owner(policy, verdict.cause, ctx, finding),
    }
    book.entries[key] = entry
    return [_build(book, key, entry, "firing", ctx, now_ms,
                   _evidence(verdict.evidence, policy.evidence_max))]


def update_cause(book: AlertBook, finding: Finding, verdict: Verdict, ctx: AlertContext,
                 now_ms: int, policy: AlertPolicy) -> list[Alert]:
    """Re-send a firing alert whose probable cause changed after it fired.

    A hard rule pages at once; evidence processed shortly after it may name
    the cause. The update keeps the alert's id, dedup key and identity; only
    the cause, evidence and summary change, and it gets an event id of its own
    (the store keeps both records; the latest names the cause).

    Args:
        book: The run's alert book (updated in place).
        finding: The finding that fired.
        verdict: Its new verdict.
        ctx: Run identity and labels.
        now_ms: Current time.
        policy: Lifecycle knobs.

    Returns:
        The updated firing alert, or nothing (not firing, or the cause is the same).

    """
    key = dedup_key(ctx.run_id, finding.detector, finding.indicator, finding.subject)
    entry = book.entries.get(key)
    if entry is None or entry["status"] != "firing" or entry["cause"] == verdict.cause:
        return []
    entry["cause"] = verdict.cause
    entry["owner"] = _owner(policy, verdict.cause, ctx, finding)
    alert = _build(book, key, entry, "firing", ctx, now_ms,
                   _evidence(verdict.evidence, policy.evidence_max))
    event_id = uuid.uuid5(_NS, f"{alert.alert_id}:update:{verdict.cause}:{entry['last_seen_ms']}")
    return [replace(alert, event_id=str(event_id))]


def _cap(book: AlertBook, ctx: AlertContext, now_ms: int, policy: AlertPolicy) -> list[Alert]:
    if book.capped:
        return []
    book.capped = True
    key = dedup_key(ctx.run_id, "alerting", "alert_cap")
    entry = {
        "status": "firing", "severity": "warning", "detector": "alerting",
        "indicator": "alert_cap", "observed": float(book.fired),
        "expected": float(policy.per_run_cap), "score": 1.0, "cause": "unknown",
        "title": f"Run reached its cap of {policy.per_run_cap} alerts; further alerts muted",
        "first_seen_ms": now_ms, "last_seen_ms": now_ms, "clear_streak": 0,
        "one_shot": False, "sent_ms": now_ms,
    }
    book.entries[key] = entry
    return [_build(book, key, entry, "firing", ctx, now_ms, ())]


def resolved_at(entry: dict[str, Any]) -> int:
    """Return the event time an entry resolved at.

    Books saved before it was kept have only ``resolved_ms`` (the processor's clock then).
    """
    return int(entry.get("resolved_at_ms", entry.get("resolved_ms", 0)))


def healthy(book: AlertBook, run_id: str, detector: str, indicator: str, subject: str,
            ctx: AlertContext, now_ms: int, policy: AlertPolicy,
            at_ms: int | None = None) -> list[Alert]:
    """Record a healthy evaluation of a condition; resolve after a sustained healthy spell.

    The alert resolves once ``clear_after`` healthy evaluations in a row span
    at least ``policy.resolve_ms`` of event time.

    Args:
        book: The run's alert book (updated in place).
        run_id: The run.
        detector: Detector name.
        indicator: Indicator name.
        subject: Dedup subject.
        ctx: Run identity and labels.
        now_ms: Current time (stamps the record sent).
        policy: Lifecycle knobs.
        at_ms: Event time of the evaluation (default ``now_ms``).

    Returns:
        The resolved alert, or nothing.

    """
    key = dedup_key(run_id, detector, indicator, subject)
    entry = book.entries.get(key)
    if entry is None or entry["status"] != "firing":
        return []
    at = now_ms if at_ms is None else at_ms
    entry["clear_streak"] += 1
    if entry["clear_streak"] == 1:
        entry["clear_since_ms"] = at
    if (entry["clear_streak"] < policy.clear_after
            or at - int(entry.get("clear_since_ms", at)) < policy.resolve_ms):
        return []
    return [_resolve(book, key, entry, ctx, now_ms, at)]


def hold(book: AlertBook, run_id: str, detector: str, indicator: str, subject: str = "") -> None:
    """Record an evaluation out of range that does not fire (yet): a firing alert stays firing.

    It breaks the healthy streak, so a flapping indicator (one dip, then a few
    values out of range but short of the persistence needed to fire anew) does
    not count as healthy.

    Args:
        book: The run's alert book (updated in place).
        run_id: The run.
        detector: Detector name.
        indicator: Indicator name.
        subject: Dedup subject.

    """
    entry = book.entries.get(dedup_key(run_id, detector, indicator, subject))
    if entry is not None and entry["status"] == "firing":
        entry["clear_streak"] = 0


def expire(book: AlertBook, ctx: AlertContext, now_ms: int, policy: AlertPolicy,
           horizon_ms: int | None = None) -> list[Alert]:
    """Resolve one-shot alerts that stayed quiet for ``quiet_ms`` (called from the timer).

    Args:
        book: The run's alert book (updated in place).
        ctx: Run identity and labels.
        now_ms: Current time (stamps the records sent).
        policy: Lifecycle knobs.
        horizon_ms: Event time the processor's input has reached (default
            ``now_ms``); quiet time is measured against it.

    Returns:
        The resolved alerts.

    """
    at = now_ms if horizon_ms is None else horizon_ms
    return [
        _resolve(book, key, entry, ctx, now_ms, at)
        for key, entry in list(book.entries.items())
        if entry["status"] == "firing" and entry["one_shot"]
        and at - entry["last_seen_ms"] >= policy.quiet_ms
    ]


def resolve_all(book: AlertBook, ctx: AlertContext, now_ms: int, at_ms: int) -> list[Alert]:
    """Resolve every firing alert of the run (its state is being retired).

    Args:
        book: The run's alert book (updated in place).
        ctx: Run identity and labels.
        now_ms: Current time (stamps the records sent).
        at_ms: Event time of the resolution.

    Returns:
        The resolved alerts.

    """
    return [_resolve(book, key, entry, ctx, now_ms, at_ms)
            for key, entry in list(book.entries.items()) if entry["status"] == "firing"]


def _resolve(book: AlertBook, key: str, entry: dict[str, Any], ctx: AlertContext,
             now_ms: int, at_ms: int) -> Alert:
    entry["status"] = "resolved"
    entry["resolved_ms"] = now_ms
    entry["resolved_at_ms"] = at_ms
    entry["clear_streak"] = 0
    return _build(book, key, entry, "resolved", ctx, now_ms, ())
