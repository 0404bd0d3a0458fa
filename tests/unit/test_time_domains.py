"""Time domains of the run join, through the public producers (SDK, node agent).

Runs are driven the way users drive them (``runwatch.init(..., clock=)`` and
``run.step``/``run.checkpoint`` with explicit times, the node agent over the
NVML test double) into a :class:`CaptureTransport`; the captured records are
decoded and folded through the processor's join, either *live* (the
processor's clock a little behind each event, the timer ticking every second)
or *replayed* (a backlog read in one burst long after, as after an outage).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from sdk_kit import Clock

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert, Source
from runwatch.core.signals import indicators as ind
from runwatch.core.stream import join, runstate
from runwatch.core.stream.horizon import InputHorizon
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim import replay as offline
from runwatch.sim.drivers import make_node

SRC = Source(kind="processor", host="h", runwatch_version="0")
CFG = runstate.RunConfig(source=SRC)
T0 = 1_700_000_000_000


def sdk_run(script: Callable[[Any, Clock], None], run_id: str = "r1",
            transport: CaptureTransport | None = None, clock: Clock | None = None) -> list[Any]:
    """Run ``script(run, clock)`` against the SDK; return the decoded records it published."""
    t = transport or CaptureTransport()
    clock = clock or Clock(T0)
    run = runwatch.init("fam", run_id=run_id, team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=True, clock=clock)
    script(run, clock)
    run.finish()
    codec = load_codec()
    return [codec.decode(v) for _, _, v in t.messages]


def replay(records: list[Any]) -> list[Alert]:
    """Feed as ``runwatch simulate --offline`` does, with the processor's default knobs."""
    return offline.replay(offline.as_messages(records), ProcessorSettings(save_interval_s=0))


def live(records: list[Any], lag_ms: int = 250, tick_ms: int = 1_000,
         after_ms: int = 0) -> list[Alert]:
    """Fold as a live processor would: its clock ``lag_ms`` behind each event, ticking."""
    st = runstate.new_state(records[0].run_id)
    out: list[Any] = []
    next_tick = 0
    for r in sorted(records, key=lambda r: r.emitted_at_ms):
        now = r.emitted_at_ms + lag_ms
        while next_tick and next_tick <= now:
            out += join.tick(st, next_tick, CFG)[1]
            next_tick += tick_ms
        next_tick = next_tick or now + tick_ms
        out += join.step(st, r, now, CFG)[1]
    for t in range(next_tick, next_tick + after_ms, tick_ms):
        out += join.tick(st, t, CFG)[1]
    return [a for a in out if isinstance(a, Alert)]


def burst(records: list[Any], wall_ms: int) -> list[Alert]:
    """Fold a backlog read in one burst at wall time ``wall_ms`` (a replay, a backfill)."""
    st = runstate.new_state(records[0].run_id)
    out: list[Any] = []
    for r in sorted(records, key=lambda r: r.emitted_at_ms):
        out += join.step(st, r, wall_ms, CFG)[1]
    return [a for a in out if isinstance(a, Alert)]


def lifecycle(alerts: list[Alert], detector: str) -> list[tuple[Any, ...]]:
    """What a receiver sees of one detector's alerts (not when the processor sent them)."""
    return [(a.status, a.alert_id, a.event_id, a.first_seen_ms, a.last_seen_ms, a.observed,
             a.expected, a.probable_cause) for a in alerts if a.detector == detector]


# --------------------------------------------------------------- checkpoint share (item 4)


def checkpoints(grow_s: float, seed: int = 1) -> Callable[[Any, Clock], None]:
    """250 s of training, then a checkpoint of 25 s (+ ``grow_s`` more from the 9th on, ramped)."""
    def script(run: Any, clock: Clock) -> None:
        rnd = random.Random(seed)
        step = 0
        for k in range(25):
            for _ in range(25):
                clock.t += 10_000
                step += 1
                run.step(step, loss=1.0, samples=32, step_ms=10_000.0, loader_wait_ms=500.0)
            dur = 25_000 + grow_s * 1000 * min(max(k - 8, 0) / 16, 1.0) + rnd.uniform(-2e3, 2e3)
            clock.t += int(dur)
            run.checkpoint(f"s3://ckpt/run/{k}", step=step, duration_ms=dur)
    return script


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_growing_checkpoints_fire_the_checkpoint_share_watch(seed: int) -> None:
    # 25 s -> 125 s checkpoints every 250 s: per-interval share 9 % -> 33 %
    alerts = replay(sdk_run(checkpoints(100.0, seed)))
    fired = [a for a in alerts if a.detector == "watch:checkpoint_share"]
    assert [(a.status, a.probable_cause) for a in fired] == [("firing", "execution")]
    assert fired[0].observed > fired[0].expected + 0.1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_steady_checkpoints_do_not_page(seed: int) -> None:
    assert replay(sdk_run(checkpoints(0.0, seed))) == []


