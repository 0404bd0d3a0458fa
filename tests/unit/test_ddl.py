from __future__ import annotations

from pathlib import Path

import chdb.session
import pytest

from runwatch.core.storage import ddl
from runwatch.core.storage.retention import parse_rules, render_retention

ROOT = Path(__file__).resolve().parents[2]


def _all() -> list[str]:
    migs = ddl.load_migrations(ROOT / "schemas" / "clickhouse")
    rules = parse_rules((ROOT / "schemas" / "retention.yaml").read_text())
    return [s for m in migs for s in m.statements] + render_retention(rules)


def test_single_node_ddl_runs_twice_on_the_real_engine(tmp_path: Path) -> None:
    session = chdb.session.Session(str(tmp_path / "db"))
    session.query("CREATE DATABASE rw")
    for _ in range(2):
        for statement in ddl.render_statements(_all(), "rw"):
            session.query(statement)
    tables = str(session.query("SELECT name FROM system.tables WHERE database = 'rw'", "CSV"))
    for name in (
        "gpu_samples",
        "gpu_samples_1m",
        "run_summaries",
        "retained_runs",
        "sink_watermarks",
    ):
        assert f'"{name}"' in tables
    session.close()


@pytest.mark.parametrize(
    ("name", "ok"), [("0001_raw.sql", True), ("1_raw.sql", False), ("0002_Raw.sql", False)]
)
def test_file_names(name: str, ok: bool) -> None:
    if ok:
        assert ddl.parse_migration(name, "SELECT 1;").version == 1
    else:
        with pytest.raises(ddl.DdlError):
            ddl.parse_migration(name, "SELECT 1;")


def test_split_drops_comments_and_keeps_semicolons_in_strings_line() -> None:
    text = "-- c\nCREATE TABLE a (x String DEFAULT ';x');\n\nSELECT 2;\n"
    assert ddl.split_statements(text) == ["CREATE TABLE a (x String DEFAULT ';x')", "SELECT 2"]


def test_cluster_variant() -> None:
    out = ddl.render_statements(_all(), "rw", "c1")
    local = [
        s
        for s in out
        if s.startswith("CREATE TABLE IF NOT EXISTS rw.step_timings_local ON CLUSTER c1")
    ]
    assert (
        len(local) == 1
        and "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}" in local[0]
    )
    summary = [s for s in out if "run_summaries_local" in s and s.startswith("CREATE TABLE")][0]
    assert "'{replica}', updated_at)" in summary
    assert (
        "CREATE TABLE IF NOT EXISTS rw.alerts ON CLUSTER c1 AS rw.alerts_local\n"
        "ENGINE = Distributed(c1, rw, alerts_local, cityHash64(run_id))"
        in out
    )
    mv = [
        s
        for s in out
        if s.startswith(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS rw.retention_marks_jobs_mv ON CLUSTER c1"
        )
    ][0]
    assert "TO rw.retention_marks_local" in mv and "FROM rw.job_events_local" in mv
    dictionary = [s for s in out if "DICTIONARY" in s][0]
    assert "ON CLUSTER c1" in dictionary and "FROM rw.retention_marks GROUP BY" in dictionary
    assert all("${db}" not in s for s in out)
    assert len([s for s in out if "ON CLUSTER" not in s]) == 0


@pytest.mark.parametrize(("db", "cluster"), [("bad-name", None), ("rw", "x; DROP")])
def test_names_are_checked(db: str, cluster: str | None) -> None:
    with pytest.raises(ddl.DdlError):
        ddl.render_statements(["SELECT 1 FROM ${db}.t"], db, cluster)


def test_cluster_adds_a_column_to_the_local_and_the_distributed_table() -> None:
    statements = ["CREATE TABLE IF NOT EXISTS ${db}.t\n(\n    run_id String\n)\n"
                  "ENGINE = MergeTree\nORDER BY run_id",
                  "ALTER TABLE ${db}.t ADD COLUMN IF NOT EXISTS x String AFTER run_id"]
    out = ddl.render_statements(statements, "rw", "c")
    assert out[2:] == ["ALTER TABLE rw.t_local ON CLUSTER c ADD COLUMN IF NOT EXISTS x String "
                       "AFTER run_id",
                       "ALTER TABLE rw.t ON CLUSTER c ADD COLUMN IF NOT EXISTS x String "
                       "AFTER run_id"]
    assert ddl.render_statements(statements, "rw")[1] == (
        "ALTER TABLE rw.t ADD COLUMN IF NOT EXISTS x String AFTER run_id")
