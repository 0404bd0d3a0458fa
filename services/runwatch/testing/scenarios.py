"""Scripted runs: event sequences for the failure modes the processor must catch.

Each scenario returns the records of one run, in emission order, with event
times laid out from ``t0_ms`` (one step every ``step_ms``). The processor's
integration tests use them. The cluster simulator (:mod:`runwatch.sim`) and its
end-to-end tests do not: they publish through the public producers only.

Failure modes (with the alert the processor should raise):

* ``healthy`` — none.
* ``loader_slowdown`` — loader wait lengthens slowly → ``watch:loader_share`` (execution).
* ``label_shift`` — label balance shifts, then validation declines →
  ``rule:validation_decline`` (data).
* ``restarts`` — worker restarts, effective batch falls, validation declines →
  ``rule:validation_decline`` (execution).
* ``nan_loss`` — the loss becomes NaN → ``rule:non_finite`` (learning).
* ``checksum`` — a checkpoint's checksum mismatches → ``rule:checkpoint_checksum`` (artifact).
* ``gpu_occupancy`` — SM occupancy of the run's GPUs declines while they
  run at their power cap → ``watch:gpu_occupancy`` (infrastructure).
* ``grad_variance`` — the gradient-norm variance rises → ``watch:grad_norm_variance``
  (learning).
* ``rejected_samples`` — the data pipeline rejects a growing share of samples →
  ``watch:rejected_sample_rate`` (data).

``healthy``, ``gpu_occupancy`` and ``rejected_samples`` also carry a data-quality report
every ten steps. ``grad_variance`` runs at least 240 steps (its watch learns the run's
level from the first 69 gradient norms).
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runwatch.core.records import (
    Allocation,
    CheckpointEvent,
    DataQualityReport,
    DatasetRef,
    DriftSummary,
    GpuProcess,
    GpuSample,
    Hardware,
    JobEvent,
    LearningStep,
    NodeSample,
    RunManifest,
    Source,
    StepTiming,
    ValidationResult,
)

SOURCE = Source(kind="simulator", host="scenario", runwatch_version="0.1.0")


@dataclass(frozen=True, slots=True)
class Expected:
    """The alert a scenario should raise (None fields: no alert expected)."""

    detector: str | None
    probable_cause: str | None


EXPECTED: dict[str, Expected] = {
    "healthy": Expected(None, None),
    "loader_slowdown": Expected("watch:loader_share", "execution"),
    "label_shift": Expected("rule:validation_decline", "data"),
    "restarts": Expected("rule:validation_decline", "execution"),
    "nan_loss": Expected("rule:non_finite", "learning"),
    "checksum": Expected("rule:checkpoint_checksum", "artifact"),
    "gpu_occupancy": Expected("watch:gpu_occupancy", "infrastructure"),
    "grad_variance": Expected("watch:grad_norm_variance", "learning"),
    "rejected_samples": Expected("watch:rejected_sample_rate", "data"),
}
PERIODIC_REPORTS = frozenset({"healthy", "gpu_occupancy", "rejected_samples"})


class _Run:
    def __init__(self, run_id: str, t0_ms: int, step_ms: int, seed: int, node: str) -> None:
        self.run_id, self.t, self.step_ms, self.node = run_id, t0_ms, step_ms, node
        self.rng = random.Random(seed)  # noqa: S311 - scripted noise, not security
        self.seq = 0
        self.events: list[Any] = []

    def common(self) -> dict[str, Any]:
        self.seq += 1
        eid = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        return {"event_id": str(eid), "run_id": self.run_id, "emitted_at_ms": self.t,
                "source": SOURCE, "seq": self.seq}

    def add(self, cls: type, **kw: Any) -> None:
        self.events.append(cls(**self.common(), **kw))


DATASET = DatasetRef(uri="s3://data/imagenet-mini", version="v3")
LABELS = {"cat": 0.25, "dog": 0.25, "car": 0.25, "boat": 0.25}
SHIFTED = {"cat": 0.55, "dog": 0.25, "car": 0.15, "boat": 0.05}


def dataset_for(run_id: str) -> DatasetRef:
    """Return the dataset version a scripted run trains on (its own, so runs stay apart)."""
    return DatasetRef(uri=f"{DATASET.uri}/{run_id}", version=DATASET.version)


def _data_report(r: _Run, labels: dict[str, float], rows: int = 10_000,
                 drifted: tuple[str, ...] = (), rejected: int | None = None) -> None:
    ds = dataset_for(r.run_id)
    drift = DriftSummary(drifted_features=drifted, max_psi=0.4, max_ks=None,
                         psi_threshold=0.2) if drifted else None
    r.add(DataQualityReport, dataset_uri=ds.uri, dataset_version=ds.version,
          window_start_ms=r.t - 60_000, window_end_ms=r.t, row_count=rows, schema_failures=0,
          duplicate_rows=0, label_distribution=dict(labels),
          rejected_samples=rows // 1000 if rejected is None else rejected,
          drift=drift)


def _node_sample(r: _Run, occupancy: float = 70.0, throttle: int = 0) -> None:
    gpus = tuple(
        GpuSample(index=i, uuid=f"GPU-{r.node}-{i}", util_pct=90 + r.rng.uniform(-3, 3),
                  sm_active_pct=occupancy + r.rng.uniform(-1, 1), mem_used_bytes=60 << 30,
                  mem_total_bytes=80 << 30, power_w=600.0, temp_c=88.0 if throttle else 65.0,
                  sm_clock_mhz=1400 if throttle else 1980, mem_clock_mhz=2619,
                  throttle_reasons=throttle, ecc_corrected=0, ecc_uncorrected=0, xid=None,
                  processes=(GpuProcess(pid=1000 + i, run_id=r.run_id, used_mem_bytes=1 << 30),))
        for i in range(8)
    )
    r.add(NodeSample, node=r.node, cpu_pct=40.0, mem_used_bytes=100 << 30,
          mem_total_bytes=512 << 30, disk_read_bps=1e8, disk_write_bps=1e7, net_rx_bps=1e9,
          net_tx_bps=1e9, gpus=gpus)


def build(kind: str, run_id: str, t0_ms: int, *, steps: int = 120, step_ms: int = 1_000,
          seed: int = 0, node: str | None = None) -> list[Any]:
    """Return the records of one scripted run.

    Args:
        kind: A key of :data:`EXPECTED`.
        run_id: The run id.
        t0_ms: Event time of the first record.
        steps: Training steps (the failure sets in at about a third of them).
        step_ms: Event-time spacing between steps.
        seed: Noise seed.
        node: Node the run is allocated on (default derived from the run id).

    Returns:
        The records in emission order.

    Raises:
        ValueError: For an unknown scenario.

    """
    if kind not in EXPECTED:
        msg = f"unknown scenario {kind!r}; choose from {sorted(EXPECTED)}"
        raise ValueError(msg)
    if kind == "grad_variance":  # its watch learns the run's level from its first 69 norms
        steps = max(steps, 240)
    r = _Run(run_id, t0_ms, step_ms, seed, node or f"node-{run_id[-6:]}")
    onset = steps // 3
    r.add(RunManifest, datasets=(dataset_for(run_id),), transforms=(), code_revision="abc123",
          code_dirty=False,
          image_digest="registry.local/train@sha256:1111", config_hash="cfg1",
          hardware=Hardware(nodes=(r.node,), gpu_count=8, gpu_model="H100"),
          experiment_family="scenario", team="ml-platform")
    r.add(JobEvent, state="queued", attempt=1, experiment_family="scenario", team="ml-platform")
    r.add(JobEvent, state="running", attempt=1,
          allocation=Allocation(nodes=(r.node,), gpu_indices=tuple(range(8)), gpu_model="H100"))
    _data_report(r, LABELS)
    batch, restarts, acc = 256, 0, 0.50
    for i in range(steps):
        told = restarts  # StepTiming.worker_restarts: the restarts since the previous step
        r.t += step_ms
        k = i - onset
        loader = 80.0 + r.rng.uniform(-8, 8)
        if kind == "loader_slowdown" and k > 0:
            loader += 6.0 * k
        if kind == "restarts" and k > 0 and k % 10 == 0 and restarts < 3:
            restarts += 1
            batch -= 64
            r.add(JobEvent, state="retrying", attempt=restarts + 1, reason="worker lost")
            r.add(JobEvent, state="running", attempt=restarts + 1,
                  allocation=Allocation(nodes=(r.node,), gpu_indices=tuple(range(8)),
                                        gpu_model="H100"))
        compute = 900.0 + r.rng.uniform(-20, 20)
        r.add(StepTiming, step=i, loader_wait_ms=loader, compute_ms=compute,
              step_ms=loader + compute, samples=batch, effective_batch_size=batch,
              worker_restarts=restarts - told)
        loss = 2.0 * (0.995 ** i) + r.rng.uniform(-0.02, 0.02)
        if kind == "nan_loss" and k > 0:
            loss = float("nan")
        # unstable gradients: the norms swing by a growing factor from step to step
        spread = 0.1 * (1 + 0.25 * k) if kind == "grad_variance" and k > 0 else 0.1
        r.add(LearningStep, step=i, epoch=0, loss=loss, metrics={}, lr=1e-3,
              grad_norm=math.exp(r.rng.uniform(-spread, spread)), nonfinite_count=0)
        if i % 5 == 0:
            if kind == "gpu_occupancy" and k > 0:
                # power-capped (evidence, not a page of its own: a sustained HW thermal
                # slowdown would also raise rule:gpu_slowdown)
                _node_sample(r, occupancy=max(70.0 - 0.8 * k, 5.0), throttle=0x4)
            else:
                _node_sample(r)
        if kind in PERIODIC_REPORTS and i % 10 == 9:
            growth = max(k // 10, 0) if kind == "rejected_samples" else 0
            _data_report(r, LABELS, rejected=10 + 300 * growth)
        if kind == "label_shift" and k == 0:
            _data_report(r, SHIFTED, drifted=("label",))
        if i % 10 == 9:
            declining = kind in ("label_shift", "restarts") and k > 10
            acc = acc - 0.04 if declining else min(acc + 0.01 + r.rng.uniform(0, 0.004), 0.9)
            r.add(ValidationResult, step=i, epoch=0, metrics={"accuracy": acc},
                  dataset=dataset_for(run_id))
        if i % 30 == 29:
            good = "sha256:" + f"{i:064x}"[-64:]
            bad = kind == "checksum" and k > 0 and not any(
                isinstance(e, CheckpointEvent) and e.sha256 != e.expected_sha256
                for e in r.events)
            r.add(CheckpointEvent, step=i, started_at_ms=r.t - 500, ended_at_ms=r.t,
                  duration_ms=500.0, size_bytes=1 << 30,
                  sha256=("sha256:" + "f" * 64) if bad else good, expected_sha256=good,
                  uri=f"s3://ckpt/{run_id}/{i}", outcome="ok")
    r.t += step_ms
    r.add(JobEvent, state="succeeded", attempt=restarts + 1)
    return r.events


SCENARIOS: dict[str, Callable[..., list[Any]]] = {k: build for k in EXPECTED}
