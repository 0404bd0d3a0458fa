"""Registry control on the live stack, round 16: what the processor pages on, the SLO counts.

SDK runs publish registry events through Kafka and a real sink into a database of the
test's own on the shared store; ``runwatch slo status --json`` then reads them. A data
pipeline registering a dataset version in its catalog (``run.artifact(..., "dataset",
registry_status="registered")``) is no release: the processor's
``rule:registry_without_gate`` leaves it alone, and the SLO counted it a bad event and
spent the budget. A model put in ``Production `` (a template's trailing space) without a
gate pages, and the SLO did not count it at all. Controls: a gated model, and a gated
model whose registry spells its kind ``Model``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sinkkit import ROOT, SinkProc, delete_topics, make_topics, migrate, wait

import runwatch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import KafkaSettings
from runwatch.client.emit import emit_records
from runwatch.sim.drivers import SharedTransport

pytestmark = pytest.mark.integration
H = 3_600_000
SLOS = """apiVersion: openslo/v1
kind: SLO
metadata: {{name: registry-{fam}}}
spec:
  owner: ml
  indicator: {{spec: {{kind: registry_control, family: {fam}}}}}
  timeWindow: [{{duration: 30d, isRolling: true}}]
  objectives: [{{target: 0.99}}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {{name: retained-{fam}}}
spec:
  owner: ml
  indicator: {{spec: {{kind: evaluation_retained, family: {fam}-ret, grace: 10m}}}}
  timeWindow: [{{duration: 30d, isRolling: true}}]
  objectives: [{{target: 0.9}}]
"""


def _run(shared: SharedTransport, topics: dict[str, str], run_id: str, family: str, start: int, *,
         uri: str, kind: str, registry_status: str, gate: bool) -> None:
    run = runwatch.init(family, team="ml", run_id=run_id, strict=True, transport=shared,
                        topics=topics, install_hooks=False, capture_lineage=False,
                        clock=lambda: start)
    if gate:
        run.gate("release", "pass", now_ms=start + 20 * 60_000)
    run.artifact(uri, kind, sha256="ab" * 32, registry_status=registry_status,
                 now_ms=start + 30 * 60_000)
    run.finish("succeeded", now_ms=start + 40 * 60_000)


def _trained(shared: SharedTransport, topics: dict[str, str], run_id: str, family: str, start: int,
             *, outcome: str, evaluated: bool) -> None:
    """An SDK run, then the Slurm epilog's end (exit 0: ``succeeded``, no family) 5 s later."""
    run = runwatch.init(family, team="ml", run_id=run_id, strict=True, transport=shared,
                        topics=topics, install_hooks=False, capture_lineage=False,
                        clock=lambda: start)
    end = start + 40 * 60_000
    if evaluated:
        run.validation(100, {"val_loss": 0.4}, now_ms=end - 60_000)
        run.gate("release", "pass", now_ms=end - 30_000)
    run.finish(outcome, now_ms=end)
    hook = Publisher(shared, kind="hook", topics=topics)
    assert not emit_records(hook, [{
        "type": "job-state", "run_id": run_id, "state": "succeeded", "reason": "exit 0:0",
        "attempt": 1, "event_id": f"{run_id}-end-1", "emitted_at_ms": end + 5000}]).errors


def _count(client: Any, sql: str) -> int:
    return int(client.query(sql).result_rows[0][0])


@pytest.fixture(scope="module")
def live(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("slo-r16")
    fam = f"r16reg{uuid.uuid4().hex[:8]}"
    db = f"t_r16slo_{uuid.uuid4().hex[:8]}"
    client = migrate(stack.clickhouse_url, db)
    topics = make_topics(stack.bootstrap_servers)
    sink = SinkProc(stack.bootstrap_servers, topics, stack.clickhouse_url, db, tmp / "sink.log")
    sink.start()
    transport = KafkaTransport(KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                               ProducerSettings(spool_dir=tmp / "spool"), name="sdk")
    shared = SharedTransport(transport)
    now = int(time.time() * 1000)
    runs = {  # run -> (artifact uri, kind, registry status, gated)
        f"{fam}-gated": ("s3://models/gated", "model", "registered", True),
        f"{fam}-kindcase": ("s3://models/kindcase", "Model", "registered", True),
        f"{fam}-catalog": ("s3://lake/clicks@v7", "dataset", "registered", False),
        f"{fam}-prod": ("s3://models/prod", "model", "Production ", False),
    }
    try:
        for i, (rid, (uri, kind, reg, gated)) in enumerate(sorted(runs.items())):
            _run(shared, topics, rid, fam, now - (6 - i) * H, uri=uri, kind=kind,
                 registry_status=reg, gate=gated)
        ret = {f"{fam}-ret-ok": ("succeeded", True), f"{fam}-ret-failed": ("failed", False),
               f"{fam}-ret-missing": ("succeeded", False)}
        for i, (rid, (outcome, evaluated)) in enumerate(sorted(ret.items())):
            _trained(shared, topics, rid, f"{fam}-ret", now - (9 - i) * H, outcome=outcome,
                     evaluated=evaluated)
        assert transport.flush(60) == 0
        wait(lambda: _count(client, f"SELECT count() FROM {db}.job_events "
                                    "WHERE run_id LIKE '%-ret-%'") == 9,
             90, "the job events in ClickHouse")
        wait(lambda: _count(client, f"SELECT count() FROM {db}.artifacts") == 4,
             90, "the registry events in ClickHouse")
        wait(lambda: _count(client, f"SELECT count() FROM {db}.gate_decisions") == 3,
             90, "the gate decisions in ClickHouse")
        wait(lambda: _count(client, f"SELECT uniqExact(run_id) FROM {db}.run_manifests") == 7,
             90, "the manifests in ClickHouse")
        slo_file = tmp / "slos.yaml"
        slo_file.write_text(SLOS.format(fam=fam))
        env = {**os.environ, "CLICKHOUSE_URL": stack.clickhouse_url, "CLICKHOUSE_DATABASE": db,
               "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
               "RUNWATCH_PRODUCER_SPOOL_DIR": str(tmp / "slo-spool")}
        yield {"fam": fam, "db": db, "env": env, "file": slo_file}
    finally:
        transport.close(10)
        sink.stop()
        delete_topics(stack.bootstrap_servers, list(topics.values()))
        client.command(f"DROP DATABASE IF EXISTS {db}")


def _status(live: dict[str, Any], name: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "runwatch", "slo", "status", "--json", "--file", str(live["file"])],
        env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    by_name = {s["objective"]: s for s in json.loads(out.stdout)}
    return dict(by_name[f"{name}-{live['fam']}"])


def test_registry_control_counts_the_models_the_processor_pages_on(live: dict[str, Any],
                                                                    ) -> None:
    st = _status(live, "registry")
    fam = live["fam"]
    bad = {r for e in st["bad_events"] for r in e["run_ids"]}
    # the catalog's dataset is no event; the ungated model in "Production " is the bad one
    assert bad == {f"{fam}-prod"}, st["bad_events"]
    assert (st["good"], st["valid"], st["state"]) == (2, 3, "exhausted")
    assert "without a passing or approved gate" in st["bad_events"][0]["detail"]


def test_a_failed_run_the_epilog_called_succeeded_owes_no_evaluation(
        live: dict[str, Any]) -> None:
    st = _status(live, "retained")
    fam = live["fam"]
    # ret-ok kept its results and gate; ret-missing did not; ret-failed failed (its SDK's
    # own end), whatever the epilog read from the script's exit status
    assert {r for e in st["bad_events"] for r in e["run_ids"]} == {f"{fam}-ret-missing"}
    assert (st["good"], st["valid"]) == (1, 2), st


def test_the_invalid_budget_share_is_one_error_line(live: dict[str, Any],
                                                    tmp_path: Path) -> None:
    f = tmp_path / "slos.yaml"
    f.write_text(live["file"].read_text().split("---")[0]
                 + "  alertPolicy:\n    burnRates: [{budget: 0, longWindow: 6h}]\n")
    out = subprocess.run([sys.executable, "-m", "runwatch", "slo", "status", "--file", str(f)],
                         env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error: {f}:10: spec.alertPolicy.burnRates[0].budget: must "
                                  "be a share of the budget above 0 (e.g. 0.05), got '0'")