@pytest.mark.parametrize(("ends", "n", "want"), [
    ([], 3, (0.0, 0.0)),
    # the lead before the first checkpoint is no interval (it holds the run's start-up)
    ([[100, 10.0]], 3, (0.0, 0.0)),
    ([[100, 10.0], [200, 30.0]], 3, (30.0, 100.0)),
    ([[100, 10.0], [200, 30.0]], 1, (30.0, 100.0)),  # the last interval only
    ([[100, 10.0], [200, 30.0], [300, 50.0], [400, 70.0]], 3, (150.0, 300.0)),
])
def test_recent_checkpoint_share_window(ends, n, want) -> None:
    assert ind.recent_checkpoint_share(ends, n) == want


# ------------------------------------------------------------ loader-share lifecycle (item 5)


def loader(shares: Callable[[int], float], n: int, seed: int = 0,
           noise: float = 0.04) -> Callable[[Any, Clock], None]:
    """``n`` 2-second steps whose loader share is ``shares(i)`` plus noise."""
    def script(run: Any, clock: Clock) -> None:
        rnd = random.Random(seed)
        for i in range(n):
            clock.t += 2_000
            share = min(max(shares(i) + rnd.gauss(0, noise), 0.0), 0.95)
            run.step(i, loss=1.0, samples=32, step_ms=2_000.0, loader_wait_ms=share * 2_000)
    return script


def ramp(i: int) -> float:
    return 0.05 + 0.5 * max(i - 300, 0) / 1200


@pytest.mark.parametrize("seed", range(10))
def test_loader_alert_does_not_resolve_while_the_loader_keeps_slowing(seed: int) -> None:
    alerts = replay(sdk_run(loader(ramp, 1500, seed)))
    seen = [a.status for a in alerts if a.detector == "watch:loader_share"]
    assert seen == ["firing"]


def bumps(i: int) -> float:
    """Slow for ~10 min, healthy for ~27 min, slow again: two episodes."""
    return 0.5 if 300 <= i < 600 or 1400 <= i < 1700 else 0.05


def test_loader_alert_resolves_after_a_sustained_healthy_span_then_fires_again() -> None:
    records = sdk_run(loader(bumps, 2000))
    alerts = live(records)
    seen = lifecycle(alerts, "watch:loader_share")
    assert [s[0] for s in seen] == ["firing", "resolved", "firing", "resolved"]
    t_fire, t_resolved = seen[0][3], seen[1][4]
    healthy_from = T0 + 600 * 2_000
    resolved_at = next(a for a in alerts if a.status == "resolved").emitted_at_ms - 250  # lag
    assert resolved_at - healthy_from >= CFG.policy.resolve_ms  # a sustained span, not 5 steps
    assert t_fire < t_resolved


def test_loader_alert_lifecycle_is_the_same_live_and_replayed() -> None:
    records = sdk_run(loader(bumps, 2000))
    live_seen = lifecycle(live(records), "watch:loader_share")
    replayed_seen = lifecycle(burst(records, T0 + 86_400_000), "watch:loader_share")
    assert [s[0] for s in live_seen] == ["firing", "resolved", "firing", "resolved"]
    assert replayed_seen == live_seen


def test_an_input_bound_run_at_its_usual_loader_share_does_not_page_even_later() -> None:
    # 60 % of every step waiting on data from the start: this family's normal range
    records = sdk_run(loader(lambda i: 0.6, 1500))
    assert live(records, after_ms=20 * 60_000) == []


# ------------------------------------------------ absence rules on the event-time horizon


def steps(n: int, start: int = 0) -> Callable[[Any, Clock], None]:
    def script(run: Any, clock: Clock) -> None:
        for i in range(start, start + n):
            clock.t += 1_000
            run.step(i, loss=1.0, samples=32, step_ms=1_000.0, loader_wait_ms=10.0)
    return script


