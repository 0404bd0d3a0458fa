import json
import random

import pytest

from runwatch.core.records import Alert, JobEvent, Source
from runwatch.core.signals.indwatch import IndicatorWatch, default_specs
from runwatch.core.signals.rules import Finding
from runwatch.core.signals.workload import WatchSpec
from runwatch.core.stream import join, runstate
from runwatch.core.stream.join_node import occupancy_cause
from runwatch.processor.__main__ import worker_web_args
from runwatch.processor.settings import ProcessorSettings
from runwatch.testing import scenarios

SRC = Source(kind="processor", host="h", runwatch_version="0")
CFG = runstate.RunConfig(source=SRC)
T0 = 1_700_000_000_000
SPEC = WatchSpec("up", warmup=20, alpha=0.1, k=4.0, min_effect=0.1, persist=50, trend=True,
                 adwin=True)


def feed(w: IndicatorWatch, xs, spec=SPEC):
    return [w.update(x, spec) for x in xs]


@pytest.mark.parametrize(
    ("creep", "fires"),
    [(0.004, True), (0.0, False), (-0.004, False)],
)
def test_slow_creep_fires_as_a_trend(creep, fires) -> None:
    rng = random.Random(1)
    xs = [0.08 + rng.uniform(-0.01, 0.01) + creep * max(i - 40, 0) for i in range(120)]
    readings = feed(IndicatorWatch.new("loader_share", TREND_ONLY, None, 200), xs, TREND_ONLY)
    kinds = {r.kind for r in readings if r.firing}
    assert (kinds == {"trend"}) is fires
    assert all(0.0 <= r.score <= 1.0 for r in readings)


TREND_ONLY = WatchSpec("up", warmup=20, alpha=0.1, k=1e6, min_effect=0.1, persist=5, trend=True)
"""A spec whose level gate never fires (its bound is a million standard deviations)."""


def test_warm_start_seeds_detectors_from_the_workload_baseline() -> None:
    baseline = {"loader_share": [500, 0.08, 500 * 0.0001]}
    seeded = IndicatorWatch.new("loader_share", SPEC, baseline, 200)
    cold = IndicatorWatch.new("loader_share", SPEC, baseline, 1000)
    assert seeded.gate.seeded and seeded.z.n == 500 and seeded.trend.n >= 500
    assert not cold.gate.seeded and cold.z.n == 0
    # a seeded watch scores the first out-of-family value; a cold one cannot
    assert seeded.update(0.5, SPEC).z > 10 and cold.update(0.5, SPEC).z == 0.0


def test_watch_json_roundtrip_gives_the_same_readings() -> None:
    rng = random.Random(2)
    xs = [0.1 + rng.gauss(0, 0.01) + 0.003 * max(i - 30, 0) for i in range(100)]
    a = IndicatorWatch.new("loader_share", SPEC, None, 200)
    b = IndicatorWatch.new("loader_share", SPEC, None, 200)
    for x in xs:
        ra = a.update(x, SPEC)
        b = IndicatorWatch.from_state(json.loads(json.dumps(b.to_state())))
        assert b.update(x, SPEC) == ra


def test_every_watched_indicator_has_a_signal_and_specs_are_json_small() -> None:
    st, _ = play(scenarios.build("healthy", "run-s", T0, steps=120))
    assert len(runstate.dumps(st)) < 20_000
    assert set(st.watches) <= set(default_specs())


def play(events, cfg=CFG):
    st = runstate.new_state(events[0].run_id)
    outs = []
    for e in events:
        st, o = join.step(st, e, e.emitted_at_ms, cfg)
        outs += o
    return st, outs


def job(state: str, attempt: int, t: int, **kw) -> JobEvent:
    return JobEvent(event_id=f"e{t}", run_id="run-j", emitted_at_ms=t, source=SRC, seq=t - T0,
                    state=state, attempt=attempt, **kw)


