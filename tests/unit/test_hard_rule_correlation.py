"""A hard rule pages at once; evidence processed within the correlation delay updates its cause."""

from __future__ import annotations

import math

import pytest

from runwatch.core.records import Alert, Source
from runwatch.core.signals import rules
from runwatch.core.stream import runstate

T = 1_700_000_000_000
SRC = Source(kind="processor", host="t", runwatch_version="0")
NAN = rules.non_finite_learning(math.nan, None, 0, T)
ECC = rules.gpu_errors("node-1", 0, 0, 2, T - 1_000)
IMAGE = rules.image_allowed("evil.io/x", ("registry.local/",), T - 1_000)


def cfg(delay: int = 5_000) -> runstate.RunConfig:
    return runstate.RunConfig(source=SRC, correlation_delay_ms=delay)


def nan_alerts(outs: list) -> list[Alert]:
    return [a for a in outs if isinstance(a, Alert) and a.detector == "rule:non_finite"]


def test_a_hard_rule_pages_at_once_even_with_a_correlation_delay() -> None:
    st = runstate.new_state("r")
    outs = runstate.emit(st, cfg(), NAN, T, one_shot=True)
    assert [(a.status, a.probable_cause) for a in nan_alerts(outs)] == [("firing", "learning")]


@pytest.mark.parametrize(
    ("evidence", "processed_after_ms", "updated_cause"),
    [
        (ECC, 1_000, "infrastructure"),  # a plausible cause processed within the delay
        (ECC, 6_000, "infrastructure"),  # after the delay, stamped before the NaN: it listens
        (ECC, 5_000 + runstate.LATE_EVIDENCE_MS + 1_000, None),  # after that: the page stands
        (IMAGE, 1_000, None),  # not a plausible cause of a NaN loss
    ],
)
def test_late_evidence_updates_the_cause(evidence, processed_after_ms, updated_cause) -> None:
    st = runstate.new_state("r")
    c = cfg()
    first = nan_alerts(runstate.emit(st, c, NAN, T, one_shot=True))
    later = nan_alerts(runstate.emit(st, c, evidence, T + processed_after_ms, one_shot=True))
    if updated_cause is None:
        assert later == []
        return
    assert len(later) == 1
    upd = later[0]
    assert (upd.status, upd.probable_cause) == ("firing", updated_cause)
    assert upd.alert_id == first[0].alert_id and upd.dedup_key == first[0].dedup_key
    assert upd.event_id != first[0].event_id  # a record of its own in the store
    assert any(e.indicator == "ecc_uncorrected" for e in upd.evidence)
    # settled: more evidence does not re-send it
    again = runstate.emit(st, c, rules.gpu_errors("node-1", 1, 79, 0, T - 500), T + 1_500,
                          one_shot=True)
    assert nan_alerts(again) == []


def test_waiting_state_round_trips_through_json() -> None:
    st = runstate.new_state("r")
    c = cfg()
    runstate.emit(st, c, NAN, T, one_shot=True)
    st = runstate.loads(runstate.dumps(st))
    later = nan_alerts(runstate.emit(st, c, ECC, T + 1_000, one_shot=True))
    assert [a.probable_cause for a in later] == ["infrastructure"]
