"""Lineage and stage events on the real stack, published once, checked several ways.

The SDK (``runwatch.client.data.stage``, ``runwatch.init``/``run.*``) publishes
through Kafka: two stages (ingest → clean) writing the dataset version a run
reads; the run started, resumed with the same lineage, then re-published with
another dataset version and learning rate. A live processor worker raises
``rule:lineage_mutated`` once on ``rw.alerts`` (the resume does not), and the
real sink stores ``stage_events``, every manifest version (``lineage_versions``)
and the alert, so the canned ``run_chain.sql`` answers the chain source →
transforms → dataset version → run → checkpoints → artifacts → gate → registry.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from sinkkit import migrate, table_counts, wait

from runwatch.adapters.clickhouse import make_client
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.client import data, init
from runwatch.core.records import DatasetRef
from runwatch.core.topics import load_topics
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings
from runwatch.testing.harness import Harness

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def column(n: int, shift: float) -> dict[str, list[float]]:
    rng = np.random.default_rng(11)
    return {"x": (rng.normal(0, 1, n) + shift).round(6).tolist()}


def test_lineage_and_stages_from_the_sdk_through_the_stack(harness: Harness, stack,
                                                           tmp_path: Path) -> None:
    uid = uuid.uuid4().hex[:8]
    db = f"t_lin_{uid}"
    client = migrate(stack.clickhouse_url, db)
    public = [n for n, s in load_topics().items() if not s.internal]
    topics = {n: harness.topic(n) for n in public}
    kafka = KafkaSettings(bootstrap_servers=stack.bootstrap_servers)

    def transport(name: str) -> KafkaTransport:
        return KafkaTransport(kafka, ProducerSettings(spool_dir=None), name=name)

    wall = int(time.time() * 1000) - 120_000
    raw, clean, run_id = f"s3://raw-{uid}", f"s3://d-{uid}", f"run-lin-{uid}"
    pub = Publisher(transport("lin-data"), kind="sdk", topics=topics)
    data.report(clean, "v0", None, column(500, 0.0), baseline="ref", publisher=pub,
                baseline_directory=tmp_path, now_ms=wall - 90_000)  # the reference
    with data.stage("ingest", code_version="1.4", inputs=["kafka://clicks@p0-7"],
                    output=f"{raw}@7", window=(wall - 3_600_000, wall - 60_000),
                    publisher=pub, now_ms=wall - 60_000) as st:
        st.rows_in, st.rows_out = 1000, 1000
    with data.stage("clean", code_version="git:1a2b", inputs=[f"{raw}@7"], output=f"{clean}@v1",
                    publisher=pub, now_ms=wall - 30_000, baseline_directory=tmp_path) as st:
        st.rows_in = 1000
        st.compare(column(900, 3.0), baseline="ref")  # drifted from the reference
    assert pub.transport.close(15).failed == 0

    def start(at: int, version: str, lr: float):
        return init("fam", run_id=run_id, transport=transport(f"lin-{at}"), topics=topics,
                    install_hooks=False, capture_lineage=False, clock=lambda: at,
                    config={"lr": lr}, seed_policy="fixed:1",
                    datasets=[DatasetRef(uri=clean, version=version)])

    first = start(wall, "v1", 0.1)
    first.checkpoint("s3://ck/100", step=100, duration_ms=800.0, now_ms=wall + 5_000)
    first.finish()
    resumed = start(wall + 10_000, "v1", 0.1)  # the same lineage: no alert
    resumed.artifact("s3://models/m1", sha256="ab" * 32, registry_status="registered",
                     now_ms=wall + 15_000)
    resumed.gate("eval", "pass", reasons=["val_acc 0.91 >= 0.9"], now_ms=wall + 14_000)
    resumed.finish()
    start(wall + 20_000, "v2", 0.2).finish()  # re-published with another lineage

    stop = threading.Event()
    sink = Sink(SinkSettings(group_id=f"sink-{uid}", topics=tuple(topics.values())), kafka,
                ClickHouseSettings(url=stack.clickhouse_url, database=db), stop)
    thread = threading.Thread(target=sink.run, daemon=True)
    thread.start()
    worker = harness.start_worker()
    try:
        harness.wait_ready()

        def mutated(recs):
            return [a for a in recs if a.run_id == run_id
                    and a.detector == "rule:lineage_mutated" and a.status == "firing"]

        alerts = mutated(harness.collect("rw.alerts", mutated, 90, settle_s=3))
        wait(lambda: table_counts(client, db, ["stage_events", "run_manifests", "alerts",
                                               "artifacts", "gate_decisions", "checkpoints"])
             == {"stage_events": 2, "run_manifests": 3, "alerts": 1, "artifacts": 1,
                 "gate_decisions": 1, "checkpoints": 1}, 60, "the rows of the chain")
        assert worker.poll() is None, harness.worker_log()
    finally:
        stop.set()
        thread.join(60)

    # rw.alerts: one alert (the resume did not raise one), what changed old -> new
    (alert,) = alerts
    assert alert.probable_cause == "data"
    assert alert.labels["lineage_changed"] == "datasets,config_hash"
    assert {e.indicator: e.detail for e in alert.evidence}["lineage.datasets"] == (
        f"{clean}@v1 → {clean}@v2")

    # every lineage version stays on record, the first one first
    versions = client.query(
        f"SELECT lineage_hash, emissions, toUnixTimestamp64Milli(first_seen) FROM "
        f"{db}.lineage_versions WHERE run_id = '{run_id}' ORDER BY first_seen").result_rows
    assert [(n, at) for _h, n, at in versions] == [(2, wall), (1, wall + 20_000)]
    assert versions[0][0] == alert.labels["lineage_first"]
    assert versions[1][0] == alert.labels["lineage_hash"]
    ((rg,),) = client.query(f"SELECT uniqExact(repeat_group) FROM {db}.run_manifests "
                            f"WHERE run_id = '{run_id}'").result_rows
    assert rg == 2  # another dataset version and learning rate: not a repeat
    (db_alert,) = client.query(f"SELECT probable_cause, labels['lineage_changed'] FROM "
                               f"{db}.alerts WHERE run_id = '{run_id}'").result_rows
    assert db_alert == ("data", "datasets,config_hash")

    # the stages, as the SDK published them
    stages = client.query(
        f"SELECT stage, input_uris, input_versions, dataset_version, rows_in, rows_out, "
        f"outcome, drifted_features FROM {db}.stage_events ORDER BY ts").result_rows
    assert stages == [("ingest", ["kafka://clicks"], ["p0-7"], "7", 1000, 1000, "succeeded", []),
                      ("clean", [raw], ["7"], "v1", 1000, 900, "succeeded", ["x"])]

    # the chain, by the canned query
    sql = (ROOT / "schemas" / "clickhouse" / "queries" / "run_chain.sql").read_text()
    scoped = make_client(ClickHouseSettings(url=stack.clickhouse_url, database=db))
    chain = scoped.query(sql.replace("run-5-0", run_id)).result_rows
    links = [row[0] for row in chain]
    assert links == ["source", "transform", "dataset", "dataset", "run", "run", "checkpoint",
                     "artifact", "gate", "registry"]
    assert chain[0][2] == f"ingest -> {raw}@7" and chain[1][2] == f"clean -> {clean}@v1"
    assert "drift vs ref: x" in chain[1][3]
