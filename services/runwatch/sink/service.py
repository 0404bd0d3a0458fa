"""``runwatch sink``: Kafka rw.* topics → ClickHouse raw tables.

Loop: poll → decode (fast dict path) → rows per table → flush by size or
time → commit offsets only after every table's insert succeeded. ClickHouse
unavailable → pause the partitions, retry with exponential backoff (polling
keeps the group membership), resume. A batch ClickHouse rejects is split in
halves until the bad rows are isolated; those go to ``dead_letters`` with the
error and the rest is stored. Undecodable records go to ``dead_letters`` too.
See :mod:`runwatch.sink.batch` for idempotency.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from runwatch.adapters import clickhouse as ch
from runwatch.adapters.settings import ClickHouseSettings, KafkaSettings
from runwatch.core.codec import DecodeError, load_codec
from runwatch.core.rows import COLUMNS, Origin, RowError, check_row, dead_letter_row, rows_for
from runwatch.sink.batch import Pending, SeenEvents, dedup_token, should_skip
from runwatch.sink.settings import SinkSettings

logger = logging.getLogger(__name__)

_TERMINAL = {"succeeded", "failed", "cancelled"}
_STATE = COLUMNS["job_events"].index("state")
_RUN = COLUMNS["job_events"].index("run_id")
SUMMARY_SQL = Path(__file__).resolve().parents[3] / "schemas" / "clickhouse" / "summary"


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
        """Wire the consumer, the codec and the ClickHouse client."""
        self.settings = settings
        self.db = clickhouse.database
        self.stop = stop or threading.Event()
        self.codec = load_codec()
        self.clickhouse = clickhouse
        self.client: Any = None
        self.pending: dict[str, Pending] = {}
        self.consumed: dict[tuple[str, int], int] = {}
        self.watermarks: dict[tuple[str, str, int], int] = {}
        self.refresh_marks = True
        self.seen = SeenEvents(settings.dedup_window)
        self.ended_runs: set[str] = set()
        self.first_pending_ms: int | None = None
        self.stats = {"messages": 0, "rows": 0, "dead_letters": 0, "duplicates": 0, "skipped": 0}
        summary = settings.summary_sql or SUMMARY_SQL / "run_summary.sql"
        self.summary_sql = summary.read_text(encoding="utf-8").replace("${db}", self.db)
        conf: dict[str, Any] = dict(kafka.client_config())
        conf.update(
            {
                "group.id": settings.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "max.poll.interval.ms": 600_000,
            }
        )
        self.consumer = Consumer(conf)
        self.consumer.subscribe(
            list(settings.topic_list()), on_assign=self._on_assign, on_revoke=self._on_revoke
        )

    # ---------------------------------------------------------------- group
    def _on_assign(self, _consumer: Consumer, _parts: list[TopicPartition]) -> None:
        self.refresh_marks = True

    def _on_revoke(self, _consumer: Consumer, parts: list[TopicPartition]) -> None:
        # Flushing here would block the rebalance; uncommitted rows are re-read
        # by the next owner and the high-water marks keep them exact.
        lost = {(p.topic, p.partition) for p in parts}
        for pend in self.pending.values():
            keep = [i for i, o in enumerate(pend.origins) if (o.topic, o.partition) not in lost]
            pend.rows = [pend.rows[i] for i in keep]
            pend.origins = [pend.origins[i] for i in keep]
            pend.raw = [pend.raw[i] for i in keep]
        for key in lost:
            self.consumed.pop(key, None)

    # ---------------------------------------------------------------- client
    def _client(self) -> Any:
        if self.client is None:
            self.client = ch.make_client(self.clickhouse, database="")
        return self.client

    def _with_retry(self, what: str, fn: Any) -> Any:
        """Run ``fn`` until ClickHouse answers, pausing consumption meanwhile."""
        delay = self.settings.backoff_initial_s
        paused: list[TopicPartition] = []
        try:
            while True:
                try:
                    return fn()
                except ch.ClickHouseUnavailable as exc:
                    if not paused:
                        paused = list(self.consumer.assignment())
                        self.consumer.pause(paused)
                    logger.warning(
                        "ClickHouse unavailable during %s (%s); retry in %.1fs",
                        what,
                        str(exc)[:200],
                        delay,
                    )
                    self.client = None
                    deadline = time.monotonic() + delay
                    while time.monotonic() < deadline:
                        self.consumer.poll(0.1)  # paused: keeps the group membership only
                        if self.stop.is_set():
                            raise
                    delay = min(delay * 2, self.settings.backoff_max_s)
        finally:
            if paused:
                self.consumer.resume(paused)

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
        self.pending.setdefault("dead_letters", Pending()).add(row, origin, value, key)
        self.stats["dead_letters"] += 1

    def _take(self, msg: Message) -> None:
        origin = Origin(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))
        value: bytes = msg.value() or b""
        key: bytes | None = msg.key()
        self.stats["messages"] += 1
        self.consumed[(origin.topic, origin.partition)] = origin.offset
        try:
            name, record = self.codec.decode_dict(value)
            rows = rows_for(name, record, origin)
        except DecodeError as exc:
            self._dead(origin, "decode", "", exc.reason, value, key)
            return
        except RowError as exc:
            self._dead(origin, "map", "", str(exc), value, key)
            return
        if self.seen.is_duplicate(str(record.get("event_id")), origin):
            self.stats["duplicates"] += 1
            return
        now = _now_ms()
        for table, row in rows:
            if should_skip(self.watermarks, table, origin):
                self.stats["skipped"] += 1
                continue
            reason = check_row(table, row, now)
            if reason is not None:
                self._dead(origin, "validate", table, reason, value, key)
                continue
            self.pending.setdefault(table, Pending()).add(row, origin, value, key)
            if table == "job_events" and row[_STATE] in _TERMINAL:
                self.ended_runs.add(str(row[_RUN]))

    # ---------------------------------------------------------------- output
    def _insert(self, table: str, pend: Pending) -> None:
        """Insert, splitting around rows ClickHouse rejects."""
        stack = [(0, len(pend.rows))]
        while stack:
            lo, hi = stack.pop()
            rows, origins = pend.rows[lo:hi], pend.origins[lo:hi]
            token = dedup_token(table, origins)
            try:
                self._with_retry(
                    f"insert into {table}",
                    lambda r=rows, t=token: ch.insert_rows(
                        self._client(),
                        f"{self.db}.{table}",
                        COLUMNS[table],
                        r,
                        dedup_token=t,
                        settings={"deduplicate_blocks_in_dependent_materialized_views": 1},
                    ),
                )
            except ch.ClickHouseRejected as exc:
                if hi - lo == 1:
                    value, key = pend.raw[lo]
                    logger.warning("%s rejected a row from %s: %s", table, origins[0], exc)
                    if table == "dead_letters":
                        logger.error("dropping a dead letter ClickHouse refuses: %s", exc)
                        continue
                    self._dead(origins[0], "insert", table, str(exc), value, key)
                    continue
                mid = (lo + hi) // 2
                stack += [(mid, hi), (lo, mid)]
                continue
            self.stats["rows"] += hi - lo

    def flush(self) -> None:
        """Insert every pending batch, then commit the consumed offsets."""
        for table in [t for t in self.pending if t != "dead_letters"] + ["dead_letters"]:
            pend = self.pending.pop(table, None)
            if pend and pend.rows:
                self._insert(table, pend)
        leftover = self.pending.pop("dead_letters", None)  # rejected rows found just now
        if leftover and leftover.rows:
            self._insert("dead_letters", leftover)
        if self.ended_runs:
            runs = sorted(self.ended_runs)
            self._with_retry(
                "run summaries",
                lambda: self._client().command(
                    self.summary_sql,
                    parameters={"runs": runs, "idle_pct": self.settings.idle_util_pct},
                ),
            )
            self.ended_runs.clear()
        if self.consumed:
            offsets = [TopicPartition(t, p, o + 1) for (t, p), o in self.consumed.items()]
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - a lost commit only means a replay
                logger.warning("offset commit failed (rows are stored; replay is exact): %s", exc)
            self.consumed.clear()
        self.first_pending_ms = None

    def _due(self) -> bool:
        size = sum(len(p.rows) for p in self.pending.values())
        if size >= self.settings.batch_rows:
            return True
        if self.first_pending_ms is None:
            return False
        return _now_ms() - self.first_pending_ms >= self.settings.batch_ms

    def run_once(self) -> int:
        """Poll once and flush when due. Returns the number of messages taken."""
        if self.refresh_marks:
            self.watermarks = self._with_retry(
                "read watermarks", lambda: ch.read_watermarks(self._client(), self.db)
            )
            self.refresh_marks = False
        msgs = self.consumer.consume(num_messages=self.settings.poll_records, timeout=0.2)
        taken = 0
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    logger.warning("consumer error: %s", err)
                continue
            self._take(msg)
            taken += 1
        if (taken or self.consumed) and self.first_pending_ms is None:
            self.first_pending_ms = _now_ms()
        if self._due() or (not msgs and self.consumed):
            self.flush()
        return taken

    def run(self) -> None:
        """Run until ``stop`` is set; flush and close on the way out."""
        logger.info("sink consuming %s into %s", ",".join(self.settings.topic_list()), self.db)
        try:
            while not self.stop.is_set():
                self.run_once()
            self.flush()
        finally:
            self.consumer.close()
            logger.info("sink stopped: %s", self.stats)
