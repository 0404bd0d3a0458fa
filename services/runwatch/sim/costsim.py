"""Cost and capacity scenarios with known ground truth, played through the real producers.

Each :class:`CostScenario` is a small cluster of runs over a few virtual hours
with one waste cause or one bottleneck injected in known GPU-hours
(``injected``), and the bottleneck ``runwatch capacity`` must name first. They
publish what real producers publish: the scheduler hook's job events through
``runwatch.client.emit`` (queued, running with the allocation), the training
script through ``runwatch.init`` and the run's methods with explicit times
(steps with their loader wait, checkpoints, the artifact, finish), and every
node's NodeSamples through the node agent over the NVML double. The figures
the scenarios inject are in docs/cost.md; tests print them next to what
``runwatch cost`` and ``runwatch capacity`` report.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from runwatch.adapters.publisher import Publisher
from runwatch.client.emit import emit_records
from runwatch.sim.drivers import GIB, SimNode, make_node

TICK_S = 30
MIN = 60


@dataclass(frozen=True, slots=True)
class SimRun:
    """One simulated job (times in virtual seconds from the scenario's start)."""

    run_id: str
    family: str
    node: str
    start_s: int
    end_s: int
    util: float = 80.0
    team: str = "core"
    gpus: tuple[int, ...] = tuple(range(8))
    used: tuple[int, ...] | None = None
    queued_s: int | None = None
    outcome: str = "succeeded"
    loader_ms: float = 150.0
    compute_ms: float = 1800.0
    ckpt_every_s: int | None = 600
    ckpt_ms: float = 20_000.0
    ckpt_ok_until_s: int | None = None
    artifact: bool = True
    stall: tuple[int, int] | None = None
    slow: tuple[int, int, float, float] | None = None
    #: (start_s, end_s, extra compute ms a step): a slow interconnect (all-reduce)
    compute_slow: tuple[int, int, float] | None = None
    gpu_model: str = "H100"
    queue: str = "batch"
    priority_class: str = "standard"


@dataclass(frozen=True, slots=True)
class CostScenario:
    """A cluster of runs, what was injected (GPU-hours by cause) and the expected bottleneck."""

    name: str
    title: str
    nodes: tuple[str, ...]
    runs: tuple[SimRun, ...]
    injected: dict[str, float]
    bottleneck: str | None = None
    duration_s: int = 120 * MIN
    gaps: dict[str, tuple[int, int]] = field(default_factory=dict)
    skew_s: dict[str, int] = field(default_factory=dict)


def _llm(i: int, node: str, **kw: Any) -> SimRun:
    return SimRun(f"llm-{i}", "llm-pretrain", node, 0, 120 * MIN, **kw)


_BASE = tuple(_llm(i, f"n{i}") for i in range(3))
_RECSYS = tuple(SimRun(f"rec-{i}", "recsys-ranker", f"n{8 + i}", 0, 120 * MIN, util=45.0,
                       loader_ms=1200.0, team="ads") for i in range(3))

#: Waste: every cause at once on its own run, with healthy runs of two families.
WASTE = CostScenario(
    "waste_mix", "each waste cause on its own run; healthy compute- and input-bound families",
    tuple(f"n{i}" for i in range(11)),
    (*_BASE,
     _llm(3, "n3", used=(0, 1, 2, 3)),
     _llm(4, "n4", util=30.0),
     SimRun("llm-5", "llm-pretrain", "n5", 0, 100 * MIN, outcome="failed",
            ckpt_ok_until_s=60 * MIN),
     SimRun("llm-6", "llm-pretrain", "n6", 0, 50 * MIN, outcome="cancelled", ckpt_every_s=None,
            artifact=False),
     _llm(7, "n7", stall=(40 * MIN, 70 * MIN)),
     *_RECSYS),
    {"idle": 4 * 2.0, "below_baseline": 8 * 2.0 * (1 - 30 / 80), "work_lost": 8 * 40 / 60,
     "no_artifact": 8 * 50 / 60, "stalled": 8 * 30 / 60},
)

SUPPLY = CostScenario(
    "supply_crunch", "every GPU busy while a job waits an hour", ("n0", "n1"),
    (_llm(0, "n0"), SimRun("llm-1", "llm-pretrain", "n1", 0, 70 * MIN),
     SimRun("llm-2", "llm-pretrain", "n1", 70 * MIN, 120 * MIN, queued_s=10 * MIN)),
    {"accelerator_supply": 8 * 1.0}, "accelerator_supply")

FRAGMENTATION = CostScenario(
    "scheduler_fragmentation", "8 GPUs free, 4 on each node, while an 8-GPU job waits an hour",
    ("n0", "n1"),
    (_llm(0, "n0", gpus=(0, 1, 2, 3)),
     SimRun("llm-1", "llm-pretrain", "n1", 0, 70 * MIN, gpus=(0, 1, 2, 3)),
     SimRun("llm-2", "llm-pretrain", "n1", 70 * MIN, 120 * MIN, queued_s=10 * MIN)),
    {"scheduler_policy": 8 * 1.0}, "scheduler_policy")

STORAGE = CostScenario(
    "storage_contention", "shared storage slows the loaders (+3 s a step) and checkpoints "
    "(+60 s) of four runs for 30 minutes", ("n0", "n1", "n2", "n3"),
    tuple(_llm(i, f"n{i}", slow=(30 * MIN, 60 * MIN, 3000.0, 60_000.0)) for i in range(4)),
    # 60 steps x 3 s + 3 checkpoints x 60 s, on 8 GPUs, for each of 4 runs.
    {"distributed_storage": 4 * 8 * (60 * 3.0 + 3 * 60.0) / 3600}, "distributed_storage")

NETWORK = CostScenario(
    "network_fabric", "the interconnect degrades: the all-reduce adds 10.8 s of compute to each "
    "step (loaders unchanged) of four runs on four nodes for 30 minutes",
    ("n0", "n1", "n2", "n3"),
    # The rule counts a 5-minute bucket whose mean compute a step is over 1.5 x the run's median
    # (1.8 s): a bucket with one slowed step of ten needs over 9 s more, so 10.8 s is counted
    # wherever the scenario's start falls against the buckets (docs/cost.md).
    tuple(_llm(i, f"n{i}", compute_slow=(30 * MIN, 60 * MIN, 10_800.0)) for i in range(4)),
    # 60 steps x 10.8 s, on 8 GPUs, for each of 4 runs.
    {"network_fabric": 4 * 8 * 60 * 10.8 / 3600}, "network_fabric")

MISCONFIGURED = CostScenario(
    "misconfigured_run", "one run at 30 % utilization in a family that runs at 80 %",
    ("n0", "n1", "n2", "n3"), (*_BASE, _llm(3, "n3", util=30.0)),
    {"workload_configuration": 8 * 2.0 * (1 - 30 / 80)}, "workload_configuration")

BAD_INPUT = CostScenario(
    "bad_input", "an unknown GPU model, a model without a price in effect, a 30-minute "
    "telemetry gap and a node clock 10 minutes ahead", ("n0", "n1", "n2", "n3"),
    (_llm(0, "n0", gpu_model="Z9"), _llm(1, "n1", gpu_model="A100"), _llm(2, "n2"),
     _llm(3, "n3")),
    {}, gaps={"n2": (30 * MIN, 60 * MIN)}, skew_s={"n3": 600})

SCENARIOS: dict[str, CostScenario] = {s.name: s for s in (WASTE, SUPPLY, FRAGMENTATION, STORAGE,
                                                          NETWORK, MISCONFIGURED, BAD_INPUT)}


class _Player:
    """Plays one scenario through the producers, in virtual time order."""

    def __init__(self, sc: CostScenario, transport: Any, start_ms: int,
                 topics: dict[str, str] | None) -> None:
        self.sc, self.transport, self.start_ms, self.topics = sc, transport, start_ms, topics
        self.now_ms = start_ms
        self.hook = Publisher(transport, kind="hook", topics=topics, clock=self.clock)
        self.agent_pub = Publisher(transport, kind="agent", topics=topics, clock=self.clock)
        self.nodes: dict[str, SimNode] = {n: make_node(n, self.agent_pub) for n in sc.nodes}
        self.sdk: dict[str, Any] = {}
        self.errors: list[str] = []

    def clock(self) -> int:
        return self.now_ms

    def at(self, s: float) -> int:
        return self.start_ms + int(s * 1000)

    def _hook(self, r: SimRun, state: str, alloc: bool = False) -> None:
        obj: dict[str, Any] = {"type": "job-state", "run_id": r.run_id, "state": state,
                               "attempt": 1, "team": r.team, "experiment_family": r.family,
                               "queue": r.queue, "priority_class": r.priority_class,
                               "emitted_at_ms": self.now_ms}
        if alloc:
            obj["allocation"] = {"nodes": [r.node], "gpu_indices": list(r.gpus),
                                 "gpu_model": r.gpu_model}
        res = emit_records(self.hook, [obj])
        self.errors.extend(str(e) for e in res.errors)

    def _start(self, r: SimRun) -> None:
        from runwatch.client import init
        from runwatch.core.records import Hardware

        self._hook(r, "running", alloc=True)
        self.sdk[r.run_id] = init(
            run_id=r.run_id, experiment_family=r.family, team=r.team, config={"lr": 3e-4},
            transport=self.transport, topics=self.topics, clock=self.clock, attempt=1,
            capture_lineage=False, install_hooks=False,
            lineage={"hardware": Hardware(nodes=(r.node,), gpu_count=len(r.gpus),
                                          gpu_model=r.gpu_model)})
        node = self.nodes[r.node]
        for g in (r.used if r.used is not None else r.gpus):
            pid = self._pid(r, g)
            node.attributor.pids[pid] = r.run_id
            node.nvml.attach_process(g, pid, 40 * GIB)

    def _pid(self, r: SimRun, g: int) -> int:
        return 300_000 + 16 * self.sc.runs.index(r) + g

    def _end(self, r: SimRun) -> None:
        run = self.sdk.pop(r.run_id)
        if r.artifact:
            run.artifact(f"s3://models/{r.run_id}/final", "model", sha256="0" * 64,
                         now_ms=self.now_ms)
        run.finish(r.outcome, timeout=10.0, now_ms=self.now_ms)
        node = self.nodes[r.node]
        for g in r.gpus:
            node.attributor.pids.pop(self._pid(r, g), None)
            node.nvml.processes[g] = []
            node.nvml.util.pop(g, None)

    def _in(self, span: tuple[int, int] | tuple[int, int, float, float] | None, t: int) -> bool:
        return span is not None and span[0] <= t < span[1]

    def _step(self, r: SimRun, i: int, t: int) -> None:
        if self._in(r.stall, t):
            return
        extra = r.slow[2] if r.slow is not None and self._in(r.slow, t) else 0.0
        loader = r.loader_ms + extra
        compute = r.compute_ms + (r.compute_slow[2] if r.compute_slow is not None
                                  and r.compute_slow[0] <= t < r.compute_slow[1] else 0.0)
        self.sdk[r.run_id].step(i, loss=4.0 / (1 + i / 100), samples=256, now_ms=self.now_ms,
                                step_ms=loader + compute, loader_wait_ms=loader)
        if r.ckpt_every_s and t > r.start_s and (t - r.start_s) % r.ckpt_every_s == 0:
            ok = r.ckpt_ok_until_s is None or t <= r.ckpt_ok_until_s
            dur = r.ckpt_ms + (r.slow[3] if r.slow is not None and self._in(r.slow, t) else 0.0)
            self.sdk[r.run_id].checkpoint(f"s3://ckpt/shared/{r.run_id}/step-{i:06d}", step=i,
                                          duration_ms=dur, outcome="ok" if ok else "failed",
                                          now_ms=self.now_ms)

    def _set_util(self, r: SimRun, t: int, rng: random.Random) -> None:
        node = self.nodes[r.node]
        stalled = self._in(r.stall, t)
        for g in (r.used if r.used is not None else r.gpus):
            node.nvml.util[g] = 0.0 if stalled else max(0.0, r.util + rng.uniform(-2.0, 2.0))

    def play(self) -> None:
        sc = self.sc
        rng = random.Random(sc.name)
        steps: dict[str, int] = {}
        for t in range(0, sc.duration_s + TICK_S, TICK_S):
            self.now_ms = self.at(t)
            for r in sc.runs:
                if r.queued_s == t:
                    self._hook(r, "queued")
                if r.end_s == t and r.run_id in self.sdk:
                    self._end(r)
                if r.start_s == t:
                    self._start(r)
                if r.start_s <= t < r.end_s and r.run_id in self.sdk:
                    steps[r.run_id] = steps.get(r.run_id, 0) + 1
                    self._step(r, steps[r.run_id], t)
                    self._set_util(r, t, rng)
            for name, node in self.nodes.items():
                if self._in(sc.gaps.get(name), t):
                    continue
                node.agent.tick(now_ms=self.at(t + sc.skew_s.get(name, 0)))
        self.transport.flush(30.0)


def play(sc: CostScenario, transport: Any, start_ms: int,
         topics: dict[str, str] | None = None) -> list[str]:
    """Play a scenario through the producers onto ``transport``; return the hook's errors.

    Args:
        sc: The scenario.
        transport: What every producer hands its records to (a Kafka transport, or a
            capture for the store-only tests).
        start_ms: Its virtual start (UTC epoch ms).
        topics: Topic overrides (logical name -> topic).

    """
    p = _Player(sc, transport, start_ms, topics)
    p.play()
    return p.errors

