"""The sink writer's summary sweep: on time even with no batches, chunked, refusals not fatal.

The client stands in for clickhouse-connect's (the statements themselves run
against the real store in tests/integration/test_sink_pool.py).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from runwatch.sink.settings import SinkSettings
from runwatch.sink.writer import SUMMARY_CHUNK, Writer


class Client:
    def __init__(self, runs: list[str], refuse: str = "") -> None:
        self.runs = runs
        self.refuse = refuse
        self.queries: list[dict[str, Any]] = []
        self.summaries: list[list[str]] = []

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        assert "FROM db.job_events" in sql and "'failed'" in sql
        if self.refuse == "query":
            raise DatabaseError("Code: 60. DB::Exception: Unknown table")
        self.queries.append(dict(parameters or {}))
        return SimpleNamespace(result_rows=[(r,) for r in self.runs])

    def command(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        assert sql == "SUMMARY"
        if self.refuse == "summary":
            raise DatabaseError("Code: 62. DB::Exception: Syntax error")
        self.summaries.append(list((parameters or {})["runs"]))
        return "ok"


def _writer(client: Client, every: float) -> Writer:
    settings = SinkSettings(summary_sweep_s=every, summary_window_s=600.0)
    return Writer(settings, lambda: client, "db", "SUMMARY", threading.Event())


def _wait(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("n_runs", [0, 3, SUMMARY_CHUNK + 5, 2 * SUMMARY_CHUNK])
def test_sweep_runs_without_batches_and_chunks_the_runs(n_runs: int) -> None:
    runs = [f"r{i:05d}" for i in range(n_runs)]
    client = Client(runs)
    w = _writer(client, 0.1)
    try:
        _wait(lambda: w.stats["sweeps"] >= 2)
    finally:
        w.close()
    assert client.queries[0] == {"window_ms": 600_000}
    per_sweep = -(-n_runs // SUMMARY_CHUNK)
    first = client.summaries[:per_sweep]
    assert [r for chunk in first for r in chunk] == runs
    assert all(len(chunk) <= SUMMARY_CHUNK for chunk in client.summaries)
    assert w.error is None


def test_no_sweep_when_off() -> None:
    client = Client(["r1"])
    w = _writer(client, 0.0)
    time.sleep(0.3)
    w.close()
    assert client.queries == [] and client.summaries == []
    assert w.stats["sweeps"] == 0


@pytest.mark.parametrize("refuse", ["query", "summary"])
def test_a_refused_sweep_is_counted_not_fatal(refuse: str) -> None:
    client = Client(["r1", "r2"], refuse=refuse)
    w = _writer(client, 0.1)
    try:
        _wait(lambda: w.stats["summary_errors"] >= 2)
    finally:
        w.close()
    assert w.error is None
    w.check()  # does not raise
