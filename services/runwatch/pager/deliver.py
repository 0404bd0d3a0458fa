"""Deliver one alert to one receiver: dedup, retries with backoff, circuit breaker.

The decisions come from :mod:`runwatch.core.paging.delivery`; this module runs the
loop with a real clock and sleeps, and records every accepted notification in
the durable :class:`~runwatch.pager.state.NotificationLog` before returning.

A delivery waits in-line at most ``inline_wait_ms`` in all (a quick retry of a
transient error). When its next attempt is due later (a longer backoff, a
``Retry-After``, an open breaker) it is deferred: kept in the durable
:class:`~runwatch.pager.state.DeferredLog` and tried again by :meth:`Deliverer.retry_due`
from the pager's loop, so one slow receiver never holds another receiver's pages.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from runwatch.core.paging.delivery import (
    BreakerPolicy,
    BreakerState,
    Deferred,
    Notification,
    RetryPolicy,
    backoff_ms,
    breaker_allow,
    breaker_record,
    breaker_wait_ms,
    classify_status,
    decide_send,
    parse_retry_after,
    plan_retry,
)
from runwatch.pager.state import DeferredLog, NotificationLog

log = logging.getLogger(__name__)

Result = Literal["sent", "skipped", "dead", "deferred"]


class SendResult(Protocol):
    """What a receiver's ``send`` returns (see ``adapters.receivers.HttpResult``)."""

    @property
    def status(self) -> int | None:
        """HTTP status, or None on a transport error."""

    @property
    def body(self) -> str:
        """Response body or error text."""

    @property
    def retry_after(self) -> str | None:
        """Retry-After header."""


class Receiver(Protocol):
    """A receiver the deliverer can call."""

    name: str
    repeat_interval_ms: int

    def send(self, alert: object, now_ms: int) -> SendResult:
        """Send once."""


