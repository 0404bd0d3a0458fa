"""Driving a processor worker from tests and benchmarks: topics, worker process, I/O.

Each harness uses its own topic prefix and app id, so state is fresh.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runwatch.adapters.kafka import BatchConsumer, KafkaException, group_lag, plain_producer
from runwatch.adapters.settings import KafkaSettings
from runwatch.adapters.topics import delete_topics_with_prefix, ensure_topics
from runwatch.core.codec import load_codec
from runwatch.core.topics import load_topics

KEY_OF = {"run_id": "run_id", "dataset_uri": "dataset_uri", "node": "node"}


@dataclass
class Harness:
    """Topics under a unique prefix, worker subprocesses and a producer."""

    bootstrap: str
    partitions: int = 4
    prefix: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:8]}.")
    env: dict[str, str] = field(default_factory=dict)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logdir: Path = field(default_factory=lambda: Path("/tmp") / "runwatch-proc-tests")  # noqa: S108

    def __post_init__(self) -> None:
        self.codec = load_codec()
        self.specs = load_topics()
        self.app_id = f"rwp-{self.prefix.rstrip('.')}"
        self.kafka = KafkaSettings(bootstrap_servers=self.bootstrap)
        self.producer = plain_producer(self.kafka)
        self.route = {rec: name for name, spec in self.specs.items() for rec in spec.records
                      if not spec.internal}

    def topic(self, name: str) -> str:
        """Return the prefixed topic name."""
        return self.prefix + name

    def create_topics(self) -> None:
        """Create every topic of the map under the prefix (run topics share ``partitions``)."""
        ensure_topics(self.kafka.client_config(), prefix=self.prefix, partitions=self.partitions)

    def delete_topics(self) -> None:
        """Delete the prefixed topics and the app's internal topics."""
        delete_topics_with_prefix(self.kafka.client_config(), [self.prefix, self.app_id])

    def start_worker(self, **extra_env: str) -> subprocess.Popen[bytes]:
        """Start one worker subprocess (same app id: they share the consumer group)."""
        self.logdir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "RUNWATCH_PROCESSOR_APP_ID": self.app_id,
            "RUNWATCH_PROCESSOR_TOPIC_PREFIX": self.prefix,
            "RUNWATCH_PROCESSOR_PARTITIONS": str(self.partitions),
            "RUNWATCH_PROCESSOR_DATA_DIR": str(self.logdir / "data"),
            "RUNWATCH_PROCESSOR_TIMER_INTERVAL_S": "0.5",
            # scripted runs are replayed as a burst, far faster than real time
            "RUNWATCH_PROCESSOR_CORRELATION_DELAY_MS": "15000",
            **self.env,
            **extra_env,
        }
        log = open(self.logdir / f"{self.app_id}-{len(self.workers)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "runwatch.processor", "worker", "-l", "info"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        self.workers.append(proc)
        return proc

    def wait_ready(self, index: int = -1, timeout_s: float = 60.0) -> None:
        """Wait until a worker has joined its group and is processing.

        Raises:
            RuntimeError: If it exits or is not ready in time (with its log tail).
        """
        proc = self.workers[index]
        idx = index % len(self.workers)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                msg = f"worker exited with {proc.returncode}:\n{self.worker_log(idx)}"
                raise RuntimeError(msg)
            if "Ready" in self.worker_log(idx, tail=None):
                return
            time.sleep(0.3)
        msg = f"worker not ready after {timeout_s} s:\n{self.worker_log(idx)}"
        raise RuntimeError(msg)

    def worker_log(self, index: int = 0, tail: int | None = 4000) -> str:
        """Return (the tail of) a worker's log."""
        path = self.logdir / f"{self.app_id}-{index}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[-tail:] if tail else text

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Signal a worker and wait for it."""
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def stop_all(self) -> None:
        """Stop every worker this harness started."""
        for proc in self.workers:
            self.kill(proc, signal.SIGTERM)

    def produce(self, records: Iterable[Any], *, raw: list[tuple[str, bytes]] = ()) -> int:  # type: ignore[assignment]
        """Publish records to their topics (key per the topic map), plus raw (topic, bytes)."""
        n = 0
        for rec in records:
            name = self.route[rec.AVRO_NAME]
            key_field = self.specs[name].key
            key = getattr(rec, key_field) if key_field else None
            self.producer.produce(self.topic(name), key=key, value=self.codec.encode(rec))
            n += 1
            if n % 1000 == 0:
                self.producer.poll(0)
        for topic, value in raw:
            self.producer.produce(self.topic(topic), value=value)
        self.producer.flush(30)
        return n

    def publish(self, messages: Iterable[tuple[str, bytes | str | None, bytes]]) -> int:
        """Publish producers' messages ``(topic, key, value)``, as a CaptureTransport keeps them."""
        n = 0
        for topic, key, value in messages:
            self.producer.produce(self.topic(topic), key=key, value=value)
            n += 1
            if n % 1000 == 0:
                self.producer.poll(0)
        self.producer.flush(30)
        return n

    def wait_messages(self, name: str, n: int, timeout_s: float) -> int:
        """Wait until a topic holds at least ``n`` messages (any format); return the count.

        For internal topics, whose values are not Avro records: e.g. the allocation
        changes on ``rw.internal.job-by-node`` that the node agents must have before a
        burst of backdated node samples (:mod:`runwatch.processor.nodes` replays only a
        node's last few samples to an allocation that arrives after them).
        """
        consumer = BatchConsumer(self.kafka, f"reader-{uuid.uuid4().hex[:8]}", [self.topic(name)])
        seen = 0
        deadline = time.monotonic() + timeout_s
        try:
            while seen < n and time.monotonic() < deadline:
                seen += sum(1 for m in consumer.poll_batch(500, timeout=0.5) if m.error() is None)
        finally:
            consumer.close()
        return seen

    def wait_consumed(self, name: str, timeout_s: float) -> int:
        """Wait until the workers' group has committed a topic up to its end; return the lag.

        A committed offset means the worker processed the messages before it: e.g. the
        node agents applied every allocation change on ``rw.internal.job-by-node`` before
        a burst of backdated samples is sent (a fixed sleep was too short on a loaded
        machine). Returns 0 once caught up, else the messages still uncommitted at the
        deadline (-1: the broker did not answer).
        """
        lag = -1
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                lag = group_lag(self.kafka, self.app_id, self.topic(name))
            except KafkaException:
                lag = -1
            if lag == 0:
                break
            time.sleep(0.5)
        return lag

    def collect(self, name: str, until: Any, timeout_s: float, settle_s: float = 0.0) -> list[Any]:
        """Read decoded records from a topic until ``until(records)`` holds, then ``settle_s``."""
        consumer = BatchConsumer(self.kafka, f"reader-{uuid.uuid4().hex[:8]}", [self.topic(name)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        settle_end: float | None = None
        try:
            while time.monotonic() < deadline:
                for m in consumer.poll_batch(500, timeout=0.5):
                    value = m.value()
                    if m.error() is None and value is not None:
                        out.append(self.codec.decode(value))
                if settle_end is None and until(out):
                    settle_end = time.monotonic() + settle_s
                if settle_end is not None and time.monotonic() >= settle_end:
                    break
        finally:
            consumer.close()
        return out
