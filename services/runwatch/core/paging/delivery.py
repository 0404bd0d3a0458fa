"""Delivery decisions: retry/backoff, circuit breaker, dedup window.

Everything here is pure: the caller passes ``now_ms`` (and the random draw for
jitter), performs the I/O, and feeds the outcome back. The pager service
(:mod:`runwatch.pager`) strings these together.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Literal

from runwatch.core.paging.payloads import alertmanager_alert

Outcome = Literal["ok", "retry", "fatal"]
RetryStep = Literal["retry", "defer", "dead"]
BreakerMode = Literal["closed", "open", "half_open"]
SendDecision = Literal["send", "skip_repeat", "skip_not_paged", "skip_already_resolved"]


# ------------------------------------------------------------------ retries


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try one delivery.

    Attributes:
        max_attempts: Attempts before the alert is dead-lettered.
        base_ms: First backoff ceiling; doubles per attempt.
        cap_ms: Largest backoff ceiling.
        max_retry_after_ms: Largest server-requested wait honoured.

    """

    max_attempts: int = 20
    base_ms: int = 500
    cap_ms: int = 60_000
    max_retry_after_ms: int = 300_000


def classify_status(status: int | None) -> Outcome:
    """Classify an HTTP answer (None: no answer, a network error).

    Args:
        status: The HTTP status code, or None on a transport error.

    Returns:
        ``ok`` for 2xx, ``retry`` for transport errors, 408, 425, 429 and 5xx,
        ``fatal`` for any other status (4xx: retrying will not help).

    """
    if status is None:
        return "retry"
    if 200 <= status < 300:
        return "ok"
    if status in (408, 425, 429) or status >= 500:
        return "retry"
    return "fatal"


def parse_retry_after(value: str | None, now_ms: int) -> int | None:
    """Parse a Retry-After header (delta seconds or an HTTP date) into a wait.

    Args:
        value: The header value, or None.
        now_ms: Current time (UTC epoch ms), for HTTP dates.

    Returns:
        Milliseconds to wait (never negative), or None when absent or invalid.

    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return int(text) * 1000
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0, int(when.timestamp() * 1000) - now_ms)


def backoff_ms(
    attempt: int, policy: RetryPolicy, rand: float, retry_after_ms: int | None = None
) -> int:
    """Return the wait before the next attempt: exponential with full jitter.

    Args:
        attempt: Attempts made so far (1 after the first failure).
        policy: The retry policy.
        rand: A uniform draw in [0, 1) (passed in to keep this pure).
        retry_after_ms: A server-requested wait; honoured (up to the policy's
            limit) when longer than the jittered wait.

    Returns:
        Milliseconds to wait.

    """
    exp = min(policy.cap_ms, policy.base_ms * (2 ** max(0, attempt - 1)))
    wait = int(rand * exp)
    if retry_after_ms is not None:
        wait = max(wait, min(retry_after_ms, policy.max_retry_after_ms))
    return wait


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What to do after a failed attempt (see :func:`plan_retry`).

    Attributes:
        step: ``retry`` (wait in-line, then try again), ``defer`` (record the delivery
            and try again from the pager's loop at ``at_ms``) or ``dead`` (dead-letter).
        at_ms: When the next attempt is due (``retry`` and ``defer``).
        why: For ``dead``: ``attempts`` (all used) or ``deadline`` (it would pass).

    """

    step: RetryStep
    at_ms: int = 0
    why: str = ""


def plan_retry(
    *, attempts: int, first_ms: int, now_ms: int, wait_ms: int, waited_ms: int,
    policy: RetryPolicy, deadline_ms: int, inline_ms: int,
) -> RetryPlan:
    """Decide between retrying now (after an in-line wait), deferring, and dead-lettering.

    Args:
        attempts: Attempts made so far.
        first_ms: When the delivery's first attempt was made (or due).
        now_ms: Current time.
        wait_ms: The wait before the next attempt may go out (backoff, ``Retry-After``,
            an open breaker's time to its next probe).
        waited_ms: How long this delivery has already waited in-line.
        policy: The retry policy (``max_attempts``).
        deadline_ms: Longest time from the first attempt to the last.
        inline_ms: Longest total in-line wait of one delivery (0: never wait in-line).

    Returns:
        ``dead`` when every attempt was used or the next one would come past the
        deadline; ``retry`` when the wait fits the in-line budget; else ``defer``.

    """
    at = now_ms + max(0, wait_ms)
    if attempts >= policy.max_attempts:
        return RetryPlan("dead", why="attempts")
    if at - first_ms > deadline_ms:
        return RetryPlan("dead", why="deadline")
    if waited_ms + max(0, wait_ms) <= inline_ms:
        return RetryPlan("retry", at)
    return RetryPlan("defer", at)


# ---------------------------------------------------------- circuit breaker


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a receiver's breaker opens and how long it stays open."""

    failure_threshold: int = 5
    open_ms: int = 30_000


@dataclass(frozen=True, slots=True)
class BreakerState:
    """A receiver's breaker: consecutive failures and when it opened."""

    mode: BreakerMode = "closed"
    failures: int = 0
    opened_at_ms: int = 0


