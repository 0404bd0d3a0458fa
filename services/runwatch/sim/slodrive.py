"""The SLO evaluator on the simulation's virtual clock (SLO scenarios, online only).

SLO indicators are computed from the store, so they see what the sink has
stored, and the simulation's events carry virtual times running ``speed``
times faster than the wall clock. A :class:`SloDriver` therefore calls the
evaluator's one-shot round (:meth:`runwatch.slo.service.Evaluator.evaluate`,
the code ``runwatch slo serve`` runs on its schedule and ``runwatch slo
evaluate --at`` runs once) with an explicit evaluation instant in virtual
time: every ``interval`` virtual seconds from the simulation's start, each
instant evaluated once the sink has stored the rows timed up to it: the
virtual clock is ``settle`` past it (a few wall seconds) and the store holds
the session's training steps up to the instant (or every step published: a
lagging sink holds the instants back to what it has stored; a store whose
steps stand still for ``wait_s`` wall seconds is no longer waited for, with a
warning naming the database). Instants are evaluated in order, none
skipped, as ``slo evaluate --at`` would backfill them: a round that took long
(a loaded machine, a lagging sink) delays the rounds after it in wall time,
not the instants, so the times to detect do not depend on the machine's load.
Once every run has ended, the last instant is the end of the last run (later
cutoffs would find pipelines that stopped with the simulation).

The evaluator counts only this session's runs (``run_prefix``) and starts
from fresh alert books (earlier sessions' books in ``slo_state`` do not carry
over); its alerts carry the label ``sim_session`` (the session's run-id
prefix), by which the simulation reads its own SLO alerts back from
``rw.alerts`` (they name no run).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runwatch.adapters import clickhouse as ch
from runwatch.adapters.publisher import Publisher
from runwatch.adapters.settings import ClickHouseSettings
from runwatch.core.records import Alert
from runwatch.core.slo.spec import Objective
from runwatch.resources import resource
from runwatch.sim.clock import VirtualClock
from runwatch.sim.scenarios import Scenario
from runwatch.slo.service import ClickHouseStore, Evaluator, Round, load_objectives

logger = logging.getLogger(__name__)

#: The label naming the simulation session (run-id prefix) on its SLO alerts.
SESSION_LABEL = "sim_session"


class SloUnavailable(RuntimeError):
    """SLO scenarios cannot be evaluated here (no store, no such objective...)."""


def sim_slo_file() -> Path:
    """Return the simulator's objectives (``infra/slo/sim-slos.yaml``, packaged)."""
    return resource("infra", "slo", "sim-slos.yaml")


