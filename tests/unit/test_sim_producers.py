"""The simulator drives the producers through their public time API (no private timers)."""

from __future__ import annotations

import collections
import inspect

import pytest

from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.sim import drivers
from runwatch.sim import scenarios as sc
from runwatch.sim.model import DEADLINE_MS, QUEUE_DEADLINE_MS, STEP_COMPUTE_MS
from runwatch.sim.runner import SimConfig, run_simulation


@pytest.fixture(scope="module")
def records():
    transport = CaptureTransport()
    cfg = SimConfig(nodes=2, runs=1, seed=3, speed=200.0, duration_s=600.0, tick_s=0.02,
                    scenarios=(sc.get("restarts").with_(at_s=60),
                               sc.get("queue_deadline")),
                    collect_alerts=False)
    res = run_simulation(cfg, transport=transport)
    codec = load_codec()
    return res, [codec.decode(v) for _, _, v in transport.messages]


def test_drivers_use_no_private_sdk_state() -> None:
    src = inspect.getsource(drivers)
    for private in ("_wait_ns", "_last_ns", "_put(", "_build_checkpoint", "_FN", "_manifest("):
        assert private not in src, private


@pytest.mark.parametrize("tag,allowed_ms", [("control", DEADLINE_MS),
                                            ("queue_deadline", QUEUE_DEADLINE_MS)])
def test_queue_deadlines_are_absolute(records, tag: str, allowed_ms: int) -> None:
    _, recs = records
    queued = [r for r in recs if type(r).__name__ == "JobEvent" and r.state == "queued"
              and r.run_id.endswith(tag)]
    assert len(queued) == 1
    q = queued[0]
    assert q.deadline_ms == q.emitted_at_ms + allowed_ms


def test_step_timings_are_the_planned_ones(records) -> None:
    _, recs = records
    st = [r for r in recs if type(r).__name__ == "StepTiming" and r.run_id.endswith("control")]
    assert len(st) > 100
    assert all(abs(r.step_ms - r.loader_wait_ms - r.compute_ms) < 1e-6 for r in st)
    assert all(abs(r.compute_ms - STEP_COMPUTE_MS) <= 40.0 + 1e-6 for r in st)
    assert {r.effective_batch_size for r in st} == {256} and {r.worker_restarts for r in st} == {0}
    stamps = [r.emitted_at_ms for r in st]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert min(gaps) >= int(STEP_COMPUTE_MS) - 40  # virtual step spacing, not wall time


def test_restarts_raise_attempts_and_shrink_the_batch(records) -> None:
    res, recs = records
    run = next(r for r in res.run_ids if r.endswith("restarts"))
    jobs = [r for r in recs if type(r).__name__ == "JobEvent" and r.run_id == run]
    states = collections.Counter(j.state for j in jobs)
    assert states["retrying"] == 3
    attempts = [j.attempt for j in jobs if j.state in ("retrying", "running")]
    assert max(attempts) == 4
    st = [r for r in recs if type(r).__name__ == "StepTiming" and r.run_id == run]
    # worker_restarts counts the restarts since the previous step (StepTiming's contract)
    assert st[-1].effective_batch_size == 64 and sum(r.worker_restarts for r in st) == 3
    assert st[0].effective_batch_size == 256 and st[0].worker_restarts == 0


def test_simulated_gpus_are_healthy_unless_a_scenario_says_so(records) -> None:
    _, recs = records
    samples = [r for r in recs if type(r).__name__ == "NodeSample"]
    assert samples
    gpus = [g for s in samples for g in s.gpus]
    assert len(gpus) == 8 * len(samples)
    assert all(not g.throttle_reasons for g in gpus)
    assert all(not g.ecc_corrected and not g.ecc_uncorrected and not g.xid for g in gpus)
