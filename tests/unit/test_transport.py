"""Transport behaviour against a producer test double (no broker)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from runwatch.adapters.kafka import KafkaTransport, ProducerSettings


class _Msg:
    def __init__(self, topic, value, key):
        self._t, self._v, self._k = topic, value, key

    def topic(self):
        return self._t

    def value(self):
        return self._v


class FakeProducer:
    """Producer test double: a queue, a broker switch, delivery on poll."""

    def __init__(self, conf, broker):
        self.conf = conf
        self.broker = broker
        self.queue: list = []

    def produce(self, topic, value, key=None, on_delivery=None):
        if len(self.queue) >= self.broker.capacity:
            raise BufferError("full")
        self.queue.append((_Msg(topic, value, key), on_delivery))

    def poll(self, timeout=0):
        if self.broker.up:
            q, self.queue = self.queue, []
            for m, cb in q:
                if self.broker.topics is not None and m.topic() not in self.broker.topics:
                    cb(KafkaError(KafkaError._MSG_TIMED_OUT), m)  # librdkafka's only sign
                    continue
                if m.value() in self.broker.reject:
                    cb(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), m)
                    continue
                self.broker.log.append(m.value())
                cb(None, m)
        elif self.broker.requeue:  # stored, the connection dropped: queued again for a retry
            for m, _cb in self.queue:
                if m.value() not in self.broker.log:
                    self.broker.log.append(m.value())
            self.conf["error_cb"](KafkaError(KafkaError._ALL_BROKERS_DOWN))
        elif self.broker.fail_now:
            q, self.queue = self.queue, []
            for m, cb in q:
                if self.broker.ack_lost:  # stored, then the broker stopped before answering
                    self.broker.log.append(m.value())
                cb(KafkaError(KafkaError._MSG_TIMED_OUT), m)
        else:
            time.sleep(min(timeout, 0.01))
        return 0

    def flush(self, timeout=0):
        self.poll(0)
        return len(self.queue)

    def purge(self, in_queue=True, in_flight=True, blocking=True):
        q, self.queue = self.queue, []
        for m, cb in q:
            cb(KafkaError(KafkaError._PURGE_QUEUE), m)

    def list_topics(self, timeout=None):
        if not self.broker.up:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        if self.broker.topics is None:
            return {}  # a metadata answer that tells nothing about topics
        return SimpleNamespace(topics=dict.fromkeys(self.broker.topics), brokers={1: "b"})

    def __len__(self):
        return len(self.queue)


class Broker:
    def __init__(self, up=True, capacity=10_000):
        self.up = up
        self.fail_now = False
        self.ack_lost = False
        self.requeue = False
        self.capacity = capacity
        self.log: list[bytes] = []
        self.reject: set[bytes] = set()
        self.topics: set[str] | None = None  # None: metadata lists nothing, all accepted


def make(tmp_path: Path, broker: Broker, **kw) -> KafkaTransport:
    s = ProducerSettings(spool_dir=tmp_path, replay_batch=7, **kw)
    t = KafkaTransport(
        settings=s, name="t", producer_factory=lambda conf: FakeProducer(conf, broker)
    )
    t._next_try = 0
    return t


def vals(n, start=0):
    return [f"{i:06d}".encode() for i in range(start, start + n)]


def test_config_is_safe(tmp_path: Path) -> None:
    b = Broker()
    t = make(tmp_path, b, compression="zstd")
    conf = t._producer.conf
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True
    assert conf["compression.type"] == "zstd" and conf["linger.ms"] <= 10
    t.close(1)


@pytest.mark.parametrize("metadata", [False, True])
@pytest.mark.parametrize("outage", ["delivery_timeout", "all_brokers_down", "queue_full"])
def test_outage_spools_then_replays_in_order(tmp_path: Path, outage, metadata) -> None:
    b = Broker(capacity=5 if outage == "queue_full" else 10_000)
    b.topics = {"rw.x"} if metadata else None  # an outage is never a missing topic
    t = make(tmp_path, b)
    sent = vals(300)
    for v in sent[:50]:
        t.produce("rw.x", "k", v)
    assert t.flush(5) == 0
    b.up = False
    for v in sent[50:120]:
        t.produce("rw.x", "k", v)
    if outage == "delivery_timeout":
        b.fail_now = True
    elif outage == "all_brokers_down":
        t._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    deadline = time.time() + 5
    while t.mode != "spool" and time.time() < deadline:
        time.sleep(0.01)
    assert t.mode == "spool"
    for v in sent[120:200]:
        t.produce("rw.x", "k", v)
    b.fail_now = False
    b.up = True
    t._next_try = 0
    for v in sent[200:]:
        t.produce("rw.x", "k", v)
    assert t.flush(10) == 0
    c = t.close(1)
    # every record delivered, in order, duplicates only if counted
    assert sorted(set(b.log)) == sent
    assert len(b.log) - len(sent) == c.duplicates
    firsts = list(dict.fromkeys(b.log))
    assert firsts == sent
    assert c.spooled > 0 and c.replayed > 0
    assert c.sent + c.replayed == len(sent)
    assert c.failed == 0 and c.evicted == 0 and c.in_spool == 0


def test_spool_survives_process_restart(tmp_path: Path) -> None:
    b = Broker(up=False)
    t = make(tmp_path, b)
    t._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    for v in vals(40):
        t.produce("rw.x", None, v)
    c = t.close(0.2)
    assert c.in_spool == 40 and c.failed == 0
    b.up = True
    t2 = make(tmp_path, b)  # finds the spool; its thread may replay it at once (no mode check)
    assert t2.flush(10) == 0
    c2 = t2.close(1)
    assert b.log == vals(40) and c2.replayed == 40 and c2.in_spool == 0


@pytest.mark.parametrize("bad", [[b"000003"], [b"000000", b"000009"], []])
def test_non_retriable_is_failed_not_spooled(tmp_path: Path, bad) -> None:
    b = Broker()
    b.reject = set(bad)
    t = make(tmp_path, b)
    for v in vals(10):
        t.produce("rw.x", None, v)
    assert t.flush(5) == 0
    c = t.close(1)
    assert c.failed == len(bad) and c.spooled == 0 and c.sent == 10 - len(bad)
    assert b.log == [v for v in vals(10) if v not in bad]


def test_duplicate_from_inflight_is_counted(tmp_path: Path) -> None:
    b = Broker(up=False)
    t = make(tmp_path, b)
    t.produce("rw.x", None, b"a")
    prod = t._producer
    inflight = prod.queue.pop()  # on the wire: survives the purge
    t._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    b.up = True
    inflight[1](None, inflight[0])  # the broker did get it
    b.log.append(b"a")
    t._next_try = 0
    assert t.flush(5) == 0
    c = t.close(1)
    assert b.log == [b"a", b"a"] and c.duplicates == 1 and c.replayed == 1


def test_full_spool_evicts_and_reports(tmp_path: Path) -> None:
    b = Broker(up=False)
    t = make(tmp_path, b, spool_max_bytes=2000, spool_segment_bytes=300)
    t._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    for v in vals(500):
        t.produce("rw.x", None, v)
    c = t.close(0.1)
    assert c.evicted > 0 and c.evicted + c.in_spool == 500


def test_unwritable_spool_dir_degrades_never_crashes(tmp_path: Path, caplog) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    b = Broker(up=False)
    t = make(f, b)
    t._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    for v in vals(10):
        t.produce("rw.x", None, v)
    b.up = True
    t._next_try = 0
    assert t.flush(5) == 0
    c = t.close(1)
    assert "DEGRADED" in caplog.text and b.log == vals(10) and c.replayed == 10


def test_missing_topic_is_named_refused_and_blocks_nothing(tmp_path: Path, caplog) -> None:
    b = Broker()
    b.topics = {"rw.x"}
    t = make(tmp_path, b)
    sent = vals(30)
    typo = [v for i, v in enumerate(sent) if i % 3 == 1]
    for v in sent:
        t.produce("rw.typo" if v in typo else "rw.x", None, v)
    assert t.flush(20) == 0  # nothing left behind a missing topic
    t.produce("rw.typo", None, b"later")  # refused at once, never spooled
    assert t.flush(1) == 0
    c = t.close(1)
    good = [v for v in sent if v not in typo]
    assert list(dict.fromkeys(b.log)) == good  # every other record, in order
    assert len(b.log) - len(good) == c.duplicates
    assert c.missing_topic == len(typo) + 1 and c.failed == len(typo) + 1
    assert c.in_spool == 0 and c.sent + c.replayed == len(good)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "'rw.typo' does not exist" in errors[0]
    assert "missing topics: rw.typo" in caplog.text  # the close line names it too


def test_a_missing_topic_that_appears_is_sent_again(tmp_path: Path) -> None:
    b = Broker()
    b.topics = {"rw.x"}
    t = make(tmp_path, b, missing_topic_recheck_s=0.05)
    t.produce("rw.new", None, b"early")
    assert t.flush(20) == 0
    assert t.counters().missing_topic == 1
    b.topics.add("rw.new")
    deadline = time.monotonic() + 10
    while "rw.new" in t._missing and time.monotonic() < deadline:
        time.sleep(0.02)
    t.produce("rw.new", None, b"late")
    assert t.flush(10) == 0
    c = t.close(1)
    assert b.log == [b"late"] and c.missing_topic == 1 and c.sent == 1


@pytest.mark.parametrize("outage", ["ack_lost", "requeue"])
def test_records_the_broker_may_have_stored_are_counted_in_doubt(tmp_path: Path,
                                                                 outage: str) -> None:
    """``ack_lost``: the broker stored records, then stopped before answering (delivery
    errors). ``requeue``: librdkafka queues a record again for a retry when its connection
    drops; the trip's purge then answers ``_PURGE_QUEUE`` for it, though the broker may
    have stored the first attempt."""
    b = Broker()
    t = make(tmp_path, b)
    sent = vals(60)
    for v in sent[:20]:
        t.produce("rw.x", "k", v)
    assert t.flush(5) == 0
    b.up = False
    b.fail_now = b.ack_lost = outage == "ack_lost"
    b.requeue = outage == "requeue"
    for v in sent[20:40]:
        t.produce("rw.x", "k", v)
    deadline = time.time() + 5
    while t.mode != "spool" and time.time() < deadline:
        time.sleep(0.01)
    assert t.mode == "spool"
    b.up, b.fail_now, b.ack_lost, b.requeue = True, False, False, False
    t._next_try = 0
    for v in sent[40:]:
        t.produce("rw.x", "k", v)
    assert t.flush(10) == 0
    c = t.close(1)
    assert sorted(set(b.log)) == sent and list(dict.fromkeys(b.log)) == sent
    extra = len(b.log) - len(sent)
    assert extra > 0 and c.duplicates == 0  # no client can see these copies...
    assert extra <= c.duplicates + c.in_doubt  # ...but they are not unaccounted
    assert c.failed == 0 and c.in_spool == 0
