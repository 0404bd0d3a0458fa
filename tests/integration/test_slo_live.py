"""SLOs on the live stack: SDK runs → Kafka → the sink → ClickHouse → ``runwatch slo``.

One module, one publication: 20 runs of a family with a 2-hour training
window (3 of them overrun), published through ``runwatch.init``/``run.finish``
with explicit times, land through a real sink in a fresh database; then
``runwatch slo serve`` runs as a process against it. Checked:

* ``runwatch slo status --json`` shows SLI 17/20 and the budget consumed;
* exactly one SLO alert for the objective on ``rw.alerts``, with the three bad
  runs as evidence;
* a registry push without a gate, published while the evaluator runs, raises
  the registry-control alert in the first evaluation round after it is stored.
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
from confluent_kafka import Consumer
from sinkkit import ROOT, SinkProc, Store, delete_topics, make_topics, migrate

import runwatch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import KafkaSettings
from runwatch.client import DatasetRef
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.sim.drivers import SharedTransport

pytestmark = pytest.mark.integration
H = 3_600_000
WINDOW_SLO = "window-{fam}"
REGISTRY_SLO = "registry-{fam}"
SLOS = """apiVersion: openslo/v1
kind: SLO
metadata: {{name: window-{fam}}}
spec:
  owner: ml
  indicator: {{spec: {{kind: training_window, family: {fam}, maxDuration: 2h}}}}
  timeWindow: [{{duration: 30d, isRolling: true}}]
  objectives: [{{target: 0.95}}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {{name: registry-{fam}}}
spec:
  owner: ml
  indicator: {{spec: {{kind: registry_control, family: {fam}-reg}}}}
  timeWindow: [{{duration: 30d, isRolling: true}}]
  objectives: [{{target: 0.99}}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {{name: queued-{fam}}}
spec:
  owner: ml
  indicator: {{spec: {{kind: training_window, family: {fam}-q, maxDuration: 2h}}}}
  timeWindow: [{{duration: 30d, isRolling: true}}]
  objectives: [{{target: 0.9}}]
---
apiVersion: openslo/v1
kind: SLO
metadata: {{name: retried-{fam}}}
spec:
  owner: ml
  indicator: {{spec: {{kind: training_window, family: {fam}-retry, maxDuration: 1h}}}}
  timeWindow: [{{duration: 30d, isRolling: true}}]
  objectives: [{{target: 0.9}}]
"""


def _run(shared: SharedTransport, topics: dict[str, str], run_id: str, family: str, start: int,
         end: int, *, artifact: str | None = None, gate: bool = False,
         queued_ms: int | None = None) -> None:
    run = runwatch.init(family, team="ml", run_id=run_id, strict=True, transport=shared,
                        topics=topics, install_hooks=False, capture_lineage=False,
                        clock=lambda: start)
    if queued_ms is not None:
        run.job_state("queued", now_ms=queued_ms)
    if gate:
        run.gate("release", "pass", now_ms=end - 2000)
    if artifact:
        run.artifact(artifact, "model", sha256="ab" * 32, registry_status="registered",
                     now_ms=end - 1000)
    run.finish("succeeded", now_ms=end)


def _count(client: Any, sql: str) -> int:
    return int(client.query(sql).result_rows[0][0])


def _wait(what: str, check: Any, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def live(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("slo")
    fam = f"slofam{uuid.uuid4().hex[:8]}"
    db = f"t_{uuid.uuid4().hex[:10]}"
    store = Store(tmp / "chdb")  # a store of our own, as the sink's tests use
    store.start()
    client = migrate(store.url, db)
    topics = make_topics(stack.bootstrap_servers)
    sink = SinkProc(stack.bootstrap_servers, topics, store.url, db, tmp / "sink.log")
    sink.start()
    transport = KafkaTransport(KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                               ProducerSettings(spool_dir=tmp / "spool"), name="sdk")
    shared = SharedTransport(transport)
    now = int(time.time() * 1000)
    bad = {f"{fam}-r{i:02d}" for i in (3, 9, 15)}
    for i in range(20):
        rid = f"{fam}-r{i:02d}"
        start = now - 30 * H + i * H
        _run(shared, topics, rid, fam, start, start + (H * 5 // 2 if rid in bad else H))
    _run(shared, topics, f"{fam}-gated", f"{fam}-reg", now - 3 * H, now - 2 * H,
         artifact="s3://models/gated", gate=True)
    # queued 50 min before it ran (the scheduler's event), then 100 min running: within 2 h
    _run(shared, topics, f"{fam}-q1", f"{fam}-q", now - 4 * H, now - 4 * H + 100 * 60_000,
         queued_ms=now - 4 * H - 50 * 60_000)
    # attempt 1 fails 10 minutes in, the job is requeued and attempt 2 runs from 15 minutes
    # to 40 (a 1-hour limit); and a job cancelled in the queue (the scheduler's hooks)
    retried = now - 6 * H
    first = runwatch.init(f"{fam}-retry", team="ml", run_id=f"{fam}-retried", strict=True,
                          transport=shared, topics=topics, install_hooks=False,
                          capture_lineage=False, clock=lambda: retried, attempt=1)
    first.finish("failed", reason="NCCL timeout", now_ms=retried + 10 * 60_000)
    again = runwatch.init(f"{fam}-retry", team="ml", run_id=f"{fam}-retried", strict=True,
                          transport=shared, topics=topics, install_hooks=False,
                          capture_lineage=False, clock=lambda: retried + 15 * 60_000, attempt=2)
    again.finish("succeeded", now_ms=retried + 40 * 60_000)
    hook = Publisher(shared, kind="hook", topics=topics)
    assert not emit_records(hook, [
        {"type": "job-state", "run_id": f"{fam}-cancelq", "state": state,
         "experiment_family": f"{fam}-retry", "emitted_at_ms": at}
        for state, at in (("queued", now - 5 * H), ("cancelled", now - 5 * H + 30 * 60_000))
    ]).errors
    assert transport.flush(60) == 0
    _wait("the runs' job events in ClickHouse",
          lambda: _count(client, f"SELECT count() FROM {db}.job_events FINAL") == 51)
    slo_file = tmp / "slos.yaml"
    slo_file.write_text(SLOS.format(fam=fam))
    env = {**os.environ, "CLICKHOUSE_URL": store.url, "CLICKHOUSE_DATABASE": db,
           "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
           "RUNWATCH_PRODUCER_SPOOL_DIR": str(tmp / "slo-spool")}
    log = tmp / "slo.log"
    serve = subprocess.Popen(
        [sys.executable, "-m", "runwatch", "slo", "serve", "--file", str(slo_file),
         "--interval", "2", "--topic", topics["rw.alerts"]],
        env=env, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    ctx = {"fam": fam, "db": db, "client": client, "topics": topics, "env": env, "bad": bad,
           "file": slo_file, "log": log, "shared": shared, "now": now, "retried": retried}
    try:
        _wait("the first evaluation round", lambda: _count(
            client, f"SELECT count() FROM {db}.slo_points WHERE objective = 'window-{fam}'") > 0)
        # a registry push without a gate, while the evaluator runs
        _run(shared, topics, f"{fam}-ungated", f"{fam}-reg", now - H, now - 60_000,
             artifact="s3://models/ungated")
        assert transport.flush(60) == 0
        _wait("the ungated artifact in ClickHouse", lambda: _count(
            client, f"SELECT count() FROM {db}.artifacts WHERE run_id = '{fam}-ungated'") == 1)
        ctx["stored_ms"] = int(time.time() * 1000)
        _wait("the registry-control round", lambda: _count(
            client, f"SELECT count() FROM {db}.slo_points WHERE objective = 'registry-{fam}' "
                    f"AND state = 'exhausted'") > 0)
        ctx["alerts"] = _alerts(stack.bootstrap_servers, topics["rw.alerts"], 2)
        yield ctx
    finally:
        serve.terminate()
        serve.wait(30)
        transport.close(10)
        sink.stop()
        delete_topics(stack.bootstrap_servers, list(topics.values()))
        store.stop()


def _alerts(bootstrap: str, topic: str, want: int, linger_s: float = 6.0) -> list[Any]:
    """Read the alerts topic from its start until ``want`` came, then ``linger_s`` more."""
    codec = load_codec()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + 90
    until: float | None = None
    try:
        while time.monotonic() < deadline and (until is None or time.monotonic() < until):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append(codec.decode(msg.value()))
            if len(out) >= want and until is None:
                until = time.monotonic() + linger_s
    finally:
        consumer.close()
    return out


def test_status_shows_17_of_20_and_the_budget_consumed(live) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "runwatch", "slo", "status", "--json", "--file", str(live["file"])],
        env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    by_name = {s["objective"]: s for s in json.loads(out.stdout)}
    window = by_name[f"window-{live['fam']}"]
    assert (window["good"], window["valid"]) == (17, 20)
    assert window["sli"] == pytest.approx(0.85)
    # 3 bad runs against a budget of 5 % of 20 = 1 event: three budgets spent
    assert window["budget_consumed"] == pytest.approx(3.0)
    assert window["budget_left"] == pytest.approx(-2.0)
    assert window["state"] == "exhausted"
    assert {r for e in window["bad_events"] for r in e["run_ids"]} == live["bad"]
    assert all("over the limit" in e["detail"] for e in window["bad_events"])


def test_one_slo_alert_with_the_bad_runs_as_evidence(live) -> None:
    mine = [a for a in live["alerts"] if a.detector == f"slo:window-{live['fam']}"]
    assert len(mine) == 1, [(a.detector, a.status) for a in live["alerts"]]
    alert = mine[0]
    assert alert.status == "firing" and alert.severity == "critical" and alert.run_id is None
    assert alert.team == "ml" and alert.experiment_family == live["fam"]
    assert {e.detail.split(":")[0].removeprefix("run ") for e in alert.evidence} == live["bad"]
    assert alert.labels["bad_runs"] == ",".join(sorted(live["bad"]))


def test_registry_push_without_a_gate_alerts_in_the_next_round(live) -> None:
    db, client, fam = live["db"], live["client"], live["fam"]
    rows = client.query(
        f"SELECT toUnixTimestamp64Milli(evaluated_at), state, bad_runs FROM {db}.slo_points "
        f"WHERE objective = 'registry-{fam}' ORDER BY evaluated_at").result_rows
    after = [r for r in rows if r[0] >= live["stored_ms"]]
    # the first round evaluated after the artifact was stored already counts it
    assert after and after[0][1] == "exhausted" and list(after[0][2]) == [f"{fam}-ungated"]
    before = [r for r in rows if r[0] < live["stored_ms"]]
    assert before and before[0][1] == "ok"  # the gated registration alone: 1/1 good
    mine = [a for a in live["alerts"] if a.detector == f"slo:registry-{fam}"]
    assert len(mine) == 1 and mine[0].probable_cause == "artifact"
    assert mine[0].emitted_at_ms in {r[0] for r in rows if r[1] == "exhausted"}
    assert "without a passing or approved gate" in mine[0].evidence[0].detail


def test_invalid_file_is_one_error_line(live, tmp_path: Path) -> None:
    bad = tmp_path / "slos.yaml"
    bad.write_text(live["file"].read_text().replace("maxDuration: 2h", "maxDuration: 2 hours"))
    out = subprocess.run([sys.executable, "-m", "runwatch", "slo", "evaluate", "--file", str(bad)],
                         env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error: {bad}:6: spec.indicator.spec.maxDuration: bad "
                                  "duration '2 hours' (use e.g. 30s, 15m, 2h, 1d)")


def test_the_shipped_example_evaluates_on_the_real_store(live) -> None:
    """Every kind's query runs on the real engine (the example file has one objective each)."""
    out = subprocess.run([sys.executable, "-m", "runwatch", "slo", "status", "--json"],
                         env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    kinds = {s["kind"]: s for s in json.loads(out.stdout)}
    assert len(kinds) == 7
    # the example's registry control watches every family: the ungated push counts
    registry = kinds.pop("registry_control")
    assert (registry["good"], registry["valid"], registry["state"]) == (1, 2, "exhausted")
    # none of the example's other families ran here: no data, not 0 % or 100 %
    assert {s["state"] for s in kinds.values()} == {"no_data"}
    assert all(s["sli"] is None for s in kinds.values())


def _slo(live: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwatch", "slo", *args], env=live["env"],
                          cwd=ROOT, capture_output=True, text=True, check=False)


def test_an_alert_kafka_refused_is_an_error_and_goes_out_with_the_next_round(
        live, tmp_path: Path) -> None:
    """A mistyped --topic printed "1 alert(s) published" and booked the page as sent: the
    next round with the right topic sent nothing, and no page ever went out. A backfill
    (--at earlier than the last round) then resolved the live page."""
    fam, topic = live["fam"], live["topics"]["rw.alerts"]
    f = tmp_path / "lost.yaml"
    f.write_text(SLOS.format(fam=fam).split("---")[0].replace(f"window-{fam}", f"lost-{fam}"))
    lost = _slo(live, "evaluate", "--file", str(f), "--topic", f"nosuch-{topic}")
    assert lost.returncode == 2, lost.stdout + lost.stderr
    assert (f"1 of 1 alert(s) not delivered: topic 'nosuch-{topic}' does not exist"
            in lost.stderr), lost.stderr
    assert "the next round sends them again" in lost.stderr
    sent = _slo(live, "evaluate", "--file", str(f), "--topic", topic)
    assert sent.returncode == 0 and "1 alert(s) published" in sent.stdout, sent.stderr
    past = _slo(live, "evaluate", "--file", str(f), "--topic", topic,
                "--at", str(int(time.time() * 1000) - 2 * H))
    assert past.returncode == 0, past.stderr
    assert f"lost-{fam}: a later round already decided" in past.stdout
    assert "0 alert(s) published" in past.stdout
    mine = [(a.status, a.severity) for a in _alerts(live["env"]["KAFKA_BOOTSTRAP_SERVERS"],
                                                   topic, len(live["alerts"]) + 1)
            if a.detector == f"slo:lost-{fam}"]
    assert mine == [("firing", "critical")]


def test_reproducibility_compares_whole_set_metrics_not_a_slice(live, tmp_path: Path) -> None:
    """Two seeds of one lineage, the same whole-set auc; one also evaluated a slice a moment
    later. The slice's auc was read as the run's (the latest row of any slice)."""
    fam, topics, shared, now = f"{live['fam']}-rep", live["topics"], live["shared"], live["now"]
    for seed, slices in ((1, {"age_65_plus": 0.60}), (2, {})):
        run = runwatch.init(fam, team="ml", run_id=f"{fam}-s{seed}", strict=True,
                            transport=shared, topics=topics, install_hooks=False,
                            capture_lineage=False, clock=lambda: now - H,
                            config={"lr": 0.01}, seed_policy=f"fixed:{seed}",
                            lineage={"code_revision": "c0ffee"})
        ev = DatasetRef(uri="s3://eval/rep", version="v1")
        run.evaluation({"auc": 0.80}, dataset=ev, samples=500, now_ms=now - H + 1000)
        for name, auc in slices.items():
            run.evaluation({"auc": auc}, dataset=ev, slice=name, samples=80,
                           now_ms=now - H + 2000)
        run.finish("succeeded", now_ms=now - H + 3000)
    assert shared.flush(60) == 0
    db, client = live["db"], live["client"]
    _wait("the evaluations in ClickHouse", lambda: _count(
        client, f"SELECT count() FROM {db}.validation_results FINAL "
                f"WHERE run_id LIKE '{fam}-s%'") == 3)
    f = tmp_path / "rep.yaml"
    f.write_text(f"""apiVersion: openslo/v1
kind: SLO
metadata: {{name: rep-{fam}}}
spec:
  indicator: {{spec: {{kind: reproducibility, family: {fam}, metric: auc, tolerance: 0.01}}}}
  timeWindow: [{{duration: 7d, isRolling: true}}]
  objectives: [{{target: 0.9}}]
""")
    out = _slo(live, "status", "--json", "--file", str(f))
    assert out.returncode == 0, out.stderr
    (st,) = json.loads(out.stdout)
    assert (st["good"], st["valid"], st["bad_events"]) == (2, 2, [])


def test_a_queued_run_is_timed_from_its_first_running_event_after_its_events_expire(
        live) -> None:
    """The summary (what is left once raw.ttl expired the job events) times the same run."""
    db, client, fam, rid = live["db"], live["client"], live["fam"], f"{live['fam']}-q1"

    def status() -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "runwatch", "slo", "status", "--json", "--file",
             str(live["file"]), "--at", str(live["now"])],
            env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        return next(s for s in json.loads(out.stdout) if s["objective"] == f"queued-{fam}")

    assert (status()["good"], status()["valid"]) == (1, 1)  # 100 min running, limit 2 h
    _wait("the run's summary", lambda: _count(
        client, f"SELECT count() FROM {db}.run_summaries FINAL WHERE run_id = '{rid}'") == 1)
    # raw.ttl expiring the run's job events (a week later), the last test of the module
    client.command(f"ALTER TABLE {db}.job_events DELETE WHERE run_id = '{rid}' "
                   "SETTINGS mutations_sync = 2")
    assert _count(client, f"SELECT count() FROM {db}.job_events WHERE run_id = '{rid}'") == 0
    after = status()
    # its summary began at the queued event: 150 min, a bad event, before the fix
    assert (after["good"], after["valid"], after["bad_events"]) == (1, 1, [])


def test_a_retried_run_is_no_event_while_its_next_attempt_runs_and_a_queue_cancel_none(
        live) -> None:
    """Attempt 1 failed 10 minutes in; attempt 2 ran from 15 minutes: while it ran inside its
    hour the run was a bad event, "run ...: failed". A job cancelled in the queue never
    trained: it was a bad event too, 30 minutes of queue shown as its duration."""
    fam, t0 = live["fam"], live["retried"]

    def status(at: int) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-m", "runwatch", "slo", "status", "--json", "--file",
             str(live["file"]), "--at", str(at)],
            env=live["env"], cwd=ROOT, capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stderr
        return next(s for s in json.loads(out.stdout) if s["objective"] == f"retried-{fam}")

    during = status(t0 + 20 * 60_000)  # attempt 2 is running
    assert (during["good"], during["valid"], during["bad_events"]) == (0, 0, []), during
    after = status(live["now"])
    assert (after["good"], after["valid"], after["bad_events"]) == (1, 1, []), after