def test_a_backlog_read_after_an_outage_does_not_page_stalled() -> None:
    """The processor was down for 20 min while the run kept training; it catches up."""
    clock = Clock(T0)
    before = sdk_run(steps(120), clock=clock)[:-1]  # (the run has not finished yet)
    backlog = [r for r in sdk_run(steps(1_200, 120), clock=clock)
               if r.emitted_at_ms > clock.t - 1_200_000 and type(r).__name__ != "RunManifest"]
    st = runstate.new_state("r1")
    horizon = InputHorizon()
    out: list[Any] = []
    wall = T0
    for r in before:  # live
        wall = r.emitted_at_ms + 100
        horizon.observe(("rw.exec.job", 0), r.emitted_at_ms, wall)
        out += join.step(st, r, wall, CFG)[1]
    wall += 20 * 60_000  # back up, 20 min later: the timer ticks before the backlog is read
    out += join.tick(st, wall, CFG, horizon.at(wall))[1]
    for k, r in enumerate(backlog):  # catching up, ticking as it goes
        horizon.observe(("rw.exec.job", 0), r.emitted_at_ms, wall)
        out += join.step(st, r, wall, CFG)[1]
        if k % 50 == 0:
            out += join.tick(st, wall, CFG, horizon.at(wall))[1]
        wall += 5
    assert [a for a in out if isinstance(a, Alert)] == []


def test_a_run_silent_while_the_rest_of_the_input_moves_is_stalled() -> None:
    records = sdk_run(steps(120))[:-1]
    st = runstate.new_state("r1")
    for r in records:
        join.step(st, r, r.emitted_at_ms, CFG)
    horizon = InputHorizon()
    last = records[-1].emitted_at_ms
    horizon.observe(("rw.exec.job", 0), last, last)
    alerts: list[Any] = []
    for k in range(1, 721):  # node samples keep arriving on another input, one a second
        wall = last + k * 1_000
        horizon.observe(("rw.internal.node-by-run", 3), wall, wall)
        alerts += join.tick(st, wall, CFG, horizon.at(wall))[1]
    assert [(a.detector, a.probable_cause) for a in alerts] == [("rule:stalled", "execution")]
    assert alerts[0].last_seen_ms - last > CFG.stall_min_ms


def sparse(records_: int, every: int = 1_000, stop_s: int = 0) -> Callable[[Any, Clock], None]:
    """One-second steps logged every ``every``-th step, with the per-step time (the SDK's
    explicit ``step_ms``); the job then runs ``stop_s`` seconds more without a record."""
    def script(run: Any, clock: Clock) -> None:
        for k in range(1, records_ + 1):
            clock.t += every * 1_000
            run.step(k * every, loss=1.0, samples=64, step_ms=1_000.0, loader_wait_ms=20.0)
        clock.t += stop_s * 1_000
    return script


def test_a_run_that_logs_every_thousandth_step_is_not_stalled_between_records() -> None:
    # each record comes ~17 min after the last one, ten per-step times being 10 s
    alerts = live(sdk_run(sparse(8))[:-1], after_ms=15 * 60_000)
    assert [a.detector for a in alerts] == []


def test_a_sparse_logging_run_that_stops_for_ten_of_its_intervals_is_stalled() -> None:
    records = sdk_run(sparse(8))[:-1]
    st = runstate.new_state("r1")
    for r in records:
        join.step(st, r, r.emitted_at_ms, CFG)
    last = records[-1].emitted_at_ms
    fired = [(k, a.detector) for k in range(0, 12_000, 60)  # ticks over 3.3 h of silence
             for a in join.tick(st, last + k * 1_000, CFG)[1] if isinstance(a, Alert)]
    assert [d for _, d in fired] == ["rule:stalled"]
    assert 10 * 1_000 < fired[0][0] <= 10 * 1_000 + 60  # ten 1,000 s logging intervals


