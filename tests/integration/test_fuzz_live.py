"""Fuzz on the real stack: bad bytes on the broker, hostile labels end to end.

- a live processor worker (:class:`~runwatch.testing.harness.Harness`) reads
  seeded bad values on every telemetry and internal topic, interleaved with a
  good run whose identity is hostile text (control characters, quotes,
  newlines, SQL-ish text, a long family): dead letters on rw.dlq carry
  reasons, the worker stays up, still alerts (the NaN run, then a later run),
  and its alert reaches Alertmanager through the pager with labels it takes,
  bounded in length;
- the real sink against the store: the same kinds of bad bytes are
  dead-lettered with reasons, every good row is stored exactly once (each good
  message is sent twice), and hostile label values published by the SDK
  through Kafka read back from ClickHouse exactly as sent (text that is not
  UTF-8 as U+FFFD).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sinkkit import migrate, table_counts, wait

from runwatch.adapters.kafka import KafkaTransport, ProducerSettings, plain_producer
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.client import init
from runwatch.core.codec import DecodeError, load_codec
from runwatch.core.paging.labels import LABEL_MAX
from runwatch.core.storage.rows import Origin, record_rows
from runwatch.pager.service import Pager, PagerSettings
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings
from runwatch.testing.harness import Harness
from runwatch.testing.hostile import INTERNAL_TOPICS, TELEMETRY_TOPICS, bad_values, good_messages

pytestmark = pytest.mark.integration

TEAM = "ml\n\t'\"; DROP TABLE runs; --\x1b[31m"
FAMILY = "fam-" + "é" * 400


def hostile_identity(msgs: list, codec) -> list:
    """Re-stamp the good run's manifest and job events with hostile team and family."""
    out = []
    for topic, key, value in msgs:
        name, d = codec.decode_dict(value)
        if "team" in d and d.get("team") is not None:
            d["team"] = TEAM
        if "experiment_family" in d and d.get("experiment_family") is not None:
            d["experiment_family"] = FAMILY
        out.append((topic, key, codec.encode_dict(name, d)))
    return out


def test_live_worker_dead_letters_bad_bytes_stays_up_and_pages_clean_labels(
    harness: Harness, stack, tmp_path: Path
) -> None:
    codec = load_codec()
    run_id = f"run-fz-{uuid.uuid4().hex[:6]}\"'\n<x>"
    t0 = int(time.time() * 1000) - 300_000
    goods = hostile_identity(good_messages(run_id, t0, tmp_path), codec)
    rng = random.Random(18)
    bad = bad_values(rng, goods, 40, TELEMETRY_TOPICS + INTERNAL_TOPICS)
    feed = list(goods)
    for _kind, topic, key, value in bad:
        feed.insert(rng.randrange(len(feed) + 1), (topic, key, value))
    undecodable = 0
    for _kind, topic, _key, value in bad:
        try:
            codec.decode(value)
            undecodable += topic in INTERNAL_TOPICS and topic != "rw.internal.data-by-run"
        except DecodeError:
            undecodable += 1
    harness.publish(feed)
    worker = harness.start_worker()
    harness.wait_ready()

    def firing(recs, rid=run_id):
        return [a for a in recs if a.run_id == rid and a.detector == "rule:non_finite"]

    alerts = harness.collect("rw.alerts", lambda r: firing(r), 60)
    (alert,) = firing(alerts)[:1]
    dead = harness.collect("rw.dlq", lambda r: len(r) >= undecodable, 90, settle_s=2)
    assert len(dead) >= undecodable
    assert all(d.reason for d in dead)
    assert {d.topic.removeprefix(harness.prefix) for d in dead} <= {  # held: a run never seen
        *TELEMETRY_TOPICS, *INTERNAL_TOPICS, "rw.internal.held"}
    assert worker.poll() is None, harness.worker_log()

    later = f"run-fz-later-{uuid.uuid4().hex[:6]}"
    harness.publish(good_messages(later, int(time.time() * 1000) - 60_000, tmp_path,
                                  node="fz-node-2"))
    harness.collect("rw.alerts", lambda r: firing(r, later), 60)
    assert worker.poll() is None, harness.worker_log()

    # the alert of the hostile run, through the pager, into Alertmanager
    rules = tmp_path / "routes.yaml"
    rules.write_text(f"receivers:\n  - name: am\n    kind: alertmanager\n"
                     f"    url: {stack.alertmanager_url}\nroute:\n  receiver: am\n")
    pager = Pager(PagerSettings(rules_file=rules, state_dir=tmp_path / "pager",
                                alerts_topic=harness.topic("rw.alerts"),
                                dlq_topic=harness.topic("rw.dlq"),
                                group_id=f"pager-{uuid.uuid4().hex[:8]}"),
                  KafkaSettings(bootstrap_servers=stack.bootstrap_servers))
    thread = threading.Thread(target=pager.run, daemon=True)
    thread.start()
    try:
        def in_am():
            got = httpx.get(f"{stack.alertmanager_url}/api/v2/alerts", timeout=5,
                            params={"filter": "alertname=\"rule:non_finite\""})
            assert got.status_code == 200, got.text
            return [a for a in got.json() if a["labels"].get("run_id", "").startswith(
                run_id.split("\n")[0])]
        (am,) = wait(in_am, 60, "the hostile run's alert in Alertmanager")
    finally:
        pager.stop.set()
        thread.join(30)
    labels = am["labels"]
    assert labels["run_id"] == run_id.replace("\n", "\ufffd")
    assert labels["team"] == TEAM.replace("\n", "\ufffd").replace("\t", "\ufffd").replace(
        "\x1b", "\ufffd")
    assert len(labels["experiment_family"]) == 255 and labels["experiment_family"][238] == "…"
    assert all(len(v) <= LABEL_MAX for v in labels.values())
    assert alert.team == TEAM and alert.experiment_family == FAMILY  # the record keeps them


