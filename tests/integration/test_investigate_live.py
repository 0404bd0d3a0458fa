"""``runwatch investigate`` on the live stack: SDK-published runs through a processor worker
and the sink into the store, answered by the CLI, the page checked in headless Chromium.

One scenario set, published once with explicit event times (``runwatch.init``,
``run.*``, ``runwatch.client.data.report``, the node agent over the NVML double):

* family ``inv``: run A (dataset ``s3://inv/ds@v1``, lr 0.001) succeeds cleanly;
  run B reads ``@v2`` with lr 0.003, the pipeline reports a label shift on v2
  at step 25 and B's validation declines;
* run C (another family) reads ``@v2`` too and fails its evaluation gate;
* run D's checkpoint at step 20 fails its checksum;
* A and B are placed by the scheduler hook (``runwatch emit``'s job-state with an
  allocation of 8 H100s), so their run summaries are billed for it; C and D name their
  GPU model only in their manifests, which prices what their samples show.

Asserted: B's what-changed lists exactly the dataset version and the learning
rate, C is affected through ``@v2``, the resume point is B's last checkpoint
before the onset, the owner is the data team (the processor's alert says so,
the store keeps it); D's corrupt checkpoint is not trustworthy and step 10 is
its resume point; C's release is blocked with the gate's reason and C's family has no good run
to compare with; ``--since`` lists the hurting runs; an unknown run id is
answered (exit 1, what is missing). B's cost is ``runwatch cost --by run``'s
(8 GPUs for its running time at the example's H100 price), compared with A's.
B's page: no console errors, five indicator plots and the cost plot drawn (B's bar
beside A's, with B's GPU-hours and cost), a screenshot under ``.runwatch/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cdp import Page
from sinkkit import Store, migrate

import runwatch
from runwatch import cli
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.nvml import Nvml
from runwatch.adapters.publisher import Publisher, default_topics
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.agent.service import NodeAgent
from runwatch.client import data
from runwatch.client.emit import emit_records
from runwatch.core.records import Alert, DatasetRef
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings
from runwatch.sink.settings import default_topics as sink_topics
from runwatch.testing.harness import Harness
from runwatch.testing.nvml_double import FakeNvml8

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STEP_MS = 10_000
DS = "s3://inv/ds"
LINEAGE = {"code_revision": "c0ffee1", "image_digest": "registry.local/train@sha256:" + "a" * 64,
           "hardware": {"nodes": ["inv-node-1"], "gpu_count": 8, "gpu_model": "H100"},
           "framework_versions": {"torch": "2.5.1"}}
UNIFORM = [0.25, 0.25, 0.25, 0.25]
SHIFTED = [0.55, 0.25, 0.15, 0.05]



def _not_json(word: str) -> None:
    """``--json`` is strict JSON: a bare NaN or Infinity (Python's json writes them) fails."""
    msg = f"not JSON: a bare {word}"
    raise AssertionError(msg)

def _batch(labels: list[float], seed: int) -> dict[str, list[Any]]:
    import random

    rng = random.Random(seed)  # noqa: S311 - test data
    names = ["cat", "dog", "car", "boat"]
    n = 2000
    return {"f_x": [round(rng.gauss(0.0, 1.0), 4) for _ in range(n)],
            "label": rng.choices(names, weights=labels, k=n)}


class Scenario:
    """Publishes the runs; keeps what the assertions need."""

    def __init__(self, harness: Harness, tmp: Path) -> None:
        self.tmp = tmp
        self.topics = {t: harness.topic(t) for t in set(default_topics().values())}
        self.kafka = harness.kafka
        self.harness = harness
        # the pipeline's and the agent's transport; each run has its own (finish closes it)
        self.transport = self._transport("pipeline")
        self.pipeline = Publisher(self.transport, kind="sdk", topics=self.topics)
        self.hook = Publisher(self.transport, kind="hook", topics=self.topics)
        tag = harness.prefix.rstrip(".")
        self.ids = {k: f"{tag}-{k}" for k in "ABCD"}
        self.base = int(time.time() * 1000) - 3 * 3_600_000
        self.ckpts: dict[str, dict[int, int]] = {}

    def _transport(self, name: str) -> KafkaTransport:
        return KafkaTransport(self.kafka, ProducerSettings(spool_dir=self.tmp / "spool" / name),
                              name=f"investigate-{name}")

    def report(self, version: str, labels: list[float], at: int, seed: int) -> None:
        data.report(DS, version, f"part={seed}", _batch(labels, seed), baseline="ref",
                    label="label", publisher=self.pipeline, now_ms=at,
                    baseline_directory=self.tmp / "baselines")

    def run(self, key: str, family: str, start: int, steps: int, *, version: str | None,
            lr: float, node: str, val: list[float], checkpoints: dict[int, bool],
            gate: tuple[str, list[str]] | None = None, agent: bool = False,
            placed: bool = False) -> None:
        lineage = {**LINEAGE, "hardware": {**LINEAGE["hardware"], "nodes": [node]}}
        if placed:  # the scheduler hook's job-state, as `runwatch emit` publishes it
            res = emit_records(self.hook, [{
                "type": "job-state", "run_id": self.ids[key], "state": "running",
                "team": "vision", "experiment_family": family, "emitted_at_ms": start,
                "allocation": {"nodes": [node], "gpu_indices": list(range(8)),
                               "gpu_model": "H100"}}])
            assert not res.errors, res.errors
        run = runwatch.init(
            family, team="vision", run_id=self.ids[key], transport=self._transport(key),
            topics=self.topics, install_hooks=False, capture_lineage=False, strict=True,
            config={"lr": lr, "batch": 256}, seed_policy="fixed:1", lineage=lineage,
            datasets=[DatasetRef(uri=DS, version=version)] if version else [],
            clock=lambda: start)
        nodes = NodeAgent(Publisher(self.transport, kind="agent", topics=self.topics,
                                    clock=lambda: start), node=node, nvml=Nvml.open(FakeNvml8())) \
            if agent else None
        # no wait for the dataset's stored reports: the burst of backdated steps below may
        # move the input's event time past DATA_WAIT_MS while they are still on their way
        # through the data agent, and rule:missing_data_report waits for the agent's answer
        # (docs/processor.md, "Data reports in a backfill burst")
        self.ckpts[key] = {}
        for i in range(steps):
            at = start + (i + 1) * STEP_MS
            run.step(i, loss=2.0 * 0.99 ** i, lr=lr, now_ms=at, step_ms=float(STEP_MS),
                     loader_wait_ms=400.0, samples=256)
            if nodes is not None and i % 3 == 0:
                nodes.tick(at)
            if i % 10 == 0 and i // 10 < len(val):
                run.validation(i, {"accuracy": val[i // 10]}, now_ms=at + 1)
            if i in checkpoints:
                path = self.tmp / key / f"step-{i:04d}.ckpt"
                path.parent.mkdir(parents=True, exist_ok=True)
                body = f"{key}:{i}".encode()
                path.write_bytes(body)
                expected = hashlib.sha256(body if checkpoints[i] else b"other").hexdigest()
                run.checkpoint(path, step=i, duration_ms=2000.0, expected_sha256=expected,
                               now_ms=at + 2)
                self.ckpts[key][i] = at + 2
        end = start + (steps + 1) * STEP_MS
        if gate is not None:
            run.gate(gate[0], "fail", thresholds={"accuracy": 0.70},
                     measured={"accuracy": 0.61}, reasons=gate[1], now_ms=end)
        counters = run.finish("succeeded", now_ms=end + 1)
        assert counters["transport_sent"] == counters["published"], counters

    def publish(self) -> None:
        b = self.base
        self.report("v1", UNIFORM, b, 1)
        self.run("A", "inv", b, 60, version="v1", lr=0.001, node="inv-node-1",
                 val=[0.50, 0.55, 0.60, 0.64, 0.67, 0.70], checkpoints={10: True, 30: True},
                 placed=True)
        b2 = b + 20 * 60_000
        self.report("v2", UNIFORM, b2, 2)
        self.shift_ms = b2 + 26 * STEP_MS
        self.report("v2", SHIFTED, self.shift_ms, 3)
        self.run("B", "inv", b2, 60, version="v2", lr=0.003, node="inv-node-1",
                 val=[0.50, 0.55, 0.60, 0.50, 0.42, 0.34],
                 checkpoints={10: True, 20: True, 30: True, 40: True, 50: True}, agent=True,
                 placed=True)
        self.run("C", "inv-other", b2, 30, version="v2", lr=0.001, node="inv-node-3",
                 val=[], checkpoints={}, gate=("eval", ["accuracy 0.61 < 0.70 on slice night"]))
        self.run("D", "inv-ckpt", b + 40 * 60_000, 40, version=None, lr=0.001,
                 node="inv-node-4", val=[], checkpoints={10: True, 20: False, 30: True})
        assert self.transport.flush(60) == 0
        self.transport.close(10)


def _cli(store: Store, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLICKHOUSE_URL": store.url, "CLICKHOUSE_DATABASE": db}
    return subprocess.run([sys.executable, "-m", "runwatch", "investigate", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def _answer(store: Store, db: str, *args: str) -> dict[str, Any]:
    got = _cli(store, db, *args, "--json")
    assert got.returncode == 0 and not got.stderr.strip(), (args, got.returncode, got.stderr)
    return dict(json.loads(got.stdout, parse_constant=_not_json))


def _alerts_in(client: Any, db: str, run_id: str) -> list[tuple[Any, ...]]:
    """The run's stored alerts, for an assertion's message."""
    return list(client.query(
        f"SELECT detector, severity, status, summary FROM {db}.alerts "  # noqa: S608
        "WHERE run_id = {r:String} ORDER BY ts", parameters={"r": run_id}).result_rows)


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out waiting for {what}")


def test_investigate_answers_on_the_live_stack(harness: Harness, own_store: Store,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"t_inv_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    harness.start_worker()
    harness.wait_ready()
    sc = Scenario(harness, tmp_path)
    sc.publish()
    ids = sc.ids
    want = {(ids["B"], "rule:validation_decline"), (ids["C"], "rule:failed_gate"),
            (ids["D"], "rule:checkpoint_checksum")}

    def firing(records: list[Any]) -> set[tuple[str, str]]:
        return {(a.run_id, a.detector) for a in records
                if isinstance(a, Alert) and a.status == "firing"}

    alerts = harness.collect("rw.alerts", lambda r: firing(r) >= want, 120, settle_s=5)
    assert firing(alerts) >= want, harness.worker_log()
    (decline,) = [a for a in alerts if isinstance(a, Alert) and a.run_id == ids["B"]
                  and a.detector == "rule:validation_decline" and a.status == "firing"]
    assert (decline.probable_cause, decline.owner) == ("data", "data-engineering")

    stop = threading.Event()
    sink = Sink(SinkSettings(group_id=f"sink-{uuid.uuid4().hex[:8]}",
                             topics=tuple(harness.topic(t) for t in sink_topics())),
                KafkaSettings(bootstrap_servers=harness.bootstrap),
                ClickHouseSettings(url=own_store.url, database=db), stop)
    thread = threading.Thread(target=sink.run, daemon=True)
    thread.start()
    stored_alerts = {a.alert_id for a in alerts if isinstance(a, Alert)}
    try:
        def landed() -> bool:
            q = client.query(
                f"SELECT (SELECT uniqExact(alert_id) FROM {db}.alerts), "  # noqa: S608
                f"(SELECT count() FROM {db}.checkpoints), (SELECT count() FROM {db}.job_events "
                f"WHERE state = 'succeeded'), (SELECT count() FROM {db}.gate_decisions), "
                f"(SELECT countIf(gpu_model = 'H100') FROM {db}.run_costs), "
                f"(SELECT countIf(observed_gpu_hours > 0) FROM {db}.run_costs)")
            ((n_alerts, n_ck, n_done, n_gates, n_priced, n_seen),) = q.result_rows
            return (n_alerts >= len(stored_alerts) and n_ck == 10 and n_done == 4
                    # all four manifests name H100 (NVML), A and B's hooks too
                    and n_gates == 1 and n_priced == 4 and n_seen >= 1)
        _wait(landed, 90, "the runs' rows in the store")
    finally:
        stop.set()
        thread.join(60)

    ((stored_owner,),) = client.query(
        f"SELECT DISTINCT owner FROM {db}.alerts WHERE run_id = {{r:String}} "  # noqa: S608
        "AND detector = 'rule:validation_decline'", parameters={"r": ids["B"]}).result_rows
    assert stored_owner == "data-engineering"  # Alert.owner, stored by the sink

    page = ROOT / ".runwatch" / f"investigate-{ids['B']}.html"
    got = _cli(own_store, db, ids["B"], "--json", "--html", str(page))
    assert got.returncode == 0, got.stderr
    b = json.loads(got.stdout, parse_constant=_not_json)
    assert b["version"] == 1 and b["found"] is True
    changed = b["what_changed"]
    assert changed["reference_run_id"] == ids["A"], (changed["reference"], _alerts_in(
        client, db, ids["A"]))
    assert [(c["kind"], c["key"], c["old"], c["new"], c["intentional"])
            for c in changed["changes"]] == [("dataset", DS, "v1", "v2", False),
                                             ("config", "lr", "0.001", "0.003", False)]
    assert any("label balance shifted" in p for q in changed["input_quality"]
               for p in q["problems"]), changed["input_quality"]
    assert [r["run_id"] for r in b["affected_runs"]["runs"]] == [ids["C"]]
    assert b["affected_runs"]["runs"][0]["shared"] == [f"dataset {DS}@v2"]
    onset = b["onset_ms"]
    before = [s for s, at in sc.ckpts["B"].items() if at < min(onset, sc.shift_ms)]
    assert b["resume_point"]["step"] == max(before) == 20, (onset, sc.shift_ms)
    assert b["resume_point"]["gpu_hours_lost"] > 0
    trusted = {c["step"]: c["trustworthy"] for c in b["trustworthy"]["checkpoints"]}
    assert trusted == {10: True, 20: True, 30: False, 40: False, 50: False}
    assert b["owner"]["team"] == "data-engineering"
    assert "alertmanager" in b["owner"]["paged"][0]["receivers"]
    assert b["release"]["blocked"] is False

    # cost: B ran 8 H100s from its start to its end (60 steps), at the example's 4.00 USD
    cost = b["cost"]
    run_h = 8 * (61 * STEP_MS + 1) / 3_600_000
    assert cost["currency"] == "USD" and cost["run"]["gpu_hours"] == pytest.approx(run_h, abs=1e-3)
    assert cost["run"]["cost"] == pytest.approx(4.0 * run_h, abs=0.01)
    assert cost["run"]["wasted_gpu_hours"]["idle"] > 0  # the NVML double runs no process
    assert [p["run_id"] for p in cost["peers"]["runs"]] == [ids["A"]]
    assert cost["peers"]["runs"][0]["cost"] == pytest.approx(4.0 * run_h, abs=0.01)
    assert cost["resume_lost"]["cost"] == pytest.approx(
        4.0 * b["resume_point"]["gpu_hours_lost"], abs=0.01)
    monkeypatch.setenv("CLICKHOUSE_URL", own_store.url)  # runwatch cost, in this process
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["cost", "--by", "run", "--since", "1d", "--json", "--database", db]) == 0
    groups = json.loads(out.getvalue(), parse_constant=_not_json)["groups"]
    (same,) = [g for g in groups if g["key"] == ids["B"]]
    assert (same["gpu_hours"], same["cost"], same["wasted_gpu_hours"]) == (
        cost["run"]["gpu_hours"], cost["run"]["cost"], cost["run"]["wasted_gpu_hours"])

    d = _answer(own_store, db, ids["D"])
    ck = {c["step"]: c for c in d["trustworthy"]["checkpoints"]}
    assert ck[20]["trustworthy"] is False and "checksum mismatch" in ck[20]["reasons"]
    assert ck[10]["trustworthy"] is True
    assert d["resume_point"]["step"] == 10

    c = _answer(own_store, db, ids["C"])
    assert c["release"]["blocked"] is True
    assert c["release"]["reasons"] == ["gate eval failed: accuracy 0.61 < 0.70 on slice night"]
    assert any("no previous good run in family 'inv-other'" in m for m in c["missing"])

    hurt = _answer(own_store, db, "--since", "6h")
    assert {r["run_id"] for r in hurt["runs"]} >= {ids["B"], ids["C"], ids["D"]}
    assert ids["A"] not in {r["run_id"] for r in hurt["runs"]}
    text = _cli(own_store, db, ids["B"])
    assert text.returncode == 0 and "What changed" in text.stdout and "0.003" in text.stdout
    assert f"{cost['run']['cost']:,.2f} USD" in text.stdout.partition("Cost")[2]  # B's cost
    ghost = _cli(own_store, db, "no-such-run", "--json")
    assert ghost.returncode == 1 and "Traceback" not in ghost.stderr
    missing = json.loads(ghost.stdout, parse_constant=_not_json)["missing"]
    assert "nothing recorded for run 'no-such-run'" in missing[0]

    with Page() as browser:
        browser.open(page)
        plots = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.plot')).map(s => ({key: "
            "s.dataset.indicator, empty: s.dataset.empty, w: s.getBBox().width, "
            "lines: s.querySelectorAll('polyline.series').length, "
            "onsets: s.querySelectorAll('.onset').length}))")
        bars = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.costplot[data-empty=false] g.bar'))"
            ".map(g => ({run: g.dataset.run, mine: g.dataset.this, h: g.dataset.gpuHours, "
            "cost: g.querySelector('.cost-label').textContent, "
            "drawn: Array.from(g.querySelectorAll('rect.seg'))"
            ".reduce((a, r) => a + r.getBBox().height, 0)}))")
        errors = browser.errors()
        browser.screenshot(ROOT / ".runwatch" / f"investigate-{ids['B']}.png")
    assert errors == []
    assert [p["key"] for p in plots] == ["loss", "validation", "loader_share",
                                         "checkpoint_share", "gpu_util"]
    for p in plots:
        assert p["empty"] == "false" and p["lines"] == 1 and p["w"] > 100 and p["onsets"] >= 1, p
    # the cost plot: A's bar, then B's (highlighted) with B's GPU-hours and cost, drawn
    assert [(x["run"], x["mine"]) for x in bars] == [(ids["A"], "false"), (ids["B"], "true")]
    mine = bars[1]
    assert float(mine["h"]) == cost["run"]["gpu_hours"]
    assert mine["cost"] == f"{cost['run']['cost']:,.2f} USD" and mine["drawn"] > 20, bars
