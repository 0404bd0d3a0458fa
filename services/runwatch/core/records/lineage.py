"""Lineage records (topic rw.lineage): the run manifest.

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runwatch.core.records.common import DatasetRef, Source

__all__ = ["Hardware", "RunManifest", "TransformRef"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformRef:
    """A data transformation and its version.

    Mirrors Avro ``runwatch.v1.TransformRef``.

    Attributes:
        name: Transformation name.
        version: Transformation version (semver, git sha, ...).

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.TransformRef"

    name: str
    version: str

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "name": self.name,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TransformRef:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            name=d["name"],
            version=d["version"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    """Hardware allocated to a run.

    Mirrors Avro ``runwatch.v1.Hardware``.

    Attributes:
        nodes: Node ids allocated to the run.
        gpu_count: Total GPUs allocated.
        gpu_model: GPU model name, e.g. NVIDIA H100 80GB HBM3.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.Hardware"

    nodes: tuple[str, ...] = ()
    gpu_count: int = 0
    gpu_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "nodes": self.nodes,
            "gpu_count": self.gpu_count,
            "gpu_model": self.gpu_model,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Hardware:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            nodes=tuple(d.get("nodes", ())),
            gpu_count=d.get("gpu_count", 0),
            gpu_model=d.get("gpu_model", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunManifest:
    """Lineage of one training run: data, code, environment, config and ancestry.

    Mirrors Avro ``runwatch.v1.RunManifest``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        datasets: Datasets the run reads.
        transforms: Data transformations applied, with versions.
        code_revision: Source revision (git sha) of the training code.
        code_dirty: True when the working tree had uncommitted changes.
        image_digest: Container image digest (sha256:...).
        config_hash: Hash of the canonical run configuration.
        config: Run configuration, flattened key -> string value.
        hardware: Hardware allocation at launch.
        seed_policy: Seed policy, e.g. fixed:1234 or per-rank.
        framework_versions: Framework name -> version (torch, cuda, ...).
        experiment_family: Experiment family the run belongs to.
        team: Owning team.
        parent_run_id: Run this run was forked or derived from.
        resumed_from_checkpoint: Checkpoint uri the run resumed from.
        labels: Free-form labels.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.RunManifest"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    datasets: tuple[DatasetRef, ...] = ()
    transforms: tuple[TransformRef, ...] = ()
    code_revision: str | None = None
    code_dirty: bool = False
    image_digest: str | None = None
    config_hash: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    hardware: Hardware | None = None
    seed_policy: str | None = None
    framework_versions: dict[str, str] = field(default_factory=dict)
    experiment_family: str | None = None
    team: str | None = None
    parent_run_id: str | None = None
    resumed_from_checkpoint: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "datasets": [x.to_dict() for x in self.datasets],
            "transforms": [x.to_dict() for x in self.transforms],
            "code_revision": self.code_revision,
            "code_dirty": self.code_dirty,
            "image_digest": self.image_digest,
            "config_hash": self.config_hash,
            "config": self.config,
            "hardware": None if self.hardware is None else self.hardware.to_dict(),
            "seed_policy": self.seed_policy,
            "framework_versions": self.framework_versions,
            "experiment_family": self.experiment_family,
            "team": self.team,
            "parent_run_id": self.parent_run_id,
            "resumed_from_checkpoint": self.resumed_from_checkpoint,
            "labels": self.labels,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunManifest:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            datasets=tuple([DatasetRef.from_dict(x) for x in d.get("datasets", ())]),
            transforms=tuple([TransformRef.from_dict(x) for x in d.get("transforms", ())]),
            code_revision=d.get("code_revision", None),
            code_dirty=d.get("code_dirty", False),
            image_digest=d.get("image_digest", None),
            config_hash=d.get("config_hash", None),
            config=d.get("config", {}),
            hardware=None if (v := d.get("hardware", None)) is None else Hardware.from_dict(v),
            seed_policy=d.get("seed_policy", None),
            framework_versions=d.get("framework_versions", {}),
            experiment_family=d.get("experiment_family", None),
            team=d.get("team", None),
            parent_run_id=d.get("parent_run_id", None),
            resumed_from_checkpoint=d.get("resumed_from_checkpoint", None),
            labels=d.get("labels", {}),
        )
