"""Deliver one alert to one receiver: dedup, retries with backoff, circuit breaker.

The decisions come from :mod:`runwatch.core.paging.delivery`; this module runs the
loop with a real clock and sleeps, and records every accepted notification in
the durable :class:`~runwatch.pager.state.NotificationLog` before returning.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from runwatch.core.paging.delivery import (
    BreakerPolicy,
    BreakerState,
    Notification,
    RetryPolicy,
    backoff_ms,
    breaker_allow,
    breaker_record,
    classify_status,
    decide_send,
    parse_retry_after,
)
from runwatch.pager.state import NotificationLog

log = logging.getLogger(__name__)

Result = Literal["sent", "skipped", "dead"]


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
    """How delivering one alert to one receiver ended."""

    receiver: str
    result: Result
    attempts: int = 0
    reason: str = ""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Deliverer:
    """Runs deliveries with one circuit breaker per receiver.

    Attributes:
        notifications: The durable notification log.
        retry: Retry policy.
        breaker: Circuit-breaker policy.
        deadline_ms: Longest time spent on one delivery (its backoffs and
            ``Retry-After`` waits) before it is dead-lettered.
        stop: Set to interrupt waits (shutdown).
        clock: Returns UTC epoch ms.
        rand: Returns a uniform draw in [0, 1) for jitter.

    """

    notifications: NotificationLog
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    deadline_ms: int = 600_000
    stop: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], int] = _now_ms
    rand: Callable[[], float] = random.random
    breakers: dict[str, BreakerState] = field(default_factory=dict)

    def _sleep(self, ms: int) -> None:
        if self.stop.wait(ms / 1000):
            msg = "pager stopping"
            raise Interrupted(msg)

    def deliver(self, alert: object, receiver: Receiver, raw: bytes = b"") -> Delivery:
        """Deliver an alert to a receiver unless the dedup log says not to.

        Args:
            alert: The Alert record.
            receiver: The receiver.
            raw: The alert's encoded record, kept with a firing notification.

        Returns:
            ``sent`` (and logged durably), ``skipped`` (dedup), or ``dead``
            (give up: the caller dead-letters it with ``reason``).

        Raises:
            Interrupted: When ``stop`` is set during a wait.

        """
        name = receiver.name
        dedup_key = str(getattr(alert, "dedup_key", ""))
        status = str(getattr(alert, "status", "firing"))
        start = self.clock()
        decision = decide_send(
            self.notifications.last(name, dedup_key), status, start, receiver.repeat_interval_ms
        )
        if decision != "send":
            log.info("receiver %s: %s %s not sent (%s)", name, status, dedup_key, decision)
            return Delivery(name, "skipped", 0, decision)
        attempts = 0
        last_error = "no attempt made"
        # A breaker another alert opened fails this delivery fast, and a half-open one gets
        # one probe: waiting out the cool-down on every alert (up to max_attempts times)
        # held each later alert ~3 minutes per dead receiver, delaying every other
        # receiver's pages behind it. The delivery that opens the breaker stops there too
        # (below): it waited out the cool-down before its next attempt, holding every
        # other receiver's pages ~30 s (PagerDuty paged 35 s late while Slack answered 500).
        state, allowed, wait = breaker_allow(
            self.breakers.get(name, BreakerState()), self.breaker, start
        )
        self.breakers[name] = state
        if not allowed:
            return Delivery(
                name, "dead", 0,
                f"circuit open for receiver {name} after {state.failures} failures in a row "
                f"(next probe in {wait} ms): not sent",
            )
        probe = state.mode == "half_open"
        while True:
            now = self.clock()
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
                    Notification(name, dedup_key, status, now, str(getattr(alert, "alert_id", "")),
                                 raw if status == "firing" else b"")
                )
                log.info("receiver %s: %s %s sent (attempt %d)", name, status, dedup_key, attempts)
                return Delivery(name, "sent", attempts)
            last_error = (
                f"HTTP {res.status}: {res.body}" if res.status is not None else res.body
            )
            if outcome == "fatal":
                return Delivery(
                    name, "dead", attempts, f"receiver {name} rejected the alert: {last_error}"
                )
            if self.breakers[name].mode == "open" and not probe:
                return Delivery(
                    name, "dead", attempts,
                    f"circuit opened for receiver {name} after {self.breakers[name].failures} "
                    f"failures in a row (next probe in {self.breaker.open_ms} ms); "
                    f"last error: {last_error}",
                )
            if probe:
                return Delivery(
                    name, "dead", attempts,
                    f"circuit open for receiver {name}: the probe failed; last error: {last_error}",
                )
            if attempts >= self.retry.max_attempts:
                return Delivery(
                    name, "dead", attempts,
                    f"receiver {name}: gave up after {attempts} attempts; last error: {last_error}",
                )
            wait = backoff_ms(
                attempts, self.retry, self.rand(), parse_retry_after(res.retry_after, now)
            )
            if now + wait - start > self.deadline_ms:
                return Delivery(
                    name, "dead", attempts,
                    f"receiver {name}: delivery deadline passed; last error: {last_error}",
                )
            log.warning(
                "receiver %s: attempt %d failed (%s), retrying in %d ms",
                name, attempts, last_error[:200], wait,
            )
            self._sleep(wait)
