"""Data-quality records (topic rw.data).

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runwatch.core.records.common import Source

__all__ = ["DataQualityReport", "DriftSummary", "FeatureStats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureStats:
    """Quality statistics of one feature in a data window.

    Mirrors Avro ``runwatch.v1.FeatureStats``.

    Attributes:
        name: Feature name.
        null_pct: Share of null values, percent 0-100.
        min: Minimum value (numeric features).
        max: Maximum value (numeric features).
        mean: Mean value (numeric features).
        psi: Population stability index against the baseline.
        ks: Kolmogorov-Smirnov statistic against the baseline.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.FeatureStats"

    name: str
    null_pct: float = 0.0
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    psi: float | None = None
    ks: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "name": self.name,
            "null_pct": self.null_pct,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "psi": self.psi,
            "ks": self.ks,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FeatureStats:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            name=d["name"],
            null_pct=d.get("null_pct", 0.0),
            min=d.get("min", None),
            max=d.get("max", None),
            mean=d.get("mean", None),
            psi=d.get("psi", None),
            ks=d.get("ks", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DriftSummary:
    """Drift of a data window against a baseline.

    Mirrors Avro ``runwatch.v1.DriftSummary``.

    Attributes:
        drifted_features: Features whose drift exceeds the threshold.
        max_psi: Largest PSI over all features.
        max_ks: Largest KS statistic over all features.
        psi_threshold: PSI threshold used to flag a feature as drifted.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.DriftSummary"

    drifted_features: tuple[str, ...] = ()
    max_psi: float | None = None
    max_ks: float | None = None
    psi_threshold: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "drifted_features": self.drifted_features,
            "max_psi": self.max_psi,
            "max_ks": self.max_ks,
            "psi_threshold": self.psi_threshold,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftSummary:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            drifted_features=tuple(d.get("drifted_features", ())),
            max_psi=d.get("max_psi", None),
            max_ks=d.get("max_ks", None),
            psi_threshold=d.get("psi_threshold", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DataQualityReport:
    """Data-quality report for one dataset partition and extraction window.

    Mirrors Avro ``runwatch.v1.DataQualityReport``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        dataset_uri: Dataset location or logical id (the topic key).
        dataset_version: Dataset version or snapshot id.
        partition: Dataset partition, e.g. date=2024-01-01.
        window_start_ms: Extraction window start, UTC epoch milliseconds.
        window_end_ms: Extraction window end, UTC epoch milliseconds.
        row_count: Rows in the window.
        schema_failures: Rows failing schema conformance.
        features: Per-feature statistics.
        duplicate_rows: Duplicate rows in the window.
        label_distribution: Label -> share of rows (0-1).
        freshness_lag_ms: Age of the newest row at report time, milliseconds.
        baseline: Name of the baseline drift is measured against.
        drift: Drift summary against the baseline.
        rejected_samples: Samples rejected by the pipeline's validation.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.DataQualityReport"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    dataset_uri: str
    dataset_version: str | None = None
    partition: str | None = None
    window_start_ms: int
    window_end_ms: int
    row_count: int
    schema_failures: int = 0
    features: tuple[FeatureStats, ...] = ()
    duplicate_rows: int = 0
    label_distribution: dict[str, float] = field(default_factory=dict)
    freshness_lag_ms: int | None = None
    baseline: str | None = None
    drift: DriftSummary | None = None
    rejected_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "dataset_uri": self.dataset_uri,
            "dataset_version": self.dataset_version,
            "partition": self.partition,
            "window_start_ms": self.window_start_ms,
            "window_end_ms": self.window_end_ms,
            "row_count": self.row_count,
            "schema_failures": self.schema_failures,
            "features": [x.to_dict() for x in self.features],
            "duplicate_rows": self.duplicate_rows,
            "label_distribution": self.label_distribution,
            "freshness_lag_ms": self.freshness_lag_ms,
            "baseline": self.baseline,
            "drift": None if self.drift is None else self.drift.to_dict(),
            "rejected_samples": self.rejected_samples,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DataQualityReport:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            dataset_uri=d["dataset_uri"],
            dataset_version=d.get("dataset_version", None),
            partition=d.get("partition", None),
            window_start_ms=d["window_start_ms"],
            window_end_ms=d["window_end_ms"],
            row_count=d["row_count"],
            schema_failures=d.get("schema_failures", 0),
            features=tuple([FeatureStats.from_dict(x) for x in d.get("features", ())]),
            duplicate_rows=d.get("duplicate_rows", 0),
            label_distribution=d.get("label_distribution", {}),
            freshness_lag_ms=d.get("freshness_lag_ms", None),
            baseline=d.get("baseline", None),
            drift=None if (v := d.get("drift", None)) is None else DriftSummary.from_dict(v),
            rejected_samples=d.get("rejected_samples", 0),
        )
