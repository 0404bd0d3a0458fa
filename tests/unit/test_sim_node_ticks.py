"""Node agents sample on their virtual-time grid even when the scheduler lags the clock.

A simulation of many runs at a high speed cannot keep up with its virtual
clock: each scheduler pass then covers many node intervals. The node samples
must still come once per interval, each reading the GPUs as they were at its
own event time (busy while the run trains), and how often the GPUs are read
must not change the run's own steps.
"""

from __future__ import annotations

import pytest

from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.sim.runner import SimConfig, run_simulation

INTERVAL_S = 10.0


def _simulate(node_interval_s: float) -> list[object]:
    transport = CaptureTransport()
    # 2000x with 0.1 wall s between passes: every pass covers at least 200 virtual s,
    # twenty node intervals, however fast the machine is
    cfg = SimConfig(nodes=1, runs=1, seed=7, speed=2000.0, duration_s=300.0, tick_s=0.1,
                    node_interval_s=node_interval_s, collect_alerts=False, collect_s=0.05)
    run_simulation(cfg, transport=transport)
    codec = load_codec()
    return [codec.decode(v) for _, _, v in transport.messages]


@pytest.fixture(scope="module")
def records() -> list[object]:
    return _simulate(INTERVAL_S)


def _steps(recs: list[object]) -> list[tuple[int, float]]:
    return [(r.emitted_at_ms, r.step_ms) for r in recs  # type: ignore[attr-defined]
            if type(r).__name__ == "StepTiming"]


def test_samples_keep_their_interval_when_the_scheduler_lags(records) -> None:
    stamps = sorted(r.emitted_at_ms for r in records  # type: ignore[attr-defined]
                    if type(r).__name__ == "NodeSample")
    steps = _steps(records)
    assert steps
    during = [t for t in stamps if steps[0][0] <= t <= steps[-1][0]]
    span_s = (steps[-1][0] - steps[0][0]) / 1000.0
    assert len(during) >= int(span_s / INTERVAL_S) - 1
    gaps = {b - a for a, b in zip(stamps, stamps[1:], strict=False)}
    assert gaps == {int(INTERVAL_S * 1000)}


def test_samples_read_the_gpus_at_their_own_time(records) -> None:
    steps = _steps(records)
    run_id = next(r.run_id for r in records  # type: ignore[attr-defined]
                  if type(r).__name__ == "StepTiming")
    training = [r for r in records if type(r).__name__ == "NodeSample"
                and steps[0][0] <= r.emitted_at_ms <= steps[-1][0]]  # type: ignore[attr-defined]
    assert training
    for s in training:
        mine = [g for g in s.gpus  # type: ignore[attr-defined]
                if any(p.run_id == run_id for p in g.processes)]
        assert mine, s.emitted_at_ms  # type: ignore[attr-defined]
        assert all(g.util_pct > 50.0 for g in mine), s.emitted_at_ms  # type: ignore[attr-defined]


def test_sampling_cadence_leaves_the_runs_steps_unchanged(records) -> None:
    def relative(steps: list[tuple[int, float]]) -> list[tuple[int, float]]:
        return [(at - steps[0][0], ms) for at, ms in steps]  # the clock starts at wall time

    assert relative(_steps(_simulate(INTERVAL_S / 2))) == relative(_steps(records))
