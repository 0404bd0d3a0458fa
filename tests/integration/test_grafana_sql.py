"""Every Grafana panel's SQL runs on the store as the readonly user and returns what it plots.

Grafana cannot run here, so the test does Grafana's part: it fills each
dashboard's variables (by running the variable's own query, as Grafana does),
expands the ClickHouse datasource's macros (grafana_sql.py), and runs the
result through the readonly user against a fresh database that the sink filled
from Kafka. Time-series panels must return a DateTime ``time`` column first,
then numbers (string columns become series labels); tables and stats must
return columns, stats a number.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grafana_sql import QueryContext, expand_macros, fill_variables, render
from sinkkit import (
    ROOT,
    SinkProc,
    delete_topics,
    expected_counts,
    make_topics,
    migrate,
    publish,
    table_counts,
)

import runwatch
from runwatch.adapters import clickhouse as ch
from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.client import data
from runwatch.core.records import DatasetRef
from runwatch.testing.synth import mixed_events

pytestmark = pytest.mark.integration
DASHBOARDS = sorted((ROOT / "infra" / "grafana" / "dashboards").glob("*.json"))
ALL = "$__all"
RUNS, TICKS = 10, 60

# Panels that may be empty on this data, and why (anything else must return rows).
MAY_BE_EMPTY = {
    "GPU health: XID, ECC, throttling": "the synthetic GPUs raise no XID/ECC/throttle",
    "Data alerts on runs that read it": "synthetic alerts are not data alerts",
}
DATASET = "s3://data/imagenet"
SDK_RUN = "grafana-sdk-run"
SDK_STEPS = 30


def _transport(bootstrap: str, tmp: Path, name: str) -> KafkaTransport:
    return KafkaTransport(KafkaSettings(bootstrap_servers=bootstrap),
                          ProducerSettings(spool_dir=tmp / name), name=name)


def _sdk_run(bootstrap: str, topics: dict[str, str], start_ms: int, tmp: Path) -> None:
    """A training job through the SDK: steps, validation, checkpoint, artifact, gate."""
    run = runwatch.init("grafana", team="vision", run_id=SDK_RUN, strict=True,
                        datasets=[DatasetRef(uri=DATASET, version="v1")],
                        transport=_transport(bootstrap, tmp, "sdk"), topics=topics,
                        install_hooks=False, capture_lineage=False, clock=lambda: start_ms)
    model = tmp / "model.pt"
    model.write_bytes(b"weights" * 100)
    at = start_ms
    for step in range(SDK_STEPS):
        at = start_ms + (step + 1) * 1000
        run.step(step, loss=2.0 / (step + 1), lr=1e-3, grad_norm=1.5, samples=32,
                 now_ms=at, step_ms=900.0, loader_wait_ms=50.0)
        if step % 10 == 9:
            run.validation(step, {"accuracy": 0.5 + step / 100}, slice="all", now_ms=at)
    run.checkpoint(model, step=SDK_STEPS - 1, started_at_ms=at - 500, duration_ms=500.0,
                   now_ms=at)
    run.artifact(model, registry_status="registered", now_ms=at)
    run.gate("release", "pass", thresholds={"accuracy": 0.6}, measured={"accuracy": 0.79},
             now_ms=at)
    run.finish(now_ms=at + 1000)


def _report_batches(bootstrap: str, topics: dict[str, str], start_ms: int, tmp: Path) -> int:
    """Data-quality reports of two batches, the second drifted, as a user publishes them."""
    transport = _transport(bootstrap, tmp, "reports")
    publisher = Publisher(transport, kind="sdk", topics=topics)
    n = 200
    batches = [
        {"x": [float(i % 50) for i in range(n)], "y": [None if i % 10 == 0 else 1.0
                                                       for i in range(n)],
         "label": ["cat" if i % 2 else "dog" for i in range(n)]},
        {"x": [float(30 + i % 50) for i in range(n)], "y": [1.0] * n,
         "label": ["cat"] * n},
    ]
    try:
        for i, batch in enumerate(batches):
            data.report(DATASET, "v1", f"part={i}", batch, baseline="grafana", label="label",
                        run_id=SDK_RUN, publisher=publisher, baseline_directory=tmp,
                        now_ms=start_ms + (i + 1) * 60_000)
        assert transport.flush(30) == 0
    finally:
        transport.close(10)
    return len(batches)


@pytest.fixture(scope="module")
def store(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, QueryContext]]:
    """A fresh database on the shared store, filled through Kafka by `runwatch sink`."""
    db = f"t_grafana_{uuid.uuid4().hex[:8]}"
    url = stack.clickhouse_url
    writer = migrate(url, db)
    topics = make_topics(stack.bootstrap_servers, partitions=2)
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - 30 * 60_000
    events = mixed_events(seed=11, runs=RUNS, ticks=TICKS, start_ms=start_ms)
    expected = expected_counts(events)
    tmp = tmp_path_factory.mktemp("grafana")
    log = tmp / "sink.log"
    sink = SinkProc(stack.bootstrap_servers, topics, url, db, log)
    try:
        publish(stack.bootstrap_servers, topics, events)
        _sdk_run(stack.bootstrap_servers, topics, start_ms, tmp)
        expected["data_quality_reports"] += _report_batches(
            stack.bootstrap_servers, topics, start_ms, tmp)
        expected["learning_steps"] += SDK_STEPS
        expected["validation_results"] += SDK_STEPS // 10
        expected["run_manifests"] += 1
        sink.start()
        deadline = time.monotonic() + 120
        while any(table_counts(writer, db, sorted(expected))[t] < n
                  for t, n in expected.items()):
            assert sink.alive(), log.read_text()[-3000:]
            assert time.monotonic() < deadline, (
                f"sink did not store every row: {table_counts(writer, db, sorted(expected))} "
                f"!= {dict(expected)}\n{log.read_text()[-2000:]}")
            time.sleep(1)
        summaries = int(writer.query(f"SELECT count() FROM {db}.run_summaries").result_rows[0][0])
        deadline = time.monotonic() + 60
        while summaries < RUNS + 1 and time.monotonic() < deadline:
            time.sleep(1)
            summaries = int(
                writer.query(f"SELECT count() FROM {db}.run_summaries").result_rows[0][0])
        assert summaries >= RUNS + 1, "run summaries were written as runs ended"
    finally:
        sink.stop()
        delete_topics(stack.bootstrap_servers, list(topics.values()))
    reader = ch.make_client(ClickHouseSettings(url=url), readonly=True, database=db)
    # Grafana's default range is the last 6 hours; the interval is range / ~1000 points.
    ctx = QueryContext(from_ms=now_ms - 6 * 3600_000, to_ms=now_ms + 60_000, interval_ms=21_600)
    try:
        yield reader, ctx
    finally:
        writer.command(f"DROP DATABASE IF EXISTS {db}")


def _assignments(reader: Any, doc: dict, ctx: QueryContext, use_all: bool,
                 cap: int = 15) -> list[dict[str, str]]:
    """Variable values to test, resolved in order by each variable's own query.

    Every value (up to ``cap``) of the first variable, each with the first
    value of the later ones (which may depend on it) -- or, with ``use_all``,
    the "All" value wherever a variable offers it.
    """
    variables = doc["templating"]["list"]
    if not variables:
        return [{}]

    def options(var: dict, values: dict[str, str]) -> list[str]:
        assert var["type"] == "query", f"{var['name']}: only query variables are tested"
        sql = render(var["query"]["rawSql"], values, ctx)
        _names, _types, rows = _run(reader, sql)
        assert rows, f"variable {var['name']} has no values on a filled store:\n{sql}"
        if use_all and var.get("includeAll"):
            return [var.get("allValue") or ALL]
        return [str(r[0]) for r in rows]

    out = []
    for first in options(variables[0], {})[:cap]:
        values = {variables[0]["name"]: first}
        for var in variables[1:]:
            values[var["name"]] = options(var, values)[0]
        out.append(values)
    return out


def _base_type(name: str) -> str:
    """``Nullable(LowCardinality(String))`` -> ``String``; ``DateTime64(3)`` -> ``DateTime64``."""
    while name.startswith(("Nullable(", "LowCardinality(")):
        name = name[name.index("(") + 1 : -1]
    return name.split("(", 1)[0]


def _run(reader: Any, sql: str) -> tuple[list[str], list[str], list[list[Any]]]:
    """Run a query; its column names and base types (also when it returns no rows) and rows."""
    doc = json.loads(reader.raw_query(sql, fmt="JSONCompact"))
    names = [m["name"] for m in doc["meta"]]
    types = [_base_type(m["type"]) for m in doc["meta"]]
    return names, types, doc["data"]


def _check_columns(panel: dict, target: dict, names: list[str], types: list[str]) -> None:
    title = panel["title"]
    assert names, f"{title}: no columns"
    numeric = [n for n, t in zip(names, types, strict=True)
               if t.startswith(("UInt", "Int", "Float", "Decimal"))]
    if target["format"] == 0:
        assert names[0] == "time" and types[0].startswith("DateTime"), (
            f"{title}: a time series starts with a DateTime `time` column, got {names[0]} "
            f"{types[0]}")
        assert numeric, f"{title}: a time series needs a number column: {names} {types}"
        labels = [n for n in names[1:] if n not in numeric]
        for label in labels:
            kind = types[names.index(label)]
            assert kind in ("String", "FixedString"), (
                f"{title}: {label} ({kind}) is neither a value nor a series label")
    if panel["type"] == "stat":
        assert numeric, f"{title}: a stat shows a number"


def _cases() -> list[tuple[Path, bool]]:
    out = []
    for path in DASHBOARDS:
        doc = json.loads(path.read_text())
        has_all = any(v.get("includeAll") for v in doc["templating"]["list"])
        out.append((path, False))
        if has_all:
            out.append((path, True))
    return out


@pytest.mark.parametrize(("path", "use_all"), _cases(),
                         ids=lambda v: v.name if isinstance(v, Path) else ("all" if v else "one"))
def test_every_panel_query_runs_as_the_readonly_user(store, path: Path, use_all: bool) -> None:
    reader, ctx = store
    doc = json.loads(path.read_text())
    assignments = _assignments(reader, doc, ctx, use_all)
    panels = [p for p in doc["panels"] if p.get("type") != "row"]
    failures: list[str] = []
    with_rows: set[str] = set()
    for values in assignments:
        for panel in panels:
            for target in panel["targets"]:
                sql = render(target["rawSql"], values, ctx)
                try:
                    names, types, rows = _run(reader, sql)
                except Exception as exc:  # noqa: BLE001 - collect every failing panel
                    failures.append(f"{panel['title']} {values}: {str(exc)[:400]}\n{sql}")
                    continue
                _check_columns(panel, target, names, types)
                if rows:
                    with_rows.add(panel["title"])
    assert not failures, "\n\n".join(failures)
    empty = {p["title"] for p in panels} - with_rows - set(MAY_BE_EMPTY)
    assert not empty, (
        f"{path.name}: panels without rows for every variable value tested "
        f"({assignments}): {sorted(empty)}")


def test_macros_expand_like_the_plugin() -> None:
    ctx = QueryContext(from_ms=1_700_000_000_500, to_ms=1_700_003_600_000, interval_ms=30_000)
    assert expand_macros("WHERE $__timeFilter(ts)", ctx) == (
        "WHERE ts >= toDateTime(1700000000) AND ts <= toDateTime(1700003600)")
    assert expand_macros("$__timeInterval(ts)", ctx) == (
        "toStartOfInterval(toDateTime(ts), INTERVAL 30 second)")
    assert expand_macros("$__fromTime_ms $__interval_s", ctx) == (
        "fromUnixTimestamp64Milli(1700000000500) 30")
    with pytest.raises(ValueError, match="not one the ClickHouse datasource defines"):
        expand_macros("$__unixEpochFilter(ts)", ctx)
    with pytest.raises(ValueError, match="takes 1 argument"):
        expand_macros("$__timeFilter(a, b)", ctx)
    assert fill_variables("run_id = '${run_id}' AND n = $n", {"run_id": "r1", "n": "2"}) == (
        "run_id = 'r1' AND n = 2")
    with pytest.raises(ValueError, match="not defined"):
        fill_variables("${nope}", {})
