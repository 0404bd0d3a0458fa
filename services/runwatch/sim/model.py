"""The cluster model: what each simulated run does, as planned actions (pure).

A :class:`RunModel` is a seeded, deterministic description of one training
run — scheduler queueing, step timings, loss and validation curves,
checkpoints, data-quality batches, release gate — with at most one injected
:class:`~runwatch.sim.scenarios.Scenario`. :meth:`RunModel.advance` returns the
:class:`Action` objects due up to a virtual instant; the drivers turn them into
SDK, agent and scheduler-hook calls. No I/O, no clock.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

from runwatch.sim.scenarios import ALLOWED_IMAGE_PREFIX, Scenario

FAMILIES: tuple[tuple[str, str], ...] = (
    ("llm-pretrain", "foundation"), ("vision-cls", "perception"), ("speech-asr", "audio"),
    ("recsys-ranker", "ads"), ("llm-sft", "foundation"),
)
LABELS: tuple[str, ...] = ("cat", "dog", "car", "boat")
GPUS_PER_NODE = 8
STEP_COMPUTE_MS = 1800.0
LOADER_MS = 150.0
VAL_EVERY = 20
CKPT_EVERY = 30
CKPT_MS = 1500.0
DATA_EVERY_MS = 60_000
DEADLINE_MS = 1_800_000
QUEUE_DEADLINE_MS = 300_000
BATCH = 256
SM_OCCUPANCY_PER_UTIL = 0.7


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a run does at a virtual instant.

    Attributes:
        at_ms: Virtual time it is due.
        kind: ``job`` (scheduler hook), ``start``, ``step``, ``validation``,
            ``checkpoint``, ``data``, ``rejoin``, ``gate``, ``fault`` (the
            injection marker) or ``finish``.
        args: Keyword arguments for the driver.

    """

    at_ms: int
    kind: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """Identity and placement of one run."""

    run_id: str
    index: int
    family: str
    team: str
    node: str
    dataset_uri: str
    image: str
    fault: Scenario | None
    gpus: tuple[int, ...] = tuple(range(GPUS_PER_NODE))


