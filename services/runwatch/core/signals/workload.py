"""Workload-aware baselines and the level watches built on them.

* :class:`RunningStats` — Welford mean/variance with Chan's merge, JSON-able.
* :class:`Watch` — one indicator of one run: a baseline (learned over a warm-up
  or seeded from finished runs of the same experiment family and hardware),
  an exponentially weighted recent level, and a persistence counter. It fires
  when the recent level sits beyond the baseline by more than an effect-size
  bound for ``persist`` evaluations in a row. Because the baseline is frozen
  after warm-up, a slow creep (loader time lengthening over hours) shows as a
  growing gap — a trend, not only a spike.
* :func:`workload_key` / :func:`merge_finished` — baselines per workload, fed
  by the statistics of finished runs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

Direction = Literal["up", "down"]


@dataclass(slots=True)
class RunningStats:
    """Count, mean and sum of squared deviations (Welford)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        """Fold one finite value in."""
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def std(self) -> float:
        """Population standard deviation (0 with fewer than two values)."""
        return math.sqrt(self.m2 / self.n) if self.n >= 2 else 0.0

    def merge(self, other: RunningStats) -> RunningStats:
        """Return the statistics of both samples together (Chan et al.)."""
        n = self.n + other.n
        if n == 0:
            return RunningStats()
        d = other.mean - self.mean
        mean = self.mean + d * other.n / n
        m2 = self.m2 + other.m2 + d * d * self.n * other.n / n
        return RunningStats(n, mean, m2)

    def to_state(self) -> list[float]:
        """Return ``[n, mean, m2]``."""
        return [self.n, self.mean, self.m2]

    @classmethod
    def from_state(cls, state: list[float]) -> RunningStats:
        """Rebuild from :meth:`to_state` output."""
        return cls(int(state[0]), float(state[1]), float(state[2]))

    @staticmethod
    def added(state: list[float], x: float) -> list[float]:
        """Return ``from_state(state)``, :meth:`add` ``x``, ``to_state()`` (no object)."""
        n, mean, m2 = int(state[0]) + 1, float(state[1]), float(state[2])
        d = x - mean
        mean += d / n
        return [n, mean, m2 + d * (x - mean)]


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """How one indicator is watched.

    Attributes:
        direction: Which way is bad (``up``: larger is worse).
        warmup: Values learned before the baseline freezes.
        alpha: Weight of the newest value in the recent level.
        k: Bound in baseline standard deviations.
        min_effect: Smallest absolute gap that counts.
        rel_effect: Smallest gap relative to the baseline mean that counts.
        persist: Consecutive out-of-bound evaluations before firing.
        trend: Also run a trend detector (slow creep) on the indicator.
        adwin: Also run ADWIN (drift of the mean) on the indicator.
        settles: The run's first values may sit well on the bad side of where it
            settles: a level on the good side past :data:`SETTLED` of the baseline
            (below it for an ``up`` indicator, above ``1 / SETTLED`` of it for a
            ``down`` one) for ``warmup`` values in a row learns the baseline again
            (:meth:`Watch.update`).
        smoothed: ``k`` counts standard deviations of the recent level (the
            exponentially weighted mean: ``sqrt(alpha / (2 - alpha))`` of a single
            value's), not of single values (:meth:`Watch.bound`).

    """

    direction: Direction = "up"
    warmup: int = 20
    alpha: float = 0.1
    k: float = 4.0
    min_effect: float = 0.0
    rel_effect: float = 0.0
    persist: int = 5
    trend: bool = False
    adwin: bool = False
    settles: bool = False
    smoothed: bool = False


SETTLED = 0.8
"""A watch that ``settles`` learns its baseline again once its level held below this share
of it (an ``up`` watch; a ``down`` one: above its inverse) for ``warmup`` values: a
pre-training run's gradient norms fall from about 8 (fresh weights) to 0.3 over its first
thousand steps, and a baseline frozen on the first 30 set
the bound of a ten-fold explosion at 80: a later rise to 10 never paged. Learnt again each
time the level sits a fifth under it, the baseline ends at most a quarter above where the
norms settle, so the ten-fold bound means at most 12.5-fold there (learnt again at half,
a 12-fold rise 4,000 steps after the settling was missed)."""


WARMUP_OUTLIER_SIGMAS = 5.0
"""A warm-up value farther than this many robust standard deviations (1.4826 × the median
absolute deviation) from the warm-up's median is left out of the baseline it freezes."""


def robust_baseline(values: list[float]) -> RunningStats:
    """Return the statistics of a warm-up without its outliers, counted as all of it.

    A run's first loader batches wait while its workers start, its first step
    compiles: a few values far out in a short warm-up set the baseline's standard
    deviation so high that the watch's bound (``k`` of them) was never crossed, and
    a loader that later slowed threefold did not page. Values beyond
    :data:`WARMUP_OUTLIER_SIGMAS` robust standard deviations of the median are left
    out of the mean and the variance; the count stays the warm-up's.
    """
    med = statistics.median(values)
    scale = WARMUP_OUTLIER_SIGMAS * 1.4826 * statistics.median(abs(x - med) for x in values)
    kept = RunningStats()
    for x in values:
        if abs(x - med) <= scale:
            kept.add(x)
    return RunningStats(len(values), kept.mean, kept.m2 / kept.n * len(values))


