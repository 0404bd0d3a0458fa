"""An HTM-style anomaly likelihood layer over one stream of raw scores.

Like NAB's ``anomaly_likelihood.py``: the short average of the raw score is
compared with the long-run mean and spread of that average (here exponentially
weighted, so the state is a few floats and a short ring buffer); the Gaussian
upper tail probability ``q`` is mapped to ``log(q) / log(1e-10)`` in [0, 1].
Each series, and each kind of evidence, is so judged against its own usual
level of surprise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Self

from runwatch.core.detect.base import State

_SQRT2 = math.sqrt(2.0)
_LOG_SCALE = -23.02585084720009  # log(1e-10), as HTM's log likelihood
_NEG_INF = -math.inf


def tail_score(arg: float) -> float:
    """Map a standardised short average (:meth:`Likelihood.tail_arg`) to a score in [0, 1].

    The Gaussian upper tail ``q = erfc(arg) / 2`` as ``log(q) / log(1e-10)``,
    clipped; ``-inf`` (a layer still warming up) scores 0.
    """
    tail = 0.5 * math.erfc(arg)
    if tail >= 1.0:
        return 0.0
    out = math.log(1.0000000001 - (1.0 - tail)) / _LOG_SCALE
    return 1.0 if out > 1.0 else (out if out > 0.0 else 0.0)


@dataclass(slots=True)
class Likelihood:
    """Likelihood of the recent raw scores against their own long-run distribution.

    Attributes:
        short: Length of the short average (ring buffer).
        fading: EW fading factor of the long-run mean and second moment.
        warmup: Raw scores learned before the layer scores anything.
        min_std: Floor of the long-run spread: a series whose raw scores barely
            vary (a perfectly periodic one) is not alarmed by tiny wiggles.

    """

    short: int = 5
    fading: float = 0.002
    warmup: int = 300
    min_std: float = 1e-3
    buf: list[float] = field(default_factory=list)
    pos: int = 0
    total: float = 0.0
    mean: float = 0.0
    sq: float = 0.0
    n: int = 0

    def score(self, raw: float) -> float:
        """Return the log-scaled likelihood score in [0, 1] if ``raw`` came next."""
        return tail_score(self.tail_arg(raw))

    def tail_arg(self, raw: float) -> float:
        """Return the standardised short average if ``raw`` came next (``-inf`` in warm-up).

        :func:`tail_score` of it is :meth:`score`; it is non-decreasing in the
        argument, so the largest of several layers' scores is ``tail_score`` of
        their largest argument, one tail evaluation instead of one per layer.
        """
        if self.n < self.warmup:
            return _NEG_INF
        buf = self.buf
        if len(buf) < self.short:
            avg = (self.total + raw) / (len(buf) + 1)
        else:
            avg = (self.total - buf[self.pos] + raw) / self.short
        mean = self.mean
        var = self.sq - mean * mean
        std = math.sqrt(var) if var > 0.0 else 0.0
        if std < self.min_std:
            std = self.min_std
        return (avg - mean) / (std * _SQRT2)

    def learn(self, raw: float) -> None:
        """Fold ``raw`` into the short average and the long-run statistics."""
        buf = self.buf
        size = len(buf)
        if size < self.short:
            buf.append(raw)
            self.total += raw
            size += 1
        else:
            pos = self.pos
            self.total += raw - buf[pos]
            buf[pos] = raw
            pos += 1
            self.pos = 0 if pos == size else pos
        avg = self.total / size
        n = self.n
        b = self.fading if n >= self.warmup else 1.0 / (n + 1)
        self.mean = b * avg + (1 - b) * self.mean
        self.sq = b * avg * avg + (1 - b) * self.sq
        self.n = n + 1

    def to_state(self) -> State:
        """Return the state as a JSON-able dict."""
        return {f: (list(self.buf) if f == "buf" else getattr(self, f)) for f in self.__slots__}

    @classmethod
    def from_state(cls, state: State) -> Self:
        """Rebuild from :meth:`to_state` output."""
        fields = dict(state)
        fields["buf"] = [float(v) for v in fields["buf"]]
        return cls(**fields)