def plan_cluster(seed: int, nodes: int, runs: int, faults: list[Scenario],
                 prefix: str = "sim") -> list[RunPlan]:
    """Place ``runs`` healthy runs plus one run per fault on ``nodes`` nodes.

    Runs are assigned round-robin to nodes (one run owns a node's 8 GPUs);
    the first healthy run is the control. Names are derived from the seed, so
    the same arguments always give the same cluster.

    Args:
        seed: Random seed.
        nodes: Node count (>= 1; more runs than nodes share nodes' GPUs in turn).
        runs: Healthy runs (>= 1: the control).
        faults: One extra run per scenario.
        prefix: Run id prefix (make it unique per session).

    Returns:
        The plans, healthy runs first.

    Raises:
        ValueError: For non-positive counts.

    """
    if nodes < 1 or runs < 1:
        msg = f"need at least one node and one healthy run (nodes={nodes}, runs={runs})"
        raise ValueError(msg)
    rng = random.Random(seed)  # noqa: S311 - simulation, not security
    out: list[RunPlan] = []
    kinds: list[Scenario | None] = [None] * runs + list(faults)
    per_node = -(-len(kinds) // nodes)
    width = max(GPUS_PER_NODE // per_node, 1)
    for i, fault in enumerate(kinds):
        family, team = FAMILIES[rng.randrange(len(FAMILIES))]
        tag = fault.name if fault else ("control" if i == 0 else "healthy")
        run_id = f"{prefix}-{i:03d}-{tag}"
        image = (f"docker.io/unknown/{family}@sha256:{rng.getrandbits(64):016x}"
                 if fault and fault.name == "unauthorized_image"
                 else f"{ALLOWED_IMAGE_PREFIX}{family}@sha256:{seed:08x}")
        out.append(RunPlan(run_id=run_id, index=i, family=family, team=team,
                           node=f"gpu-node-{i % nodes:03d}",
                           dataset_uri=f"s3://lake/{team}/{family}/{run_id}",
                           image=image, fault=fault,
                           gpus=tuple(((i // nodes) * width + g) % GPUS_PER_NODE
                                      for g in range(width))))
    return out


class RunModel:
    """The planned behaviour of one run; :meth:`advance` yields its due actions."""

    def __init__(self, plan: RunPlan, seed: int, start_ms: int, duration_ms: int) -> None:
        """Lay out the run.

        Args:
            plan: Identity and placement.
            seed: Cluster seed (combined with the run index).
            start_ms: Virtual start of the simulation.
            duration_ms: Virtual length of the simulation (runs finish then).

        """
        self.plan = plan
        self.fault = plan.fault
        self.strength = plan.fault.strength if plan.fault else 1.0
        self.rng = random.Random(seed * 1_000_003 + plan.index)  # noqa: S311
        self.end_ms = start_ms + duration_ms
        self.queued_ms = start_ms + 3_000 * plan.index
        name = self.fault.name if self.fault else ""
        self.deadline_ms = QUEUE_DEADLINE_MS if name == "queue_deadline" else DEADLINE_MS
        delay = (int(self.deadline_ms * self.strength) if name == "queue_deadline"
                 else self.rng.randrange(5_000, 30_000))
        self.start_ms = self.queued_ms + delay
        at = int((self.fault.at_s if self.fault else 0) * 1000)
        self.fault_ms: int | None = None
        if self.fault is not None:
            self.fault_ms = (self.queued_ms + self.deadline_ms if name == "queue_deadline"
                             else self.start_ms + at)
        self.step = 0
        self.t_ms = self.start_ms + 1
        self.acc = 0.5
        self.best_acc = 0.5
        self.batch = BATCH
        self.restarts = 0
        self.partition = 0
        self.ckpts_since_fault = 0
        self.finished = False
        self._gone = False
        self._seq = 0
        self._heap: list[tuple[int, int, Action]] = []
        # JobEvent.deadline_ms is absolute: the epoch ms by which the job must start
        self._push(Action(self.queued_ms, "job", {"state": "queued", "deadline_ms":
                                                  self.queued_ms + self.deadline_ms}))
        self._push(Action(self.start_ms, "job", {"state": "scheduled", "allocation": True}))
        self._push(Action(self.start_ms + 1, "start"))
        self._push(Action(self.start_ms + 2, "data", self._batch()))
        if self.fault_ms is not None:
            self._push(Action(self.fault_ms, "fault", {"scenario": name}))
            if name == "failed_gate":
                self._push(Action(self.fault_ms + 1, "gate", self._gate(False)))
            if name == "restarts":
                for k in range(3):
                    self._push(Action(self.fault_ms + k * 60_000, "restart", {}))
        self._push(Action(self.start_ms + 2 + DATA_EVERY_MS, "data_tick"))
        self._push(Action(self.t_ms, "step_tick"))
        self._push(Action(self.end_ms, "end"))

    # ------------------------------------------------------------------ state
    def _push(self, a: Action) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (a.at_ms, self._seq, a))

    def faulted(self, at_ms: int, name: str) -> bool:
        """Whether ``name`` is this run's fault and has set in by ``at_ms``."""
        return (self.fault is not None and self.fault.name == name and self.fault_ms is not None
                and at_ms >= self.fault_ms)

    def _since_fault_s(self, at_ms: int) -> float:
        return max(at_ms - (self.fault_ms or at_ms), 0) / 1000.0

    def gpu_util(self, at_ms: int) -> float:
        """Return the utilization (percent) of this run's GPUs at ``at_ms``."""
        base = 92.0 + self.rng.uniform(-1.5, 1.5)
        if self.faulted(at_ms, "gpu_occupancy"):
            base -= min(60.0, 0.25 * self.strength * self._since_fault_s(at_ms))
        return base

    @staticmethod
    def sm_occupancy(util_pct: float) -> float:
        """Return the SM occupancy (percent, what NVML GPM reports) at a utilization.

        Busy kernels keep about 70 % of the theoretical warps resident; a GPU
        starved of work (the ``gpu_occupancy`` fault lowers utilization) loses
        occupancy in proportion. No random draws: the seed's sequence is unchanged.
        """
        return max(util_pct, 0.0) * SM_OCCUPANCY_PER_UTIL

    # ---------------------------------------------------------------- actions
    def advance(self, until_ms: int) -> list[Action]:
        """Return every action due at or before ``until_ms``, in time order."""
        out: list[Action] = []
        while self._heap and self._heap[0][0] <= until_ms and not self.finished:
            _, _, a = heapq.heappop(self._heap)
            if a.kind == "end" or (a.at_ms >= self.end_ms and not a.args.get("final")):
                self._finish_at(max(a.at_ms, self.end_ms))
                continue
            if a.kind == "step_tick":
                out.extend(self._step(a.at_ms))
            elif a.kind == "data_tick":
                out.append(Action(a.at_ms, "data", self._batch(a.at_ms)))
                self._push(Action(a.at_ms + DATA_EVERY_MS, "data_tick"))
            elif a.kind == "restart":
                out.extend(self._restart(a.at_ms))
            elif a.kind == "finish":
                out.append(a)
                self.finished = True
            else:
                out.append(a)
        return out

    def _finish_at(self, at_ms: int) -> None:
        self._heap.clear()
        nan = self.fault is not None and self.fault.name == "nan_loss"
        if not (self.fault and self.fault.name == "failed_gate"):
            self._push(Action(at_ms, "gate", {**self._gate(not nan), "final": True}))
        self._push(Action(at_ms + 1, "finish", {"status": "failed" if nan else "succeeded",
                                                "final": True}))

    def _gate(self, passed: bool) -> dict[str, Any]:
        return {"gate": "release-eval", "decision": "pass" if passed else "fail",
                "thresholds": {"accuracy": 0.8}, "measured": {"accuracy": round(self.acc, 4)},
                "reasons": () if passed else ("accuracy on slice 'night' below 0.8",)}

    def _restart(self, at_ms: int) -> list[Action]:
        self.restarts += 1
        self.batch = max(self.batch - 64, 64)
        return [Action(at_ms, "job", {"state": "retrying", "reason": "worker lost (OOM)"}),
                Action(at_ms + 500, "rejoin", {})]

    def _step(self, at_ms: int) -> list[Action]:
        rng, i = self.rng, self.step
        loader = LOADER_MS + rng.uniform(-15, 15)
        if self.faulted(at_ms, "loader_slowdown"):
            loader += 4.0 * self.strength * (
                self._since_fault_s(at_ms) / 2.0)
        compute = STEP_COMPUTE_MS + rng.uniform(-40, 40)
        step_ms = loader + compute
        loss = 2.5 * math.exp(-i / 400.0) + 0.4 + rng.uniform(-0.02, 0.02)
        if self.faulted(at_ms, "nan_loss"):
            loss = math.nan
        sigma = 0.05
        if self.faulted(at_ms, "grad_variance"):
            strength = self.fault.strength if self.fault else 1.0
            sigma += 0.02 * strength * self._since_fault_s(at_ms)
        grad = 1.0 + abs(rng.gauss(0.0, sigma))
        out = [Action(at_ms, "step", {"step": i, "loss": loss, "grad_norm": grad, "lr": 3e-4,
                                      "samples": self.batch, "step_ms": step_ms,
                                      "loader_wait_ms": loader,
                                      "effective_batch_size": self.batch,
                                      "worker_restarts": self.restarts})]
        nxt = at_ms + int(step_ms)
        if i % VAL_EVERY == VAL_EVERY - 1:
            out.append(Action(at_ms + 1, "validation", {"step": i, "metrics":
                                                        self._validate(at_ms)}))
        if i % CKPT_EVERY == CKPT_EVERY - 1:
            dur = self._ckpt_ms(at_ms)
            corrupt = self.faulted(at_ms, "checkpoint_corrupt") and self.ckpts_since_fault == 0
            if self.fault_ms is not None and at_ms >= self.fault_ms:
                self.ckpts_since_fault += 1
            out.append(Action(at_ms + 2, "checkpoint", {"step": i, "duration_ms": dur,
                                                        "corrupt": corrupt}))
            nxt += int(dur)
        self.step += 1
        self._push(Action(nxt, "step_tick"))
        return out

    def _ckpt_ms(self, at_ms: int) -> float:
        dur = CKPT_MS + self.rng.uniform(-100, 100)
        if self.faulted(at_ms, "checkpoint_share"):
            grow = 1.0 + self.strength
            dur *= min(grow ** (self.ckpts_since_fault + 1), 120.0)
        return dur

    def _validate(self, at_ms: int) -> dict[str, float]:
        declining = any(self.faulted(at_ms - 30_000, n)
                        for n in ("label_shift", "feature_shift", "restarts"))
        if declining:
            self.acc -= 0.03 * self.strength
        else:
            self.acc = min(self.acc + 0.01 + self.rng.uniform(0, 0.004), 0.92)
        return {"accuracy": round(self.acc, 5), "val_loss": round(1.5 - self.acc, 5)}

    def _batch(self, at_ms: int | None = None) -> dict[str, Any]:
        """Describe the next data batch (the driver materialises it)."""
        at = self.start_ms if at_ms is None else at_ms
        self.partition += 1
        labels = [0.25, 0.25, 0.25, 0.25]
        shift = 0.0
        rows = 1000
        rejected = 0.01 + self.rng.uniform(-0.002, 0.002)
        if self.faulted(at, "label_shift"):
            labels = [0.55, 0.25, 0.15, 0.05]
        if self.faulted(at, "feature_shift"):
            shift = 1.5 * self.strength
        if self.faulted(at, "partition_missing") and not self._gone:
            rows = 0
            self._gone = True
        if self.faulted(at, "rejected_samples"):
            rejected += 0.05 * self.strength * (
                1 + self._since_fault_s(at) / 60.0)
        return {"partition": f"part={self.partition:05d}", "rows": rows, "labels": labels,
                "shift": shift, "rejected_rate": min(rejected, 0.9),
                "seed": self.rng.getrandbits(32)}
