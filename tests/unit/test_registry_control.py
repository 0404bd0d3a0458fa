"""Registry control (rule:registry_without_gate) through the SDK and a worker driven in memory.

A model reaches registry status ``registered``; its run's gate decision may be
processed before it, shortly after it (within the processor's wait: no page)
or not at all (a hard alert with cause ``artifact``). The worker's clock is
set explicitly, so the wait is exact.
"""

from __future__ import annotations

import pytest

import runwatch
from runwatch.adapters.publisher import CaptureTransport
from runwatch.core.records import Alert
from runwatch.processor.memory import MemoryProcessor
from runwatch.processor.settings import ProcessorSettings

T0 = 1_800_000_000_000
WAIT = 60_000


def _messages(steps: list[tuple[str, str]]) -> list[list[tuple[str, bytes | str | None, bytes]]]:
    """Publish a run and then each step; return the messages of each step apart."""
    t = CaptureTransport()
    run = runwatch.init("fam", run_id="run-reg", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    run.finish(now_ms=T0 + 500)  # flushes the manifest and job events
    batches = [list(t.messages)]
    for i, (what, value) in enumerate(steps):
        t2 = CaptureTransport()
        r = runwatch.init("fam", run_id="run-reg", transport=t2, install_hooks=False,
                          capture_lineage=False, clock=lambda: T0)
        if what == "gate":
            if value == "approved":
                r.gate("release", "review", evaluator="runwatch gate check", now_ms=T0 + 1_000 + i)
                r.gate("release", "pass", evaluator="human:ana", now_ms=T0 + 1_001 + i)
            else:
                r.gate("release", value, now_ms=T0 + 1_000 + i)
        else:
            r.artifact("s3://models/m1", "model", sha256="ab" * 32, registry_status=value,
                       now_ms=T0 + 1_000 + i)
        r.finish(now_ms=T0 + 2_000 + i)
        batches.append([m for m in t2.messages if m[0] == "rw.artifact"])
    return batches


@pytest.mark.parametrize(("steps", "gap_ms", "want"), [
    ([("artifact", "registered")], 0, [("rule:registry_without_gate", "artifact")]),
    ([("gate", "pass"), ("artifact", "registered")], 0, []),
    ([("gate", "approved"), ("artifact", "registered")], 0, []),  # a review a human approved
    ([("gate", "review"), ("artifact", "registered")], 0,
     [("rule:registry_without_gate", "artifact")]),
    ([("gate", "fail"), ("artifact", "registered")], 0,
     [("rule:failed_gate", "artifact"), ("rule:registry_without_gate", "artifact")]),
    ([("artifact", "registered"), ("gate", "pass")], 10_000, []),  # the pass arrived in time
    ([("artifact", "registered"), ("gate", "pass")], WAIT + 1_000,  # too late: it paged
     [("rule:registry_without_gate", "artifact")]),
    ([("artifact", "staged")], 0, [("rule:registry_without_gate", "artifact")]),
    ([("artifact", "rejected")], 0, [("rule:registry_status", "artifact")]),  # not in use
])
def test_a_registration_without_a_passing_gate_pages(steps, gap_ms, want) -> None:
    clock = [T0 + 10_000]
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0, gate_wait_ms=WAIT),
                        clock=lambda: clock[0])
    batches = _messages(steps)
    m.feed(batches[0])
    m.feed(batches[1])
    clock[0] += gap_ms
    m.tick(clock[0])
    for b in batches[2:]:
        m.feed(b)
    clock[0] += WAIT
    m.tick(clock[0])
    assert [d.reason for d in m.dead] == []
    fired = sorted({(a.detector, a.probable_cause) for a in m.alerts
                    if isinstance(a, Alert) and a.status == "firing"})
    assert fired == want
    for a in m.alerts:
        if isinstance(a, Alert) and a.detector == "rule:registry_without_gate":
            assert a.severity == "critical"
            assert "s3://models/m1" in a.title


def test_registry_control_can_be_turned_off() -> None:
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0, registry_control=False),
                        clock=lambda: T0 + 10_000)
    for b in _messages([("artifact", "registered")]):
        m.feed(b)
    m.tick(T0 + 10_000 + 2 * WAIT)
    assert [a for a in m.alerts if isinstance(a, Alert)] == []


@pytest.mark.parametrize(("spread", "want"), [
    (0.05, [("rule:failed_gate", "artifact"), ("rule:seed_variance", "learning")]),
    (0.01, []),
])
def test_a_gate_measuring_too_much_spread_across_seeds_raises_a_learning_signal(
        spread, want) -> None:
    t = CaptureTransport()
    run = runwatch.init("fam", run_id="run-seeds", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    bad = spread > 0.02
    run.gate("release", "fail" if bad else "pass", evaluator="runwatch gate check",
             measured={"seed_spread.auc": spread, "auc": 0.8},
             thresholds={"seed_spread.auc": 0.02}, now_ms=T0 + 1_000,
             reasons=["fail: spread of auc across 3 seeds"] if bad else ())
    run.finish(now_ms=T0 + 2_000)
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0), clock=lambda: T0 + 10_000)
    m.feed(t.messages)
    m.tick(T0 + 10_000 + 2 * WAIT)
    assert sorted({(a.detector, a.probable_cause) for a in m.alerts
                   if isinstance(a, Alert) and a.status == "firing"}) == want


@pytest.mark.parametrize(("gate_after_ms", "want"), [
    (20 * 60_000, [("rule:registry_without_gate", "artifact")]),  # passed 20 minutes later
    (30_000, []),  # within the clocks' allowance (GATE_WAIT_MS): made in time
])
@pytest.mark.parametrize("order", ["pass_read_first", "registration_read_first"])
def test_a_pass_made_after_the_registration_does_not_settle_it_in_a_replay(
        gate_after_ms: int, want: list, order: str) -> None:
    """Registered at T+600 s, its gate passed at T+1,800 s. Live it paged (the wait ran
    out first); read in one burst (a replay, a backfill) the pass settled it whatever
    its time, and no page went out."""
    t = CaptureTransport()
    run = runwatch.init("fam", run_id="run-reg", transport=t, install_hooks=False,
                        capture_lineage=False, clock=lambda: T0)
    reg_at = T0 + 600_000
    run.artifact("s3://models/m1", "model", sha256="ab" * 32, registry_status="registered",
                 now_ms=reg_at)
    run.gate("release", "pass", now_ms=reg_at + gate_after_ms)
    run.finish(now_ms=reg_at + gate_after_ms + 1_000)
    msgs = list(t.messages)
    if order == "pass_read_first":  # the gate's producer's records reached Kafka first
        art = [m for m in msgs if m[0] == "rw.artifact"]
        msgs = [m for m in msgs if m[0] != "rw.artifact"] + art[::-1]
    m = MemoryProcessor(ProcessorSettings(save_interval_s=0, gate_wait_ms=WAIT),
                        clock=lambda: T0 + 10**7)
    m.feed(msgs)
    m.tick(T0 + 10**7 + 2 * WAIT)
    assert [d.reason for d in m.dead] == []
    assert sorted({(a.detector, a.probable_cause) for a in m.alerts
                   if isinstance(a, Alert) and a.status == "firing"}) == want
