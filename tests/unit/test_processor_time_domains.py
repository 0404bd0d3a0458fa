"""Time domains through a real processor worker driven in memory.

Runs publish through the SDK (``runwatch.init(..., clock=)``, ``run.step``)
and the node agent (over the NVML test double) into a capture transport; the
messages go to the worker's own agents (:class:`MemoryProcessor`), whose wall
clock (the worker's ``clock``) the test moves: *live* (each
message delivered shortly after its event time, the timer ticking) or
*replayed* (a backlog delivered in one burst, long after).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert, DatasetRef
from runwatch.processor.memory import MemoryProcessor
from runwatch.sim.drivers import make_node

T0 = 1_700_000_000_000


@pytest.fixture
def wall() -> Clock:
    """The worker's wall clock, moved by the test."""
    return Clock(T0)


def published(script: Callable[[Any, Clock, Any], None], *, node: bool = False,
              finish: bool = True, datasets: tuple[DatasetRef, ...] = (), run_id: str = "r1",
              t0: int = T0) -> list[tuple[int, tuple[str, Any, bytes]]]:
    """Run ``script(run, clock, agent)``; return the messages with their event times, in order."""
    t = CaptureTransport()
    clock = Clock(t0)
    agent = None
    if node:
        n = make_node("n1", Publisher(t, kind="agent", clock=clock))
        for g in range(8):
            n.nvml.attach_process(g, 4242 + g)
            n.nvml.util[g] = 90.0
            n.attributor.pids[4242 + g] = run_id
        agent = n.agent
    run = runwatch.init("fam", run_id=run_id, team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=True, clock=clock, datasets=datasets)
    script(run, clock, agent)
    run.finish()
    codec = load_codec()
    msgs = [(codec.decode(v), (topic, k, v)) for topic, k, v in t.messages]
    if not finish:  # the job never ends: leave its end event out
        msgs = [(r, m) for r, m in msgs if getattr(r, "state", "") != "succeeded"]
    return sorted(((int(r.emitted_at_ms), m) for r, m in msgs), key=lambda m: m[0])


def lifecycle(m: MemoryProcessor, detector: str) -> list[tuple[Any, ...]]:
    """What a receiver sees of one detector's alerts (not when the worker sent them)."""
    return [(a.status, a.alert_id, a.event_id, a.first_seen_ms, a.last_seen_ms, a.observed,
             a.expected, a.probable_cause) for a in m.alerts
            if isinstance(a, Alert) and a.detector == detector]


def loader_bumps(run: Any, clock: Clock, _agent: Any) -> None:
    """2-second steps, the loader slow for ~10 min twice, healthy ~27 min between."""
    for i in range(2000):
        clock.t += 2_000
        share = 0.5 if 300 <= i < 600 or 1400 <= i < 1700 else 0.05
        share += 0.03 * ((i * 7919) % 11 - 5) / 5  # deterministic jitter
        run.step(i, loss=1.0, samples=32, step_ms=2_000.0, loader_wait_ms=share * 2_000)


def test_loader_alert_lifecycle_is_the_same_live_and_replayed(wall: Clock) -> None:
    msgs = published(loader_bumps)
    live = MemoryProcessor(clock=wall)
    deliver_live(live, wall, msgs)
    wall.t = T0 + 86_400_000  # the same telemetry read as a backlog a day later
    replayed = MemoryProcessor(clock=wall)
    replayed.feed([msg for _, msg in msgs])
    replayed.tick(wall.t)
    seen = lifecycle(live, "watch:loader_share")
    assert [s[0] for s in seen] == ["firing", "resolved", "firing", "resolved"]
    assert lifecycle(replayed, "watch:loader_share") == seen


def steps(n: int, start: int = 0) -> Callable[[Any, Clock, Any], None]:
    def script(run: Any, clock: Clock, _agent: Any) -> None:
        for i in range(start, start + n):
            clock.t += 1_000
            run.step(i, loss=1.0, samples=32, step_ms=1_000.0, loader_wait_ms=10.0)
    return script


def steps_and_report(tmp: Any) -> Callable[[Any, Clock, Any], None]:
    """Steps for 22 minutes; the run's dataset is reported 5 minutes in."""
    def script(run: Any, clock: Clock, agent: Any) -> None:
        steps(300)(run, clock, agent)
        data.report("s3://lake/train", "v1", None, {"x": [1.0, 2.0, 3.0]},
                    publisher=Publisher(run.publisher.transport, kind="sdk"), now_ms=clock.t,
                    baseline_directory=tmp)
        steps(1_020, 300)(run, clock, agent)
    return script


