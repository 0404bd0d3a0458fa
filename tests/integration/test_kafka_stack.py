"""The local broker is genuine Apache Kafka: topics, groups, offsets, restarts."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import psutil
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from runwatch.stack.manager import Stack

pytestmark = pytest.mark.integration

N_MESSAGES = 10_000
PARTITIONS = 8
_COORDINATOR_LOADING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


def _produce(bootstrap: str, topic: str, keys: range, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                         "enable.idempotence": True})
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in keys:
        producer.produce(topic, key=f"run-{i % 97}", value=f"{tag}:{i}", on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def _consume(bootstrap: str, topic: str, group: str, expect: int, *,
             commit: bool = True, idle_s: float = 5.0) -> list[tuple[int, int, str]]:
    """Read until ``expect`` messages arrived (then ``idle_s`` more to catch extras)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    got: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 60
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=0.5)
            for msg in batch:
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.offset(), msg.value().decode()))
            if batch and commit:
                consumer.commit(asynchronous=False)
            if len(got) >= expect:
                quiet_until = quiet_until or time.monotonic() + (idle_s if expect else 0)
                if time.monotonic() >= quiet_until:
                    break
            elif expect == 0 and quiet_until is None:
                quiet_until = time.monotonic() + idle_s
            if expect == 0 and quiet_until is not None and time.monotonic() >= quiet_until:
                break
    finally:
        consumer.close()
    return got


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets (retrying while the coordinator loads after a restart)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                return {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=30)}
            except KafkaException as exc:
                err = exc.args[0]
                if not (err.retriable() or err.code() in _COORDINATOR_LOADING) or (
                    time.monotonic() > deadline
                ):
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def test_broker_is_apache_kafka(stack) -> None:
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    meta = admin.list_topics(timeout=10)
    assert len(meta.brokers) == 1
    if stack.local is not None:
        record = stack.local.running("kafka")
        assert record is not None, "kafka is healthy but not recorded by the local stack"
        assert "kafka.Kafka" in psutil.Process(record.pid).cmdline()


@pytest.mark.parametrize("partitions", [1, PARTITIONS])
def test_create_topic_with_partitions(stack, fresh_topic, partitions: int) -> None:
    topic = fresh_topic(partitions=partitions)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    meta = admin.list_topics(topic=topic, timeout=10)
    assert topic in meta.topics
    assert len(meta.topics[topic].partitions) == partitions


def test_produce_consume_commit_restart_and_reread(private_kafka: Stack) -> None:
    bootstrap = private_kafka.settings.bootstrap_servers
    topic = f"restart.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    group = f"g-{uuid.uuid4().hex[:8]}"
    _produce(bootstrap, topic, range(N_MESSAGES), "a")

    first = _consume(bootstrap, topic, group, N_MESSAGES, idle_s=1.0)
    values = [v for _, _, v in first]
    assert len(values) == N_MESSAGES
    assert set(values) == {f"a:{i}" for i in range(N_MESSAGES)}
    by_part: dict[int, list[int]] = defaultdict(list)
    for part, offset, _ in first:
        by_part[part].append(offset)
    assert len(by_part) == PARTITIONS, "keys must spread over all 8 partitions"
    assert all(offs == sorted(offs) for offs in by_part.values()), "per-partition order"
    committed = _committed(bootstrap, topic, group)
    assert committed == {p: len(offs) for p, offs in by_part.items()}

    pid_before = private_kafka.running("kafka").pid
    restarted = private_kafka.restart("kafka")
    assert restarted.ok, restarted.failed
    assert private_kafka.running("kafka").pid != pid_before

    # Committed offsets survived the restart: the group resumes at the end...
    assert _committed(bootstrap, topic, group) == committed
    _produce(bootstrap, topic, range(N_MESSAGES, N_MESSAGES + 100), "b")
    resumed = _consume(bootstrap, topic, group, 100, idle_s=2.0)
    assert sorted(v for _, _, v in resumed) == sorted(f"b:{i}" for i in range(N_MESSAGES,
                                                                             N_MESSAGES + 100))
    # ...and the data survived too: a new group reads everything from the earliest offset.
    again = _consume(bootstrap, topic, f"{group}-again", N_MESSAGES + 100,
                     commit=False, idle_s=1.0)
    assert len(again) == N_MESSAGES + 100
    assert {v for _, _, v in again} == set(values) | {v for _, _, v in resumed}
