"""The processor on the real broker: scripted runs raise exactly the expected alerts."""

from __future__ import annotations

import time

import pytest

from runwatch.core import scenarios
from runwatch.core.records import Alert, DeadLetter
from runwatch.processor.harness import Harness

pytestmark = pytest.mark.integration

KINDS = sorted(scenarios.EXPECTED)


def scenario_events(t0: int, steps: int = 90) -> tuple[list, dict[str, scenarios.Expected]]:
    events, expected = [], {}
    for i, kind in enumerate(KINDS):
        run = f"run-{kind}-{i}"
        events.extend(scenarios.build(kind, run, t0, steps=steps, seed=i))
        expected[run] = scenarios.EXPECTED[kind]
    return events, expected


def firing(records) -> dict[str, list[Alert]]:
    out: dict[str, list[Alert]] = {}
    for a in records:
        if isinstance(a, Alert) and a.status == "firing":
            out.setdefault(a.run_id, []).append(a)
    return out


def check(alerts: dict[str, list[Alert]], expected: dict[str, scenarios.Expected]) -> None:
    for run, exp in expected.items():
        got = sorted({(a.detector, a.probable_cause) for a in alerts.get(run, [])})
        want = [] if exp.detector is None else [(exp.detector, exp.probable_cause)]
        assert got == want, f"{run}: {got} != {want}"


def test_scenarios_raise_expected_alerts_and_bad_input_is_dead_lettered(harness: Harness) -> None:
    harness.start_worker()
    harness.wait_ready()
    t0 = int(time.time() * 1000) - 200_000
    events, expected = scenario_events(t0)
    n_alerts = sum(1 for e in expected.values() if e.detector)
    harness.produce(events, raw=[("rw.learning", b"\x00garbage"), ("rw.exec.job", b"junk")])
    records = harness.collect("rw.alerts", lambda r: len(firing(r)) >= n_alerts, 60, settle_s=3)
    assert len(firing(records)) >= n_alerts, harness.worker_log()
    check(firing(records), expected)
    # every alert's key is its dedup key and repeats are absent
    keys = [a.dedup_key for a in records if a.status == "firing"]
    assert len(keys) == len(set(keys))
    dead = harness.collect("rw.dlq", lambda r: len(r) >= 2, 20)
    assert {d.topic for d in dead if isinstance(d, DeadLetter)} >= {
        harness.topic("rw.learning"),
        harness.topic("rw.exec.job"),
    }
    assert all(d.reason.startswith("undecodable") for d in dead)
