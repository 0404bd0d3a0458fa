"""The store's view of SDK records, published through the real broker and sink (round 12).

* A step logged with metrics and no loss (an evaluation logged as a step) is published
  by the SDK with a NaN loss and ``nonfinite_count`` 0, meaning "no loss". The raw row
  keeps it (``has_loss`` = 0); the run summary's final loss is that of the last step
  with a loss and the loss rollups leave the placeholder out (samples too). A real NaN
  loss (the SDK counts it in ``nonfinite_count``) is stored and stays visible: the final
  loss and the bucket's average are NaN.
* ``run_timeline.sql`` shows the data reports of the dataset versions a run reads,
  published the SDK's default way (``data.report`` without a run id), and
  ``run_chain.sql`` shows a gate published with thresholds and measured values (no
  reasons) as ``auc 0.81 >= 0.8``.
* Retention: the data reports of a dataset version that a retained run's manifest names
  outlive the raw TTL (they carry no run id); those of a routine run's dataset expire.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sinkkit import ROOT, Store, delete_topics, make_topics, migrate, wait

from runwatch.adapters.clickhouse import make_client
from runwatch.adapters.evidence import EvidenceReader
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.client import data, init
from runwatch.client.emit import emit_records
from runwatch.core.storage.retention import parse_rules
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings

pytestmark = pytest.mark.integration
QUERIES = ROOT / "schemas" / "clickhouse" / "queries"
GOOD = {"f_age": [float(i % 50) for i in range(200)], "label": ["a", "b"] * 100}


class Pipe:
    """SDK transports and publishers onto fresh topics, and a sink thread into ``db``."""

    def __init__(self, bootstrap: str, store_url: str, db: str, topics: dict[str, str]) -> None:
        self.kafka = KafkaSettings(bootstrap_servers=bootstrap)
        self.topics = topics
        self.stop = threading.Event()
        self.sink = Sink(SinkSettings(group_id=f"sink-{db}", topics=tuple(topics.values())),
                         self.kafka, ClickHouseSettings(url=store_url, database=db), self.stop)
        self.thread = threading.Thread(target=self.sink.run, daemon=True)
        self.transports: list[KafkaTransport] = []

    def transport(self, name: str) -> KafkaTransport:
        t = KafkaTransport(self.kafka, ProducerSettings(spool_dir=None), name=name)
        self.transports.append(t)
        return t

    def run(self, run_id: str, at: int, **kw: Any) -> Any:
        clock = kw.pop("clock", lambda: at)
        return init("fam-r12", run_id=run_id, team="r12", transport=self.transport(run_id),
                    topics=self.topics, install_hooks=False, capture_lineage=False,
                    clock=clock, **kw)

    def publisher(self, name: str) -> Publisher:
        return Publisher(self.transport(name), kind="sdk", topics=self.topics)

    def flush(self) -> None:
        for t in self.transports:
            assert t.close(15).failed == 0

    def __enter__(self) -> Pipe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


@pytest.fixture
def topics(stack) -> Iterator[dict[str, str]]:
    made = make_topics(stack.bootstrap_servers, partitions=2)
    yield made
    delete_topics(stack.bootstrap_servers, list(made.values()))


def q(client: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in client.query(sql).result_rows]


@dataclasses.dataclass
class Published:
    db: str
    client: Any  # the pipeline user, no default database
    scoped: Any  # a client whose default database is db (the canned queries)
    good: str  # a healthy run with metrics-only steps
    nan_run: str  # a run whose last real loss is NaN
    chain: str  # a run reading ds@v7, gated
    ds: str
    summaries: dict[str, float | None]
    failed_ok: str  # the SDK said failed; the epilog, later, succeeded (exit 0)
    killed: str  # no SDK (the hooks alone): the epilog said failed

    def query(self, name: str, run_id: str) -> list[tuple[Any, ...]]:
        return q(self.scoped, (QUERIES / name).read_text().replace("run-5-0", run_id))


@pytest.fixture(scope="module")
def published(stack) -> Iterator[Published]:
    """Everything published once through the SDK, the broker and a real sink."""
    uid = uuid.uuid4().hex[:8]
    db = f"t_r12_{uid}"
    client = migrate(stack.clickhouse_url, db)
    scoped = make_client(ClickHouseSettings(url=stack.clickhouse_url, database=db))
    wall = (int(time.time() * 1000) // 3_600_000 - 1) * 3_600_000  # an hour's start, past
    good, nan_run, chain = f"r12-noloss-{uid}", f"r12-nan-{uid}", f"r12-chain-{uid}"
    failed_ok, killed = f"r12-epilog0-{uid}", f"r12-killed-{uid}"
    ds = f"s3://r12-{uid}/clicks"
    topics = make_topics(stack.bootstrap_servers, partitions=2)
    try:
        with Pipe(stack.bootstrap_servers, stack.clickhouse_url, db, topics) as pipe:
            # a healthy run: the trainer logs its eval metrics every 30 steps as a step of
            # their own (no loss), and a last summary step without a loss
            clk = {"t": wall}
            run = pipe.run(good, wall, clock=lambda: clk["t"])
            for i in range(1, 121):
                clk["t"] = wall + i * 1000
                run.step(i, loss=2.0 - i / 200, metrics={"acc": 0.5 + i / 1000},
                         now_ms=clk["t"], step_ms=1000.0)
                if i % 30 == 0:
                    run.step(i, metrics={"eval_acc": 0.6 + i / 1000}, now_ms=clk["t"] + 100,
                             step_ms=1000.0)
            run.step(121, metrics={"train_runtime": 121.0}, now_ms=wall + 121_000,
                     step_ms=1000.0)
            run.finish("succeeded", now_ms=wall + 122_000)
            # a run whose last real loss is NaN (the SDK counts it): stored and visible
            bad = pipe.run(nan_run, wall)
            bad.step(1, loss=1.5, now_ms=wall + 1000, step_ms=1000.0)
            bad.step(2, loss=float("nan"), now_ms=wall + 2000, step_ms=1000.0)
            bad.step(3, metrics={"eval_acc": 0.5}, now_ms=wall + 3000, step_ms=1000.0)
            bad.finish("failed", now_ms=wall + 4000)
            # the chain: a report of the dataset version (no run id), a run reading it, a
            # gate published with thresholds and measured values only
            data.report(ds, "v7", "all", GOOD, publisher=pipe.publisher("r12-data"),
                        now_ms=wall + 500)
            data.report(ds, "v8", "all", GOOD, publisher=pipe.publisher("r12-data8"),
                        now_ms=wall + 600)  # another version: not the run's
            c = pipe.run(chain, wall + 1000, datasets=[f"{ds}@v7"])
            c.step(1, loss=1.0, now_ms=wall + 2000, step_ms=1000.0)
            c.gate("eval", "pass", thresholds={"auc": 0.8}, measured={"auc": 0.81},
                   now_ms=wall + 3000)
            c.gate("size", "fail", thresholds={"mb": 100.0}, measured={"mb": 120.0},
                   reasons=["model 120 MB > 100 MB"], now_ms=wall + 3500)
            c.finish("succeeded", now_ms=wall + 4000)
            # the Slurm epilog's end after the SDK's own (`runwatch emit job-state`, kind
            # hook): exit 0 from a batch script whose last command succeeded, and a job
            # killed before its SDK could say anything
            hook_clock = {"t": wall}
            hook = Publisher(pipe.transport("r12-epilog"), kind="hook", topics=topics,
                             clock=lambda: hook_clock["t"])
            r = pipe.run(failed_ok, wall)
            r.step(1, loss=1.0, now_ms=wall + 1000, step_ms=1000.0)
            r.finish("failed", reason="CUDA out of memory", now_ms=wall + 4000)
            hook_clock["t"] = wall  # a job only the hooks report: its SDK sent nothing
            assert not emit_records(hook, [{"type": "JobEvent", "run_id": killed,
                                            "state": "running", "attempt": 1}]).errors
            hook_clock["t"] = wall + 49_000
            for rid, epilog in ((failed_ok, "succeeded"), (killed, "failed")):
                assert not emit_records(hook, [{"type": "JobEvent", "run_id": rid,
                                                "state": epilog, "attempt": 1}]).errors
            pipe.flush()
            runs = f"('{good}', '{nan_run}', '{chain}', '{failed_ok}', '{killed}')"
            summaries = wait(lambda: dict(rows) if len(rows := q(
                client, f"SELECT run_id, final_loss FROM {db}.run_summaries FINAL "
                f"WHERE run_id IN {runs}")) == 5 else None, 120, "the run summaries")
            wait(lambda: q(client, f"SELECT count() FROM {db}.data_quality_reports")[0][0] == 2
                 and q(client, f"SELECT count() FROM {db}.gate_decisions")[0][0] == 2,
                 60, "the reports and gates")
        yield Published(db, client, scoped, good, nan_run, chain, ds, summaries,
                        failed_ok, killed)
    finally:
        delete_topics(stack.bootstrap_servers, list(topics.values()))


def test_the_final_loss_is_the_last_real_loss(published: Published) -> None:
    p = published
    # that of the last step with a loss (step 120), not the placeholder of steps 120/121
    assert p.summaries[p.good] == pytest.approx(2.0 - 120 / 200)
    # a real NaN loss (counted) is the final loss: visible, not skipped
    nan_loss = p.summaries[p.nan_run]
    assert nan_loss is not None and math.isnan(nan_loss)


def test_the_loss_rollups_leave_the_placeholders_out(published: Published) -> None:
    p = published
    for table in ("learning_steps_1m", "learning_steps_1h"):
        (n, lo, hi, avg), = q(p.client,
            f"SELECT countMerge(samples), minMerge(loss_min), maxMerge(loss_max), "
            f"avgMerge(loss_avg) FROM {p.db}.{table} WHERE run_id = '{p.good}'")
        assert (n, lo, hi) == (120, pytest.approx(1.4), pytest.approx(1.995)), table
        assert avg == pytest.approx(sum(2.0 - i / 200 for i in range(1, 121)) / 120), table
        (n, avg), = q(p.client, f"SELECT countMerge(samples), avgMerge(loss_avg) "
                                f"FROM {p.db}.{table} WHERE run_id = '{p.nan_run}'")
        assert n == 2 and math.isnan(avg), table  # the real NaN is a sample


def test_the_raw_rows_keep_the_placeholder_and_say_it_is_no_loss(published: Published) -> None:
    p = published
    raw = q(p.client, f"SELECT step, nonfinite_count, has_loss FROM {p.db}.learning_steps "
                      f"WHERE run_id = '{p.good}' AND isNaN(loss) ORDER BY step")
    assert raw == [(30, 0, 0), (60, 0, 0), (90, 0, 0), (120, 0, 0), (121, 0, 0)]
    assert q(p.client, f"SELECT count() FROM {p.db}.learning_steps "
                       f"WHERE run_id = '{p.good}' AND has_loss") == [(120,)]
    assert q(p.client, f"SELECT step, nonfinite_count, has_loss FROM {p.db}.learning_steps "
                       f"WHERE run_id = '{p.nan_run}' AND isNaN(loss) ORDER BY step") == [
        (2, 1, 1), (3, 0, 0)]


def test_run_timeline_shows_the_reports_of_the_runs_dataset_versions(
        published: Published) -> None:
    p = published
    timeline = p.query("run_timeline.sql", p.chain)
    # the report of the version the run reads (published without a run id), not v8's
    assert [r[3] for r in timeline if r[1] == "data"] == [f"{p.ds}@v7 rows=200"]
    losses = [r[3] for r in p.query("run_timeline.sql", p.good) if r[1] == "learning"]
    assert losses and all("nan" not in str(d).lower() for d in losses)


def test_run_chain_shows_a_gates_measured_values_against_its_thresholds(
        published: Published) -> None:
    p = published
    gates = {r[2]: r[3] for r in p.query("run_chain.sql", p.chain) if r[0] == "gate"}
    assert gates == {"eval pass": "auc 0.81 >= 0.8", "size fail": "model 120 MB > 100 MB"}


@pytest.fixture
def system_store(tmp_path: Path) -> Iterator[Store]:
    """A store whose read-write user is granted SYSTEM (the test stops and starts merges)."""
    import yaml

    from runwatch.resources import users_file

    doc = yaml.safe_load(users_file().read_text())
    doc["users"]["runwatch"]["grants"] = ["system"]
    (tmp_path / "users.yaml").write_text(yaml.safe_dump(doc))
    store = Store(tmp_path / "chdb", users_file=tmp_path / "users.yaml")
    store.start()
    yield store
    store.stop()


def test_the_reports_of_a_retained_runs_datasets_outlive_the_raw_ttl(
        stack, topics: dict[str, str], system_store: Store) -> None:
    uid = uuid.uuid4().hex[:8]
    db = f"t_r12_ttl_{uid}"
    rules = parse_rules((ROOT / "schemas" / "retention.yaml").read_text())
    rules = dataclasses.replace(rules, raw_ttl_s=10, active_within_s=1, refresh_s=1)
    client = migrate(system_store.url, db, rules)
    client.command(f"SYSTEM STOP TTL MERGES {db}.data_quality_reports")
    now = int(time.time() * 1000)
    kept, unversioned, routine = (f"s3://r12-{uid}/{n}" for n in ("kept", "unv", "routine"))
    with Pipe(stack.bootstrap_servers, system_store.url, db, topics) as pipe:
        pub = pipe.publisher("r12-dq")
        for uri in (kept, unversioned, routine):  # the SDK's default way: no run id
            data.report(uri, "v1", "part-0", GOOD, publisher=pub, now_ms=now)
            data.report(uri, "v2", "part-0", GOOD, publisher=pub, now_ms=now)
        gated = pipe.run(f"r12-gated-{uid}", now, datasets=[f"{kept}@v1"])
        gated.gate("eval", "pass", thresholds={"auc": 0.8}, measured={"auc": 0.9},
                   now_ms=now)  # material: retained
        gated.finish("succeeded", now_ms=now + 1)
        loose = pipe.run(f"r12-loose-{uid}", now, datasets=[unversioned])
        loose.gate("eval", "pass", now_ms=now)
        loose.finish("succeeded", now_ms=now + 1)
        plain = pipe.run(f"r12-plain-{uid}", now, datasets=[f"{routine}@v1"])  # routine
        plain.finish("succeeded", now_ms=now + 1)
        pipe.flush()
        wait(lambda: q(client, f"SELECT count() FROM {db}.data_quality_reports")[0][0] == 6
             and q(client, f"SELECT count() FROM {db}.run_manifests")[0][0] == 3
             and q(client, f"SELECT count() FROM {db}.gate_decisions")[0][0] == 2,
             90, "the reports, manifests and gates")
    want = {(kept, "v1"), (unversioned, "v1"), (unversioned, "v2")}
    runs = {f"r12-gated-{uid}", f"r12-loose-{uid}"}
    wait(lambda: {r for (r,) in q(client, f"SELECT run_id FROM {db}.retained_runs")} == runs,
         30, "the retained_runs dictionary")
    datasets = {(kept, "v1"), (unversioned, "")}
    # the datasets' dictionary refreshes with the runs' (the store reloads both)
    if q(client, "SELECT count() FROM system.dictionaries WHERE database = "
                 f"'{db}' AND name = 'retained_datasets'")[0][0]:
        wait(lambda: set(q(client, "SELECT dataset_uri, dataset_version FROM "
                                   f"{db}.retained_datasets")) == datasets,
             30, "the retained_datasets dictionary")
    time.sleep(max(0.0, now / 1000 + 12 - time.time()))  # every report is past the TTL
    client.command(f"SYSTEM START TTL MERGES {db}.data_quality_reports")
    client.command(f"OPTIMIZE TABLE {db}.data_quality_reports FINAL")
    left = set(q(client, f"SELECT dataset_uri, dataset_version FROM {db}.data_quality_reports"))
    assert left == want
    assert set(q(client, f"SELECT dataset_uri, dataset_version FROM {db}.retained_datasets")) \
        == datasets


def test_the_sdks_own_end_is_the_outcome_over_a_later_epilog(published: Published) -> None:
    """An epilog reading exit 0 (the batch script's last command, a log upload, succeeded)
    published succeeded 45 s after the SDK's failed, and the summary and cost said so."""
    p = published
    got = dict(q(p.client, f"SELECT run_id, toString(outcome) FROM {p.db}.run_summaries FINAL "
                           f"WHERE run_id IN ('{p.failed_ok}', '{p.killed}')"))
    assert got == {p.failed_ok: "failed", p.killed: "failed"}


def test_investigate_reads_a_runs_outcome_as_the_summary_does(published: Published) -> None:
    """`runwatch investigate` listed the epilog's later `succeeded` as the state of a family
    run whose SDK said failed, where the summary, cost and SLOs say failed."""
    p = published
    ev = EvidenceReader(p.client, p.db).evidence(p.chain, int(time.time() * 1000))
    states = {r["run_id"]: r["state"] for r in ev.family_runs}
    assert states.get(p.failed_ok) == "failed", states
