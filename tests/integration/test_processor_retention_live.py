"""On the real broker, both runtimes: a long-ended run's state is retired with the defaults.

Run A (backdated 8 hours, ended after a minute) and run B (live, still running) read one
dataset, published through the SDK's Kafka transport, B on A's partitions. The input's
event time is then B's, more than 6 hours past A's end: the worker's timer retires A
(it logs it, and the changelog tombstone goes through the runtime's table). A zero-row
report of the dataset then pages B only, with no dead letter: A left the data agent's
index.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import runwatch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher, default_topics
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef, DeadLetter
from runwatch.processor.partitioning import partition_for
from runwatch.testing.harness import Harness

pytestmark = pytest.mark.integration

HOUR = 3_600_000


@pytest.mark.parametrize("runtime", ["faust", "plain"])
def test_a_run_ended_hours_ago_is_retired_and_gets_no_more_reports(
        harness: Harness, tmp_path: Path, runtime: str) -> None:
    harness.env["RUNWATCH_PROCESSOR_RUNTIME"] = runtime
    harness.start_worker()
    harness.wait_ready()
    topics = {t: harness.topic(t) for t in set(default_topics().values())}

    def transport_of(name: str) -> KafkaTransport:  # run.finish closes its run's transport
        return KafkaTransport(harness.kafka, ProducerSettings(spool_dir=tmp_path / name),
                              name=f"retention-{name}")

    transport = transport_of("pipeline")
    ds = [DatasetRef(uri="s3://retained", version="v1")]
    # B on A's partitions: with every input active, the horizon is the least watermark of
    # them, so B's events move it at once (else it moves once A's inputs idle for a minute)
    ids = {"A": f"{harness.prefix}A"}
    part = partition_for(ids["A"].encode(), harness.partitions, "consistent")
    ids["B"] = next(b for b in (f"{harness.prefix}B{k}" for k in range(1000))
                    if partition_for(b.encode(), harness.partitions, "consistent") == part)
    t0 = int(time.time() * 1000) - 8 * HOUR
    a = runwatch.init("fam", run_id=ids["A"], transport=transport_of("A"), topics=topics,
                      install_hooks=False, capture_lineage=False, strict=True, datasets=ds,
                      clock=lambda: t0)
    for i in range(5):
        a.step(i, loss=1.0, now_ms=t0 + (i + 1) * 10_000, step_ms=10_000.0, samples=32)
    assert a.finish("succeeded", now_ms=t0 + 60_000)["transport_failed"] == 0
    b = runwatch.init("fam", run_id=ids["B"], transport=transport_of("B"), topics=topics,
                      install_hooks=False, capture_lineage=False, strict=True, datasets=ds)
    for i in range(5):
        b.step(i, loss=1.0, step_ms=100.0, samples=32)
    assert b.publisher.transport.flush(30) == 0

    deadline = time.monotonic() + 120
    while "retired 1 run states" not in harness.worker_log(tail=None):
        assert time.monotonic() < deadline, harness.worker_log()
        time.sleep(1.0)

    data.report("s3://retained", "v1", "p=late", {"x": []}, publisher=Publisher(
        transport, kind="sdk", topics=topics), baseline_directory=tmp_path)  # zero rows
    assert transport.flush(30) == 0

    def zero_rows(records: list) -> set[str]:
        return {r.run_id for r in records if isinstance(r, Alert) and r.status == "firing"
                and r.detector == "rule:zero_rows"}

    alerts = harness.collect("rw.alerts", lambda r: ids["B"] in zero_rows(r), 60, settle_s=3)
    assert zero_rows(alerts) == {ids["B"]}, harness.worker_log()
    dead = harness.collect("rw.dlq", lambda r: False, 2)
    assert [d.reason for d in dead if isinstance(d, DeadLetter)] == []
    assert "Traceback" not in harness.worker_log(tail=None)
    b.finish()
    transport.close(10)
