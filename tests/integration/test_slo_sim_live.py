"""The simulator's SLO scenarios on the live stack: SDK → Kafka → sink → store → evaluator.

One module, one simulation: every SLO fault and control of
``runwatch.sim.scenarios`` runs through the public producers (``runwatch.init``,
``data.report``, ``emit``, the node agent) on the virtual clock, a real sink
stores them in a fresh database, and the simulation drives the SLO evaluator
at virtual instants (``infra/slo/sim-slos.yaml``). The alerts are read back
from ``rw.alerts`` and scored like the processor's (no processor runs here:
the SLO alerts' causes fall back to their kinds' signal classes). Checked:

* each SLO fault is detected by its objective's alert with the right cause
  within its budget, one incident however many rounds followed;
* no control's objective alerts;
* the rounds were evaluated at virtual instants and stored as SLI points.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sinkkit import SinkProc, delete_topics, make_topics, migrate

from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.sim import scenarios as sc
from runwatch.sim.runner import SimConfig, SimResult, run_simulation
from runwatch.sim.scoreboard import format_board

pytestmark = pytest.mark.integration
SPEED = 40.0
DURATION_S = 540.0


@pytest.fixture(scope="module")
def sim(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("slosim")
    db = f"t_{uuid.uuid4().hex[:10]}"
    client = migrate(stack.clickhouse_url, db)
    topics = make_topics(stack.bootstrap_servers)
    prefix = topics["rw.alerts"].removesuffix("rw.alerts")
    sink = SinkProc(stack.bootstrap_servers, topics, stack.clickhouse_url, db, tmp / "sink.log")
    sink.start()
    try:
        cfg = SimConfig(nodes=2, runs=1, seed=5, speed=SPEED, duration_s=DURATION_S,
                        scenarios=tuple(sc.SLO_SCENARIOS.values()), topic_prefix=prefix,
                        grace_s=40.0, collect_s=0.0)
        res = run_simulation(cfg, KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                             clickhouse=ClickHouseSettings(url=stack.clickhouse_url, database=db))
        print(format_board(res.board(), res.ended_wall_ms))
        yield {"res": res, "db": db, "client": client}
    finally:
        sink.stop()
        print("--- sink log tail\n" + (tmp / "sink.log").read_text(errors="replace")[-2000:])
        delete_topics(stack.bootstrap_servers, list(topics.values()))
        client.command(f"DROP DATABASE IF EXISTS {db}")


def test_every_slo_fault_detected_with_cause_within_budget(sim) -> None:
    res: SimResult = sim["res"]
    board = res.board()
    text = format_board(board, res.ended_wall_ms)
    rows = {r.scenario: r for r in board.rows}
    assert set(rows) == {s.name for s in sc.SLO_FAULTS}, text
    for name, row in rows.items():
        want = sc.SLO_SCENARIOS[name]
        assert row.detected, f"{name}: no {want.detectors[0]} alert\n{text}"
        assert row.detector == f"slo:{want.slo}"
        assert row.cause_correct, f"{name}: cause {row.cause}, expected {want.cause}\n{text}"
        assert row.within_budget, f"{name}: {row.ttd_s}s > budget {row.budget_s}s\n{text}"
        # one incident, kept by the evaluator's alert book across the rounds that followed
        firing = [a for a in res.alerts if a.detector == row.detector and a.status == "firing"]
        assert len({a.first_seen_ms for a in firing}) == 1, firing


def test_slo_controls_raise_nothing(sim) -> None:
    res: SimResult = sim["res"]
    board = res.board()
    names = {c.scenario for c in board.controls}
    assert names >= {s.name for s in sc.SLO_CONTROLS}
    assert board.false_alerts == (), format_board(board, res.ended_wall_ms)


def test_rounds_ran_at_virtual_instants_and_were_stored(sim) -> None:
    res: SimResult = sim["res"]
    db, client = sim["db"], sim["client"]
    rows = client.query(
        f"SELECT objective, toUnixTimestamp64Milli(evaluated_at), state FROM {db}.slo_points "
        "ORDER BY evaluated_at").result_rows
    objectives = {r[0] for r in rows}
    assert objectives == {s.slo for s in sc.SLO_SCENARIOS.values()}
    instants = sorted({r[1] for r in rows})
    # virtual instants: far ahead of the wall clock by the end, every 30 virtual s
    assert instants[-1] - res.start_ms > DURATION_S * 1000 * 0.9
    assert all((t - res.start_ms) % 30_000 == 0 for t in instants[:-1])
    states = {(r[0], r[2]) for r in rows}
    for s in sc.SLO_CONTROLS:
        assert (s.slo, "exhausted") not in states and (s.slo, "burning") not in states
    for s in sc.SLO_FAULTS:
        assert (s.slo, "exhausted") in states
