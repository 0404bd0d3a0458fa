"""The faust app: decode → core join → encode. Thin on purpose.

Agents:

* ``runs`` — every run-keyed topic (lineage, job, learning, artifact, the two
  internal re-key topics and the timer's tick topic). Folds each record into
  the run's state (:mod:`runwatch.core.join`), kept as JSON bytes in the
  ``runstate`` table (changelog-backed, never pickle), publishes alerts to
  rw.alerts (key = dedup key) and rejects to rw.dlq.
* ``nodes`` — rw.exec.node and rw.internal.job-by-node (both keyed by node,
  co-partitioned): keeps the node → runs index from the allocation changes the
  ``runs`` agent sends, in a local table, reduces each batch of node samples to
  one compact aggregate per run that owns their GPUs and forwards it through
  rw.internal.node-by-run (:mod:`runwatch.processor.forward`).
* ``data`` — rw.data and rw.internal.manifest-by-dataset (both keyed by
  dataset uri, co-partitioned): a co-partitioned stream join of reports and the
  runs whose manifests name the dataset, in local tables; forwards each report
  to those runs through rw.internal.data-by-run (:mod:`runwatch.processor.forward`).

Workload baselines are a global table; the join indices are local tables.
A timer sends one tick per assigned partition; the ``runs`` agent evaluates the
time-driven rules (stall, missing data report, hold expiry) for that partition.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.streams import _current_event

from runwatch import __version__
from runwatch.adapters.settings import KafkaSettings
from runwatch.core import join, rekey, runstate
from runwatch.core.alerting import AlertPolicy
from runwatch.core.baselines import merge_finished
from runwatch.core.codec import DecodeError, load_codec
from runwatch.core.horizon import InputHorizon
from runwatch.core.join_node import NodeAgg
from runwatch.core.records import (
    Alert,
    DeadLetter,
    JobEvent,
    LearningStep,
    RunManifest,
    Source,
    StepTiming,
)
from runwatch.core.topics import load_topics
from runwatch.processor import forward
from runwatch.processor.fastdrain import FastDrainConsumer, RawSchema
from runwatch.processor.partitioning import partition_for
from runwatch.processor.settings import ProcessorSettings
from runwatch.processor.timing import Sections

logger = logging.getLogger(__name__)

RUN_TOPICS = ("rw.lineage", "rw.exec.job", "rw.learning", "rw.artifact",
              "rw.internal.node-by-run", "rw.internal.data-by-run")
TICK = b"tick"
NODE_BY_RUN = "rw.internal.node-by-run"
DATA_BY_RUN = "rw.internal.data-by-run"
TELEMETRY = (StepTiming, LearningStep, NodeAgg)
"""High-rate records whose state changes may wait for the next checkpoint (see ``Processor``)."""


class App(faust.App):
    """faust's App with a hook that runs first when the worker stops.

    The processor checkpoints there: faust then waits for every started event
    to be acked before it commits and closes, and its timers are already
    stopped by then.
    """

    before_stop: Callable[[], Awaitable[None]] | None = None
    fast_drain = True
    """Use :class:`~runwatch.processor.fastdrain.FastDrainConsumer` (set before the
    first topic is declared: that creates the transport)."""
    monitor_sensor = True
    """Keep faust's Monitor sensor (per-event counters for its web views)."""

    def _new_transport(self) -> Any:
        transport = super()._new_transport()
        if self.fast_drain:
            transport.Consumer = FastDrainConsumer  # type: ignore[misc]  # this app only
        return transport

    def on_init_dependencies(self) -> Any:
        """Return faust's services, leaving out its Monitor sensor unless :attr:`monitor_sensor`.

        The Monitor runs on every event and message in and out (about 5 % of a
        busy worker's CPU); only faust's web views read it.
        """
        services = super().on_init_dependencies()
        if not self.monitor_sensor:
            self.sensors.remove(self.monitor)
        return services

    async def on_stop(self) -> None:
        """Run :attr:`before_stop`, then faust's own stop."""
        if self.before_stop is not None:
            await self.before_stop()
        await super().on_stop()


