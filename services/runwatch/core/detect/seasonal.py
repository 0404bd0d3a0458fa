"""Seasonal baselines: a value judged against the usual level of its hour.

Real telemetry is seasonal: traffic, load and their costs follow the hour of
the day and the day of the week. A :class:`SlotBaseline` keeps an EW mean per
slot of a cycle (hour of day: 24 slots; hour of week: 168, Monday 00:00 UTC
first) and the spread of the values around their slot's mean, pooled over
slots. Its raw evidence is the value's distance from its slot's mean in units
of that spread, mapped into [0, 1] as the default detector's other evidence.

Constants are derived, not fitted: a slot's fading is the detector's global
fading times the number of slots, so all slots together remember as many
values as the global baseline; the pooled spread fades like the global one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Self

from runwatch.core.detect.base import State

HOUR_MS = 3_600_000
DAY_SLOTS = 24
WEEK_SLOTS = 168
WEEK_MS = WEEK_SLOTS * HOUR_MS
MONDAY_OFFSET_H = 72  # 1970-01-01 00:00 UTC was a Thursday: hour + 72 counts from a Monday


def epoch_hour(t_ms: int) -> int:
    """Return the hours from Monday 1969-12-29 00:00 UTC to ``t_ms`` (slot: this mod slots)."""
    return t_ms // HOUR_MS + MONDAY_OFFSET_H


def season_slot(t_ms: int, slots: int) -> int:
    """Return the hour-of-day (``slots`` = 24) or hour-of-week (168) slot of a UTC time."""
    return epoch_hour(t_ms) % slots


@dataclass(slots=True)
class SlotBaseline:
    """EW mean per slot of a cycle and the pooled spread of values around them.

    Attributes:
        slots: Slots per cycle (24: hour of day, 168: hour of week).
        fading: Fading of the pooled spread; a slot's mean fades ``slots`` times faster.
        warmup: Values (any slot) before the spread uses ``fading`` (counting average before).

    """

    slots: int
    fading: float
    warmup: int
    means: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    sq: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        """Allocate the slots of a fresh baseline."""
        if not self.means:
            self.means = [0.0] * self.slots
            self.counts = [0] * self.slots

    def raw(self, x: float, hour: int, eps: float, z_scale: float) -> float:
        """Return ``erf(|x - slot mean| / (spread * z_scale))``; 0 while the slot is empty.

        Args:
            x: The value.
            hour: Its :func:`epoch_hour`.
            eps: Floor of the spread.
            z_scale: Divisor of the distance in spreads before ``erf``.

        """
        slot = hour % self.slots
        if not self.counts[slot]:
            return 0.0
        spread = math.sqrt(self.sq) if self.sq > 0.0 else 0.0
        if spread < eps:
            spread = eps
        return math.erf(abs(x - self.means[slot]) / (spread * z_scale))

    def learn(self, x: float, hour: int) -> None:
        """Fold ``x`` (at :func:`epoch_hour` ``hour``) into its slot's mean and the pooled spread.

        The spread learns only from values whose slot already had a mean.
        """
        slot = hour % self.slots
        count = self.counts[slot]
        mean = self.means[slot]
        if count:
            res = x - mean
            a = self.fading if self.n >= self.warmup else 1.0 / (self.n + 1)
            self.sq = a * res * res + (1 - a) * self.sq
            self.n += 1
        b = 1.0 / (count + 1)
        if b < self.fading * self.slots:
            b = self.fading * self.slots
        self.means[slot] = mean + b * (x - mean)
        self.counts[slot] = count + 1

    def to_state(self) -> State:
        """Return the state as a JSON-able dict."""
        return {f: getattr(self, f) for f in self.__slots__}

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        return cls(**state)
