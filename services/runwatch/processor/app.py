"""The faust app and the wiring of one processor worker. Thin on purpose.

The worker is split by responsibility, each part owning its tables, all of
them sending through one :class:`~runwatch.processor.outbox.Outbox`:

* ``runs`` (:class:`~runwatch.processor.runs.RunFolder`) — every run-keyed
  topic (lineage, job, learning, artifact, the two internal re-key topics and
  the timer's tick topic): run states in the ``runstate`` table
  (changelog-backed JSON, never pickle), checkpoints and acks, workload
  baselines (a global table), the time-driven rules.
* ``nodes`` (:class:`~runwatch.processor.nodes.NodeRekeyer`) — rw.exec.node and
  rw.internal.job-by-node (both keyed by node, co-partitioned): the node → runs
  index in a local table; one compact aggregate per run per batch, forwarded
  through rw.internal.node-by-run.
* ``data`` (:class:`~runwatch.processor.datasets.DatasetRekeyer`) — rw.data and
  rw.internal.manifest-by-dataset (both keyed by dataset uri, co-partitioned):
  a co-partitioned stream join of reports and the runs whose manifests name
  the dataset; each report forwarded to those runs through rw.internal.data-by-run.

A timer sends one tick per assigned partition; the ``runs`` agent evaluates the
time-driven rules (stall, missing data report, hold expiry) for that partition.
"""

from __future__ import annotations

import logging
import socket
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.streams import _current_event

from runwatch._version import __version__
from runwatch.adapters.settings import KafkaSettings
from runwatch.core.codec import load_codec
from runwatch.core.paging.lifecycle import AlertPolicy
from runwatch.core.paging.ownership import load_ownership
from runwatch.core.records import Source
from runwatch.core.stream import runstate
from runwatch.core.topics import load_topics
from runwatch.processor.datasets import DatasetRekeyer
from runwatch.processor.fastdrain import FastDrainConsumer, RawSchema
from runwatch.processor.nodes import NodeRekeyer
from runwatch.processor.outbox import (
    DATA_BY_RUN,
    JOB_BY_NODE,
    MANIFEST_BY_DATASET,
    NODE_BY_RUN,
    OUTPUTS,
    Clock,
    Outbox,
    wall_ms,
)
from runwatch.processor.runs import RunFolder, TableFactory
from runwatch.processor.settings import ProcessorSettings
from runwatch.processor.timing import Sections

logger = logging.getLogger(__name__)

RUN_TOPICS = ("rw.lineage", "rw.exec.job", "rw.learning", "rw.artifact", NODE_BY_RUN, DATA_BY_RUN)
TICK = b"tick"


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


