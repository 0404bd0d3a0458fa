"""Sink.run_once resumes a paused consumer once the writer has room, even with nothing pending.

A rebalance while paused (writer behind) drops the unflushed rows of the revoked
partitions; with an empty batch nothing is handed over, and the consumer used
to stay paused for good (seen with two sink processes in one group).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from runwatch.sink.batch import FlushBatch, ReadUpTo, SeenEvents
from runwatch.sink.service import Sink
from runwatch.sink.settings import SinkSettings


class FakeConsumer:
    def __init__(self, paused: bool) -> None:
        self.paused = paused
        self.polls = 0

    def poll_batch(self, _n: int, _timeout: float) -> list[Any]:
        self.polls += 1
        return []

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def commit_offsets(self, _offsets: Any) -> None:
        raise AssertionError("nothing to commit")


class FakeWriter:
    def __init__(self, room: bool) -> None:
        self.room = room
        self.submitted: list[FlushBatch] = []

    def check(self) -> None:
        pass

    def has_room(self) -> bool:
        return self.room

    def wait_room(self, _timeout: float) -> bool:
        return self.room

    def committable(self) -> dict[tuple[str, int], int]:
        return {}

    def submit(self, batch: FlushBatch) -> None:
        self.submitted.append(batch)


def _sink(paused: bool, room: bool, pending: bool) -> Sink:
    sink = Sink.__new__(Sink)
    sink.settings = SinkSettings()
    sink.consumer = FakeConsumer(paused)  # type: ignore[assignment]
    sink.writer = FakeWriter(room)  # type: ignore[assignment]
    sink.batch = FlushBatch()
    if pending:
        sink.batch.offsets[("t", 0)] = 5
    sink.first_pending_ms = None
    sink.refresh_marks = False
    sink.seq = 0
    sink.seen = SeenEvents(10)
    sink.read = ReadUpTo()
    sink.ended = OrderedDict()
    return sink


@pytest.mark.parametrize(
    ("paused", "room", "pending", "paused_after", "handed_over"),
    [
        (True, True, False, False, 0),  # the stuck case: empty batch, room again
        (True, False, False, True, 0),  # writer still behind: stay paused
        (True, True, True, False, 1),  # pending rows: hand over, resume
        (True, False, True, True, 0),
        (False, True, False, False, 0),
        (False, False, True, True, 0),  # pending, no room: pause
    ],
)
def test_run_once_pause_resume(
    paused: bool, room: bool, pending: bool, paused_after: bool, handed_over: int
) -> None:
    sink = _sink(paused, room, pending)
    sink.run_once()
    assert sink.consumer.paused is paused_after
    assert len(sink.writer.submitted) == handed_over  # type: ignore[attr-defined]
