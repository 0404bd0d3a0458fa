"""Waste by cause on hand-made run summaries: baselines, the overlap order, bad input."""

from __future__ import annotations

import pytest

from runwatch.core.cost.prices import parse_prices
from runwatch.core.cost.waste import RunCost, baselines, below_baseline_h, cost_report

PRICES = parse_prices("prices:\n  - gpu_model: H100\n    per_gpu_hour: 2.0\n"
                      "    effective_from: 2026-01-01\n")
T = 1_796_000_000_000  # 2026-12-01


def hist(util: float, hours: float) -> tuple[dict[int, float], dict[int, float]]:
    return {int(util): hours}, {int(util): util * hours}


def run(rid: str, fam: str, util: float, hours: float = 16.0, **kw: object) -> RunCost:
    h, w = hist(util, hours)
    base: dict[str, object] = dict(run_id=rid, family=fam, team="t", gpu_model="H100",
                                   gpu_count=8, outcome="succeeded", running_at_ms=T,
                                   allocated_h=hours, observed_h=hours, busy_hours=h,
                                   busy_weighted=w, usable_artifact=True, step_records=10)
    base.update(kw)
    return RunCost(**base)  # type: ignore[arg-type]


def test_input_bound_family_at_its_usual_level_is_not_waste_but_below_it_is() -> None:
    runs = [run(f"r{i}", "input-bound", 45.0) for i in range(3)]
    low = run("low", "input-bound", 20.0)
    base = baselines([*runs, low])[("input-bound", "H100")]
    assert base.util_p50 == pytest.approx(45.0)
    assert all(below_baseline_h(r, base) == 0 for r in runs)
    assert below_baseline_h(low, base) == pytest.approx(16.0 * (1 - 20 / 45))


def test_no_baseline_without_three_succeeded_runs() -> None:
    rs = [run("a", "f", 80.0), run("b", "f", 80.0), run("c", "f", 20.0, outcome="failed")]
    assert baselines(rs) == {}
    report = cost_report(rs, rs, PRICES, "family")
    assert report["bad_input"]["no_baseline_runs"] == 3
    assert report["totals"]["wasted_gpu_hours"]["below_baseline"] == 0


def test_causes_add_up_and_cost_is_priced() -> None:
    rs = [run(f"r{i}", "f", 80.0) for i in range(3)]
    bad = run("bad", "f", 80.0, hours=4.0, outcome="failed", idle_h=1.0, stalled_h=2.0,
              lost_h=3.0, allocated_h=10.0)
    noart = run("noart", "f", 80.0, hours=0.0, outcome="cancelled", no_artifact_h=5.0,
                allocated_h=5.0, usable_artifact=False)
    report = cost_report([*rs, bad, noart], [*rs, bad, noart], PRICES, "family")
    t = report["totals"]
    assert t["wasted_gpu_hours"] == {"idle": 1.0, "stalled": 2.0, "no_artifact": 5.0,
                                     "work_lost": 3.0, "below_baseline": 0.0}
    assert t["wasted_gpu_hours_total"] == 11.0
    assert t["gpu_hours"] == 3 * 16 + 10 + 5
    assert t["cost"] == pytest.approx(2.0 * (3 * 16 + 10 + 5))
    assert t["gpu_hours_per_completed_run"] == pytest.approx((3 * 16 + 15) / 3)
    assert t["terminated_without_artifact_share"] == pytest.approx(1 / 5)


def test_unpriced_and_unmeasured_runs_are_counted_never_zero() -> None:
    rs = [run("z9", "f", 80.0, gpu_model="Z9"), run("none", "f", 80.0, gpu_model=""),
          run("early", "f", 80.0, running_at_ms=T - 400 * 86_400_000),
          run("gap", "f", 80.0, observed_h=10.0), run("skew", "f", 80.0, skewed_nodes=1)]
    report = cost_report(rs, rs, PRICES, "team")
    bad = report["bad_input"]
    assert bad["unpriced_runs"] == 3 and bad["unpriced_gpu_hours"] == 48.0
    assert bad["unpriced_reasons"] == {"no price in effect": 1, "unknown GPU model": 2}
    assert bad["unknown_gpu_models"] == {"Z9": 1, "(none reported)": 1}
    assert bad["telemetry_gap_runs"] == 1 and bad["unobserved_gpu_hours"] == 6.0
    assert bad["clock_skew_runs"] == 1
    assert report["totals"]["cost"] == pytest.approx(2 * 16 * 2.0)
    assert report["groups"][0]["unpriced_runs"] == 3


@pytest.mark.parametrize("by", ["family", "team", "queue", "priority_class", "run"])
def test_rollup_keys(by: str) -> None:
    rs = [run("r1", "f1", 80.0, queue="q1", priority_class="p1", team="t1"),
          run("r2", "f2", 80.0, queue="q2", priority_class="p2", team="t2", hours=8.0)]
    groups = cost_report(rs, rs, PRICES, by)["groups"]
    assert [g["runs"] for g in groups] == [1, 1]
    assert groups[0]["key"].endswith("1") and groups[0]["gpu_hours"] == 16.0


def test_a_run_cancelled_in_the_queue_is_neither_unpriced_nor_a_run_without_its_artifact() -> None:
    """It used nothing: it was counted as an unpriced '(none reported)' run and raised its
    group's share of runs that ended without a usable artifact."""
    rs = [run("r1", "f", 80.0),
          run("queued", "f", 0.0, hours=0.0, gpu_model="", gpu_count=0, outcome="cancelled",
              running_at_ms=None, usable_artifact=False, step_records=0),
          run("ran", "f", 80.0, gpu_model="", outcome="cancelled", usable_artifact=False)]
    report = cost_report(rs, rs, PRICES, "family")
    bad, t = report["bad_input"], report["totals"]
    assert bad["unpriced_runs"] == 1 and bad["unknown_gpu_models"] == {"(none reported)": 1}
    assert t["terminated_without_artifact_share"] == pytest.approx(1 / 3, abs=1e-3)  # "ran"
    assert t["cost"] == pytest.approx(16 * 2.0)


def test_the_text_report_names_unpriced_counts_not_a_python_dict(capsys) -> None:
    """The bad-input line printed ``{'unknown GPU model': 40}``."""
    from runwatch.commands.cost import _print_cost

    rs = [run("z9", "f", 80.0, gpu_model="Z9"), run("ok", "f", 80.0)]
    report = cost_report(rs, rs, PRICES, "family")
    report["window"] = {"since": "1d"}
    _print_cost(report)
    out = " ".join(capsys.readouterr().out.split())
    assert "unpriced runs: 1 (unknown GPU model 1); unknown GPU models: Z9 1;" in out
    assert "{" not in out.partition("unpriced runs:")[2]