class Processor:
    """Wiring of one processor worker: app, topics, tables, the three parts and the timer."""

    def __init__(self, settings: ProcessorSettings, kafka: KafkaSettings, *,
                 table: TableFactory | None = None, clock: Clock = wall_ms,
                 current: Callable[[Any], None] | None = None) -> None:
        """Build the faust app and register its agents, tables and timer.

        Args:
            settings: Processor settings.
            kafka: Where Kafka is.
            table: Makes the parts' tables (default: faust tables, changelog-backed;
                the in-memory driver passes dicts).
            clock: The processor's clock in epoch ms (default: the wall clock).
            current: Makes an event the current one, before the parts write its
                tables (default: faust's current event, :func:`as_current`; the
                plain runtime passes its own).
        """
        self.s = settings
        self.specs = load_topics()
        self.source = Source(kind="processor", host=socket.gethostname(),
                             runwatch_version=__version__)
        self.cfg = runstate.RunConfig(
            source=self.source, lateness_ms=settings.lateness_ms, hold_ms=settings.hold_ms,
            image_allow_list=tuple(settings.image_allow_list),
            image_missing=settings.image_missing, stall_k=settings.stall_k,
            required_gates=tuple(settings.required_gates),
            registry_control=settings.registry_control, gate_wait_ms=settings.gate_wait_ms,
            stall_min_ms=settings.stall_min_ms, data_wait_ms=settings.data_wait_ms,
            schema_fail_share=settings.schema_fail_share,
            window_ms=settings.window_ms, correlation_delay_ms=settings.correlation_delay_ms,
            min_event_ms=settings.min_event_ms, max_ahead_ms=settings.max_ahead_ms,
            ended_retention_ms=settings.ended_retention_ms,
            silent_retention_ms=settings.silent_retention_ms,
            release_retention_ms=settings.release_retention_ms,
            policy=AlertPolicy(per_run_cap=settings.per_run_cap,
                               cooldown_ms=settings.cooldown_ms,
                               ownership=load_ownership(settings.ownership_file)),
        )
        if settings.image_allow_list:
            logger.info("image allow-list: %s (rule:image_allow_list on; runs without an "
                        "image: %s)", ", ".join(settings.image_allow_list),
                        settings.image_missing)
        else:
            logger.warning("image allow-list is empty: rule:image_allow_list is DISABLED "
                           "(set RUNWATCH_PROCESSOR_IMAGE_ALLOW_LIST to enable it)")
        self.sections = Sections(settings.sections_log_s)
        self.out = Outbox(codec=load_codec(), source=self.source,
                          allowed={name: set(spec.records) for name, spec in self.specs.items()},
                          topic_prefix=settings.topic_prefix, partitions=settings.partitions,
                          partitioner=settings.partitioner, sections=self.sections, clock=clock)
        self.app = self._app(settings, kafka)
        app, t, n = self.app, settings.topic, settings.partitions

        def topic(*names: str, **kw: Any) -> Any:
            return app.topic(*names, schema=RawSchema(), **kw)

        def faust_table(name: str, *, glob: bool = False) -> Any:
            make = app.GlobalTable if glob else app.Table
            tbl: Any = make(name, default=None, key_type=bytes, value_type=bytes, partitions=n)
            # raw bytes in the changelog (the values are JSON we write ourselves)
            tbl.key_serializer = "raw"
            tbl.value_serializer = "raw"
            return tbl

        self.tick_topic = f"{settings.app_id}-tick"
        self.runs_in = topic(*[t(x) for x in RUN_TOPICS], self.tick_topic)
        self.tick_out = topic(self.tick_topic, partitions=n, internal=True)
        self.node_in = topic(t("rw.exec.node"), t(JOB_BY_NODE))
        self.data_in = topic(t("rw.data"), t(MANIFEST_BY_DATASET))
        self.out.topics = {name: topic(t(name)) for name in OUTPUTS}

        make = table or faust_table
        self.as_current = current or as_current
        self.runs = RunFolder(self.out, make, self.as_current, cfg=self.cfg,
                              tick_topic=self.tick_topic,
                              save_interval_s=settings.save_interval_s,
                              unacked_max=settings.unacked_max,
                              waiting_for_acks=self._waiting_for_acks)
        self.nodes = NodeRekeyer(self.out, make, self.as_current,
                                 min_event_ms=settings.min_event_ms,
                                 max_ahead_ms=settings.max_ahead_ms)
        self.datasets = DatasetRekeyer(self.out, make)

        app.agent(self.runs_in, name="runs")(self._runs)
        app.agent(self.node_in, name="nodes")(self._nodes)
        app.agent(self.data_in, name="data")(self._data)
        app.timer(settings.timer_interval_s)(self._timer)
        app.on_partitions_revoked.connect(self._on_revoked)
        app.before_stop = self._final_checkpoint

    @property
    def counters(self) -> dict[str, int]:
        """The worker's counters (events, alerts, dead, forwarded, unowned, runs_retired)."""
        return self.out.counters

    @staticmethod
    def _app(settings: ProcessorSettings, kafka: KafkaSettings) -> App:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        credentials: Any = None  # KAFKA_SECURITY_PROTOCOL & co., as every other client
        if kafka.security_protocol.startswith("SASL"):
            credentials = faust.SASLCredentials(
                username=kafka.sasl_username, password=kafka.password(),
                ssl_context=kafka.ssl_context(), mechanism=kafka.sasl_mechanism)
        elif kafka.security_protocol == "SSL":
            credentials = faust.SSLCredentials(kafka.ssl_context())
        app = App(
            settings.app_id,
            broker=f"kafka://{kafka.bootstrap_servers}",
            broker_credentials=credentials,
            datadir=str(settings.data_dir / settings.app_id),
            store="memory://",
            value_serializer="raw",
            key_serializer="raw",
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication_factor or 1,
            producer_acks=-1,  # acks=all: a cluster's min.insync.replicas guards every send
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
        app.fast_drain = settings.fast_drain
        app.monitor_sensor = settings.web_enabled
        return app

    def _waiting_for_acks(self) -> bool:
        """Whether faust waits for every started event's ack (a rebalance or a stop)."""
        return bool(self.app.rebalancing or self.app.should_stop)

    async def _final_checkpoint(self) -> None:
        logger.info("checkpoint before stop: %d run states, %d events to ack",
                    len(self.runs.dirty), len(self.runs.unacked))
        await self.runs.checkpoint(force=True)

    async def _on_revoked(self, sender: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        self.runs.revoked(set(args[0]) if args else set())

    # ------------------------------------------------------------------ agents

    async def _runs(self, stream: Any) -> None:
        async for events in stream.take_events(self.s.batch_size, within=self.s.batch_within_s):
            await self.runs.batch(events)

    async def _nodes(self, stream: Any) -> None:
        async for events in stream.take_events(self.s.batch_size, within=self.s.batch_within_s):
            await self.nodes.batch(events)

    async def _data(self, stream: Any) -> None:
        async for event in stream.events():
            as_current(event)  # local tables write to the event's partition
            await self.datasets.event(event)

    async def _timer(self) -> None:
        await self.runs.checkpoint(force=self._waiting_for_acks())
        assigned = self.app.consumer.assignment()
        now = str(self.out.clock()).encode()
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
