"""Learning records (topic rw.learning): training steps and validation results.

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runwatch.core.records.common import DatasetRef, Source

__all__ = ["LearningStep", "ValidationResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LearningStep:
    """Learning signals of one training step.

    Mirrors Avro ``runwatch.v1.LearningStep``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        step: Global step number.
        epoch: Epoch number.
        loss: Training loss; NaN and Inf are allowed and meaningful.
        metrics: Other training metrics, name -> value.
        lr: Learning rate.
        grad_norm: Global gradient norm.
        nonfinite_count: Non-finite values seen in gradients/loss this step.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.LearningStep"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    step: int
    epoch: int = 0
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)
    lr: float | None = None
    grad_norm: float | None = None
    nonfinite_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "step": self.step,
            "epoch": self.epoch,
            "loss": self.loss,
            "metrics": self.metrics,
            "lr": self.lr,
            "grad_norm": self.grad_norm,
            "nonfinite_count": self.nonfinite_count,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LearningStep:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            step=d["step"],
            epoch=d.get("epoch", 0),
            loss=d["loss"],
            metrics=d.get("metrics", {}),
            lr=d.get("lr", None),
            grad_norm=d.get("grad_norm", None),
            nonfinite_count=d.get("nonfinite_count", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationResult:
    """Validation metrics at a step.

    Mirrors Avro ``runwatch.v1.ValidationResult``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        step: Global step evaluated.
        epoch: Epoch number.
        metrics: Validation metrics, name -> value.
        dataset: Validation dataset.
        slice: Data slice evaluated; null for the whole set.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.ValidationResult"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    step: int
    epoch: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    dataset: DatasetRef | None = None
    slice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "step": self.step,
            "epoch": self.epoch,
            "metrics": self.metrics,
            "dataset": None if self.dataset is None else self.dataset.to_dict(),
            "slice": self.slice,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ValidationResult:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            step=d["step"],
            epoch=d.get("epoch", 0),
            metrics=d.get("metrics", {}),
            dataset=None if (v := d.get("dataset", None)) is None else DatasetRef.from_dict(v),
            slice=d.get("slice", None),
        )
