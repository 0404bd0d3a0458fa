"""Cost scenarios through the producers and the sink's row mapping into the store, then
``runwatch cost --json`` / ``runwatch capacity --json``: each injected waste cause and
bottleneck is reported within 5 % of its GPU-hours; the bottleneck is named first."""

from __future__ import annotations

from pathlib import Path

import pytest
from costkit import SUMMARY, cli_json, side_by_side, store_scenario
from sinkkit import Store

from runwatch.sim.costsim import MIN, SCENARIOS, WASTE, CostScenario, SimRun

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    """A store of the module's own (the scenarios' databases are dropped as they pass)."""
    s = Store(tmp_path_factory.mktemp("cost") / "chdb")
    s.start()
    yield s
    s.stop()


BOTTLENECKS = ["supply_crunch", "scheduler_fragmentation", "storage_contention",
               "network_fabric", "misconfigured_run"]


def test_each_waste_cause_within_5_percent_and_input_bound_is_not_waste(store: Store) -> None:
    db, client = store_scenario(store.url, WASTE)
    report = cli_json(store.url, db, "cost", "--since", "1d")
    got = report["totals"]["wasted_gpu_hours"]
    side_by_side(WASTE.name, WASTE.injected, got)
    for cause, hours in WASTE.injected.items():
        assert got[cause] == pytest.approx(hours, rel=0.05), cause
    groups = {g["key"]: g for g in report["groups"]}
    assert groups["recsys-ranker"]["wasted_gpu_hours_total"] == 0.0  # input-bound at 45 %
    assert groups["recsys-ranker"]["cost"] == pytest.approx(3 * 16 * 4.0)
    assert {b["family"]: b["util_p50"] for b in report["baselines"]} == pytest.approx(
        {"llm-pretrain": 80.0, "recsys-ranker": 45.0}, abs=1.0)
    assert report["bad_input"]["unpriced_runs"] == 0
    client.command(f"DROP DATABASE {db}")


@pytest.mark.parametrize("name", BOTTLENECKS)
def test_capacity_names_the_injected_bottleneck_first(store: Store, name: str) -> None:
    sc = SCENARIOS[name]
    db, client = store_scenario(store.url, sc)
    report = cli_json(store.url, db, "capacity", "--since", "1d")
    got = {c["cause"]: c["lost_gpu_hours"] for c in report["causes"]}
    side_by_side(name, sc.injected, got)
    assert report["bottleneck"] == sc.bottleneck
    assert report["causes"][0]["cause"] == sc.bottleneck
    assert got[sc.bottleneck] == pytest.approx(sc.injected[sc.bottleneck], rel=0.05)
    client.command(f"DROP DATABASE {db}")


def test_bad_input_is_counted_not_zero(store: Store, tmp_path: Path) -> None:
    prices = tmp_path / "costs.yaml"
    prices.write_text("prices:\n  - gpu_model: H100\n    per_gpu_hour: 4.0\n"
                      "    effective_from: 2026-01-01\n  - gpu_model: A100\n"
                      "    per_gpu_hour: 1.0\n    effective_from: 2099-01-01\n")
    sc = SCENARIOS["bad_input"]
    db, client = store_scenario(store.url, sc)
    bad = cli_json(store.url, db, "cost", "--since", "1d", "--prices",
                   str(prices))["bad_input"]
    print("\nbad input:", bad)
    assert bad["unpriced_reasons"] == {"no price in effect": 1, "unknown GPU model": 1}
    assert bad["unknown_gpu_models"] == {"Z9": 1}
    assert bad["unpriced_gpu_hours"] == pytest.approx(32.0)
    assert bad["telemetry_gap_runs"] == 1
    assert bad["unobserved_gpu_hours"] == pytest.approx(8 * 0.5, rel=0.05)
    assert bad["clock_skew_runs"] == 1
    client.command(f"DROP DATABASE {db}")


def test_a_long_runs_summary_stays_small(store: Store) -> None:
    """The summary statement once joined the run's step times, as an array, to each of its
    GPU samples (a 37-hour run with 1M rows needed 12 GiB and was never summarised); now a
    30-hour run is summarised under 256 MiB, its stall still found."""
    hours = 60 * MIN
    long_run = CostScenario(
        "long_run", "one 30-hour run with a 1-hour stall", ("n0",),
        (SimRun("llm-long", "llm-pretrain", "n0", 0, 30 * hours, stall=(10 * hours, 11 * hours)),),
        {"stalled": 8 * 1.0}, duration_s=30 * hours)
    db, client = store_scenario(store.url, long_run)
    client.command(SUMMARY.read_text().replace("${db}", db),
                   parameters={"runs": ["llm-long"], "idle_pct": 5.0},
                   settings={"max_memory_usage": 256 << 20})
    rows = client.query(f"SELECT step_records, observed_gpu_hours, stalled_gpu_hours "  # noqa: S608
                        f"FROM {db}.run_summaries FINAL").result_rows
    assert len(rows) == 1
    steps, observed, stalled = rows[0]
    assert steps > 3000 and observed == pytest.approx(8 * 30, rel=0.01)
    assert stalled == pytest.approx(8.0, rel=0.05)
    client.command(f"DROP DATABASE {db}")