@pytest.mark.parametrize(("records", "wall", "want"), [
    ([], 10_000, 0),
    ([("a", 5_000, 9_000), ("b", 7_000, 9_500)], 10_000, 5_000),  # least of the active
    # "a" idle for 69 s while "b" went on
    ([("a", 5_000, 1_000), ("b", 6_000, 30_000), ("b", 7_000, 69_500)], 70_000, 7_000),
    ([("a", 5_000, 1_000), ("b", 7_000, 2_000)], 70_000, 7_000),  # all idle: the latest
    # every input was idle (an outage) until "b" drained its spool: "a" gets a minute
    # from then to drain its own, and holds the horizon meanwhile
    ([("a", 5_000, 1_000), ("b", 7_000, 69_500)], 70_000, 5_000),
    ([("a", 5_000, 1_000), ("b", 7_000, 69_500)], 129_600, 7_000),  # ... not longer
    # a run's manifest partition read once, then its steps once a minute and nothing else:
    # each step came after a minute of no input, refreshed the manifest's partition and
    # held the horizon at the manifest's time (the run never missed its data report); now
    # it follows the steps, a step behind (each step, after a minute of nothing, starts a
    # grace that holds its input's previous watermark)
    ([("a", 1_000, 0), ("b", 60_000, 60_000), ("b", 120_000, 120_000),
      ("b", 180_000, 180_000)], 180_500, 120_000),
    # producers share a partition: the first to drain after a 20-minute outage moved it
    # over the outage while the others had delivered nothing; it holds the horizon where
    # it stood for the minute of grace, then moves on
    ([("p", 10_000, 1_000), ("p", 1_210_000, 70_000)], 70_500, 10_000),
    ([("p", 10_000, 1_000), ("p", 1_210_000, 70_000)], 130_500, 1_210_000),
])
def test_input_horizon(records, wall, want) -> None:
    h = InputHorizon(idle_ms=60_000)
    for src, event, seen in records:
        h.observe(src, event, seen)
    assert h.at(wall) == want


# ------------------------------------------------------ GPU occupancy baseline (item 7)


def gpu_job(util: Callable[[float], float], load_s: int = 600, train_s: int = 2_400,
            gpus: tuple[int, ...] = tuple(range(8)),
            paused: Callable[[float], bool] = lambda t: False) -> list[Any]:
    """A run on one node: ``load_s`` of model loading, then training with steps.

    The node agent samples every 10 s over the NVML double; ``util(t_s)`` is
    the GPUs' utilization in percent (SM occupancy 70 % of it), the SDK
    publishes a step a second once training starts, except while ``paused(t_s)``
    (an evaluation pass, a checkpoint write).
    """
    transport = CaptureTransport()
    clock = Clock(T0)
    node = make_node("n1", Publisher(transport, kind="agent", clock=clock))
    for g in gpus:
        node.nvml.attach_process(g, 4242 + g)
        node.attributor.pids[4242 + g] = "g1"
    run = runwatch.init("fam", run_id="g1", team="ml", transport=transport,
                        install_hooks=False, capture_lineage=False, strict=True, clock=clock)
    for t in range(0, load_s + train_s):
        clock.t = T0 + t * 1_000
        if t >= load_s and not paused(t):
            run.step(t - load_s, loss=1.0, samples=32, step_ms=1_000.0, loader_wait_ms=20.0)
        if t % 10 == 0:
            for g in gpus:
                node.nvml.util[g] = util(t)
                node.nvml.set_occupancy(g, 0.7 * util(t))
            node.agent.tick()
    run.finish()
    codec = load_codec()
    return [codec.decode(v) for _, _, v in transport.messages]


def test_occupancy_fall_after_a_low_utilization_model_load_is_detected() -> None:
    # loading at 10 %, training at 90 %, then the GPUs fall to 35 % (40 min in)
    def util(t: float) -> float:
        return 10.0 if t < 600 else 90.0 if t < 2_400 else 35.0
    alerts = replay(gpu_job(util))
    fired = [a for a in alerts if a.detector == "watch:gpu_occupancy" and a.status == "firing"]
    assert len(fired) == 1
    assert fired[0].first_seen_ms >= T0 + 2_400_000
    assert fired[0].expected > 0.5  # the training level, not the loading one


@pytest.mark.parametrize("level", [12.0, 30.0])
def test_a_run_always_at_low_utilization_is_not_paged(level: float) -> None:
    # an evaluation job / an input-bound family: low from loading to the end
    assert replay(gpu_job(lambda t: 8.0 if t < 600 else level)) == []


def evaluating(t: float) -> bool:
    """A 45 s evaluation pass every 5 minutes of training (no steps; shorter than a stall)."""
    return t >= 600 and (t - 600) % 300 >= 255


@pytest.mark.parametrize("eval_util", [20.0, 35.0])
def test_evaluation_passes_between_steps_are_not_an_occupancy_fall(eval_util: float) -> None:
    def util(t: float) -> float:
        return 10.0 if t < 600 else eval_util if evaluating(t) else 90.0
    assert replay(gpu_job(util, paused=evaluating)) == []


