"""The simulator's SLO scenarios: declarations, their objectives, the model, scheduling, scoring.

The live test (tests/integration/test_slo_sim_live.py) runs them through the
producers, the sink, the store and the evaluator; here the planned actions of
each run are read the way the store's rows describe them and handed to the
pure indicator kinds with the shipped ``infra/slo/sim-slos.yaml``: every SLO
fault breaks its objective within its budget, every control keeps its own.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from runwatch.core.records import Source
from runwatch.core.slo import indicators as ind
from runwatch.core.slo.evaluate import status
from runwatch.core.slo.spec import Objective, parse_slos
from runwatch.sim import scenarios as sc
from runwatch.sim.model import Action, RunModel, RunPlan, plan_cluster
from runwatch.sim.scoreboard import AlertSeen, Injection, score
from runwatch.sim.slodrive import SloUnavailable, due_instant, objectives_for, sim_slo_file
from runwatch.slo.service import Evaluator

ROOT = Path(__file__).resolve().parents[2]
START = 1_796_000_000_000
DURATION_MS = 540_000


def _objectives() -> dict[str, Objective]:
    path = sim_slo_file()
    return {o.name: o for o in parse_slos(path.read_text(), str(path))}


def test_every_slo_scenario_has_its_own_objective_and_kinds_are_covered() -> None:
    objs = _objectives()
    named = [s.slo for s in sc.SLO_SCENARIOS.values()]
    assert len(set(named)) == len(named)  # one objective per scenario: alerts are its own
    assert set(named) == set(objs)
    for s in sc.SLO_FAULTS:
        assert s.detectors == (f"slo:{s.slo}",) and s.cause and s.budget_s > 0
    assert all(s.control and s.slo for s in sc.SLO_CONTROLS)
    fault_kinds = {objs[s.slo].kind for s in sc.SLO_FAULTS}
    control_kinds = {objs[s.slo].kind for s in sc.SLO_CONTROLS}
    assert fault_kinds == control_kinds == {"data_availability", "training_window",
                                            "registry_control", "resumability"}


def test_slo_scenarios_stay_out_of_the_processor_set_but_resolve_by_name() -> None:
    assert not set(sc.SLO_SCENARIOS) & set(sc.SCENARIOS)
    assert all(not s.slo for s in sc.SCENARIOS.values())
    assert sc.get("window_overrun") is sc.SLO_SCENARIOS["window_overrun"]
    with pytest.raises(ValueError, match="SLO scenarios"):
        sc.get("nope")


def _plans() -> list[RunPlan]:
    return plan_cluster(3, 2, 1, list(sc.SLO_SCENARIOS.values()), "u")


def _actions(plan: RunPlan) -> tuple[RunModel, list[Action]]:
    model = RunModel(plan, 3, START, DURATION_MS)
    return model, model.advance(START + 10 * DURATION_MS)


def _rows(kind: str, plan: RunPlan, acts: Sequence[Action], now: int) -> list[Any]:
    """The rows the store holds for a run at ``now``, in the shape of the kind's query."""
    rid = plan.run_id
    acts = [a for a in acts if a.at_ms <= now]
    at = {a.kind: a.at_ms for a in acts}
    if kind == "data_availability":
        return [ind.DataReportRow(a.at_ms, a.args["version"], a.args["rows"], 0, 0, rid,
                                  a.args["dataset"]) for a in acts if a.kind == "data"]
    if kind == "training_window":
        if "start" not in at:
            return []
        fin = next((a for a in acts if a.kind == "finish"), None)
        return [ind.RunRow(rid, at["start"], fin.at_ms if fin else None,
                           fin.args["status"] if fin else "running", plan.family)]
    gates = [(a.at_ms, a.args["gate"], a.args["decision"]) for a in acts if a.kind == "gate"]
    if kind == "registry_control":
        return [ind.RegistryRow(f"{rid}-reg", rid, a.at_ms, "s3://m", "registered", gates,
                                plan.family) for a in acts if a.kind == "register"]
    checkpoints = [a.at_ms for a in acts if a.kind == "checkpoint"]
    starts = [a.at_ms for a in acts if a.kind in ("start", "rejoin")]
    return [ind.PreemptionRow(rid, a.at_ms, checkpoints, starts, plan.family)
            for a in acts if a.kind == "job" and a.args["state"] == "preempted"]