def due_instant(last_ms: int, start_ms: int, interval_ms: int, horizon_ms: int,
                end_ms: int | None = None) -> int | None:
    """Return the virtual instant to evaluate now, or None.

    Args:
        last_ms: The last instant evaluated.
        start_ms: The schedule's origin (instants are ``start + k * interval``).
        interval_ms: Virtual time between instants.
        horizon_ms: The latest instant whose rows are stored (virtual now less the settle).
        end_ms: The end of the last run, once every run has ended.

    Returns:
        The next scheduled instant after ``last_ms`` once the horizon reached
        it (none is skipped); once the next one is past the runs' end, that
        end, once, when the horizon reached it.

    """
    nxt = start_ms + (max(last_ms - start_ms, 0) // interval_ms + 1) * interval_ms
    if end_ms is not None and nxt >= end_ms:
        at = end_ms if horizon_ms >= end_ms else None
    else:
        at = nxt if nxt <= horizon_ms else None
    return at if at is not None and at > last_ms else None


def objectives_for(scenarios: Sequence[Scenario], objectives: Sequence[Objective],
                   source: str) -> list[Objective]:
    """Return the objectives the SLO scenarios name, in the file's order.

    Raises:
        SloUnavailable: A scenario's objective is not in the file.

    """
    wanted = {s.slo for s in scenarios if s.slo}
    have = {o.name for o in objectives}
    missing = sorted(wanted - have)
    if missing:
        msg = (f"{source} has no objective {', '.join(missing)} (the SLO scenarios "
               f"{', '.join(s.name for s in scenarios if s.slo in missing)} need it)")
        raise SloUnavailable(msg)
    return [o for o in objectives if o.name in wanted]


class SloDriver:
    """Evaluates the session's objectives at virtual instants, in a thread of its own."""

    def __init__(self, evaluator: Evaluator, clock: VirtualClock, start_ms: int, *,
                 interval_ms: int, settle_ms: int, stored: Callable[[], int] | None = None,
                 wait_s: float = 30.0) -> None:
        """Schedule rounds every ``interval_ms`` virtual ms from ``start_ms``.

        Args:
            evaluator: The evaluator.
            clock: The virtual clock.
            start_ms: The simulation's virtual start.
            interval_ms: Virtual time between instants.
            settle_ms: Virtual time an instant waits at least.
            stored: The latest event time of the session's steps the store holds.
            wait_s: Wall seconds the store's steps may stand still before the
                driver stops waiting for them.

        """
        self.stored = stored
        #: The latest event time of the session's steps published (the runner sets it).
        self.published: Callable[[], int] = lambda: 0
        self.wait_s = wait_s
        self._held: tuple[int, float] | None = None  # the store's last step, since when
        self._gave_up = False
        self.evaluator = evaluator
        self.clock = clock
        self.start_ms = start_ms
        self.interval_ms = interval_ms
        self.settle_ms = settle_ms
        self.last_ms = start_ms
        self.end_ms: int | None = None
        self.rounds: list[Round] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim-slo", daemon=True)

    def start(self) -> None:
        """Start evaluating."""
        self._thread.start()

    def end_at(self, end_ms: int) -> None:
        """Every run has ended at ``end_ms`` (virtual): evaluate up to it, then stop."""
        self.end_ms = end_ms

    @property
    def finished(self) -> bool:
        """Whether the instant at the end of the runs has been evaluated."""
        return self.end_ms is not None and self.last_ms >= self.end_ms

    def step(self) -> Round | None:
        """Evaluate the instant due now, if any (the thread's body; tests call it)."""
        at = due_instant(self.last_ms, self.start_ms, self.interval_ms, self._horizon(),
                         self.end_ms)
        if at is None:
            return None
        r = self.evaluator.evaluate(at)
        if not r.paused:  # a paused round is retried at the next instant
            self.last_ms = at
        self.rounds.append(r)
        return r

    def _horizon(self) -> int:
        """The latest instant whose rows are stored: settled, and the sink past its steps.

        While the store lacks some of the session's published steps, instants
        go no later than the last step it holds. A store whose steps do not
        advance for ``wait_s`` wall seconds is no longer waited for (one warning).
        """
        horizon = self.clock.now_ms() - self.settle_ms
        if self.stored is None or self._gave_up:
            return horizon
        try:
            held = self.stored()
        except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
            logger.warning("cannot read what the store holds: %s", exc)
            return min(horizon, self._held[0]) if self._held else horizon
        if held >= self.published():
            self._held = None
            return horizon
        if self._held is None or held > self._held[0]:
            self._held = (held, time.monotonic())
        elif time.monotonic() - self._held[1] >= self.wait_s:
            self._gave_up = True
            logger.warning("the store's training steps of this simulation stopped at %d ms for "
                           "%.0f s: is a sink writing into database %s? Evaluating without "
                           "waiting for it", held, self.wait_s, self.evaluator.db)
            return horizon
        return min(horizon, held)

    def _loop(self) -> None:
        while not self._stop.is_set() and not self.finished:
            try:
                self.step()
            except Exception:
                logger.exception("SLO evaluation failed")
            self._stop.wait(0.1)

    def stop(self) -> None:
        """Stop evaluating."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30.0)


def make_driver(scenarios: Sequence[Scenario], *, prefix: str, clock: VirtualClock,
                start_ms: int, transport: Any, alerts_topic: str,
                clickhouse: ClickHouseSettings | None = None, slo_file: Path | None = None,
                interval_s: float = 30.0, settle_s: float = 3.0) -> SloDriver:
    """Build the session's SLO driver: objectives, the store, the alerts' producer.

    Args:
        scenarios: The simulation's scenarios (those with ``slo`` pick the objectives).
        prefix: The session's run-id prefix.
        clock: The virtual clock.
        start_ms: The simulation's virtual start.
        transport: The Kafka transport alerts are produced through.
        alerts_topic: Where they go.
        clickhouse: Where the sink stores (env ``CLICKHOUSE_*`` by default).
        slo_file: The objectives (default :func:`sim_slo_file`).
        interval_s: Virtual seconds between evaluation instants.
        settle_s: Wall seconds an instant waits for the sink to store its rows.

    Raises:
        SloUnavailable: The store does not answer or lacks the SLO tables, or an
            objective is missing.
        SloConfigError: The objectives file is invalid (file, line, key).

    """
    from runwatch.core.storage.retention import parse_rules
    from runwatch.resources import retention_file

    path = slo_file or sim_slo_file()
    try:
        objectives = objectives_for(scenarios, load_objectives(path), str(path))
    except OSError as exc:
        msg = f"cannot read {path}: {exc}"
        raise SloUnavailable(msg) from None
    chs = clickhouse or ClickHouseSettings()
    try:
        store = ClickHouseStore(ch.make_client(chs, database=""))
        store.query(f"SELECT count() FROM {chs.database}.slo_state", {})  # noqa: S608
    except (ch.ClickHouseUnavailable, ch.ClickHouseRejected) as exc:
        msg = (f"SLO scenarios read what the sink stored: the store at {chs.url} (database "
               f"{chs.database}) did not answer or lacks the SLO tables (runwatch db migrate): "
               f"{exc}")
        raise SloUnavailable(msg) from None
    publisher = Publisher(transport, kind="slo")

    def send(alerts: list[Alert]) -> None:
        for alert in alerts:
            labelled = dataclasses.replace(alert, labels={**alert.labels, SESSION_LABEL: prefix})
            rec, value = publisher.encode_one(labelled)
            transport.produce(alerts_topic, rec.dedup_key, value)

    rules = parse_rules(retention_file().read_text(encoding="utf-8"))
    ev = Evaluator(objectives, store, chs.database, source=publisher.source, publish=send,
                   raw_ttl_ms=rules.raw_ttl_s * 1000, run_prefix=prefix + "-")
    ev.books = {}  # fresh books: an earlier session's firing alert does not carry over
    steps_sql = (f"SELECT toUnixTimestamp64Milli(max(ts)) FROM {chs.database}.learning_steps "  # noqa: S608
                 "WHERE startsWith(run_id, %(p)s)")

    def stored() -> int:
        rows = store.query(steps_sql, {"p": prefix + "-"})
        return int(rows[0][0] or 0) if rows else 0

    settle_ms = int(settle_s * clock.speed * 1000)
    return SloDriver(ev, clock, start_ms, interval_ms=int(interval_s * 1000),
                     settle_ms=settle_ms, stored=stored)
