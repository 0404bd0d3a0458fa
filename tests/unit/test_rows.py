from __future__ import annotations

import math

import pytest

from runwatch.core.codec import load_codec
from runwatch.core.storage.rows import COLUMNS, Origin, RowError, check_row, record_rows, rows_for
from runwatch.testing.synth import mixed_events

NOW = 1_800_000_000_000
EVENTS = mixed_events(seed=1, runs=8, ticks=60, start_ms=NOW - 60_000)
KINDS = sorted({e.kind for e in EVENTS})


@pytest.mark.parametrize("kind", KINDS)
def test_every_record_kind_maps_to_rows_of_the_right_width(kind: str) -> None:
    event = next(e for e in EVENTS if e.kind == kind)
    origin = Origin("rw.x", 3, 42)
    rows = record_rows(event.record, origin)
    assert rows
    for table, row in rows:
        assert len(row) == len(COLUMNS[table]), table
        cols = dict(zip(COLUMNS[table], row, strict=True))
        assert cols["event_id"] == event.record.event_id
        assert (cols["kafka_topic"], cols["kafka_partition"], cols["kafka_offset"]) == (
            "rw.x",
            3,
            42,
        )
        assert check_row(table, row, NOW) is None


def test_node_sample_explodes_one_row_per_gpu_and_attributes_runs() -> None:
    event = next(e for e in EVENTS if e.kind == "NodeSample")
    rows = record_rows(event.record, Origin("t", 0, 0))
    gpu = [dict(zip(COLUMNS[t], r, strict=True)) for t, r in rows if t == "gpu_samples"]
    host = [r for t, r in rows if t == "host_samples"]
    assert len(gpu) == len(event.record.gpus) and len(host) == 1
    assert [g["gpu_index"] for g in gpu] == [g.index for g in event.record.gpus]
    assert {g["run_id"] for g in gpu} == {p.run_id for g in event.record.gpus for p in g.processes}
    assert [g["util_pct"] for g in gpu] == [g.util_pct for g in event.record.gpus]


def test_fast_dict_path_equals_dataclass_path() -> None:
    codec = load_codec()
    for event in EVENTS[:200]:
        name, d = codec.decode_dict(codec.encode(event.record))
        assert rows_for(name, d, Origin("t", 1, 2)) == record_rows(event.record, Origin("t", 1, 2))


@pytest.mark.parametrize(
    ("name", "record"),
    [
        ("runwatch.v1.Nope", {}),
        ("runwatch.v1.StepTiming", {"event_id": "x"}),
    ],
)
def test_unmappable_records_raise(name: str, record: dict) -> None:
    with pytest.raises(RowError):
        rows_for(name, record, Origin("t", 0, 0))


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("ts", 1000, "absurd timestamp"),
        ("ts", NOW + 2 * 86_400_000, "absurd timestamp"),
        ("util_pct", 150.0, "outside 0..100"),
        ("util_pct", math.nan, "outside 0..100"),
    ],
)
def test_check_row_rejects(field: str, value: object, reason: str) -> None:
    event = next(e for e in EVENTS if e.kind == "NodeSample")
    table, row = next(
        (t, r) for t, r in record_rows(event.record, Origin("t", 0, 0)) if t == "gpu_samples"
    )
    bad = list(row)
    bad[COLUMNS[table].index(field)] = value
    assert reason in (check_row(table, tuple(bad), NOW) or "")
