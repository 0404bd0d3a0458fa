"""Unit tests of the cluster simulator: clock, model, scenarios, scoreboard, offline replay."""

from __future__ import annotations

import collections

import pytest

from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.sim import scenarios as sc
from runwatch.sim.clock import VirtualClock
from runwatch.sim.model import RunModel, plan_cluster
from runwatch.sim.replay import replay
from runwatch.sim.runner import SimConfig, run_simulation
from runwatch.sim.scoreboard import AlertSeen, Injection, format_board, score


class FakeWall:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("speed,advance_s,expected_ms", [(1, 1.0, 1_000), (20, 1.5, 30_000),
                                                         (0.5, 4.0, 2_000)])
def test_clock_runs_at_speed(speed: float, advance_s: float, expected_ms: int) -> None:
    wall = FakeWall(1_000.0)
    clock = VirtualClock(speed, start_ms=5_000, wall=wall)
    wall.t += advance_s
    assert clock.now_ms() - 5_000 == expected_ms
    assert clock.to_wall(clock.now_ms()) == int(wall.t * 1000)


@pytest.mark.parametrize("speed", [0, -1])
def test_clock_rejects_bad_speed(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        VirtualClock(speed)


def test_every_failure_mode_and_control_is_declared() -> None:
    faults = [s for s in sc.SCENARIOS.values() if not s.control]
    controls = [s for s in sc.SCENARIOS.values() if s.control]
    assert len(faults) == len(sc.FAULTS) == 17 and len(controls) == len(sc.CONTROLS) == 10
    for s in faults:
        assert s.detectors and s.cause and s.budget_s > 0 and s.kind
    for s in controls:
        assert s.detectors == () and s.cause == "" and s.kind == ""
    with pytest.raises(ValueError, match="unknown scenario"):
        sc.get("nope")


def _actions(seed: int, fault: str | None) -> list:
    faults = [sc.SCENARIOS[fault]] if fault else []
    plan = plan_cluster(seed, 2, 1, faults, "t")[-1]
    return RunModel(plan, seed, 0, 900_000).advance(10**9)


@pytest.mark.parametrize("seed", [1, 7])
def test_model_is_deterministic(seed: int) -> None:
    assert _actions(seed, "loader_slowdown") == _actions(seed, "loader_slowdown")
    assert _actions(seed, None) != _actions(seed + 1, None)


@pytest.mark.parametrize("fault,kind,check", [
    ("nan_loss", "step", lambda a: a.args["loss"] != a.args["loss"]),
    ("checkpoint_corrupt", "checkpoint", lambda a: a.args["corrupt"]),
    ("partition_missing", "data", lambda a: a.args["rows"] == 0),
    ("failed_gate", "gate", lambda a: a.args["decision"] == "fail"),
    ("restarts", "job", lambda a: a.args["state"] == "retrying"),
    ("schema_failures", "data", lambda a: a.args["bad_share"] > 0),
    ("label_shift", "data", lambda a: a.args["labels"][0] > 0.5),
])
def test_fault_changes_telemetry_only_after_injection(fault: str, kind: str, check) -> None:
    acts = _actions(3, fault)
    inject = next(a.at_ms for a in acts if a.kind == "fault")
    hits = [a for a in acts if a.kind == kind and check(a)]
    assert hits, f"{fault} left no mark"
    assert all(a.at_ms >= inject for a in hits)
    assert not [a for a in _actions(3, None) if a.kind == kind and check(a)]


def test_healthy_run_lifecycle() -> None:
    kinds = collections.Counter(a.kind for a in _actions(1, None))
    assert kinds["start"] == 1 and kinds["finish"] == 1 and kinds["gate"] == 1
    assert kinds["step"] > 300 and kinds["validation"] > 10 and kinds["checkpoint"] > 5


def test_plan_places_runs_on_distinct_gpus() -> None:
    plans = plan_cluster(1, 5, 3, list(sc.SCENARIOS.values()), "p")  # 33 runs, 7 per node
    seen = collections.defaultdict(set)
    for p in plans:
        assert not seen[p.node] & set(p.gpus)
        seen[p.node] |= set(p.gpus)
    assert len({p.run_id for p in plans}) == len(plans)


def _inj(name: str, at: int = 1_000) -> Injection:
    return Injection(f"r-{name}", sc.SCENARIOS[name], at)


def _alert(run: str, det: str, cause: str, at: int, status: str = "firing") -> AlertSeen:
    return AlertSeen(run, det, "x", cause, status, at, "t")


@pytest.mark.parametrize("alerts,detected,cause_ok,ttd", [
    ([_alert("r-nan_loss", "rule:non_finite", "learning", 31_000)], True, True, 30.0),
    ([_alert("r-nan_loss", "rule:non_finite", "data", 31_000)], True, False, 30.0),
    ([_alert("r-nan_loss", "rule:failed_gate", "artifact", 31_000)], False, False, None),
    ([_alert("r-other", "rule:non_finite", "learning", 31_000)], False, False, None),
    ([_alert("r-nan_loss", "rule:non_finite", "learning", 31_000, "resolved")], False, False,
     None),
])
def test_score_rows(alerts, detected, cause_ok, ttd) -> None:
    board = score([_inj("nan_loss")], alerts, ["ctl"])
    row = board.rows[0]
    assert (row.detected, row.cause_correct, row.ttd_s) == (detected, cause_ok, ttd)


def test_score_counts_control_false_alerts_and_budget() -> None:
    alerts = [_alert("r-nan_loss", "rule:non_finite", "learning", 1_000 + 500_000),
              _alert("ctl", "rule:stalled", "execution", 5_000)]
    board = score([_inj("nan_loss")], alerts, ["ctl"])
    assert not board.rows[0].within_budget
    assert len(board.false_alerts) == 1
    assert "false alerts in 1 healthy control run(s): 1" in format_board(board)


@pytest.fixture(scope="module")
def offline_result():
    transport = CaptureTransport()
    cfg = SimConfig(nodes=4, runs=2, seed=5, speed=100.0, duration_s=700.0, tick_s=0.02,
                    scenarios=tuple(sc.get(n) for n in ("nan_loss", "failed_gate",
                                                        "checkpoint_corrupt",
                                                        "unauthorized_image")),
                    collect_alerts=False)
    res = run_simulation(cfg, transport=transport)
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in transport.messages]
    res.alerts = [AlertSeen.from_alert(a) for a in replay(transport.messages)]
    return res, records, transport