def decodes(value: bytes) -> bool:
    """Whether a value is a record after all (a bit flip in a field): not bad bytes."""
    try:
        load_codec().decode(value)
    except DecodeError:
        return False
    return True


def _start_sink(stack, topics: dict[str, str], db: str):
    stop = threading.Event()
    sink = Sink(SinkSettings(group_id=f"sink-{uuid.uuid4().hex[:8]}",
                             topics=tuple(topics.values())),
                KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                ClickHouseSettings(url=stack.clickhouse_url, database=db), stop)
    thread = threading.Thread(target=sink.run, daemon=True)
    thread.start()
    return sink, stop, thread


def test_sink_dead_letters_bad_bytes_and_stores_good_rows_once(
    stack, sink_topics: dict[str, str], tmp_path: Path
) -> None:
    codec = load_codec()
    db = f"t_fz_{uuid.uuid4().hex[:10]}"
    client = migrate(stack.clickhouse_url, db)
    goods = good_messages(f"run-fz-{uuid.uuid4().hex[:6]}", int(time.time() * 1000) - 300_000,
                          tmp_path)
    expected: dict[str, int] = {}
    for _t, _k, value in goods:
        for table, _row in record_rows(codec.decode(value), Origin("t", 0, 0)):
            expected[table] = expected.get(table, 0) + 1
    rng = random.Random(5)
    # bytes that decode after all (a bit flip in a field) are records, not bad bytes; a keyless
    # record on the compacted rw.lineage the broker itself refuses
    bad = [b for b in bad_values(rng, goods, 48, TELEMETRY_TOPICS)
           if not decodes(b[3]) and not (b[1] == "rw.lineage" and b[2] is None)]
    producer = plain_producer(KafkaSettings(bootstrap_servers=stack.bootstrap_servers))
    for topic, key, value in goods:
        for _copy in range(2):  # a producer replaying its spool: the same record twice
            producer.produce(sink_topics[topic], key=key, value=value)
    for _kind, topic, key, value in bad:
        producer.produce(sink_topics[topic], key=key, value=value)
    assert producer.flush(30) == 0
    sink, stop, thread = _start_sink(stack, sink_topics, db)
    try:
        tables = sorted(expected)
        wait(lambda: table_counts(client, db, tables) == expected, 50, f"rows {expected}")
        wait(lambda: table_counts(client, db, ["dead_letters"])["dead_letters"] == len(bad), 30,
             "dead letters")
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(60)
    rows = client.query(f"SELECT stage, reason, hex(original) FROM {db}.dead_letters").result_rows
    assert all(stage == "decode" and reason for stage, reason, _o in rows)
    originals = sorted(bytes.fromhex(o) for *_x, o in rows)
    assert originals == sorted(v for *_x, v in bad)


HOSTILE_TEXT = {
    "team": "ml\x00\n\r\t'\"\\; DROP TABLE runwatch.runs; --",
    "family": "f" * 50_000,
    "label": "\x1b[31m\u2028\U0001F525 \"quoted\" 'single'",
    "dataset": "s3://bucket/it's \"here\"\n/part=1",
    "metric": "loss/val\ttab\nline",
}


def test_hostile_labels_from_the_sdk_read_back_from_clickhouse_as_sent(
    stack, sink_topics: dict[str, str]
) -> None:
    db = f"t_fz_{uuid.uuid4().hex[:10]}"
    client = migrate(stack.clickhouse_url, db)
    run_id = f"run-fz-{uuid.uuid4().hex[:6]}'\"\n"
    transport = KafkaTransport(KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                               ProducerSettings(spool_dir=None), name="fz-sdk")
    run = init(HOSTILE_TEXT["family"], team=HOSTILE_TEXT["team"], run_id=run_id,
               labels={"note": HOSTILE_TEXT["label"], "raw": b"n\xffb"},  # type: ignore[dict-item]
               datasets=[HOSTILE_TEXT["dataset"]], transport=transport, topics=sink_topics,
               install_hooks=False, capture_lineage=False)
    for i in range(3):
        run.step(i, loss=1.0, metrics={HOSTILE_TEXT["metric"]: float(i)})
    counters = run.finish()
    assert counters["transport_sent"] == counters["published"], counters
    assert counters["sanitised"] == 1  # the manifest: its bytes label
    sink, stop, thread = _start_sink(stack, sink_topics, db)
    try:
        wait(lambda: table_counts(client, db, ["learning_steps", "run_manifests"])
             == {"learning_steps": 3, "run_manifests": 1}, 50, "the run's rows")
    finally:
        stop.set()
        thread.join(60)
    ((team, family, labels, rid),) = client.query(
        f"SELECT team, experiment_family, labels, run_id FROM {db}.run_manifests").result_rows
    assert (team, family, rid) == (HOSTILE_TEXT["team"], HOSTILE_TEXT["family"], run_id)
    assert labels == {"note": HOSTILE_TEXT["label"], "raw": "n\ufffdb"}
    metrics = client.query(f"SELECT metrics FROM {db}.learning_steps").result_rows
    assert {tuple(m) for (m,) in metrics} == {(HOSTILE_TEXT["metric"],)}
    ((uris,),) = client.query(f"SELECT dataset_uris FROM {db}.run_manifests").result_rows
    assert list(uris) == [HOSTILE_TEXT["dataset"]]
