"""Mixed synthetic telemetry for sink tests and ``benchmarks/sink.py`` (no I/O).

Deterministic for a seed: runs with a manifest, job transitions, node samples
(8 GPUs each), step timings, learning steps, checkpoints, data reports, some
alerts, gate decisions and registered artifacts.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runwatch.core.records import (
    Alert,
    Allocation,
    ArtifactEvent,
    CheckpointEvent,
    DataQualityReport,
    DatasetRef,
    GateDecision,
    GpuProcess,
    GpuSample,
    JobEvent,
    LearningStep,
    NodeSample,
    RunManifest,
    Source,
    StepTiming,
)

TOPIC_OF = {
    "RunManifest": "rw.lineage",
    "DataQualityReport": "rw.data",
    "JobEvent": "rw.exec.job",
    "StepTiming": "rw.exec.job",
    "CheckpointEvent": "rw.exec.job",
    "NodeSample": "rw.exec.node",
    "LearningStep": "rw.learning",
    "ArtifactEvent": "rw.artifact",
    "GateDecision": "rw.artifact",
    "Alert": "rw.alerts",
}
SRC = Source(kind="simulator", host="synth", runwatch_version="0.1.0")


@dataclass(frozen=True, slots=True)
class Event:
    """One record with its topic kind and key."""

    kind: str
    key: str
    record: Any


def _id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def run_events(
    rng: random.Random,
    run: str,
    start_ms: int,
    ticks: int,
    *,
    gpus: int = 8,
    tick_ms: int = 1000,
    alert: bool = False,
    gated: bool = False,
    failed: bool = False,
) -> Iterator[Event]:
    """Yield the events of one run.

    Args:
        rng: Random source.
        run: Run id.
        start_ms: First timestamp (epoch ms).
        ticks: Node-sample ticks (one step timing and one learning step each).
        gpus: GPUs on the run's node.
        tick_ms: Tick spacing.
        alert: Emit an alert for the run.
        gated: Emit a gate decision and a registered model.
        failed: End the run failed instead of succeeded.

    Yields:
        Events in time order.
    """
    node = f"node-{run}"
    team = rng.choice(["vision", "nlp", "speech"])
    seq = 0

    def nxt() -> int:
        nonlocal seq
        seq += 1
        return seq

    yield Event(
        "RunManifest",
        run,
        RunManifest(
            event_id=_id(rng),
            run_id=run,
            emitted_at_ms=start_ms,
            source=SRC,
            seq=nxt(),
            datasets=(DatasetRef(uri="s3://data/imagenet", version=rng.choice(["v1", "v2"])),),
            code_revision="abc123",
            team=team,
            experiment_family="fam",
        ),
    )
    yield Event(
        "JobEvent",
        run,
        JobEvent(
            event_id=_id(rng),
            run_id=run,
            emitted_at_ms=start_ms,
            source=SRC,
            seq=nxt(),
            state="running",
            attempt=1,
            team=team,
            allocation=Allocation(nodes=(node,), gpu_indices=tuple(range(gpus))),
        ),
    )
    yield Event(
        "DataQualityReport",
        "s3://data/imagenet",
        DataQualityReport(
            event_id=_id(rng),
            run_id=run,
            emitted_at_ms=start_ms,
            source=SRC,
            seq=nxt(),
            dataset_uri="s3://data/imagenet",
            dataset_version="v1",
            window_start_ms=start_ms - 60000,
            window_end_ms=start_ms,
            row_count=1000,
            schema_failures=0,
        ),
    )
    loss = 5.0
    for t in range(ticks):
        ts = start_ms + t * tick_ms
        base = rng.uniform(60, 95)
        yield Event(
            "NodeSample",
            node,
            NodeSample(
                event_id=_id(rng),
                run_id=None,
                emitted_at_ms=ts,
                source=SRC,
                seq=nxt(),
                node=node,
                cpu_pct=round(rng.uniform(10, 90), 1),
                mem_used_bytes=64 << 30,
                mem_total_bytes=512 << 30,
                gpus=tuple(
                    GpuSample(
                        index=i,
                        uuid=f"GPU-{run}-{i}",
                        util_pct=round(min(100.0, base + rng.uniform(-5, 5)), 1),
                        mem_used_bytes=(40 << 30) + rng.randrange(1 << 20),
                        mem_total_bytes=80 << 30,
                        power_w=round(300 + rng.uniform(-20, 20), 1),
                        temp_c=float(60 + rng.randrange(10)),
                        sm_clock_mhz=1980,
                        mem_clock_mhz=2619,
                        processes=(GpuProcess(pid=1000 + i, run_id=run, used_mem_bytes=40 << 30),),
                    )
                    for i in range(gpus)
                ),
            ),
        )
        yield Event(
            "StepTiming",
            run,
            StepTiming(
                event_id=_id(rng),
                run_id=run,
                emitted_at_ms=ts,
                source=SRC,
                seq=nxt(),
                step=t,
                loader_wait_ms=rng.uniform(1, 20),
                compute_ms=rng.uniform(200, 300),
                step_ms=rng.uniform(220, 330),
                samples=256,
            ),
        )
        loss *= 0.999
        yield Event(
            "LearningStep",
            run,
            LearningStep(
                event_id=_id(rng),
                run_id=run,
                emitted_at_ms=ts,
                source=SRC,
                seq=nxt(),
                step=t,
                epoch=t // 100,
                loss=loss + rng.uniform(0, 0.01),
                metrics={"acc": rng.random()},
            ),
        )
        if t % 50 == 49:
            yield Event(
                "CheckpointEvent",
                run,
                CheckpointEvent(
                    event_id=_id(rng),
                    run_id=run,
                    emitted_at_ms=ts,
                    source=SRC,
                    seq=nxt(),
                    step=t,
                    started_at_ms=ts - 5000,
                    ended_at_ms=ts,
                    duration_ms=rng.uniform(3000, 9000),
                    size_bytes=10 << 30,
                    uri=f"s3://ckpt/{team}/{run}/step-{t}.pt",
                    outcome="ok",
                ),
            )
    end = start_ms + ticks * tick_ms
    if alert:
        yield Event(
            "Alert",
            run,
            Alert(
                event_id=_id(rng),
                run_id=run,
                emitted_at_ms=end,
                source=SRC,
                seq=nxt(),
                alert_id=_id(rng),
                dedup_key=f"{run}:loss",
                status="firing",
                severity="critical",
                detector="ewma",
                indicator="loss",
                score=5.0,
                probable_cause="learning",
                title="loss spike",
                team=team,
                first_seen_ms=end,
                last_seen_ms=end,
            ),
        )
    if gated:
        yield Event(
            "GateDecision",
            run,
            GateDecision(
                event_id=_id(rng),
                run_id=run,
                emitted_at_ms=end,
                source=SRC,
                seq=nxt(),
                gate="release",
                decision="pass",
                evaluator="ci",
                measured={"acc": 0.9},
            ),
        )
        yield Event(
            "ArtifactEvent",
            run,
            ArtifactEvent(
                event_id=_id(rng),
                run_id=run,
                emitted_at_ms=end,
                source=SRC,
                seq=nxt(),
                uri=f"s3://models/{run}",
                kind="model",
                size_bytes=1 << 30,
                registry_status="registered",
            ),
        )
    yield Event(
        "JobEvent",
        run,
        JobEvent(
            event_id=_id(rng),
            run_id=run,
            emitted_at_ms=end,
            source=SRC,
            seq=nxt(),
            state="failed" if failed else "succeeded",
            attempt=1,
            team=team,
        ),
    )


def mixed_events(seed: int, runs: int, ticks: int, start_ms: int, **kw: Any) -> list[Event]:
    """Return the events of ``runs`` runs; every 5th run alerts, every 7th is gated.

    Args:
        seed: Random seed.
        runs: Number of runs.
        ticks: Ticks per run.
        start_ms: Start of the first run.
        **kw: More :func:`run_events` arguments.

    Returns:
        Events (each run in time order; runs interleaved).
    """
    rng = random.Random(seed)
    streams = [
        list(
            run_events(
                rng,
                f"run-{seed}-{r}",
                start_ms + r * 1000,
                ticks,
                alert=r % 5 == 0,
                gated=r % 7 == 0,
                failed=r % 3 == 0,
                **kw,
            )
        )
        for r in range(runs)
    ]
    out: list[Event] = []
    longest = max(len(s) for s in streams)
    for i in range(longest):
        out.extend(s[i] for s in streams if i < len(s))
    return out
