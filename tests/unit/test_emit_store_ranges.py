"""Records the store cannot hold are refused where they are made: ``runwatch emit``
(and the sink names the reason when another producer sends one)."""

from __future__ import annotations

import pytest

from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.client.emit import emit_lines
from runwatch.core.codec import load_codec
from runwatch.core.records import JobEvent, Source
from runwatch.core.storage.rows import Origin, check_row, rows_for

T = 1_800_000_000_000


@pytest.mark.parametrize(("line", "why"), [
    ('{"type": "job-state", "run_id": "r", "state": "running", "attempt": -1}',
     "job_events.attempt -1 outside 0..65535"),
    ('{"type": "job-state", "run_id": "r", "state": "running", "attempt": 70000}',
     "job_events.attempt 70000"),
    ('{"type": "job-state", "run_id": "r", "state": "running", '
     '"allocation": {"nodes": ["n1"], "gpu_indices": [-1]}}', "job_events.gpu_indices -1"),
    ('{"type": "LearningStep", "run_id": "r", "step": -1, "epoch": 0, "loss": 1.0, '
     '"metrics": {}}', "learning_steps.step -1"),
    ('{"type": "job-state", "run_id": "r", "state": "running", "emitted_at_ms": -5}',
     "emitted_at_ms -5 is before 2000"),
])
def test_emit_refuses_what_the_store_cannot_hold(line: str, why: str) -> None:
    """They were published (exit 0, "rejected 0") and dead-lettered by the sink at insert
    with "Unable to create native array for column 'attempt'"."""
    t = CaptureTransport()
    res = emit_lines(Publisher(t, kind="cli", clock=lambda: T), [line])
    assert res.published == 0 and len(res.errors) == 1 and why in res.errors[0], res.errors
    assert "the store cannot hold this" in res.errors[0]
    assert t.messages == []


def test_the_sink_names_the_unsigned_column_another_producer_overflowed() -> None:
    rec = JobEvent(event_id="e", run_id="r", emitted_at_ms=T, seq=0,
                   source=Source(kind="hook", host="h", runwatch_version="1"),
                   state="running", attempt=-3)
    d = load_codec().decode_dict(load_codec().encode(rec))[1]
    ((table, row),) = rows_for(JobEvent.AVRO_NAME, d, Origin("rw.exec.job", 0, 1))
    assert check_row(table, row, T) == (
        "job_events.attempt -3 outside 0..65535 (the column is unsigned)")


@pytest.mark.parametrize(("deadline", "stored"), [(0, None), (None, None), (T + 1, T + 1)])
def test_a_deadline_of_0_is_stored_as_none(deadline: int | None, stored: int | None) -> None:
    """``deadline_ms`` 0 sets no deadline (the queue-deadline rule reads it so), and it was
    stored as 1970-01-01 in ``job_events.deadline`` (found by an independent case, 2026-12-07)."""
    rec = JobEvent(event_id="e", run_id="r", emitted_at_ms=T, seq=0,
                   source=Source(kind="hook", host="h", runwatch_version="1"),
                   state="queued", attempt=1, deadline_ms=deadline)
    d = load_codec().decode_dict(load_codec().encode(rec))[1]
    ((table, row),) = rows_for(JobEvent.AVRO_NAME, d, Origin("rw.exec.job", 0, 1))
    from runwatch.core.storage.columns import COLUMNS

    assert row[COLUMNS[table].index("deadline")] == stored
    assert check_row(table, row, T) is None