def test_an_occupancy_fall_while_stepping_is_detected_between_evaluation_passes() -> None:
    def util(t: float) -> float:
        return 10.0 if t < 600 else 25.0 if evaluating(t) else 90.0 if t < 2_400 else 35.0
    fired = [a for a in replay(gpu_job(util, paused=evaluating))
             if a.detector == "watch:gpu_occupancy" and a.status == "firing"]
    assert len(fired) == 1 and fired[0].first_seen_ms >= T0 + 2_400_000


@pytest.mark.parametrize(("end", "silent_min", "want"), [
    ("cancelled", 73, [("rule:stalled", "execution")]),  # hung at 12 min, cancelled at 85
    ("failed", 40, [("rule:stalled", "execution")]),  # hung until the watchdog failed it
    ("failed", 2, []),  # a crash: it failed right after its last step, no hang
    ("succeeded", 30, []),  # a long final evaluation and save: it was not hung
])
def test_a_hang_ended_by_the_scheduler_pages_in_a_replay_as_live(end: str, silent_min: int,
                                                                 want: list) -> None:
    """Read in one burst (a replay, a backfill after an outage), the hung run's partition
    held the horizon back (it had delivered within the idle minute) and its end came
    first: the hang was never paged, though live it paged ten minutes in."""
    import time

    from runwatch.client.emit import emit_records
    from runwatch.processor.memory import MemoryProcessor

    t = CaptureTransport()
    run = runwatch.init("fam", run_id="hung", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    for i in range(72):  # 12 minutes of 10 s steps
        run.step(i, loss=1.0, samples=256, now_ms=T0 + i * 10_000, step_ms=10_000.0,
                 loader_wait_ms=50.0)
    end_ms = T0 + 71 * 10_000 + silent_min * 60_000
    if end == "succeeded":
        run.finish(now_ms=end_ms)
    else:  # the scheduler's hook (the job never ended itself)
        deadline = time.monotonic() + 10
        while sum(1 for _, k, _ in t.messages if k == "hung") < 73:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert emit_records(Publisher(t, kind="hook"), [
            {"type": "JobEvent", "run_id": "hung", "state": end, "attempt": 0,
             "emitted_at_ms": end_ms}]).errors == []
    m = MemoryProcessor()
    m.feed(t.messages)  # one burst, long after
    m.tick(end_ms + 3_600_000)
    assert [d.reason for d in m.dead] == []
    assert sorted({(a.detector, a.probable_cause) for a in m.alerts
                   if isinstance(a, Alert) and a.status == "firing"}) == want


def test_a_run_id_started_again_after_it_failed_is_not_stalled_while_it_loads() -> None:
    """Attempt 0 failed; the scheduler started the same run id again 30 minutes later and
    it loaded for 3 minutes: the stall clock kept the failed attempt's last step and
    paged a critical stall at the first tick (live: the processor's clock a second behind
    the events, its timer ticking)."""
    from runwatch.client.emit import emit_records
    from runwatch.processor.memory import MemoryProcessor

    clock = {"t": T0}
    m = MemoryProcessor(clock=lambda: clock["t"])
    t = CaptureTransport()
    hook = Publisher(t, kind="hook")

    def live(until: int) -> None:  # the records so far arrive; the timer ticks to `until`
        import time as _time

        _time.sleep(0.2)  # the SDK publishes from its thread
        m.feed(t.messages[live.seen:])
        live.seen = len(t.messages)
        while clock["t"] < until:
            clock["t"] += 10_000
            m.tick(clock["t"])

    live.seen = 0  # type: ignore[attr-defined]
    run = runwatch.init("fam", run_id="again", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    for i in range(60):
        run.step(i, loss=1.0, samples=256, now_ms=T0 + i * 10_000, step_ms=10_000.0,
                 loader_wait_ms=50.0)
    fail_at = T0 + 600_000
    run.finish("failed", now_ms=fail_at)
    live(fail_at + 1_000)
    back = fail_at + 30 * 60_000
    assert emit_records(hook, [{"type": "JobEvent", "run_id": "again", "state": "running",
                                "attempt": 1, "emitted_at_ms": back}]).errors == []
    live(back + 180_000)  # 3 minutes of loading
    again = runwatch.init("fam", run_id="again", transport=t, install_hooks=False,
                          capture_lineage=False, clock=lambda: back + 180_000, attempt=1)
    for i in range(30):
        again.step(i, loss=1.0, samples=256, now_ms=back + 180_000 + i * 10_000,
                   step_ms=10_000.0, loader_wait_ms=50.0)
    again.finish(now_ms=back + 500_000)
    live(back + 900_000)
    assert [(a.detector, a.status) for a in m.alerts if isinstance(a, Alert)] == []


def test_old_steps_trickling_in_do_not_flap_a_stall_and_a_live_step_resolves_it() -> None:
    """A run whose steps arrive two days late (a node's spool replayed while the cluster is
    live) is silent as of the horizon: each old step resolved its stall and the next timer
    round paged it again, a page and a resolve per step. Through the SDK, in memory."""
    import time as _time

    import runwatch
    from runwatch.adapters.publisher import CaptureTransport
    from runwatch.processor.memory import MemoryProcessor
    from runwatch.processor.settings import ProcessorSettings

    t0 = 1_800_000_000_000
    old = t0 - 2 * 86_400_000
    clock = [t0]
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=lambda: clock[0])
    ta, tb = CaptureTransport(), CaptureTransport()

    def start(rid: str, t: CaptureTransport):
        return runwatch.init("fam", run_id=rid, transport=t, install_hooks=False,
                             capture_lineage=False, clock=lambda: clock[0])

    def drain(t: CaptureTransport) -> None:
        _time.sleep(0.05)  # the SDK's worker thread publishes
        m.feed(t.messages)
        t.messages.clear()

    a = start("live-a", ta)
    clock[0] = old
    b = start("late-b", tb)
    for i in range(100):
        b.step(i, loss=1.0, now_ms=old + i * 1000, step_ms=1000.0, loader_wait_ms=10.0)
    drain(tb)
    for s in range(1500):  # the live run steps for 25 minutes; the late one trickles in
        clock[0] = t0 + s * 1000
        a.step(s, loss=1.0, now_ms=clock[0], step_ms=1000.0, loader_wait_ms=10.0)
        if s % 10:
            continue
        drain(ta)
        if s > 1000 and s % 60 == 0:
            b.step(100 + s, loss=1.0, now_ms=old + (100 + s) * 1000, step_ms=1000.0,
                   loader_wait_ms=10.0)
            drain(tb)
        m.tick(clock[0])
    stalls = [(x.run_id, x.status) for x in m.alerts if x.detector == "rule:stalled"]
    assert stalls == [("late-b", "firing")]
    b.step(5000, loss=1.0, now_ms=clock[0], step_ms=1000.0, loader_wait_ms=10.0)  # caught up
    drain(tb)
    stalls = [(x.run_id, x.status) for x in m.alerts if x.detector == "rule:stalled"]
    assert stalls == [("late-b", "firing"), ("late-b", "resolved")]


def agent_and_run() -> tuple[CaptureTransport, Clock, Any, Any]:
    """A node agent (NVML double, 8 GPUs held by run ``g1``) and run ``g1``'s SDK, one clock."""
    transport = CaptureTransport()
    clock = Clock(T0)
    node = make_node("n1", Publisher(transport, kind="agent", clock=clock))
    for g in range(8):
        node.nvml.attach_process(g, 4242 + g)
        node.attributor.pids[4242 + g] = "g1"
    run = runwatch.init("fam", run_id="g1", team="ml", transport=transport,
                        install_hooks=False, capture_lineage=False, strict=True, clock=clock)
    return transport, clock, node, run


def finished(run: Any, transport: CaptureTransport) -> list[Alert]:
    """Finish the run and replay what the agent and the SDK published."""
    run.finish()
    codec = load_codec()
    return replay([codec.decode(v) for _, _, v in transport.messages])


@pytest.mark.parametrize("log_every", [1, 10])
def test_readings_during_a_reported_checkpoint_write_are_not_an_occupancy_fall(
        log_every: int) -> None:
    # one-second steps logged every `log_every`-th; a 15 s checkpoint write every 5 min,
    # reported with its duration; the GPUs idle while it writes; the agent samples each second
    transport, clock, node, run = agent_and_run()
    step = 0
    for t in range(1_800):
        clock.t = T0 + t * 1_000
        writing = t >= 60 and (t - 60) % 300 < 15
        if writing and (t - 60) % 300 == 14:
            run.checkpoint(f"s3://ck/{step}", step=step, duration_ms=15_000.0)
        elif not writing:
            step += 1
            if step % log_every == 0:
                run.step(step, loss=1.0, samples=32 * log_every, step_ms=1_000.0 * log_every,
                         loader_wait_ms=20.0)
        for g in range(8):
            node.nvml.util[g] = 5.0 if writing else 90.0
            node.nvml.set_occupancy(g, 3.0 if writing else 63.0)
        node.agent.tick()
    alerts = finished(run, transport)
    assert [a.detector for a in alerts if a.status == "firing"] == []


@pytest.mark.parametrize("fault", [False, True])
def test_an_evaluation_pass_between_sparse_step_records_is_not_an_occupancy_fall(
        fault: bool) -> None:
    # one-second steps logged every 200th; a 3-minute evaluation at a fifth of the GPU every
    # 20 minutes ends with its result; the agent samples every 5 s. The pass spans less than
    # three logging intervals, was read as training and paged an occupancy fall
    # (infrastructure). ``fault``: the GPUs fall to a third while the run trains on
    transport, clock, node, run = agent_and_run()
    step = 0
    for t in range(4_200):
        clock.t = T0 + t * 1_000
        evaluating = t >= 600 and (t - 600) % 1_200 < 180
        if evaluating and (t - 600) % 1_200 == 179:
            run.validation(step, {"val_loss": 1.0})
        elif not evaluating:
            step += 1
            if step % 200 == 0:
                run.step(step, loss=1.0, samples=32 * 200, step_ms=200_000.0,
                         loader_wait_ms=20.0)
        slow = fault and t >= 2_400 and not evaluating
        for g in range(8):
            node.nvml.util[g] = 20.0 if evaluating or slow else 90.0
            node.nvml.set_occupancy(g, 13.0 if evaluating or slow else 63.0)
        if t % 5 == 0:
            node.agent.tick()
    alerts = finished(run, transport)
    fired = sorted({a.detector for a in alerts if a.status == "firing"})
    assert fired == (["watch:gpu_occupancy"] if fault else [])


def test_an_occupancy_fall_of_a_run_that_validates_in_every_logging_interval_pages() -> None:
    # steps logged every 10th, a short validation just before each record: every interval
    # holds a result, and dropping the readings before each left none to judge
    transport, clock, node, run = agent_and_run()
    for t in range(3_600):
        clock.t = T0 + t * 1_000
        if t % 10 == 9:
            clock.t -= 1
            run.validation(t, {"val_loss": 1.0})
            clock.t += 1
            run.step(t, loss=1.0, samples=320, step_ms=10_000.0, loader_wait_ms=20.0)
        for g in range(8):
            node.nvml.util[g] = 30.0 if t >= 1_800 else 95.0
            node.nvml.set_occupancy(g, 20.0 if t >= 1_800 else 66.0)
        if t % 5 == 0:
            node.agent.tick()
    alerts = finished(run, transport)
    assert sorted({a.detector for a in alerts if a.status == "firing"}) == ["watch:gpu_occupancy"]


def test_a_new_attempt_after_one_that_died_without_an_end_is_not_stalled_while_it_loads():
    """Attempt 1 stepped for 20 minutes and died with its node (no end event); attempt 2
    started 3 minutes later and loaded its checkpoint for 12 minutes: the stall clock kept
    attempt 1's last step and paged a critical stall in the middle of the load."""
    t0 = T0
    first = runwatch.init("fam", run_id="lost", transport=(t := CaptureTransport()),
                          install_hooks=False, capture_lineage=False, clock=lambda: t0,
                          attempt=1)
    for i in range(1_200):
        first.step(i, loss=1.0, samples=64, now_ms=t0 + i * 1_000, step_ms=1_000.0,
                   loader_wait_ms=20.0)
    first.finish("running", now_ms=t0 + 1_199_000)  # (drains it; "running" ends nothing)
    back = t0 + 1_200_000 + 180_000
    again = runwatch.init("fam", run_id="lost", transport=t, install_hooks=False,
                          capture_lineage=False, clock=lambda: back, attempt=2)
    for i in range(1_200, 1_500):
        again.step(i, loss=1.0, samples=64, now_ms=back + 720_000 + (i - 1_200) * 1_000,
                   step_ms=1_000.0, loader_wait_ms=20.0)
    again.finish(now_ms=back + 1_100_000)
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in t.messages]
    assert [a.detector for a in live(records, after_ms=60_000)] == []
