"""The cluster model: what each simulated run does, as planned actions (pure).

Size: the seeded run model's planned actions, one short planner per workload kind.

A :class:`RunModel` is a seeded, deterministic description of one training
run — scheduler queueing, a model-loading phase, step timings, loss and
validation curves, checkpoints, release gate — and of the data pipelines of
the datasets it owns (a dataset shared by several runs has one pipeline,
driven by its first run), with at most one injected
:class:`~runwatch.sim.scenarios.Scenario` and the scenario's
:class:`~runwatch.sim.scenarios.Workload`. :meth:`RunModel.advance` returns
the :class:`Action` objects due up to a virtual instant; the drivers turn them
into SDK, data-report, agent and scheduler-hook calls. No I/O, no clock.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

from runwatch.sim.scenarios import (
    ALLOWED_IMAGE_PREFIX,
    DATA_STALL_S,
    PLAIN,
    RESUME_S,
    Scenario,
    Workload,
)

FAMILIES: tuple[tuple[str, str], ...] = (
    ("llm-pretrain", "foundation"), ("vision-cls", "perception"), ("speech-asr", "audio"),
    ("recsys-ranker", "ads"), ("llm-sft", "foundation"),
)
LABELS: tuple[str, ...] = ("cat", "dog", "car", "boat")
GPUS_PER_NODE = 8
STEP_COMPUTE_MS = 1800.0
VAL_EVERY = 20
CKPT_EVERY = 30
CKPT_MS = 1500.0
#: Seconds a checkpoint grows by, per checkpoint, once ``checkpoint_share`` sets in.
CKPT_GROWTH_MS = 4000.0
DATA_EVERY_MS = 60_000
DEADLINE_MS = 1_800_000
QUEUE_DEADLINE_MS = 300_000
BATCH = 256
SM_OCCUPANCY_PER_UTIL = 0.7
#: GPU utilization (percent) while a run loads its model: weights are copied, kernels idle.
LOADING_UTIL = 10.0
#: GPU utilization (percent) during an evaluation phase: small batches, host-side metrics.
EVAL_UTIL = 30.0
#: Validation plateau of a run whose validation is noisy but stationary.
PLATEAU_ACC = 0.80
#: Share of rows that stop conforming to the schema in ``schema_failures``.
SCHEMA_BAD_SHARE = 0.05
#: Version of a weekly-snapshot dataset.
SNAPSHOT_VERSION = "2026-w48"
#: Data faults: injected into the batches of the pipeline's dataset.
DATA_EFFECTS = frozenset({"label_shift", "feature_shift", "partition_missing",
                          "rejected_samples", "schema_failures"})


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a run does at a virtual instant.

    Attributes:
        at_ms: Virtual time it is due.
        kind: ``job`` (scheduler hook), ``start``, ``step``, ``validation``,
            ``checkpoint``, ``data`` (a pipeline's report), ``rejoin``,
            ``gate``, ``register`` (a registry push), ``fault`` (the injection
            marker) or ``finish``.
        args: Keyword arguments for the driver.

    """

    at_ms: int
    kind: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """Identity and placement of one run.

    Attributes:
        run_id: Run id.
        index: Position in the cluster.
        family: Experiment family.
        team: Owning team.
        node: Node the run is placed on.
        dataset_uri: The run's (first) training dataset.
        image: Container image digest; None for a script outside a container.
        fault: The injected scenario (a control's scenario for a control run), if any.
        gpus: GPU indices on the node.
        datasets: Every dataset the run trains on.
        pipelines: Datasets whose pipeline this run's model drives (a shared
            dataset's pipeline belongs to its first run).

    """

    run_id: str
    index: int
    family: str
    team: str
    node: str
    dataset_uri: str
    image: str | None
    fault: Scenario | None
    gpus: tuple[int, ...] = tuple(range(GPUS_PER_NODE))
    datasets: tuple[str, ...] = ()
    pipelines: tuple[str, ...] = ()

    @property
    def workload(self) -> Workload:
        """The run's workload (a plain job without a scenario)."""
        return self.fault.workload if self.fault is not None else PLAIN

    @property
    def version(self) -> str:
        """Version of the run's datasets (a weekly snapshot is versioned by its week)."""
        return SNAPSHOT_VERSION if self.workload.snapshot_lag_s is not None else "v1"

    @property
    def control(self) -> bool:
        """Whether no fault is injected (a plain healthy run or a control scenario)."""
        return self.fault is None or self.fault.control


