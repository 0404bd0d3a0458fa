"""A data-parallel job whose every rank calls ``runwatch.init`` (as torchrun starts them):
one run, a healthy job pages nothing, a NaN loss pages once."""

from __future__ import annotations

import math
import random

import pytest

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

T0 = 1_800_000_000_000
RANKS = 4
STEPS = 300


def _job(monkeypatch: pytest.MonkeyPatch, nan_at: int | None = None,
         straggler_at: int | None = None) -> MemoryProcessor:
    for name in ("RUNWATCH_RUN_ID", "SLURM_JOB_ID", "SLURM_NTASKS", "RUNWATCH_ATTEMPT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "ddp-7")
    monkeypatch.setenv("WORLD_SIZE", str(RANKS))
    t = CaptureTransport()
    ranks = []
    for r in range(RANKS):
        monkeypatch.setenv("RANK", str(r))
        ranks.append(runwatch.init("fam-ddp", transport=t, install_hooks=False,
                                   capture_lineage=False, clock=lambda: T0,
                                   lineage={"image_digest": "sha256:abc", "code_revision": "r1",
                                            "hardware": {"nodes": [f"n{r // 2}"],
                                                         "gpu_count": 2, "gpu_model": "H100"}}))
    rng = random.Random(3)
    for s in range(STEPS):
        for r, run in enumerate(ranks):
            at = T0 + 10_000 + s * 2000 + r * 37  # ranks a few ms apart
            loss = 3.0 * math.exp(-s / 150) + rng.gauss(0, 0.02)
            if nan_at is not None and s >= nan_at:
                loss = math.nan  # an all-reduced NaN reaches every rank
            slow = straggler_at is not None and s >= straggler_at
            # rank 3's loader starves; every rank waits for it at the all-reduce
            wait = (900.0 if slow and r == RANKS - 1 else 100.0) + rng.gauss(0, 5)
            run.step(s, loss=loss, lr=1e-4, grad_norm=1.0 + rng.gauss(0, 0.05), samples=256,
                     now_ms=at, step_ms=2800.0 if slow else 2000.0, loader_wait_ms=wait,
                     effective_batch_size=256)
        if s % 100 == 99:
            for r, run in enumerate(ranks):  # each rank writes its shard
                run.checkpoint(f"/ck/{s}-{r}", step=s, duration_ms=5000.0,
                               now_ms=T0 + 10_000 + s * 2000 + 500 + r)
    end = T0 + 10_000 + STEPS * 2000
    for r, run in enumerate(ranks):
        run.finish(now_ms=end + r)
    codec = load_codec()
    # live, each rank's records reach the broker as they are made: interleaved by time
    msgs = sorted(t.messages, key=lambda m: getattr(codec.decode(m[2]), "emitted_at_ms", 0))
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=lambda: end + 1000)
    m.feed(msgs)
    m.tick(end + 20 * 60_000)  # and the wall-clock rules minutes later
    return m


def test_a_healthy_data_parallel_job_is_one_run_and_pages_nothing(monkeypatch) -> None:
    m = _job(monkeypatch)
    assert [a.detector for a in m.alerts] == []
    assert m.dead == []


def test_a_nan_loss_on_every_rank_pages_once(monkeypatch) -> None:
    m = _job(monkeypatch, nan_at=200)
    nan = [a for a in m.alerts if a.detector == "rule:non_finite"]
    assert {a.run_id for a in nan} == {"torch-ddp-7"}
    assert len({a.alert_id for a in nan}) == 1
    for a in nan:  # the symptom was listed twice as its own evidence (pager bodies too)
        items = [(e.signal, e.indicator, e.at_ms, e.detail) for e in a.evidence]
        assert len(items) == len(set(items)), items


def test_one_starving_rank_shows_as_the_jobs_throughput_falling(monkeypatch) -> None:
    """Steps carry no rank: the run sees every rank slow down (docs/sdk.md)."""
    m = _job(monkeypatch, straggler_at=200)
    assert [(a.detector, a.run_id) for a in m.alerts] == [("watch:throughput", "torch-ddp-7")]


def _family_run(m: MemoryProcessor, rid: str, start: int, step_ms: dict[int, float],
                default_ms: float = 100.0) -> None:
    t = CaptureTransport()
    now = [start]
    run = runwatch.init("tp-fam", team="t", run_id=rid, transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: now[0])
    run.job_state("running", "start", now_ms=now[0])
    for step in range(250):
        ms = step_ms.get(step, default_ms)
        now[0] += int(ms)
        run.step(step, loss=2.0 - step * 0.001, samples=512, now_ms=now[0], step_ms=ms,
                 loader_wait_ms=5.0)
    run.finish("succeeded", now_ms=now[0])
    m.feed(t.messages)


@pytest.mark.parametrize(("slow", "default_ms", "pages"), [
    ({0: 300.0, 1: 150.0}, 100.0, False),   # CUDA init / compilation: two slow first steps
    ({0: 60_000.0}, 100.0, False),          # a first step that compiles for a minute
    ({}, 200.0, True),                      # half the family's speed from the first step
])
def test_a_runs_slow_first_steps_are_not_a_throughput_fall(slow: dict[int, float],
                                                           default_ms: float,
                                                           pages: bool) -> None:
    """The family's second run started its throughput level at its first step's value: two
    slow first steps held it under the bound for five steps after the run was at the
    family's speed, and a healthy run paged (live, every rerun of a job that times itself)."""
    clock = [T0 + 10**7]
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=lambda: clock[0])
    _family_run(m, "first", T0, {})
    _family_run(m, "second", T0 + 60_000, slow, default_ms)
    clock[0] += 60_000  # past the correlation delay
    m.tick(T0 + 10 * 60_000)
    fired = [(a.run_id, a.detector) for a in m.alerts]
    assert fired == ([("second", "watch:throughput")] if pages else [])
