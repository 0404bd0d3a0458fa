"""Slow-trend detection: a two-sided CUSUM on residuals from a slow baseline.

Spike detectors adapt to a value that creeps up a little at every step (a data
loader lengthening over hours): the z-score of each step stays small. A CUSUM
accumulates the small standardized excesses ``z - k`` against a baseline that
adapts far more slowly than the drift, so a sustained creep crosses ``h``
while isolated noise does not. An EW least-squares slope per step is kept as
evidence (how fast the metric moves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Self

from runwatch.core.detect.base import State, check_finite, check_kind


@dataclass(slots=True)
class TrendDetector:
    """Two-sided CUSUM of standardized residuals, with an EW slope estimate.

    Attributes:
        k: Allowance per step in baseline standard deviations.
        h: Decision interval: the score reaches 1.0 when a CUSUM reaches ``h``.
        baseline_fading: Fading factor of the baseline mean/variance (small = slow).
        slope_fading: Fading factor of the EW regression behind :attr:`slope`.
        warmup: Values learned before the CUSUMs start.

    """

    k: float = 0.5
    h: float = 8.0
    baseline_fading: float = 0.002
    slope_fading: float = 0.01
    warmup: int = 30
    n: int = 0
    mean: float = 0.0
    sq_mean: float = 0.0
    pos: float = 0.0
    neg: float = 0.0
    st: float = 0.0
    sx: float = 0.0
    stt: float = 0.0
    stx: float = 0.0

    def _z(self, x: float) -> float:
        var = self.sq_mean - self.mean * self.mean
        sd = math.sqrt(var) if var > 0 else 0.0
        if sd <= 1e-12 * max(1.0, abs(self.mean)):
            return 0.0 if x == self.mean else math.copysign(self.h, x - self.mean)
        return (x - self.mean) / sd

    def _cusums(self, x: float) -> tuple[float, float]:
        z = self._z(x)
        return max(0.0, self.pos + z - self.k), max(0.0, self.neg - z - self.k)

    def score_one(self, x: float) -> float:
        """Return ``max(CUSUM+, CUSUM-) / h`` after ``x``, clipped to [0, 1]."""
        x = check_finite(x)
        if self.n < self.warmup:
            return 0.0
        pos, neg = self._cusums(x)
        return min(1.0, max(pos, neg) / self.h)

    def learn_one(self, x: float) -> None:
        """Advance the CUSUMs and the baseline with ``x``.

        The baseline stops adapting while a CUSUM is above ``h / 2`` so a
        trend cannot hide itself by dragging the baseline along.
        """
        x = check_finite(x)
        if self.n >= self.warmup:
            self.pos, self.neg = self._cusums(x)
            if max(self.pos, self.neg) >= self.h:
                self.pos = self.neg = 0.0
                self.mean = x
        adapt = self.n < self.warmup or max(self.pos, self.neg) < self.h / 2
        if self.n == 0:
            self.mean, self.sq_mean = x, x * x
        elif adapt:
            a = 1.0 / (self.n + 1) if self.n < self.warmup else self.baseline_fading
            self.mean = a * x + (1 - a) * self.mean
            self.sq_mean = a * x * x + (1 - a) * self.sq_mean
        b = self.slope_fading
        t = float(self.n)
        self.st = b * t + (1 - b) * self.st
        self.sx = b * x + (1 - b) * self.sx
        self.stt = b * t * t + (1 - b) * self.stt
        self.stx = b * t * x + (1 - b) * self.stx
        self.n += 1

    @property
    def slope(self) -> float:
        """EW least-squares slope of the value per step (0 until defined)."""
        var_t = self.stt - self.st * self.st
        if var_t <= 1e-12:
            return 0.0
        return (self.stx - self.st * self.sx) / var_t

    def seed(self, mean: float, var: float, n: int) -> None:
        """Start the baseline from summary statistics of finished runs."""
        self.mean = float(mean)
        self.sq_mean = float(var) + float(mean) ** 2
        self.n = max(int(n), self.warmup)

    def to_state(self) -> State:
        """Return the state as a JSON-able dict."""
        return {"kind": "trend", **{f: getattr(self, f) for f in self.__slots__}}

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        check_kind(state, "trend")
        return cls(**{k: v for k, v in state.items() if k != "kind"})
