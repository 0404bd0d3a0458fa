"""The plain runtime's changelog-backed table and its commit rule; no broker.

The table's producer is replaced by a recorder of what would be produced: the
table's own logic (write-behind, partitions, restore, drop) is under test.
"""

from __future__ import annotations

from typing import Any

from runwatch.adapters.changelog import ChangelogTable


class Recorder:
    """Stands in for StreamProducer: keeps what the table hands over."""

    writer_id = b"me"

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int | None, bool]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                partition: int | None = None, *, mark: bool = False) -> None:
        self.sent.append((topic, key, value, partition, mark))


def table(part: list[int], *, is_global: bool = False) -> tuple[ChangelogTable, Recorder]:
    rec = Recorder()
    t = ChangelogTable("runstate", "app-runstate-changelog", rec, lambda: part[0],  # type: ignore[arg-type]
                       is_global=is_global)
    return t, rec


def test_writes_go_out_once_per_batch_newest_value_in_the_event_partition() -> None:
    part = [3]
    t, rec = table(part)
    t[b"run-a"] = b"1"
    t[b"run-a"] = b"2"
    part[0] = 5
    t[b"run-b"] = b"x"
    assert rec.sent == []  # nothing is produced before write_behind
    assert t.get(b"run-a") == b"2" and b"run-b" in t and len(t) == 2
    assert t.write_behind() == 2
    assert rec.sent == [("app-runstate-changelog", b"run-a", b"2", 3, False),
                        ("app-runstate-changelog", b"run-b", b"x", 5, False)]
    assert t.write_behind() == 0  # nothing new


def test_restore_applies_records_in_order_and_tombstones_delete() -> None:
    t, rec = table([0])
    records: list[tuple[int, bytes, Any]] = [(1, b"a", b"old"), (2, b"b", b"keep"),
                                             (1, b"a", b"new"), (2, b"c", b"x"), (2, b"c", None)]
    t.load(records)
    assert dict(t.data) == {b"a": b"new", b"b": b"keep"}
    assert t.write_behind() == 0 and rec.sent == []  # restored values are not written back


def test_drop_forgets_the_keys_of_partitions_no_longer_held() -> None:
    part = [1]
    t, _ = table(part)
    t.load([(1, b"a", b"1"), (2, b"b", b"2")])
    t[b"c"] = b"3"  # written while processing partition 1, not yet produced
    assert t.drop({1}) == 2
    assert list(t.keys()) == [b"b"]
    assert t.write_behind() == 0  # a dropped partition's pending write is not produced


def test_a_global_table_marks_its_writes_for_the_follower() -> None:
    t, rec = table([4], is_global=True)
    t[b"workload"] = b"{}"
    t.write_behind()
    assert rec.sent == [("app-runstate-changelog", b"workload", b"{}", 4, True)]


def test_offsets_pass_only_messages_that_owe_no_ack() -> None:
    from collections import deque

    from runwatch.processor.plain import TP, Message, committable

    a, b = TP("rw.learning", 0), TP("rw.exec.node", 3)
    ma = [Message(a, off) for off in (10, 11, 12, 13)]
    mb = [Message(b, off) for off in (5, 6)]
    ma[2].incref()  # held by a deferred save until the next checkpoint
    for m in ma + mb:
        m.refs -= 1  # the stream's own ack
    pending = {a: deque(ma), b: deque(mb)}
    assert committable(pending) == {("rw.learning", 0): 12, ("rw.exec.node", 3): 7}
    assert [m.offset for m in pending[a]] == [12, 13]  # 13 is acked but waits behind 12
    assert committable(pending) == {}  # nothing moved
    ma[2].refs -= 1  # the checkpoint's ack
    assert committable(pending) == {("rw.learning", 0): 14}
    assert not pending[a] and not pending[b]


def test_a_delete_writes_a_tombstone_to_the_partition_the_key_was_written_to() -> None:
    part = [3]
    t, rec = table(part)
    t[b"run-a"] = b"1"
    t[b"run-b"] = b"2"
    t.write_behind()
    part[0] = 6  # the delete comes while another partition's event is current
    del t[b"run-a"]
    assert b"run-a" not in t and len(t) == 1
    assert t.write_behind() == 1
    assert rec.sent[-1] == ("app-runstate-changelog", b"run-a", None, 3, False)
    t.load([(3, b"run-a", None)])  # a restore replaying the tombstone leaves it deleted
    t[b"run-a"] = b"again"  # a key written again after its delete goes where it is written now
    t.write_behind()
    assert rec.sent[-1] == ("app-runstate-changelog", b"run-a", b"again", 6, False)
    assert t.drop({6}) == 1 and b"run-a" not in t
