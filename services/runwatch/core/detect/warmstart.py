"""Warm starts: seed a new run's detectors from finished runs of its family.

A run of a known experiment family on known hardware should not start cold:
its baseline (mean, variance, count) is pooled from the summary statistics of
finished runs of the same family and hardware, and detectors are seeded from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BaselineStats:
    """Summary statistics of one metric over one or more finished runs.

    Attributes:
        mean: Mean of the metric.
        var: Population variance of the metric.
        n: Number of samples behind the figures.

    """

    mean: float
    var: float
    n: int

    def __post_init__(self) -> None:
        if self.n < 0 or self.var < 0:
            msg = f"invalid baseline stats: n={self.n}, var={self.var}"
            raise ValueError(msg)


class Seedable(Protocol):
    """A detector that can start from summary statistics."""

    def seed(self, mean: float, var: float, n: int) -> None:
        """Seed the detector's baseline."""
        ...


def pool(stats: Iterable[BaselineStats]) -> BaselineStats | None:
    """Pool per-run statistics into one baseline (exact pooled mean and variance).

    Args:
        stats: Statistics of finished runs of the same family and hardware.

    Returns:
        The pooled statistics, or None when no run has samples.

    """
    n_total = 0
    mean = 0.0
    m2 = 0.0
    for s in stats:
        if s.n == 0:
            continue
        n_new = n_total + s.n
        delta = s.mean - mean
        mean += delta * s.n / n_new
        m2 += s.var * s.n + delta * delta * n_total * s.n / n_new
        n_total = n_new
    if n_total == 0:
        return None
    return BaselineStats(mean=mean, var=m2 / n_total, n=n_total)


def warm_start(detector: Seedable, stats: Iterable[BaselineStats], max_n: int = 1000) -> bool:
    """Seed ``detector`` from pooled family statistics.

    Args:
        detector: Any detector with a ``seed(mean, var, n)`` method.
        stats: Statistics of finished runs of the same family and hardware.
        max_n: Cap on the count handed over so the new run can still adapt.

    Returns:
        True when the detector was seeded, False when there was nothing to seed from.

    """
    pooled = pool(stats)
    if pooled is None:
        return False
    detector.seed(pooled.mean, pooled.var, min(pooled.n, max_n))
    return True
