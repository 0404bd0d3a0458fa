"""NAB's relative entropy detector (Wang et al. 2011, multiple hypotheses).

The last ``window`` values are quantized into ``bins`` bins over the value
range and their histogram is tested against every stored hypothesis with the
relative-entropy statistic ``2 W KL(P_hat || P_i)``; below the chi-squared
threshold (0.99, ``bins - 1`` degrees of freedom) the closest hypothesis is
accepted. A window that agrees with no hypothesis becomes a new one and scores
1; one that agrees with a hypothesis seen at most ``c_th`` times also scores 1;
everything else 0. NAB quantizes with the min and max of the whole file; this
streaming version uses the range of the values seen so far (current one
included).
"""

from __future__ import annotations

import math
from collections import deque

from runwatch.core.detect.base import State

CHI2_99_DF4 = 13.276704135987622  # scipy.stats.chi2.isf(0.01, 4)


class RelativeEntropyDetector:
    """Relative entropy with multiple hypotheses (NAB ``relative_entropy``)."""

    __slots__ = ("window", "bins", "threshold", "c_th", "buf", "lo", "hi", "hyps", "counts")

    def __init__(
        self, window: int = 52, bins: int = 5, threshold: float = CHI2_99_DF4, c_th: int = 1
    ) -> None:
        """Create with NAB's parameters (W = 52, 5 bins, chi-squared 0.99, c_th = 1)."""
        self.window = window
        self.bins = bins
        self.threshold = threshold
        self.c_th = c_th
        self.buf: deque[float] = deque(maxlen=window)
        self.lo = math.inf
        self.hi = -math.inf
        self.hyps: list[list[float]] = []
        self.counts: list[int] = []

    def _histogram(self, x: float) -> list[float] | None:
        lo, hi = min(self.lo, x), max(self.hi, x)
        step = (hi - lo) / self.bins
        if step == 0.0 or len(self.buf) + 1 < self.window:
            return None
        counts = [0] * self.bins
        values = list(self.buf)[1:] if len(self.buf) == self.window else list(self.buf)
        for v in [*values, x]:
            b = math.ceil((v - lo) / step)  # 0 .. bins, as NAB; numpy puts `bins` in the last bin
            counts[min(max(b, 0), self.bins - 1)] += 1
        n = float(sum(counts))
        return [c / n for c in counts]

    def _agreement(self, p_hat: list[float]) -> int:
        best, index = math.inf, -1
        for i, q in enumerate(self.hyps):
            kl = 0.0
            for p, qq in zip(p_hat, q, strict=True):
                if p > 0.0:
                    if qq == 0.0:
                        kl = math.inf
                        break
                    kl += p * math.log(p / qq)
            stat = 2 * self.window * kl
            if stat < self.threshold and stat < best:
                best, index = stat, i
        return index

    def _step(self, x: float, learn: bool) -> float:
        p_hat = self._histogram(x)
        if p_hat is None:
            return 0.0
        if not self.hyps:
            if learn:
                self.hyps.append(p_hat)
                self.counts.append(1)
            return 0.0
        index = self._agreement(p_hat)
        if index < 0:
            if learn:
                self.hyps.append(p_hat)
                self.counts.append(1)
            return 1.0
        if learn:
            self.counts[index] += 1
        return 1.0 if self.counts[index] + (0 if learn else 1) <= self.c_th else 0.0

    def score_one(self, x: float) -> float:
        """Return 1.0 if the window ending at ``x`` is anomalous, else 0.0."""
        return self._step(x, learn=False)

    def learn_one(self, x: float) -> None:
        """Update the hypotheses with the window ending at ``x`` and slide it."""
        self._step(x, learn=True)
        self.buf.append(x)
        self.lo, self.hi = min(self.lo, x), max(self.hi, x)

    def to_state(self) -> State:
        """Return the window and hypotheses as a JSON-able dict."""
        return {
            "kind": "relative_entropy",
            "buf": list(self.buf),
            "lo": self.lo,
            "hi": self.hi,
            "hyps": self.hyps,
            "counts": self.counts,
        }
