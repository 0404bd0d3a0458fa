from __future__ import annotations

import pytest

from runwatch.core.rows import Origin
from runwatch.sink.batch import SeenEvents, dedup_token, should_skip


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ([Origin("t", 0, 1), Origin("t", 0, 5)], [Origin("t", 0, 5), Origin("t", 0, 1)], True),
        ([Origin("t", 0, 1), Origin("t", 0, 5)], [Origin("t", 0, 1), Origin("t", 0, 6)], False),
        ([Origin("t", 0, 1)], [Origin("t", 1, 1)], False),
        (
            [Origin("t", 0, 1), Origin("t", 0, 2)],
            [Origin("t", 0, 1), Origin("t", 0, 2), Origin("t", 0, 2)],
            False,
        ),
    ],
)
def test_dedup_token_follows_offset_ranges(a: list[Origin], b: list[Origin], same: bool) -> None:
    assert (dedup_token("gpu_samples", a) == dedup_token("gpu_samples", b)) is same
    assert dedup_token("gpu_samples", a) != dedup_token("host_samples", a)


def test_seen_events_tells_replays_from_duplicates() -> None:
    seen = SeenEvents(capacity=2)
    assert not seen.is_duplicate("e1", Origin("t", 0, 1))
    assert not seen.is_duplicate("e1", Origin("t", 0, 1))  # re-read of the same offset
    assert seen.is_duplicate("e1", Origin("t", 0, 9))  # same event at another offset
    seen.is_duplicate("e2", Origin("t", 0, 2))
    seen.is_duplicate("e3", Origin("t", 0, 3))
    assert not seen.is_duplicate("e1", Origin("t", 0, 9))  # forgotten (bounded window)


@pytest.mark.parametrize(("offset", "skip"), [(9, True), (10, True), (11, False)])
def test_watermark_skip(offset: int, skip: bool) -> None:
    marks = {("gpu_samples", "rw.exec.node", 2): 10}
    assert should_skip(marks, "gpu_samples", Origin("rw.exec.node", 2, offset)) is skip
    assert not should_skip(marks, "host_samples", Origin("rw.exec.node", 2, offset))
