"""Helpers for the cost tests: play a cost scenario and store it through the sink's row mapping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from sinkkit import ROOT, migrate

from runwatch.adapters import clickhouse as ch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.core.storage.rows import COLUMNS, Origin, rows_for
from runwatch.sim.costsim import CostScenario, play
from runwatch.sim.drivers import SharedTransport

SUMMARY = ROOT / "schemas" / "clickhouse" / "summary" / "run_summary.sql"


def scenario_start_ms(sc: CostScenario) -> int:
    """A start that ends the scenario ten minutes ago, on a whole minute."""
    now = int(time.time() * 1000)
    start = now - sc.duration_s * 1000 - 600_000
    return start - start % 60_000


def store_scenario(url: str, sc: CostScenario) -> tuple[str, Any]:
    """Play ``sc`` into a capture, map every record to rows as the sink does, insert, summarise.

    Returns:
        The fresh database and a client.
    """
    capture = CaptureTransport()
    errors = play(sc, SharedTransport(capture), scenario_start_ms(sc))
    assert not errors, errors
    return store_capture(url, capture, [r.run_id for r in sc.runs])


def store_capture(url: str, capture: CaptureTransport, run_ids: list[str]) -> tuple[str, Any]:
    """Map what the producers handed ``capture`` to rows as the sink does, insert, summarise.

    Returns:
        The fresh database and a client.
    """
    db = f"t_cost_{uuid.uuid4().hex[:10]}"
    client = migrate(url, db)
    codec = load_codec()
    by_table: dict[str, list[Any]] = {}
    for offset, (topic, _key, value) in enumerate(capture.messages):
        name, record = codec.decode_dict(value)
        for table, row in rows_for(name, record, Origin(topic, 0, offset)):
            by_table.setdefault(table, []).append(row)
    for table, rows in by_table.items():
        ch.insert_rows(client, f"{db}.{table}", COLUMNS[table], rows)
    client.command(SUMMARY.read_text().replace("${db}", db),
                   parameters={"runs": run_ids, "idle_pct": 5.0})
    return db, client


def cli_json(url: str, db: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``runwatch <args> --json`` against the store as a user does; return its JSON."""
    out = subprocess.run(
        [sys.executable, "-m", "runwatch", *args, "--json"], capture_output=True, text=True,
        cwd=ROOT, timeout=120,
        env={**os.environ, "CLICKHOUSE_URL": url, "CLICKHOUSE_DATABASE": db, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def side_by_side(title: str, injected: dict[str, float], reported: dict[str, float]) -> None:
    """Print injected and reported GPU-hours next to each other."""
    print(f"\n{title}: cause, injected GPU-h, reported GPU-h")
    for cause in sorted(set(injected) | set(reported)):
        print(f"  {cause:24s} {injected.get(cause, 0.0):9.3f} {reported.get(cause, 0.0):9.3f}")
