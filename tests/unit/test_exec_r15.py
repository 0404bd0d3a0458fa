"""Execution signals through the SDK: cases found by an outside tester (round 15).

Each run is driven as a user drives it (``runwatch.init(..., clock=)``, ``run.step`` and
``run.checkpoint`` with explicit times) and replayed through the processor as
``runwatch simulate --offline`` does.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from sdk_kit import Clock
from test_controls_sdk import pages as controls_pages

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.processor.settings import ProcessorSettings
from runwatch.sim import replay as offline

T0 = 1_800_000_000_000
MIN = 60_000


def pages(script: Callable[[Any, Clock], None]) -> list[str]:
    """The detectors that fired for ``script(run, clock)`` (``test_controls_sdk.pages``)."""
    return controls_pages(script, t0=T0)


def saves(startup_min: int, every_min: int, save_s: float, grow_from: int | None = None,
          minutes: int = 240, seed: int = 4) -> Callable[[Any, Clock], None]:
    """A run that loads for ``startup_min`` minutes (model, dataset index, compilation), then
    trains at 1 s a step and saves every ``every_min`` minutes for ``save_s`` seconds (each
    save 30 % longer than the last from save ``grow_from``: a slowing store)."""
    def script(run: Any, clock: Clock) -> None:
        rng = random.Random(seed)
        clock.t = T0 + startup_min * MIN
        step, k, due = 0, 0, clock.t + every_min * MIN
        while clock.t < T0 + minutes * MIN:
            ms = 1000.0 * (1 + rng.gauss(0, 0.05))
            clock.t += int(ms)
            run.step(step, loss=1.0, samples=32, step_ms=ms, loader_wait_ms=0.02 * ms)
            step += 1
            if clock.t >= due:
                d = save_s * 1000 * (1 + 0.05 * rng.random())
                if grow_from is not None and k >= grow_from:
                    d *= 1.3 ** (k - grow_from + 1)
                clock.t += int(d)
                run.checkpoint(f"s3://ckpt/r1/{k}", step=step, duration_ms=d, now_ms=clock.t)
                k += 1
                due = clock.t + every_min * MIN
    return script


@pytest.mark.parametrize(("startup_min", "every_min", "save_s"), [
    (20, 2, 40.0),  # paged "checkpoint_share trending up to 0.254 (baseline 0.133)"
    (10, 1, 20.0),
])
def test_a_long_start_up_before_frequent_saves_does_not_page(
        startup_min: int, every_min: int, save_s: float) -> None:
    """The lead before the first save held the start-up: the first shares read 0.03 to
    0.07 against 0.25 after, the watch learnt the low ones as the run's level, and a
    healthy run was paged hours in."""
    assert "watch:checkpoint_share" not in pages(saves(startup_min, every_min, save_s))


def test_saves_that_grow_after_a_long_start_up_still_page() -> None:
    assert "watch:checkpoint_share" in pages(saves(20, 5, 30.0, grow_from=10))


def crashing_loader(restarts: int, twice: bool = False) -> list[str]:
    """A run whose data-loader workers die and are respawned ``restarts`` times, each
    reported at its step as ``worker_restarts=1`` (StepTiming's contract: the restarts since
    the previous step); ``twice``: every record delivered twice (at-least-once)."""
    t = CaptureTransport()
    clock = Clock(T0)
    run = runwatch.init("fam", run_id="r1", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=True, clock=clock)
    for i in range(2000):
        respawn = 0 < i and i % 200 == 0 and i // 200 <= restarts
        wait = 10_000.0 if respawn else 30.0
        clock.t += int(1000 + wait)
        run.step(i, loss=1.0, samples=64, step_ms=1000.0 + wait, loader_wait_ms=wait,
                 worker_restarts=1 if respawn else 0)
    run.finish(now_ms=clock.t)
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in t.messages for _ in range(2 if twice else 1)]
    alerts = offline.replay(offline.as_messages(records), ProcessorSettings(save_interval_s=0))
    return sorted({a.detector for a in alerts if a.status == "firing"})


def test_worker_restarts_reported_step_by_step_add_up_and_page() -> None:
    """Eight respawns, 1 at each: read as a running total the run had one restart, and
    the restart page (5, ``RunConfig.restart_alert``) never came."""
    assert "indicator:restarts" in crashing_loader(8)


@pytest.mark.parametrize("twice", [False, True])
def test_a_few_worker_restarts_do_not_page_also_when_delivered_twice(twice: bool) -> None:
    assert "indicator:restarts" not in crashing_loader(3, twice=twice)


def test_worker_respawns_hours_apart_in_a_long_run_do_not_page() -> None:
    """Eight respawns 40 minutes apart over six hours (one a step of a minute, 1 each): the
    count is over the correlation window (``window_ms``, 30 minutes), a crash loop, not
    over the run's life, so a worker respawned now and then is no fault."""
    t = CaptureTransport()
    clock = Clock(T0)
    run = runwatch.init("fam", run_id="r1", team="ml", transport=t, install_hooks=False,
                        capture_lineage=False, strict=True, clock=clock)
    for i in range(360):
        respawn = 0 < i and i % 40 == 0
        clock.t += 60_000
        run.step(i, loss=1.0, samples=64, step_ms=60_000.0, loader_wait_ms=300.0,
                 worker_restarts=1 if respawn else 0)
    run.finish(now_ms=clock.t)
    codec = load_codec()
    records = [codec.decode(v) for _, _, v in t.messages]
    alerts = offline.replay(offline.as_messages(records), ProcessorSettings(save_interval_s=0))
    assert sum(r.worker_restarts for r in records if type(r).__name__ == "StepTiming") == 8
    assert "indicator:restarts" not in {a.detector for a in alerts if a.status == "firing"}
