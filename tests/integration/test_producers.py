"""Producers against a genuine Kafka broker.

The outage test needs to stop and start a broker, so it runs its own
single-node KRaft broker (the stack's Kafka, started through
:class:`runwatch.stack.manager.Stack` with a private state directory and
ephemeral ports) instead of the shared one other tests use.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

import runwatch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import KafkaSettings
from runwatch.adapters.spool import orphaned
from runwatch.agent.service import NodeAgent
from runwatch.core.codec import load_codec
from runwatch.stack.manager import Stack
from runwatch.stack.settings import StackSettings
from runwatch.testing.nvml_double import FakeNvml8

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateKafka:
    def __init__(self, state: Path) -> None:
        self.stack = Stack(
            StackSettings(state_dir=state, kafka_port=_free_port(), controller_port=_free_port())
        )
        self.bootstrap = self.stack.url("kafka")

    def start(self) -> None:
        res = self.stack.up(services=["kafka"])
        if not res.ok:
            pytest.fail(f"private kafka did not start: {res.failed} {self.stack.log_tail('kafka')}")

    def stop(self) -> None:
        self.stack.down(services=["kafka"])

    def topics(self, n: int, partitions: int = 3) -> list[str]:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        names = [f"test.prod.{uuid.uuid4().hex[:10]}" for _ in range(n)]
        futs = admin.create_topics(
            [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in names]
        )
        for f in futs.values():
            f.result(timeout=30)
        return names


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafka]:
    k = PrivateKafka(tmp_path_factory.mktemp("kafka-state"))
    k.start()
    try:
        yield k
    finally:
        k.stop()


def consume_all(bootstrap: str, topics: list[str], expect: int, timeout: float = 60) -> list:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe(topics)
    out: list = []
    deadline = time.monotonic() + timeout
    idle = 0
    while time.monotonic() < deadline:
        msgs = c.consume(1000, 1.0)
        got = [m for m in msgs if m.error() is None]
        out.extend(got)
        idle = 0 if got else idle + 1
        if len(out) >= expect and idle >= 3:
            break
    c.close()
    return out


def _settings(tmp_path: Path, **kw) -> ProducerSettings:
    base = dict(spool_dir=tmp_path / "spool", message_timeout_ms=5000, probe_timeout_s=1.0)
    base.update(kw)
    return ProducerSettings(**base)


def test_training_loop_survives_20s_broker_outage(kafka: PrivateKafka, tmp_path: Path) -> None:
    lineage_t, job_t, learn_t = kafka.topics(3)
    transport = KafkaTransport(
        KafkaSettings(bootstrap_servers=kafka.bootstrap), _settings(tmp_path), name="acceptance"
    )
    run = runwatch.init(
        "acceptance",
        team="ml",
        config={"lr": 0.05},
        transport=transport,
        topics={"rw.lineage": lineage_t, "rw.exec.job": job_t, "rw.learning": learn_t},
        install_hooks=False,
        strict=True,
    )
    produced: dict[str, int] = {}
    pub = run.publisher
    orig = pub.publish

    def spy(records):
        recs = list(records)
        for r in recs:
            produced[r.event_id] = r.seq
        return orig(recs)

    pub.publish = spy  # type: ignore[method-assign]

    # a small numpy training loop: linear regression by SGD, ~30 s for 2,000 steps
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8))
    w_true = rng.normal(size=8)
    y = x @ w_true
    w = np.zeros(8)
    outage = {"stopped": 0.0, "started": 0.0}
    modes: list[str] = []

    def outage_thread() -> None:
        time.sleep(3)
        kafka.stop()
        outage["stopped"] = time.monotonic()
        time.sleep(20)
        kafka.start()
        outage["started"] = time.monotonic()

    th = threading.Thread(target=outage_thread)
    th.start()
    for step in range(2000):
        with run.data_wait():
            idx = rng.integers(0, 256, size=32)
        xb, yb = x[idx], y[idx]
        grad = 2 * xb.T @ (xb @ w - yb) / len(idx)
        w -= 0.05 * grad
        loss = float(np.mean((xb @ w - yb) ** 2))
        run.step(
            step,
            loss=loss,
            metrics={"w0": float(w[0]), "gnorm": float(np.linalg.norm(grad))},
            lr=0.05,
            grad_norm=float(np.linalg.norm(grad)),
            samples=32,
        )
        time.sleep(0.015)
        if step % 100 == 0:
            modes.append(transport.mode)
    th.join()
    counters = run.finish("succeeded", timeout=90)
    assert "spool" in modes, "the outage never made the transport spool"
    assert counters["transport_spooled"] > 0 and counters["transport_replayed"] > 0
    assert counters["transport_in_spool"] == 0 and counters["transport_failed"] == 0
    assert counters["transport_evicted"] == 0

    msgs = consume_all(kafka.bootstrap, [lineage_t, job_t, learn_t], len(produced))
    codec = load_codec()
    seen: list[tuple[str, int, str, int]] = []
    for m in msgs:
        rec = codec.decode(m.value())
        seen.append((m.topic(), m.partition(), rec.event_id, rec.seq))
    ids = collections.Counter(e for _, _, e, _ in seen)
    missing = set(produced) - set(ids)
    assert not missing, f"{len(missing)} events never reached Kafka"
    assert set(ids) <= set(produced)
    duplicates = sum(n - 1 for n in ids.values())
    print(
        f"\nproduced={len(produced)} consumed={len(seen)} duplicates={duplicates} "
        f"transport={ {k: v for k, v in counters.items() if k.startswith('transport_')} }"
    )
    # duplicates only come from records in flight when the transport tripped
    # (or delivered behind a failed one in a replay batch): all are counted
    # (or sent again after an error that cannot tell whether the broker stored them)
    assert duplicates <= counters["transport_duplicates"] + counters["transport_in_doubt"]
    # order per producer (seq) within each partition, first occurrences
    by_part: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    first: set[str] = set()
    for topic, part, eid, seq in seen:
        if eid in first:
            continue
        first.add(eid)
        by_part[(topic, part)].append(seq)
    for key, seqs in by_part.items():
        assert seqs == sorted(seqs), f"order broken in {key}"


def test_misspelt_topic_is_named_and_blocks_nothing(
    kafka: PrivateKafka, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A topic the broker lacks (auto-create off) is an error naming it, not an outage."""
    lineage_t, job_t = kafka.topics(2)
    typo = f"test.prod.typo-{uuid.uuid4().hex[:8]}"
    transport = KafkaTransport(
        KafkaSettings(bootstrap_servers=kafka.bootstrap),
        _settings(tmp_path, message_timeout_ms=2000),
        name="typo",
    )
    run = runwatch.init(
        "typo", transport=transport, install_hooks=False, capture_lineage=False,
        topics={"rw.lineage": lineage_t, "rw.exec.job": job_t, "rw.learning": typo},
    )
    t0 = int(time.time() * 1000)
    for i in range(20):
        run.step(i, loss=1.0, now_ms=t0 + i, step_ms=10.0, loader_wait_ms=1.0)
    counters = run.finish(timeout=60)
    # the 20 LearningSteps are refused and counted; nothing waits in the spool
    assert counters["transport_missing_topic"] == 20
    assert counters["transport_in_spool"] == 0
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any(repr(typo) in e and "does not exist" in e for e in errors), errors
    # everything else arrives: manifest, running, 20 StepTimings, succeeded
    msgs = consume_all(kafka.bootstrap, [lineage_t, job_t], 23, timeout=60)
    names = collections.Counter(type(load_codec().decode(m.value())).__name__ for m in msgs)
    assert names == {"RunManifest": 1, "JobEvent": 2, "StepTiming": 20}