@pytest.mark.parametrize("name", list(sc.SLO_SCENARIOS))
def test_each_scenario_breaks_or_keeps_its_objective(name: str) -> None:
    """Evaluated every 30 virtual s over every run's facts, as the simulation's evaluator does."""
    from runwatch.slo.queries import mine

    scenario = sc.SLO_SCENARIOS[name]
    obj = _objectives()[scenario.slo]
    plans = _plans()
    plan = next(p for p in plans if p.fault is scenario)
    assert scenario.workload.family in (None, (plan.family, plan.team))
    runs = [(p, *_actions(p)) for p in plans]
    model = next(m for p, m, _ in runs if p is plan)
    _, compute = ind.COMPUTE[obj.kind]
    states = []
    for now in range(START + 30_000, START + DURATION_MS + 30_000, 30_000):
        rows = [r for p, _, acts in runs for r in _rows(obj.kind, p, acts, now)]
        # the objective picks its scenario's facts out of every run's (family or dataset)
        st = status(obj, compute(obj.params, mine(obj, rows), START - 1, now), now, START - 1)
        states.append((now, st))
    assert any(st.valid for _, st in states), f"{name}: nothing the objective counts"
    if scenario.control:
        assert {st.state for _, st in states} <= {"ok", "no_data"}, states[-1]
        return
    assert model.fault_ms is not None
    first = next(now for now, st in states if st.state not in ("ok", "no_data"))
    assert states[-1][1].state == "exhausted"
    # detected after the injection, within the budget
    assert model.fault_ms - 2_000 <= first <= model.fault_ms + scenario.budget_s * 1000


def test_preemption_far_loses_more_than_near() -> None:
    plans = {p.fault.name: p for p in _plans() if p.fault is not None}
    lost = {}
    for name in ("preemption_far", "preemption_near"):
        _, acts = _actions(plans[name])
        (row,) = _rows("resumability", plans[name], acts, START + DURATION_MS)
        marks = [t for t in (*row.checkpoints_ms, *row.starts_ms) if t <= row.at_ms]
        lost[name] = row.at_ms - max(marks)
        resumed = [a for a in acts if a.kind == "rejoin"]
        assert resumed and resumed[0].at_ms == row.at_ms + int(sc.RESUME_S * 1000)
        steps = [a.at_ms for a in acts if a.kind == "step"]
        assert not [t for t in steps if row.at_ms < t < resumed[0].at_ms]  # no work meanwhile
    assert lost["preemption_far"] > 3 * 60_000 >= lost["preemption_near"]


@pytest.mark.parametrize(("last", "horizon", "end", "want"), [
    (START, START + 29_999, None, None),            # the first instant not reached yet
    (START, START + 30_000, None, START + 30_000),
    (START, START + 95_000, None, START + 30_000),  # late: every instant, in order
    (START + 30_000, START + 95_000, None, START + 60_000),
    (START + 90_000, START + 100_000, None, None),
    (START + 90_000, START + 200_000, START + 100_000, START + 100_000),  # the runs' end
    (START + 90_000, START + 200_000, START + 150_000, START + 120_000),  # its instants first
    (START + 90_000, START + 95_000, START + 100_000, None),
    (START + 100_000, START + 500_000, START + 100_000, None),  # once
])
def test_due_instant(last: int, horizon: int, end: int | None, want: int | None) -> None:
    assert due_instant(last, START, 30_000, horizon, end) == want


