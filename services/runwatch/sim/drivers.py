"""Drivers: turn planned actions into calls on the real producers, as users make them.

Telemetry leaves through the public entry points only: ``runwatch.init`` and
the returned run's methods (manifest, steps, validation, checkpoints with real
file digests and ``expected_sha256``, gates, finish), ``runwatch.client.data.report``
(a pipeline's batch as columns, a named baseline, no run id), ``runwatch.client.emit``
(scheduler hook job events) and the node agent over the NVML test double. No
record is built here. Every call passes its planned virtual time through the
producers' public time API (``now_ms=``, ``step_ms=``, ``loader_wait_ms=``;
``clock=`` for ``runwatch.init``, publishers get the virtual clock), so no
timestamp comes from the wall clock (it only marks, for the scoreboard, when a
run ended).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from runwatch.adapters.host import HostReading
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import Publisher
from runwatch.agent.service import NodeAgent, RunAttributor
from runwatch.client import data as sdk_data
from runwatch.client.emit import emit_records
from runwatch.core.records import DatasetRef, Hardware
from runwatch.sim.clock import VirtualClock
from runwatch.sim.model import GPUS_PER_NODE, LABELS, Action, RunModel, RunPlan
from runwatch.testing.nvml_double import FakeNvml8

logger = logging.getLogger(__name__)
GIB = 1 << 30


class SharedTransport:
    """One Kafka transport shared by every simulated producer; ``close`` only flushes."""

    def __init__(self, inner: Any) -> None:
        """Wrap a transport (``produce``/``flush``/``close``)."""
        self.inner = inner
        self.produced = 0

    def produce(self, topic: str, key: bytes | str | None, value: bytes) -> None:
        """Hand a record to the shared transport."""
        self.produced += 1
        self.inner.produce(topic, key, value)

    def flush(self, timeout: float = 10.0) -> int:
        """Flush the shared transport."""
        return int(self.inner.flush(timeout))

    def close(self, timeout: float = 10.0) -> Any:
        """Flush only: the simulator closes the shared transport once at the end."""
        self.inner.flush(timeout)
        return getattr(self.inner, "counters", None)


def sim_publisher(transport: Any, clock: VirtualClock, *, kind: str,
                  topics: dict[str, str] | None = None) -> Publisher:
    """A publisher stamping records with the virtual clock when a call gives no time."""
    return Publisher(transport, kind=kind, topics=topics, clock=clock.now_ms)


class SimNvml(FakeNvml8):
    """The NVML test double with utilization and SM occupancy (GPM) set by the cluster model.

    Unlike the plain double (GPU 7 power-capped, GPU 5 with corrected ECC
    errors), every simulated GPU is healthy unless a scenario says otherwise:
    throttling or ECC errors would be infrastructure evidence on every run.
    """

    def __init__(self, *, gpm: bool = True) -> None:
        """Create an 8-GPU double; every GPU idles until a run sets it.

        Args:
            gpm: Whether the GPUs report SM occupancy through NVML GPM.

        """
        super().__init__(gpus=GPUS_PER_NODE, gpm=gpm)
        self.util: dict[int, float] = {}

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:  # noqa: N802 - pynvml's name
        """Return the modelled utilization of one GPU."""
        i = self._h(h)
        gpu = self.util.get(i, 0.0)
        from types import SimpleNamespace

        return SimpleNamespace(gpu=int(round(gpu)), memory=int(gpu // 2))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:  # noqa: N802
        """No throttling."""
        self._h(h)
        return 0

    def nvmlDeviceGetTotalEccErrors(self, h: Any, kind: int, counter: int) -> int:  # noqa: N802
        """No ECC errors."""
        self._h(h)
        return 0


class SimHost:
    """Host figures of a simulated node (deterministic)."""

    def read(self) -> HostReading:
        """Return steady host figures."""
        return HostReading(cpu_pct=35.0, mem_used_bytes=180 * GIB, mem_total_bytes=1024 * GIB,
                           disk_read_bps=2.5e8, disk_write_bps=4e7, net_rx_bps=3e9,
                           net_tx_bps=3e9)


class SimAttributor(RunAttributor):
    """pid → run from the simulated scheduler (no /proc reads)."""

    def __init__(self) -> None:
        """Start with no processes."""
        super().__init__(proc_root=Path("/nonexistent"))
        self.pids: dict[int, str] = {}

    def run_of_pid(self, pid: int) -> str | None:
        """Return the run of a simulated training process."""
        return self.pids.get(pid)


@dataclasses.dataclass
class SimNode:
    """One simulated node: the NVML double, its agent and who runs on it."""

    name: str
    nvml: SimNvml
    attributor: SimAttributor
    agent: NodeAgent


def make_node(name: str, publisher: Publisher, *, gpm: bool = True) -> SimNode:
    """Build a node agent over the NVML double (with or without GPM SM occupancy)."""
    double = SimNvml(gpm=gpm)
    nvml = Nvml.open(double)
    if nvml is None:  # pragma: no cover - the double always initialises
        msg = "NVML double did not initialise"
        raise RuntimeError(msg)
    attr = SimAttributor()
    agent = NodeAgent(publisher, node=name, nvml=nvml, host=SimHost(),  # type: ignore[arg-type]
                      attributor=attr)
    return SimNode(name, double, attr, agent)


#: Column types every simulated pipeline checks its batches against.
SCHEMA: dict[str, str] = {"f_age": "float", "f_len": "float", "f_score": "float", "label": "str",
                          "ts": "int"}
WEEK_MS = 7 * 86_400_000


def make_batch(spec: dict[str, Any], now_ms: int) -> dict[str, list[Any]]:
    """Materialise a planned data batch as columns.

    ``ts`` holds the rows' event times: a few minutes old for a live
    pipeline, spread over the week before the snapshot for a weekly snapshot.
    A ``bad_share`` of the rows carries a string where ``f_age`` must be a float.
    """
    rng = np.random.default_rng(int(spec["seed"]))
    n = int(spec["rows"])
    shift = float(spec["shift"])
    snap = spec.get("snapshot_ms")
    ts = (snap - rng.uniform(0, WEEK_MS, n) if snap is not None
          else now_ms - rng.uniform(5_000, 180_000, n))
    age: list[Any] = (rng.normal(35.0 + 12.0 * shift, 12.0, n)).round(2).tolist()
    for i in range(int(round(n * float(spec.get("bad_share", 0.0))))):
        age[i] = "n/a"
    return {
        "f_age": age,
        "f_len": (rng.gamma(2.0, 50.0 * (1 + shift), n)).round(2).tolist(),
        "f_score": (rng.uniform(0.0, 1.0, n) + 0.3 * shift).round(4).tolist(),
        "label": rng.choice(np.array(LABELS), size=n, p=spec["labels"]).tolist(),
        "ts": [int(t) for t in ts],
    }


@dataclasses.dataclass
class Producers:
    """What every simulated process publishes through: the shared transport and clock.

    Attributes:
        transport: The shared transport (each run's SDK gets it, as ``transport=``).
        topics: Topic overrides (logical name -> topic).
        clock: The virtual clock.
        hook: The scheduler hook's publisher (``runwatch emit``).
        data: The data pipelines' publisher (``runwatch.client.data.report``).
        workdir: Checkpoint files and data baselines.

    """

    transport: Any
    topics: dict[str, str]
    clock: VirtualClock
    hook: Publisher
    data: Publisher
    workdir: Path


class RunDriver:
    """Executes one run's actions through the SDK, the data client and the hook."""

    def __init__(self, model: RunModel, producers: Producers, node: SimNode) -> None:
        """Bind a run model to its producers."""
        self.model = model
        self.plan: RunPlan = model.plan
        self.producers = producers
        self.hook_pub = producers.hook
        self.node = node
        self.workdir = producers.workdir
        self.run: Any = None
        self.injected_ms: int | None = None
        self.ended_ms: int | None = None
        self.ended_wall_ms: int | None = None
        self.now_ms = model.start_ms
        self.last_step_ms = 0
        self.done = False
        self.errors = 0

    def clock(self) -> int:
        """The run's time: the planned time of the action being carried out."""
        return self.now_ms

    def _pid(self, gpu: int) -> int:
        return 200_000 + self.plan.index * GPUS_PER_NODE + gpu

    def execute(self, a: Action) -> None:
        """Carry out one action (failures are counted and logged, never raised).

        The run's ``clock`` (what the SDK stamps calls without ``now_ms`` with,
        the manifest among them) reads the action's planned time, the way a
        replay tool's clock reads the replayed event's.
        """
        self.now_ms = a.at_ms
        try:
            getattr(self, f"_{a.kind}")(a)
        except Exception:
            self.errors += 1
            logger.exception("simulated run %s: action %s failed", self.plan.run_id, a.kind)

    def _job(self, a: Action) -> None:
        obj: dict[str, Any] = {"type": "job-state", "run_id": self.plan.run_id,
                               "state": a.args["state"], "attempt": self.model.restarts + 1,
                               "team": self.plan.team, "experiment_family": self.plan.family,
                               "emitted_at_ms": a.at_ms}
        if "deadline_ms" in a.args:
            obj["deadline_ms"] = a.args["deadline_ms"]
        if a.args.get("reason"):
            obj["reason"] = a.args["reason"]
        if a.args.get("allocation"):
            obj["allocation"] = {"nodes": [self.plan.node], "gpu_indices": list(self.plan.gpus),
                                 "gpu_model": "H100"}
        res = emit_records(self.hook_pub, [obj])
        if res.errors:
            self.errors += len(res.errors)
            logger.warning("hook emit for %s rejected: %s", self.plan.run_id, res.errors)

    def _start(self, a: Action) -> None:
        """Start the training script: ``runwatch.init`` as a user calls it, with the virtual clock.

        A run outside a container has no image digest (``lineage`` says so, as
        the probe would find on a host without ``RUNWATCH_IMAGE_DIGEST``).
        """
        from runwatch.client import init  # what ``runwatch.init`` resolves to

        p = self.plan
        pr = self.producers
        manifest = {"hardware": Hardware(nodes=(p.node,), gpu_count=len(p.gpus),
                                         gpu_model="H100"),
                    "image_digest": p.image, "code_revision": f"{p.index:07x}sim",
                    "framework_versions": {"torch": "2.5.1"}}
        self.run = init(
            run_id=p.run_id, experiment_family=p.family, team=p.team,
            config={"lr": 3e-4, "batch": 256, "family": p.family},
            datasets=[DatasetRef(uri=d, version=p.version) for d in p.datasets],
            seed_policy="fixed:1234", labels={"simulated": "true"},
            transport=pr.transport, topics=pr.topics, clock=self.clock,
            attempt=self.model.restarts + 1, capture_lineage=False, install_hooks=False,
            lineage=manifest)
        for g in p.gpus:
            self.node.attributor.pids[self._pid(g)] = p.run_id
            self.node.nvml.attach_process(g, self._pid(g), 40 * GIB)

    def _step(self, a: Action) -> None:
        if self.run is not None:
            args = dict(a.args)
            step = args.pop("step")
            self.run.step(step, now_ms=a.at_ms, **args)
            self.last_step_ms = a.at_ms

    def _validation(self, a: Action) -> None:
        if self.run is not None:
            self.run.validation(a.args["step"], a.args["metrics"],
                                dataset=DatasetRef(uri=self.plan.dataset_uri + "/val"),
                                now_ms=a.at_ms)

    def _checkpoint(self, a: Action) -> None:
        if self.run is None:
            return
        path = self.workdir / self.plan.run_id / f"step-{a.args['step']:06d}.ckpt"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = f"{self.plan.run_id}:{a.args['step']}".encode()
        expected = hashlib.sha256(body).hexdigest()
        path.write_bytes(body + (b"\0bitrot" if a.args["corrupt"] else b""))
        self.run.checkpoint(path, step=a.args["step"], duration_ms=a.args["duration_ms"],
                            expected_sha256=expected, now_ms=a.at_ms)

    def _data(self, a: Action) -> None:
        """One pipeline batch, reported the way the README shows: a named baseline, no run id.

        A workload with ``report_run_id`` passes the id of the run that owns
        the pipeline (its dataset may be shared with other runs all the same).
        """
        cols = make_batch(a.args, a.at_ms)
        rows = int(a.args["rows"])
        rate = float(a.args["rejected_rate"])
        rejected = int(round(rows * rate / (1 - rate))) if rows else 0
        sdk_data.report(a.args["dataset"], a.args["version"], a.args["partition"], cols,
                        baseline="ref", label="label", schema=SCHEMA, timestamp="ts",
                        rejected_samples=rejected, publisher=self.producers.data,
                        run_id=self.plan.run_id if self.plan.workload.report_run_id else None,
                        baseline_directory=self.workdir / "baselines", now_ms=a.at_ms)

    def _rejoin(self, a: Action) -> None:
        if self.run is not None:
            self.run.job_state("running", reason=a.args.get("reason", "worker restarted"),
                               attempt=self.model.restarts + 1, now_ms=a.at_ms)

    def _register(self, a: Action) -> None:
        """Push the run's model to the registry (``registered``), as a release script does."""
        if self.run is not None:
            self.run.artifact(f"s3://models/{self.plan.run_id}/release", "model",
                              sha256=hashlib.sha256(self.plan.run_id.encode()).hexdigest(),
                              registry_status="registered", now_ms=a.at_ms)

    def _gate(self, a: Action) -> None:
        if self.run is not None:
            args = {k: v for k, v in a.args.items() if k != "final"}
            self.run.gate(args.pop("gate"), args.pop("decision"), now_ms=a.at_ms, **args)

    def _fault(self, a: Action) -> None:
        self.injected_ms = a.at_ms
        logger.info("injected %s into %s", a.args["scenario"], self.plan.run_id)

    def _finish(self, a: Action) -> None:
        self.ended_ms = a.at_ms
        self.ended_wall_ms = int(time.time() * 1000)
        if self.run is not None:
            self.run.artifact(f"s3://models/{self.plan.run_id}/final", "model",
                              sha256=hashlib.sha256(self.plan.run_id.encode()).hexdigest(),
                              now_ms=a.at_ms)
            self.run.finish(a.args["status"], timeout=5.0, now_ms=a.at_ms)
        for g in self.plan.gpus:
            self.node.attributor.pids.pop(self._pid(g), None)
            self.node.nvml.processes[g] = []
            self.node.nvml.util.pop(g, None)
            self.node.nvml.occupancy.pop(g, None)
        self.done = True

    def set_util(self, at_ms: int) -> None:
        """Put this run's modelled GPU utilization and SM occupancy into its node's NVML double."""
        if self.run is None or self.done:
            return
        u = self.model.gpu_util(at_ms)
        occ = self.model.sm_occupancy(u)
        for g in self.plan.gpus:
            self.node.nvml.util[g] = u
            self.node.nvml.set_occupancy(g, occ)
