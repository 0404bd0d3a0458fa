"""Healthy runs that look alarming, each beside the fault it must still page, through the SDK.

Runs are driven the way users drive them (``runwatch.init(..., clock=)`` and
``run.step`` with explicit times) and replayed through the processor as
``runwatch simulate --offline`` does. Each control found a false page on the
public API: a long linear warm-up, a new gradient-norm level after a
learning-rate decay, a few slow loader batches at each epoch's start.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from sdk_kit import Clock

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim import replay as offline

T0 = 1_700_000_000_000


def pages(script: Callable[[Any, Clock], None], t0: int = T0) -> list[str]:
    """Run ``script(run, clock)`` through the SDK from ``t0``, replay it; return the detectors
    that fired."""
    t = CaptureTransport()
    clock = Clock(t0)
    run = runwatch.init("fam", run_id="r1", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=True, clock=clock)
    script(run, clock)
    run.finish()
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in t.messages]
    alerts = offline.replay(offline.as_messages(records), ProcessorSettings(save_interval_s=0))
    return sorted({a.detector for a in alerts if a.status == "firing"})


def warmup(warm: int, rising: bool = True, held: bool = False) -> Callable[[Any, Clock], None]:
    """A linear warm-up over ``warm`` steps whose loss bumps by up to 90 % as the rate peaks
    (``held``: and stays up)."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(3)
        for i in range(warm + 400):
            clock.t = T0 + (i + 1) * 1000
            lr = 1e-3 * min((i + 1) / warm, 1.0) if rising else 1e-3
            k = i - (warm - 40)
            bump = 1.0 + (0.9 * math.exp(-((k - 20) / 15) ** 2) if -20 < k < 80 else 0.0)
            if held and k >= 20:
                bump = 1.9
            loss = (3.0 * math.exp(-i / (warm / 4)) + 1.0) * bump * (1 + rng.gauss(0, 0.02))
            run.step(i, loss=loss, lr=lr, samples=64, step_ms=1000.0, loader_wait_ms=20.0)
    return script


@pytest.mark.parametrize("warm", [60, 2000])
def test_a_loss_bump_during_a_linear_warmup_does_not_page(warm: int) -> None:
    # a 2,000-step warm-up rises by less than 1 % a step after its 100th step
    assert "rule:loss_divergence" not in pages(warmup(warm))


def test_the_same_loss_bump_at_a_constant_rate_pages_when_it_stays() -> None:
    # a bump of 40 steps that recovers on its own is a transient spike (LOSS_PERSIST)
    assert "rule:loss_divergence" not in pages(warmup(2000, rising=False))
    assert "rule:loss_divergence" in pages(warmup(2000, rising=False, held=True))


