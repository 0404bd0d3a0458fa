"""SLO time: cron-like cutoffs in a time zone, rolling and calendar windows (pure).

A cutoff is a five-field cron expression (``minute hour day-of-month month
day-of-week``: ``*``, ``*/n``, ``a-b``, ``a-b/n``, lists ``a,b``; day of week
0-7 with 0 and 7 Sunday; when both day fields are restricted either matches,
as in cron) read in an IANA time zone through :mod:`zoneinfo`. Local times
that do not exist (the hour skipped when clocks go forward) fall on the
instant after the gap, as :mod:`datetime` maps them (``fold=0``); local times
that happen twice (clocks go back) count once, at their first occurrence.
All instants are UTC epoch milliseconds; nothing here reads the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 7))
DAY_MS = 86_400_000
_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30,
               12: 31}


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression.

    Attributes:
        text: The expression as written.
        minutes: Matching minutes.
        hours: Matching hours.
        days: Matching days of the month.
        months: Matching months.
        weekdays: Matching days of the week (0 = Sunday ... 6).
        days_any: The day-of-month field is ``*``.
        weekdays_any: The day-of-week field is ``*``.

    """

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_any: bool
    weekdays_any: bool

    def matches_day(self, d: date) -> bool:
        """Whether the calendar day ``d`` is one the expression fires on."""
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.days_any and self.weekdays_any:
            return True
        if self.days_any:
            return dow
        if self.weekdays_any:
            return dom
        return dom or dow


def _field(text: str, name: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                msg = f"bad step {step_text!r} in the {name} field"
                raise ValueError(msg)
            step = int(step_text)
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            left, _, right = rng.partition("-")
            if not (left.isdigit() and right.isdigit()):
                msg = f"bad range {rng!r} in the {name} field"
                raise ValueError(msg)
            a, b = int(left), int(right)
        elif rng.isdigit():
            a = int(rng)
            b = hi if step_text else a
        else:
            msg = f"bad value {rng!r} in the {name} field"
            raise ValueError(msg)
        if a < lo or b > hi or a > b:
            msg = f"{rng!r} is outside {lo}-{hi} in the {name} field"
            raise ValueError(msg)
        out.update(range(a, b + 1, step))
    return out


def parse_cron(text: str) -> Cron:
    """Parse a five-field cron expression.

    Args:
        text: E.g. ``"0 6 * * 1-5"`` (06:00 on weekdays).

    Returns:
        The parsed expression.

    Raises:
        ValueError: It is not a five-field expression or a field is out of range.

    """
    parts = text.split()
    if len(parts) != len(_FIELDS):
        msg = f"cron expression {text!r} needs 5 fields (minute hour day month weekday)"
        raise ValueError(msg)
    sets = [_field(p, name, lo, hi) for p, (name, lo, hi) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    if parts[2] != "*" and parts[4] == "*" and not any(
            d <= _MONTH_DAYS[m] for m in sets[3] for d in sets[2]):
        msg = (f"cron expression {text!r} never fires: no month it names has "
               f"day {','.join(map(str, sorted(sets[2])))}")
        raise ValueError(msg)
    return Cron(text, tuple(sorted(sets[0])), tuple(sorted(sets[1])), frozenset(sets[2]),
                frozenset(sets[3]), weekdays, parts[2] == "*", parts[4] == "*")


def zone(name: str) -> ZoneInfo:
    """Return the IANA time zone ``name``.

    Raises:
        ValueError: The zone is unknown.

    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        msg = f"unknown time zone {name!r} (use an IANA name such as Europe/Berlin or UTC)"
        raise ValueError(msg) from exc


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def cutoffs(cron: Cron, tz: ZoneInfo, start_ms: int, end_ms: int) -> list[int]:
    """Return the instants ``start_ms < t <= end_ms`` at which ``cron`` fires in ``tz``.

    Args:
        cron: The expression.
        tz: Its time zone.
        start_ms: Exclusive start (UTC epoch ms).
        end_ms: Inclusive end.

    Returns:
        Sorted, distinct instants.

    """
    if end_ms <= start_ms:
        return []
    first = datetime.fromtimestamp(start_ms / 1000, tz).date() - timedelta(days=1)
    last = datetime.fromtimestamp(end_ms / 1000, tz).date() + timedelta(days=1)
    out: set[int] = set()
    d = first
    while d <= last:
        if cron.matches_day(d):
            for h in cron.hours:
                for m in cron.minutes:
                    t = _ms(datetime(d.year, d.month, d.day, h, m, tzinfo=tz))
                    if start_ms < t <= end_ms:
                        out.add(t)
        d += timedelta(days=1)
    return sorted(out)


def next_cutoff(cron: Cron, tz: ZoneInfo, after_ms: int, horizon_days: int = 400) -> int | None:
    """Return the first instant after ``after_ms`` at which ``cron`` fires (None within 400 days).

    Args:
        cron: The expression.
        tz: Its time zone.
        after_ms: Exclusive start.
        horizon_days: How far to look.

    """
    step = 7 * DAY_MS
    t = after_ms
    while t < after_ms + horizon_days * DAY_MS:
        found = cutoffs(cron, tz, t, t + step)
        if found:
            return found[0]
        t += step
    return None


def previous_cutoff(cron: Cron, tz: ZoneInfo, before_ms: int,
                    horizon_days: int = 400) -> int | None:
    """Return the last instant strictly before ``before_ms`` at which ``cron`` fires.

    Args:
        cron: The expression.
        tz: Its time zone.
        before_ms: Exclusive end.
        horizon_days: How far back to look.

    """
    step = 7 * DAY_MS
    t = before_ms - 1
    while t > before_ms - horizon_days * DAY_MS:
        found = cutoffs(cron, tz, t - step, t)
        if found:
            return found[-1]
        t -= step
    return None


@dataclass(frozen=True, slots=True)
class Window:
    """An SLO's time window.

    Attributes:
        duration_ms: Rolling length (rolling windows), or 0 for a calendar window.
        calendar: ``day``, ``week`` (ISO, from Monday) or ``month`` for a calendar
            window; "" for a rolling one.
        tz: Time zone of a calendar window's boundaries.

    """

    duration_ms: int
    calendar: str = ""
    tz: str = "UTC"

    def start(self, now_ms: int) -> int:
        """Return the window's (exclusive) start for an evaluation at ``now_ms``."""
        if not self.calendar:
            return now_ms - self.duration_ms
        local = datetime.fromtimestamp(now_ms / 1000, zone(self.tz))
        day = local.date()
        if self.calendar == "week":
            day -= timedelta(days=day.weekday())
        elif self.calendar == "month":
            day = day.replace(day=1)
        return _ms(datetime(day.year, day.month, day.day, tzinfo=zone(self.tz))) - 1

    def length_ms(self, now_ms: int) -> int:
        """Return the window's full length (a calendar period's whole length)."""
        if not self.calendar:
            return self.duration_ms
        start = self.start(now_ms) + 1
        local = datetime.fromtimestamp(start / 1000, zone(self.tz))
        if self.calendar == "day":
            nxt = local + timedelta(days=1)
        elif self.calendar == "week":
            nxt = local + timedelta(days=7)
        else:
            nxt = (local.replace(day=28) + timedelta(days=4)).replace(day=1)
        nxt = datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone(self.tz))
        return _ms(nxt) - start


def iso(ms: int) -> str:
    """Format an instant as ISO 8601 UTC (seconds)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
