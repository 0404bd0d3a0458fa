"""Settings of the stream processor (env prefix ``RUNWATCH_PROCESSOR_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.core.stream.eventtime import MAX_AHEAD_MS, MIN_EVENT_MS
from runwatch.resources import ownership_file


class ProcessorSettings(BaseSettings):
    """Knobs of ``runwatch processor`` (env prefix ``RUNWATCH_PROCESSOR_``).

    Attributes:
        runtime: What drives the worker's parts: ``faust`` (faust-streaming's
            agents, tables and timer) or ``plain`` (one confluent-kafka consumer
            with changelog-backed dicts, :mod:`runwatch.processor.plain`); both
            use the same consumer group, changelog topics and formats.
        app_id: Faust app id (consumer group and changelog topic prefix).
        data_dir: Faust data directory.
        topic_prefix: Prefix of every topic name (tests use a unique one).
        partitions: Partition count of the run-keyed topics (``run_partitions``).
        replication_factor: Replication factor of the topics the worker creates
            (tick topic, changelogs, internal topics); 0 (default) takes it from
            the cluster: 1 on a single broker, else ``min(3, brokers)``.
        partitioner: How producers pick partitions from keys: ``consistent``
            (librdkafka's default, CRC32) or ``murmur2`` (Java/aiokafka).
        image_allow_list: Allowed image prefixes; empty disables the rule.
        image_missing: With an allow-list set, what a run that reports no image
            (a plain script outside a container) gets: ``allow`` (default: the
            allow-list governs which container images run, and such a run
            runs none), ``warn`` (a warning alert, ``rule:image_missing``) or
            ``deny`` (a critical alert, for sites where every job must run
            in an approved container).
        required_gates: Gates (safety tests, evaluations: ``GateDecision.gate``)
            a model artifact must have passed before it is reported registered
            or promoted; empty (default) disables ``rule:missing_gate``.
        registry_control: ``rule:registry_without_gate``: a hard alert when an
            artifact is registered without a passing or approved gate decision
            for its run (default on).
        gate_wait_ms: How long a registration waits (the processor's clock) for
            its run's gate decision before registry control fires.
        lateness_ms: Lateness tolerated behind a run's watermark.
        min_event_ms: Records stamped before this (epoch ms) are dead-lettered (0: off).
        max_ahead_ms: Records stamped this far ahead of the processor's clock are
            dead-lettered (0: off).
        hold_ms: How long events of unseen runs are held.
        ended_retention_ms: How long (event time past its last event) an ended run's
            state is kept before it is retired: deleted from the ``runstate`` table,
            its firing alerts resolved, its dataset subscriptions dropped (0: for ever).
        silent_retention_ms: The same for a run that never ended and sent nothing.
        release_retention_ms: The same for an ended run with a gate decision or a model
            artifact (a later registration or gate check is judged against it).
        timer_interval_s: Period of the time-driven rules.
        stall_k: Stall bound in median step times.
        stall_min_ms: Floor of the stall bound.
        data_wait_ms: Bound on waiting for a manifest dataset's data report.
        schema_fail_share: Share of a data report's rows that may fail the
            dataset's schema before ``rule:schema_failures`` fires.
        window_ms: Evidence correlation window.
        correlation_delay_ms: How long a learning symptom waits for causal evidence.
        per_run_cap: Most distinct alert conditions one run may fire (critical ones fire past it).
        ownership_file: Who owns an alert by probable cause (and family, team,
            dataset); fills ``Alert.owner`` (default: the packaged
            ``infra/pager/ownership.yaml``).
        cooldown_ms: Quiet time of a resolved alert key.
        session_timeout_s: Group session timeout: how soon a dead worker's
            partitions move to the others.
        save_interval_s: Checkpoint period of run states that only high-rate
            telemetry changed (their events are acked after it); 0 saves every
            run on every batch.
        unacked_max: Events whose ack waits for a checkpoint before one is forced.
        batch_size: ``stream.take`` batch bound.
        batch_within_s: ``stream.take`` wait bound.
        stream_buffer_maxsize: Faust's per-stream buffer (events) before the
            consumer pauses fetching.
        max_poll_records: Most records one consumer fetch hands over (None: no bound).
        max_fetch_bytes: Most bytes one consumer fetch may return.
        producer_linger_ms: How long the worker's producer waits to fill a batch.
        sections_log_s: How often a worker logs where its time went (INFO).
        web_enabled: Serve faust's web interface (off by default: several
            workers may share a host).
        web_port: Port of the web interface when enabled (``RUNWATCH_PROCESSOR_WEB_PORT``).
        web_bind: Address the web interface binds to when enabled.
        fast_drain: Deliver fetched messages inline instead of through four
            asyncio tasks each (:mod:`runwatch.processor.fastdrain`).
        event_loop: ``uvloop`` (when installed) or ``asyncio``.
        gc_threshold: CPython's generation-0 collection threshold (0 keeps
            Python's default of 700). A batch allocates tens of thousands of
            objects that live until its checkpoint; at 700 they are promoted
            and force full collections over every run's detectors (about 0.25 s
            each, a fifth of a busy worker's CPU).

    """

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_PROCESSOR_", extra="ignore")

    runtime: Literal["faust", "plain"] = "faust"
    app_id: str = "runwatch-processor"
    data_dir: Path = Path(".runwatch/processor")
    topic_prefix: str = ""
    partitions: int = 8
    replication_factor: int = Field(default=0, ge=0)
    partitioner: Literal["consistent", "murmur2"] = "consistent"
    image_allow_list: list[str] = Field(default_factory=list)
    image_missing: Literal["allow", "warn", "deny"] = "allow"
    required_gates: list[str] = Field(default_factory=list)
    registry_control: bool = True
    gate_wait_ms: int = Field(default=60_000, ge=0)
    lateness_ms: int = 60_000
    min_event_ms: int = Field(default=MIN_EVENT_MS, ge=0)
    max_ahead_ms: int = Field(default=MAX_AHEAD_MS, ge=0)
    hold_ms: int = 30_000
    ended_retention_ms: int = Field(default=21_600_000, ge=0)
    silent_retention_ms: int = Field(default=604_800_000, ge=0)
    release_retention_ms: int = Field(default=2_592_000_000, ge=0)
    timer_interval_s: float = 1.0
    stall_k: float = 10.0
    stall_min_ms: int = 600_000
    data_wait_ms: int = 600_000
    schema_fail_share: float = Field(default=0.01, ge=0.0, le=1.0)
    window_ms: int = 1_800_000
    correlation_delay_ms: int = 5_000
    per_run_cap: int = 20
    ownership_file: Path = Field(default_factory=ownership_file)
    cooldown_ms: int = 600_000
    session_timeout_s: float = 10.0
    save_interval_s: float = Field(default=2.0, ge=0)
    unacked_max: int = Field(default=50_000, ge=1)
    batch_size: int = 2000
    batch_within_s: float = 0.2
    stream_buffer_maxsize: int = 16384
    max_poll_records: int | None = None
    max_fetch_bytes: int = 16 * 1024 * 1024
    producer_linger_ms: float = Field(default=5.0, ge=0)
    sections_log_s: float = 10.0
    web_enabled: bool = False
    web_port: int = Field(default=6066, ge=1, le=65535)
    web_bind: str = "127.0.0.1"
    fast_drain: bool = True
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    gc_threshold: int = Field(default=50_000, ge=0)

    def topic(self, name: str) -> str:
        """Return the deployed name of a default topic name."""
        return f"{self.topic_prefix}{name}"
