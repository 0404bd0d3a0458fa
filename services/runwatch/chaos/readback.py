"""Reading a chaos run back: raw rows per event id, alerts, and recovery probes (ClickHouse).

Table names come from :data:`RAW_TABLES` and the database from the settings,
never from the data read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from runwatch.adapters.clickhouse import ClickHouseRejected, ClickHouseUnavailable, query_rows

#: Raw tables holding one row per published record (``gpu_samples`` holds one per GPU of
#: a NodeSample, so the node samples are counted in ``host_samples``).
RAW_TABLES = ("host_samples", "job_events", "step_timings", "checkpoints", "learning_steps",
              "validation_results", "data_quality_reports", "artifacts", "gate_decisions",
              "run_manifests")


def raw_rows(client: Any, database: str) -> dict[str, int]:
    """Return event id → rows across the raw tables, before dedup (no ``FINAL``)."""
    out: dict[str, int] = {}
    for table in RAW_TABLES:
        for event_id, n in query_rows(
                client, f"SELECT event_id, count() FROM {database}.{table} GROUP BY event_id"):  # noqa: S608
            out[str(event_id)] = out.get(str(event_id), 0) + int(n)
    return out


def alerts(client: Any, database: str) -> list[tuple[str, str, str, str, str]]:
    """Return (run id, dedup key, status, detector, indicator) of every alert row stored."""
    return [(str(r), str(k), str(s), str(d), str(i)) for r, k, s, d, i in query_rows(
        client, "SELECT run_id, dedup_key, status, detector, indicator "  # noqa: S608
        f"FROM {database}.alerts")]


def stored_since(client: Any, database: str, run_ids: Iterable[str], since_ms: int) -> int:
    """Return how many learning steps of ``run_ids`` stamped after ``since_ms`` are stored.

    A store that is down answers nothing: that counts as none stored yet.
    """
    try:
        rows = query_rows(
            client,
            f"SELECT count() FROM {database}.learning_steps "  # noqa: S608
            "WHERE run_id IN {ids:Array(String)} AND ts > fromUnixTimestamp64Milli({t:Int64})",
            {"ids": list(run_ids), "t": since_ms})
    except (ClickHouseUnavailable, ClickHouseRejected, OSError):
        return 0
    return int(rows[0][0]) if rows else 0


def wait_stored(client: Any, database: str, expected: int, timeout_s: float,
                sleep_s: float = 2.0) -> int:
    """Wait until at least ``expected`` distinct event ids are stored; return the count."""
    deadline = time.monotonic() + timeout_s
    n = 0
    while True:
        try:
            n = sum(int(r[0]) for t in RAW_TABLES for r in query_rows(
                client, f"SELECT uniqExact(event_id) FROM {database}.{t}"))  # noqa: S608
        except (ClickHouseUnavailable, ClickHouseRejected, OSError):
            n = 0
        if n >= expected or time.monotonic() >= deadline:
            return n
        time.sleep(sleep_s)
