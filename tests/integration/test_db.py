"""`runwatch db`: idempotent migrations and TTL-based retention on the real engine."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import uuid

import pytest
from sinkkit import ROOT, Store, migrate

from runwatch.adapters import clickhouse as ch
from runwatch.core.storage.retention import parse_rules
from runwatch.core.storage.rows import COLUMNS, Origin, record_rows
from runwatch.testing.synth import mixed_events

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_store(tmp_path_factory: pytest.TempPathFactory):
    """A store whose read-write user is granted SYSTEM (the TTL test stops and starts merges)."""
    import yaml

    from runwatch.resources import users_file

    doc = yaml.safe_load(users_file().read_text())
    doc["users"]["runwatch"]["grants"] = ["system"]
    folder = tmp_path_factory.mktemp("db")
    (folder / "users.yaml").write_text(yaml.safe_dump(doc))
    store = Store(folder / "chdb", users_file=folder / "users.yaml")
    store.start()
    yield store
    store.stop()


def test_migrate_is_idempotent_and_records_versions(own_store: Store) -> None:
    db = f"t_{uuid.uuid4().hex[:10]}"
    env = {"CLICKHOUSE_URL": own_store.url, "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.run(
            [sys.executable, "-m", "runwatch", "db", "migrate", "--database", db],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=True,
        ).stdout
        for _ in range(2)
    ]
    assert "applied 0001_raw_execution" in runs[0] and "applied retention" in runs[0]
    assert runs[1].strip() == f"{db} is up to date"
    client = migrate(own_store.url, db)
    versions = client.query(
        f"SELECT version FROM {db}.schema_migrations ORDER BY version"
    ).result_rows
    files = sorted(int(p.name[:4]) for p in (ROOT / "schemas" / "clickhouse").glob("*.sql"))
    assert [v for (v,) in versions] == [*files, ch.RETENTION_VERSION]


def test_tiny_ttl_expires_routine_rows_keeps_retained_rollups_and_summaries(
    own_store: Store,
) -> None:
    db = f"t_{uuid.uuid4().hex[:10]}"
    rules = parse_rules((ROOT / "schemas" / "retention.yaml").read_text())
    rules = dataclasses.replace(rules, raw_ttl_s=10, active_within_s=1, refresh_s=1)
    client = migrate(own_store.url, db, rules)
    for table in rules.raw_tables:  # the test forces the TTL merge itself (OPTIMIZE FINAL below)
        client.command(f"SYSTEM STOP TTL MERGES {db}.{table}")
    start = int(time.time() * 1000) - 2_000  # rows span now-2s..now+5.3s: alive at insert
    events = mixed_events(seed=3, runs=8, ticks=3, start_ms=start, tick_ms=100)
    by_table: dict[str, list] = {}
    for i, e in enumerate(events):
        for table, row in record_rows(e.record, Origin("t", 0, i)):
            by_table.setdefault(table, []).append(row)
    for table, rows in by_table.items():
        ch.insert_rows(client, f"{db}.{table}", COLUMNS[table], rows)
    runs = [f"run-3-{r}" for r in range(8)]
    client.command(
        f"INSERT INTO {db}.run_summaries (run_id, outcome, updated_at) "
        f"SELECT arrayJoin({runs}), 'succeeded', now64(3)"
    )
    before = dict(
        client.query(f"SELECT run_id, count() FROM {db}.gpu_samples GROUP BY run_id").result_rows
    )
    assert set(before) == set(runs)
    time.sleep(16)  # every row is now older than the TTL and every run inactive
    retained = {
        r
        for (r,) in client.query(
            f"SELECT run_id FROM {db}.retention_marks GROUP BY run_id "
            "HAVING max(anomalous) = 1 OR max(material) = 1"
        ).result_rows
    }
    # mixed_events: every 5th run alerts (anomalous), every 7th is gated (material)
    assert retained == {f"run-3-{r}" for r in range(8) if r % 5 == 0 or r % 7 == 0}
    # the store reloads the dictionary by itself within its lifetime (1 s here) and its
    # check interval, as a ClickHouse server does: the embedded engine never did, so the
    # TTL saw the dictionary as first loaded (no run retained) and deleted every raw row
    deadline = time.monotonic() + 20
    while True:
        in_dict = {r for (r,) in client.query(
            f"SELECT run_id FROM {db}.retained_runs").result_rows}
        if in_dict == retained or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert in_dict == retained
    for table in rules.raw_tables:
        client.command(f"SYSTEM START TTL MERGES {db}.{table}")
        client.command(f"OPTIMIZE TABLE {db}.{table} FINAL")
    after = dict(
        client.query(f"SELECT run_id, count() FROM {db}.gpu_samples GROUP BY run_id").result_rows
    )
    assert after == {r: before[r] for r in retained}
    steps = {
        r
        for (r,) in client.query(
            f"SELECT DISTINCT toString(run_id) FROM {db}.step_timings"
        ).result_rows
    }
    assert steps == retained
    rollup = client.query(
        f"SELECT uniqExact(run_id), countMerge(samples) FROM {db}.gpu_samples_1m"
    ).result_rows[0]
    assert rollup == (8, sum(before.values()))
    assert client.query(f"SELECT count() FROM {db}.run_summaries FINAL").result_rows[0][0] == 8
    assert client.query(f"SELECT count() FROM {db}.run_manifests").result_rows[0][0] == 8


def test_render_cluster_variant() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "runwatch", "db", "render", "--cluster", "prod", "--database", "rw"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert "CREATE TABLE IF NOT EXISTS rw.gpu_samples_local ON CLUSTER prod" in out
    assert (
        "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')"
        in out
    )
    assert "ENGINE = Distributed(prod, rw, gpu_samples_local, cityHash64(run_id))" in out
    assert "TO rw.gpu_samples_1m_local" in out and "FROM rw.gpu_samples_local" in out
    assert "ALTER TABLE rw.gpu_samples_local ON CLUSTER prod MODIFY TTL" in out


@pytest.mark.parametrize("case", ["missing", "unmigrated", "behind"])
def test_the_sink_refuses_a_database_it_cannot_write(own_store: Store, case: str) -> None:
    """A database that did not exist kept the sink retrying for ever ("ClickHouse
    unavailable") and ended in a traceback on stop; one not migrated to this release
    took the rows while every run summary failed (logged only)."""
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db) if case == "behind" else None
    if case == "unmigrated":
        from sinkkit import settings

        ch.make_client(settings(own_store.url, db), database="").command(
            f"CREATE DATABASE {db}")
    if client is not None:  # as if the newest migration had not been applied yet
        client.command(f"ALTER TABLE {db}.schema_migrations DELETE WHERE version = "
                       f"(SELECT max(version) FROM {db}.schema_migrations WHERE version < "
                       f"{ch.RETENTION_VERSION}) SETTINGS mutations_sync = 1")
    done = subprocess.run(
        [sys.executable, "-m", "runwatch", "sink", "--database", db, "--group", f"g-{db}",
         "--bootstrap", "127.0.0.1:9"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
        env={"CLICKHOUSE_URL": own_store.url, "PATH": "/usr/bin:/bin"})
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"runwatch db migrate --database {db}" in last
    assert ("does not exist" if case == "missing" else "lacks migration") in last


def test_a_rules_change_a_rollup_cannot_take_is_refused_and_others_apply(
        own_store: Store, tmp_path) -> None:
    """Changing a rollup's bucket width or quantiles printed "applied retention" and changed
    nothing (the view keeps the query it was made with); now migrate names the rollups and
    what to do, records nothing, and a change it can make (a TTL) still applies."""
    db = f"t_{uuid.uuid4().hex[:10]}"
    migrate(own_store.url, db)
    text = (ROOT / "schemas" / "retention.yaml").read_text()
    env = {"CLICKHOUSE_URL": own_store.url, "PATH": "/usr/bin:/bin"}

    def run(rules: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / f"rules-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(rules)
        return subprocess.run(
            [sys.executable, "-m", "runwatch", "db", "migrate", "--database", db,
             "--rules", str(path)], capture_output=True, text=True, env=env, cwd=ROOT,
            timeout=120, check=False)

    wider = text.replace("{name: 1m, interval: 1m, ttl: 90d}", "{name: 1m, interval: 5m, ttl: 90d}")
    fewer = text.replace("quantiles: [0.5, 0.9, 0.99]", "quantiles: [0.5, 0.95]")
    assert wider != text and fewer != text
    for rules, frag in ((wider, "gpu_samples_1m_mv: toIntervalSecond(60) missing"),
                        (fewer, "quantilesState(0.5, 0.9, 0.99) missing")):
        done = run(rules)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert frag.replace("60", "300").replace("0.5, 0.9, 0.99", "0.5, 0.95") in done.stderr
        assert "new name" in done.stderr
    longer = text.replace("ttl: 7d", "ttl: 8d", 1)
    done = run(longer)
    assert done.returncode == 0 and "applied retention" in done.stdout, done.stderr


def test_investigate_since_takes_an_alerts_later_record_of_the_same_millisecond(
        own_store: Store) -> None:
    """An alert fired and resolved in one millisecond (a run retired) was listed as firing
    or not depending on which stored row argMax met first."""
    import json

    from runwatch.core.records import Alert, Source

    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    now = int(time.time() * 1000)
    rows: dict[str, list] = {}
    for n in range(6):  # several alerts, so a lucky row order cannot pass the test
        for offset, status in ((2 * n, "firing"), (2 * n + 1, "resolved")):
            alert = Alert(event_id=f"e{n}-{status}", run_id=f"tie-{n}", emitted_at_ms=now,
                          seq=offset, source=Source(kind="processor", host="h",
                                                   runwatch_version="1"),
                          alert_id=f"a{n}", dedup_key=f"tie-{n}:k", status=status,
                          severity="critical", detector="rule:missing_data_report",
                          indicator="data", observed=1.0, expected=0.0, score=1.0,
                          probable_cause="data", evidence=(), title="t", summary="s",
                          team="t", experiment_family="f", node=None, labels={},
                          first_seen_ms=now, last_seen_ms=now)
            for table, row in record_rows(alert, Origin("rw.alerts", 0, 100 - offset
                                                        if status == "firing" else 200 + n)):
                rows.setdefault(table, []).append(row)
    for table, rs in rows.items():
        ch.insert_rows(client, f"{db}.{table}", COLUMNS[table], rs)
    done = subprocess.run(
        [sys.executable, "-m", "runwatch", "investigate", "--since", "1h", "--json",
         "--database", db], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
        env={"CLICKHOUSE_URL": own_store.url, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"] == []


def test_the_investigation_link_of_every_page_is_a_query_the_store_answers(
        own_store: Store) -> None:
    """The SQL behind Alertmanager's generatorURL and the PagerDuty and Slack links: it
    ordered by a column the alerts table does not have (error 47 in /play)."""
    from runwatch.core.paging.payloads import investigation_query

    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(own_store.url, db)
    assert client.query(investigation_query("r-1' OR 1=1 --", db)).result_rows == []
