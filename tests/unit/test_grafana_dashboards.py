"""The shipped Grafana dashboards: provisioned, in the ClickHouse plugin's format, complete.

Their SQL is run against a real store in tests/integration/test_grafana_sql.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "infra" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DATASOURCE = yaml.safe_load(
    (GRAFANA / "provisioning" / "datasources" / "clickhouse.yml").read_text())["datasources"][0]
PROVIDER = yaml.safe_load(
    (GRAFANA / "provisioning" / "dashboards" / "runwatch.yml").read_text())["providers"][0]
DDL = "\n".join(p.read_text() for p in sorted((ROOT / "schemas" / "clickhouse").glob("*.sql")))
TABLES = set(re.findall(r"CREATE TABLE IF NOT EXISTS \$\{db\}\.(\w+)", DDL))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _query_panels(doc: dict) -> list[dict]:
    return [p for p in doc["panels"] if p.get("type") != "row"]


def test_the_four_dashboards_ship() -> None:
    uids = {_load(p)["uid"] for p in DASHBOARDS}
    assert uids >= {"runwatch-fleet", "runwatch-run", "runwatch-data", "runwatch-alerts"}
    assert len(uids) == len(DASHBOARDS), "dashboard uids are unique"


def test_provisioning_loads_the_folder_compose_mounts() -> None:
    grafana = COMPOSE["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts["./infra/grafana/dashboards"] == PROVIDER["options"]["path"]
    assert mounts["./infra/grafana/provisioning"] == "/etc/grafana/provisioning"
    assert PROVIDER["type"] == "file"
    assert DATASOURCE["type"] in grafana["environment"]["GF_INSTALL_PLUGINS"].split(",")


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_use_the_provisioned_clickhouse_datasource_in_sql_mode(path: Path) -> None:
    doc = _load(path)
    panels = _query_panels(doc)
    assert panels
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    want = {"type": DATASOURCE["type"], "uid": DATASOURCE["uid"]}
    for panel in panels:
        assert panel["datasource"] == want, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == want, panel["title"]
            assert target["editorType"] == "sql" and target["rawSql"].strip(), panel["title"]
            fmt = {0: "timeseries", 1: "table"}[target["format"]]
            assert target["queryType"] == fmt, panel["title"]
            if panel["type"] == "timeseries":
                assert target["format"] == 0, f"{panel['title']}: a time series panel"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_sql_names_only_tables_of_the_schema(path: Path) -> None:
    doc = _load(path)
    queries = [t["rawSql"] for p in _query_panels(doc) for t in p["targets"]]
    queries += [v["query"]["rawSql"] for v in doc["templating"]["list"] if v["type"] == "query"]
    for sql in queries:
        for table in re.findall(r"\b(?:FROM|(?<!ARRAY )JOIN)\s+([A-Za-z_][\w.]*)", sql):
            assert table in TABLES, f"{path.name}: {table} is not a table of schemas/clickhouse"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_variable_used_is_defined(path: Path) -> None:
    doc = _load(path)
    defined = {v["name"] for v in doc["templating"]["list"]}
    texts = [t["rawSql"] for p in _query_panels(doc) for t in p["targets"]]
    texts += [v["query"]["rawSql"] for v in doc["templating"]["list"]]
    used = {m[0] or m[1] for sql in texts
            for m in re.findall(r"\$\{(\w+)[^}]*\}|\$(?!__)([A-Za-z]\w*)", sql)}
    assert used <= defined, f"{path.name}: undefined variables {used - defined}"
    for var in doc["templating"]["list"]:
        assert var["datasource"]["uid"] == DATASOURCE["uid"]
        assert var["definition"] == var["query"]["rawSql"]


def test_run_page_covers_the_four_signal_classes_and_alerts() -> None:
    doc = _load(GRAFANA / "dashboards" / "run.json")
    assert [v["name"] for v in doc["templating"]["list"]] == ["run_id"]
    sql = " ".join(t["rawSql"] for p in _query_panels(doc) for t in p["targets"])
    for table in ("gpu_samples", "step_timings", "learning_steps", "validation_results",
                  "data_quality_reports", "artifacts", "gate_decisions", "alerts"):
        assert f"FROM {table}" in sql, table
