"""Alert and dead-letter records (topics rw.alerts, rw.dlq).

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from runwatch.core.records.common import Source

__all__ = ["Alert", "AlertStatus", "DeadLetter", "Evidence", "ProbableCause", "Severity"]

#: Alert status.
AlertStatus = Literal["firing", "resolved"]

#: Alert severity.
Severity = Literal["info", "warning", "critical"]

#: Signal class most likely at fault; readers map unknown symbols to unknown.
ProbableCause = Literal["data", "execution", "learning", "artifact", "infrastructure", "unknown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """One observation supporting an alert.

    Mirrors Avro ``runwatch.v1.Evidence``.

    Attributes:
        signal: Signal class: data, execution, learning, artifact, node.
        indicator: Indicator name.
        observed: Observed value.
        expected: Expected value.
        at_ms: Observation time, UTC epoch milliseconds.
        detail: Human-readable detail.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.Evidence"

    signal: str
    indicator: str
    observed: float | None = None
    expected: float | None = None
    at_ms: int
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "signal": self.signal,
            "indicator": self.indicator,
            "observed": self.observed,
            "expected": self.expected,
            "at_ms": self.at_ms,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Evidence:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            signal=d["signal"],
            indicator=d["indicator"],
            observed=d.get("observed", None),
            expected=d.get("expected", None),
            at_ms=d["at_ms"],
            detail=d.get("detail", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """An alert raised (or resolved) by the processor.

    Mirrors Avro ``runwatch.v1.Alert``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        alert_id: Alert id (UUID string).
        dedup_key: Deduplication key (the topic key).
        status: firing or resolved.
        severity: Severity.
        detector: Detector that fired.
        indicator: Leading indicator the detector watches.
        observed: Observed value.
        expected: Expected value.
        score: Anomaly score.
        probable_cause: Probable cause class.
        evidence: Supporting observations.
        title: One-line title.
        summary: Longer summary.
        team: Owning team.
        experiment_family: Experiment family.
        node: Node concerned, when one.
        labels: Routing labels.
        first_seen_ms: First time the condition was seen, UTC epoch milliseconds.
        last_seen_ms: Last time the condition was seen, UTC epoch milliseconds.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.Alert"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    alert_id: str
    dedup_key: str
    status: AlertStatus
    severity: Severity
    detector: str
    indicator: str
    observed: float | None = None
    expected: float | None = None
    score: float = 0.0
    probable_cause: ProbableCause = "unknown"
    evidence: tuple[Evidence, ...] = ()
    title: str
    summary: str = ""
    team: str | None = None
    experiment_family: str | None = None
    node: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    first_seen_ms: int
    last_seen_ms: int

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "alert_id": self.alert_id,
            "dedup_key": self.dedup_key,
            "status": self.status,
            "severity": self.severity,
            "detector": self.detector,
            "indicator": self.indicator,
            "observed": self.observed,
            "expected": self.expected,
            "score": self.score,
            "probable_cause": self.probable_cause,
            "evidence": [x.to_dict() for x in self.evidence],
            "title": self.title,
            "summary": self.summary,
            "team": self.team,
            "experiment_family": self.experiment_family,
            "node": self.node,
            "labels": self.labels,
            "first_seen_ms": self.first_seen_ms,
            "last_seen_ms": self.last_seen_ms,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Alert:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            alert_id=d["alert_id"],
            dedup_key=d["dedup_key"],
            status=d["status"],
            severity=d["severity"],
            detector=d["detector"],
            indicator=d["indicator"],
            observed=d.get("observed", None),
            expected=d.get("expected", None),
            score=d.get("score", 0.0),
            probable_cause=d.get("probable_cause", "unknown"),
            evidence=tuple([Evidence.from_dict(x) for x in d.get("evidence", ())]),
            title=d["title"],
            summary=d.get("summary", ""),
            team=d.get("team", None),
            experiment_family=d.get("experiment_family", None),
            node=d.get("node", None),
            labels=d.get("labels", {}),
            first_seen_ms=d["first_seen_ms"],
            last_seen_ms=d["last_seen_ms"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """Rejected input with the reason and the original bytes.

    Mirrors Avro ``runwatch.v1.DeadLetter``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        topic: Topic the input came from.
        partition: Partition the input came from; -1 when unknown.
        offset: Offset of the input; -1 when unknown.
        reason: Why the input was rejected.
        original: Original value bytes.
        key: Original key bytes.
        failed_at_ms: Rejection time, UTC epoch milliseconds.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.DeadLetter"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    topic: str
    partition: int = -1
    offset: int = -1
    reason: str
    original: bytes
    key: bytes | None = None
    failed_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "reason": self.reason,
            "original": self.original,
            "key": self.key,
            "failed_at_ms": self.failed_at_ms,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeadLetter:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            topic=d["topic"],
            partition=d.get("partition", -1),
            offset=d.get("offset", -1),
            reason=d["reason"],
            original=d["original"],
            key=d.get("key", None),
            failed_at_ms=d["failed_at_ms"],
        )
