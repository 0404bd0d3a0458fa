"""Learning-rate jumps, resumes, start-up gradient norms and sparse logging, through the SDK.

Each case is a run driven the way users drive it (``runwatch.init(..., clock=)``,
``run.step``, ``run.validation``, ``run.finish``) and delivered live to the
in-memory worker: every record shortly after its event time, the timer ticking,
and wall time going on after the last record so that wall-clock rules fire.
Found by public-API cases: a divergence after a tenfold learning rate at a resume
was blamed on the restart (execution) and its evidence did not name the rate; a
run whose first gradient norms were high (fresh weights) had a baseline that hid
a later 30-fold explosion; a run logging every 40th step paged a stall at every
evaluation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from sdk_kit import Clock, deliver_live, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client.emit import emit_records
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.sim.drivers import make_node

T0 = 1_800_000_000_000
MIN = 60_000
KILLED = "SIGKILL"
"""The reason of an end event :func:`live` leaves out: the process was killed and sent none."""
Script = Callable[[Callable[..., Any], Clock, Callable[[str], Any]], None]
"""``script(init, clock, node)``: ``init(**kw)`` starts (an attempt of) a run, ``node(run_id)``
a node agent over the NVML double whose 8 GPUs that run holds."""


def live(script: Script,
         tail_ms: int = 20 * MIN, *, hung: bool = False) -> list[Alert]:
    """Run ``script(init, clock, node)`` through the SDK and the agent, deliver it live;
    return the alerts.

    ``init(**kw)`` starts (another attempt of) the run ``r1`` on the capture transport.
    ``hung``: the run's end event (``run.finish`` publishes what is queued) is left out,
    as a process that hangs never sends one. So is every end event whose reason is
    :data:`KILLED` (a process killed with SIGKILL sends none).
    """
    t = CaptureTransport()
    clock = Clock(T0)

    def init(run_id: str = "r1", **kw: Any) -> Any:
        return runwatch.init("fam", run_id=run_id, team="ml", transport=t, install_hooks=False,
                             capture_lineage=False, strict=True, clock=clock, **kw)

    def node(run_id: str) -> Any:
        n = make_node(f"node-{run_id}", Publisher(t, kind="agent", clock=clock))
        for g in range(8):
            n.nvml.attach_process(g, 5000 + g)
            n.nvml.util[g] = 92.0
            n.attributor.pids[5000 + g] = run_id
        return n

    script(init, clock, node)
    msgs = timed(t.messages)
    codec = load_codec()
    msgs = [(at, m) for at, m in msgs if getattr(r := codec.decode(m[2]), "reason", "") != KILLED
            and not (hung and (getattr(r, "run_id", ""), getattr(r, "state", ""))
                     == ("r1", "succeeded"))]
    wall = Clock(T0)
    m = MemoryProcessor(clock=wall)
    end = msgs[-1][0]
    deliver_live(m, wall, msgs)
    while wall.t < end + tail_ms:
        wall.t += 5_000
        m.tick(wall.t)
    assert [d.reason for d in m.dead] == []
    return [a for a in m.alerts if isinstance(a, Alert)]


def firing(alerts: list[Alert]) -> list[tuple[str, str]]:
    return sorted({(a.detector, a.probable_cause) for a in alerts if a.status == "firing"})


def loss_at(i: int, rng: random.Random) -> float:
    return (2.0 + 6.0 * math.exp(-i / 400)) * (1 + rng.gauss(0, 0.03))


# ------------------------------------------------------------------ learning-rate jumps


def bumped(*, resume: bool, factor: float) -> Script:
    """3,000 steps at 2e-4; then ``factor`` × the rate from step 3,000 (``resume``: in a
    second attempt resumed from the step-3,000 checkpoint after a preemption at 3,400),
    the loss climbing from there. With ``factor`` 1 the loss climbs at the same rate."""
    def script(init: Callable[..., Any], clock: Clock, node: Callable[[str], Any]) -> None:
        rng = random.Random(4)
        run = init(attempt=1) if resume else init()
        last = 3_400 if resume else 3_000
        for i in range(last):
            clock.t += 1_000
            run.step(i, loss=loss_at(i, rng), lr=2e-4, samples=64, step_ms=1000.0,
                     loader_wait_ms=20.0)
        if resume:
            run.finish("preempted")
            clock.t += 15 * MIN
            run = init(attempt=2, resumed_from="s3://ckpt/r1/step-3000")
        for k, i in enumerate(range(3_000, 3_600)):
            clock.t += 1_000
            climb = 1 + 1.2 * min(k / 200, 1.0) + k / 600
            run.step(i, loss=loss_at(i, rng) * climb, lr=2e-4 * factor, samples=64,
                     step_ms=1000.0, loader_wait_ms=20.0)
        run.finish("failed")
    return script


def test_a_divergence_after_a_tenfold_rate_names_the_rate() -> None:
    alerts = [a for a in live(bumped(resume=False, factor=10))
              if a.detector == "rule:loss_divergence" and a.status == "firing"]
    assert alerts, "the divergence did not page"
    assert {a.probable_cause for a in alerts} == {"learning"}
    details = [e.detail for a in alerts for e in a.evidence if e.indicator == "loss"]
    assert any("learning rate rose x10 (0.0002 -> 0.002) at step 3000" in d for d in details)


def test_a_resume_at_a_tenfold_rate_that_diverges_is_a_learning_cause() -> None:
    # the restart is evidence (execution) for learning symptoms, but the rate it resumed
    # with is the mechanism: routed by cause, this page went to the platform team
    assert firing(live(bumped(resume=True, factor=10))) == [("rule:loss_divergence",
                                                           "learning")]


def test_a_resume_at_the_same_rate_that_diverges_stays_an_execution_cause() -> None:
    assert firing(live(bumped(resume=True, factor=1))) == [("rule:loss_divergence",
                                                          "execution")]


# ------------------------------------------------------------------ start-up gradient norms


def norms(explode_at: int | None, start: float, factor: float = 33.0,
          first: bool = True) -> Script:
    """Gradient norms from ``start`` (fresh weights) settling to 0.3 by step 1,000 (15 %
    noise); from ``explode_at`` ``factor`` times that within 50 steps, held (clipping keeps
    the loss finite). ``first=False``: a healthy run of the family came first (its statistics
    seed the watch)."""
    def script(init: Callable[..., Any], clock: Clock, node: Callable[[str], Any]) -> None:
        if not first:
            norms(None, start)(lambda **kw: init(run_id="r0", **kw), clock, node)
            clock.t += 10 * MIN
        rng = random.Random(7)
        run = init()
        for i in range(4_000):
            clock.t += 1_000
            level = 0.3 + (start - 0.3) * math.exp(-i / 200)
            if explode_at is not None and i >= explode_at:
                level = 0.3 * (1 + (factor - 1) * min((i - explode_at) / 50, 1.0))
            run.step(i, loss=loss_at(i, rng), lr=1e-4, grad_norm=level * (1 + rng.gauss(0, 0.15)),
                     samples=64, step_ms=1000.0, loader_wait_ms=20.0)
        run.finish()
    return script


def test_a_grad_norm_explosion_pages_in_a_run_whose_first_norms_were_high() -> None:
    alerts = [a for a in live(norms(2_500, start=8.0))
              if a.detector == "watch:grad_norm" and a.status == "firing"]
    assert alerts, "the explosion did not page"
    assert alerts[0].first_seen_ms - (T0 + 2_500 * 1_000) <= 120_000
    assert alerts[0].probable_cause == "learning"


def test_norms_settling_from_a_high_start_do_not_page() -> None:
    assert firing(live(norms(None, start=8.0))) == []


@pytest.mark.parametrize("factor", [15.0, 33.0])
def test_a_grad_norm_explosion_pages_in_a_familys_second_run(factor: float) -> None:
    """The family's statistics (its first run's norms, high start included) seeded the second
    run's watch at about twice where its norms settle, and it never learnt again: a 15-fold
    explosion never paged in any run after a family's first."""
    alerts = [a for a in live(norms(2_500, start=8.0, factor=factor, first=False))
              if a.detector == "watch:grad_norm" and a.status == "firing"]
    assert [a.run_id for a in alerts] == ["r1"]
    exploded = T0 + (4_000 + 10 * 60 + 2_500) * 1_000  # r0's 4,000 steps, a pause, 2,500
    assert 0 < alerts[0].first_seen_ms - exploded <= 120_000


