"""Delivery decisions: retry/backoff, circuit breaker, dedup window, silences.

Everything here is pure: the caller passes ``now_ms`` (and the random draw for
jitter), performs the I/O, and feeds the outcome back. The pager service
(:mod:`runwatch.pager`) strings these together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Literal

Outcome = Literal["ok", "retry", "fatal"]
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

    max_attempts: int = 6
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


def decide_send(
    last: Notification | None, status: str, now_ms: int, repeat_interval_ms: int
) -> SendDecision:
    """Decide whether an alert should be sent to a receiver.

    Args:
        last: The last notification for (receiver, dedup key), if any.
        status: The alert's status, ``firing`` or ``resolved``.
        now_ms: Current time.
        repeat_interval_ms: The receiver's repeat interval.

    Returns:
        ``send``, or why not: a firing alert already paged within the repeat
        interval, a resolve for something never paged, or a resolve already sent.

    """
    if status == "resolved":
        if last is None:
            return "skip_not_paged"
        if last.status == "resolved":
            return "skip_already_resolved"
        return "send"
    recent = last is not None and now_ms - last.sent_at_ms < repeat_interval_ms
    if recent and last is not None and last.status == "firing":
        return "skip_repeat"
    return "send"


# ----------------------------------------------------------------- silences


_MATCHER = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(=~|!=|=)(.*)$")


@dataclass(frozen=True, slots=True)
class Matcher:
    """One silence matcher: ``name=value``, ``name!=value`` or ``name=~regex``."""

    name: str
    op: Literal["=", "!=", "=~"]
    value: str

    def accepts(self, attrs: Mapping[str, str]) -> bool:
        """Say whether the attributes satisfy this matcher.

        Args:
            attrs: Alert attributes (see ``runwatch.core.paging.routes.alert_attributes``).

        Returns:
            True when satisfied.

        """
        got = attrs.get(self.name, attrs.get(f"labels.{self.name}", ""))
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        return re.fullmatch(self.value, got) is not None

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"


def parse_matcher(text: str) -> Matcher:
    """Parse ``k=v``, ``k!=v`` or ``k=~regex``.

    Args:
        text: The matcher text.

    Returns:
        The matcher.

    Raises:
        ValueError: When the text is not a matcher or the regex is invalid.

    """
    m = _MATCHER.match(text.strip())
    if not m:
        msg = f"bad matcher {text!r}: use name=value, name!=value or name=~regex"
        raise ValueError(msg)
    name, op, value = m.groups()
    if op == "=~":
        try:
            re.compile(value)
        except re.error as exc:
            msg = f"bad matcher {text!r}: invalid regex: {exc}"
            raise ValueError(msg) from exc
    return Matcher(name, op, value)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Silence:
    """A silence: alerts matching every matcher are not sent while it is active."""

    silence_id: str
    matchers: tuple[Matcher, ...]
    starts_at_ms: int
    ends_at_ms: int
    reason: str
    created_by: str = ""

    def active(self, now_ms: int) -> bool:
        """Say whether the silence is in force.

        Args:
            now_ms: Current time.

        Returns:
            True between start (inclusive) and end (exclusive).

        """
        return self.starts_at_ms <= now_ms < self.ends_at_ms

    def silences(self, attrs: Mapping[str, str], now_ms: int) -> bool:
        """Say whether this silence mutes an alert now.

        Args:
            attrs: Alert attributes.
            now_ms: Current time.

        Returns:
            True when active and every matcher accepts.

        """
        return self.active(now_ms) and all(m.accepts(attrs) for m in self.matchers)


def find_silence(
    silences: Iterable[Silence], attrs: Mapping[str, str], now_ms: int
) -> Silence | None:
    """Return the first silence muting an alert now, if any.

    Args:
        silences: Known silences.
        attrs: Alert attributes.
        now_ms: Current time.

    Returns:
        The muting silence, or None.

    """
    for silence in silences:
        if silence.silences(attrs, now_ms):
            return silence
    return None


def expire_silence(silence: Silence, now_ms: int) -> Silence:
    """End a silence now (a no-op for one already over).

    Args:
        silence: The silence.
        now_ms: Current time.

    Returns:
        The silence ending at ``now_ms`` at the latest.

    """
    return replace(silence, ends_at_ms=min(silence.ends_at_ms, now_ms))