def grad_norms(after: Callable[[random.Random], float]) -> Callable[[Any, Clock], None]:
    """Norms about 1.0 (30 % noise) for 1,500 steps, then ``after(rng)`` as the rate decays."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(2)
        for i in range(2000):
            clock.t = T0 + (i + 1) * 1000
            gn = (1 + 0.3 * rng.random()) if i < 1500 else after(rng)
            run.step(i, loss=1.0 + rng.gauss(0, 0.02), lr=0.1 if i < 1500 else 0.01,
                     grad_norm=gn, samples=256, step_ms=1000.0, loader_wait_ms=50.0)
    return script


def test_a_new_gradient_norm_level_after_a_rate_decay_does_not_page() -> None:
    assert pages(grad_norms(lambda rng: 0.3 * (1 + 0.3 * rng.random()))) == []


def test_unstable_gradient_norms_after_it_page() -> None:
    fired = pages(grad_norms(lambda rng: rng.choice((0.3, 3.0)) * (1 + 0.3 * rng.random())))
    assert "watch:grad_norm_variance" in fired


def loader(creep: bool) -> Callable[[Any, Clock], None]:
    """Each 500-step epoch's first three batches wait 20, 10 and 5 s (workers respawn);
    with ``creep`` the loader's wait then grows by 1 ms a step from step 700."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(31)
        t = T0
        for i in range(1500):
            wait = {0: 20_000.0, 1: 10_000.0, 2: 5_000.0}.get(i % 500, 30.0 + 10 * rng.random())
            if creep and i > 700:
                wait += float(i - 700)
            t += int(970.0 + wait)
            clock.t = t
            run.step(i, loss=1.0, lr=1e-3, samples=64, step_ms=970.0 + wait,
                     loader_wait_ms=wait, epoch=i // 500)
    return script


def test_slow_loader_batches_at_each_epoch_start_do_not_page() -> None:
    assert pages(loader(creep=False)) == []


def test_a_loader_that_slows_step_by_step_pages() -> None:
    assert "watch:loader_share" in pages(loader(creep=True))


def cold_loader(cold: int, creep: bool = False, resume_at: int | None = None,
                slow_for: int | None = None) -> Callable[[Any, Clock], None]:
    """A loader that starts cold: its first ``cold`` batches wait 3 s on a 1 s step (a
    streaming dataset's cache filling). ``creep``: from step 700 the wait grows by 1 ms a
    step. ``resume_at``: the job is requeued there (a node lost) and resumes 500 steps back
    from its checkpoint five minutes later, its loader cold again for ``slow_for`` batches
    (default ``cold``)."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(11)
        t, again = T0, (slow_for if slow_for is not None else cold)

        def step(i: int, slow: bool) -> None:
            nonlocal t
            wait = 3000.0 if slow else 20.0 + 10 * rng.random()
            if creep and i > 700:
                wait += float(i - 700)
            t += int(1000 + wait)
            clock.t = t
            run.step(i, loss=2.0 * math.exp(-i / 800) + 1 + rng.gauss(0, 0.01), lr=1e-3,
                     samples=64, step_ms=1000.0 + wait, loader_wait_ms=wait)

        for i in range(resume_at or 2500):
            step(i, i < cold)
        if resume_at is not None:
            clock.t = t = t + 1000
            run.job_state("retrying", "node lost", attempt=2)
            clock.t = t = t + 300_000
            run.job_state("running", attempt=2)
            for j, i in enumerate(range(resume_at - 500, resume_at + 1000)):
                step(i, j < again)
    return script


@pytest.mark.parametrize("cold", [0, 20, 30])
def test_a_loader_creep_pages_whether_or_not_the_loader_started_cold(cold: int) -> None:
    # a cold start that filled the 20-step warm-up froze the baseline at a 75 % share,
    # and the creep this watch is for never paged (loader_share settles, as grad_norm)
    assert "watch:loader_share" in pages(cold_loader(cold, creep=True))
    assert pages(cold_loader(cold)) == []


def test_a_throughput_fall_pages_after_a_cold_start() -> None:
    # the same frozen baseline, at a quarter of the run's speed, hid a fall to half of it
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(12)
        t = T0
        for i in range(2000):
            wait = 3000.0 if i < 30 else 20.0 + 10 * rng.random()
            compute = 1000.0 if i < 1000 else 2000.0  # a GPU throttled from step 1000 on
            t += int(compute + wait)
            clock.t = t
            run.step(i, loss=1.5 + rng.gauss(0, 0.01), lr=1e-3, samples=64,
                     step_ms=compute + wait, loader_wait_ms=wait)
    assert "watch:throughput" in pages(script)


@pytest.mark.parametrize("cold", [3, 10, 19])
def test_a_requeued_runs_cold_loader_does_not_page(cold: int) -> None:
    # the restarted process's first batches are its warm-up, as the run's first were;
    # 10 slow batches after a requeue paged the loader share
    assert pages(cold_loader(3, resume_at=1500, slow_for=cold)) == []


def test_a_loader_still_slow_long_after_a_requeue_pages() -> None:
    assert "watch:loader_share" in pages(cold_loader(3, resume_at=1500, slow_for=200))


def overflows(at: set[int]) -> Callable[[Any, Clock], None]:
    """fp16 with a dynamic loss scaler: the steps in ``at`` overflow (an infinite gradient
    norm, a finite loss: the scaler skips the step and halves its scale)."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(5)
        for i in range(1500):
            clock.t = T0 + (i + 1) * 1000
            gn = math.inf if i in at else 1.0 + 0.1 * rng.random()
            run.step(i, loss=2.0 - i / 1500 + rng.gauss(0, 0.01), lr=1e-3, grad_norm=gn,
                     samples=64, step_ms=1000.0, loader_wait_ms=20.0)
    return script


def test_a_loss_scaler_skipping_steps_does_not_page() -> None:
    # six overflows in a row as the scale falls from 2^16, then one after it grows again
    assert pages(overflows({1, 2, 3, 4, 5, 6, 1200})) == []


def test_gradients_that_keep_overflowing_page() -> None:
    assert "rule:non_finite" in pages(overflows(set(range(600, 620))))


def test_a_scaler_starting_at_2_to_the_32_skipping_its_first_steps_does_not_page() -> None:
    # Megatron-LM's defaults (initial scale 2^32, hysteresis 2): its first 17 steps skipped
    assert pages(overflows(set(range(17)) | {1200})) == []


def test_gradients_that_never_stop_overflowing_from_the_start_page() -> None:
    assert "rule:non_finite" in pages(overflows(set(range(60))))


def language_model(slower_from: int | None, seq_from: int | None,
                   samples: bool) -> Callable[[Any, Clock], None]:
    """A language model's steps counting tokens (and samples when ``samples``): the step
    time doubles from ``slower_from``; the sequence length doubles from ``seq_from`` with
    the tokens per step and the step time kept (a curriculum: half the samples a step)."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(9)
        t = T0
        for i in range(1400):
            step_ms = 1000.0 * (2 if slower_from is not None and i >= slower_from else 1)
            step_ms *= 1 + 0.02 * rng.random()
            per_step = 16 if seq_from is not None and i >= seq_from else 32
            t += int(step_ms)
            clock.t = t
            run.step(i, loss=2.0, lr=1e-3, tokens=32 * 1024,  # sequences of 1,024 or 2,048
                     samples=per_step if samples else 0, step_ms=step_ms, loader_wait_ms=20.0)
    return script


def test_a_sequence_length_curriculum_at_the_same_tokens_per_second_does_not_page() -> None:
    assert pages(language_model(None, 1000, samples=True)) == []


@pytest.mark.parametrize("samples", [True, False])
def test_a_language_model_at_half_its_tokens_per_second_pages(samples: bool) -> None:
    # a job that counts tokens alone reports no samples: its samples/s of 0 could not fall
    assert "watch:token_throughput" in pages(language_model(1000, None, samples=samples))


def diverging(rise: float, every: int = 1) -> Callable[[Any, Clock], None]:
    """A loss flat at 1.0 for 1,000 steps, then rising by ``rise`` of it a step (logged
    every ``every``-th step; 1 % noise)."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(2)
        for i in range(0, 2000, every):
            clock.t = T0 + (i + 1) * 1000
            loss = 1.0 + rise * max(i - 1000, 0)
            run.step(i, loss=loss * (1 + rng.gauss(0, 0.01)), lr=1e-3, samples=64,
                     step_ms=1000.0, loader_wait_ms=20.0)
    return script


@pytest.mark.parametrize("every", [1, 10])
def test_a_loss_rising_half_a_percent_a_step_pages_however_often_it_is_logged(every) -> None:
    # six times its level by step 2000: logged every step it never reached 1.5 x within
    # the 50 logged steps the rule looked back over
    assert "rule:loss_divergence" in pages(diverging(0.005, every))


def test_a_flat_loss_does_not_page() -> None:
    assert pages(diverging(0.0)) == []


@pytest.mark.parametrize("how", ["no_loss", "eval_metrics", "nan_metric"])
def test_a_step_without_a_loss_or_with_a_nan_metric_does_not_page(how: str) -> None:
    def script(run: Any, clock: Clock) -> None:
        for i in range(300):
            clock.t = T0 + (i + 1) * 1000
            if how == "no_loss":  # a hook whose training step returned nothing
                run.step(i, samples=64, step_ms=1000.0, loader_wait_ms=20.0)
            elif how == "eval_metrics":  # every 50th step logs an evaluation, no loss
                if i % 50 == 49:
                    run.step(i, metrics={"eval_acc": 0.7}, step_ms=1000.0)
                else:
                    run.step(i, loss=1.0, samples=64, step_ms=1000.0, loader_wait_ms=20.0)
            else:  # accuracy of batches without labelled rows
                run.step(i, loss=1.0, metrics={"acc": math.nan if i % 50 < 20 else 0.9},
                         samples=64, step_ms=1000.0, loader_wait_ms=20.0)
    assert pages(script) == []


def family_pages(first: int, second: int, slower_from: int | None = None) -> list[str]:
    return sorted({a.detector for a in family_alerts(first, second, slower_from)})


def family_alerts(first: int, second: int, slower_from: int | None = None) -> list[Any]:
    """Run ``a`` of a family at ``first`` samples a step, then ``b`` at ``second`` (both one
    step a second; ``slower_from``: b's steps take twice as long from that step on); replay
    both; return what paged on ``b``."""
    t = CaptureTransport()
    clock = Clock(T0)
    for run_id, samples, steps in (("a", first, 300), ("b", second, 1200)):
        run = runwatch.init("fam", run_id=run_id, team="ml", transport=t, install_hooks=False,
                            capture_lineage=False, strict=True, clock=clock)
        for i in range(steps):
            slow = slower_from is not None and run_id == "b" and i >= slower_from
            clock.t += 2000 if slow else 1000
            run.step(i, loss=2.0 - i / 1000, step_ms=2000.0 if slow else 1000.0,
                     loader_wait_ms=20.0, samples=samples)
        run.finish()
        clock.t += 60 * 60_000
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in t.messages]
    alerts = offline.replay(offline.as_messages(records), ProcessorSettings(save_interval_s=0))
    return [a for a in alerts if a.status == "firing" and a.run_id == "b"]


