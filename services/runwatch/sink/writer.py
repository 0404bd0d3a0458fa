"""The sink's background writer: inserts flushed batches into ClickHouse, in order.

One thread, one bounded FIFO queue. The consuming thread hands over a
:class:`~runwatch.sink.batch.FlushBatch`; the writer inserts every table of it
(splitting around rows ClickHouse rejects, which become dead letters), rewrites
the summaries of runs that ended, and only then reports the batch's offsets as
committable. Batches are written strictly in order, so "batch N is done" means
everything up to batch N's offsets is stored: the consumer may commit them.

ClickHouse unavailable → retry with exponential backoff; meanwhile the queue
fills up and the consuming thread pauses its partitions (backpressure).
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from runwatch.adapters import clickhouse as ch
from runwatch.core.storage.colbatch import TableColumns
from runwatch.core.storage.rows import (
    COLUMNS,
    SUMMARISED_SQL,
    Origin,
    column_problem,
    dead_letter_row,
)
from runwatch.sink.batch import FlushBatch
from runwatch.sink.settings import SinkSettings

SUMMARY_CHUNK = 1_000  # runs per run-summary statement

logger = logging.getLogger(__name__)

Offsets = dict[tuple[str, int], int]


class WriterStopped(RuntimeError):
    """The sink is stopping while ClickHouse is unavailable: the batch stays uncommitted."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Writer:
    """Inserts flushed batches in a background thread, strictly in order."""

    def __init__(
        self,
        settings: SinkSettings,
        client_factory: Callable[[], Any],
        db: str,
        summary_sql: str,
        stop: threading.Event,
    ) -> None:
        """Create the writer and start its thread.

        Args:
            settings: Sink settings (backoff, queue depth, idle threshold).
            client_factory: Builds a ClickHouse client (the writer owns its own).
            db: Database.
            summary_sql: The run summary statement (``${db}`` rendered).
            stop: Set when the sink stops: retries give up then.
        """
        self.settings = settings
        self._factory = client_factory
        self._client: Any = None
        self.db = db
        self.summary_sql = summary_sql
        self.stop = stop
        self._queue: queue.SimpleQueue[FlushBatch | None] = queue.SimpleQueue()
        self._depth = max(1, settings.inflight_batches)
        self._done: queue.SimpleQueue[Offsets] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._busy = 0
        self.error: BaseException | None = None
        self.stats = {"rows": 0, "dead_letters": 0, "batches": 0, "sweeps": 0,
                      "summary_errors": 0}
        self._swept = time.monotonic()  # the first sweep comes one interval after the start
        self._thread = threading.Thread(target=self._loop, name="runwatch-sink-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ consumer side
    def has_room(self) -> bool:
        """Whether fewer than ``inflight_batches`` batches are queued or being written."""
        return self._busy < self._depth

    def wait_room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`has_room` (or a failure)."""
        with self._idle:
            return self._idle.wait_for(
                lambda: self._busy < self._depth or self.error is not None, timeout=timeout
            )

    def submit(self, batch: FlushBatch) -> None:
        """Queue a batch (never blocks; check :meth:`has_room` first for backpressure)."""
        self.check()
        with self._idle:
            self._busy += 1
        self._queue.put(batch)

    def committable(self) -> Offsets:
        """Return the offsets of every batch written since the last call (merged)."""
        out: Offsets = {}
        while True:
            try:
                out.update(self._done.get_nowait())
            except queue.Empty:
                return out

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every submitted batch is written (or failed).

        Returns:
            True when idle, False on timeout.
        """
        with self._idle:
            return self._idle.wait_for(
                lambda: self._busy == 0 or self.error is not None, timeout=timeout
            )

    def check(self) -> None:
        """Raise the writer's failure in the caller's thread, if it failed."""
        if self.error is not None:
            msg = f"sink writer failed: {self.error}"
            raise RuntimeError(msg) from self.error

    def close(self) -> None:
        """Finish the queued batches (unless stopping during an outage) and end the thread."""
        self._queue.put(None)
        self._thread.join()

    # ------------------------------------------------------------ writer thread
    def _loop(self) -> None:
        while True:
            try:
                batch = self._queue.get(timeout=self._until_sweep())
            except queue.Empty:  # no batch for a while: the sweep still runs on time
                self._guarded(self._sweep, "summary sweep")
                continue
            if batch is None:
                return
            try:
                self._guarded(functools.partial(self._write_one, batch), f"batch {batch.seq}")
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def _write_one(self, batch: FlushBatch) -> None:
        self._write(batch)
        self._done.put(batch.offsets)
        self.stats["batches"] += 1

    def _guarded(self, work: Callable[[], None], what: str) -> None:
        """Run ``work`` unless the writer failed; a failure is kept for the consuming thread."""
        if self.error is not None:
            return
        try:
            work()
        except WriterStopped:
            self.error = self.error or WriterStopped("stopped during a ClickHouse outage")
        except BaseException as exc:  # noqa: BLE001 - reported to the consuming thread
            logger.exception("sink writer failed on %s", what)
            self.error = exc

    def _until_sweep(self) -> float | None:
        """Seconds until the next summary sweep is due (None: sweeps are off)."""
        every = self.settings.summary_sweep_s
        if every <= 0:
            return None
        return max(0.05, self._swept + every - time.monotonic())

    def _client_now(self) -> Any:
        if self._client is None:
            self._client = self._factory()
        return self._client

    def _with_retry(self, what: str, fn: Callable[[], Any]) -> Any:
        delay = self.settings.backoff_initial_s
        while True:
            try:
                return fn()
            except ch.ClickHouseUnavailable as exc:
                logger.warning(
                    "ClickHouse unavailable during %s (%s); retry in %.1fs",
                    what,
                    str(exc)[:200],
                    delay,
                )
                self._client = None
                if self.stop.wait(delay):
                    msg = f"stopping during {what}"
                    raise WriterStopped(msg) from exc
                delay = min(delay * 2, self.settings.backoff_max_s)

    def _write(self, batch: FlushBatch) -> None:
        rejected = TableColumns(len(COLUMNS["dead_letters"]))
        for table, cols in batch.tables.items():
            if table != "dead_letters" and len(cols):
                self._insert(table, cols, batch, rejected)
        dead = batch.tables.get("dead_letters")
        if dead is not None and len(rejected):
            dead = TableColumns(0, [a + b for a, b in zip(dead.data, rejected.data, strict=True)])
        elif dead is None or not len(dead):
            dead = rejected
        if len(dead):
            self._insert("dead_letters", dead, batch, None)
        if batch.ended_runs:
            self._summaries(sorted(batch.ended_runs))
        self._sweep()

    def _summaries(self, runs: list[str]) -> None:
        """Rewrite the summaries of ``runs`` (idempotent: ReplacingMergeTree).

        A statement ClickHouse refuses is logged and counted, not fatal: the rows
        are stored, and summaries can be rewritten from them at any time.
        """
        for i in range(0, len(runs), SUMMARY_CHUNK):
            chunk = runs[i : i + SUMMARY_CHUNK]
            try:
                self._with_retry("run summaries", functools.partial(self._summary_once, chunk))
            except ch.ClickHouseRejected as exc:
                self.stats["summary_errors"] += 1
                logger.error(
                    "ClickHouse refused the run-summary statement for %d runs (their rows are "
                    "stored, their summaries are not): %s",
                    len(chunk),
                    exc,
                )

    def _summary_once(self, runs: list[str]) -> None:
        ch.command(
            self._client_now(),
            self.summary_sql,
            parameters={"runs": runs, "idle_pct": self.settings.idle_util_pct},
        )

    def _sweep(self) -> None:
        """Every ``summary_sweep_s``, rewrite the summaries of recently ended runs."""
        every = self.settings.summary_sweep_s
        if every <= 0 or time.monotonic() - self._swept < every:
            return
        self._swept = time.monotonic()
        try:
            rows = self._with_retry(
                "finding ended runs",
                lambda: ch.query_rows(
                    self._client_now(),
                    f"SELECT DISTINCT toString(run_id) FROM {self.db}.job_events "  # noqa: S608
                    f"WHERE state IN {SUMMARISED_SQL} "
                    "AND ts >= now64(3) - toIntervalMillisecond(%(window_ms)s)",
                    {"window_ms": int(self.settings.summary_window_s * 1000)},
                ),
            )
        except ch.ClickHouseRejected as exc:
            self.stats["summary_errors"] += 1
            logger.error("ClickHouse refused the summary sweep's query: %s", exc)
            return
        runs = sorted(str(r[0]) for r in rows)
        if runs:
            logger.debug("summary sweep: %d runs ended in the last %.0f s", len(runs),
                         self.settings.summary_window_s)
            self._summaries(runs)
        self.stats["sweeps"] += 1

    def _insert_once(self, table: str, cols: TableColumns, token: str) -> None:
        ch.insert_rows(
            self._client_now(),
            f"{self.db}.{table}",
            COLUMNS[table],
            cols.data,
            dedup_token=token,
            settings={"deduplicate_blocks_in_dependent_materialized_views": 1},
            column_oriented=True,
        )

    def _insert(
        self, table: str, cols: TableColumns, batch: FlushBatch, rejected: TableColumns | None
    ) -> None:
        """Insert, splitting in halves around rows ClickHouse rejects."""
        stack = [(0, len(cols))]
        while stack:
            lo, hi = stack.pop()
            whole = (lo, hi) == (0, len(cols))
            part = cols if whole else cols.slice(lo, hi)
            token = part.token(table) if whole else cols.slice_token(table, lo, hi)
            try:
                self._with_retry(
                    f"insert into {table}", functools.partial(self._insert_once, table, part, token)
                )
            except ch.ClickHouseRejected as exc:
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    stack += [(mid, hi), (lo, mid)]
                    continue
                row = cols.row(lo)
                origin = Origin(row[-3], row[-2], row[-1])
                logger.warning("%s rejected a row from %s: %s", table, origin, exc)
                # a value its column cannot hold (the fast path leaves them to the insert):
                # the reason emit and check_row give, not "Unable to create native array"
                reason = column_problem(table, row) or str(exc)
                if rejected is None:
                    logger.error("dropping a dead letter ClickHouse refuses: %s", exc)
                    continue
                value, key = batch.raw_of(origin.topic, origin.partition, origin.offset)
                rejected.append(
                    dead_letter_row(
                        event_id=f"{origin.topic}:{origin.partition}:{origin.offset}:{table}",
                        now_ms=_now_ms(),
                        stage="insert",
                        target_table=table,
                        origin=origin,
                        reason=reason,
                        original=value,
                        key=key,
                    )
                )
                self.stats["dead_letters"] += 1
                continue
            self.stats["rows"] += hi - lo