@dataclass(slots=True)
class Watch:
    """The baseline, recent level and streak of one indicator of one run.

    ``warm`` holds the warm-up's values until the baseline freezes
    (:func:`robust_baseline`).
    """

    base: RunningStats
    level: float = math.nan
    streak: int = 0
    seeded: bool = False
    warm: list[float] = field(default_factory=list)
    low: int = 0  # values in a row with the level under SETTLED of the baseline

    def bound(self, spec: WatchSpec) -> float:
        """Return the gap the recent level must exceed.

        With ``spec.smoothed`` the ``k`` standard deviations are the recent level's: a
        run whose single steps scatter by 10 % (throughput) had a bound of 40 % below
        its level and a slowdown to two thirds never paged; the level (``alpha`` 0.1)
        scatters by a quarter as much.
        """
        std = self.base.std
        if spec.smoothed:
            std *= math.sqrt(spec.alpha / (2.0 - spec.alpha))
        return max(spec.k * std, spec.min_effect, spec.rel_effect * abs(self.base.mean))

    def update(self, x: float, spec: WatchSpec) -> tuple[bool, float]:
        """Fold ``x`` in and evaluate.

        Args:
            x: The indicator value (non-finite values are ignored).
            spec: How the indicator is watched.

        Returns:
            ``(firing, score)``: whether the level has been beyond the bound
            for ``persist`` evaluations, and ``gap / (2 * bound)`` clipped to [0, 1].

        """
        if not math.isfinite(x):
            return False, 0.0
        if self.base.n < spec.warmup and not self.seeded:
            self.base.add(x)
            self.warm.append(x)
            if self.base.n == spec.warmup:  # frozen now, without the warm-up's outliers
                if len(self.warm) == self.base.n:  # (not a state an older release wrote)
                    self.base = robust_baseline(self.warm)
                self.warm = []
            self.level = self.base.mean
            return False, 0.0
        if math.isnan(self.level):
            # a seeded watch starts its level at the workload's mean, its prior: started at
            # the run's first value, a slow first step or two (CUDA init, compilation, a
            # cold cache) held the level below the bound for steps after the run was at
            # its family's speed, and a healthy run paged a throughput fall
            self.level = self.base.mean if self.seeded else x
        self.level = (1 - spec.alpha) * self.level + spec.alpha * x
        sign = -1.0 if spec.direction == "down" else 1.0
        gap = sign * (self.level - self.base.mean)
        bound = self.bound(spec)
        # ``persist`` values in a row past the bound, with the level: the smoothed level
        # alone stayed out for steps after a three-batch transient (a loader's workers
        # starting again at each epoch) and paged; once firing, the level holds it
        out = gap > bound and (self.streak >= spec.persist
                               or sign * (x - self.base.mean) > bound)
        self.streak = self.streak + 1 if out else 0
        score = min(max(gap / (2 * bound), 0.0), 1.0) if bound > 0 else float(gap > 0)
        if spec.settles:
            better = (self.level < SETTLED * self.base.mean if sign > 0
                      else self.level * SETTLED > self.base.mean)
            self.low = self.low + 1 if better else 0
            if self.low >= spec.warmup:  # settled well below: learn where it is now
                # a seeded watch too: its family's mean holds the high norms every run
                # starts with, and a 15-fold explosion in a family's second run, its
                # norms settled at 0.3 against a seed of 0.59, never paged
                self.base, self.level, self.streak, self.low = RunningStats(), math.nan, 0, 0
                self.seeded = False
        return self.streak >= spec.persist, score

    def to_state(self) -> dict[str, Any]:
        """Return the watch as a JSON-able dict."""
        out = {"b": self.base.to_state(), "l": self.level, "s": self.streak, "w": self.seeded}
        if self.warm:
            out["v"] = self.warm
        if self.low:
            out["d"] = self.low
        return out

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Watch:
        """Rebuild from :meth:`to_state` output."""
        return cls(RunningStats.from_state(state["b"]), float(state["l"]), int(state["s"]),
                   bool(state["w"]), [float(x) for x in state.get("v", ())],
                   int(state.get("d", 0)))


def workload_key(experiment_family: str | None, gpu_model: str | None, gpu_count: int) -> str:
    """Return the key runs share a baseline under: family, GPU model and GPU count.

    Args:
        experiment_family: Experiment family (``None`` → ``-``).
        gpu_model: GPU model (``None`` → ``-``).
        gpu_count: GPUs the run uses.

    Returns:
        ``family|model|count``.

    """
    return f"{experiment_family or '-'}|{gpu_model or '-'}|{gpu_count}"


def merge_finished(baseline: dict[str, list[float]], finished: dict[str, list[float]],
                   max_n: int = 10_000) -> dict[str, list[float]]:
    """Merge a finished run's indicator statistics into a workload baseline.

    Counts are capped at ``max_n`` (scaling ``m2`` along) so the baseline keeps
    following the workload as it changes.

    Args:
        baseline: Indicator → ``[n, mean, m2]`` of the workload so far.
        finished: Indicator → ``[n, mean, m2]`` of the finished run.
        max_n: Cap on the effective count.

    Returns:
        The merged baseline (a new dict).

    """
    out = dict(baseline)
    for name, st in finished.items():
        merged = RunningStats.from_state(baseline.get(name, [0, 0.0, 0.0])).merge(
            RunningStats.from_state(st)
        )
        if merged.n > max_n:
            merged = RunningStats(max_n, merged.mean, merged.m2 * max_n / merged.n)
        out[name] = merged.to_state()
    return out


def seeded_watch(baseline: dict[str, list[float]], indicator: str, min_n: int) -> Watch:
    """Return a watch for ``indicator``, warm-started from the workload baseline when it has enough.

    Args:
        baseline: Indicator → ``[n, mean, m2]`` of finished runs of the workload.
        indicator: The indicator.
        min_n: Least count for the baseline to be trusted.

    Returns:
        A seeded watch (no warm-up needed), or a cold one.

    """
    st = baseline.get(indicator)
    if st is not None and st[0] >= min_n:
        return Watch(RunningStats.from_state(st), seeded=True)
    return Watch(RunningStats())