def test_a_job_that_exits_during_an_outage_is_sent_by_the_next_job(
    kafka: PrivateKafka, tmp_path: Path
) -> None:
    """Each SDK process spools under its own run id: what a job left when it ended with the
    broker away was never replayed (no later process used that name) and stayed on disk."""
    lineage_t, job_t, learn_t = kafka.topics(3)
    topics = {"rw.lineage": lineage_t, "rw.exec.job": job_t, "rw.learning": learn_t}
    producer = _settings(tmp_path, message_timeout_ms=1000)
    common = dict(install_hooks=False, capture_lineage=False, topics=topics, producer=producer)
    old = runwatch.init("outage", run_id="run-old", **common,
                        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"))  # nothing there
    for i in range(30):
        old.step(i, loss=1.0)
    left = old.finish(timeout=2)["transport_in_spool"]
    assert left == 63  # manifest, running, 30 x (LearningStep, StepTiming), succeeded
    new = runwatch.init("next", run_id="run-new", **common,
                        kafka=KafkaSettings(bootstrap_servers=kafka.bootstrap))
    new.step(0, loss=1.0)
    c = new.finish(timeout=30)
    assert c["orphans_replayed"] == 63 and c["transport_in_spool"] == 0
    codec = load_codec()
    recs = [codec.decode(m.value()) for m in consume_all(
        kafka.bootstrap, [lineage_t, job_t, learn_t], 63 + 5, timeout=60)]
    olds = [r for r in recs if r.run_id == "run-old"]
    assert len({r.event_id for r in olds}) == 63
    assert [j.state for j in olds if type(j).__name__ == "JobEvent"] == ["running", "succeeded"]
    assert orphaned(tmp_path / "spool", "sdk-", "none")[0] == []  # no spool holds a record
    assert not list((tmp_path / "spool").glob("*/*.seg"))


def test_agent_publishes_host_samples_without_nvml(kafka: PrivateKafka, tmp_path: Path) -> None:
    (topic,) = kafka.topics(1)
    env = dict(
        os.environ,
        KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap,
        RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path / "spool"),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runwatch",
            "agent",
            "--interval",
            "0.2",
            "--count",
            "3",
            "--node",
            "n-test",
            "--topic",
            topic,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "NVML unavailable" in proc.stderr
    msgs = consume_all(kafka.bootstrap, [topic], 3, timeout=30)
    recs = [load_codec().decode(m.value()) for m in msgs]
    assert len(recs) == 3
    assert all(r.node == "n-test" and r.gpus == () and r.mem_total_bytes > 0 for r in recs)
    assert all(m.key() == b"n-test" for m in msgs)


def test_agent_with_nvml_double_attributes_processes(kafka: PrivateKafka, tmp_path: Path) -> None:
    (topic,) = kafka.topics(1)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=dict(os.environ, RUNWATCH_RUN_ID=run_id),
    )
    try:
        fake = FakeNvml8()
        fake.attach_process(2, child.pid)
        fake.attach_process(3, child.pid)
        transport = KafkaTransport(
            KafkaSettings(bootstrap_servers=kafka.bootstrap), _settings(tmp_path), name="agent-test"
        )
        agent = NodeAgent(
            Publisher(transport, kind="agent", topics={"rw.exec.node": topic}),
            node="gpu-node-1",
            nvml=Nvml.open(fake),
        )
        for _ in range(2):
            agent.tick()
        c = transport.close(30)
        assert c.sent == 2
    finally:
        child.kill()
        child.wait()
    msgs = consume_all(kafka.bootstrap, [topic], 2, timeout=30)
    recs = [load_codec().decode(m.value()) for m in msgs]
    assert len(recs) == 2
    for r in recs:
        assert len(r.gpus) == 8
        assert r.run_id == run_id
        attributed = {g.index: [p.run_id for p in g.processes] for g in r.gpus if g.processes}
        assert attributed == {2: [run_id], 3: [run_id]}


