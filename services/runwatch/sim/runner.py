"""Run the simulated cluster against Kafka on a virtual clock and collect alerts."""

from __future__ import annotations

import logging
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runwatch.adapters.publisher import default_topics
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sim.clock import VirtualClock
from runwatch.sim.drivers import (
    Producers,
    RunDriver,
    SharedTransport,
    SimNode,
    make_node,
    sim_publisher,
)
from runwatch.sim.model import RunModel, plan_cluster
from runwatch.sim.scenarios import Scenario
from runwatch.sim.scoreboard import AlertSeen, Board, Injection, score
from runwatch.sim.slodrive import SESSION_LABEL, SloDriver, SloUnavailable, make_driver

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What to simulate.

    Attributes:
        nodes: Nodes (8 GPUs each).
        runs: Healthy runs (the first is the control).
        seed: Random seed.
        speed: Virtual seconds per wall second.
        duration_s: Virtual length of the simulation.
        scenarios: Faults and controls, each with its workload's runs.
        prefix: Run id prefix (unique per session by default).
        topic_prefix: Prefix of every topic (tests isolate with it).
        node_interval_s: Virtual seconds between node-agent ticks.
        tick_s: Wall seconds between scheduler passes.
        grace_s: Wall seconds to wait for the expected alerts after the last
            run finished (stops early once every fault is detected).
        collect_s: Wall seconds to keep collecting after the last run finished,
            however early the expected alerts came: rules that fire minutes
            later (missing reports, stalls) show up on the board. The node
            agents keep sampling meanwhile, as on a real cluster. Offline, the
            same virtual span of agent samples is produced at once.
        collect_alerts: Read rw.alerts back while running.
        gpm: Whether the simulated GPUs report SM occupancy (NVML GPM); without
            it the processor's occupancy indicator falls back to utilization.
        slo_file: The objectives of the SLO scenarios (default
            ``infra/slo/sim-slos.yaml``).
        slo_interval_s: Virtual seconds between SLO evaluation instants.
        slo_settle_s: Wall seconds an SLO evaluation instant waits for the sink
            to store the rows timed up to it (see :mod:`runwatch.sim.slodrive`).

    """

    nodes: int = 4
    runs: int = 2
    seed: int = 1
    speed: float = 20.0
    duration_s: float = 900.0
    scenarios: tuple[Scenario, ...] = ()
    prefix: str = ""
    topic_prefix: str = ""
    node_interval_s: float = 10.0
    tick_s: float = 0.1
    grace_s: float = 20.0
    collect_s: float = 0.0
    collect_alerts: bool = True
    gpm: bool = True
    slo_file: Path | None = None
    slo_interval_s: float = 30.0
    slo_settle_s: float = 3.0


@dataclass(frozen=True, slots=True)
class Progress:
    """A snapshot for progress displays."""

    virtual_s: float
    duration_s: float
    runs_active: int
    runs_done: int
    records: int
    injected: tuple[str, ...]
    alerts: tuple[AlertSeen, ...]


@dataclass
class SimResult:
    """What a simulation did and saw."""

    prefix: str
    start_ms: int
    clock: VirtualClock
    injections: list[Injection]
    control_runs: list[str]
    alerts: list[AlertSeen]
    records: int
    errors: int
    wall_s: float
    run_ids: list[str] = field(default_factory=list)
    control_names: dict[str, str] = field(default_factory=dict)
    ended_wall_ms: int | None = None
    control_slos: dict[str, str] = field(default_factory=dict)

    def board(self) -> Board:
        """Score the alerts against the injections."""
        return score(self.injections, self.alerts, self.control_runs, self.control_names,
                     self.control_slos)


class AlertCollector:
    """Reads rw.alerts in a thread and keeps the alerts of this simulation's runs."""

    def __init__(self, kafka: KafkaSettings, topic: str, prefix: str) -> None:
        """Subscribe with a fresh consumer group (from the earliest offset)."""
        from runwatch.adapters.kafka import BatchConsumer
        from runwatch.core.codec import load_codec

        self.codec = load_codec()
        self.prefix = prefix
        self.alerts: list[AlertSeen] = []
        self._stop = threading.Event()
        self._consumer = BatchConsumer(kafka, f"runwatch-sim-{prefix}-{uuid.uuid4().hex[:6]}",
                                       [topic])
        self._thread = threading.Thread(target=self._loop, name="sim-alerts", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                msgs = self._consumer.poll_batch(500, 0.5)
            except Exception:
                logger.exception("alert consumer failed")
                time.sleep(1.0)
                continue
            now = int(time.time() * 1000)
            for m in msgs:
                try:
                    rec = self.codec.decode(m.value() or b"")
                except Exception as exc:
                    logger.warning("undecodable alert: %s", exc)
                    continue
                ours = (getattr(rec, "run_id", None) or "").startswith(self.prefix + "-")
                if ours or (getattr(rec, "labels", None) or {}).get(SESSION_LABEL) == self.prefix:
                    self.alerts.append(AlertSeen.from_alert(rec, now))

    def close(self) -> None:
        """Stop reading and leave the group."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._consumer.close()


def run_simulation(cfg: SimConfig, kafka: KafkaSettings | None = None, *,
                   transport: Any = None, progress: Callable[[Progress], None] | None = None,
                   workdir: Path | None = None,
                   clickhouse: ClickHouseSettings | None = None) -> SimResult:
    """Simulate the cluster until every run has finished, then wait for alerts.

    Args:
        cfg: What to simulate.
        kafka: Where Kafka is (env ``KAFKA_*`` by default).
        transport: A ready transport (tests); a KafkaTransport otherwise.
        progress: Called about once per wall second with a snapshot.
        workdir: Where checkpoint files are written (a temporary directory by default).
        clickhouse: The store the sink writes to, read by the SLO scenarios'
            evaluator (env ``CLICKHOUSE_*`` by default).

    Returns:
        The result, with the alerts read back.

    Raises:
        SloUnavailable: SLO scenarios were asked for without Kafka and a store
            with the SLO tables (or their objectives are missing).

    """
    kafka = kafka or KafkaSettings()
    prefix = cfg.prefix or f"sim{cfg.seed}-{uuid.uuid4().hex[:6]}"
    topics = {name: cfg.topic_prefix + name for name in set(default_topics().values())}
    own = transport is None
    if transport is not None and any(s.slo for s in cfg.scenarios):
        msg = ("SLO scenarios are evaluated from what the sink stored: they need Kafka, the "
               "sink and the store (not offline)")
        raise SloUnavailable(msg)
    if transport is None:
        from runwatch.adapters.kafka import KafkaTransport, ProducerSettings

        transport = KafkaTransport(kafka, ProducerSettings(linger_ms=20), name=f"sim-{prefix}")
    shared = SharedTransport(transport)
    collector = (AlertCollector(kafka, cfg.topic_prefix + "rw.alerts", prefix)
                 if cfg.collect_alerts else None)
    clock = VirtualClock(cfg.speed)
    start = clock.now_ms()
    slo = None
    if any(s.slo for s in cfg.scenarios):
        try:
            slo = make_driver(cfg.scenarios, prefix=prefix, clock=clock, start_ms=start,
                              transport=transport, alerts_topic=cfg.topic_prefix + "rw.alerts",
                              clickhouse=clickhouse, slo_file=cfg.slo_file,
                              interval_s=cfg.slo_interval_s, settle_s=cfg.slo_settle_s)
        except BaseException:
            if collector is not None:
                collector.close()
            if own:
                transport.close(5.0)
            raise
    duration_ms = int(cfg.duration_s * 1000)
    plans = plan_cluster(cfg.seed, cfg.nodes, cfg.runs, list(cfg.scenarios), prefix)
    hook_pub = sim_publisher(shared, clock, kind="hook", topics=topics)
    data_pub = sim_publisher(shared, clock, kind="sdk", topics=topics)
    agent_pub = sim_publisher(shared, clock, kind="agent", topics=topics)
    nodes: dict[str, SimNode] = {}
    for p in plans:
        if p.node not in nodes:
            nodes[p.node] = make_node(p.node, agent_pub, gpm=cfg.gpm)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="runwatch-sim-")
        workdir = Path(tmp.name)
    producers = Producers(shared, topics, clock, hook_pub, data_pub, workdir)
    drivers = [RunDriver(RunModel(p, cfg.seed, start, duration_ms), producers, nodes[p.node])
               for p in plans]
    if slo is not None:
        slo.published = lambda: max((d.last_step_ms for d in drivers), default=0)
    t0 = time.monotonic()
    ticker = _NodeTicker(nodes, drivers, start, int(cfg.node_interval_s * 1000))
    next_progress = 0.0
    ended_wall_ms: int | None = None
    if slo is not None:
        slo.start()
    try:
        while not all(d.done for d in drivers):
            ticker.run_until(clock.now_ms())
            if progress is not None and time.monotonic() >= next_progress:
                next_progress = time.monotonic() + 1.0
                progress(_snapshot(clock, start, cfg, drivers, shared, collector))
            time.sleep(cfg.tick_s)
        ended_wall_ms = int(time.time() * 1000)
        shared.flush(30.0)
        if slo is not None:
            slo.end_at(max((d.ended_ms or start) for d in drivers))
        if collector is not None:
            _await_alerts(collector, drivers, cfg, clock, start, shared, progress, ticker, slo)
        elif cfg.collect_s > 0:  # offline: the window's agent samples, without waiting for it
            last = max((d.ended_ms or start) for d in drivers)
            stop = last + int(cfg.collect_s * cfg.speed * 1000)
            while ticker.next_ms <= stop:
                ticker.tick(ticker.next_ms)
        shared.flush(30.0)
    finally:
        if slo is not None:
            slo.stop()
        if collector is not None:
            collector.close()
        if own:
            transport.close(30.0)
        if tmp is not None:
            tmp.cleanup()
    injections = [Injection(d.plan.run_id, d.plan.fault, d.injected_ms, d.ended_wall_ms)
                  for d in drivers if d.plan.fault is not None and not d.plan.control]
    controls = [d.plan.run_id for d in drivers if d.plan.control]
    names = {d.plan.run_id: d.plan.fault.name for d in drivers
             if d.plan.fault is not None and d.plan.control}
    slos = {d.plan.run_id: d.plan.fault.slo for d in drivers
            if d.plan.fault is not None and d.plan.control and d.plan.fault.slo}
    return SimResult(prefix=prefix, start_ms=start, clock=clock, injections=injections,
                     control_runs=controls, alerts=list(collector.alerts) if collector else [],
                     records=shared.produced, errors=sum(d.errors for d in drivers),
                     wall_s=time.monotonic() - t0, run_ids=[d.plan.run_id for d in drivers],
                     control_names=names, ended_wall_ms=ended_wall_ms, control_slos=slos)


def _advance(drivers: list[RunDriver], until_ms: int) -> None:
    for d in drivers:
        for a in d.model.advance(until_ms):
            d.execute(a)


class _NodeTicker:
    """Ticks every node agent once per ``interval_ms`` of virtual time (runs or not).

    The scheduler loop falls behind the virtual clock when the machine cannot
    keep up (many runs at a high speed): :meth:`run_until` then carries out the
    runs' actions up to each tick that fell due and samples at it, so every
    sample reads the GPUs as they were at its own event time. Ticking late at
    the current time only would thin the samples to one per pass, and sending
    the missed ticks afterwards would stamp past event times on the GPUs as
    they are now (idle, once the runs ended).
    """

    def __init__(self, nodes: dict[str, SimNode], drivers: list[RunDriver], start_ms: int,
                 interval_ms: int) -> None:
        self.nodes, self.drivers = nodes, drivers
        self.next_ms = start_ms
        self.interval_ms = interval_ms

    def run_until(self, now_ms: int) -> None:
        """Carry out every action and node tick due by ``now_ms``, in virtual-time order."""
        while self.next_ms <= now_ms:
            _advance(self.drivers, self.next_ms)
            self.tick(self.next_ms)
        _advance(self.drivers, now_ms)

    def tick(self, now_ms: int) -> None:
        if now_ms < self.next_ms:
            return
        for d in self.drivers:
            d.set_util(now_ms)
        for node in self.nodes.values():
            try:
                node.agent.tick(now_ms)
            except Exception:
                logger.exception("agent tick on %s failed", node.name)
        self.next_ms += self.interval_ms


def _snapshot(clock: VirtualClock, start: int, cfg: SimConfig, drivers: list[RunDriver],
              shared: SharedTransport, collector: AlertCollector | None) -> Progress:
    return Progress(
        virtual_s=(clock.now_ms() - start) / 1000.0, duration_s=cfg.duration_s,
        runs_active=sum(1 for d in drivers if d.run is not None and not d.done),
        runs_done=sum(1 for d in drivers if d.done), records=shared.produced,
        injected=tuple(d.plan.fault.name for d in drivers
                       if d.plan.fault is not None and d.injected_ms is not None),
        alerts=tuple(collector.alerts) if collector else (),
    )


def _await_alerts(collector: AlertCollector, drivers: list[RunDriver], cfg: SimConfig,
                  clock: VirtualClock, start: int, shared: SharedTransport,
                  progress: Callable[[Progress], None] | None, ticker: _NodeTicker,
                  slo: SloDriver | None = None) -> None:
    """Collect alerts after the runs ended while the node agents keep sampling.

    For ``collect_s`` wall seconds in full when it is set (late alerts count);
    otherwise up to ``grace_s``, stopping a few seconds after every injected
    fault's expected alert has arrived and the SLO evaluator (if any) has
    evaluated the end of the runs.
    """
    t0 = time.monotonic()
    window = cfg.collect_s if cfg.collect_s > 0 else cfg.grace_s
    next_progress = 0.0
    while time.monotonic() - t0 < window:
        ticker.tick(clock.now_ms())
        if cfg.collect_s <= 0:
            pending = [d for d in drivers
                       if d.plan.fault is not None and not d.plan.control
                       and d.injected_ms is not None
                       and not any((a.run_id == d.plan.run_id or d.plan.fault.slo)
                                   and a.detector in d.plan.fault.detectors
                                   for a in collector.alerts)]
            if not pending and (slo is None or slo.finished):
                time.sleep(min(3.0, cfg.grace_s))  # a little longer, for false alerts
                return
        if progress is not None and time.monotonic() >= next_progress:
            next_progress = time.monotonic() + 1.0
            progress(_snapshot(clock, start, cfg, drivers, shared, collector))
        time.sleep(min(cfg.tick_s, 0.5))
