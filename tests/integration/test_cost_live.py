"""Cost, live: the waste scenario through the real producers -> Kafka -> the sink -> the store,
then ``runwatch cost --json`` and ``runwatch capacity --json`` (one publish, several answers)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from costkit import cli_json, scenario_start_ms, side_by_side
from sinkkit import SinkProc, Store, migrate, table_counts

from runwatch.adapters.kafka import KafkaTransport, ProducerSettings
from runwatch.adapters.settings import KafkaSettings
from runwatch.sim.costsim import MIN, WASTE, CostScenario, SimRun, play
from runwatch.sim.drivers import SharedTransport

pytestmark = pytest.mark.integration


def _close(report: dict[str, Any]) -> bool:
    got = report["totals"]["wasted_gpu_hours"]
    return all(got[c] == pytest.approx(h, rel=0.05) for c, h in WASTE.injected.items())


#: One spot run of 8 GPUs, preempted after 20 min without a checkpoint or artifact.
SPOT = CostScenario("spot", "a run preempted for good", ("spot-n0",), (
    SimRun("spot-0", "spot", "spot-n0", 0, 20 * MIN, outcome="preempted", ckpt_every_s=None,
           artifact=False),), {"no_artifact": 8 * 20 / 60}, duration_s=20 * MIN)


def _publish_preempted(stack: Any, topics: dict[str, str], url: str, db: str,
                       client: Any) -> dict[str, Any]:
    transport = KafkaTransport(KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                               ProducerSettings(spool_dir=None, linger_ms=20), name="cost-spot")
    assert not play(SPOT, SharedTransport(transport), scenario_start_ms(SPOT), topics)
    transport.close(30.0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if client.query(f"SELECT count() FROM {db}.run_summaries FINAL "  # noqa: S608
                        "WHERE run_id = 'spot-0'").result_rows[0][0]:
            return cli_json(url, db, "cost", "--by", "run", "--since", "1d")
        time.sleep(2)
    pytest.fail("the preempted run was not summarised within 60 s")


def test_waste_and_bottleneck_through_the_live_stack(
    stack, sink_topics: dict[str, str], own_store: Store, tmp_path: Path
) -> None:
    db = f"t_costlive_{uuid.uuid4().hex[:8]}"
    client = migrate(own_store.url, db)
    transport = KafkaTransport(KafkaSettings(bootstrap_servers=stack.bootstrap_servers),
                               ProducerSettings(spool_dir=None, linger_ms=20), name="cost-live")
    errors = play(WASTE, SharedTransport(transport), scenario_start_ms(WASTE), sink_topics)
    assert not errors, errors
    counters = transport.close(30.0)
    assert counters.failed == 0 and counters.evicted == 0 and counters.in_spool == 0, counters
    sink = SinkProc(stack.bootstrap_servers, sink_topics, own_store.url, db, tmp_path / "sink.log")
    sink.start()
    try:
        deadline = time.monotonic() + 120
        report: dict[str, Any] = {}
        while time.monotonic() < deadline:
            counts = table_counts(client, db, ["run_summaries"])
            if counts["run_summaries"] == len(WASTE.runs):
                report = cli_json(own_store.url, db, "cost", "--since", "1d")
                if _close(report):
                    break
            time.sleep(3)
        assert sink.alive(), (tmp_path / "sink.log").read_text()[-2000:]
        capacity = cli_json(own_store.url, db, "capacity", "--since", "1d")
        # then a spot run that ends preempted (run.finish("preempted"), the hook's state):
        # a final state, so the sink summarises it (it once waited for succeeded, failed or
        # cancelled, and such a run was never summarised, never in runwatch cost)
        spot_report = _publish_preempted(stack, sink_topics, own_store.url, db, client)
    finally:
        sink.stop()
    spot = {g["key"]: g for g in spot_report["groups"]}["spot-0"]
    assert spot["outcomes"] == {"preempted": 1}
    assert spot["gpu_hours"] == pytest.approx(SPOT.injected["no_artifact"], rel=0.05)
    assert spot["wasted_gpu_hours"]["no_artifact"] == pytest.approx(
        SPOT.injected["no_artifact"], rel=0.05)
    assert report, "no run summaries within 120 s"
    side_by_side("live " + WASTE.name, WASTE.injected, report["totals"]["wasted_gpu_hours"])
    got = report["totals"]["wasted_gpu_hours"]
    for cause, hours in WASTE.injected.items():
        assert got[cause] == pytest.approx(hours, rel=0.05), cause
    groups = {g["key"]: g for g in report["groups"]}
    assert groups["recsys-ranker"]["wasted_gpu_hours_total"] == 0.0
    assert report["bad_input"]["unpriced_runs"] == 0
    print("capacity:", [(c["cause"], c["lost_gpu_hours"]) for c in capacity["causes"]])
    assert capacity["bottleneck"] == "workload_configuration"
    assert capacity["causes"][0]["lost_gpu_hours"] == pytest.approx(
        WASTE.injected["below_baseline"], rel=0.05)
