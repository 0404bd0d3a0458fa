"""Event times the processor refuses: before a floor, or too far ahead of its clock.

One record stamped in the wrong unit (seconds, micro- or nanoseconds taken for
milliseconds) or with garbage would otherwise move its run's watermark, and
every genuine record of that stream after it would be dead-lettered as late
(and a far-future job event would make the stall rule fire). The run join
and the node router dead-letter such a record instead, with the reason this
module gives.
"""

from __future__ import annotations

MIN_EVENT_MS = 946_684_800_000
"""2000-01-01T00:00:00Z: the processor's default floor (the sink's tables keep the same one)."""
MIN_STORE_MS = -2_208_988_800_000
"""1900-01-01T00:00:00Z: the first instant the store's ``DateTime64(3)`` columns hold."""
MAX_STORE_MS = 10_413_791_999_999
"""2299-12-31T23:59:59.999Z: the last instant the store's ``DateTime64(3)`` columns hold.

A later one is stored all the same, and every query that reads it fails ("day 20794532
is outside the date range"); micro- or nanoseconds taken for milliseconds land there.
"""
MAX_AHEAD_MS = 366 * 86_400_000
"""The processor's default: how far ahead of its clock an event time may be (a year and a day).

Unit mix-ups put a time a factor of 1000 off (centuries ahead); clocks and
test fixtures a few weeks ahead pass.
"""


def absurd_event_time(at_ms: int, now_ms: int, min_ms: int, ahead_ms: int) -> str | None:
    """Return why an event time is refused, or None when it is plausible.

    Args:
        at_ms: The record's ``emitted_at_ms``.
        now_ms: The processor's clock.
        min_ms: Floor (0: no floor).
        ahead_ms: Most it may be ahead of ``now_ms`` (0: no bound).

    Returns:
        ``absurd timestamp: ...`` naming the value and the bound it breaks, or None.

    """
    if min_ms and at_ms < min_ms:
        return (f"absurd timestamp: emitted_at_ms {at_ms} is before {min_ms} "
                "(2000-01-01; seconds or a wrong unit for milliseconds?)")
    if ahead_ms and at_ms > now_ms + ahead_ms:
        return (f"absurd timestamp: emitted_at_ms {at_ms} is {at_ms - now_ms} ms ahead of the "
                f"processor's clock (at most {ahead_ms}; micro- or nanoseconds for "
                "milliseconds?)")
    return None


def unit_mixup(at_ms: float, now_ms: float) -> tuple[str, str] | None:
    """Where a producer's own time falls when it is no epoch milliseconds, and the likely unit.

    The processor's bounds (:data:`MIN_EVENT_MS`, :data:`MAX_AHEAD_MS` past ``now_ms``),
    checked where the producer can still be told (``runwatch.init(clock=)``,
    ``data.report``): ``clock=time.time`` gives seconds, ``time.time_ns`` nanoseconds.

    Returns:
        ``(where it falls, hint)``, or None when the time is plausible.

    """
    if at_ms < MIN_EVENT_MS:
        return "before 2000-01-01", "epoch seconds? give milliseconds"
    if at_ms > now_ms + MAX_AHEAD_MS:
        return "more than a year ahead", "micro- or nanoseconds? give milliseconds"
    return None
