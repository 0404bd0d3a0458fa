"""Execution records (topic rw.exec.job): job events, step timing, checkpoints.

Generated from schemas/avro/*.avsc; tests/contract checks they agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from runwatch.core.records.common import Source

__all__ = [
    "Allocation",
    "CheckpointEvent",
    "CheckpointOutcome",
    "JobEvent",
    "JobState",
    "StepTiming",
]

#: Job lifecycle state.
JobState = Literal[
    "queued", "scheduled", "running", "preempted", "retrying", "failed", "succeeded", "cancelled"
]

#: Checkpoint outcome; readers map unknown symbols to unknown.
CheckpointOutcome = Literal["ok", "failed", "corrupt", "timeout", "unknown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """Resources a job attempt is placed on.

    Mirrors Avro ``runwatch.v1.Allocation``.

    Attributes:
        nodes: Node ids.
        gpu_indices: GPU indices on the nodes.
        gpu_model: GPU model name.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.Allocation"

    nodes: tuple[str, ...] = ()
    gpu_indices: tuple[int, ...] = ()
    gpu_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "nodes": self.nodes,
            "gpu_indices": self.gpu_indices,
            "gpu_model": self.gpu_model,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Allocation:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            nodes=tuple(d.get("nodes", ())),
            gpu_indices=tuple(d.get("gpu_indices", ())),
            gpu_model=d.get("gpu_model", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent:
    """A job state transition, from the SDK or a scheduler hook.

    Mirrors Avro ``runwatch.v1.JobEvent``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        state: New state.
        attempt: Attempt number, 1-based; 0 when unknown.
        reason: Why the transition happened (exit code, preemption notice...).
        queue: Scheduler queue or partition.
        priority_class: Scheduler priority class.
        allocation: Allocation of this attempt, when known.
        deadline_ms: Deadline for the run, UTC epoch milliseconds.
        team: Owning team.
        experiment_family: Experiment family.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.JobEvent"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    state: JobState
    attempt: int = 0
    reason: str | None = None
    queue: str | None = None
    priority_class: str | None = None
    allocation: Allocation | None = None
    deadline_ms: int | None = None
    team: str | None = None
    experiment_family: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "state": self.state,
            "attempt": self.attempt,
            "reason": self.reason,
            "queue": self.queue,
            "priority_class": self.priority_class,
            "allocation": None if self.allocation is None else self.allocation.to_dict(),
            "deadline_ms": self.deadline_ms,
            "team": self.team,
            "experiment_family": self.experiment_family,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobEvent:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            state=d["state"],
            attempt=d.get("attempt", 0),
            reason=d.get("reason", None),
            queue=d.get("queue", None),
            priority_class=d.get("priority_class", None),
            allocation=None
            if (v := d.get("allocation", None)) is None
            else Allocation.from_dict(v),
            deadline_ms=d.get("deadline_ms", None),
            team=d.get("team", None),
            experiment_family=d.get("experiment_family", None),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTiming:
    """Wall-time breakdown of one training step.

    Mirrors Avro ``runwatch.v1.StepTiming``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        step: Global step number.
        loader_wait_ms: Time waiting for the data loader, milliseconds.
        compute_ms: Forward/backward/optimizer time, milliseconds.
        step_ms: Step wall time, milliseconds.
        samples: Samples processed in the step.
        tokens: Tokens processed in the step (language models).
        effective_batch_size: Effective (global) batch size.
        worker_restarts: Data-loader worker restarts since the previous step.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.StepTiming"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    step: int
    loader_wait_ms: float
    compute_ms: float
    step_ms: float
    samples: int = 0
    tokens: int | None = None
    effective_batch_size: int | None = None
    worker_restarts: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "step": self.step,
            "loader_wait_ms": self.loader_wait_ms,
            "compute_ms": self.compute_ms,
            "step_ms": self.step_ms,
            "samples": self.samples,
            "tokens": self.tokens,
            "effective_batch_size": self.effective_batch_size,
            "worker_restarts": self.worker_restarts,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepTiming:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            step=d["step"],
            loader_wait_ms=d["loader_wait_ms"],
            compute_ms=d["compute_ms"],
            step_ms=d["step_ms"],
            samples=d.get("samples", 0),
            tokens=d.get("tokens", None),
            effective_batch_size=d.get("effective_batch_size", None),
            worker_restarts=d.get("worker_restarts", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointEvent:
    """One checkpoint save (or verification).

    Mirrors Avro ``runwatch.v1.CheckpointEvent``.

    Attributes:
        event_id: Unique event id (UUID string); used for idempotent sinks.
        run_id: Training run the event concerns; null when it concerns no single run.
        emitted_at_ms: Emission time, UTC epoch milliseconds.
        source: Who emitted the event.
        seq: Sequence number, monotonic per producer.
        step: Global step checkpointed.
        started_at_ms: Save start, UTC epoch milliseconds.
        ended_at_ms: Save end, UTC epoch milliseconds.
        duration_ms: Save duration, milliseconds.
        size_bytes: Checkpoint size, bytes.
        sha256: SHA-256 of the written checkpoint, hex.
        expected_sha256: SHA-256 expected on re-read, hex; null when not verified.
        uri: Checkpoint location.
        outcome: Outcome.
        throughput_bps: Storage write throughput, bytes per second.

    """

    AVRO_NAME: ClassVar[str] = "runwatch.v1.CheckpointEvent"

    event_id: str
    run_id: str | None = None
    emitted_at_ms: int
    source: Source
    seq: int
    step: int
    started_at_ms: int
    ended_at_ms: int
    duration_ms: float
    size_bytes: int = 0
    sha256: str | None = None
    expected_sha256: str | None = None
    uri: str
    outcome: CheckpointOutcome
    throughput_bps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the plain dict fastavro writes (nested records as dicts)."""
        return {
            "event_id": self.event_id,
            "run_id": self.run_id,
            "emitted_at_ms": self.emitted_at_ms,
            "source": self.source.to_dict(),
            "seq": self.seq,
            "step": self.step,
            "started_at_ms": self.started_at_ms,
            "ended_at_ms": self.ended_at_ms,
            "duration_ms": self.duration_ms,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "expected_sha256": self.expected_sha256,
            "uri": self.uri,
            "outcome": self.outcome,
            "throughput_bps": self.throughput_bps,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CheckpointEvent:
        """Build from a dict as fastavro reads it; absent defaulted fields take defaults."""
        return cls(
            event_id=d["event_id"],
            run_id=d.get("run_id", None),
            emitted_at_ms=d["emitted_at_ms"],
            source=Source.from_dict(d["source"]),
            seq=d["seq"],
            step=d["step"],
            started_at_ms=d["started_at_ms"],
            ended_at_ms=d["ended_at_ms"],
            duration_ms=d["duration_ms"],
            size_bytes=d.get("size_bytes", 0),
            sha256=d.get("sha256", None),
            expected_sha256=d.get("expected_sha256", None),
            uri=d["uri"],
            outcome=d["outcome"],
            throughput_bps=d.get("throughput_bps", None),
        )