def test_a_run_at_half_its_familys_batch_size_does_not_page_its_throughput() -> None:
    """A sweep point at 128 samples a step after a run at 256 was paged "throughput fell to
    178 (baseline 256)" at its 14th step, and the alert never resolved: the family's
    samples per second seeded the watch whatever the step size."""
    assert family_pages(256, 128) == []


def test_a_run_at_its_familys_batch_size_at_half_its_speed_from_the_start_pages() -> None:
    """The family's rate at the same step size still seeds the watch: a run slow from its
    first step is judged against it."""
    assert family_pages(256, 256, slower_from=0) == ["watch:throughput"]


def test_a_watchs_title_names_the_value_that_fired() -> None:
    """A run at 128 samples/s against its family's 256 read "throughput fell to 178": the
    smoothed level, still on its way down from the family's mean."""
    (alert,) = family_alerts(256, 256, slower_from=0)
    assert alert.title == "throughput fell to 128 (baseline 256)", alert.title


def phases(plan: list[tuple[int, int, float]], slow_from: int | None = None
           ) -> Callable[[Any, Clock], None]:
    """Phases of (steps, samples a step, step ms); ``slow_from``: from that step on each step
    takes 1.6 times as long (a slower node), whatever the phase."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(3)
        t, i = T0, 0
        for n, samples, ms in plan:
            for _ in range(n):
                took = ms * (1 + rng.gauss(0, 0.03)) * (1.6 if slow_from is not None
                                                         and i >= slow_from else 1.0)
                t += int(took)
                clock.t = t
                run.step(i, loss=1.5 + rng.gauss(0, 0.01), lr=1e-4, samples=samples,
                         step_ms=took, loader_wait_ms=20.0)
                i += 1
    return script


def test_a_planned_phase_at_a_smaller_batch_is_learnt_and_a_slowdown_in_it_pages() -> None:
    # pre-training at 256 samples a 1 s step, fine-tuning at 32 a 0.2 s step (256 -> 160
    # samples/s by design): "throughput fell", never resolved
    plan = [(2000, 256, 1000.0), (1500, 32, 200.0)]
    assert pages(phases(plan)) == []
    assert pages(phases(plan, slow_from=2800)) == ["watch:throughput"]
    # an epoch's smaller last batch is one odd step, not a phase
    assert pages(phases([(500, 256, 1000.0), (1, 100, 400.0)] * 4)) == []


def jittery(jitter: float, slower: float, tokens: bool = False) -> Callable[[Any, Clock], None]:
    """1 s steps scattered by ``jitter`` (a fraction, Gaussian), ``slower`` times as long from
    step 1,500; ``tokens``: variable-length batches of 2k-8k tokens, 0.2 s of each step fixed."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(8)
        t = T0
        for i in range(3000):
            tok = rng.randint(2000, 8000) if tokens else None
            took = ((200 + 0.1 * tok) if tok else 1000.0) * max(0.2, 1 + rng.gauss(0, jitter))
            took *= slower if i >= 1500 else 1.0
            t += int(took + 20)
            clock.t = t
            run.step(i, loss=2.0, lr=1e-3, samples=16, tokens=tok, step_ms=took + 20,
                     loader_wait_ms=20.0)
    return script