def test_simulator_publishes_every_signal_class(offline_result) -> None:
    res, records, transport = offline_result
    names = collections.Counter(type(r).__name__ for r in records)
    for n in ("RunManifest", "JobEvent", "StepTiming", "LearningStep", "ValidationResult",
              "CheckpointEvent", "DataQualityReport", "NodeSample", "GateDecision"):
        assert names[n] > 0, n
    assert res.errors == 0
    kinds = {r.source.kind for r in records}
    assert kinds == {"sdk", "hook", "agent"}
    start = res.start_ms
    assert all(r.emitted_at_ms >= start for r in records)
    assert max(r.emitted_at_ms for r in records) - start >= 600_000  # virtual, not wall time


def test_offline_scoreboard_detects_injected_faults(offline_result) -> None:
    res, _, _ = offline_result
    board = res.board()
    assert {r.scenario for r in board.rows if r.detected and r.cause_correct} == {
        "nan_loss", "failed_gate", "checkpoint_corrupt", "unauthorized_image"}
    assert board.false_alerts == ()


def _occupancy_sim(gpm: bool):
    transport = CaptureTransport()
    cfg = SimConfig(nodes=2, runs=1, seed=3, speed=100.0, duration_s=650.0, tick_s=0.02,
                    scenarios=(sc.get("gpu_occupancy").with_(at_s=200),), collect_alerts=False,
                    gpm=gpm)
    res = run_simulation(cfg, transport=transport)
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in transport.messages]
    alerts = replay(transport.messages)
    res.alerts = [AlertSeen.from_alert(a) for a in alerts]
    return res, records, alerts


@pytest.mark.parametrize(("gpm", "source"), [(True, "sm_occupancy"), (False, "gpu_utilization")])
def test_gpu_occupancy_decline_is_detected_through_the_agent(gpm: bool, source: str) -> None:
    res, records, alerts = _occupancy_sim(gpm)
    fault = res.injections[0]
    assert fault.injected_ms is not None
    faulted = [(r.emitted_at_ms, g) for r in records if type(r).__name__ == "NodeSample"
               for g in r.gpus if any(p.run_id == fault.run_id for p in g.processes)]
    assert faulted
    if gpm:  # the agent reports SM occupancy (GPM), and it falls after the injection
        assert all(g.sm_active_pct is not None for _, g in faulted)
        # training began 200 s before the injection (model loading before that: low occupancy)
        before = [g.sm_active_pct for t, g in faulted
                  if fault.injected_ms - 150_000 < t < fault.injected_ms]
        late = [g.sm_active_pct for t, g in faulted if t > fault.injected_ms + 200_000]
        assert before and late and max(late) < min(before) - 20
    else:
        assert all(g.sm_active_pct is None for _, g in faulted)
    board = res.board()
    row = next(r for r in board.rows if r.scenario == "gpu_occupancy")
    assert row.detected and row.cause_correct and row.within_budget
    assert row.detector == "watch:gpu_occupancy"
    assert board.false_alerts == ()
    occ = [a for a in alerts if a.detector == "watch:gpu_occupancy" and a.status == "firing"]
    details = [ev.detail or "" for a in occ for ev in a.evidence
               if ev.indicator == "gpu_occupancy"]
    assert details and all(f"source={source}" in d for d in details)