@pytest.mark.parametrize("commit_upto", [0, 4, 10])
def test_batch_consumer_commits_explicitly(
    kafka: PrivateKafka, tmp_path: Path, commit_upto
) -> None:
    from runwatch.adapters.kafka import BatchConsumer

    (topic,) = kafka.topics(1, partitions=1)
    t = KafkaTransport(
        KafkaSettings(bootstrap_servers=kafka.bootstrap), _settings(tmp_path), name="consumer-test"
    )
    for i in range(10):
        t.produce(topic, "k", f"v{i}".encode())
    assert t.close(30).sent == 10
    group = f"g-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(bootstrap_servers=kafka.bootstrap)
    c1 = BatchConsumer(settings, group, [topic])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        got.extend(c1.poll_batch(100, 1.0))
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(10)]
    c1.commit(got[:commit_upto])
    c1.close()
    c2 = BatchConsumer(settings, group, [topic])
    rest: list = []
    deadline = time.monotonic() + 15
    while len(rest) < 10 - commit_upto and time.monotonic() < deadline:
        rest.extend(c2.poll_batch(100, 1.0))
    c2.close()
    assert [m.value() for m in rest] == [f"v{i}".encode() for i in range(commit_upto, 10)]


def _cli(stack, tmp_path: Path, *args: str,
         stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=stack.bootstrap_servers,
               RUNWATCH_PRODUCER_SPOOL_DIR=str(tmp_path / "spool"))
    env.pop("RUNWATCH_PRODUCER_MESSAGE_TIMEOUT_MS", None)  # the default 10 s: the case seen
    return subprocess.run([sys.executable, "-m", "runwatch", *args], input=stdin, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_short_agent_run_to_a_misspelt_topic_names_it_and_fails(stack, tmp_path: Path) -> None:
    """``runwatch agent --count 2 --topic rw.exec.nod`` stopped after 10 s, before its
    records timed out (10 s) and the topic was found missing: it exited 0 with them left in
    the spool and no line naming the topic (a longer run did say so, and exited 1)."""
    typo = f"rw.exec.nod-{uuid.uuid4().hex[:8]}"
    p = _cli(stack, tmp_path, "agent", "--count", "2", "--interval", "0.2", "--node",
             "n-typo", "--topic", typo)
    assert p.returncode == 1, p.stderr
    assert f"topic {typo!r} does not exist on the broker" in p.stderr
    assert "missing_topic=2" in p.stderr and "left_in_spool=0" in p.stderr


def test_emit_says_how_many_records_were_delivered(stack, tmp_path: Path) -> None:
    """``emit --stdin`` printed "published 1, rejected 0" before delivery, also of a record
    the broker then refused (a misspelt --topic-prefix); it now says what was delivered."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    line = json.dumps({"type": "JobEvent", "run_id": "emit-x", "state": "queued"}) + "\n"
    p = _cli(stack, tmp_path, "emit", "--stdin", "--topic-prefix", prefix, stdin=line + "oops\n")
    assert p.returncode == 1, p.stderr
    assert ("handed 1 to the producer, delivered 0, rejected 1, refused by the broker 1: "
            "topic missing for 1") in p.stderr, p.stderr
    assert "published" not in p.stderr
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    topic = f"{prefix}rw.exec.job"
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    try:
        p = _cli(stack, tmp_path / "2", "emit", "--stdin", "--topic-prefix", prefix, stdin=line)
        assert p.returncode == 0, p.stderr
        assert "handed 1 to the producer, delivered 1, rejected 0" in p.stderr, p.stderr
    finally:
        admin.delete_topics([topic])[topic].result(30)
