"""Release gates on the live stack: SDK-published candidates against a recorded incumbent.

Published the way users do (``runwatch.init`` with lineage, ``run.evaluation``
per slice, ``data.report`` for the evaluation data, ``run.artifact``) through
the SDK's Kafka transport; the real sink stores it in a fresh ClickHouse
database; ``runwatch gate check`` / ``gate approve`` run as the CLI (in
process) against it and publish their decisions; a processor worker reads the
same topics and raises registry control on ``rw.alerts``. Everything is
published once (module fixture); each test checks one answer.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sinkkit import SinkProc, Store, migrate

import runwatch
from runwatch import cli
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher, default_topics
from runwatch.client import data
from runwatch.core.records import Alert, DatasetRef
from runwatch.resources import resource
from runwatch.testing.harness import Harness

pytestmark = pytest.mark.integration

DAY = 86_400_000
T0 = (int(time.time() * 1000) // DAY - 1) * DAY  # yesterday, midnight UTC
EVAL = ("s3://eval/credit", "v3")
TRAIN = ("s3://train/credit", "v9")
POLICY = str(resource("schemas", "gates.yaml"))  # the shipped example policy

# case -> candidate auc, its slices, repeats (other seeds), rerun (same seed), and extras
GOOD = {"auc": 0.81, "slices": {"age_65_plus": 0.79, "income_low": 0.78},
        "seeds": [0.805, 0.812], "rerun": 0.811}
CASES: dict[str, dict[str, Any]] = {
    "good": {"model": "ok"},
    "slice": {"auc": 0.815, "slices": {"age_65_plus": 0.76, "income_low": 0.78},
              "seeds": [0.81, 0.812], "rerun": 0.814},
    "overlap": {"training": [TRAIN, EVAL]},
    "stale": {"eval": ("s3://eval/old", "v1"), "incumbent": "inc-old"},
    "noslice": {"slices": {"age_65_plus": 0.79}},
    "protocol": {"eval": ("s3://eval/credit", "v4")},
    "seeds": {"seeds": [0.78, 0.83]},
    "rerun": {"rerun": 0.79},
    "nan": {"auc": float("nan")},
    "dirty": {"dirty": True},
    "rowkeys": {"training": [("s3://train/partner", "v1")]},  # another name, the same accounts
    "broken": {"model": "broken"},  # its model did not load back
    "empty": {"model": "empty"},  # its model file holds no bytes
}


def _model(r: Any, how: str, path: Path) -> None:
    """Record the candidate's model as a training script does: the file it wrote, hashed by
    the SDK, and whether it loaded back."""
    path.write_bytes(b"" if how == "empty" else b"weights" * 1000)
    r.artifact(str(path), "model", serialization_ok=how != "broken", now_ms=T0 + 1500)


def _publish(h: Harness, tmp: Path) -> None:
    topics = {t: h.topic(t) for t in set(default_topics().values())}

    def run(run_id: str, seed: int, case: str, *, training=(TRAIN,), dirty=False) -> Any:
        transport = KafkaTransport(h.kafka, ProducerSettings(spool_dir=tmp / "spool"),
                                   name=run_id)  # finish() closes its run's transport
        return runwatch.init(
            "credit-risk", run_id=run_id, transport=transport, topics=topics,
            install_hooks=False, capture_lineage=False, strict=True, clock=lambda: T0,
            config={"case": case, "lr": 0.01}, seed_policy=f"fixed:{seed}",
            datasets=[DatasetRef(uri=u, version=v) for u, v in training],
            lineage={"code_revision": "c0ffee", "code_dirty": dirty})

    def evaluate(r: Any, auc: float, slices: dict[str, float], ev=EVAL, incumbent="inc") -> None:
        ds = DatasetRef(uri=ev[0], version=ev[1])
        r.evaluation({"auc": auc, "log_loss": 0.42}, dataset=ds, samples=5000,
                     ci={"auc": (auc - 0.01, auc + 0.01)}, incumbent=incumbent, now_ms=T0 + 1000)
        for name, v in slices.items():
            r.evaluation({"auc": v}, dataset=ds, slice=name, samples=800, incumbent=incumbent,
                         now_ms=T0 + 1000)

    runs = []
    for inc_id, ev in (("inc", EVAL), ("inc-old", ("s3://eval/old", "v1"))):
        r = run(f"{h.prefix}{inc_id}", 1, "incumbent")
        evaluate(r, 0.80, {"age_65_plus": 0.78, "income_low": 0.77}, ev, incumbent="")
        runs.append(r)
    for case, over in CASES.items():
        c = {**GOOD, **over}
        kw = {"training": c.get("training", (TRAIN,)), "dirty": c.get("dirty", False)}
        ev, inc = c.get("eval", EVAL), f"{h.prefix}{c.get('incumbent', 'inc')}"
        for rid, seed, auc in ((case, 1, c["auc"]), (f"{case}-s2", 2, c["seeds"][0]),
                               (f"{case}-s3", 3, c["seeds"][1]), (f"{case}-rerun", 1, c["rerun"])):
            r = run(f"{h.prefix}{rid}", seed, case, **kw)
            evaluate(r, auc, c["slices"] if rid == case else {}, ev, incumbent=inc)
            if rid == case and "model" in c:
                _model(r, c["model"], tmp / f"{case}.pt")
            runs.append(r)
    nogate = run(f"{h.prefix}nogate", 1, "nogate")
    nogate.artifact("s3://models/nogate", "model", sha256="ab" * 32, registry_status="registered",
                    now_ms=T0 + 2000)
    runs.append(nogate)
    transport = KafkaTransport(h.kafka, ProducerSettings(spool_dir=tmp / "spool"), name="data")
    pub = Publisher(transport, kind="sdk", topics=topics)
    for (uri, version), newest, first in (
            (EVAL, T0 - 5 * DAY, 0), (("s3://eval/credit", "v4"), T0 - 5 * DAY, 0),
            (("s3://eval/old", "v1"), T0 - 200 * DAY, 0), (TRAIN, T0 - 9 * DAY, 1000),
            (("s3://train/partner", "v1"), T0 - 9 * DAY, 25)):
        rows = {"account": list(range(first, first + 50)),
                "event_ms": [newest - i * 60_000 for i in range(50)]}
        data.report(uri, version, "all", rows, publisher=pub, baseline_directory=tmp,
                    timestamp="event_ms", key="account", now_ms=T0 - DAY)  # reported yesterday
    assert transport.flush(30) == 0
    transport.close(10)
    for r in runs:
        counts = r.finish(now_ms=T0 + 3000)
        assert counts.get("transport_failed", 0) == 0, counts


def _wait_rows(client: Any, sql: str, want: int, timeout_s: float = 90) -> int:
    deadline = time.monotonic() + timeout_s
    n = -1
    while time.monotonic() < deadline:
        n = int(client.query(sql).result_rows[0][0])
        if n >= want:
            return n
        time.sleep(0.5)
    return n


class World:
    def __init__(self, h: Harness, client: Any, db: str, sink: SinkProc) -> None:
        self.h, self.client, self.db, self.sink = h, client, db, sink

    def rid(self, case: str) -> str:
        return f"{self.h.prefix}{case}"

    def cli(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
        capsys.readouterr()
        code = cli.main(["gate", *args, "--database", self.db, "--topic-prefix", self.h.prefix,
                         "--json"])
        out = capsys.readouterr()
        try:
            return code, json.loads(out.out, parse_constant=_not_json)
        except json.JSONDecodeError:
            return code, out.err

    def check(self, capsys: pytest.CaptureFixture[str], case: str) -> tuple[int, Any]:
        return self.cli(capsys, "check", self.rid(case), "--policy", POLICY)

    def gate_rows(self, run_id: str, want: int) -> list[tuple[Any, ...]]:
        _wait_rows(self.client, f"SELECT count() FROM {self.db}.gate_decisions FINAL "  # noqa: S608
                   f"WHERE run_id = '{run_id}'", want, 60)
        return [tuple(r) for r in self.client.query(
            f"SELECT event_id, decision, evaluator, approves FROM {self.db}.gate_decisions FINAL "  # noqa: S608
            f"WHERE run_id = '{run_id}' ORDER BY ts, seq").result_rows]


@pytest.fixture(scope="module")
def world(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("gates")
    store = Store(tmp / "chdb")  # a store of its own: the shared one serves every session's load
    store.start()
    h = Harness(stack.bootstrap_servers, partitions=2)
    h.create_topics()
    db = f"gates_{uuid.uuid4().hex[:8]}"
    client = migrate(store.url, db)
    topics = {t: h.topic(t) for t in ("rw.lineage", "rw.data", "rw.learning", "rw.artifact")}
    sink = SinkProc(stack.bootstrap_servers, topics, store.url, db, tmp / "sink.log")
    env = {"CLICKHOUSE_URL": store.url,
           "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
           "RUNWATCH_PRODUCER_SPOOL_DIR": str(tmp / "cli-spool")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        h.start_worker(RUNWATCH_PROCESSOR_GATE_WAIT_MS="3000")
        sink.start()
        h.wait_ready()
        _publish(h, tmp)
        want = 2 * 3 + len(CASES) * 4 + 2 * len(CASES) - 1  # whole sets + the candidates' slices
        got = _wait_rows(client, f"SELECT count() FROM {db}.validation_results FINAL "  # noqa: S608
                         "WHERE kind = 'evaluation'", want)
        assert got == want, sink.log.read_text()[-3000:]
        assert _wait_rows(client, f"SELECT count() FROM {db}.data_quality_reports FINAL", 5) == 5
        assert _wait_rows(client, f"SELECT uniqExact(run_id) FROM {db}.run_manifests FINAL",
                          3 + 4 * len(CASES)) == 3 + 4 * len(CASES)
        models = 1 + sum(1 for c in CASES.values() if "model" in c)  # and nogate's
        assert _wait_rows(client, f"SELECT count() FROM {db}.artifacts FINAL", models) == models
        yield World(h, client, db, sink)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        sink.stop()
        h.stop_all()
        h.delete_topics()
        store.stop()


def _not_json(word: str) -> None:
    """``--json`` is strict JSON: a bare NaN or Infinity (Python's json writes them) fails."""
    msg = f"not JSON: a bare {word}"
    raise AssertionError(msg)


def _reasons(out: dict[str, Any]) -> str:
    return "\n".join(out["reasons"])


def test_all_evidence_in_order_passes(world: World, capsys) -> None:
    code, out = world.check(capsys, "good")
    assert (code, out["decision"], out["reasons"]) == (0, "pass", [])
    assert out["measured"]["auc"] == 0.81
    assert out["measured"]["incumbent.auc"] == 0.80
    assert out["measured"]["seeds"] == 3.0
    assert out["measured"]["eval_age_ms"] == 5 * DAY + 1000
    assert out["measured"]["shared_row_keys.s3://train/credit@v9"] == 0
    assert out["policy"].endswith("gates.yaml#credit-risk-release")
    assert [(s["name"], s["passed"]) for s in out["slices"]] == [("age_65_plus", True),
                                                                 ("income_low", True)]
    assert world.gate_rows(world.rid("good"), 1)[-1][1:] == ("pass", "runwatch gate check", "")


@pytest.mark.parametrize(("case", "want"), [
    ("slice", "fail: slice age_65_plus: auc 0.76 vs incumbent 0.78, deteriorated by 0.02 "
              "(bound 0.01)"),
    ("overlap", "fail: evaluation dataset s3://eval/credit@v3 overlaps the training data"),
    ("rowkeys", "fail: evaluation dataset s3://eval/credit@v3 shares row keys with training "
                "dataset s3://train/partner@v1 (25 shared hashes in their sketches, about 25 "
                "rows)"),
    ("stale", "fail: evaluation dataset s3://eval/old@v1 is 200.0 days old"),
    ("protocol", "fail: protocol violated: the candidate was evaluated on s3://eval/credit@v4, "
                 "the incumbent"),
    ("seeds", "fail: spread of auc across 3 seeds 0.05 (0.78 .. 0.83) above the bound 0.02"),
    ("rerun", "fail: rerun"),
    ("nan", "fail: metric auc on the whole set is nan (non-finite)"),
    ("broken", "fail: model artifact "),  # "... did not load back (serialization failed)"
    ("empty", " is empty (0 bytes)"),
])
def test_each_violation_fails_with_its_reason(world: World, capsys, case: str, want: str) -> None:
    code, out = world.check(capsys, case)
    assert (code, out["decision"]) == (1, "fail"), out
    assert want in _reasons(out), _reasons(out)


def test_a_missing_required_slice_asks_for_review(world: World, capsys) -> None:
    code, out = world.check(capsys, "noslice")
    assert (code, out["decision"]) == (2, "review")
    assert out["reasons"] == ["missing: required slice income_low not evaluated",
                              "missing: spread across slices needs at least 2 evaluated slices, "
                              "1 found"]


def test_an_approved_review_allows_the_release_and_both_decisions_are_stored(
        world: World, capsys) -> None:
    rid = world.rid("dirty")
    code, out = world.check(capsys, "dirty")
    assert (code, out["decision"]) == (2, "review")
    assert out["reasons"] == ["review: provenance contested: uncommitted changes"]
    review_id = out["event_id"]
    world.gate_rows(rid, 1)
    code, ok = world.cli(capsys, "approve", rid, "--by", "ana", "--reason", "diff reviewed")
    assert code == 0, ok
    assert ok["approves"] == review_id
    rows = world.gate_rows(rid, 2)
    assert rows == [(review_id, "review", "runwatch gate check", ""),
                    (ok["event_id"], "pass", "human:ana", review_id)]
    code, err = world.cli(capsys, "approve", rid, "--by", "ana", "--reason", "again")
    assert code == 3 and "already approved by human:ana" in err  # once is enough


def test_bad_input_exits_3_naming_the_problem(world: World, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "gates.yaml"
    bad.write_text("policies:\n  - name: p\n    match: {family: credit-risk}\n    primary: auc\n"
                   "    slices: {max_deterioration: lots}\n")
    code, err = world.cli(capsys, "check", world.rid("good"), "--policy", str(bad))
    assert code == 3
    assert f"{bad}:5: policies[0].slices.max_deterioration: must be a finite number" in err
    code, err = world.cli(capsys, "approve", world.rid("slice"), "--by", "ana", "--reason", "x")
    assert code == 3 and "only a review is approved" in err


def test_registry_control_and_seed_variance_on_rw_alerts(
        world: World) -> None:
    h = world.h
    topics = {t: h.topic(t) for t in set(default_topics().values())}
    for case in ("good", "dirty"):  # passed; an approved review (the tests above decided them)
        transport = KafkaTransport(h.kafka, ProducerSettings(
            spool_dir=Path(world.sink.log).parent / "spool2"), name=case)
        r = runwatch.init("credit-risk", run_id=world.rid(case), transport=transport,
                          topics=topics, install_hooks=False, capture_lineage=False,
                          clock=lambda: T0)
        # registered now, after `gate check` decided it (a decision counts only when it was
        # made by the registration's time: one stamped later did not let the model in)
        now = int(time.time() * 1000)
        r.artifact(f"s3://models/{case}", "model", sha256="cd" * 32,
                   registry_status="registered", now_ms=now)
        r.finish(now_ms=now + 1000, timeout=5)

    def firing(records: list[Any]) -> set[tuple[str, str, str]]:
        return {(a.run_id, a.detector, a.probable_cause) for a in records
                if isinstance(a, Alert) and a.status == "firing"
                and a.detector in ("rule:registry_without_gate", "rule:seed_variance")}

    want = {(world.rid("nogate"), "rule:registry_without_gate", "artifact"),
            # the seeds case's decision (test above) measured the spread: a learning signal
            (world.rid("seeds"), "rule:seed_variance", "learning")}
    alerts = h.collect("rw.alerts", lambda rs: firing(rs) >= want, 90, settle_s=6)
    assert firing(alerts) == want, h.worker_log()
    page = next(a for a in alerts if isinstance(a, Alert)
                and a.detector == "rule:registry_without_gate")
    assert page.severity == "critical"
    assert "s3://models/nogate" in page.title


def test_a_decision_kafka_did_not_store_exits_3_not_pass(world: World, capsys,
                                                          monkeypatch) -> None:
    """A spooled decision used to exit 0 (pass): CI promoted the model while the decision
    waited in the spool of a runner that was about to be thrown away."""
    base = ["gate", "check", world.rid("good"), "--policy", POLICY, "--database", world.db,
            "--json"]
    capsys.readouterr()
    code = cli.main([*base, "--topic-prefix", f"nosuch-{world.h.prefix}", "--timeout", "20"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert (f"was not delivered: topic 'nosuch-{world.h.prefix}rw.artifact' does not exist "
            "(check --topic-prefix)") in err
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # nothing listens
    code = cli.main([*base, "--topic-prefix", world.h.prefix, "--timeout", "2"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert (f"was not delivered: Kafka did not store it in topic '{world.h.prefix}rw.artifact' "
            "within --timeout 2 s") in err


def test_a_run_nothing_is_stored_for_exits_3_even_with_a_named_policy(world: World,
                                                                     capsys) -> None:
    code, err = world.cli(capsys, "check", world.rid("typo"), "--policy", POLICY,
                          "--name", "credit-risk-release")
    assert code == 3
    assert f"nothing is stored for run {world.rid('typo')}: no manifest and no evaluation" in err


def test_an_approval_stamped_before_its_review_is_refused(world: World, capsys) -> None:
    """The latest decision by time counts: an approval stamped before the review (an old
    --at-ms, a reviewer's clock behind the CI runner's) said "release allowed" and was not."""
    rid = world.rid("noslice")
    before = len(world.gate_rows(rid, 0))
    code, out = world.check(capsys, "noslice")
    assert (code, out["decision"]) == (2, "review")
    world.gate_rows(rid, before + 1)
    review_ms = int(world.client.query(
        f"SELECT toUnixTimestamp64Milli(ts) FROM {world.db}.gate_decisions FINAL "  # noqa: S608
        f"WHERE event_id = '{out['event_id']}'").result_rows[0][0])
    code, err = world.cli(capsys, "approve", rid, "--by", "ana", "--reason", "ok",
                          "--at-ms", str(review_ms - 3_600_000))
    assert code == 3 and "is not after the review it approves" in err
    code, ok = world.cli(capsys, "approve", rid, "--by", "ana", "--reason", "ok")
    assert code == 0 and ok["approves"] == out["event_id"]
    world.gate_rows(rid, before + 2)
    stamped = int(world.client.query(
        f"SELECT toUnixTimestamp64Milli(ts) FROM {world.db}.gate_decisions FINAL "  # noqa: S608
        f"WHERE event_id = '{ok['event_id']}'").result_rows[0][0])
    assert stamped > review_ms
