"""Cost as an independent user meets it (found 2026-12-07): GPU models as NVML names them,
a family's usual evaluation passes, and the text table's figures for a large cluster.

The RunCost rows are what ``run_costs`` returns for runs the producers sent (the
utilization histogram per whole percent of busy GPU-hours); the integration cases are in
tests/integration/test_cost_r16_store.py.
"""

from __future__ import annotations

import pytest

from runwatch.commands.cost import _print_capacity, _print_cost
from runwatch.core.cost.capacity import capacity_report
from runwatch.core.cost.prices import UNKNOWN_MODEL, Prices, parse_prices
from runwatch.core.cost.waste import RunCost, attribute, baselines, cost_report
from runwatch.resources import costs_file, read_config

T = 1_796_000_000_000  # 2026-12


@pytest.fixture(scope="module")
def packaged() -> Prices:
    return parse_prices(read_config(costs_file()), "costs.yaml")


@pytest.mark.parametrize(("nvml", "price"), [
    ("NVIDIA H100 80GB HBM3", 4.00),
    ("NVIDIA H100 PCIe", 4.00),
    ("NVIDIA H200", 5.20),
    ("NVIDIA A100-SXM4-80GB", 1.60),
    ("NVIDIA A100-PCIE-40GB", 1.60),
    ("h100", 4.00),
    (" H100 ", 4.00),
])
def test_nvml_model_names_get_their_models_price(packaged: Prices, nvml: str,
                                                 price: float) -> None:
    """The SDK's manifest names the model as NVML does; the packaged prices name ``H100``:
    a run of the shipped Slurm hooks (no ``--gpu-model``) was unpriced, ``unknown GPU
    model: NVIDIA H100 80GB HBM3``."""
    assert packaged.quote(nvml, T).per_gpu_hour == price


@pytest.mark.parametrize("nvml", ["NVIDIA A10G", "NVIDIA H800", "Tesla V100-SXM2-16GB", "",
                                  "NVIDIA GH100"])
def test_other_models_stay_unknown(packaged: Prices, nvml: str) -> None:
    """Controls: a word must be whole (an A10G is no A10 nor A100, a GH100 no H100)."""
    quote = packaged.quote(nvml, T)
    assert (quote.per_gpu_hour, quote.reason) == (None, UNKNOWN_MODEL)


def test_the_most_specific_name_wins_and_a_tie_is_unknown() -> None:
    from runwatch.core.cost.prices import resolve_model

    known = frozenset({"H100", "H100 NVL", "A100 SXM4", "SXM4 80GB"})
    assert resolve_model("NVIDIA H100 NVL", known) == "H100 NVL"
    assert resolve_model("NVIDIA H100 80GB HBM3", known) == "H100"
    assert resolve_model("NVIDIA A100-SXM4-80GB", known) is None  # two names of two words
    assert resolve_model("NVIDIA A100-SXM4-40GB", known) == "A100 SXM4"
    assert resolve_model("h100 nvl", known) == "H100 NVL"


def test_match_rules_apply_to_nvml_names(packaged: Prices) -> None:
    quote = packaged.quote("NVIDIA H100 80GB HBM3", T,
                           {"tenancy": "reserved"})
    assert quote.per_gpu_hour == 2.50


def _hist(parts: dict[float, float]) -> tuple[dict[int, float], dict[int, float]]:
    """Busy GPU-hours by utilization as the summary stores them (per whole percent)."""
    hours: dict[int, float] = {}
    weighted: dict[int, float] = {}
    for util, h in parts.items():
        hours[int(util)] = hours.get(int(util), 0.0) + h
        weighted[int(util)] = weighted.get(int(util), 0.0) + util * h
    return hours, weighted


def _run(rid: str, parts: dict[float, float]) -> RunCost:
    hours, weighted = _hist(parts)
    total = sum(parts.values())
    return RunCost(run_id=rid, family="finetune", gpu_model="H100", gpu_count=8,
                   outcome="succeeded", running_at_ms=T, allocated_h=total, observed_h=total,
                   busy_hours=hours, busy_weighted=weighted, usable_artifact=True,
                   step_records=100)


def test_usual_evaluation_passes_are_in_range_a_slow_run_is_not(packaged: Prices) -> None:
    """8 GPUs for an hour, 12 minutes of it evaluating at 3 %: each healthy run was charged
    1.54 GPU-hours below the baseline. A run at 30 % while it trains still loses 4.0."""
    healthy = [_run(f"ok-{i}", {80.0 + i: 8 * 0.8, 3.0: 8 * 0.2}) for i in range(4)]
    slow = _run("slow", {30.0: 8 * 0.8, 3.0: 8 * 0.2})
    more_eval = _run("eval-heavy", {80.0: 8 * 0.5, 3.0: 8 * 0.5})
    runs = [*healthy, slow, more_eval]
    base = baselines(runs)[("finetune", "H100")]
    assert base.util_p50 == pytest.approx(80.5, abs=1.0)
    waste = {r.run_id: attribute(r, base, packaged).waste_h["below_baseline"]
             for r in runs}
    assert {k: waste[k] for k in ("ok-0", "ok-1", "ok-2", "ok-3")} == dict.fromkeys(
        ("ok-0", "ok-1", "ok-2", "ok-3"), 0.0)
    assert waste["slow"] == pytest.approx(8 * 0.8 * (1 - 30 / 80.5), rel=0.01)
    # 30 more minutes under the range than the family's 12: 8 x 0.3 x (1 - 3/80.5)
    assert waste["eval-heavy"] == pytest.approx(8 * 0.3 * (1 - 3 / 80.5), rel=0.01)


def test_a_family_without_low_phases_keeps_its_shortfall(packaged: Prices) -> None:
    """Control (the simulator's waste_mix): a run at 30 % in a family at 80 % loses the
    whole shortfall, 8 x 2 x (1 - 30/80) = 10 GPU-hours."""
    runs = [_run(f"ok-{i}", {80.0: 16.0}) for i in range(3)]
    slow = _run("slow", {30.0: 16.0})
    rep = cost_report([*runs, slow], [*runs, slow], packaged, "run")
    assert rep["totals"]["wasted_gpu_hours"]["below_baseline"] == pytest.approx(10.0)


def test_text_shows_a_large_clusters_figures_as_the_json_holds_them(
        packaged: Prices, capsys: pytest.CaptureFixture[str]) -> None:
    """A month of 2,000 GPUs: the table printed ``1.44e+06`` GPU-hours (``:g``), and
    123,456.789 as ``123457``."""
    big = RunCost(run_id="big", family="llm", team="core", gpu_model="H100", gpu_count=2000,
                  outcome="succeeded", running_at_ms=T, allocated_h=1_440_000.0,
                  observed_h=1_440_000.0, idle_h=123_456.789, busy_hours={80: 1_316_543.211},
                  busy_weighted={80: 80 * 1_316_543.211}, usable_artifact=True,
                  step_records=10)
    report = cost_report([big], [big], packaged, "team")
    report["window"] = {"since": "30d", "from_ms": T, "to_ms": T}
    _print_cost(report)
    out = capsys.readouterr().out
    assert "e+0" not in out
    assert "1440000" in out and "123456.789" in out
    assert "5,760,000.00" in out
    cap = capacity_report([], [], [], [], {}, {}, [("big", 1_234_567.5, 20.0, 80.0)])
    cap["window"] = {"since": "30d", "from_ms": T, "to_ms": T}
    _print_capacity(cap)
    out = capsys.readouterr().out
    assert "e+0" not in out and "1234567.5" in out
