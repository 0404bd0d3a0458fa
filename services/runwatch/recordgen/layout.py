"""What the record modules hold that the schemas do not say: module names, docstrings, order.

A top-level record needs an entry here to be generated; a named type used from
two modules goes to :data:`COMMON`, any other nested type to the module of the
record using it.
"""

from __future__ import annotations

__all__ = ["COMMON", "MODULES", "PKG", "WIDTH"]

#: Package the generated modules belong to.
PKG = "runwatch.core.records"
#: Line length of the generated code (ruff's).
WIDTH = 100
#: Module -> (docstring, top-level records in it, in order). The order of the
#: modules is the order of RECORD_TYPES, ALL_TYPES and ENUM_TYPES.
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "common": ("Records shared by every topic: the event source and dataset references.", ()),
    "lineage": ("Lineage records (topic rw.lineage): the run manifest.", ("RunManifest",)),
    "data": (
        "Data records (topic rw.data): data-quality reports and stage boundary events.",
        ("DataQualityReport", "StageEvent"),
    ),
    "execution": (
        "Execution records (topic rw.exec.job): job events, step timing, checkpoints.",
        ("JobEvent", "StepTiming", "CheckpointEvent"),
    ),
    "node": ("Node records (topic rw.exec.node): host figures and GPU samples.", ("NodeSample",)),
    "learning": (
        "Learning records (topic rw.learning): training steps and validation results.",
        ("LearningStep", "ValidationResult"),
    ),
    "artifact": (
        "Artifact and release-gate records (topic rw.artifact).",
        ("ArtifactEvent", "GateDecision"),
    ),
    "alerts": (
        "Alert and dead-letter records (topics rw.alerts, rw.dlq).",
        ("Alert", "DeadLetter"),
    ),
}
COMMON = "common"