def breaker_allow(
    state: BreakerState, policy: BreakerPolicy, now_ms: int
) -> tuple[BreakerState, bool, int]:
    """Ask whether a call may go out now.

    Args:
        state: The breaker state.
        policy: The breaker policy.
        now_ms: Current time.

    Returns:
        The new state, whether the call may go out, and (when not) the
        milliseconds until a probe will be allowed.

    """
    if state.mode == "closed":
        return state, True, 0
    if state.mode == "open":
        ready_at = state.opened_at_ms + policy.open_ms
        if now_ms >= ready_at:
            return replace(state, mode="half_open"), True, 0
        return state, False, ready_at - now_ms
    # half_open: one probe is in flight; callers are sequential, so allow it.
    return state, True, 0


def breaker_wait_ms(state: BreakerState, policy: BreakerPolicy, now_ms: int) -> int:
    """Return how long until an open breaker lets its probe out (0 when not open).

    Args:
        state: The breaker state.
        policy: The breaker policy.
        now_ms: Current time.

    Returns:
        Milliseconds to wait, never negative.

    """
    if state.mode != "open":
        return 0
    return max(0, state.opened_at_ms + policy.open_ms - now_ms)


def breaker_record(
    state: BreakerState, policy: BreakerPolicy, *, success: bool, now_ms: int
) -> BreakerState:
    """Record a call's outcome.

    Args:
        state: The breaker state.
        policy: The breaker policy.
        success: Whether the receiver answered well (a fatal 4xx counts as an
            answer: the receiver is up).
        now_ms: Current time.

    Returns:
        The new state.

    """
    if success:
        return BreakerState()
    failures = state.failures + 1
    if state.mode == "half_open" or failures >= policy.failure_threshold:
        return BreakerState(mode="open", failures=failures, opened_at_ms=now_ms)
    return BreakerState(mode="closed", failures=failures)


# ------------------------------------------------------------ dedup window


@dataclass(frozen=True, slots=True)
class Notification:
    """The last notification sent to a receiver for a dedup key.

    ``raw`` keeps a firing alert's encoded record, so the pager can send it to
    Alertmanager again before the ``endsAt`` it gave it passes (``Pager.refresh``).
    """

    receiver: str
    dedup_key: str
    status: str
    sent_at_ms: int
    alert_id: str = ""
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class Deferred:
    """A delivery waiting in the state dir for its next attempt (``deferred.jsonl``).

    One per (receiver, dedup key): a newer alert for the key replaces it. ``raw`` is the
    encoded alert to send; ``topic``, ``partition``, ``offset`` and ``key`` say where it
    came from, for its dead letter (partition -1: an alert a silence held back).
    """

    receiver: str
    dedup_key: str
    status: str
    alert_id: str
    raw: bytes
    attempts: int
    first_ms: int
    next_ms: int
    last_error: str
    topic: str = ""
    partition: int = -1
    offset: int = -1
    key: bytes | None = None


def decide_send(
    last: Notification | None, status: str, now_ms: int, repeat_interval_ms: int,
    *, update: bool = False,
) -> SendDecision:
    """Decide whether an alert should be sent to a receiver.

    Args:
        last: The last notification for (receiver, dedup key), if any.
        status: The alert's status, ``firing`` or ``resolved``.
        now_ms: Current time.
        repeat_interval_ms: The receiver's repeat interval.
        update: The firing alert is an update of the one last sent (:func:`is_update`):
            it is sent within the repeat interval too.

    Returns:
        ``send``, or why not: a firing alert already paged within the repeat
        interval (and not an update of it), a resolve for something never paged, or a
        resolve already sent.

    """
    if status == "resolved":
        if last is None:
            return "skip_not_paged"
        if last.status == "resolved":
            return "skip_already_resolved"
        return "send"
    recent = last is not None and now_ms - last.sent_at_ms < repeat_interval_ms
    if recent and last is not None and last.status == "firing" and not update:
        return "skip_repeat"
    return "send"


UPDATE_FIELDS = ("probable_cause", "owner", "severity")
"""What the processor changes when it re-sends a firing alert (same alert id and dedup key)
with a new probable cause: a receiver paged with the old values is sent the update."""


def is_update(sent: object, alert: object, *, alertmanager: bool = False) -> bool:
    """Return whether a firing alert updates the one last sent to a receiver.

    The processor re-sends a firing alert when its probable cause changes (same alert id
    and dedup key, a new cause, owner, summary and evidence). Within the repeat interval
    the pager skipped it at every receiver: PagerDuty, Opsgenie, Slack, the webhook and
    Alertmanager kept the first cause (and Alertmanager's refreshes re-sent the first
    record) for as long as the alert fired. An update is a later record (``emitted_at_ms``:
    a replay of an older one is not) of the same episode (``alert_id``) whose cause, owner
    or severity differs; for an Alertmanager receiver, whose label fields stay as first
    sent (its identity), one whose annotations (title, summary, evidence) differ.

    Args:
        sent: The alert last sent to the receiver (firing).
        alert: The firing alert now delivered (for Alertmanager: with the labels it knows).
        alertmanager: Whether the receiver is an Alertmanager.

    Returns:
        Whether to send it although the receiver was paged within its repeat interval.

    """
    def field(a: object, name: str) -> object:
        return getattr(a, name, None)

    def emitted(a: object) -> int:
        return int(getattr(a, "emitted_at_ms", 0) or 0)

    if field(alert, "alert_id") != field(sent, "alert_id") or emitted(alert) <= emitted(sent):
        return False
    if alertmanager:
        return bool(alertmanager_alert(sent, 0, "", 0)["annotations"]
                    != alertmanager_alert(alert, 0, "", 0)["annotations"])
    return any(str(field(sent, f) or "") != str(field(alert, f) or "") for f in UPDATE_FIELDS)
