"""`runwatch sql` as the readonly user, and the canned investigation queries."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
import uuid

import pytest
from sinkkit import ROOT, Store, migrate

from runwatch.adapters import clickhouse as ch
from runwatch.core.storage.rows import COLUMNS, Origin, record_rows
from runwatch.testing.synth import mixed_events

pytestmark = pytest.mark.integration
QUERIES = sorted((ROOT / "schemas" / "clickhouse" / "queries").glob("*.sql"))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    store = Store(tmp_path_factory.mktemp("sql") / "chdb")
    store.start()
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(store.url, db)
    events = mixed_events(seed=5, runs=6, ticks=120, start_ms=int(time.time() * 1000) - 600_000)
    by_table: dict[str, list] = {}
    for i, e in enumerate(events):
        for table, row in record_rows(e.record, Origin("t", 0, i)):
            by_table.setdefault(table, []).append(row)
    for table, rows in by_table.items():
        ch.insert_rows(client, f"{db}.{table}", COLUMNS[table], rows)
    summary = (ROOT / "schemas" / "clickhouse" / "summary" / "run_summary.sql").read_text()
    client.command(
        summary.replace("${db}", db),
        parameters={"runs": [f"run-5-{r}" for r in range(6)], "idle_pct": 5.0},
    )
    yield store, db
    store.stop()


def sql(store: Store, db: str, query: str, fmt: str = "json") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runwatch", "sql", query, "--format", fmt],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"CLICKHOUSE_URL": store.url, "CLICKHOUSE_DATABASE": db, "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO job_events (event_id) VALUES ('x')",
        "DROP TABLE job_events",
        "ALTER TABLE job_events DELETE WHERE 1",
    ],
)
def test_write_statements_are_refused_with_clickhouse_message(loaded, statement: str) -> None:
    store, db = loaded
    out = sql(store, db, statement)
    assert out.returncode == 1
    assert "readonly" in out.stderr.lower() and "Code: 164" in out.stderr


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_formats(loaded, fmt: str) -> None:
    store, db = loaded
    out = sql(
        store,
        db,
        "SELECT run_id, count() AS n FROM run_manifests GROUP BY run_id ORDER BY run_id",
        fmt,
    )
    assert out.returncode == 0, out.stderr
    if fmt == "json":
        assert [r["run_id"] for r in json.loads(out.stdout)] == [f"run-5-{r}" for r in range(6)]
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(out.stdout)))
        assert rows[0] == ["run_id", "n"] and len(rows) == 7
    else:
        assert "run-5-3" in out.stdout


@pytest.mark.parametrize("path", QUERIES, ids=[p.stem for p in QUERIES])
def test_canned_queries_answer(loaded, path) -> None:
    store, db = loaded
    out = sql(store, db, path.read_text(), "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows, f"{path.name} returned nothing"


def test_json_is_strict_for_non_finite_values(loaded) -> None:
    """Before the fix ``--format json`` printed a NaN loss as a bare ``NaN`` (not JSON: jq
    aside, strict parsers refused the whole output); now the strings runwatch writes elsewhere."""
    store, db = loaded
    out = sql(store, db, "SELECT nan AS a, inf AS b, -inf AS c, 0.5 AS d")
    assert out.returncode == 0, out.stderr

    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")

    assert json.loads(out.stdout, parse_constant=refuse) == [
        {"a": "NaN", "b": "Infinity", "c": "-Infinity", "d": 0.5}
    ]


@pytest.mark.parametrize("fmt", ["csv", "table", "json"])
def test_an_empty_result_keeps_its_header(loaded, fmt: str) -> None:
    """ClickHouse answers a query matching no rows with an empty Native body, so ``--format
    csv`` printed nothing, not even its header row, and the table no columns; now the
    columns are named (JSON: an empty list, as before)."""
    store, db = loaded
    out = sql(store, db, "SELECT run_id, count() AS n FROM run_manifests WHERE run_id = 'none' "
                         "GROUP BY run_id", fmt)
    assert out.returncode == 0, out.stderr
    if fmt == "csv":
        assert list(csv.reader(io.StringIO(out.stdout))) == [["run_id", "n"]]
    elif fmt == "table":
        assert "run_id" in out.stdout and "n" in out.stdout
    else:
        assert json.loads(out.stdout) == []


def test_nested_values_are_json_and_times_keep_their_zone(loaded) -> None:
    """Maps, arrays and tuples (``learning_steps.metrics``) were printed as Python's repr
    (``"{'k': 1.5, 'n': nan}"``: not JSON, a bare nan inside); a column converted to
    another time zone showed its UTC wall clock (12:00 for 08:00 in New York)."""
    store, db = loaded
    q = ("SELECT map('k', 1.5, 'n', nan) AS m, [1, 2] AS a, tuple(1, 'x') AS t, "
         "toTimezone(toDateTime('2026-06-01 12:00:00', 'UTC'), 'America/New_York') AS ny, "
         "toDateTime('2026-06-01 12:00:00', 'UTC') AS utc")
    out = sql(store, db, q)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"m": {"k": 1.5, "n": "NaN"}, "a": [1, 2], "t": [1, "x"],
                                       "ny": "2026-06-01 08:00:00",
                                       "utc": "2026-06-01 12:00:00"}]
    out = sql(store, db, q, "csv")
    row = list(csv.reader(io.StringIO(out.stdout)))[1]
    assert json.loads(row[0]) == {"k": 1.5, "n": "NaN"} and row[3] == "2026-06-01 08:00:00"


def test_a_query_with_its_own_format_is_answered_in_it(loaded) -> None:
    store, db = loaded
    out = sql(store, db, "SELECT 1 AS x, 'a' AS y FORMAT JSONEachRow;")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"x": 1, "y": "a"}


@pytest.mark.parametrize("query", ["", "  ", " ; "])
def test_an_empty_query_is_refused_in_words(loaded, query: str) -> None:
    """``runwatch sql ""`` answered "Unknown expression identifier `FORMAT`": the client's
    own FORMAT clause was all ClickHouse saw."""
    proc = sql(*loaded, query)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ('error: the query is empty: give one SQL statement, e.g. '
                                   'runwatch sql "SELECT 1"')


@pytest.mark.parametrize(("query", "said"), [
    ("SELEC 1", "Syntax error: failed at position 7"),
    ("SELECT 1 FROM", "Syntax error: failed at position 14 (end of query)"),
    ("SELECT (1", "Unmatched parentheses"),
])
def test_an_error_quotes_the_query_as_written(loaded, query: str, said: str) -> None:
    """Errors quoted "FORMAT Native", which the user never wrote (``SELECT 1 FROM`` even
    read it as the table ``FORMAT``)."""
    proc = sql(*loaded, query)
    assert proc.returncode == 1 and said in proc.stderr, proc.stderr
    assert "FORMAT" not in proc.stderr and proc.stderr.count("\n") == 1