def as_current(event: Any) -> None:
    """Make ``event`` faust's current event (tables take a key's partition from it).

    ``take_events`` does not set it per event, and table writes need the
    partition of the event that caused them.
    """
    _current_event.set(weakref.ref(event))


def now_ms() -> int:
    """Return the wall clock in epoch ms (the processor passes it into core)."""
    return int(time.time() * 1000)


class Processor:
    """Wiring of one processor worker: app, topics, tables and agents."""

    def __init__(self, settings: ProcessorSettings, kafka: KafkaSettings) -> None:
        """Build the faust app and register its agents, tables and timer."""
        self.s = settings
        self.codec = load_codec()
        self.specs = load_topics()
        self.source = Source(kind="processor", host=socket.gethostname(),
                             runwatch_version=__version__)
        self.cfg = runstate.RunConfig(
            source=self.source, lateness_ms=settings.lateness_ms, hold_ms=settings.hold_ms,
            image_allow_list=tuple(settings.image_allow_list),
            image_missing=settings.image_missing, stall_k=settings.stall_k,
            required_gates=tuple(settings.required_gates),
            stall_min_ms=settings.stall_min_ms, data_wait_ms=settings.data_wait_ms,
            schema_fail_share=settings.schema_fail_share,
            window_ms=settings.window_ms, correlation_delay_ms=settings.correlation_delay_ms,
            policy=AlertPolicy(per_run_cap=settings.per_run_cap,
                               cooldown_ms=settings.cooldown_ms),
        )
        if settings.image_allow_list:
            logger.info("image allow-list: %s (rule:image_allow_list on; runs without an "
                        "image: %s)", ", ".join(settings.image_allow_list),
                        settings.image_missing)
        else:
            logger.warning("image allow-list is empty: rule:image_allow_list is DISABLED "
                           "(set RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST to enable it)")
        self.cache: dict[bytes, tuple[bytes, runstate.RunState]] = {}
        # deferred saves: run -> (live state, an event of its partition); their events' acks
        # wait in ``unacked`` until the checkpoint has written every dirty state
        self.dirty: dict[bytes, tuple[runstate.RunState, Any]] = {}
        self.horizon = InputHorizon()  # event time the runs agent's input has reached
        self.unacked: list[Any] = []
        self.checkpoint_at = time.monotonic()
        self.parts: dict[bytes, int] = {}
        self.base_cache: dict[bytes, tuple[bytes, dict[str, list[float]]]] = {}
        self.counters = {"events": 0, "alerts": 0, "dead": 0, "forwarded": 0, "unowned": 0}
        self.sections = Sections(settings.sections_log_s)
        n = settings.partitions
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.app = App(
            settings.app_id,
            broker=f"kafka://{kafka.bootstrap_servers}",
            datadir=str(settings.data_dir / settings.app_id),
            store="memory://",
            value_serializer="raw",
            key_serializer="raw",
            topic_partitions=n,
            topic_replication_factor=1,
            processing_guarantee="at_least_once",
            consumer_auto_offset_reset="earliest",
            table_standby_replicas=0,
            web_enabled=settings.web_enabled,
            web_port=settings.web_port,
            web_bind=settings.web_bind,
            web_host=settings.web_bind,
            broker_commit_every=100,
            broker_session_timeout=settings.session_timeout_s,
            broker_heartbeat_interval=max(settings.session_timeout_s / 4, 0.5),
            broker_commit_interval=1.0,
            stream_buffer_maxsize=settings.stream_buffer_maxsize,
            broker_max_poll_records=settings.max_poll_records,
            consumer_max_fetch_size=settings.max_fetch_bytes,
            # batch the sends (changelog checkpoints, bundles, alerts): fewer, larger requests
            producer_linger=settings.producer_linger_ms / 1000.0,
            producer_max_batch_size=256 * 1024,
        )
        self.app.fast_drain = settings.fast_drain
        self.app.monitor_sensor = settings.web_enabled
        app, t = self.app, settings.topic

        def topic(*names: str, **kw: Any) -> Any:
            return app.topic(*names, schema=RawSchema(), **kw)

        self.tick_topic = f"{settings.app_id}-tick"
        self.run_topic_names = [t(x) for x in RUN_TOPICS]
        self.runs_in = topic(*self.run_topic_names, self.tick_topic)
        self.tick_out = topic(self.tick_topic, partitions=n, internal=True)
        self.node_in = topic(t("rw.exec.node"), t(forward.JOB_BY_NODE))
        self.job_by_node = topic(t(forward.JOB_BY_NODE))
        self.data_in = topic(t("rw.data"), t(forward.MANIFEST_BY_DATASET))
        self.manifest_by_dataset = topic(t(forward.MANIFEST_BY_DATASET))
        self.node_by_run = topic(t("rw.internal.node-by-run"))
        self.data_by_run = topic(t("rw.internal.data-by-run"))
        self.alerts_out = topic(t("rw.alerts"))
        self.dlq_out = topic(t("rw.dlq"))

        def table(name: str, *, glob: bool = False) -> Any:
            make = app.GlobalTable if glob else app.Table
            tbl: Any = make(name, default=None, key_type=bytes, value_type=bytes, partitions=n)
            # raw bytes in the changelog (the values are JSON we write ourselves)
            tbl.key_serializer = "raw"
            tbl.value_serializer = "raw"
            return tbl

        self.runstate = table("runstate")
        self.node_runs = table("node-runs")  # node -> {run: [gpu indices]}, local
        # node -> its recent samples: (event time ms, runs routed to, encoded sample)
        self.node_recent: dict[str, deque[tuple[int, tuple[str, ...], bytes]]] = {}
        self.procs_seen: set[str] = set()  # nodes whose samples showed GPU processes (memory)
        self.dataset_index = table("dataset-index")  # uri -> {ref: [run ids]}, local
        self.dataset_reports = table("dataset-reports")  # ref -> first/recent reports, local
        self.baselines = table("baselines", glob=True)
        self.allowed = {name: set(spec.records) for name, spec in self.specs.items()}

        app.agent(self.runs_in, name="runs")(self._runs)
        app.agent(self.node_in, name="nodes")(self._nodes)
        app.agent(self.data_in, name="data")(self._data)
        app.timer(settings.timer_interval_s)(self._timer)
        app.on_partitions_revoked.connect(self._on_revoked)
        app.before_stop = self._final_checkpoint

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def as_current(event: Any) -> None:
        """Make ``event`` faust's current event (see :func:`as_current`)."""
        as_current(event)

    def _deployed(self, topic: str) -> str:
        p = self.s.topic_prefix
        return topic[len(p):] if p and topic.startswith(p) else topic

    async def _dead(self, topic: str, partition: int, offset: int, reason: str, value: bytes,
                    key: bytes | None, run_id: str | None = None, part: int = -1) -> None:
        """Dead-letter a record (``part``: its line in a bundle, kept in the event id)."""
        now = now_ms()
        self.counters["dead"] += 1
        logger.warning("dead letter from %s[%s]@%s: %s", topic, partition, offset, reason)
        eid = f"{topic}:{partition}:{offset}" + (f"#{part}" if part >= 0 else "")
        rec = DeadLetter(event_id=eid, run_id=run_id,
                         emitted_at_ms=now, source=self.source, seq=self.counters["dead"],
                         topic=topic, partition=partition, offset=offset, reason=reason,
                         original=value, key=key, failed_at_ms=now)
        await self.dlq_out.send(value=self.codec.encode(rec))

    async def _publish(self, outputs: list[Any]) -> None:
        for out in outputs:
            if isinstance(out, Alert):
                self.counters["alerts"] += 1
                logger.info("alert %s %s run=%s cause=%s", out.status, out.detector, out.run_id,
                            out.probable_cause)
                await self.alerts_out.send(key=out.dedup_key.encode(),
                                           value=self.codec.encode(out))
            else:
                self.counters["dead"] += 1
                await self.dlq_out.send(value=self.codec.encode(out))

    def _decode(self, topic: str, value: Any) -> Any:
        """Return the record, or a reason string when it must be dead-lettered.

        A node-by-run bundle gives a list of (aggregate or reason, its bytes).
        """
        if not isinstance(value, bytes | bytearray):
            return f"value is not bytes ({type(value).__name__})"
        if value[:1] == b"{" and self._deployed(topic) == NODE_BY_RUN:
            return NodeAgg.unbundle(bytes(value))  # [(aggregate or reason, its bytes)]
        try:
            rec = self.codec.decode(bytes(value))
        except DecodeError as exc:
            return f"undecodable: {exc.reason}"
        allowed = self.allowed.get(self._deployed(topic))
        if allowed is not None and rec.AVRO_NAME not in allowed:
            return f"record {rec.AVRO_NAME} not allowed on topic {self._deployed(topic)}"
        return rec

    def _partition(self, key: bytes) -> int:
        part = self.parts.get(key)
        if part is None:
            part = self.parts[key] = partition_for(key, self.s.partitions, self.s.partitioner)
        return part

    def _load(self, key: bytes) -> runstate.RunState:
        live = self.dirty.get(key)
        if live is not None:
            return live[0]  # changed since its last save (a checkpoint will write it)
        raw = self.runstate.get(key)
        hit = self.cache.get(key)
        if raw is not None and hit is not None and hit[0] is raw:
            return hit[1]  # live state (detectors as objects) still matches the table
        if raw is None:
            return runstate.new_state(key.decode())
        return runstate.loads(raw)

    def _save(self, key: bytes, state: runstate.RunState) -> None:
        raw = runstate.dumps(state)
        self.runstate[key] = raw
        self.cache[key] = (raw, state)
        self.dirty.pop(key, None)

    async def _checkpoint(self, *, force: bool = False) -> None:
        """Write every deferred state, then ack the events behind them.

        Runs whose batch held only high-rate telemetry (:data:`TELEMETRY`) and
        raised nothing are saved here, every ``save_interval_s``, instead of on
        every batch: one changelog record per run per interval. Their events
        are acked only after that write, so Kafka offsets never pass state that
        is not in the changelog: a crash replays them (at-least-once).
        """
        due = time.monotonic() - self.checkpoint_at >= self.s.save_interval_s
        if not self.unacked or not (force or due or len(self.unacked) >= self.s.unacked_max):
            return
        with self.sections.timed("runs.checkpoint", len(self.dirty)):
            for key, (state, event) in list(self.dirty.items()):
                as_current(event)  # the table writes to the partition of the run's events
                self._save(key, state)
            for event in self.unacked:
                event.ack()  # the stream's own ack came first: this one is the final
            self.unacked = []
        self.checkpoint_at = time.monotonic()

    def _waiting_for_acks(self) -> bool:
        """Whether faust waits for every started event's ack (a rebalance or a stop)."""
        return bool(self.app.rebalancing or self.app.should_stop)

    async def _final_checkpoint(self) -> None:
        logger.info("checkpoint before stop: %d run states, %d events to ack",
                    len(self.dirty), len(self.unacked))
        await self._checkpoint(force=True)

    async def _on_revoked(self, sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        """Forget deferred state of revoked partitions whose events were not acked.

        Normally none is left: faust waits for every started event to be acked
        before it revokes, and the timer checkpoints during a rebalance. Should
        some remain, the next owner (maybe this worker again) restores the saved
        state from the changelog and replays them from the last committed offset.
        """
        revoked = args[0] if args else set()
        parts = {tp.partition for tp in revoked}
        tps = set(revoked)
        for key in [k for k in self.dirty if self._partition(k) in parts]:
            del self.dirty[key]
            self.cache.pop(key, None)  # the cached object carries the unsaved changes
        self.unacked = [ev for ev in self.unacked if ev.message.tp not in tps]

    def _baseline(self, state: runstate.RunState) -> dict[str, list[float]] | None:
        key = state.workload.encode()
        raw = self.baselines.get(key)
        if not raw:
            return None
        hit = self.base_cache.get(key)
        if hit is not None and hit[0] is raw:
            return hit[1]
        parsed: dict[str, list[float]] = json.loads(raw)
        self.base_cache[key] = (raw, parsed)
        return parsed

    # ------------------------------------------------------------------ agents

    async def _runs(self, stream: Any) -> None:
        async for events in stream.take_events(self.s.batch_size, within=self.s.batch_within_s):
            if self.s.save_interval_s <= 0:
                await self._run_batch(events)
                continue
            for event in events:
                event.message.incref()  # hold the ack until the state is in the changelog
            try:
                await self._run_batch(events)
            finally:  # only whole batches wait for a checkpoint (the timer may run one midway)
                self.unacked.extend(events)
            await self._checkpoint(force=self._waiting_for_acks())

    async def _run_batch(self, events: list[Any]) -> None:
        """Fold a batch into the run states: one load, one join pass, one table write per run."""
        with self.sections.timed("runs.batch", len(events)):
            await self._run_batch_inner(events)
        self.sections.maybe_log()

    async def _run_batch_inner(self, events: list[Any]) -> None:
        by_run: dict[bytes, list[tuple[Any, Any, bytes]]] = {}
        held: dict[str, list[str]] = {}  # run -> allocated nodes, as of this batch
        wall = now_ms()
        for event in events:
            msg = event.message
            as_current(event)
            if msg.topic == self.tick_topic:
                await self._flush(by_run)
                by_run = {}
                as_current(event)
                await self._tick(msg.partition, int(event.value or 0))
                continue
            self.counters["events"] += 1
            rec = self._decode(msg.topic, event.value)
            if isinstance(rec, list):  # a bundle of node aggregates, all runs of this partition
                for i, (agg, raw) in enumerate(rec):
                    if isinstance(agg, str):
                        await self._dead(msg.topic, msg.partition, msg.offset, agg, raw,
                                         event.key, part=i)
                    else:
                        self.horizon.observe(msg.tp, agg.emitted_at_ms, wall)
                        by_run.setdefault(agg.run_id.encode(), []).append((agg, event, raw))
                continue
            if isinstance(rec, str):
                await self._dead(msg.topic, msg.partition, msg.offset, rec, event.value, event.key)
                continue
            self.horizon.observe(msg.tp, rec.emitted_at_ms, wall)
            run = self._run_of(msg.topic, event.key, rec)
            if not run:
                await self._dead(msg.topic, msg.partition, msg.offset,
                                 "run-keyed record without run_id", event.value, event.key)
                continue
            if isinstance(rec, JobEvent):
                await self._index_job(rec, held)
            elif isinstance(rec, RunManifest):
                await self._index_manifest(rec)
            by_run.setdefault(run, []).append((rec, event, event.value))
        await self._flush(by_run)

    def _run_of(self, topic: str, key: bytes | None, rec: Any) -> bytes:
        """Return the run a record of a run-keyed topic is folded into (empty: none).

        A data report re-keyed by the data agent belongs to the run it was
        forwarded to, its message key: a dataset's report goes to every run
        that reads the dataset, and most reports name no run at all.
        """
        if self._deployed(topic) == DATA_BY_RUN:
            return bytes(key or b"")
        return (rec.run_id or "").encode()

    async def _flush(self, by_run: dict[bytes, list[tuple[Any, Any, bytes]]]) -> None:
        now = now_ms()
        outputs: list[Any] = []
        sec = self.sections
        for key, items in by_run.items():
            as_current(items[0][1])
            state = self._load(key)
            finished = False
            before = len(outputs)
            with sec.timed("runs.join", len(items)):
                for rec, event, raw in items:
                    state, outs = join.step(state, rec, now, self.cfg, raw=bytes(raw),
                                            topic=event.message.topic,
                                            baseline=self._baseline(state))
                    outputs += outs
                    finished = finished or isinstance(rec, JobEvent)
            if finished:
                self._learn_baseline(state)
            if (self.s.save_interval_s > 0 and len(outputs) == before
                    and all(isinstance(it[0], TELEMETRY) for it in items)):
                self.dirty[key] = (state, items[-1][1])  # saved by the next checkpoint
                continue
            with sec.timed("runs.save"):
                self._save(key, state)
        with sec.timed("runs.publish", len(outputs)):
            await self._publish(outputs)

    async def _tick(self, partition: int, at_ms: int) -> None:
        now = max(at_ms, now_ms())
        horizon = self.horizon.at(now)  # absence rules: event time the input has reached
        keys = list(self.runstate.keys())
        keys += [k for k in self.dirty if k not in self.runstate]  # new runs not saved yet
        for key in keys:
            if self._partition(key) != partition:
                continue
            state = self._load(key)
            before = join.tick_fingerprint(state)
            state, outputs = join.tick(state, now, self.cfg, horizon)
            if outputs or join.tick_fingerprint(state) != before:
                self._save(key, state)
            await self._publish(outputs)

    async def _index_job(self, rec: JobEvent, held: dict[str, list[str]]) -> None:
        """Send the run's allocation changes to the workers owning its nodes' samples."""
        run_id = rec.run_id or ""
        prev = held.get(run_id)
        if prev is None:
            prev = self._load(run_id.encode()).nodes
        changes, held[run_id] = rekey.allocation_changes(rec, prev)
        for change in changes:
            await self._send(self.job_by_node, change.node.encode(), change.to_json())

    async def _index_manifest(self, rec: RunManifest) -> None:
        """Send one record per dataset of the manifest to the worker owning that dataset."""
        if not rec.run_id:
            return
        for uri, ref in rekey.manifest_keys(rec.datasets):
            await self._send(self.manifest_by_dataset, uri.encode(),
                             rekey.manifest_ref_json(rec.run_id, uri, ref))

    def _learn_baseline(self, state: runstate.RunState) -> None:
        stats = join.finished_stats(state)
        if not stats or state.alerts.get("fired"):
            return
        key = state.workload.encode()
        raw = self.baselines.get(key)
        merged = merge_finished(json.loads(raw) if raw else {}, stats)
        self.baselines[key] = json.dumps(merged).encode()

    async def _forward(self, topic: Any, run_id: str, value: bytes) -> None:
        await self._send(topic, run_id.encode(), value)

    async def _send(self, topic: Any, key: bytes, value: bytes,
                    partition: int | None = None) -> None:
        """Send to an internal topic in the partition the producers' partitioner picks.

        ``partition`` overrides it for a bundle (whose runs all hash to it).
        """
        self.counters["forwarded"] += 1
        part = self._partition(key) if partition is None else partition
        await topic.send(key=key, value=value, partition=part)

    async def _nodes(self, stream: Any) -> None:
        async for events in stream.take_events(self.s.batch_size, within=self.s.batch_within_s):
            await forward.node_batch(self, events)

    async def _data(self, stream: Any) -> None:
        async for event in stream.events():
            as_current(event)  # local tables write to the event's partition
            await forward.dataset_event(self, event)

    async def _timer(self) -> None:
        await self._checkpoint(force=self._waiting_for_acks())
        assigned = self.app.consumer.assignment()
        now = str(now_ms()).encode()
        for tp in assigned:
            if tp.topic == self.tick_topic:
                await self.tick_out.send(key=TICK, value=now, partition=tp.partition)


def build(settings: ProcessorSettings, kafka: KafkaSettings) -> Processor:
    """Build the processor (no I/O happens until the app's worker starts).

    Args:
        settings: Processor settings.
        kafka: Where Kafka is.

    Returns:
        The wired processor; ``processor.app.main()`` runs the worker.

    """
    return Processor(settings, kafka)
