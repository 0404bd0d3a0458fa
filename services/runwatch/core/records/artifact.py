"""Artifact and release-gate records (topic rw.artifact).

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from runwatch.core.records.common import Source

__all__ = ["ArtifactEvent", "GateDecision", "GateVerdict", "SliceResult"]

#: Release gate decision.
GateVerdict = Literal["pass", "fail", "review"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArtifactEvent:
    """An artifact written by a run.

    Mirrors Avro ``runwatch.v1.ArtifactEvent``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        uri: Artifact location.
        kind: Artifact kind: model, checkpoint, eval, tokenizer, ...
        size_bytes: Artifact size, bytes.
        sha256: SHA-256 of the artifact, hex.
        serialization_ok: True when the artifact re-loaded cleanly.
        registry_status: Model-registry status (registered, staged, rejected...).

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.ArtifactEvent"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    uri: str
    kind: str
    size_bytes: int = 0
    sha256: str | None = None
    serialization_ok: bool = True
    registry_status: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "uri": self.uri,
            "kind": self.kind,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "serialization_ok": self.serialization_ok,
            "registry_status": self.registry_status,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ArtifactEvent:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            uri=d["uri"],
            kind=d["kind"],
            size_bytes=d.get("size_bytes", 0),
            sha256=d.get("sha256", None),
            serialization_ok=d.get("serialization_ok", True),
            registry_status=d.get("registry_status", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceResult:
    """Gate evaluation on one data slice.

    Mirrors Avro ``runwatch.v1.SliceResult``.

    Attributes:
        name: Slice name.
        measured: Measured values on the slice.
        passed: True when the slice met every threshold.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.SliceResult"

    name: str
    measured: dict[str, float] = field(default_factory=dict)
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "name": self.name,
            "measured": self.measured,
            "passed": self.passed,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SliceResult:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            name=d["name"],
            measured=d.get("measured", {}),
            passed=d["passed"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class GateDecision:
    """A release-gate decision on a model.

    Mirrors Avro ``runwatch.v1.GateDecision``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        gate: Gate name.
        thresholds: Metric -> threshold.
        measured: Metric -> measured value.
        slices: Per-slice results.
        decision: Decision.
        reasons: Reasons for the decision.
        evaluator: Who or what decided (service, person).

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.GateDecision"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    gate: str
    thresholds: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    slices: tuple[SliceResult, ...] = ()
    decision: GateVerdict
    reasons: tuple[str, ...] = ()
    evaluator: str

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "gate": self.gate,
            "thresholds": self.thresholds,
            "measured": self.measured,
            "slices": [x.to_dict() for x in self.slices],
            "decision": self.decision,
            "reasons": self.reasons,
            "evaluator": self.evaluator,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GateDecision:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            gate=d["gate"],
            thresholds=d.get("thresholds", {}),
            measured=d.get("measured", {}),
            slices=tuple([SliceResult.from_dict(x) for x in d.get("slices", ())]),
            decision=d["decision"],
            reasons=tuple(d.get("reasons", ())),
            evaluator=d["evaluator"],
        )
