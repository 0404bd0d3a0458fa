"""runwatch investigate's cost answer and cost plot on hand-made evidence (pure core).

The run summaries are the ``run_costs`` rows ``runwatch cost`` reads (RunCost); the
figures must be the cost report's for the same rows, peers are the family's earlier
runs, unpriced runs say why and are never 0.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from runwatch.core.cost.prices import parse_prices
from runwatch.core.cost.waste import RunCost, cost_report
from runwatch.core.investigate.answers import Evidence, investigate
from runwatch.core.investigate.cost import PEERS, CostRow, cost_answer, money
from runwatch.core.investigate.html import cost_svg, render

T0 = 1_790_000_000_000  # 2026-09-21, after every example price's effective_from
H = 3_600_000
PRICES = parse_prices("""
currency: EUR
prices:
  - {gpu_model: H100, per_gpu_hour: 4.0, effective_from: 2026-01-01}
  - {gpu_model: A100, per_gpu_hour: 2.0, effective_from: 2027-01-01}
""", "costs.yaml")


def summary(run_id: str, hours: float, *, family: str = "fam", model: str = "H100",
            outcome: str = "succeeded", util: int = 80, **waste: float) -> RunCost:
    """A run summary: ``hours`` allocated on 8 GPUs; busy at ``util`` except the waste."""
    busy = hours - sum(waste.values())
    return RunCost(run_id=run_id, family=family, team="vision", gpu_model=model, gpu_count=8,
                   outcome=outcome, running_at_ms=T0, allocated_h=hours, observed_h=hours,
                   idle_h=waste.get("idle", 0.0), stalled_h=waste.get("stalled", 0.0),
                   no_artifact_h=waste.get("no_artifact", 0.0), lost_h=waste.get("lost", 0.0),
                   busy_hours={util: busy}, busy_weighted={util: util * busy},
                   usable_artifact=True, step_records=100)


def rows() -> list[CostRow]:
    """Family ``fam``: four earlier runs, the run ``me`` (failed), a later run, another family."""
    return [CostRow(summary("p1", 4.0), T0 + 1 * H), CostRow(summary("p2", 6.0), T0 + 2 * H),
            CostRow(summary("p3", 10.0), T0 + 3 * H), CostRow(summary("p4", 2.0), T0 + 4 * H),
            CostRow(summary("me", 8.0, outcome="failed", idle=1.0, stalled=0.5, lost=1.5),
                    T0 + 5 * H),
            CostRow(summary("later", 50.0), T0 + 6 * H),
            CostRow(summary("other", 90.0, family="else"), T0 + 1 * H)]


RESUME = {"step": 20, "gpu_hours_lost": 1.5}


def test_the_run_its_waste_and_its_peers() -> None:
    got = cost_answer("me", "fam", rows(), PRICES, RESUME, T0 + 9 * H)
    run = got["run"]
    assert (got["currency"], run["gpu_hours"], run["cost"], run["per_gpu_hour"]) == (
        "EUR", 8.0, 32.0, 4.0)
    assert run["wasted_gpu_hours"] == {"idle": 1.0, "stalled": 0.5, "no_artifact": 0.0,
                                       "work_lost": 1.5, "below_baseline": 0.0}
    assert (run["wasted_gpu_hours_total"], run["wasted_cost"], run["useful_gpu_hours"]) == (
        3.0, 12.0, 5.0)
    peers = got["peers"]
    # earlier runs of the family only, oldest first; not the later run, not another family's
    assert [p["run_id"] for p in peers["runs"]] == ["p1", "p2", "p3", "p4"]
    assert (peers["median_gpu_hours"], peers["median_cost"]) == (5.0, 20.0)
    assert (peers["gpu_hours_rank"], peers["ranked_of"]) == (2, 5)  # only p3's 10 is more
    assert (peers["cost_rank"], peers["priced_of"]) == (2, 5)
    assert got["resume_lost"] == {"step": 20, "gpu_hours": 1.5, "cost": 6.0,
                                  "unpriced_reason": ""}
    assert got["bad_input"]["unpriced_runs"] == 0 and got["note"] == ""
    few = cost_answer("me", "fam", rows(), PRICES, RESUME, T0 + 9 * H, peers=2)
    assert [p["run_id"] for p in few["peers"]["runs"]] == ["p3", "p4"]  # the latest two
    assert PEERS == 20


def test_the_figures_are_runwatch_costs_for_the_same_rows() -> None:
    # a family with a baseline (three succeeded runs at 80 %): the run at 40 % wastes
    # below it; the answer must say what `runwatch cost --by run` says of it
    history = [CostRow(summary(f"s{i}", 4.0), T0 + i * H) for i in range(3)]
    me = CostRow(summary("me", 6.0, util=40, idle=2.0), T0 + 5 * H)
    got = cost_answer("me", "fam", [*history, me], PRICES, {}, T0 + 9 * H)["run"]
    (group,) = [g for g in cost_report([r.run for r in [*history, me]],
                                       [r.run for r in [*history, me]], PRICES, "run")["groups"]
                if g["key"] == "me"]
    assert got["wasted_gpu_hours"] == group["wasted_gpu_hours"]
    assert got["wasted_gpu_hours"]["below_baseline"] == pytest.approx(2.0)  # 4 h at half
    assert (got["gpu_hours"], got["cost"], got["wasted_cost"]) == (
        group["gpu_hours"], group["cost"], group["wasted_cost"])
    assert got["baseline_util_p50"] == 80.0


@pytest.mark.parametrize(("model", "prices", "reason"), [
    ("Z9", PRICES, "unknown GPU model"),
    ("A100", PRICES, "no price in effect"),  # its price starts in 2027
    ("H100", None, "no prices file"),
])
def test_an_unpriced_run_says_why_and_is_never_zero(model: str, prices: Any,
                                                    reason: str) -> None:
    rs = [*rows()[:4], CostRow(summary("me", 8.0, model=model, idle=1.0), T0 + 5 * H)]
    got = cost_answer("me", "fam", rs, prices, RESUME, T0 + 9 * H)
    run = got["run"]
    assert (run["priced"], run["cost"], run["wasted_cost"], run["unpriced_reason"]) == (
        False, None, None, reason)
    assert run["gpu_hours"] == 8.0 and run["wasted_gpu_hours"]["idle"] == 1.0  # hours still count
    assert got["resume_lost"] == {"step": 20, "gpu_hours": 1.5, "cost": None,
                                  "unpriced_reason": reason}
    assert got["peers"]["cost_rank"] is None and got["peers"]["gpu_hours_rank"] == 2
    assert got["bad_input"]["unpriced_reasons"][reason] >= 1
    assert money(run["cost"], "EUR", reason) == f"unpriced ({reason})"
    svg = cost_svg(got)
    assert f'data-this="true" data-gpu-hours="8" data-cost="unpriced ({reason})"' in svg
    mine = svg[svg.index('data-this="true"'):]  # its bar and the line under the plot
    assert "EUR" not in mine and f"this run: 8 GPU-h, unpriced ({reason})" in mine


def test_no_summary_no_view_no_family() -> None:
    early = cost_answer("me", "fam", rows()[:4], PRICES, RESUME, T0 + 9 * H)
    assert early["run"] is None and "no run summary for this run" in early["note"]
    assert len(early["peers"]["runs"]) == 4 and early["resume_lost"] is None
    assert 'data-empty="true"' in cost_svg(early) and "no run summary" in cost_svg(early)
    none = cost_answer("me", "fam", None, PRICES, RESUME, T0)
    assert none["run"] is None and "no run_costs view" in none["note"]
    alone = cost_answer("me", "", [CostRow(summary("me", 8.0, family=""), T0)], PRICES, {}, T0)
    assert alone["run"]["cost"] == 32.0 and alone["peers"]["runs"] == []
    assert "no experiment family" in alone["note"]
    first = cost_answer("me", "fam", [CostRow(summary("me", 8.0), T0)], PRICES, {}, T0)
    assert "no earlier finished run of family 'fam'" in first["note"]
    assert first["peers"]["median_gpu_hours"] is None


def _bars(svg: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'data-([a-z-]+)="([^"]*)"', m))
            for m in re.findall(r'<g class="bar" ([^>]*)>', svg)]


def test_the_plot_stacks_waste_by_cause_beside_the_peers() -> None:
    got = cost_answer("me", "fam", rows(), PRICES, RESUME, T0 + 9 * H)
    svg = cost_svg(got)
    assert svg.startswith('<svg class="costplot" data-plot="cost" data-empty="false"')
    bars = _bars(svg)
    assert [(b["run"], b["this"], b["gpu-hours"], b["cost"]) for b in bars] == [
        ("p1", "false", "4", "16.00 EUR"), ("p2", "false", "6", "24.00 EUR"),
        ("p3", "false", "10", "40.00 EUR"), ("p4", "false", "2", "8.00 EUR"),
        ("me", "true", "8", "32.00 EUR")]
    mine = svg[svg.index('data-run="me"'):]
    segs = re.findall(r'class="seg" data-cause="(\w+)" data-gpu-hours="([\d.]+)" '
                      r'x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"', mine)
    assert [(c, float(h)) for c, h, _px in segs] == [
        ("useful", 5.0), ("work_lost", 1.5), ("stalled", 0.5), ("idle", 1.0)]
    heights = [float(px) for _c, _h, px in segs]
    assert heights[0] / heights[3] == pytest.approx(5.0, rel=0.02)  # drawn to scale
    assert mine.count('class="this-run"') == 1 and svg.count('class="this-run"') == 1
    assert 'class="cost-label"' in mine and ">32.00 EUR</text>" in mine
    assert 'class="median"' in svg and "family median 5" in svg


def test_the_page_and_the_json_carry_the_cost_answer() -> None:
    ev = Evidence(run_id="me", database="db", now_ms=T0 + 9 * H, cost_rows=rows(),
                  jobs=[{"ts_ms": T0, "state": "failed", "attempt": 0, "nodes": ["n1"],
                         "gpu_count": 8, "team": "vision", "experiment_family": "fam"}])
    result = investigate(ev, prices=PRICES)
    assert result["version"] == 1 and result["cost"]["run"]["cost"] == 32.0
    page = render(result, {})
    assert "<h2>Cost</h2>" in page and page.count('<svg class="costplot"') == 1
    assert "32.00 EUR" in page and "ranks 2 of 5 by GPU-hours" in page
    hostile = render({**result, "cost": {**result["cost"], "run": {
        **result["cost"]["run"], "run_id": "<script>x</script>"}}}, {})
    assert "<script" not in hostile and "&lt;script&gt;x" in hostile
    ev.cost_rows = rows()[:4]  # the run has not ended: no summary yet
    assert any("no run summary for this run" in m for m in investigate(ev, prices=PRICES)[
        "missing"])


def test_allocated_time_without_telemetry_is_drawn_as_such_not_as_use() -> None:
    blind = RunCost(run_id="p0", family="fam", gpu_model="H100", gpu_count=8,
                    outcome="succeeded", running_at_ms=T0, allocated_h=4.0, observed_h=1.0,
                    busy_hours={80: 1.0}, busy_weighted={80: 80.0})
    got = cost_answer("me", "fam", [CostRow(blind, T0), *rows()[4:5]], PRICES, {}, T0 + 9 * H)
    (peer,) = got["peers"]["runs"]
    assert (peer["gpu_hours"], peer["unobserved_gpu_hours"], peer["useful_gpu_hours"]) == (
        4.0, 3.0, 1.0)
    assert got["bad_input"]["telemetry_gap_runs"] == 1
    svg = cost_svg(got)
    assert 'data-cause="unobserved" data-gpu-hours="3"' in svg
    assert 'data-cause="useful" data-gpu-hours="1"' in svg


def test_a_job_cancelled_in_the_queue_says_it_never_ran() -> None:
    """Its cost line read "0 GPU-h, 0.00 EUR ( at 0 EUR/GPU-h)": no model, a price of 0."""
    import io

    from rich.console import Console

    from runwatch.commands.investigate import _show_cost

    never = RunCost(run_id="me", family="fam", team="vision", outcome="cancelled")
    got = cost_answer("me", "fam", [*rows()[:4], CostRow(never, T0 + 5 * H)], PRICES, {},
                      T0 + 9 * H)
    assert (got["run"]["ran"], got["run"]["cost"]) == (False, 0.0)
    out = io.StringIO()
    _show_cost(Console(file=out, width=200), got)
    line = out.getvalue().splitlines()[1]
    assert line == "Cost  0 GPU-h, 0.00 EUR (never ran)", line