def test_a_backlog_read_after_an_outage_pages_nothing(wall: Clock, tmp_path) -> None:
    """The worker was down for 20 minutes while the run trained on; then it catches up.

    Neither the run's steps nor its dataset's report (5 minutes in, inside the
    backlog) were read when the timer ran: no stall, no missing report.
    """
    msgs = published(steps_and_report(tmp_path),
                     datasets=(DatasetRef(uri="s3://lake/train", version="v1"),))
    cut = T0 + 120_000
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, [x for x in msgs if x[0] <= cut])
    wall.t = cut + 20 * 60_000
    m.tick(wall.t)  # the timer runs before the backlog is read
    backlog = [x for x in msgs if x[0] > cut]
    for k in range(0, len(backlog), 100):
        m.feed([msg for _, msg in backlog[k:k + 100]])
        wall.t += 500
        m.tick(wall.t)
    for _ in range(20):  # and the minutes after: the run has finished
        wall.t += 60_000
        m.tick(wall.t)
    assert [a for a in m.alerts if isinstance(a, Alert)] == []


def steps_with_samples(run: Any, clock: Clock, agent: Any) -> None:
    """40 minutes of 2-second steps, the node agent sampling every 5 s."""
    for t in range(1, 1_201):
        clock.t = T0 + t * 2_000
        run.step(t, loss=1.0, samples=32, step_ms=2_000.0, loader_wait_ms=20.0)
        if t % 5 == 0:
            agent.tick()


@pytest.mark.parametrize("sdk_after_ms", [0, 2_000])
def test_spools_drained_one_after_another_after_a_broker_outage_page_nothing(
        wall: Clock, sdk_after_ms: int) -> None:
    """The broker is away for 12 minutes; both producers spool. When it returns the node
    agent's spool lands first and the SDK's two seconds later: the agent's moved the
    horizon over the whole outage while the run's partition, idle for a minute, no longer
    held it back, and a timer round between them paged the run stalled (critical)."""
    msgs = published(steps_with_samples, node=True)
    o0, o1 = T0 + 10 * 60_000, T0 + 22 * 60_000
    back = []
    for at, msg in msgs:
        if o0 <= at < o1:  # spooled: delivered when the broker returns
            late = sdk_after_ms if msg[0] != "rw.exec.node" else 0
            back.append((o1 + late + (at - o0) // 1_000, at, msg))
    live = [(at, msg) for at, msg in msgs if not o0 <= at < o1]
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, [x for x in live if x[0] < o0], tick_ms=1_000)
    while wall.t < o1:  # the timer runs on through the outage
        wall.t += 1_000
        m.tick(wall.t)
    for when, _, msg in sorted(back, key=lambda b: (b[0], b[1])):
        while wall.t + 1_000 <= when:
            wall.t += 1_000
            m.tick(wall.t)
        wall.t = max(wall.t, when)
        m.feed([msg])
    deliver_live(m, wall, [x for x in live if x[0] >= o1], tick_ms=1_000)
    for _ in range(20):
        wall.t += 60_000
        m.tick(wall.t)
    assert [(a.detector, a.status) for a in m.alerts if isinstance(a, Alert)] == []


def hang(run: Any, clock: Clock, agent: Any) -> None:
    """Steps for two minutes, then the job hangs; the node agent samples on (13 minutes)."""
    for t in range(1, 901):
        clock.t = T0 + t * 1_000
        if t <= 120:
            run.step(t, loss=1.0, samples=32, step_ms=1_000.0, loader_wait_ms=10.0)
        agent.tick()


def test_a_hung_job_is_stalled_while_its_node_samples_arrive(wall: Clock) -> None:
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, published(hang, node=True, finish=False))
    fired = [(a.detector, a.probable_cause) for a in m.alerts
             if isinstance(a, Alert) and a.status == "firing"]
    assert fired == [("rule:stalled", "execution")]


def checkpoints_then_hang(tmp: Any) -> Callable[[Any, Clock, Any], None]:
    """1-s steps; every 5 minutes a checkpoint write of 90 s holds the steps (the SDK reports it
    when written), then, 25 min in, the job hangs (no step, the node samples on for 15 min)."""
    def script(run: Any, clock: Clock, agent: Any) -> None:
        path = tmp / "ckpt.pt"
        path.write_bytes(b"weights")
        t, step, writing = 0, 0, 0
        while t < 40 * 60:
            t += 1
            clock.t = T0 + t * 1_000
            agent.tick()
            if t >= 25 * 60:
                continue  # hung
            if writing:
                writing -= 1
                if not writing:
                    run.checkpoint(path, step=step, duration_ms=90_000.0)
                continue
            step += 1
            run.step(step, loss=1.0, samples=32, step_ms=1_000.0, loader_wait_ms=10.0)
            if t % 300 == 0:
                writing = 90
    return script


