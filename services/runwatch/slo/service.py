"""The SLO evaluator: objectives from ``slos.yaml``, SLIs from ClickHouse, alerts to rw.alerts.

Thin wiring: settings → the store adapter (:mod:`runwatch.adapters.clickhouse`)
and the producer adapter (:class:`~runwatch.adapters.kafka.KafkaTransport`,
records encoded by the :class:`~runwatch.adapters.publisher.Publisher`) →
the pure logic of :mod:`runwatch.core.slo`.

One evaluation round reads every objective's rows, computes its status and
decides its alert on a copy of its alert book. A store that does not answer
during the reads **pauses** the round: nothing is written, nothing published,
no book changes, and the next round starts over from the store (SLIs are
recomputed from stored rows, never accumulated, so nothing is counted twice
and a missed round raises no alert). After the reads, the alerts are
published, the books kept, and the round's SLI points and books written to
``slo_points`` and ``slo_state``; writes that fail are kept and retried with
the next round (both tables are replacing, keyed by objective and time).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runwatch.adapters import clickhouse as ch
from runwatch.core.paging.ownership import Ownership
from runwatch.core.records import Alert, Source
from runwatch.core.slo.evaluate import (
    Status,
    bad_event_causes,
    decide,
    probable_cause,
    status,
)
from runwatch.core.slo.indicators import COMPUTE
from runwatch.core.slo.spec import Objective, parse_slos
from runwatch.resources import ownership_file, read_config, resource
from runwatch.slo.queries import batch_key, causes_sql, mine, query_for, to_rows

logger = logging.getLogger(__name__)

#: Kinds whose facts are only raw rows (``raw.ttl`` of the retention rules): they count from
#: ``now - raw.ttl`` when that is later than the window's start. Training windows and retained
#: evaluations also read the run summaries (kept for ever); registry pushes are retained.
RAW_ONLY = frozenset({"data_availability", "resumability", "reproducibility", "fairness"})
POINT_COLUMNS = ("objective", "evaluated_at", "kind", "window_start", "good", "valid", "sli",
                 "target", "budget_consumed", "state", "burn_rates", "conditions", "bad_keys",
                 "bad_runs")
STATE_COLUMNS = ("objective", "updated_at", "book")


def slo_file() -> Path:
    """Return the shipped example objectives (``infra/slo/slos.yaml``, packaged)."""
    return resource("infra", "slo", "slos.yaml")


class SloSettings(BaseSettings):
    """Evaluator settings (env prefix ``RUNWATCH_SLO_``).

    Attributes:
        file: The objectives (default: the shipped example, ``infra/slo/slos.yaml``).
        interval_s: Seconds between evaluation rounds of ``runwatch slo serve``.
        alerts_topic: Where SLO alerts go.
        ownership_file: Who owns the alert of an objective without ``owner`` (default:
            the packaged ``infra/pager/ownership.yaml``, as the processor's).

    """

    model_config = SettingsConfigDict(env_prefix="RUNWATCH_SLO_", extra="ignore")

    file: Path = Field(default_factory=slo_file)
    interval_s: float = 60.0
    alerts_topic: str = "rw.alerts"
    ownership_file: Path = Field(default_factory=ownership_file)


def load_objectives(path: Path) -> list[Objective]:
    """Read and validate an SLO file.

    Raises:
        SloConfigError: With the file, line and key of the problem.
        OSError: The file cannot be read.

    """
    return parse_slos(read_config(path), str(path))


class Store(Protocol):
    """What the evaluator needs from the store."""

    def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a query; raise ClickHouseUnavailable when the store does not answer."""

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert rows; raise ClickHouseUnavailable when the store does not answer."""


class ClickHouseStore:
    """The store adapter behind :class:`Store`."""

    def __init__(self, client: Any) -> None:
        """Wrap a clickhouse-connect client (``runwatch.adapters.clickhouse.make_client``)."""
        self.client = client

    def query(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run a query."""
        return ch.query_rows(self.client, sql, params)

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert rows."""
        ch.insert_rows(self.client, table, columns, rows)


@dataclass(slots=True)
class Round:
    """One evaluation round.

    Attributes:
        now_ms: Evaluation time.
        statuses: Each objective's status (empty when paused).
        alerts: Alert records published.
        paused: The store did not answer; nothing was evaluated.
        error: Why it paused, or why its alerts were not delivered.
        undelivered: Alerts the publisher could not deliver (their objectives'
            books were left as they were, so the next round decides them again).
        past: Objectives a later round had already decided: this round (a
            backfill with an earlier ``now``) wrote their SLI points only.

    """

    now_ms: int
    statuses: list[Status] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    paused: bool = False
    error: str = ""
    undelivered: list[Alert] = field(default_factory=list)
    past: list[str] = field(default_factory=list)


class PublishFailed(Exception):
    """The publisher could not deliver a round's alerts (the message says why)."""


class Evaluator:
    """Evaluates objectives against the store and publishes their alerts."""

    def __init__(self, objectives: Sequence[Objective], store: Store, db: str, *,
                 source: Source, publish: Callable[[list[Alert]], None] | None = None,
                 raw_ttl_ms: int | None = None, ownership: Ownership | None = None,
                 run_prefix: str = "") -> None:
        """Create an evaluator.

        Args:
            objectives: What to evaluate.
            store: The store.
            db: Its database.
            source: The Source stamped on alerts.
            publish: Hands alerts to Kafka (None: evaluate without alerting).
            raw_ttl_ms: How long the store keeps raw rows of routine runs
                (``raw.ttl`` of the retention rules; None: as long as the window).
            ownership: The ownership file (``Alert.owner`` of objectives without ``owner``).
            run_prefix: Count only the facts of runs whose id starts with it (a
                simulation's session, ``runwatch simulate``); "" counts every run.

        """
        self.raw_ttl_ms = raw_ttl_ms
        self.run_prefix = run_prefix
        self.ownership = ownership
        self.objectives = list(objectives)
        self.store = store
        self.db = db
        self.source = source
        self.publish = publish
        self.books: dict[str, dict[str, Any]] | None = None
        self.book_at: dict[str, int] = {}  # objective -> time of the round its book is from
        self._pending_points: list[tuple[Any, ...]] = []
        self._pending_state: dict[str, tuple[Any, ...]] = {}

    def statuses(self, now_ms: int) -> list[Status]:
        """Compute every objective's status (reads only).

        Raises:
            ClickHouseUnavailable: The store does not answer.
            ClickHouseRejected: A query was refused (a broken database).

        """
        starts = {}
        batches: dict[tuple[str, str], list[Objective]] = {}
        for obj in self.objectives:
            start = obj.window.start(now_ms)
            if obj.kind in RAW_ONLY and self.raw_ttl_ms:
                start = max(start, now_ms - self.raw_ttl_ms)
            starts[obj.name] = start
            batches.setdefault(batch_key(obj), []).append(obj)
        rows: dict[tuple[str, str], list[Any]] = {}
        for key, objs in batches.items():
            sql, params = query_for(objs, self.db, now_ms, starts)
            rows[key] = to_rows(key[0], self.store.query(sql, params))
        out = []
        for obj in self.objectives:
            _row_type, compute = COMPUTE[obj.kind]
            facts = mine(obj, rows[batch_key(obj)])
            if self.run_prefix:
                facts = [r for r in facts if r.run_id.startswith(self.run_prefix)]
            events = compute(obj.params, facts, starts[obj.name], now_ms)
            out.append(status(obj, events, now_ms, starts[obj.name]))
        return out

    def _load_books(self) -> dict[str, dict[str, Any]]:
        rows = self.store.query(
            f"SELECT objective, argMax(book, updated_at), "  # noqa: S608
            f"toUnixTimestamp64Milli(max(updated_at)) FROM {self.db}.slo_state "
            "GROUP BY objective", {})
        self.book_at = {str(name): int(at) for name, _book, at in rows}
        return {str(name): json.loads(book) for name, book, _at in rows}

    def _causes(self, statuses: Sequence[Status]) -> dict[str, list[str]]:
        """Return objective -> the probable causes of its bad runs' own alerts (one query)."""
        wanted = {st.name: {r for e in st.bad for r in e.run_ids}
                  for st in statuses if st.conditions}
        runs = sorted(set().union(*wanted.values())) if wanted else []
        if not runs:
            return {}
        since = min(st.window_start_ms for st in statuses)
        wanted_runs = set(runs)
        alerts = [(str(run), str(cause), int(first))
                  for run, cause, first in self.store.query(causes_sql(self.db), {"since": since})
                  if run in wanted_runs]
        return {st.name: bad_event_causes(st, alerts) for st in statuses if st.conditions}

    def evaluate(self, now_ms: int) -> Round:
        """Run one round: read, decide, publish, store.

        An objective whose book a later round wrote (``now_ms`` before it: a
        backfill of past points) gets its SLI point only: deciding it against the
        later book would resolve, or raise again, a page of the present. When
        the publisher raises :class:`PublishFailed`, the books of the
        objectives that alerted stay as they were (in memory and in the store),
        so the next round decides and sends those alerts again.

        Args:
            now_ms: Evaluation time (UTC epoch ms).

        Returns:
            What happened; ``paused`` when the store did not answer the reads.

        """
        try:
            books = self.books if self.books is not None else self._load_books()
            statuses = self.statuses(now_ms)
            causes = self._causes(statuses)
        except ch.ClickHouseUnavailable as exc:
            logger.warning("store unavailable, evaluation paused: %s", exc)
            return Round(now_ms, paused=True, error=str(exc))
        except ch.ClickHouseRejected as exc:  # e.g. a database not migrated: say so, keep serving
            why = ch.refusal(exc, self.db)
            logger.error("evaluation paused: %s", why)
            return Round(now_ms, paused=True, error=why)
        self.books = books
        alerts: list[Alert] = []
        past: list[str] = []
        undo: dict[str, tuple[Any, Any, Any]] = {}  # objective -> (book, its time, pending)
        for obj, st in zip(self.objectives, statuses, strict=True):
            self._pending_points.append(_point(st))
            if now_ms < self.book_at.get(obj.name, now_ms):
                past.append(obj.name)
                continue
            cause = probable_cause(obj.kind, causes.get(obj.name, []))
            prev = books.get(obj.name)
            book, out = decide(obj, st, prev, cause, self.source, now_ms, self.ownership)
            if out:
                undo[obj.name] = (prev, self.book_at.get(obj.name),
                                  self._pending_state.get(obj.name))
            if out or book != prev:
                self._pending_state[obj.name] = (obj.name, now_ms, json.dumps(book))
                self.book_at[obj.name] = now_ms
            books[obj.name] = book
            alerts.extend(out)
        if alerts and self.publish is not None:
            try:
                self.publish(alerts)
            except PublishFailed as exc:
                logger.error("%d SLO alert(s) not delivered, sent again next round: %s",
                             len(alerts), exc)
                for name, (book, at, pending) in undo.items():
                    _restore(books, name, book)
                    _restore(self.book_at, name, at)
                    _restore(self._pending_state, name, pending)
                self._flush_writes()
                return Round(now_ms, statuses, [], error=str(exc), undelivered=alerts,
                             past=past)
        self._flush_writes()
        return Round(now_ms, statuses, alerts, past=past)

    def _flush_writes(self) -> None:
        try:
            if self._pending_points:
                self.store.insert(f"{self.db}.slo_points", POINT_COLUMNS, self._pending_points)
                self._pending_points = []
            if self._pending_state:
                self.store.insert(f"{self.db}.slo_state", STATE_COLUMNS,
                                  list(self._pending_state.values()))
                self._pending_state = {}
        except ch.ClickHouseUnavailable as exc:
            logger.warning("store unavailable, SLI points kept for the next round: %s", exc)
        except ch.ClickHouseRejected as exc:
            logger.error("the store refused the SLI points (kept for the next round): %s", exc)

    def serve(self, interval_s: float, stop: threading.Event,
              clock: Callable[[], int] | None = None) -> None:
        """Evaluate every ``interval_s`` until ``stop`` is set.

        Args:
            interval_s: Seconds between rounds.
            stop: Set to stop.
            clock: Epoch milliseconds (default: the wall clock).

        """
        now = clock or (lambda: int(time.time() * 1000))
        while not stop.is_set():
            r = self.evaluate(now())
            if not r.paused:
                logger.info("evaluated %d objectives, %d alerts", len(r.statuses), len(r.alerts))
            stop.wait(interval_s)


def _restore(d: dict[str, Any], key: str, value: Any) -> None:
    """Put back a dict entry as it was before a round (None: it was not there)."""
    if value is None:
        d.pop(key, None)
    else:
        d[key] = value


def _point(st: Status) -> tuple[Any, ...]:
    return (st.name, st.now_ms, st.kind, st.window_start_ms, st.good, st.valid, st.sli,
            st.target, st.budget_consumed, st.state,
            {k: v for k, v in st.burn_rates.items() if v is not None and v != float("inf")},
            [c.name for c in st.conditions], [e.key for e in st.bad],
            sorted({r for e in st.bad for r in e.run_ids}))
