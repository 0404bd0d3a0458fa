"""`runwatch stack up --brokers 3`, short: three brokers, RF 3 with min.insync.replicas=2, one
broker killed with SIGKILL, an acks=all producer still succeeds.

Runs its own cluster (own state directory, ports 29092/29192/29292 and controllers
at +2) and stops it afterwards; about 45 s on a 2-core machine. The ports lie below
Linux's ephemeral range (32768-60999): a port in it can be held, for a moment, by any
client connection the other tests open (a 49092 was, once: "port 49092 is already in
use by an unknown process").
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from runwatch.adapters.topics import ensure_topics
from runwatch.core.topics import load_topics
from runwatch.stack.manager import Stack
from runwatch.stack.settings import StackSettings

pytestmark = pytest.mark.integration


def _described(admin: AdminClient, res: ConfigResource, within_s: float = 30.0) -> dict:
    """The topic's configs, once the broker asked knows the new topic.

    Each broker learns of a created topic from the controller's metadata log; one
    that has not yet answers UNKNOWN_TOPIC_OR_PART (seen under load)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return admin.describe_configs([res])[res].result()
        except KafkaException as exc:
            if (exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART
                    or time.monotonic() > deadline):
                raise
            time.sleep(0.5)


def test_three_brokers_survive_one_killed(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", brokers=3, kafka_port=29092,
                             controller_port=29094, store_port=29123,
                             alertmanager_port=29093, stop_timeout_s=15)
    stack = Stack(settings)
    result = stack.up(services=["kafka"])
    try:
        assert result.ok, result.failed
        assert set(result.started) == {"kafka", "kafka-2", "kafka-3"}
        conf = settings.kafka_client_config("admin")
        spec = load_topics()["rw.exec.job"]
        assert ensure_topics(conf, prefix="smoke.", specs=[spec]) == ["smoke.rw.exec.job"]
        admin = AdminClient(conf)
        meta = admin.list_topics("smoke.rw.exec.job", timeout=10)
        assert len(meta.brokers) == 3
        parts = meta.topics["smoke.rw.exec.job"].partitions
        assert all(len(p.replicas) == 3 for p in parts.values())
        res = ConfigResource("topic", "smoke.rw.exec.job")
        config = _described(admin, res)
        assert config["min.insync.replicas"].value == "2"

        victim = stack.running("kafka-2")
        assert victim is not None
        os.kill(victim.pid, signal.SIGKILL)
        producer = Producer({**conf, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 30000})
        delivered: list[object] = []
        for i in range(50):
            producer.produce("smoke.rw.exec.job", f"v{i}".encode(), f"k{i}".encode(),
                             on_delivery=lambda err, _msg: delivered.append(err))
        t0 = time.monotonic()
        assert producer.flush(40) == 0, "records still in flight with one broker down"
        assert delivered == [None] * 50, delivered
        assert time.monotonic() - t0 < 40
        rows = {r.name: r.state for r in stack.status()}
        assert rows["kafka-2"] == "stopped" and rows["kafka"] == "healthy"
    finally:
        stack.down()
