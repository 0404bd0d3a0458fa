"""Evidence stamped before a symptom but processed after it still names the symptom's cause.

Under load (a worker behind, the data agent's round trip), a feature shift's drift report
reached the run after its validation decline had waited the correlation delay and fired
``learning``; it stayed ``learning`` (the e2e board's ``feature_shift`` under CPU load). A
fired learning symptom now listens ``runstate.LATE_EVIDENCE_MS`` of processing time longer
and is re-sent (same alert id) with the cause late evidence names.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd
from sdk_kit import LAG_MS, Clock, timed

import runwatch
from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client import data
from runwatch.core.codec import load_codec
from runwatch.core.records import Alert, DatasetRef
from runwatch.core.stream.runstate import LATE_EVIDENCE_MS
from runwatch.processor.memory import MemoryProcessor

DAY = 86_400_000
T0 = (int(time.time() * 1000) // DAY - 30) * DAY
STEP_MS = 10_000
DECLINE_STEP = 210
"""The first evaluation whose loss doubled; the decline pages at the next one (step 220)."""
PAGED_MS = 2_200_000
"""When the decline pages (event time after T0): the evaluation of step 220."""


def causes(report_at: int, delivered_ms: int, tmp_path: Any) -> list[str]:
    """The causes of a validation decline's records.

    A run of 10-second steps evaluated every 10 steps, whose validation loss doubles at
    ``DECLINE_STEP``, reads a dataset reported every 30 steps; the report of step
    ``report_at`` (and those after it) shifts its feature. That report reaches the worker
    at ``delivered_ms`` after T0, every other message ``LAG_MS`` after its event time.
    """
    t = CaptureTransport()
    clock = Clock(T0)
    run = runwatch.init("fam", run_id="late1", transport=t, install_hooks=False,
                        capture_lineage=False, clock=clock,
                        datasets=[DatasetRef(uri="s3://d", version="v1")])
    pub = Publisher(t, kind="sdk")
    rng = np.random.default_rng(4)
    late = None
    for i in range(1, PAGED_MS // STEP_MS + 6):  # no evaluation after the one that paged
        clock.t = T0 + i * STEP_MS
        run.step(i, loss=1.0 + 0.001 * float(rng.normal()), lr=1e-3, grad_norm=1.0,
                 samples=64, step_ms=float(STEP_MS), loader_wait_ms=10.0)
        if i % 30 == report_at % 30:
            shift = 5.0 if i >= report_at else 0.0
            rec = data.report("s3://d", "v1", "all",
                              pd.DataFrame({"x": rng.normal(10 + shift, 1, 400)}),
                              baseline="ref", publisher=pub, baseline_directory=tmp_path,
                              now_ms=clock.t)
            if i == report_at:
                late = rec.event_id
        if i % 10 == 0:
            level = 2.0 if i >= DECLINE_STEP else 1.0
            run.validation(i, {"val_loss": level * (1 + 0.005 * float(rng.normal()))})
    run.finish("succeeded", now_ms=clock.t + 1000)
    assert late is not None
    codec = load_codec()
    plan = sorted(((T0 + delivered_ms - LAG_MS if codec.decode(m[2]).event_id == late else at, m)
                   for at, m in timed(t.messages)), key=lambda p: p[0])
    wall = Clock(plan[0][0])
    m = MemoryProcessor(clock=wall)
    tick = plan[0][0] + 60_000
    for at, msg in plan:
        while tick <= at + LAG_MS:  # 5 s ticks around the decline, a minute's elsewhere
            wall.t = tick
            m.tick(tick)
            tick += 5_000 if abs(tick - T0 - PAGED_MS) < 300_000 else 60_000
        wall.t = at + LAG_MS
        m.feed([msg])
    assert [d.reason for d in m.dead] == []
    return [a.probable_cause for a in m.alerts if isinstance(a, Alert)
            and a.status == "firing" and a.detector == "rule:validation_decline"]


def test_a_drift_report_processed_after_the_decline_it_explains_names_its_cause(
        tmp_path) -> None:
    # stamped 11 s before the first declined evaluation, reaching the worker 20 s after
    # the decline paged (as learning: the correlation delay had passed)
    got = causes(DECLINE_STEP - 1, PAGED_MS + 20_000, tmp_path)
    assert got == ["learning", "data"], got


def test_the_same_report_on_time_names_it_at_once(tmp_path) -> None:
    assert causes(DECLINE_STEP - 1, (DECLINE_STEP - 1) * STEP_MS + LAG_MS, tmp_path) == ["data"]


def test_evidence_later_than_the_listening_time_leaves_the_cause(tmp_path) -> None:
    got = causes(DECLINE_STEP - 1, PAGED_MS + LATE_EVIDENCE_MS + 30_000, tmp_path)
    assert got == ["learning"], got


def test_a_shift_stamped_after_the_decline_does_not_explain_it(tmp_path) -> None:
    # stamped 10 s after the evaluation that paged, delivered 20 s after it
    assert causes(PAGED_MS // STEP_MS + 1, PAGED_MS + 20_000, tmp_path) == ["learning"]


def test_the_simulators_board_reads_the_cause_an_alert_was_re_sent_with() -> None:
    from runwatch.sim import scenarios as sc
    from runwatch.sim.scoreboard import AlertSeen, Injection, score

    inj = Injection("r-fs", sc.SCENARIOS["feature_shift"], 1_000)
    first = AlertSeen("r-fs", "rule:validation_decline", "val_loss", "learning", "firing",
                      90_000, "t", alert_id="a1")
    resent = AlertSeen("r-fs", "rule:validation_decline", "val_loss", "data", "firing",
                       90_000, "t", alert_id="a1")
    other = AlertSeen("r-fs", "rule:validation_decline", "val_loss", "learning", "firing",
                      90_000, "t", alert_id="a2")
    assert score([inj], [first, resent], []).rows[0].cause_correct
    assert not score([inj], [first], []).rows[0].cause_correct
    assert not score([inj], [other, resent], []).rows[0].cause_correct  # another alert's


def test_a_repeat_while_it_listens_reaches_its_alert() -> None:
    """A statistical symptom that fired and listens for late evidence still takes its repeats
    (its last sighting, its resolve streak): the listening entry must not swallow them."""
    from runwatch.core.records import Source
    from runwatch.core.signals.rules import Finding
    from runwatch.core.stream import runstate

    src = Source(kind="processor", host="t", runwatch_version="0")
    cfg = runstate.RunConfig(source=src, correlation_delay_ms=5_000)
    st = runstate.new_state("r")

    def watch(at: int) -> Finding:
        return Finding("watch:grad_variance", "grad_variance", "learning", "warning", 9.0, 1.0,
                       0.8, at, "Gradient variance rose", "x", alert=True)

    runstate.emit(st, cfg, watch(T0), T0, one_shot=False)
    fired = runstate.emit(st, cfg, watch(T0 + 6_000), T0 + 6_000, one_shot=False)
    assert [(a.status, a.probable_cause) for a in fired if isinstance(a, Alert)] == [
        ("firing", "learning")]
    runstate.emit(st, cfg, watch(T0 + 20_000), T0 + 20_000, one_shot=False)
    entry = runstate.firing_entry(st, "watch:grad_variance", "grad_variance")
    assert entry is not None and entry["last_seen_ms"] == T0 + 20_000