def test_objectives_for_names_the_missing_objective() -> None:
    objs = list(_objectives().values())
    chosen = objectives_for([sc.SLO_SCENARIOS["data_late"]], objs, "sim-slos.yaml")
    assert [o.name for o in chosen] == ["sim-data-late"]
    with pytest.raises(SloUnavailable, match="x.yaml has no objective sim-data-late .*data_late"):
        objectives_for([sc.SLO_SCENARIOS["data_late"]], objs[1:], "x.yaml")


def _alert(detector: str, first: int, run: str = "", status: str = "firing") -> AlertSeen:
    return AlertSeen(run_id=run, detector=detector, indicator="", cause="execution",
                     status=status, first_seen_ms=first, title="")


def test_score_takes_an_slo_alert_without_a_run_for_its_objective_only() -> None:
    fault = sc.SLO_SCENARIOS["window_overrun"]
    inj = Injection("s-003-window_overrun", fault, START)
    board = score([inj], [
        _alert("slo:sim-forecast-hourly-window", START + 5_000),       # the control's objective
        _alert(f"slo:{fault.slo}", START - 60_000),                      # before the injection
        _alert(f"slo:{fault.slo}", START + 40_000),
    ], ["s-000-control", "s-007-window_on_time"],
        {"s-007-window_on_time": "window_on_time"},
        {"s-007-window_on_time": "sim-forecast-hourly-window"})
    (row,) = board.rows
    assert row.detected and row.cause_correct and row.ttd_s == 40.0 and row.within_budget
    assert row.others == ("slo:sim-forecast-hourly-window",) or row.others == ()
    by_name = {c.scenario: c for c in board.controls}
    assert [a.detector for a in by_name["window_on_time"].alerts] == [
        "slo:sim-forecast-hourly-window"]
    assert by_name["healthy"].alerts == ()
    assert len(board.false_alerts) == 1 and not board.ok


class _Store:
    """Answers the training-window query with runs of two simulation sessions."""

    def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        assert "job_events" in sql
        late = params["now"] - 3_600_000
        return [("mine-001", late, params["now"], "succeeded", "f", 0),  # 1 h: within 2 h
                ("other-001", late - 7_200_000, params["now"], "succeeded", "f", 0)]  # 3 h

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Keep nothing."""


def test_evaluator_counts_only_the_session_runs() -> None:
    objs = parse_slos("""apiVersion: openslo/v1
kind: SLO
metadata: {name: w}
spec:
  indicator: {spec: {kind: training_window, family: f, maxDuration: 2h}}
  timeWindow: [{duration: 1d, isRolling: true}]
  objectives: [{target: 0.9}]
