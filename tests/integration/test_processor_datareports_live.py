"""On the real broker: a data report without a run id reaches every run reading its dataset.

Published the way the README shows (``runwatch.init`` with datasets, then
``runwatch.client.data.report`` without ``run_id``) through the SDK's Kafka
transport to a processor worker; the alerts are read back from ``rw.alerts``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import runwatch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher, default_topics
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef, DeadLetter
from runwatch.testing.harness import Harness

pytestmark = pytest.mark.integration


def test_a_report_without_run_id_reaches_both_runs_of_its_dataset(harness: Harness,
                                                                  tmp_path: Path) -> None:
    harness.start_worker()
    harness.wait_ready()
    topics = {t: harness.topic(t) for t in set(default_topics().values())}
    transport = KafkaTransport(harness.kafka, ProducerSettings(spool_dir=tmp_path / "spool"),
                               name="datareports")
    runs = [runwatch.init("fam", run_id=f"{harness.prefix}{r}", transport=transport,
                          topics=topics, install_hooks=False, capture_lineage=False,
                          strict=True,
                          datasets=[DatasetRef(uri="s3://shared", version="v1")])
            for r in ("A", "B")]
    data.report("s3://shared", "v1", "p=1", {"x": []}, publisher=Publisher(
        transport, kind="sdk", topics=topics), baseline_directory=tmp_path)  # zero rows
    assert transport.flush(30) == 0
    want = {(r.run_id, "rule:zero_rows", "data") for r in runs}

    def got(records) -> set[tuple[str, str, str]]:
        return {(a.run_id, a.detector, a.probable_cause) for a in records
                if isinstance(a, Alert) and a.status == "firing"}

    alerts = harness.collect("rw.alerts", lambda r: got(r) >= want, 90, settle_s=2)
    assert got(alerts) == want, harness.worker_log()
    dead = harness.collect("rw.dlq", lambda r: False, 3)
    assert [d.reason for d in dead if isinstance(d, DeadLetter)] == []
    for r in runs:
        r.finish()
    transport.close(10)
