"""``runwatch sink``: Kafka rw.* topics → ClickHouse raw tables.

Size: one consuming loop with its group callbacks and its start-up reads from the store
(high-water marks, ended runs, stored event ids); batching and the writer are their own
modules.

Two threads. The consuming thread polls (:class:`BatchConsumer`), decodes (dict
path, one message at a time; the codec reads current-schema bodies with cavro),
maps records into per-table columns
(:mod:`runwatch.core.storage.colbatch` for the hot types, ``rows_for`` for the rest)
and, by size or time, hands the rows consumed since the last flush to the
:class:`~runwatch.sink.writer.Writer` thread, which inserts them while the next
batch is consumed. Offsets are committed (from the consuming thread) only after
the writer stored every batch up to them; batches are written strictly in
order. When the writer's bounded queue is full (ClickHouse slow or down) the
consumer pauses its partitions and keeps polling only to keep the group
membership; it resumes when there is room. On a rebalance the consumer waits
for the writer to finish, commits, and drops the not yet flushed rows of the
revoked partitions (the next owner re-reads them).
See :mod:`runwatch.sink.batch` for idempotency.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from runwatch.adapters import clickhouse as ch
from runwatch.adapters.kafka import BatchConsumer, Message, TopicPartition
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.core.codec import DecodeError, load_codec
from runwatch.core.storage.colbatch import append_fast, undo
from runwatch.core.storage.rows import (
    COLUMNS,
    SUMMARISED_STATES,
    Origin,
    RowError,
    check_row,
    dead_letter_row,
    rows_for,
)
from runwatch.resources import summary_sql_file
from runwatch.sink.batch import FlushBatch, ReadUpTo, SeenEvents
from runwatch.sink.settings import SinkSettings
from runwatch.sink.writer import Writer, WriterStopped

logger = logging.getLogger(__name__)
T = TypeVar("T")

_TERMINAL = frozenset(SUMMARISED_STATES)  # a run's summary is written when it enters one
ENDED_REMEMBERED = 10_000
"""Ended runs the sink remembers, to rewrite their summaries when late rows arrive."""
_RUN_COLUMN = {t: cols.index("run_id") for t, cols in COLUMNS.items() if "run_id" in cols}
"""Where each table's rows carry their run (a GPU row's is its process's run)."""
_STATE = COLUMNS["job_events"].index("state")
_RUN = COLUMNS["job_events"].index("run_id")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Sink:
    """One sink worker (a Kafka consumer group member)."""

    def __init__(
        self,
        settings: SinkSettings,
        kafka: KafkaSettings,
        clickhouse: ClickHouseSettings,
        stop: threading.Event | None = None,
    ) -> None:
        """Wire the consumer, the codec, the ClickHouse client and the writer thread."""
        self.settings = settings
        self.db = clickhouse.database
        self.stop = stop or threading.Event()
        self.codec = load_codec()
        self.clickhouse = clickhouse
        self.client: Any = None
        self.batch = FlushBatch()
        # runs seen ending, newest last: rows of theirs that arrive later (other topics and
        # partitions lag behind the end event) rewrite the summary once they are stored
        self.ended: OrderedDict[str, None] = OrderedDict()
        self.ended_loaded = False  # read from the store with the first high-water marks
        self.seq = 0
        # (topic, partition) -> {table: largest stored offset}
        self.watermarks: dict[tuple[str, int], dict[str, int]] = {}
        self.refresh_marks = True
        self.seen = SeenEvents(settings.dedup_window)
        self.read = ReadUpTo()  # what this process read already (a failed commit re-reads it)
        self.seen_loaded = settings.dedup_seed_s <= 0  # read from the store once, at start
        self.first_pending_ms: int | None = None
        self.counts = {"messages": 0, "dead_letters": 0, "duplicates": 0, "skipped": 0,
                       "reread": 0}
        summary = settings.summary_sql or summary_sql_file()
        summary_sql = summary.read_text(encoding="utf-8").replace("${db}", self.db)
        self.writer = Writer(settings, self._new_client, self.db, summary_sql, self.stop)
        self.consumer = BatchConsumer(
            kafka,
            settings.group_id,
            list(settings.topic_list()),
            extra={"max.poll.interval.ms": 600_000},
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
        )

    @property
    def stats(self) -> dict[str, int]:
        """Counters: messages, rows stored, dead letters, duplicates, skipped, reread.

        ``skipped`` counts rows the store held already (its high-water marks), ``reread``
        messages this process had read already (delivered again after a failed commit).
        """
        w = self.writer.stats
        return {
            **self.counts,
            "rows": w["rows"],
            "dead_letters": self.counts["dead_letters"] + w["dead_letters"],
        }

    # ---------------------------------------------------------------- group
    def _on_assign(self, _parts: list[TopicPartition]) -> None:
        self.refresh_marks = True

    def _on_revoke(self, parts: list[TopicPartition]) -> None:
        # Whatever the writer holds is stored (or given up) before the next
        # owner reads the high-water marks; unflushed rows are re-read by it.
        self.writer.wait_idle()
        self._commit()
        self.batch.drop_partitions({(p.topic, p.partition) for p in parts})

    # ---------------------------------------------------------------- client
    def _new_client(self) -> Any:
        return ch.make_client(self.clickhouse, database="")

    def _read_watermarks(self) -> None:
        """Read the stored high-water marks, pausing consumption while ClickHouse is away."""
        delay = self.settings.backoff_initial_s
        while True:
            try:
                if self.client is None:
                    self.client = self._new_client()
                marks = ch.read_watermarks(self.client, self.db)
                break
            except ch.ClickHouseUnavailable as exc:
                logger.warning(
                    "ClickHouse unavailable during read watermarks (%s); retry in %.1fs",
                    str(exc)[:200],
                    delay,
                )
                self.client = None
                was_paused = self.consumer.paused
                self.consumer.pause()
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline:
                    self._take(self.consumer.poll_batch(self.settings.poll_records, 0.1))
                    if self.stop.is_set():
                        raise
                if not was_paused:
                    self.consumer.resume()
                delay = min(delay * 2, self.settings.backoff_max_s)
        by_tp: dict[tuple[str, int], dict[str, int]] = {}
        for (table, topic, part), off in marks.items():
            by_tp.setdefault((topic, part), {})[table] = off
        self.watermarks = by_tp
        if not self.ended_loaded:
            self._load_ended()
        if not self.seen_loaded:
            self._load_seen()

    @staticmethod
    def _from_store(what: str, read: Callable[[], T], otherwise: str) -> T | None:
        """Return what a start-up read gives, or None (logged, with its consequence)."""
        try:
            return read()
        except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
            logger.warning("could not read %s (%s); %s", what, str(exc)[:200], otherwise)
            return None

    def _load_ended(self) -> None:
        """Start the memory of ended runs from the store (once per process).

        A run whose end event was stored before a restart (or by another sink
        process) can still have rows on their way: another topic's, or ones the
        restart replays. Remembering it makes them rewrite its summary.
        """
        runs = self._from_store(
            "the ended runs to remember",
            lambda: ch.read_ended_runs(self.client, self.db, ENDED_REMEMBERED),
            "late rows of runs that ended before this start rewrite their summaries only "
            "through the sweep")
        if runs is None:
            return
        self.ended_loaded = True
        for run in runs:
            self.ended.setdefault(run, None)
        while len(self.ended) > ENDED_REMEMBERED:
            self.ended.popitem(last=False)

    def _load_seen(self) -> None:
        """Start the memory of event ids from the store (once per process).

        A producer's copy of a record (its spool replaying what the broker took but
        did not acknowledge) can reach a sink that restarted after storing the
        original: without the stored ids it would be stored again, and the rollups,
        which no merge corrects, would count it twice.
        """
        since = _now_ms() - int(self.settings.dedup_seed_s * 1000)
        t0 = time.monotonic()
        ids = self._from_store(
            "the stored event ids to remember",
            lambda: ch.read_stored_event_ids(self.client, self.db, since,
                                             self.settings.dedup_window),
            "a producer's copy of a record stored before this start is stored again until "
            "a merge removes it")
        if ids is None:
            return
        self.seen_loaded = True
        self.seen.remember(ids)
        logger.info("remembering %d event ids stored in the last %.0f s (duplicates of them "
                    "are dropped), read in %.1f s", len(ids), self.settings.dedup_seed_s,
                    time.monotonic() - t0)

    # ---------------------------------------------------------------- intake
    def _dead(
        self, origin: Origin, stage: str, table: str, reason: str, value: bytes, key: bytes | None
    ) -> None:
        row = dead_letter_row(
            event_id=f"{origin.topic}:{origin.partition}:{origin.offset}:{table}",
            now_ms=_now_ms(),
            stage=stage,
            target_table=table,
            origin=origin,
            reason=reason,
            original=value,
            key=key,
        )
        self.batch.add("dead_letters", row)
        self.counts["dead_letters"] += 1

    def _take(self, msgs: list[Message]) -> None:
        """Decode and map consumed messages into the current batch.

        One message at a time, so each decoded dict is freed right after its
        rows are taken (the garbage collector never sees a batch of them).
        Hot record types go straight into columns (:func:`append_fast`); any
        other record, and any record that path declines, takes the row path.
        """
        if not msgs:
            return
        batch = self.batch
        batch.messages.extend(msgs)
        offsets = batch.offsets
        marks_of = self.watermarks
        seen = self.seen
        decode = self.codec.decode_dict
        columns = batch.columns
        now = _now_ms()
        self.counts["messages"] += len(msgs)
        again = self.read.again
        for msg in msgs:
            topic, part, off = str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0)
            if again(offsets, topic, part, off):  # notes off in offsets either way
                self.counts["reread"] += 1  # stored, or in this batch, already
                continue
            value = msg.value() or b""
            try:
                name, record = decode(value)
            except DecodeError as exc:
                self._dead(Origin(topic, part, off), "decode", "", exc.reason, value, msg.key())
                continue
            marks = marks_of.get((topic, part))
            if marks is None or off > max(marks.values(), default=-1):
                undo_marks = append_fast(name, record, (topic, part, off), now, columns)
                if undo_marks is not None:
                    if seen.is_duplicate_at(str(record.get("event_id")), topic, part, off):
                        undo(undo_marks)
                        self.counts["duplicates"] += 1
                    continue
            self._take_rows(msg, value, name, record, Origin(topic, part, off), marks, now)
        batch.count()

    def _take_rows(
        self,
        msg: Message,
        value: bytes,
        name: str,
        record: dict[str, Any],
        origin: Origin,
        marks: dict[str, int] | None,
        now: int,
    ) -> None:
        """Map one record through ``rows_for``: the general path, with every check."""
        batch = self.batch
        try:
            rows = rows_for(name, record, origin)
        except RowError as exc:
            self._dead(origin, "map", "", str(exc), value, msg.key())
            return
        if self.seen.is_duplicate(str(record.get("event_id")), origin):
            self.counts["duplicates"] += 1
            return
        off = origin.offset
        for table, row in rows:
            if table == "job_events" and row[_STATE] in _TERMINAL:
                # also on a replay: the summary may not have been written yet
                batch.ended_runs.add(str(row[_RUN]))
                self.ended[str(row[_RUN])] = None
                if len(self.ended) > ENDED_REMEMBERED:
                    self.ended.popitem(last=False)
            elif table == "job_events":
                self.ended.pop(str(row[_RUN]), None)  # retried under the same run id
            if marks is not None and off <= marks.get(table, -1):
                self.counts["skipped"] += 1
                i = _RUN_COLUMN.get(table)
                if i is not None and row[i] in self.ended:
                    # stored before a restart, maybe without its run's summary rewrite
                    batch.ended_runs.add(row[i])
                continue
            reason = check_row(table, row, now)
            if reason is not None:
                self._dead(origin, "validate", table, reason, value, msg.key())
                continue
            batch.add(table, row)

    # ---------------------------------------------------------------- output
    def _commit(self) -> None:
        offsets = self.writer.committable()
        if not offsets:
            return
        try:
            self.consumer.commit_offsets(offsets)
        except Exception as exc:  # noqa: BLE001 - a lost commit only means a replay
            logger.warning("offset commit failed (rows are stored; what the consumer reads "
                           "again is skipped): %s", exc)

    def _hand_over(self) -> None:
        """Queue the current batch for the writer and start a new one.

        Rows of runs that have ended (their GPU rows attributed to runs as stored)
        make the writer rewrite those runs' summaries once the rows are in.
        """
        if self.ended:
            for table, cols in self.batch.tables.items():
                i = _RUN_COLUMN.get(table)
                if i is not None and len(cols):
                    self.batch.ended_runs.update(self.ended.keys() & set(cols.data[i]))
        if self.batch.offsets:
            self.seq += 1
            self.batch.seq = self.seq
            self.writer.submit(self.batch)
            self.read.hand_over(self.batch.offsets)
        self.batch = FlushBatch()
        self.first_pending_ms = None

    def flush(self) -> None:
        """Write everything consumed so far, wait for it, then commit the offsets."""
        self._hand_over()
        self.writer.wait_idle()
        self.writer.check()
        self._commit()

    def _due(self) -> bool:
        if self.batch.rows >= self.settings.batch_rows:
            return True
        if self.first_pending_ms is None:
            return False
        return _now_ms() - self.first_pending_ms >= self.settings.batch_ms

    def run_once(self) -> int:
        """Poll once, hand over a batch when due, commit what is stored.

        Returns:
            The number of messages taken.
        """
        self.writer.check()
        if self.refresh_marks:
            self.refresh_marks = False
            self._read_watermarks()
        timeout = 0.2
        if self.consumer.paused:  # the writer is behind: wait for it, then poll
            self.writer.wait_room(0.2)
            timeout = 0.0
        msgs = self.consumer.poll_batch(self.settings.poll_records, timeout)
        self._take(msgs)
        if self.batch.offsets and self.first_pending_ms is None:
            self.first_pending_ms = _now_ms()
        if self._due() or (not msgs and self.batch.offsets):
            if self.writer.has_room():
                self._hand_over()
                self.consumer.resume()
            else:
                self.consumer.pause()  # backpressure: the writer is behind
        elif self.consumer.paused and self.writer.has_room():
            # nothing pending (a rebalance dropped it): resume, or stay paused forever
            self.consumer.resume()
        self._commit()
        return len(msgs)

    def run(self) -> None:
        """Run until ``stop`` is set; flush and close on the way out."""
        logger.info("sink consuming %s into %s", ",".join(self.settings.topic_list()), self.db)
        try:
            try:
                while not self.stop.is_set():
                    self.run_once()
            except ch.ClickHouseUnavailable:
                if not self.stop.is_set():
                    raise
                # stopped while waiting for the store to read its high-water marks: nothing
                # was handed over since, the next start reads them (it ended in a traceback)
                logger.warning("stopped during a ClickHouse outage, before the stored offsets "
                               "were read: nothing new was written or committed")
                return
            self._hand_over()
            self.writer.wait_idle()
            if isinstance(self.writer.error, WriterStopped):
                logger.warning("stopped during a ClickHouse outage: the last batches are replayed")
            else:
                self.writer.check()
        finally:
            self.writer.close()
            self._commit()
            self.consumer.close()
            logger.info("sink stopped: %s", self.stats)
