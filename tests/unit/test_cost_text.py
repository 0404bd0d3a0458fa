"""The terminal tables of ``runwatch cost`` and ``runwatch capacity`` with hostile labels.

Families, teams, queues, run ids and the currency are users' text: a label such as
``exp[/x]`` must print as written, not be taken for rich markup (which raised
MarkupError, a traceback instead of the table).
"""

from __future__ import annotations

import pytest

from runwatch.commands.cost import _print_capacity, _print_cost
from runwatch.core.cost.capacity import QueueWait, capacity_report
from runwatch.core.cost.prices import parse_prices
from runwatch.core.cost.waste import RunCost, cost_report

T = 1_796_000_000_000
HOSTILE = ["exp[/x]", "[bold]team", "q[/]", "fam\\", "ünï “quoted” 'x' \"y\"", "l" * 300]


def _run(rid: str, label: str) -> RunCost:
    return RunCost(run_id=rid, team=label, family=label, queue=label, priority_class=label,
                   gpu_model="H100", gpu_count=8, outcome="succeeded", running_at_ms=T,
                   allocated_h=2.0, observed_h=2.0, busy_hours={80: 2.0},
                   busy_weighted={80: 160.0}, usable_artifact=True, step_records=3)


@pytest.mark.parametrize("by", ["family", "team", "queue", "priority_class", "run"])
def test_cost_table_prints_hostile_labels_as_written(by: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    prices = parse_prices("currency: '[/c]'\nprices:\n  - gpu_model: H100\n"
                          "    per_gpu_hour: 2.0\n    effective_from: 2026-01-01\n")
    runs = [_run(label if by == "run" else f"r{i}", label) for i, label in enumerate(HOSTILE)]
    report = cost_report(runs, runs, prices, by)
    report["window"] = {"since": "7d", "from_ms": T, "to_ms": T}
    _print_cost(report)
    out = capsys.readouterr().out
    for label in ("exp[/x]", "[bold]team", "q[/]", "fam\\"):
        assert label in out
    assert "[/c]" in out


def test_capacity_table_prints_hostile_run_ids_as_written(
        capsys: pytest.CaptureFixture[str]) -> None:
    waits = [QueueWait("run[/x]", T, T + 3_600_000, 8)]
    report = capacity_report(waits, [], [], [], {"run[/x]": 8}, {"run[/x]": ["n[/y]"]},
                             [("run[/x]", 2.0, 20.0, 80.0)])
    report["window"] = {"since": "24h", "from_ms": T, "to_ms": T}
    _print_capacity(report)
    out = capsys.readouterr().out
    assert "run[/x]" in out


def test_a_queue_delay_of_zero_is_a_figure_not_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    prices = parse_prices("prices:\n  - gpu_model: H100\n    per_gpu_hour: 2.0\n"
                          "    effective_from: 2026-01-01\n")
    runs = [RunCost(run_id="r", family="f", gpu_model="H100", gpu_count=8, outcome="succeeded",
                    running_at_ms=T, queue_delay_s=0.0, allocated_h=1.0, observed_h=1.0)]
    report = cost_report(runs, runs, prices, "family")
    report["window"] = {"since": "7d", "from_ms": T, "to_ms": T}
    _print_cost(report)
    assert "0/0" in capsys.readouterr().out
