"""``runwatch investigate`` on runs stored through the sink's row mapping (no live stack).

A backfilled run that names a dataset version nobody reported: the processor, reading the
burst, fires ``rule:missing_data_report`` and resolves it at the same horizon, so both
records carry one millisecond. The run's answer read its alerts ordered by time alone and
showed the resolved alert firing at random (2 runs in 3), with the owner it implies, where
``investigate --since`` counted it resolved.
"""

from __future__ import annotations

import time

import pytest
from costkit import cli_json, store_capture
from sinkkit import Store

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.codec import load_codec
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.outbox import ALERTS

pytestmark = pytest.mark.integration
MIN = 60_000


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


@pytest.fixture(scope="module")
def store(module_store: Store) -> Store:
    return module_store


def test_an_alert_fired_and_resolved_in_one_millisecond_reads_resolved(store: Store) -> None:
    t = CaptureTransport()
    t0 = (int(time.time()) // 60 - 12 * 60) * 60_000
    clock = Clock(t0)
    runs = [f"tie-{i}" for i in range(8)]
    for k, rid in enumerate(runs):  # eight backfilled runs reading an unreported version
        start = t0 + k * 30 * MIN
        run = runwatch.init("fam", team="t", run_id=rid, clock=clock, transport=t,
                            install_hooks=False, capture_lineage=False,
                            datasets=[f"s3://tie/data-{k}@v1"])
        for s in range(1, 21):
            clock.t = start + s * MIN
            run.step(s, loss=1.0, now_ms=clock.t, step_ms=55_000.0, samples=64)
        run.finish("succeeded", now_ms=start + 20 * MIN)
    clock.t = t0  # another run's steps carry the input's event time on for 11 hours
    other = runwatch.init("other", team="t", run_id="other", clock=clock, transport=t,
                          install_hooks=False, capture_lineage=False)
    for s in range(1, 11 * 60):
        clock.t = t0 + s * MIN
        other.step(s, loss=1.0, now_ms=clock.t, step_ms=55_000.0, samples=64)
    other.finish("succeeded", now_ms=clock.t)
    codec = load_codec()
    msgs = sorted(t.messages, key=lambda m: int(codec.decode(m[2]).emitted_at_ms))
    wall = Clock(t0 + 12 * 60 * MIN)  # the burst reaches the processor hours later
    m = MemoryProcessor(clock=wall)
    for i in range(0, len(msgs), 50):
        m.feed(msgs[i:i + 50])
        wall.t += 1000
        m.tick(wall.t)
    for _ in range(200):
        wall.t += 5000
        m.tick(wall.t)
    ties = {(a.run_id, a.alert_id) for a in m.alerts for b in m.alerts
            if a.alert_id == b.alert_id and a.status != b.status
            and a.emitted_at_ms == b.emitted_at_ms}
    assert len(ties) >= 2, [(a.run_id, a.status, a.emitted_at_ms)
                                                for a in m.alerts]
    for a in m.alerts:  # rw.alerts, as the processor published it, into the sink's rows
        t.messages.append((ALERTS, a.run_id, codec.encode(a)))
    db, client = store_capture(store.url, t, [*runs, "other"])
    for rid in runs:
        got = cli_json(store.url, db, "investigate", rid)
        assert [(a["detector"], a["status"]) for a in got["alerts"]] == [
            ("rule:missing_data_report", "resolved")], (rid, got["alerts"])
    client.command(f"DROP DATABASE {db}")