@pytest.mark.parametrize(("jitter", "tokens"), [(0.1, False), (0.2, False), (0.05, True)])
def test_a_slowdown_of_a_run_whose_steps_scatter_pages(jitter: float, tokens: bool) -> None:
    # the bound was 4 deviations of single steps: a slowdown to two thirds under 10 % jitter,
    # or of variable-length batches counted in tokens, was not paged
    watch = "watch:token_throughput" if tokens else "watch:throughput"
    assert pages(jittery(jitter, 1.0, tokens)) == []
    assert pages(jittery(jitter, 1.5, tokens)) == [watch]


def blocks(n: int, slower_from: int | None) -> Callable[[Any, Clock], None]:
    """Blocks of ``n`` steps alternating 64 samples in 1 s and 128 in 2 s (two tasks);
    ``slower_from``: every step twice as long from that step on."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(5)
        t = T0
        for i in range(1500):
            big = (i // n) % 2 == 1
            took = (2000.0 if big else 1000.0) * (1 + rng.gauss(0, 0.03))
            took *= 2.0 if slower_from is not None and i >= slower_from else 1.0
            t += int(took)
            clock.t = t
            run.step(i, loss=1.0, lr=1e-3, samples=128 if big else 64, step_ms=took,
                     loader_wait_ms=10.0)
    return script


@pytest.mark.parametrize("n", [25, 40, 100])
def test_blocks_of_two_step_sizes_are_judged_each_against_its_own_level(n: int) -> None:
    # each block a new phase learnt afresh: a slowdown became the next block's level
    assert pages(blocks(n, None)) == []
    assert pages(blocks(n, 600)) == ["watch:throughput"]
