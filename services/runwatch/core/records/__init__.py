"""Python mirrors of the runwatch.v1 Avro records.

Every record is a frozen, slotted, keyword-only dataclass with ``to_dict()`` /
``from_dict()`` and an ``AVRO_NAME`` class attribute. :data:`RECORD_TYPES` maps the
Avro full name of every top-level record (one per ``.avsc`` file) to its class;
:data:`ALL_TYPES` adds the nested records.
"""

from __future__ import annotations

from typing import Any

from runwatch.core.records.alerts import (
    Alert,
    AlertStatus,
    DeadLetter,
    Evidence,
    ProbableCause,
    Severity,
)
from runwatch.core.records.artifact import ArtifactEvent, GateDecision, GateVerdict, SliceResult
from runwatch.core.records.common import DatasetRef, Source
from runwatch.core.records.data import DataQualityReport, DriftSummary, FeatureStats
from runwatch.core.records.execution import (
    Allocation,
    CheckpointEvent,
    CheckpointOutcome,
    JobEvent,
    JobState,
    StepTiming,
)
from runwatch.core.records.learning import LearningStep, ValidationResult
from runwatch.core.records.lineage import Hardware, RunManifest, TransformRef
from runwatch.core.records.node import GpuProcess, GpuSample, NodeSample

#: Union of every top-level record type.
Record = (
    RunManifest
    | DataQualityReport
    | JobEvent
    | StepTiming
    | CheckpointEvent
    | NodeSample
    | LearningStep
    | ValidationResult
    | ArtifactEvent
    | GateDecision
    | Alert
    | DeadLetter
)

#: Avro full name -> class for every top-level record.
RECORD_TYPES: dict[str, type[Any]] = {
    RunManifest.AVRO_NAME: RunManifest,
    DataQualityReport.AVRO_NAME: DataQualityReport,
    JobEvent.AVRO_NAME: JobEvent,
    StepTiming.AVRO_NAME: StepTiming,
    CheckpointEvent.AVRO_NAME: CheckpointEvent,
    NodeSample.AVRO_NAME: NodeSample,
    LearningStep.AVRO_NAME: LearningStep,
    ValidationResult.AVRO_NAME: ValidationResult,
    ArtifactEvent.AVRO_NAME: ArtifactEvent,
    GateDecision.AVRO_NAME: GateDecision,
    Alert.AVRO_NAME: Alert,
    DeadLetter.AVRO_NAME: DeadLetter,
}

#: Avro full name -> class for every record, nested ones included.
ALL_TYPES: dict[str, type[Any]] = {
    Source.AVRO_NAME: Source,
    DatasetRef.AVRO_NAME: DatasetRef,
    TransformRef.AVRO_NAME: TransformRef,
    Hardware.AVRO_NAME: Hardware,
    RunManifest.AVRO_NAME: RunManifest,
    FeatureStats.AVRO_NAME: FeatureStats,
    DriftSummary.AVRO_NAME: DriftSummary,
    DataQualityReport.AVRO_NAME: DataQualityReport,
    Allocation.AVRO_NAME: Allocation,
    JobEvent.AVRO_NAME: JobEvent,
    StepTiming.AVRO_NAME: StepTiming,
    CheckpointEvent.AVRO_NAME: CheckpointEvent,
    GpuProcess.AVRO_NAME: GpuProcess,
    GpuSample.AVRO_NAME: GpuSample,
    NodeSample.AVRO_NAME: NodeSample,
    LearningStep.AVRO_NAME: LearningStep,
    ValidationResult.AVRO_NAME: ValidationResult,
    ArtifactEvent.AVRO_NAME: ArtifactEvent,
    SliceResult.AVRO_NAME: SliceResult,
    GateDecision.AVRO_NAME: GateDecision,
    Evidence.AVRO_NAME: Evidence,
    Alert.AVRO_NAME: Alert,
    DeadLetter.AVRO_NAME: DeadLetter,
}

#: Avro full name -> symbols for every enum (mirrored by the Literal aliases).
ENUM_TYPES: dict[str, Any] = {
    "runwatch.v1.JobState": JobState,
    "runwatch.v1.CheckpointOutcome": CheckpointOutcome,
    "runwatch.v1.GateVerdict": GateVerdict,
    "runwatch.v1.AlertStatus": AlertStatus,
    "runwatch.v1.Severity": Severity,
    "runwatch.v1.ProbableCause": ProbableCause,
}

__all__ = [
    "ALL_TYPES",
    "Alert",
    "AlertStatus",
    "Allocation",
    "ArtifactEvent",
    "CheckpointEvent",
    "CheckpointOutcome",
    "DataQualityReport",
    "DatasetRef",
    "DeadLetter",
    "DriftSummary",
    "ENUM_TYPES",
    "Evidence",
    "FeatureStats",
    "GateDecision",
    "GateVerdict",
    "GpuProcess",
    "GpuSample",
    "Hardware",
    "JobEvent",
    "JobState",
    "LearningStep",
    "NodeSample",
    "ProbableCause",
    "RECORD_TYPES",
    "Record",
    "RunManifest",
    "Severity",
    "SliceResult",
    "Source",
    "StepTiming",
    "TransformRef",
    "ValidationResult",
]