@pytest.mark.parametrize(
    ("states", "restarts"),
    [
        ([("queued", 1), ("running", 1), ("running", 1), ("running", 1)], 0),
        ([("running", 1), ("retrying", 2), ("running", 2)], 1),
        ([("running", 1), ("running", 2), ("running", 3)], 2),
        ([("running", 1), ("preempted", 1), ("running", 1), ("preempted", 1)], 2),
    ],
)
def test_restarts_come_from_attempts_and_transitions_not_repeated_running(states,
                                                                        restarts) -> None:
    st, _ = play([job(s, a, T0 + i) for i, (s, a) in enumerate(states)])
    assert st.restarts == restarts


@pytest.mark.parametrize(
    ("deadline", "fires"),
    [(T0 + 60_000, True), (T0 + 600_000, False)],
)
def test_queue_deadline_is_an_epoch_time(deadline, fires) -> None:
    st, _ = play([job("queued", 1, T0, deadline_ms=deadline)])
    # judged a lateness behind the horizon: a start may still arrive that late
    _, outs = join.tick(st, T0 + 120_000 + CFG.lateness_ms, CFG)
    got = [a.detector for a in outs if isinstance(a, Alert)]
    assert got == (["rule:queue_deadline"] if fires else [])


def evidence(signal: str, detector: str) -> Finding:
    return Finding(detector, "x", signal, "warning", 1.0, 0.0, 0.5, T0, "t", alert=False)


@pytest.mark.parametrize(
    ("found", "cause"),
    [
        ([], "infrastructure"),
        ([evidence("execution", "watch:loader_share")], "execution"),
        ([evidence("infrastructure", "indicator:gpu_throttle")], "infrastructure"),
        ([evidence("execution", "indicator:restarts"),
          evidence("infrastructure", "rule:gpu_xid")], "infrastructure"),
    ],
)
def test_gpu_occupancy_cause(found, cause) -> None:
    st = runstate.new_state("run-o")
    for f in found:
        runstate.emit(st, CFG, f, T0, one_shot=True)
    assert occupancy_cause(st, T0 + 1, CFG) == cause


@pytest.mark.parametrize(
    ("name", "before", "after", "found", "cause"),
    [
        ("loader_share", 0.1, 0.1, [], "infrastructure"),  # loader steady: the GPUs
        ("loader_share", 0.1, 0.3, [], "execution"),  # loader slower, its watch not firing yet
        ("loader_share", 0.1, 0.3, [evidence("infrastructure", "rule:gpu_xid")],
         "infrastructure"),
        ("effective_batch_size", 256.0, 128.0, [], "execution"),
        ("effective_batch_size", 256.0, 250.0, [], "infrastructure"),  # within the effect bound
    ],
)
def test_gpu_occupancy_cause_sees_a_starving_loader_before_its_watch_fires(
        name, before, after, found, cause) -> None:
    st = runstate.new_state("run-s")
    w = runstate.watch_of(st, CFG, name, None)
    for x in [before] * 30 + [after] * 20:
        w.update(x, CFG.specs[name])  # no evidence recorded: only the watch's level moves
    for f in found:
        runstate.emit(st, CFG, f, T0, one_shot=True)
    assert not st.evidence or found
    assert occupancy_cause(st, T0 + 1, CFG) == cause


@pytest.mark.parametrize(
    ("env", "args", "want"),
    [
        ({}, ["worker"], ["--without-web"]),
        ({"web_enabled": True, "web_port": 7001}, ["worker"],
         ["--with-web", "--web-port", "7001", "--web-bind", "127.0.0.1", "--web-host",
          "127.0.0.1"]),
        ({"web_enabled": True}, ["worker", "--web-port", "7002"], ["--with-web"]),
        ({}, ["worker", "--with-web"], []),
    ],
)
def test_web_settings_take_effect_on_the_worker_cli(env, args, want) -> None:
    assert worker_web_args(ProcessorSettings(**env), args) == want