def test_a_familys_second_run_settling_from_a_high_start_does_not_page() -> None:
    assert firing(live(norms(None, start=8.0, first=False))) == []


# ------------------------------------------------------------------ sparse logging


def sparse(evals: int, eval_min: int) -> Script:
    """3-second steps, every 40th logged with its step time (a record every 2 minutes); an
    evaluation pass of ``eval_min`` minutes every 2 hours, ending in ``run.validation``."""
    def script(init: Callable[..., Any], clock: Clock, node: Callable[[str], Any]) -> None:
        rng = random.Random(1)
        run = init()
        step = 0
        for _ in range(evals):
            for _ in range(60):  # two hours of training
                step += 40
                clock.t += 40 * 3_000
                run.step(step, loss=loss_at(step // 40, rng), lr=1e-4, samples=64,
                         step_ms=3_000.0 * (1 + rng.gauss(0, 0.02)), loader_wait_ms=20.0)
            clock.t += eval_min * MIN
            run.validation(step, {"val_loss": 2.0 + rng.gauss(0, 0.01)})
        for _ in range(30):
            step += 40
            clock.t += 40 * 3_000
            run.step(step, loss=loss_at(step // 40, rng), lr=1e-4, samples=64,
                     step_ms=3_000.0, loader_wait_ms=20.0)
        run.finish()
    return script


def test_a_sparse_logger_pages_its_first_long_evaluation_only() -> None:
    # the first 22-minute pass is past the run's stall bound (10 records: 20 minutes);
    # once it came back from it, its later passes are its normal range
    stalls = [a for a in live(sparse(3, 22))
              if a.detector == "rule:stalled" and a.status == "firing"]
    assert len(stalls) == 1
    assert stalls[0].first_seen_ms < T0 + 3 * 60 * MIN


def dense_then_sparse(hang: bool) -> Script:
    """Every 3-second step logged for 10 minutes, then every 100th (a record every 5
    minutes), with a 7-minute checkpoint every 40 minutes (``hang``: no step after 3 h);
    another run beside it logs once a minute."""
    def script(init: Callable[..., Any], clock: Clock, node: Callable[[str], Any]) -> None:
        rng = random.Random(2)
        run = init()
        step = 0
        for _ in range(200):
            step += 1
            clock.t += 3_000
            run.step(step, loss=loss_at(step, rng), samples=64, step_ms=3_000.0,
                     loader_wait_ms=20.0)
        for k in range(1, 60):
            step += 100
            clock.t += 300_000
            run.step(step, loss=loss_at(step // 100, rng), samples=64, step_ms=3_000.0,
                     loader_wait_ms=20.0)
            if k % 8 == 0:
                start = clock.t + 1_000
                clock.t += 7 * MIN
                run.checkpoint(f"s3://ckpt/r1/step-{step}", step=step, started_at_ms=start,
                               duration_ms=float(clock.t - start))
            if hang and clock.t > T0 + 3 * 60 * MIN:
                break
        end = clock.t
        run.finish()
        agent = node("r1")  # the run's node agent samples its GPUs every 10 s
        for t in range(T0, end + 1, 10_000):
            clock.t = t
            agent.agent.tick(now_ms=t)
        clock.t = T0  # another run on the cluster logs once a minute: the pipeline goes on
        other = init(run_id="r2")
        for i in range(6 * 60):
            clock.t += MIN
            other.step(i, loss=loss_at(i, rng), samples=64, step_ms=60_000.0)
        other.finish()
    return script


def test_a_run_logging_sparser_after_its_start_does_not_page_its_checkpoints() -> None:
    assert firing(live(dense_then_sparse(hang=False))) == []


def test_the_same_run_hanging_pages() -> None:
    # its stall bound is 10 of its 5-minute record intervals
    alerts = live(dense_then_sparse(hang=True), tail_ms=70 * MIN, hung=True)
    assert [(a.run_id, a.detector, a.probable_cause) for a in alerts if a.status == "firing"
            ] == [("r1", "rule:stalled", "execution")]


# ------------------------------------------------------------------ restarts without an attempt


def restarted(hang_after: int | None, *, load_min: int = 12, attempt: int | None = None,
              skips: int = 0, write_min: int = 0, nan_at: int | None = None) -> Script:
    """A Kubernetes training container OOM-killed 40 minutes in (no end event) and restarted
    by ``restartPolicy: OnFailure`` 25 s later under the same run id with no attempt; it loads
    its checkpoint for ``load_min`` minutes, then steps again (``hang_after``: that many steps,
    then it hangs; 0: it hangs in its load). ``attempt``: a requeue (Slurm) that says its
    attempt instead. ``skips``: the restarted process's fp16 loss scaler, not restored from
    the checkpoint, skips that many steps again as it finds its scale (an infinite gradient
    norm each). Its first process found its scale after 9. ``write_min``: its first process
    wrote a checkpoint that long at step 1,200. ``nan_at``: the restarted process's loss is
    NaN at that step. Another run beside it logs once a minute."""
    def script(init: Callable[..., Any], clock: Clock, node: Callable[[str], Any]) -> None:
        rng = random.Random(5)
        run = init()
        for i in range(2_400):
            clock.t += 1_000
            run.step(i, loss=loss_at(i, rng), samples=64, step_ms=1000.0, loader_wait_ms=20.0,
                     grad_norm=math.inf if i < 9 else 1.0 + 0.1 * rng.random())
            if i == 1_200 and write_min:
                start = clock.t
                clock.t += write_min * MIN
                run.checkpoint("s3://ckpt/r1/step-1200", step=i, started_at_ms=start,
                               duration_ms=float(clock.t - start))
        run.finish("failed", reason=KILLED)  # publishes what is queued; its end is left out
        clock.t += 25_000
        run = init(resumed_from="s3://ckpt/r1/step-2000",
                   **({} if attempt is None else {"attempt": attempt}))
        clock.t += load_min * MIN
        for i in range(2_000, 2_000 + (1_200 if hang_after is None else hang_after)):
            clock.t += 1_000
            run.step(i, loss=math.nan if i == nan_at else loss_at(i, rng), samples=64,
                     step_ms=1000.0, loader_wait_ms=20.0,
                     grad_norm=math.inf if i < 2_000 + skips else 1.0 + 0.1 * rng.random())
        end = clock.t
        run.finish()
        clock.t = T0
        other = init(run_id="r2")
        while clock.t < end + 60 * MIN:
            clock.t += MIN
            other.step((clock.t - T0) // MIN, loss=1.0, samples=64, step_ms=60_000.0)
        other.finish()
    return script


def test_a_container_restarted_without_an_attempt_loading_its_checkpoint_does_not_page() -> None:
    assert [a.detector for a in live(restarted(None)) if a.status == "firing"] == []


def test_the_restarted_container_hanging_after_it_stepped_pages() -> None:
    alerts = live(restarted(5), tail_ms=30 * MIN, hung=True)
    assert [(a.run_id, a.detector) for a in alerts if a.status == "firing"] == [
        ("r1", "rule:stalled")]


@pytest.mark.parametrize("attempt", [None, 2])
def test_a_restarted_job_hanging_in_its_load_pages(attempt: int | None) -> None:
    """It stepped for 40 minutes, then started again (a Kubernetes restart, or a Slurm
    requeue saying attempt 2) and never stepped: the stall clock waited for a first step,
    and nothing paged for 3 hours. A load may take 30 minutes (or twice the run's own
    start-up and longest checkpoint write)."""
    alerts = live(restarted(0, attempt=attempt), tail_ms=5 * MIN, hung=True)
    stalls = [a for a in alerts if a.status == "firing"]
    assert [(a.run_id, a.detector, a.probable_cause) for a in stalls] == [
        ("r1", "rule:stalled", "execution")]
    assert "since it started again" in stalls[0].title
    assert 30 * MIN < stalls[0].observed < 32 * MIN


@pytest.mark.parametrize("attempt", [None, 2])
def test_a_restarted_job_that_wrote_a_9_minute_checkpoint_hanging_in_its_load_pages_at_30(
        attempt: int | None) -> None:
    """3 x its stall floor, twice its longest pause, counted the 9-minute write six times:
    the page came 54 minutes after the restart."""
    alerts = live(restarted(0, attempt=attempt, write_min=9), tail_ms=5 * MIN, hung=True)
    stalls = [a for a in alerts if a.status == "firing"]
    assert [a.detector for a in stalls] == ["rule:stalled"]
    assert 30 * MIN < stalls[0].observed < 32 * MIN


@pytest.mark.parametrize("attempt", [None, 2])
def test_a_nan_after_a_restart_has_the_same_cause_on_slurm_and_kubernetes(
        attempt: int | None) -> None:
    """A requeue (its attempt rose) was a restart, evidence for the NaN (execution); the
    same process started again by Kubernetes (no attempt) was none (learning)."""
    alerts = live(restarted(None, attempt=attempt, nan_at=2_200))
    nan = [a for a in alerts if a.detector == "rule:non_finite" and a.status == "firing"]
    assert [a.probable_cause for a in nan] == ["execution"]


@pytest.mark.parametrize("attempt", [None, 2])
def test_a_restarted_job_loading_for_25_minutes_does_not_page(attempt: int | None) -> None:
    assert [a.detector for a in live(restarted(None, load_min=25, attempt=attempt))
            if a.status == "firing"] == []


@pytest.mark.parametrize("attempt", [None, 2])
def test_a_restarted_loss_scaler_finding_its_scale_again_does_not_page(
        attempt: int | None) -> None:
    """17 skips after a restart (the scaler's state was not in the checkpoint) paged
    rule:non_finite, critical, at the 8th: the start-up allowance held for the first
    process only."""
    assert [a.detector for a in live(restarted(None, attempt=attempt, skips=17))
            if a.status == "firing"] == []


def test_a_restarted_job_whose_gradients_never_stop_overflowing_pages() -> None:
    assert [a.detector for a in live(restarted(None, skips=60)) if a.status == "firing"] == [
        "rule:non_finite"]


def failed_then_epilog(epilog: str) -> list[Alert]:
    """Run ``a`` evaluates for 12 minutes, then its trainer fails (the SDK's end) and, 45 s
    later, the Slurm epilog publishes ``epilog`` (``runwatch emit``: exit 0 from a batch
    script whose last command succeeded). Run ``b`` of the family then hangs for 20 min."""
    t, clock = CaptureTransport(), Clock(T0)
    hook = Publisher(t, kind="hook", clock=clock)

    def start(run_id: str) -> tuple[Any, Any]:
        run = runwatch.init("fam", run_id=run_id, team="ml", transport=t, install_hooks=False,
                            capture_lineage=False, strict=True, clock=clock)
        n = make_node(f"node-{run_id}", Publisher(t, kind="agent", clock=clock))
        for g in range(8):
            n.nvml.attach_process(g, 5000 + g)
            n.nvml.util[g] = 92.0
            n.attributor.pids[5000 + g] = run_id
        return run, n.agent

    a, agent = start("a")
    for i in range(400):
        clock.t += 1000
        if i == 200:  # a 12-minute evaluation, explained by its validation
            for _ in range(72):
                clock.t += 10_000
                agent.tick(now_ms=clock.t)
            a.validation(i, {"val_loss": 1.9}, now_ms=clock.t)
        a.step(i, loss=2.0 - i / 1000, step_ms=1000.0)
        if i % 10 == 0:
            agent.tick(now_ms=clock.t)
    a.finish("failed", reason="RuntimeError: NCCL watchdog timeout", now_ms=clock.t)
    clock.t += 45_000
    assert not emit_records(hook, [{"type": "JobEvent", "run_id": "a", "state": epilog,
                                    "attempt": 1}]).errors
    clock.t += MIN
    b, agent = start("b")
    for i in range(300):
        clock.t += 1000
        b.step(i, loss=2.0 - i / 1000, step_ms=1000.0)
        if i % 10 == 0:
            agent.tick(now_ms=clock.t)
    for _ in range(120):  # hangs: the GPUs stay busy, no step comes
        clock.t += 10_000
        agent.tick(now_ms=clock.t)
    msgs = [(at, m) for at, m in timed(t.messages)
            if (getattr(r := load_codec().decode(m[2]), "run_id", ""), getattr(r, "state", ""))
            != ("b", "succeeded")]  # b hangs: it never ends
    wall = Clock(T0)
    m = MemoryProcessor(clock=wall)
    deliver_live(m, wall, msgs)
    return [x for x in m.alerts if isinstance(x, Alert) and x.run_id == "b"]


@pytest.mark.parametrize("epilog", ["succeeded", "failed"])
def test_a_failed_run_teaches_its_family_nothing_whatever_the_epilog_says(epilog: str) -> None:
    """The SDK's own end stands over the epilog's later one, as in the run summary: a failed
    run's 12-minute evaluation became its family's usual pause when the epilog said
    succeeded, and the next run's 20-minute hang never paged."""
    assert ("rule:stalled", "execution") in firing(failed_then_epilog(epilog))


# ------------------------------------------------------------------ a corrupt checkpoint's reach


def corrupt_then_nan(resume: str | None, tmp: Any) -> Script:
    """A checkpoint at step 200 whose bytes do not match its expected checksum, a NaN loss
    at step 500. ``resume``: before the NaN the job started again, ``"named"`` resuming from
    that file (``resumed_from``), ``"latest"`` a Kubernetes restart naming none (it loads
    the latest), ``"other"`` resuming from another, good file; None: one process throughout."""
    def script(init: Callable[..., Any], clock: Clock, node: Callable[[str], Any]) -> None:
        rng = random.Random(4)
        bad, good = tmp / "step-200.pt", tmp / "step-100.pt"
        bad.write_bytes(b"weights-200")
        good.write_bytes(b"weights-100")
        run = init()
        for i in range(1, 600):
            clock.t += 1_000
            if i == 300 and resume is not None:
                run.finish("failed", reason=KILLED)
                clock.t += 30_000
                frm = {"named": str(bad), "other": str(good)}.get(resume)
                run = init(**({"resumed_from": frm} if frm else {}))
                clock.t += 60_000
            run.step(i, loss=math.nan if i == 500 else loss_at(i, rng), samples=64,
                     step_ms=1000.0)
            if i == 200:
                run.checkpoint(str(bad), step=200, duration_ms=500.0, expected_sha256="0" * 64)
        run.finish()
    return script


@pytest.mark.parametrize(("resume", "cause"), [(None, "learning"), ("other", "execution"),
                                               ("named", "artifact"), ("latest", "artifact")])
def test_a_corrupt_checkpoint_explains_a_nan_only_once_loaded(resume: str | None, cause: str,
                                                              tmp_path: Any) -> None:
    """A NaN five minutes after a mismatched write, in a run that never resumed, was blamed
    on the checkpoint (artifact) and its onset moved back to the write: the process that
    wrote it still held the good state. Resumed from another, good file, the restart is the
    evidence (execution), as for any NaN after a restart."""
    alerts = live(corrupt_then_nan(resume, tmp_path), tail_ms=5 * MIN)
    nan = [a for a in alerts if a.detector == "rule:non_finite" and a.status == "firing"]
    assert [a.probable_cause for a in nan] == [cause]
    assert "rule:checkpoint_checksum" in {a.detector for a in alerts}


# ------------------------------------------------------------------ a hard rule repeating later


def nan_twice(burst: bool) -> list[Alert]:
    """Attempt 1 hits a NaN loss at step 25 and fails; attempt 2 resumes from step 10 and
    hits it again at step 25, 25 minutes later. ``burst``: the records reach the processor
    together (a backfill after an outage), else live."""
    t, clock = CaptureTransport(), Clock(T0)
    for attempt, first in ((1, 1), (2, 11)):
        run = runwatch.init("fam", run_id="r1", team="ml", transport=t, install_hooks=False,
                            capture_lineage=False, strict=True, clock=clock, attempt=attempt,
                            **({"resumed_from": "s3://ckpt/r1/step-10"} if attempt > 1 else {}))
        for i in range(first, 26):
            clock.t += MIN
            run.step(i, loss=math.nan if i == 25 else 2.0 - i / 100, samples=64,
                     step_ms=60_000.0)
        run.finish("failed", reason="loss is NaN")
        clock.t += 10 * MIN  # requeued: it waits, loads
    msgs = timed(t.messages)
    wall = Clock(T0)
    m = MemoryProcessor(clock=wall)
    if burst:
        wall.t = clock.t + 60 * MIN
        m.feed([msg for _, msg in msgs])
        m.tick(wall.t)
    else:
        deliver_live(m, wall, msgs)
    return [a for a in m.alerts if isinstance(a, Alert) and a.detector == "rule:non_finite"]


@pytest.mark.parametrize("burst", [False, True])
def test_a_nan_repeating_after_the_quiet_time_is_a_new_sighting_live_or_backfilled(
        burst: bool) -> None:
    """Read in one batch, the retry's NaN 25 minutes later extended the first alert (it had
    not resolved: the timer never saw the 15 quiet minutes) and `investigate` said the
    recurrence was never seen: deterministic unknown."""
    alerts = nan_twice(burst)
    assert [a.status for a in alerts] == ["firing", "resolved", "firing"], [
        (a.status, a.first_seen_ms, a.last_seen_ms) for a in alerts]
    first, resolved, again = alerts
    assert resolved.last_seen_ms == first.first_seen_ms
    assert again.first_seen_ms - first.first_seen_ms == 25 * MIN
