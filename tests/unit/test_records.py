"""Unit tests of the record dataclasses: frozen, slotted, defaults, dict mirrors."""

from __future__ import annotations

import dataclasses

import pytest

from runwatch.core.records import (
    ALL_TYPES,
    RECORD_TYPES,
    Alert,
    Evidence,
    JobEvent,
    LearningStep,
    Source,
)

SRC = Source(kind="agent", host="h", runwatch_version="0.1.0")


@pytest.mark.parametrize("cls", list(ALL_TYPES.values()), ids=list(ALL_TYPES))
def test_frozen_slotted_kw_only(cls) -> None:
    params = cls.__dataclass_params__
    assert params.frozen
    assert "__slots__" in cls.__dict__
    assert all(f.kw_only for f in dataclasses.fields(cls))
    assert cls.AVRO_NAME in ALL_TYPES


@pytest.mark.parametrize("cls", list(RECORD_TYPES.values()), ids=list(RECORD_TYPES))
def test_common_fields_lead_every_event(cls) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    assert names[:5] == ["event_id", "run_id", "emitted_at_ms", "source", "seq"]


def test_cannot_mutate() -> None:
    rec = LearningStep(event_id="e", emitted_at_ms=1, source=SRC, seq=1, step=1, loss=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.loss = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("cls", "given", "field", "expected"),
    [
        (LearningStep, {"step": 1, "loss": 1.0}, "nonfinite_count", 0),
        (LearningStep, {"step": 1, "loss": 1.0}, "metrics", {}),
        (JobEvent, {"state": "running"}, "allocation", None),
        (JobEvent, {"state": "running"}, "attempt", 0),
        (Alert, {"alert_id": "a", "dedup_key": "k", "status": "firing", "severity": "critical",
                 "detector": "d", "indicator": "i", "title": "t", "first_seen_ms": 1,
                 "last_seen_ms": 2}, "probable_cause", "unknown"),
    ],
)
def test_from_dict_fills_defaults(cls, given, field, expected) -> None:
    base = {"event_id": "e", "emitted_at_ms": 1, "source": SRC.to_dict(), "seq": 1}
    rec = cls.from_dict(base | given)
    assert getattr(rec, field) == expected
    assert rec.run_id is None


def test_nested_round_trip_through_dicts() -> None:
    alert = Alert(
        event_id="e", run_id="r", emitted_at_ms=1, source=SRC, seq=1, alert_id="a",
        dedup_key="k", status="firing", severity="warning", detector="cusum", indicator="loss",
        title="loss spike", first_seen_ms=1, last_seen_ms=2,
        evidence=(Evidence(signal="learning", indicator="loss", observed=9.0, at_ms=1),),
        labels={"team": "vision"},
    )
    d = alert.to_dict()
    assert d["evidence"][0]["observed"] == 9.0
    assert d["source"] == {"kind": "agent", "host": "h", "runwatch_version": "0.1.0"}
    assert Alert.from_dict(d) == alert


def test_missing_required_field_is_key_error() -> None:
    with pytest.raises(KeyError):
        LearningStep.from_dict({"event_id": "e"})