""", "s.yaml")
    src = Source(kind="slo", host="h", runwatch_version="0")
    every = Evaluator(objs, _Store(), "db", source=src).statuses(START)
    (st,) = every
    assert (st.good, st.valid) == (1, 2)
    (mine,) = Evaluator(objs, _Store(), "db", source=src, run_prefix="mine-").statuses(START)
    assert (mine.good, mine.valid, mine.state) == (1, 1, "ok")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runwatch", "simulate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_offline_refuses_slo_scenarios_with_the_reason() -> None:
    out = _cli("--offline", "--scenario", "data_late", "--scenario", "nan_loss")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: SLO scenarios (data_late) are evaluated from what the sink stored in "
        "ClickHouse: they need Kafka, the sink and the store, not --offline")


def test_all_offline_leaves_the_slo_scenarios_out() -> None:
    from runwatch.commands.simulate import _names

    assert _names(["all"], offline=True) == list(sc.SCENARIOS)
    assert _names(["all"], offline=False) == [*sc.SCENARIOS, *sc.SLO_SCENARIOS]
    assert _names(["slo", "data_late"], offline=False) == list(sc.SLO_SCENARIOS)


def test_list_marks_the_slo_scenarios() -> None:
    out = _cli("--scenario", "list")
    assert out.returncode == 0
    lines = [ln for ln in out.stdout.splitlines() if "[SLO " in ln]
    assert len(lines) == len(sc.SLO_SCENARIOS)
    assert any(ln.startswith("ungated_push") and "slo:sim-ranker-release-registry" in ln
               for ln in lines)


class _Rounds:
    """Records the instants an evaluator is asked for."""

    db = "simdb"

    def __init__(self) -> None:
        self.at: list[int] = []

    def evaluate(self, now_ms: int) -> Any:
        from runwatch.slo.service import Round

        self.at.append(now_ms)
        return Round(now_ms)


def test_instants_go_no_later_than_the_steps_the_store_holds(caplog) -> None:
    from runwatch.sim.clock import VirtualClock
    from runwatch.sim.slodrive import SloDriver

    wall = [1_000.0]
    clock = VirtualClock(10.0, start_ms=START, wall=lambda: wall[0])
    stored = [START]
    rounds = _Rounds()
    driver = SloDriver(rounds, clock, START, interval_ms=30_000, settle_ms=20_000,  # type: ignore[arg-type]
                       stored=lambda: stored[0], wait_s=3600.0)
    driver.published = lambda: START + 60_000
    wall[0] += 4.9  # virtual now START + 49 s: the first instant is not settled yet
    assert driver.step() is None
    wall[0] += 0.2
    assert driver.step() is None and rounds.at == []  # settled, but its steps not stored
    stored[0] = START + 30_000
    assert driver.step() is not None and rounds.at == [START + 30_000]
    wall[0] += 3.0  # a lagging sink: settled up to +61 s, steps stored up to +44 s only
    stored[0] = START + 44_000
    assert driver.step() is None and rounds.at == [START + 30_000]
    # the runs ended at +70 s, their last step at +60 s: the end waits for that step only
    driver.end_at(START + 70_000)
    wall[0] += 10.0
    stored[0] = START + 59_000
    assert driver.step() is None
    stored[0] = START + 60_000
    driver.step()
    assert not driver.finished  # the instant at +60 s first: none is skipped
    driver.step()
    assert rounds.at == [START + 30_000, START + 60_000, START + 70_000] and driver.finished
    # no sink at all: evaluated once its steps stood still for the wait, with a warning naming
    # the database
    lost = SloDriver(_Rounds(), clock, START, interval_ms=30_000, settle_ms=0,  # type: ignore[arg-type]
                     stored=lambda: 0, wait_s=0.0)
    lost.published = lambda: START + 60_000
    assert lost.step() is None  # its steps stand still from now on
    assert lost.step() is not None
    assert "is a sink writing into database simdb" in caplog.text


def test_a_bad_slo_file_is_one_line_with_file_line_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "slos.yaml"
    bad.write_text(sim_slo_file().read_text().replace("maxLoss: 3m", "maxLoss: 3 minutes", 1))
    out = _cli("--scenario", "preemption_far", "--duration", "10", "--slo-file", str(bad))
    assert out.returncode == 2
    lineno = next(i for i, ln in enumerate(bad.read_text().splitlines(), 1)
                  if "maxLoss: 3 minutes" in ln)
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: {bad}:{lineno}: spec.indicator.spec.maxLoss: bad duration '3 minutes' "
        "(use e.g. 30s, 15m, 2h, 1d)")


@pytest.mark.parametrize("argv", [["--speed", "nan"], ["--duration", "inf"], ["--grace", "nan"],
                                  ["--collect", "nan"], ["--grace", "-1"], ["--speed", "0"]])
def test_simulate_refuses_numbers_it_cannot_run_with(argv: list[str], capsys) -> None:
    """``--speed nan`` crashed with a traceback and ``--grace nan`` never ended."""
    from runwatch import cli

    assert cli.main(["simulate", "--offline", *argv]) == 2
    assert "must be positive" in capsys.readouterr().err