def plan_cluster(seed: int, nodes: int, runs: int, faults: list[Scenario],
                 prefix: str = "sim") -> list[RunPlan]:
    """Place ``runs`` healthy runs plus the runs of every scenario on ``nodes`` nodes.

    Runs are assigned round-robin to nodes (runs sharing a node split its 8
    GPUs); the first healthy run is the control. A scenario whose workload
    has several runs gets that many, sharing its datasets. Names are derived
    from the seed, so the same arguments always give the same cluster.

    Args:
        seed: Random seed.
        nodes: Node count (>= 1; more runs than nodes share nodes' GPUs in turn).
        runs: Healthy runs (>= 1: the control).
        faults: Scenarios (faults and controls), each with its workload's runs.
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
    kinds: list[tuple[Scenario | None, int]] = [(None, 0)] * runs
    for f in faults:
        kinds.extend((f, k) for k in range(max(f.workload.runs, 1)))
    per_node = -(-len(kinds) // nodes)
    width = max(GPUS_PER_NODE // per_node, 1)
    shared: dict[str, tuple[str, ...]] = {}
    for i, (fault, member) in enumerate(kinds):
        family, team = FAMILIES[rng.randrange(len(FAMILIES))]
        if fault is not None and fault.workload.family is not None:  # an SLO scenario's own
            family, team = fault.workload.family
        tag = fault.name if fault else ("control" if i == 0 else "healthy")
        if fault is not None and fault.workload.runs > 1:
            tag = f"{tag}{member + 1}"
        run_id = f"{prefix}-{i:03d}-{tag}"
        wl = fault.workload if fault else PLAIN
        digest = f"{rng.getrandbits(64):016x}"
        image = {"foreign": f"docker.io/unknown/{family}@sha256:{digest}",
                 "none": None}.get(wl.image, f"{ALLOWED_IMAGE_PREFIX}{family}@sha256:{seed:08x}")
        datasets: tuple[str, ...]
        pipelines: tuple[str, ...]
        if member and fault is not None:  # a later run of a group shares the first one's data
            datasets, pipelines = shared[fault.name], ()
        else:
            datasets = tuple(f"s3://lake/{team}/{family}/{run_id}" + (f"/d{d}" if d else "")
                             for d in range(max(wl.datasets, 1)))
            pipelines = datasets
            if fault is not None:
                shared[fault.name] = datasets
        out.append(RunPlan(run_id=run_id, index=i, family=family, team=team,
                           node=f"gpu-node-{i % nodes:03d}", dataset_uri=datasets[0],
                           image=image, fault=fault,
                           gpus=tuple(((i // nodes) * width + g) % GPUS_PER_NODE
                                      for g in range(width)),
                           datasets=datasets, pipelines=pipelines))
    return out


class RunModel:
    """The planned behaviour of one run; :meth:`advance` yields its due actions."""

    def __init__(self, plan: RunPlan, seed: int, start_ms: int, duration_ms: int) -> None:
        """Lay out the run.

        Args:
            plan: Identity and placement.
            seed: Cluster seed (combined with the run index).
            start_ms: Virtual start of the simulation (pipelines report from then on).
            duration_ms: Virtual length of the simulation (runs finish then).

        """
        self.plan = plan
        self.wl = plan.workload
        self.fault = plan.fault if plan.fault is not None and not plan.fault.control else None
        self.effect = self.fault.kind if self.fault else ""
        self.strength = self.fault.strength if self.fault else 1.0
        self.rng = random.Random(seed * 1_000_003 + plan.index)  # noqa: S311
        # the GPUs' jitter has its own sequence: how often the node agents read
        # them must not change the run's steps, losses and validations
        self.gpu_rng = random.Random(~(seed * 1_000_003 + plan.index))  # noqa: S311
        self.end_ms = start_ms + duration_ms
        self.queued_ms = start_ms + 3_000 * plan.index + int(self.wl.queue_s * 1000)
        self.deadline_ms = QUEUE_DEADLINE_MS if self.effect == "queue_deadline" else DEADLINE_MS
        delay = (int(self.deadline_ms * self.strength) if self.effect == "queue_deadline"
                 else self.rng.randrange(5_000, 30_000))
        self.start_ms = self.queued_ms + delay
        self.train_ms = self.start_ms + 1 + int(self.wl.loading_s * 1000)
        at = int((self.fault.at_s if self.fault else 0) * 1000)
        self.fault_ms: int | None = None
        if self.fault is not None:
            self.fault_ms = self.train_ms + at
            if self.effect == "queue_deadline":
                self.fault_ms = self.queued_ms + self.deadline_ms
            elif self.effect == "unauthorized_image":  # there from ``runwatch.init`` on
                self.fault_ms = self.start_ms + 1 + at
        self.step = 0
        self.t_ms = self.train_ms
        self.acc = 0.5
        self.batch = BATCH
        self.restarts = 0
        self.restarts_told = 0  # restarts already reported (StepTiming counts new ones)
        self.partition: dict[str, int] = {}
        self.gone: set[str] = set()
        self.ckpts_since_fault = 0
        self.restart_step: int | None = None
        every = self.wl.eval_every_s
        self.next_eval_ms = self.train_ms + int(every * 1000) if every else None
        self.evals: list[tuple[int, int]] = []  # (start, end) of evaluation phases
        self.finished = False
        self._seq = 0
        self._heap: list[tuple[int, int, Action]] = []
        # JobEvent.deadline_ms is absolute: the epoch ms by which the job must start
        self._push(Action(self.queued_ms, "job", {"state": "queued", "deadline_ms":
                                                  self.queued_ms + self.deadline_ms}))
        self._push(Action(self.start_ms, "job", {"state": "scheduled", "allocation": True}))
        self._push(Action(self.start_ms + 1, "start"))
        if self.fault_ms is not None:
            self._push(Action(self.fault_ms, "fault", {"scenario": plan.fault.name
                                                       if plan.fault else ""}))
            if self.effect == "failed_gate":
                self._push(Action(self.fault_ms + 1, "gate", self._gate(False)))
            if self.effect == "restarts":
                for k in range(3):
                    self._push(Action(self.fault_ms + k * 60_000, "restart", {}))
        self.paused_until = 0
        wl = self.wl
        if wl.train_s is not None:
            self._push(Action(self.train_ms + int(wl.train_s * 1000), "end", {"early": True}))
        if wl.register_s is not None:
            at_reg = self.train_ms + int(wl.register_s * 1000)
            if self.effect != "ungated_push":
                self._push(Action(at_reg - 1000, "gate", self._gate(True)))
            self._push(Action(at_reg, "register"))
        if wl.preempt_s is not None:
            self._push(Action(self.train_ms + int(wl.preempt_s * 1000), "preempt"))
        for d, uri in enumerate(plan.pipelines):
            self._push(Action(start_ms + 2 + 7_000 * d, "data_tick", {"dataset": uri}))
        self._push(Action(self.t_ms, "step_tick"))
        self._push(Action(self.end_ms, "end"))

    # ------------------------------------------------------------------ state
    def _push(self, a: Action) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (a.at_ms, self._seq, a))

    def faulted(self, at_ms: int, name: str) -> bool:
        """Whether ``name`` is this run's fault effect and has set in by ``at_ms``."""
        return self.effect == name and self.fault_ms is not None and at_ms >= self.fault_ms

    def _since_fault_s(self, at_ms: int) -> float:
        return max(at_ms - (self.fault_ms or at_ms), 0) / 1000.0

    def gpu_util(self, at_ms: int) -> float:
        """Return the utilization (percent) of this run's GPUs at ``at_ms``.

        While the model loads (before the first step) the GPUs hold memory but
        run few kernels: about :data:`LOADING_UTIL` percent.
        """
        if at_ms < self.train_ms:
            return LOADING_UTIL + self.gpu_rng.uniform(-3.0, 3.0)
        if any(a <= at_ms < b for a, b in self.evals):
            return EVAL_UTIL + self.gpu_rng.uniform(-3.0, 3.0)
        base = 92.0 + self.gpu_rng.uniform(-1.5, 1.5)
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
                early = a.args.get("early") and a.at_ms < self.end_ms
                self._finish_at(a.at_ms if early else max(a.at_ms, self.end_ms))
                continue
            if a.kind == "step_tick" and a.at_ms < self.paused_until:  # preempted: resumes
                self._push(Action(self.paused_until, "step_tick"))
            elif a.kind == "step_tick":
                out.extend(self._step(a.at_ms))
            elif a.kind == "data_tick":
                uri = a.args["dataset"]
                if self._reports(a.at_ms):
                    out.append(Action(a.at_ms, "data", self._batch(uri, a.at_ms)))
                self._push(Action(a.at_ms + DATA_EVERY_MS, "data_tick", {"dataset": uri}))
            elif a.kind == "preempt":
                self.paused_until = a.at_ms + int(RESUME_S * 1000)
                out.append(Action(a.at_ms, "job", {"state": "preempted",
                                                   "reason": "preempted by the scheduler"}))
                self._push(Action(self.paused_until, "rejoin",
                                  {"reason": "resumed after preemption"}))
            elif a.kind == "restart":
                out.extend(self._restart(a.at_ms))
            elif a.kind == "finish":
                out.append(a)
                self.finished = True
            else:
                out.append(a)
        return out

    def _reports(self, at_ms: int) -> bool:
        """Whether a pipeline reports at ``at_ms`` (``data_late`` stalls, ``data_missing`` ends)."""
        if self.faulted(at_ms, "data_missing"):
            return False
        return not (self.faulted(at_ms, "data_late")
                    and at_ms < (self.fault_ms or 0) + int(DATA_STALL_S * 1000))

    def _finish_at(self, at_ms: int) -> None:
        self._heap.clear()
        nan = self.effect == "nan_loss"
        if self.effect != "failed_gate":
            self._push(Action(at_ms, "gate", {**self._gate(not nan), "final": True}))
        self._push(Action(at_ms + 1, "finish", {"status": "failed" if nan else "succeeded",
                                                "final": True}))

    def _gate(self, passed: bool) -> dict[str, Any]:
        return {"gate": "release-eval", "decision": "pass" if passed else "fail",
                "thresholds": {"accuracy": 0.8 if passed else 0.95},
                "measured": {"accuracy": round(self.acc, 4)},
                "reasons": () if passed else ("accuracy on slice 'night' below 0.95",)}

    def _restart(self, at_ms: int) -> list[Action]:
        self.restarts += 1
        self.batch = max(self.batch - 64, 64)
        return [Action(at_ms, "job", {"state": "retrying", "reason": "worker lost (OOM)"}),
                Action(at_ms + 500, "rejoin", {})]

    def _lr(self, at_ms: int) -> tuple[float, int | None]:
        """Learning rate and steps since a warm restart (None: no restart yet)."""
        restart = self.wl.lr_restart_s
        if restart is not None and at_ms >= self.train_ms + int(restart * 1000):
            if self.restart_step is None:
                self.restart_step = self.step
            k = self.step - self.restart_step
            return 3e-4 * (0.5 + 0.5 * math.cos(math.pi * min(k / 600.0, 1.0))), k
        # a run that restarts decays over a short first cycle (SGDR); others over a long one
        cycle = 200.0 if restart is not None else 1200.0
        return 3e-4 * (0.5 + 0.5 * math.cos(math.pi * min(self.step / cycle, 1.0))), None

    def _step(self, at_ms: int) -> list[Action]:
        rng, i = self.rng, self.step
        usual = self.wl.loader_ms
        loader = usual * (1.0 + rng.uniform(-0.1, 0.1))
        if self.faulted(at_ms, "loader_slowdown"):
            loader += 2.0 * self.strength * self._since_fault_s(at_ms)
        compute = STEP_COMPUTE_MS + rng.uniform(-40, 40)
        step_ms = loader + compute
        lr, since_restart = self._lr(at_ms)
        loss = 2.5 * math.exp(-i / 400.0) + 0.4 + rng.uniform(-0.02, 0.02)
        sigma = 0.05
        if since_restart is not None:  # a warm restart: the loss jumps, then falls again
            loss += 0.6 * math.exp(-since_restart / 80.0)
            sigma += 0.1 * math.exp(-since_restart / 40.0)
        if self.faulted(at_ms, "nan_loss"):
            loss = math.nan
        if self.faulted(at_ms, "grad_variance"):
            sigma += 0.02 * self.strength * self._since_fault_s(at_ms)
        grad = 1.0 + abs(rng.gauss(0.0, sigma))
        out = [Action(at_ms, "step", {"step": i, "loss": loss, "grad_norm": grad,
                                      "lr": round(lr, 9), "samples": self.batch,
                                      "step_ms": step_ms, "loader_wait_ms": loader,
                                      "effective_batch_size": self.batch,
                                      "worker_restarts": self.restarts - self.restarts_told})]
        self.restarts_told = self.restarts  # the record's contract: since the previous step
        nxt = at_ms + int(step_ms)
        if i % VAL_EVERY == VAL_EVERY - 1:
            out.append(Action(at_ms + 1, "validation", {"step": i, "metrics":
                                                        self._validate(at_ms)}))
        if i % CKPT_EVERY == CKPT_EVERY - 1 and self.effect != "preemption_far":
            if self.fault_ms is not None and at_ms >= self.fault_ms:
                self.ckpts_since_fault += 1
            dur = self._ckpt_ms(at_ms)
            corrupt = self.faulted(at_ms, "checkpoint_corrupt") and self.ckpts_since_fault == 1
            out.append(Action(at_ms + 2, "checkpoint", {"step": i, "duration_ms": dur,
                                                        "corrupt": corrupt}))
            nxt += int(dur)
        if self.next_eval_ms is not None and nxt >= self.next_eval_ms:
            end = nxt + int(self.wl.eval_s * 1000)
            self.evals.append((nxt, end))
            out.append(Action(end, "validation", {"step": i, "metrics": self._validate(end)}))
            self.next_eval_ms = end + int((self.wl.eval_every_s or 0) * 1000)
            nxt = end + 1
        self.step += 1
        self._push(Action(nxt, "step_tick"))
        return out

    def _ckpt_ms(self, at_ms: int) -> float:
        """A checkpoint's duration; ``checkpoint_share`` makes each one longer than the last."""
        dur = CKPT_MS + self.rng.uniform(-100, 100)
        if self.faulted(at_ms, "checkpoint_share"):
            dur += CKPT_GROWTH_MS * self.strength * self.ckpts_since_fault
        return dur

    def _validate(self, at_ms: int) -> dict[str, float]:
        if self.wl.val_noise > 0:  # converged: a plateau seen through a small validation set
            acc = PLATEAU_ACC + self.rng.gauss(0.0, self.wl.val_noise)
            self.acc = acc
            return {"accuracy": round(acc, 5), "val_loss": round(1.5 - acc, 5)}
        declining = any(self.faulted(at_ms - 30_000, n)
                        for n in ("label_shift", "feature_shift", "restarts"))
        restart = self.restart_step is not None and self.step - self.restart_step < 120
        if declining:
            self.acc -= 0.03 * self.strength
        elif not restart:  # right after a warm restart accuracy holds, then improves again
            self.acc = min(self.acc + 0.01 + self.rng.uniform(0, 0.004), 0.92)
        return {"accuracy": round(self.acc, 5), "val_loss": round(1.5 - self.acc, 5)}

    def _batch(self, uri: str, at_ms: int) -> dict[str, Any]:
        """Describe the next batch of a pipeline's dataset (the driver materialises it)."""
        n = self.partition[uri] = self.partition.get(uri, 0) + 1
        labels = [0.25, 0.25, 0.25, 0.25]
        shift = 0.0
        rows = 1000
        rejected = 0.01 + self.rng.uniform(-0.002, 0.002)
        bad = 0.0
        if self.faulted(at_ms, "label_shift"):
            labels = [0.55, 0.25, 0.15, 0.05]
        if self.faulted(at_ms, "feature_shift"):
            shift = 1.5 * self.strength
        if self.faulted(at_ms, "partition_missing") and uri not in self.gone:
            rows = 0
            self.gone.add(uri)
        if self.faulted(at_ms, "rejected_samples"):
            rejected += 0.05 * self.strength * (1 + self._since_fault_s(at_ms) / 60.0)
        if self.faulted(at_ms, "schema_failures"):
            bad = SCHEMA_BAD_SHARE * self.strength
        lag = self.wl.snapshot_lag_s
        return {"dataset": uri, "version": self.plan.version,
                "partition": f"part={n:05d}", "rows": rows, "labels": labels,
                "shift": shift, "rejected_rate": min(rejected, 0.9), "bad_share": min(bad, 1.0),
                "snapshot_ms": (self.queued_ms - int(lag * 1000)) if lag is not None else None,
                "seed": self.rng.getrandbits(32)}
