from __future__ import annotations

import pytest

from runwatch.core.storage.rows import Origin
from runwatch.sink.batch import FlushBatch, ReadUpTo, SeenEvents, dedup_token, should_skip


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
    rows_a = [("x", o.topic, o.partition, o.offset) for o in a]
    rows_b = [("y", o.topic, o.partition, o.offset) for o in b]
    assert (dedup_token("gpu_samples", rows_a) == dedup_token("gpu_samples", rows_b)) is same
    assert dedup_token("gpu_samples", rows_a) != dedup_token("host_samples", rows_a)


@pytest.mark.parametrize(
    ("lost", "left", "offsets"),
    [
        (set(), 4, {("t", 0): 3, ("t", 1): 9}),
        ({("t", 0)}, 1, {("t", 1): 9}),
        ({("t", 0), ("t", 1)}, 0, {}),
        ({("u", 0)}, 4, {("t", 0): 3, ("t", 1): 9}),
    ],
)
def test_flush_batch_drops_revoked_partitions(
    lost: set[tuple[str, int]], left: int, offsets: dict[tuple[str, int], int]
) -> None:
    batch = FlushBatch()
    for table, part, off in [("a", 0, 1), ("a", 0, 2), ("b", 0, 2), ("a", 1, 8)]:
        batch.add(table, ("row", "t", part, off))
    batch.offsets.update({("t", 0): 3, ("t", 1): 9})
    batch.drop_partitions(lost)
    assert batch.rows == left == sum(len(r) for r in batch.tables.values())
    assert batch.offsets == offsets
    assert all((r[1], r[2]) not in lost for cols in batch.tables.values() for r in cols.rows())


def test_seen_events_tells_replays_from_duplicates() -> None:
    seen = SeenEvents(capacity=2)
    assert not seen.is_duplicate("e1", Origin("t", 0, 1))
    assert not seen.is_duplicate("e1", Origin("t", 0, 1))  # re-read of the same offset
    assert seen.is_duplicate("e1", Origin("t", 0, 9))  # same event at another offset
    seen.is_duplicate("e2", Origin("t", 0, 2))
    seen.is_duplicate("e3", Origin("t", 0, 3))
    assert not seen.is_duplicate("e1", Origin("t", 0, 9))  # forgotten (bounded window)


def test_seen_events_remembered_from_the_store() -> None:
    seen = SeenEvents(capacity=2)
    seen.remember([("e1", "t", 0, 1), ("e2", "t", 1, 4), ("e3", "t", 0, 7)])  # oldest first
    assert len(seen) == 2
    assert not seen.is_duplicate("e3", Origin("t", 0, 7))  # the stored copy read again
    assert seen.is_duplicate("e3", Origin("t", 2, 3))  # a producer's copy elsewhere
    assert seen.is_duplicate("e2", Origin("t", 1, 5))
    assert not seen.is_duplicate("e1", Origin("t", 0, 8))  # the oldest did not fit


@pytest.mark.parametrize(("offset", "skip"), [(9, True), (10, True), (11, False)])
def test_watermark_skip(offset: int, skip: bool) -> None:
    marks = {("gpu_samples", "rw.exec.node", 2): 10}
    assert should_skip(marks, "gpu_samples", Origin("rw.exec.node", 2, offset)) is skip
    assert not should_skip(marks, "host_samples", Origin("rw.exec.node", 2, offset))


def test_what_the_process_read_is_read_again_only_as_a_reread() -> None:
    """Offsets handed to the writer, or in the current batch, are reads again."""
    read = ReadUpTo()
    first: dict[tuple[str, int], int] = {}
    assert [read.again(first, "t", 0, off) for off in (0, 1, 2)] == [False] * 3
    assert read.again(first, "t", 0, 1)  # delivered twice into one batch
    assert first == {("t", 0): 3}  # never moved back
    read.hand_over(first)
    read.hand_over({("t", 0): 2})  # an older level changes nothing
    pending: dict[tuple[str, int], int] = {}
    # the consumer is put back at the committed offset 1 (a failed commit, a rebalance)
    assert [read.again(pending, "t", 0, off) for off in (1, 2, 3)] == [True, True, False]
    assert pending == {("t", 0): 4}  # the reads again are committed with this batch
    assert not read.again(pending, "t", 1, 0)  # another partition
    assert not read.again({}, "u", 0, 0)  # another topic


def test_sink_topics_come_from_the_topic_map(monkeypatch: pytest.MonkeyPatch) -> None:
    from runwatch.core.topics import load_topics
    from runwatch.sink.settings import SinkSettings

    monkeypatch.delenv("RUNWATCH_SINK_TOPICS", raising=False)
    specs = load_topics().values()
    assert SinkSettings().topic_list() == tuple(s.name for s in specs if not s.internal)
    assert not any(s.internal and s.name in SinkSettings().topic_list() for s in specs)
    assert SinkSettings(topics=("a", "b")).topic_list() == ("a", "b")


def test_every_record_a_sink_stores_has_a_table_whose_ids_a_restarted_sink_remembers() -> None:
    from runwatch.adapters.clickhouse import SEEN_TABLES
    from runwatch.core.storage.columns import COLUMNS
    from runwatch.core.storage.rows import record_rows
    from runwatch.testing.synth import mixed_events

    needed = {"event_id", "ts", "kafka_topic", "kafka_partition", "kafka_offset"}
    for table in SEEN_TABLES:
        assert needed <= set(COLUMNS[table]), table
    kinds = set()
    for e in mixed_events(seed=3, runs=8, ticks=3, start_ms=1_764_547_200_000):
        tables = {t for t, _row in record_rows(e.record, Origin("t", 0, 0))}
        assert tables & set(SEEN_TABLES), (e.kind, tables)
        kinds.add(e.kind)
    assert {"NodeSample", "JobEvent", "StepTiming", "LearningStep", "RunManifest"} <= kinds
