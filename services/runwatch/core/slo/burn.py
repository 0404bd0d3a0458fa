"""Error budgets and multi-window burn rates, adapted to low event rates (pure).

The burn rate is how fast an objective spends its error budget: the error
ratio over a span divided by the ratio the objective allows,
``(bad / valid) / (1 - target)``. A rate of 1 spends exactly the whole
budget over the SLO window. The Google SRE workbook ("Alerting on SLOs",
multiwindow, multi-burn-rate alerts) pages when a share of the budget is
spent within a long window *and* a short window (a twelfth of it) still burns
that fast; the rate for a share ``s`` spent within ``long`` of a window ``W``
is ``s * W / long``: for 30 days, 2 % in 1 h is 14.4, 5 % in 6 h is 6, 10 % in
3 days is 1. A span burning at the tier's rate as written fires: float rounding of
``1 - target`` is no reason to stay quiet (``exceeds`` of the release gates).

Training objectives see a few events a day, where one bad event in an hour
is a 100 % error ratio. So a burn-rate tier fires only when its long window
holds at least ``min_events`` events, and two budget conditions, which need
no rate, cover the rest: **budget exhausted** (more bad events than the
budget allows: the SLI is below target) and **the next bad event exhausts
the budget** (once a bad event has spent part of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runwatch.core.gates.evaluate import exceeds
from runwatch.core.records import Severity

HOUR_MS = 3_600_000
#: The SRE workbook's tiers for a 30-day window: (budget share, long window, severity).
DEFAULT_TIERS: tuple[tuple[float, int, Severity], ...] = (
    (0.02, 1 * HOUR_MS, "critical"),
    (0.05, 6 * HOUR_MS, "critical"),
    (0.10, 72 * HOUR_MS, "warning"),
)


@dataclass(frozen=True, slots=True)
class BurnTier:
    """One burn-rate alert: fire when ``budget_share`` is spent within ``long_ms``.

    Attributes:
        budget_share: Share of the whole budget (0.02 = 2 %).
        long_ms: The long window.
        short_ms: The short window (the workbook's: a twelfth of the long one).
        severity: Severity of the alert.

    """

    budget_share: float
    long_ms: int
    short_ms: int
    severity: Severity

    def rate(self, window_ms: int) -> float:
        """Return the burn rate that spends ``budget_share`` within ``long_ms`` of ``window_ms``."""
        return burn_threshold(self.budget_share, window_ms, self.long_ms)


def default_tiers() -> tuple[BurnTier, ...]:
    """Return the SRE workbook's three tiers (short windows a twelfth of the long ones)."""
    return tuple(BurnTier(s, long, long // 12, sev) for s, long, sev in DEFAULT_TIERS)


def burn_threshold(budget_share: float, window_ms: int, long_ms: int) -> float:
    """Return the burn rate at which ``budget_share`` of the budget is spent within ``long_ms``.

    Args:
        budget_share: Share of the budget (0.02 = 2 %).
        window_ms: The SLO window.
        long_ms: The alert's window.

    Returns:
        ``budget_share * window_ms / long_ms`` (30 days, 2 %, 1 h: 14.4).

    """
    return budget_share * window_ms / long_ms


def burn_rate(bad: int, valid: int, target: float) -> float | None:
    """Return the burn rate of ``bad`` out of ``valid`` events (None without events).

    Args:
        bad: Bad events.
        valid: Valid events.
        target: The objective, e.g. 0.999.

    Returns:
        ``(bad / valid) / (1 - target)``; ``inf`` for a bad event under a 100 % target.

    """
    if valid <= 0:
        return None
    allowed = 1.0 - target
    ratio = bad / valid
    if allowed <= 0:
        return float("inf") if bad else 0.0
    return ratio / allowed


def budget_consumed(bad: int, valid: int, target: float) -> float | None:
    """Return the share of the window's error budget spent (1.0 = all of it; None: no data).

    The budget is the bad events the target allows among the window's valid
    events, ``(1 - target) * valid``.
    """
    if valid <= 0:
        return None
    allowed = (1.0 - target) * valid
    if allowed <= 0:
        return float("inf") if bad else 0.0
    return bad / allowed


def exhausted(bad: int, valid: int, target: float) -> bool:
    """Whether more bad events happened than the budget allows (the SLI is below target)."""
    return valid > 0 and bad > (1.0 - target) * valid + 1e-9


def next_bad_exhausts(bad: int, valid: int, target: float) -> bool:
    """Whether one more bad event would exhaust a budget already spent in part.

    Only once a bad event has happened: a budget smaller than one event (99.9 %
    of a few runs) would otherwise warn for ever, before anything went wrong.
    """
    return (bad > 0 and not exhausted(bad, valid, target)
            and exhausted(bad + 1, valid + 1, target))


@dataclass(frozen=True, slots=True)
class Condition:
    """A reason to alert.

    Attributes:
        name: ``budget_exhausted``, ``next_bad_exhausts`` or ``burn_rate``.
        severity: The alert's severity.
        detail: In words, with the figures.

    """

    name: str
    severity: Severity
    detail: str


def burn_conditions(
    events: Sequence[tuple[int, bool]], now_ms: int, window_ms: int, target: float,
    tiers: Sequence[BurnTier], min_events: int,
) -> list[Condition]:
    """Return the burn-rate tiers that fire: both windows burn at the tier's rate.

    Args:
        events: ``(at_ms, good)`` of the window's events.
        now_ms: Evaluation time.
        window_ms: The SLO window's length.
        target: The objective.
        tiers: Burn-rate tiers.
        min_events: Events the long window needs before its rate counts.

    Returns:
        One condition per firing tier.

    """
    out: list[Condition] = []
    for tier in tiers:
        rate = tier.rate(window_ms)
        spans = []
        for span in (tier.long_ms, tier.short_ms):
            inside = [good for at, good in events if now_ms - span < at <= now_ms]
            spans.append((len(inside), sum(1 for g in inside if not g)))
        (n_long, bad_long), (n_short, bad_short) = spans
        if n_long < min_events:
            continue
        long_rate = burn_rate(bad_long, n_long, target)
        short_rate = burn_rate(bad_short, n_short, target)
        # a rate equal to the tier's as written fires: 3 bad of 50 under 99 % is 6.0, which
        # floats make 5.999999999999995 against 6.0 (5 % of a 30-day budget in 6 h)
        if long_rate is None or short_rate is None or exceeds(rate, long_rate) \
                or exceeds(rate, short_rate):
            continue
        out.append(Condition(
            "burn_rate", tier.severity,
            f"burn rate {long_rate:.1f} over {span_label(tier.long_ms)} and {short_rate:.1f} "
            f"over {span_label(tier.short_ms)} (threshold {rate:.1f}: "
            f"{tier.budget_share:.0%} of the budget)",
        ))
    return out


def span_label(ms: int) -> str:
    """Format a span as ``3d``, ``6h`` or ``5m``."""
    if ms % (24 * HOUR_MS) == 0:
        return f"{ms // (24 * HOUR_MS)}d"
    if ms % HOUR_MS == 0:
        return f"{ms // HOUR_MS}h"
    return f"{ms // 60_000}m"