class Interrupted(Exception):  # noqa: N818 - a control-flow signal, not an error
    """The pager is stopping; the alert was not finished (its offset stays uncommitted)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """How delivering one alert to one receiver ended (``deferred``: for now)."""

    receiver: str
    result: Result
    attempts: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where an alert came from, kept with a deferred delivery for its dead letter."""

    topic: str = ""
    partition: int = -1
    offset: int = -1
    key: bytes | None = None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Deliverer:
    """Runs deliveries with one circuit breaker per receiver.

    Attributes:
        notifications: The durable notification log.
        retry: Retry policy.
        breaker: Circuit-breaker policy.
        deadline_ms: Longest time from a delivery's first attempt to its last (its
            backoffs, ``Retry-After`` and breaker waits) before it is dead-lettered.
        stop: Set to interrupt waits (shutdown).
        clock: Returns UTC epoch ms.
        rand: Returns a uniform draw in [0, 1) for jitter.
        inline_wait_ms: Longest total in-line wait of one delivery; a later attempt is
            deferred (``deferred``) instead.
        deferred: The durable deferred deliveries (default: ``deferred.jsonl`` beside
            the notification log).

    """

    notifications: NotificationLog
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    deadline_ms: int = 600_000
    stop: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], int] = _now_ms
    rand: Callable[[], float] = random.random
    breakers: dict[str, BreakerState] = field(default_factory=dict)
    inline_wait_ms: int = 2_000
    deferred: DeferredLog | None = None

    def __post_init__(self) -> None:
        """Open the deferred log beside the notification log unless one was given."""
        if self.deferred is None:
            self.deferred = DeferredLog(self.notifications.path.parent)

    @property
    def pending(self) -> DeferredLog:
        """The deferred deliveries."""
        assert self.deferred is not None  # set in __post_init__
        return self.deferred

    def _sleep(self, ms: int) -> None:
        if self.stop.wait(ms / 1000):
            msg = "pager stopping"
            raise Interrupted(msg)

    def deliver(
        self, alert: object, receiver: Receiver, raw: bytes = b"", origin: Origin | None = None,
        *, update: bool = False,
    ) -> Delivery:
        """Deliver an alert to a receiver unless the dedup log says not to.

        A delivery of the same dedup key to this receiver that is still deferred is
        replaced: a newer firing supersedes it, and a resolve drops a firing that was
        never delivered (then is sent only when the receiver was paged before).

        Args:
            alert: The Alert record.
            receiver: The receiver.
            raw: The alert's encoded record, kept with a firing notification and with
                a deferred delivery (sent again from it after a restart).
            origin: Where the alert came from (for a deferred delivery's dead letter).
            update: A firing alert that updates the one last sent (a new probable cause,
                ``core.paging.delivery.is_update``): sent within the repeat interval too.

        Returns:
            ``sent`` (and logged durably), ``skipped`` (dedup), ``deferred`` (kept
            durably, tried again by :meth:`retry_due`) or ``dead`` (give up: the
            caller dead-letters it with ``reason``).

        Raises:
            Interrupted: When ``stop`` is set during a wait.

        """
        name = receiver.name
        dedup_key = str(getattr(alert, "dedup_key", ""))
        status = str(getattr(alert, "status", "firing"))
        start = self.clock()
        old = self.pending.remove(name, dedup_key)
        if old is not None:
            if status == "resolved" and old.status == "firing":
                log.warning(
                    "receiver %s: resolve of %s came while its firing delivery was deferred "
                    "(not delivered after %d attempts; last error: %s): the deferred firing "
                    "is dropped", name, dedup_key, old.attempts, old.last_error[:200])
            else:
                log.info("receiver %s: %s %s replaces its deferred %s delivery",
                         name, status, dedup_key, old.status)
        decision = decide_send(
            self.notifications.last(name, dedup_key), status, start, receiver.repeat_interval_ms,
            update=update,
        )
        if decision != "send":
            log.info("receiver %s: %s %s not sent (%s)", name, status, dedup_key, decision)
            return Delivery(name, "skipped", 0, decision)
        where = origin or Origin()
        entry = Deferred(name, dedup_key, status, str(getattr(alert, "alert_id", "")), raw,
                         0, start, start, "", where.topic, where.partition, where.offset,
                         where.key)
        return self._attempt(alert, receiver, entry, self.inline_wait_ms)

    def retry_due(
        self, receivers: Mapping[str, Receiver], decode: Callable[[bytes], object],
        limit: int = 64,
    ) -> list[tuple[Deferred, Delivery]]:
        """Try the deferred deliveries that are due (called from the pager's loop).

        Never waits in-line: a failure defers the delivery again (or dead-letters it when
        its attempts are used or its deadline passes); an open breaker defers it to the
        breaker's next probe, without using an attempt.

        Args:
            receivers: The configured receivers by name.
            decode: Decodes a deferred entry's ``raw`` into the alert to send.
            limit: Most entries tried in one call (the loop goes back to Kafka between).

        Returns:
            Each entry tried and how it ended. A ``dead`` one stays in the deferred log
            until the caller has dead-lettered it and removes it (``pending.remove``), so
            a crash in between loses nothing.

        """
        out: list[tuple[Deferred, Delivery]] = []
        for entry in self.pending.due(self.clock())[:limit]:
            if self.stop.is_set():
                break
            name = entry.receiver
            receiver = receivers.get(name)
            error = entry.last_error or "no attempt made"
            reason = ""
            alert: object = None
            if receiver is None:
                reason = f"receiver {name} is no longer configured; last error: {error}"
            elif self.clock() - entry.first_ms > self.deadline_ms:
                reason = f"receiver {name}: delivery deadline passed; last error: {error}"
            else:
                try:
                    alert = decode(entry.raw)
                except Exception as exc:  # noqa: BLE001 - any decode failure: dead-letter it
                    reason = f"undecodable deferred alert: {exc}"
            if reason or receiver is None:
                out.append((entry, Delivery(name, "dead", entry.attempts, reason)))
                continue
            out.append((entry, self._attempt(alert, receiver, entry, 0)))
        return out

    def _attempt(
        self, alert: object, receiver: Receiver, entry: Deferred, inline_ms: int
    ) -> Delivery:
        """Try a delivery until it is sent, refused, deferred or out of attempts."""
        name, dedup_key, status = receiver.name, entry.dedup_key, entry.status
        attempts, waited = entry.attempts, 0
        last_error = entry.last_error or "no attempt made"
        while True:
            now = self.clock()
            state, allowed, wait = breaker_allow(
                self.breakers.get(name, BreakerState()), self.breaker, now
            )
            self.breakers[name] = state
            if not allowed:
                # an open breaker never holds the pager: the delivery waits for its probe
                # in the deferred log (using no attempt), not in-line
                circuit = (f"circuit open for receiver {name} after {state.failures} "
                           "failures in a row")
                return self._defer_or_dead(entry, attempts, now, wait, waited, 0,
                                           last_error, circuit)
            if self.stop.is_set():
                msg = "pager stopping"
                raise Interrupted(msg)
            attempts += 1
            res = receiver.send(alert, now)
            outcome = classify_status(res.status)
            now = self.clock()
            self.breakers[name] = breaker_record(
                self.breakers[name], self.breaker, success=outcome != "retry", now_ms=now
            )
            if outcome == "ok":
                self.notifications.record(
                    Notification(name, dedup_key, status, now, entry.alert_id,
                                 entry.raw if status == "firing" else b"")
                )
                self.pending.remove(name, dedup_key)
                if entry.attempts:
                    log.info("receiver %s: %s %s sent (attempt %d, %d ms after the first)",
                             name, status, dedup_key, attempts, now - entry.first_ms)
                else:
                    log.info("receiver %s: %s %s sent (attempt %d)",
                             name, status, dedup_key, attempts)
                return Delivery(name, "sent", attempts)
            last_error = (
                f"HTTP {res.status}: {res.body}" if res.status is not None else res.body
            )
            if outcome == "fatal":
                return Delivery(
                    name, "dead", attempts, f"receiver {name} rejected the alert: {last_error}"
                )
            wait = backoff_ms(
                attempts, self.retry, self.rand(), parse_retry_after(res.retry_after, now)
            )
            br = self.breakers[name]
            circuit = ""
            if br.mode == "open":  # this failure opened it (or the probe failed)
                wait = max(wait, breaker_wait_ms(br, self.breaker, now))
                circuit = (f"circuit opened for receiver {name} after {br.failures} failures "
                           "in a row")
            plan = plan_retry(
                attempts=attempts, first_ms=entry.first_ms, now_ms=now, wait_ms=wait,
                waited_ms=waited, policy=self.retry, deadline_ms=self.deadline_ms,
                inline_ms=0 if circuit else inline_ms,
            )
            if plan.step != "retry":
                return self._defer_or_dead(entry, attempts, now, wait, waited,
                                           0, last_error, circuit)
            log.warning(
                "receiver %s: %s %s attempt %d failed (%s), retrying in %d ms",
                name, status, dedup_key, attempts, last_error[:200], wait,
            )
            self._sleep(wait)
            waited += wait

    def _defer_or_dead(
        self, entry: Deferred, attempts: int, now: int, wait: int, waited: int,
        inline_ms: int, last_error: str, circuit: str,
    ) -> Delivery:
        """Defer a delivery to ``now + wait``, or dead-letter it when it may not wait."""
        name, dedup_key, status = entry.receiver, entry.dedup_key, entry.status
        plan = plan_retry(
            attempts=attempts, first_ms=entry.first_ms, now_ms=now, wait_ms=wait,
            waited_ms=waited, policy=self.retry, deadline_ms=self.deadline_ms,
            inline_ms=inline_ms,
        )
        if plan.step == "dead":
            why = (f"gave up after {attempts} attempts" if plan.why == "attempts"
                   else "delivery deadline passed")
            return Delivery(name, "dead", attempts,
                            f"receiver {name}: {why}; last error: {last_error}"
                            + (f" ({circuit})" if circuit else ""))
        self.pending.put(replace(entry, attempts=attempts, next_ms=plan.at_ms,
                                 last_error=last_error if attempts else circuit))
        if attempts > entry.attempts:  # an attempt failed just now
            log.warning(
                "receiver %s: %s %s attempt %d failed (%s); deferred, next attempt in %d ms%s",
                name, status, dedup_key, attempts, last_error[:200], wait,
                f" ({circuit})" if circuit else "",
            )
        else:
            log.info("receiver %s: %s %s deferred, next attempt in %d ms (%s)",
                     name, status, dedup_key, wait, circuit or last_error[:200])
        return Delivery(name, "deferred", attempts, circuit or last_error)