def test_a_run_back_from_checkpoint_writes_is_stalled_only_past_twice_the_longest(
        wall: Clock, tmp_path) -> None:
    """No 90-s write pages: the first is within the stall floor (``STALL_MIN_MS``, 10 min;
    with a 60 s floor it paged, critical), the run came back from it, so its next writes
    would not have either (they paged again before the pause was learned); the hang pages
    once it passes the floor (twice the longest write is less)."""
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, published(checkpoints_then_hang(tmp_path), node=True, finish=False))
    fired = [a for a in m.alerts if isinstance(a, Alert) and a.status == "firing"]
    assert [(a.detector, a.probable_cause) for a in fired] == [("rule:stalled", "execution")]
    hung = fired[0]
    assert T0 + 25 * 60_000 + 600_000 <= hung.last_seen_ms < T0 + 25 * 60_000 + 13 * 60_000


def evaluates_then(hang_after_s: int | None) -> Callable[[Any, Clock, Any], None]:
    """1-s steps; 5 min in, a 15-minute evaluation pass holds them (its result reported when
    it ends), then 10 min more of steps; with ``hang_after_s`` the job hangs that long after
    the evaluation (no step, no end event) and is watched for an hour more."""
    def script(run: Any, clock: Clock, agent: Any) -> None:
        start = clock.t
        step = 0
        for t in range(1, 90 * 60):
            clock.t = start + t * 1_000
            agent.tick()  # the node's samples go on (the GPUs evaluate, or hang)
            if 300 < t <= 1200:
                if t == 1200:
                    run.validation(step, {"acc": 0.8}, dataset="s3://val")
                continue  # evaluating
            if hang_after_s is not None and t > 1200 + hang_after_s:
                continue  # hung
            if t > 1800 and hang_after_s is None:
                break
            step += 1
            run.step(step, loss=1.0, samples=32, step_ms=1_000.0, loader_wait_ms=10.0)
    return script


def test_a_workloads_usual_evaluation_pause_does_not_page_its_next_runs(wall: Clock) -> None:
    """The first run of a family pages its first 15-minute evaluation (nothing announced it;
    docs/limitations.md); the run came back from it and succeeded, so the family's next run
    is judged against that pause (twice it) and its evaluation pages nothing, while a run
    of the family that then hangs still pages, once twice the usual pause has passed."""
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, published(evaluates_then(None), node=True, run_id="r1"))
    def fired(run: str) -> list[tuple[str, int]]:
        return [(a.detector, a.first_seen_ms) for a in m.alerts
                if isinstance(a, Alert) and a.status == "firing" and a.run_id == run]
    assert [d for d, _ in fired("r1")] == ["rule:stalled"]
    t2 = T0 + 3_600_000
    deliver_live(m, wall, published(evaluates_then(None), node=True, run_id="r2", t0=t2))
    assert fired("r2") == []
    t3 = T0 + 2 * 3_600_000
    deliver_live(m, wall, published(evaluates_then(600), node=True, run_id="r3", t0=t3,
                                     finish=False))
    hung = fired("r3")
    assert [d for d, _ in hung] == ["rule:stalled"]
    hang_at = t3 + (1200 + 600) * 1_000
    # about twice the usual 15-minute pause without a step, not the 10-minute floor
    assert hang_at + 29 * 60_000 <= hung[0][1] <= hang_at + 33 * 60_000


MIN_MS = 60_000


def hook_job_events(deadline_at: int, started_at: int) -> list[tuple[int, Any]]:
    """A scheduler hook (``runwatch emit``) tells: queued at T0, running at ``started_at``."""
    from runwatch.client.emit import emit_records

    t = CaptureTransport()
    emit_records(Publisher(t, kind="hook"), [
        {"type": "JobEvent", "run_id": "q1", "emitted_at_ms": T0, "state": "queued",
         "deadline_ms": deadline_at, "experiment_family": "fam", "team": "ml"},
        {"type": "JobEvent", "run_id": "q1", "emitted_at_ms": started_at, "state": "running",
         "attempt": 1}])
    return timed(t.messages)


@pytest.mark.parametrize("late_ms", [45_000, 150_000])
def test_a_job_that_started_before_its_deadline_is_not_left_paged_when_told_late(
        wall: Clock, late_ms: int) -> None:
    """Another run keeps the horizon moving; the start of q1 (30 s before its deadline)
    arrives ``late_ms`` late: within the lateness allowed it never pages; past it, the
    page the horizon raised is withdrawn when the start arrives."""
    queued, started = hook_job_events(T0 + 30 * MIN_MS, T0 + 29 * MIN_MS + 30_000)
    others = published(steps(2_000))  # one-second steps for 33 minutes
    msgs = sorted([*others, queued, (started[0] + late_ms, started[1])], key=lambda m: m[0])
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, msgs)
    seen = [a.status for a in m.alerts
            if isinstance(a, Alert) and a.detector == "rule:queue_deadline"]
    assert seen == ([] if late_ms <= 60_000 else ["firing", "resolved"])
